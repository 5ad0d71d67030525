-- The scratch table of the paper_timing DAG (binlogsync.ops.timing.run_site), made on the
-- origin and on each MariaDB target at their first start; routed from the origin to target1
-- and target2 only (config/hub.toml). The DAG writes it on the origin as binlogsync and waits
-- for the targets to hold the same rows; it is empty between runs.
CREATE DATABASE IF NOT EXISTS binlogsync_timing;
CREATE TABLE IF NOT EXISTS binlogsync_timing.t (
    id INT PRIMARY KEY,
    v VARCHAR(40) NOT NULL
);
GRANT SELECT, INSERT, UPDATE, DELETE ON binlogsync_timing.* TO 'binlogsync'@'%';
