"""[binlog_service] in the hub's config: what it holds, and every mistake named with its fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from binlogsync.config import load_hub
from binlogsync.errors import ConfigError

pytestmark = pytest.mark.unit

HUB = '[hub]\nbind = "tcp://127.0.0.1:5555"\n'
ROUTE = '\n[[route]]\norigin = "shop-db"\ntargets = ["r1"]\n'
SERVICE = '\n[binlog_service]\nbind = "127.0.0.1:3307"\nuser = "repl"\nserver_id = 900\n'


def _hub(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "hub.toml"
    path.write_text(text)
    (tmp_path / "repl.pw").write_text("pw\n")
    return path


def test_the_service_loads_with_its_defaults_and_its_password_from_a_file(tmp_path: Path) -> None:
    hub = load_hub(_hub(tmp_path, HUB + ROUTE + SERVICE + 'password_file = "repl.pw"\n'))
    service = hub.binlog_service
    assert service is not None
    assert (service.bind, service.user, service.password, service.server_id) == (
        "127.0.0.1:3307", "repl", "pw", 900,
    )  # fmt: skip
    assert service.origins is None and service.retain_hours == 24.0
    assert service.tables.patterns == ("*.*",) and dict(service.domains) == {}
    assert "pw" not in repr(service)


def test_every_key(tmp_path: Path) -> None:
    text = (
        HUB + ROUTE + SERVICE
        + 'password_env = "REPL_PW"\norigins = ["shop-db"]\ntables = ["shop.*"]\n'
        + 'retain_hours = 0.5\ndomains = { "shop-db" = 7 }\nfile_bytes = 65536\n'
    )  # fmt: skip
    service = load_hub(_hub(tmp_path, text), env={"REPL_PW": "from-env"}).binlog_service
    assert service is not None and service.password == "from-env"
    assert service.origins == ("shop-db",) and service.tables.patterns == ("shop.*",)
    assert service.retain_hours == 0.5 and dict(service.domains) == {"shop-db": 7}
    assert service.file_bytes == 65536


def test_a_route_without_targets_is_allowed_only_for_the_service(tmp_path: Path) -> None:
    route = '\n[[route]]\norigin = "shop-db"\ntargets = []\n'
    hub = load_hub(_hub(tmp_path, HUB + route + SERVICE + 'password_file = "repl.pw"\n'))
    assert hub.routes[0].targets == ()
    with pytest.raises(ConfigError) as refused:
        load_hub(_hub(tmp_path, HUB + route))
    assert "may be empty when [binlog_service] serves it" in str(refused.value)


@pytest.mark.parametrize(
    "extra, expected",
    [
        ("", "set password_file or password_env"),
        ('password = "pw"\n', "secrets never go there"),
        ('password_file = "empty.pw"\n', "the password is empty"),
        ('password_env = "NOPE"\n', "NOPE, which is not set"),
        ('password_file = "repl.pw"\nbind = "3307"\n', "Cannot overwrite"),
        ('password_file = "repl.pw"\nserver_ids = 1\n', "did you mean server_id"),
        ('password_file = "repl.pw"\norigins = ["nope"]\n', "'nope' is none"),
        ('password_file = "repl.pw"\ndomains = { "nope" = 1 }\n', "domains must map origins"),
        ('password_file = "repl.pw"\nfile_bytes = 10\n', "file_bytes must be 4096"),
        ('password_file = "repl.pw"\nretain_hours = 0\n', "retain_hours must be > 0"),
    ],
)
def test_mistakes_name_the_key_and_the_fix(tmp_path: Path, extra: str, expected: str) -> None:
    (tmp_path / "empty.pw").write_text("\n")
    with pytest.raises(ConfigError) as refused:
        load_hub(_hub(tmp_path, HUB + ROUTE + SERVICE + extra), env={})
    assert expected in str(refused.value)


@pytest.mark.parametrize(
    "service, expected",
    [
        ('bind = "localhost"\nuser = "r"\nserver_id = 9\n', "host:port"),
        ('bind = "127.0.0.1:3307"\nuser = "r"\nserver_id = 0\n', "server_id must be 1"),
        ('bind = "127.0.0.1:3307"\nserver_id = 9\n', "binlog_service.user is missing"),
    ],
)
def test_bind_server_id_and_user(tmp_path: Path, service: str, expected: str) -> None:
    text = HUB + ROUTE + "\n[binlog_service]\n" + service + 'password_file = "repl.pw"\n'
    with pytest.raises(ConfigError) as refused:
        load_hub(_hub(tmp_path, text))
    assert expected in str(refused.value)
