-- A rolled-back transaction that also wrote a MyISAM table: the MyISAM rows stay on the
-- origin, and MariaDB logs them as their own committed group; the InnoDB rows never appear.
CREATE TABLE i (id INT PRIMARY KEY);
CREATE TABLE m (id INT PRIMARY KEY) ENGINE=MyISAM;
-- capture
BEGIN;
INSERT INTO i VALUES (1);
INSERT INTO m VALUES (1);
ROLLBACK;
BEGIN;
INSERT INTO m VALUES (2);
INSERT INTO i VALUES (2);
ROLLBACK;
