"""binlogsync reconciliation as a Spark application.

    spark-submit [--master URL] spark_jobs/reconcile_job.py \
        --source mysql://user@db1:3306 --target mysql://user@db2:3306 \
        --tables shop.orders,shop.items --out /data/reconcile/2024-06-01

The options are those of `binlogsync reconcile` (docs/reconcile.md). All logic lives in the
`binlogsync` package, which the driver and every executor import: install it on the cluster's
Python (`pip install 'binlogsync[spark]'`), or ship it with `--py-files binlogsync.zip` (`cd
agents && zip -r ../binlogsync.zip binlogsync`, with PyMySQL's pure-Python package added to the
same zip). Exit code: 0 equal, 1 differences, 2 error.

Several jobs in one Spark application (what the reconcile DAG submits: one application per DAG
run, however many origins): each job's options as a JSON list, one `--job` each; they run one
after the other, each reporting into its own --out; the exit code is the worst of them.

    spark-submit spark_jobs/reconcile_job.py \
        --job '["--source", "mysql://…", "--target", "mysql://…", "--tables", "shop.*", "--out", "/r/a"]' \
        --job '["--source", "mysql://…", "--target", "mysql://…", "--tables", "crm.*", "--out", "/r/b"]'
"""

import sys

from binlogsync.reconcile.options import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
