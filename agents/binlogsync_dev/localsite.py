"""A whole site on one machine: config files for a hub, an origin agent and target agents over
sandbox servers, and the agents run as child processes.

The demo, the paper benchmark and the end-to-end tests all use it, so they exercise the same
`binlogsync server` / `binlogsync client` programs a user runs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from binlogsync.errors import BinlogsyncError
from binlogsync.transport.curve import make_keys

from .sandbox import Server


@dataclass
class Agent:
    name: str
    config: Path
    kind: str  # "server" or "client"
    log: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        if self.running:
            return
        handle = self.log.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "binlogsync.cli", self.kind, "--config", str(self.config)],
            stdin=subprocess.DEVNULL,
            stdout=handle,
            stderr=handle,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        handle.close()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM and wait (SIGKILL after `timeout`)."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        code = self.process.returncode
        self.process = None
        return code

    def kill(self) -> None:
        """kill -9: the crash the design must survive."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.process = None


@dataclass
class LocalSite:
    """A hub and client agents over sandbox servers. The hub binds a port the OS chooses
    (`tcp://127.0.0.1:*`) the first time it starts; the client configs are written once its
    endpoint is known, and the hub config keeps that port for restarts. Give `hub_port` to
    start clients before the hub."""

    root: Path
    origin: Server
    targets: list[Server]
    tables: tuple[str, ...] = ("*.*",)
    curve: bool = False
    heartbeat: float = 0.5
    hub_port: int | None = None
    agents: dict[str, Agent] = field(default_factory=dict)
    origin_extra: str = ""  # more [origin] lines, e.g. "part_rows = 1000"
    target_extra: str = ""  # more [target] lines, e.g. 'apply_schema_changes = "all"'
    agent_extra: dict[str, str] = field(default_factory=dict)  # name → more [hub]/[client] lines
    # name → the whole [target] table, for a target that is not a MariaDB server (an audit
    # log); its Server entry then only names the host.
    target_sections: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        names = ["hub", "origin", *[t.name for t in self.targets]]
        self.keys = self.root / "keys"
        if self.curve:
            authorized = self.keys / "authorized"
            authorized.mkdir(parents=True, exist_ok=True)
            for name in names:
                public, _secret = make_keys(self.keys, name, force=True)
                if name != "hub":
                    (authorized / public.name).write_bytes(public.read_bytes())
        (self.root / "hub-data" / "endpoint").unlink(missing_ok=True)  # from an earlier run
        self._write_hub()
        self._add("origin", "client", "")
        for target in self.targets:
            self._add(target.name, "client", "")
        if self.hub_port is not None:
            self._write_clients()

    @property
    def endpoint(self) -> str:
        if self.hub_port is None:
            raise RuntimeError("the hub has not chosen its port yet: start it first")
        return f"tcp://127.0.0.1:{self.hub_port}"

    def _write_clients(self) -> None:
        self._write_client("origin", self._origin_section())
        for target in self.targets:
            self._write_client(target.name, self._target_section(target))

    def _security(self, name: str, hub: bool) -> str:
        keys = self.keys
        if not self.curve:
            return ""
        peer = (
            f'authorized_keys_dir = "{keys / "authorized"}"'
            if hub
            else (f'hub_public_key_file = "{keys / "hub.key"}"')
        )
        return f'\n[security]\nsecret_key_file = "{keys / (name + ".key_secret")}"\n{peer}\n'

    def _write_hub(self) -> None:
        tables = ", ".join(f'"{t}"' for t in self.tables)
        targets = ", ".join(f'"{t.name}"' for t in self.targets)
        port = "*" if self.hub_port is None else self.hub_port
        text = (
            f'[hub]\nname = "hub"\nbind = "tcp://127.0.0.1:{port}"\n'
            f'data_dir = "{self.root / "hub-data"}"\n'
            f"heartbeat_interval = {self.heartbeat}\ncompact_interval = 2.0\n"
            f"{self.agent_extra.get('hub', '')}\n"
            f'\n[[route]]\norigin = "origin"\ntables = [{tables}]\ntargets = [{targets}]\n'
            + self._security("hub", hub=True)
        )
        if "hub" in self.agents:
            self.agents["hub"].config.write_text(text)
        else:
            self._add("hub", "server", text)

    def _origin_section(self) -> str:
        tables = ", ".join(f'"{t}"' for t in self.tables)
        return (
            f'\n[origin]\nhost = "127.0.0.1"\nport = {self.origin.port}\nuser = "root"\n'
            f"server_id = {1000 + self.origin.server_id}\ntables = [{tables}]\n"
            f'start = "current"\n{self.origin_extra}\n'
        )

    def _target_section(self, target: Server) -> str:
        if target.name in self.target_sections:
            return "\n" + self.target_sections[target.name] + "\n"
        return (
            f'\n[target]\nhost = "127.0.0.1"\nport = {target.port}\nuser = "root"\n'
            f"{self.target_extra}\n"
        )

    def _write_client(self, name: str, roles: str) -> None:
        text = (
            f'[client]\nname = "{name}"\nhub = "{self.endpoint}"\n'
            f"heartbeat_interval = {self.heartbeat}\n{self.agent_extra.get(name, '')}\n"
            + roles
            + self._security(name, False)
        )
        self.agents[name].config.write_text(text)

    def pid(self, name: str) -> int:
        """The running agent's process id."""
        process = self.agents[name].process
        assert process is not None, f"{name} is not running"
        return int(process.pid)

    def peak_rss_mb(self, name: str) -> float:
        """The agent process's peak resident memory so far (Linux VmHWM), in MiB."""
        for line in Path(f"/proc/{self.pid(name)}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError("no VmHWM in /proc (not Linux?)")

    def reset_peak_rss(self, name: str) -> None:
        """Start the agent's peak resident memory over from its current size (clear_refs 5)."""
        process = self.agents[name].process
        assert process is not None, f"{name} is not running"
        Path(f"/proc/{process.pid}/clear_refs").write_text("5")

    def _add(self, name: str, kind: str, text: str) -> None:
        config = self.root / f"{name}.toml"
        if text:
            config.write_text(text)
        self.agents[name] = Agent(name, config, kind, self.root / f"{name}.log")

    # -- running ---------------------------------------------------------------------------
    def start(self, *names: str) -> None:
        if self.hub_port is None:
            self._learn_port()  # whatever is started, the hub's endpoint must be known
        for name in names or self.agents:
            self.agents[name].start()

    def _learn_port(self) -> None:
        """Start the hub once to learn the port the OS gave it, then write the configs."""
        hub = self.agents["hub"]
        hub.start()
        found = self.root / "hub-data" / "endpoint"
        try:
            wait_until(
                lambda: found.exists() or not hub.running, 30, 0.01, "the hub's endpoint file"
            )
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}\n{self.logs()}") from None
        if not found.exists():
            raise RuntimeError(f"the hub did not start:\n{self.logs()}")
        self.hub_port = int(found.read_text().strip().rsplit(":", 1)[1])
        self._write_hub()
        self._write_clients()

    def wait_online(self, timeout: float = 30.0) -> None:
        """Wait until the hub sees every agent online (and so the origin is registered)."""
        from binlogsync.hubcommands import fetch_status as fetch

        def online() -> bool:
            try:
                status = fetch(str(self.agents["hub"].config), timeout=1)
            except BinlogsyncError:
                return False
            return all(h["online"] for h in status["hosts"]) and all(
                o["head"] for o in status["origins"]
            )

        try:
            wait_until(online, timeout, 0.05, "all agents online")
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}\n{self.logs()}") from None

    def stop(self, *names: str) -> None:
        for name in names or reversed(list(self.agents)):
            self.agents[name].stop()

    def kill(self, name: str) -> None:
        self.agents[name].kill()

    def __enter__(self) -> LocalSite:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def logs(self) -> str:
        return "\n".join(
            f"--- {a.name} ---\n" + (a.log.read_text()[-4000:] if a.log.exists() else "")
            for a in self.agents.values()
        )


def wait_until(predicate, timeout: float, interval: float = 0.01, what: str = "condition"):  # type: ignore[no-untyped-def]
    """Poll `predicate` until it returns a truthy value or `timeout` passes."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not reached within {timeout} s")
        time.sleep(interval)
