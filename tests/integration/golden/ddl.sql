-- DDL travels as text for routed tables (never executed by binlogsync); others are empty.
-- tables: shop.t, shop.t2, shop.odd name
CREATE TABLE other (id INT PRIMARY KEY);
-- capture
CREATE TABLE t (id INT PRIMARY KEY, name VARCHAR(20));
ALTER TABLE t ADD COLUMN note TEXT AFTER name;
INSERT INTO t VALUES (1, 'a', 'n');
CREATE INDEX by_name ON t (name);
ALTER TABLE other ADD COLUMN x INT;
RENAME TABLE t TO t2;
/* leading comment */ CREATE TABLE `odd name` (`a b` INT PRIMARY KEY);
INSERT INTO `odd name` VALUES (7);
DROP TABLE t2, other;
