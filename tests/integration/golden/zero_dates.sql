-- Zero and partial dates and the zero TIMESTAMP (sql_mode '' on the origin), invalid dates
-- (ALLOW_INVALID_DATES), a zero date in the primary key, and updates to and from them: each
-- captured as the server's text, with its column's kind and fraction digits.
CREATE TABLE t (d DATE NOT NULL, n INT NOT NULL, dt0 DATETIME, dt6 DATETIME(6), ts0 TIMESTAMP NULL, ts3 TIMESTAMP(3) NULL, PRIMARY KEY (d, n));
-- capture
SET SESSION sql_mode = '';
INSERT INTO t VALUES ('0000-00-00', 1, '0000-00-00 00:00:00', '0000-00-00 00:00:00', '0000-00-00 00:00:00', '0000-00-00 00:00:00');
INSERT INTO t VALUES ('2024-00-10', 2, '2024-05-00 10:11:12', '2024-00-00 23:59:59.999999', NULL, '2024-03-01 12:00:00.125');
INSERT INTO t VALUES ('0000-01-01', 3, '2024-03-01 00:00:00', '0000-00-00 00:00:00.000001', '1970-01-01 05:30:01', NULL);
UPDATE t SET dt0 = '2024-01-31 00:00:00', ts0 = '0000-00-00 00:00:00' WHERE n = 2;
UPDATE t SET d = '2024-05-00' WHERE n = 1;
SET SESSION sql_mode = 'ALLOW_INVALID_DATES';
INSERT INTO t VALUES ('2004-04-31', 4, '2004-02-30 01:02:03', '2003-02-29 00:00:00.5', NULL, NULL);
DELETE FROM t WHERE n IN (1, 4);
