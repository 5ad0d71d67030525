-- Only shop.kept is routed: other tables' transactions come through empty, so the position
-- still advances; a transaction touching both keeps only the routed change.
-- tables: shop.kept
CREATE TABLE kept (id INT PRIMARY KEY);
CREATE TABLE skipped (id INT PRIMARY KEY);
-- capture
INSERT INTO skipped VALUES (1);
BEGIN;
INSERT INTO skipped VALUES (2);
INSERT INTO kept VALUES (2);
COMMIT;
UPDATE skipped SET id = 3 WHERE id = 2;
