"""Lifecycle work that the CLI and (later) the Airflow DAGs both call."""
