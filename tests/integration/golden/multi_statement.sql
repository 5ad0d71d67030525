-- Several statements on two tables in one transaction; then two autocommit statements.
CREATE TABLE t (id INT PRIMARY KEY, name VARCHAR(20));
CREATE TABLE u (k VARCHAR(10) PRIMARY KEY, qty INT NOT NULL);
-- capture
BEGIN;
INSERT INTO t VALUES (1, 'a'), (2, 'b');
INSERT INTO u VALUES ('x', 10);
UPDATE u SET qty = qty - 1 WHERE k = 'x';
INSERT INTO t VALUES (3, NULL);
COMMIT;
INSERT INTO u VALUES ('y', 0);
DELETE FROM t WHERE id = 3;
