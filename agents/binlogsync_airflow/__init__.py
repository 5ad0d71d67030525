"""binlogsync for Apache Airflow, written as Airflow's own providers are: a hook (connection
type `binlogsync`), operators, a sensor, and the UI page (binlogsync_plugin.py registers it).

Everything here is a thin face over the `binlogsync` library (`binlogsync.ops`): an operator
stores its arguments, builds the hook in `execute()`, and calls one library function.

    hooks.py      BinlogsyncHook: the hub's admin socket, the site's databases, the state folder
    operators.py  retention, outbox, reconcile (plan, Spark, result), paper timing
    sensors.py    TargetCaughtUpSensor (and its trigger, for deferrable mode)
    ui.py         the FastAPI app behind the "binlogsync" page
"""
