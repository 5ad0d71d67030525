"""The queries replicas and CDC clients send when they connect, and nothing else.

Statement text from the network is never executed: it is matched against the closed set of
forms below and answered from what the service knows. Everything else gets a MySQL error
that says what the service is for.

    SET @user_var = value [, ...]       kept in the session: @master_binlog_checksum,
                                        @master_heartbeat_period, @mariadb_slave_capability,
                                        @slave_connect_state, @slave_gtid_strict_mode, …
    SET [SESSION] var = value, SET NAMES, SET AUTOCOMMIT …   accepted, no effect
    SELECT item [, item …] [FROM DUAL] [LIMIT n]             items: @@[global.|session.]var,
                                        @user_var, UNIX_TIMESTAMP(), VERSION(), USER(),
                                        DATABASE(), CONNECTION_ID(), NOW(), literals
    SHOW [GLOBAL|SESSION] VARIABLES [LIKE 'pattern' | WHERE Variable_name = / IN …]
    SHOW BINARY LOGS | MASTER LOGS, SHOW MASTER STATUS | BINARY LOG STATUS,
    SHOW SLAVE HOSTS | REPLICA HOSTS, SHOW WARNINGS, USE db, BEGIN/COMMIT/ROLLBACK
"""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, Protocol

from .packets import ER_NOT_SUPPORTED, ER_PARSE, Connection

MAX_USER_VARS = 64
MAX_VALUE = 4096


class Facts(Protocol):
    """What the answers come from (the session: the service's state as of now)."""

    def variables(self) -> Mapping[str, object]: ...
    def binary_logs(self) -> list[tuple[str, int]]: ...
    def master_status(self) -> tuple[str, int]: ...
    def slave_hosts(self) -> list[tuple[int, str, int, int]]: ...


@dataclass
class SessionVars:
    user: str
    address: str
    connection_id: int
    database: str = ""
    user_vars: dict[str, object] = field(default_factory=dict)


class QueryRefused(Exception):
    def __init__(self, error: tuple[int, str], message: str) -> None:
        super().__init__(message)
        self.error, self.message = error, message


_COMMENT = re.compile(r"^\s*/\*(?!!).*?\*/", re.S)
_WS = re.compile(r"\s+")
_SET = re.compile(r"^set\s+(.+)$", re.I | re.S)
_SELECT = re.compile(r"^select\s+(.+?)(?:\s+from\s+dual)?(?:\s+limit\s+\d+)?$", re.I | re.S)
_SHOW_VARIABLES = re.compile(
    r"^show\s+(?:(global|session|local)\s+)?variables(?:\s+(like|where)\s+(.+))?$", re.I | re.S
)
_SHOW_STATUS = re.compile(r"^show\s+(?:(?:global|session)\s+)?status(?:\s+like\s+(.+))?$", re.I)
_IDENT = r"[A-Za-z_][A-Za-z0-9_$]*"
_ASSIGN = re.compile(
    rf"^(?:(@@)?(?:(global|session|local|persist)(?:\.|\s+))?|@)({_IDENT})\s*(?::=|=)\s*(.+)$",
    re.I | re.S,
)
_USER_ASSIGN = re.compile(rf"^@(`?)({_IDENT})\1\s*(?::=|=)\s*(.+)$", re.S)
_STRING = re.compile(r"""^(?:'((?:[^'\\]|\\.|'')*)'|"((?:[^"\\]|\\.|"")*)")$""", re.S)
_NUMBER = re.compile(r"^[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?$", re.I)
_SYSVAR = re.compile(rf"^@@(?:(global|session|local)\.)?({_IDENT})$", re.I)
_USERVAR = re.compile(rf"^@({_IDENT})$")
_FUNCTION = re.compile(rf"^({_IDENT})\s*\(\s*\)$")
_ALIAS = re.compile(rf"^(.+?)\s+(?:as\s+)?(`[^`]+`|{_IDENT}|'[^']*')$", re.I | re.S)


def normalize(text: str) -> str:
    while True:
        stripped = _COMMENT.sub("", text, count=1)
        if stripped == text:
            break
        text = stripped
    return text.strip().rstrip(";").strip()


def answer(conn: Connection, text: str, session: SessionVars, facts: Facts) -> None:
    """Answer one COM_QUERY (an OK, a result set, or an error packet)."""
    try:
        _answer(conn, normalize(text), session, facts)
    except QueryRefused as exc:
        conn.error(exc.error, exc.message)


def _refuse(text: str) -> QueryRefused:
    return QueryRefused(
        ER_NOT_SUPPORTED,
        f"the binlogsync binlog service answers only what replication clients ask when they "
        f"connect, and not: {text[:120]} (docs/binlog-service.md)",
    )


def _answer(conn: Connection, text: str, session: SessionVars, facts: Facts) -> None:
    lowered = _WS.sub(" ", text.lower())
    if not lowered:
        raise QueryRefused(ER_PARSE, "Query was empty")
    if lowered in ("begin", "commit", "rollback", "start transaction") or lowered.startswith(
        "use "
    ):
        if lowered.startswith("use "):
            session.database = text[4:].strip().strip("`")[:64]
        conn.ok()
        return
    found = _SET.match(text)
    if found:
        _set(found.group(1), session, facts)
        conn.ok()
        return
    found = _SELECT.match(text)
    if found:
        columns, values = [], []
        for item in _split(found.group(1)):
            name, value = _select_item(item, session, facts)
            columns.append(name)
            values.append(value)
        conn.result(columns, [values])
        return
    found = _SHOW_VARIABLES.match(text)
    if found:
        conn.result(["Variable_name", "Value"], _show_variables(found, facts))
        return
    found = _SHOW_STATUS.match(text)
    if found:
        pattern = _pattern(found.group(1)) if found.group(1) else None
        status = {"Uptime": str(int(time.monotonic())), "Threads_connected": "1"}
        rows = [[k, v] for k, v in status.items() if pattern is None or _like(k, pattern)]
        conn.result(["Variable_name", "Value"], rows)
        return
    if lowered in ("show binary logs", "show master logs"):
        conn.result(["Log_name", "File_size"], [list(f) for f in facts.binary_logs()])
        return
    if lowered in ("show master status", "show binary log status"):
        name, pos = facts.master_status()
        conn.result(["File", "Position", "Binlog_Do_DB", "Binlog_Ignore_DB"], [[name, pos, "", ""]])
        return
    if lowered in ("show slave hosts", "show replica hosts"):
        conn.result(
            ["Server_id", "Host", "Port", "Master_id"], [list(h) for h in facts.slave_hosts()]
        )
        return
    if lowered in ("show warnings", "show errors"):
        conn.result(["Level", "Code", "Message"], [])
        return
    raise _refuse(text)


def _split(text: str) -> list[str]:
    """Split at top-level commas (not inside quotes or parentheses)."""
    out, depth, quote, current = [], 0, "", []
    i = 0
    while i < len(text):
        ch = text[i]
        if quote:
            current.append(ch)
            if ch == "\\" and i + 1 < len(text):
                current.append(text[i + 1])
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "'\"`":
            quote = ch
            current.append(ch)
        elif ch == "(":
            depth += 1
            current.append(ch)
        elif ch == ")":
            depth -= 1
            current.append(ch)
        elif ch == "," and depth == 0:
            out.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
        i += 1
    if quote or depth:
        raise QueryRefused(ER_PARSE, "unbalanced quotes or parentheses")
    out.append("".join(current).strip())
    return out


def _literal(text: str, session: SessionVars, facts: Facts) -> object:
    """A value as SET or SELECT may give it; never an expression to evaluate."""
    text = text.strip()
    found = _STRING.match(text)
    if found:
        raw = found.group(1) if found.group(1) is not None else found.group(2)
        return re.sub(r"\\(.)", r"\1", raw.replace("''", "'").replace('""', '"'))
    if _NUMBER.match(text):
        return int(text) if re.fullmatch(r"[-+]?\d+", text) else text
    lowered = text.lower()
    if lowered == "null":
        return None
    found = _SYSVAR.match(text)
    if found:
        return _variable(found.group(2), facts)
    found = _USERVAR.match(text)
    if found:
        return session.user_vars.get(found.group(1).lower())
    if re.fullmatch(_IDENT, text):
        return text  # ON, OFF, DEFAULT, a character set name…
    raise _refuse(text)


def _variable(name: str, facts: Facts) -> object:
    values = facts.variables()
    key = name.lower()
    if key not in values:
        raise QueryRefused((1193, "HY000"), f"Unknown system variable '{name[:64]}'")
    return values[key]


def _set(text: str, session: SessionVars, facts: Facts) -> None:
    lowered = text.strip().lower()
    if lowered.startswith("names ") or lowered.startswith("character set "):
        return
    for item in _split(text):
        user = _USER_ASSIGN.match(item)
        if user:
            name = user.group(2).lower()
            if name not in session.user_vars and len(session.user_vars) >= MAX_USER_VARS:
                raise QueryRefused(ER_NOT_SUPPORTED, "too many user variables")
            value = _literal(user.group(3), session, facts)
            if isinstance(value, str) and len(value) > MAX_VALUE:
                raise QueryRefused(ER_NOT_SUPPORTED, f"@{name} is too long")
            session.user_vars[name] = value
            continue
        found = _ASSIGN.match(item)
        if not found:
            raise _refuse(f"SET {item}")
        if (found.group(2) or "").lower() in ("global", "persist"):
            raise QueryRefused(
                ER_NOT_SUPPORTED,
                "the binlog service's settings come from the hub's config ([binlog_service]), "
                "not from SET GLOBAL",
            )
        _literal(found.group(4), session, facts)  # checked, then let go: no effect here


_FUNCTIONS: dict[str, Callable[[SessionVars, Facts], object]] = {
    "unix_timestamp": lambda s, f: int(time.time()),
    "version": lambda s, f: _variable("version", f),
    "database": lambda s, f: s.database or None,
    "schema": lambda s, f: s.database or None,
    "user": lambda s, f: f"{s.user}@{s.address}",
    "current_user": lambda s, f: f"{s.user}@%",
    "session_user": lambda s, f: f"{s.user}@{s.address}",
    "system_user": lambda s, f: f"{s.user}@{s.address}",
    "connection_id": lambda s, f: s.connection_id,
    "now": lambda s, f: dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S"),
    "current_timestamp": lambda s, f: dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S"),
}


def _select_item(item: str, session: SessionVars, facts: Facts) -> tuple[str, object]:
    name = item
    expression = item
    alias = _ALIAS.match(item)
    if alias and not _FUNCTION.match(item) and not _STRING.match(item):
        expression, name = alias.group(1).strip(), alias.group(2).strip("`'")
    found = _FUNCTION.match(expression)
    if found:
        function = _FUNCTIONS.get(found.group(1).lower())
        if function is None:
            raise _refuse(f"SELECT {item}")
        return name, function(session, facts)
    return name, _literal(expression, session, facts)


def _pattern(text: str) -> str:
    found = _STRING.match(text.strip())
    if not found:
        raise QueryRefused(ER_PARSE, "LIKE takes a quoted pattern")
    return found.group(1) if found.group(1) is not None else found.group(2)


def _like(value: str, pattern: str) -> bool:
    glob = pattern.lower().replace("\\_", "\0").replace("_", "?").replace("%", "*")
    return fnmatchcase(value.lower(), glob.replace("\0", "_"))


_WHERE = re.compile(r"^variable_name\s*(=|in)\s*(.+)$", re.I | re.S)


def _show_variables(found: re.Match[str], facts: Facts) -> list[list[Any]]:
    values = facts.variables()
    rows: list[list[Any]] = [[k, "" if v is None else v] for k, v in sorted(values.items())]
    if found.group(2) is None:
        return rows
    condition = found.group(3).strip()
    if found.group(2).lower() == "like":
        pattern = _pattern(condition)
        return [r for r in rows if _like(str(r[0]), pattern)]
    where = _WHERE.match(condition)
    if not where:
        raise _refuse(f"SHOW VARIABLES WHERE {condition}")
    if where.group(1) == "=":
        wanted = {_pattern(where.group(2)).lower()}
    else:
        inner = where.group(2).strip()
        if not (inner.startswith("(") and inner.endswith(")")):
            raise QueryRefused(ER_PARSE, "IN takes a list in parentheses")
        wanted = {_pattern(p).lower() for p in _split(inner[1:-1])}
    return [r for r in rows if str(r[0]).lower() in wanted]
