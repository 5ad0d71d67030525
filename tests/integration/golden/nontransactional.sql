-- A MyISAM table has no transactions: MariaDB ends its groups with a Query COMMIT, not an XID.
CREATE TABLE m (id INT PRIMARY KEY, name VARCHAR(20)) ENGINE=MyISAM;
-- capture
INSERT INTO m VALUES (1, 'a'), (2, 'b');
UPDATE m SET name = 'c' WHERE id = 2;
DELETE FROM m WHERE id = 1;
