-- One autocommit INSERT of one row.
CREATE TABLE t (id INT PRIMARY KEY, name VARCHAR(20), price DECIMAL(8,2), seen DATETIME(6));
-- capture
INSERT INTO t VALUES (1, 'apple', 1.50, '2024-03-01 12:00:00.250000');
