-- Rolled-back work never appears; the transaction after it does.
CREATE TABLE t (id INT PRIMARY KEY, name VARCHAR(20));
INSERT INTO t VALUES (1, 'a');
-- capture
BEGIN;
INSERT INTO t VALUES (2, 'rolled back');
UPDATE t SET name = 'rolled back' WHERE id = 1;
ROLLBACK;
BEGIN;
SAVEPOINT s1;
INSERT INTO t VALUES (3, 'undone');
ROLLBACK TO SAVEPOINT s1;
INSERT INTO t VALUES (4, 'kept');
COMMIT;
