"""TargetCaughtUpSensor: wait until a target has applied everything the hub holds for it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseSensorOperator

from binlogsync.ops.site import caught_up

from .hooks import BinlogsyncHook


class TargetCaughtUpSensor(BaseSensorOperator):
    """Succeeds when `target` has no more than `max_backlog` transactions left to apply from
    `origin` (None: from every origin), and is neither blocked nor detached. Each poke asks
    the hub once; `mode="reschedule"` frees the worker slot between pokes."""

    template_fields: Sequence[str] = ("target", "origin", "max_backlog")

    def __init__(
        self,
        *,
        target: str,
        origin: str | None = None,
        max_backlog: int = 0,
        binlogsync_conn_id: str = BinlogsyncHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.target = target
        self.origin = origin
        self.max_backlog = max_backlog
        self.binlogsync_conn_id = binlogsync_conn_id

    def poke(self, context: Any) -> bool:
        status = BinlogsyncHook(self.binlogsync_conn_id).status()
        done, why = caught_up(status, self.target, self.origin or None, int(self.max_backlog))
        self.log.info("%s: %s", self.target, why)
        return done
