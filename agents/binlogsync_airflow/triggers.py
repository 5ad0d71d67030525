"""TargetCaughtUpTrigger: the deferrable half of TargetCaughtUpSensor, run by Airflow's
triggerer. It carries the hub's address and key file paths (never a key, never a password),
so the triggerer needs no connection lookup; the status request runs in a thread, off the
triggerer's event loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from binlogsync.config import admin_from_mapping
from binlogsync.errors import BinlogsyncError
from binlogsync.hubcommands import fetch_status
from binlogsync.ops.site import all_caught_up


class TargetCaughtUpTrigger(BaseTrigger):
    def __init__(
        self,
        admin: dict[str, Any],
        target: str | list[str],
        origin: str | None,
        max_backlog: int,
        poke_interval: float,
    ) -> None:
        super().__init__()
        self.admin = admin  # the [admin] and [security] tables, as admin_from_mapping reads
        self.target = target
        self.origin = origin
        self.max_backlog = max_backlog
        self.poke_interval = poke_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "admin": self.admin,
                "target": self.target,
                "origin": self.origin,
                "max_backlog": self.max_backlog,
                "poke_interval": self.poke_interval,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        access = admin_from_mapping(self.admin, Path("/"))
        why = ""
        while True:
            try:
                status = await asyncio.to_thread(fetch_status, access, 10.0)
            except BinlogsyncError as exc:  # a hub that is down now may answer later
                why = f"the hub did not answer: {exc}"
            else:
                done, why = all_caught_up(status, self.target, self.origin, self.max_backlog)
                if done:
                    yield TriggerEvent({"status": "caught_up", "message": why})
                    return
            self.log.info("%s", why)
            await asyncio.sleep(self.poke_interval)
