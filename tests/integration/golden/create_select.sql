-- CREATE TABLE … SELECT is one transaction: the DDL text, then the copied rows.
CREATE TABLE src (id INT PRIMARY KEY, name VARCHAR(20));
INSERT INTO src VALUES (1, 'a'), (2, 'b');
-- capture
CREATE TABLE copy (PRIMARY KEY (id)) SELECT id, name FROM src WHERE id > 1;
