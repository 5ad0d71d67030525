-- TRUNCATE with and without the TABLE keyword, and on a table outside the filter.
-- tables: shop.t, shop.u
CREATE TABLE t (id INT PRIMARY KEY);
CREATE TABLE u (id INT PRIMARY KEY);
CREATE TABLE other (id INT PRIMARY KEY);
INSERT INTO t VALUES (1), (2);
-- capture
TRUNCATE TABLE t;
TRUNCATE u;
TRUNCATE other;
INSERT INTO t VALUES (3);
