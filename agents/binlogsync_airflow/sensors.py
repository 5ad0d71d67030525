"""TargetCaughtUpSensor: wait until a target (or each of several) has applied everything the
hub holds for it."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from airflow.exceptions import AirflowException
from airflow.sdk import BaseSensorOperator

from binlogsync.ops.site import all_caught_up

from .hooks import BinlogsyncHook
from .triggers import TargetCaughtUpTrigger


class TargetCaughtUpSensor(BaseSensorOperator):
    """Succeeds when `target` (a name, or a list of names: each of them) has no more than
    `max_backlog` transactions left to apply from `origin` (None: from every origin), and is
    neither blocked nor detached. Each poke asks the hub once. `deferrable=True` hands the wait to the triggerer (no worker slot held);
    otherwise `mode="reschedule"` frees the slot between pokes."""

    template_fields: Sequence[str] = ("target", "origin", "max_backlog")

    def __init__(
        self,
        *,
        target: str | Sequence[str],
        origin: str | None = None,
        max_backlog: int = 0,
        deferrable: bool = False,
        binlogsync_conn_id: str = BinlogsyncHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.target = target
        self.origin = origin
        self.max_backlog = max_backlog
        self.deferrable = deferrable
        self.binlogsync_conn_id = binlogsync_conn_id

    def poke(self, context: Any) -> bool:
        status = BinlogsyncHook(self.binlogsync_conn_id).status()
        done, why = all_caught_up(status, self.target, self.origin or None, int(self.max_backlog))
        self.log.info("%s", why)
        return done

    def execute(self, context: Any) -> Any:
        if not self.deferrable or self.poke(context):
            return super().execute(context) if not self.deferrable else None
        admin = BinlogsyncHook(self.binlogsync_conn_id).admin_config()
        tables: dict[str, Any] = {"admin": {"hub": admin.hub, "name": admin.name}}
        if admin.security.enabled:
            tables["security"] = {
                "secret_key_file": str(admin.security.secret_key_file),
                "hub_public_key_file": str(admin.security.hub_public_key_file),
            }
        self.defer(
            trigger=TargetCaughtUpTrigger(
                tables, self.target, self.origin or None, int(self.max_backlog),
                float(self.poke_interval),
            ),
            method_name="execute_complete",
            timeout=dt.timedelta(seconds=float(self.timeout)),
        )  # fmt: skip

    def execute_complete(self, context: Any, event: dict[str, Any] | None = None) -> None:
        if not event or event.get("status") != "caught_up":
            raise AirflowException(f"{self.target} did not catch up: {event}")
        self.log.info("%s", event.get("message"))


def wait_for_job(job: dict[str, Any]) -> dict[str, Any]:
    """A reconcile job (ReconcilePlanOperator's output) as TargetCaughtUpSensor's arguments:
    every target it compares, from its origin (the reconcile DAG maps the sensor with it)."""
    return {"target": list(job["targets"]), "origin": job["origin"]}
