"""binlogsync's Airflow provider, written as Airflow's own providers are, installed with the
binlogsync wheel (`pip install 'binlogsync[airflow]'`; docs/airflow.md): a hook (connection
type `binlogsync`), operators, a sensor and its trigger, the DAGs as a DAG bundle, and the UI
page.

Everything here is a thin face over the `binlogsync` library (`binlogsync.ops`): an operator
stores its arguments, builds the hook in `execute()`, and calls one library function.

    provider.py   get_provider_info: what Airflow reads through the apache_airflow_provider
                  entry point (without importing Airflow)
    hooks.py      BinlogsyncHook: the hub's admin socket, the site's databases, the state folder
    operators.py  retention, outbox, reconcile (plan, Spark, result), paper timing
    sensors.py    TargetCaughtUpSensor (triggers.py: its deferrable half)
    bundle.py     BinlogsyncDagBundle: the DAGs in dags/, where Airflow finds them installed
    plugin.py     the page's registration (the airflow.plugins entry point); ui.py its app
    dags/         binlog_retention, outbox_retries, reconcile, paper_timing
    spark_jobs/   reconcile_job.py, the application the reconcile DAG submits
"""
