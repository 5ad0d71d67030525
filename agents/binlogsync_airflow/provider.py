"""What Airflow learns about this provider without importing it: the `apache_airflow_provider`
entry point of the binlogsync distribution names `get_provider_info`, and Airflow's
ProvidersManager reads the map (the connection type and its form, hooks, operators, sensors,
triggers, the DAG bundle). This module imports nothing of Airflow, so an agent-only install
that carries the entry point never needs it.

The UI plugin (plugin.py) is the `airflow.plugins` entry point and deliberately not listed
here: Airflow 3.3 loads entry-point plugins always, provider-listed ones only with
`[core] lazy_discover_providers = False`, and with that setting a plugin found both ways is
reported as a plugin import error ("already registered") on every page.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

INTEGRATION = "binlogsync"
CONNECTION_TYPE = "binlogsync"


def _version() -> str:
    try:
        return version("binlogsync")
    except PackageNotFoundError:  # run from a checkout without installing
        return "0"


def get_provider_info() -> dict[str, Any]:
    modules = "binlogsync_airflow."
    return {
        "package-name": "binlogsync",
        "name": "binlogsync",
        "description": "binlogsync for Apache Airflow: the hub connection, the lifecycle "
        "operators (binlog retention, outbox, reconciliation on Spark, paper timing), "
        "TargetCaughtUpSensor and its trigger, the DAGs as a DAG bundle, and the binlogsync "
        "page (an airflow.plugins entry point).",
        "versions": [_version()],
        "integrations": [
            {
                "integration-name": INTEGRATION,
                "external-doc-url": "https://github.com/binlogsync/binlogsync/blob/main/docs/airflow.md",
                "tags": ["software"],
            }
        ],
        "hooks": [{"integration-name": INTEGRATION, "python-modules": [modules + "hooks"]}],
        "operators": [{"integration-name": INTEGRATION, "python-modules": [modules + "operators"]}],
        "sensors": [{"integration-name": INTEGRATION, "python-modules": [modules + "sensors"]}],
        "triggers": [{"integration-name": INTEGRATION, "python-modules": [modules + "triggers"]}],
        "bundles": [{"integration-name": INTEGRATION, "python-modules": [modules + "bundle"]}],
        "connection-types": [
            {
                "connection-type": CONNECTION_TYPE,
                "hook-class-name": modules + "hooks.BinlogsyncHook",
                "hook-name": "binlogsync hub",
                # Airflow >= 3.2 builds the connection form from these without importing the
                # hook; 3.1 asks the hook (BinlogsyncHook.get_ui_field_behaviour).
                "ui-field-behaviour": {
                    "hidden-fields": ["schema", "login", "password", "extra"],
                    "relabeling": {"host": "Hub host", "port": "Hub port"},
                    "placeholders": {"host": "hub.example", "port": "5555"},
                },
                "conn-fields": CONN_FIELDS,
            }
        ],
    }


# The connection's extra keys (BinlogsyncHook reads them), as the form's fields.
CONN_FIELDS: dict[str, Any] = {
    "secret_key_file": {
        "label": "Secret key file",
        "description": "This Airflow's CURVE secret key (NAME.key_secret, made by `binlogsync "
        "keys`), a path on every Airflow machine. Its public NAME.key goes into the hub's "
        "admin_keys_dir. Empty: the hub runs without CURVE.",
        "schema": {"type": ["string", "null"]},
    },
    "hub_public_key_file": {
        "label": "Hub public key file",
        "description": "The hub's public key (hub.key), a path on every Airflow machine.",
        "schema": {"type": ["string", "null"]},
    },
    "name": {
        "label": "Admin name",
        "description": "This tool's name in the hub's log (letters, digits, - _ .).",
        "schema": {"type": ["string", "null"], "default": "airflow"},
    },
}
