-- A multi-row DELETE, a single-row DELETE, a DELETE that matches nothing (MariaDB writes
-- nothing to the binlog for it).
CREATE TABLE t (id INT PRIMARY KEY, name VARCHAR(20));
INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd');
-- capture
DELETE FROM t WHERE id IN (1, 3);
DELETE FROM t WHERE name = 'd';
DELETE FROM t WHERE id = 99;
