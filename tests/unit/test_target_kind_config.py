"""[target] kind: the choices, the keys of each kind, and errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from binlogsync.config import load_client
from binlogsync.errors import ConfigError

pytestmark = pytest.mark.unit

HEAD = '[client]\nname = "t1"\nhub = "tcp://127.0.0.1:5555"\n\n[target]\n'


def _load(tmp_path: Path, body: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "t1.toml"
    path.write_text(HEAD + body)
    return load_client(path)


def test_an_audit_log_target_with_its_path(tmp_path: Path) -> None:
    config = _load(tmp_path, 'kind = "auditlog"\npath = "audit"\nrotate_bytes = 1000\n')
    assert config.target.kind == "auditlog" and config.target.path == tmp_path / "audit"
    assert config.target.rotate_bytes == 1000
    assert _load(tmp_path, 'host = "db"\n').target.kind == "mysql"
    redis = _load(tmp_path, 'kind = "redis"\nurl = "redis://r:6380/2"\n')
    assert redis.target.url == "redis://r:6380/2" and redis.target.ttl == 0
    pg = _load(tmp_path, 'kind = "postgresql"\ncreate_tables = true\n')
    assert pg.target.create_tables and pg.target.url.startswith("postgresql://")
    assert pg.target.zero_dates == "error"
    assert (
        _load(tmp_path, 'kind = "postgresql"\nzero_dates = "epoch"\n').target.zero_dates == "epoch"
    )


@pytest.mark.parametrize(
    ("body", "names"),
    [
        ('kind = "mongo"\n', "target.kind must be one of mysql, postgresql, redis, auditlog"),
        ('kind = "postgresql"\nhost = "db"\n', "target.host names a MySQL server"),
        ('kind = "auditlog"\npath = "a"\nurl = "redis://x"\n', "target.url is for kinds"),
        ("create_tables = true\n", "target.create_tables is for kind 'postgresql'"),
        ('kind = "auditlog"\n', "path"),
        ('kind = "auditlog"\npath = "a"\nhost = "db"\n', "target.host names a MySQL server"),
        ('path = "a"\n', "target.path is for kind 'auditlog'"),
        ('zero_dates = "null"\n', "target.zero_dates is for kind 'postgresql'"),
        (
            'kind = "postgresql"\nzero_dates = "keep"\n',
            "target.zero_dates must be one of error, null, epoch",
        ),
        ('kind = "redis"\nport = 6379\n', "target.port names a MySQL server"),
        ('kind = "redis"\nkey_pattern = "{schema}:{table}"\n', "has no {key}"),
        ('kind = "redis"\nttl = 0\n', "target.ttl must be > 0"),
    ],
)
def test_wrong_kinds_and_keys_are_named(tmp_path: Path, body: str, names: str) -> None:
    with pytest.raises(ConfigError, match=names.replace(".", r"\.")):
        _load(tmp_path, body)


def test_a_kind_whose_client_library_is_missing_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys

    from binlogsync.apply.store import require

    monkeypatch.setitem(sys.modules, "redis", None)  # as if not installed
    with pytest.raises(ConfigError, match=r"pip install 'binlogsync\[redis\]'"):
        require("redis")
    require("mysql")  # needs nothing more
