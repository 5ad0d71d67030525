"""Lifecycle jobs, one module per job, usable without Airflow (the DAGs and the CLI are thin
faces over them): `outbox.py` (who is offline, what waits, what is stuck), `retention.py`
(binlog purges that keep what anything still needs)."""
