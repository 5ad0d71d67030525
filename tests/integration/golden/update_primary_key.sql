-- An UPDATE that changes the primary key, one that does not, and one that matches no row
-- (MariaDB writes nothing to the binlog for it).
CREATE TABLE t (id INT PRIMARY KEY, name VARCHAR(20), n INT);
INSERT INTO t VALUES (1, 'a', 0), (2, 'b', 0), (3, 'c', 0);
-- capture
UPDATE t SET id = id + 10 WHERE id <= 2;
UPDATE t SET n = n + 1, name = CONCAT(name, '!') WHERE id = 3;
UPDATE t SET n = 5 WHERE id = 99;
