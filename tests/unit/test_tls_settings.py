"""TLS settings as a user writes them (TOML, URLs): what they mean, and every mistake found at
start-up with the setting and the file named. No server here: tests/integration/test_tls.py
has the handshakes."""

from __future__ import annotations

from pathlib import Path

import pytest

from binlogsync import tls
from binlogsync.config import load_client
from binlogsync.errors import ConfigError
from binlogsync.ops.site import database_url
from binlogsync.reconcile.urls import parse_url
from binlogsync_dev.certs import Authority

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> Authority:
    return Authority(tmp_path_factory.mktemp("certs"))


def _client(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "c.toml"
    path.write_text('[client]\nname = "a"\nhub = "tcp://127.0.0.1:5555"\n' + body)
    return path


def _origin(tmp_path: Path, lines: str) -> tls.TlsSettings:
    config = load_client(_client(tmp_path, f"[origin]\nserver_id = 5\n{lines}\n"), env={})
    assert config.origin is not None
    return config.origin.database.tls


def test_defaults_follow_mysql(tmp_path: Path, ca: Authority) -> None:
    assert _origin(tmp_path, "").mode == "preferred"  # MySQL's and libpq's default
    alone = _origin(tmp_path, f'ssl_ca = "{ca.ca}"')
    assert alone.mode == "verify_ca" and alone.ca == ca.ca  # ssl_ca alone: verify_ca
    assert _origin(tmp_path, 'ssl_mode = "VERIFY_IDENTITY"').mode == "verify_identity"


def test_relative_paths_are_the_config_files_folder(tmp_path: Path, ca: Authority) -> None:
    (tmp_path / "ca.pem").write_bytes(ca.ca.read_bytes())
    assert _origin(tmp_path, 'ssl_ca = "ca.pem"').ca == tmp_path / "ca.pem"


def test_candidates_share_the_origins_tls(tmp_path: Path, ca: Authority) -> None:
    body = f'[origin]\nserver_id = 5\nssl_ca = "{ca.ca}"\ncandidates = ["db2:3306"]\n'
    config = load_client(_client(tmp_path, body), env={})
    assert config.origin is not None
    assert [s.tls.ca for s in config.origin.servers] == [ca.ca, ca.ca]


@pytest.mark.parametrize(
    "lines, expected",
    [
        ('ssl_mode = "verify"', "origin.ssl_mode must be one of disabled, preferred, required"),
        ('ssl_ca = "/nope/ca.pem"', "origin.ssl_ca: cannot read /nope/ca.pem"),
        ('ssl_ca = "NOTPEM"', "origin.ssl_ca: NOTPEM is not a PEM file"),
        ('ssl_mode = "disabled"\nssl_ca = "CA"', "origin.ssl_mode = disabled, and origin.ssl_ca"),
        ('ssl_cert = "CERT"', "origin.ssl_cert is set without origin.ssl_key"),
        ('ssl_key = "KEY"', "origin.ssl_key is set without origin.ssl_cert"),
        ('ssl_cert = "CA"\nssl_key = "KEY"', "do not make a client certificate"),
        ("ssl_mode = 1", "origin.ssl_mode must be a non-empty string"),
        ('ssl_verify = "yes"', "unknown key(s): ssl_verify"),
    ],
)
def test_mistakes_name_the_setting_and_the_file(
    tmp_path: Path, ca: Authority, lines: str, expected: str
) -> None:
    client = ca.client("unit")
    (tmp_path / "NOTPEM").write_text("not a certificate")
    lines = (
        lines.replace('"CA"', f'"{ca.ca}"')
        .replace('"CERT"', f'"{client.cert}"')
        .replace('"KEY"', f'"{client.key}"')
        .replace('"NOTPEM"', f'"{tmp_path / "NOTPEM"}"')
    )
    expected = expected.replace("NOTPEM", str(tmp_path / "NOTPEM"))
    with pytest.raises(ConfigError, match=None) as caught:
        _origin(tmp_path, lines)
    assert expected in str(caught.value)


def test_a_mysql_target(tmp_path: Path, ca: Authority) -> None:
    client = ca.client("unit")
    body = (
        f'[target]\nssl_mode = "verify_identity"\nssl_ca = "{ca.ca}"\n'
        f'ssl_cert = "{client.cert}"\nssl_key = "{client.key}"\n'
    )
    target = load_client(_client(tmp_path, body), env={}).target
    assert target is not None
    settings = target.database.tls
    assert (settings.mode, settings.ca, settings.cert) == ("verify_identity", ca.ca, client.cert)
    args = target.database.connect_args()
    assert args["ssl"].check_hostname  # an SSLContext that checks the name


def test_status_tools_leave_the_files_alone(tmp_path: Path) -> None:
    """`secrets=False` (tools that only ask the hub) does not read the files either."""
    body = '[origin]\nserver_id = 5\nssl_ca = "/only/on/the/origin/host.pem"\n'
    config = load_client(_client(tmp_path, body), env={}, secrets=False)
    assert config.origin is not None and config.origin.database.tls.mode == "verify_ca"


def test_a_postgresql_target_takes_libpq_options_in_its_url(tmp_path: Path, ca: Authority) -> None:
    url = f"postgresql://bls@db:5432/wh?sslmode=verify-full&sslrootcert={ca.ca}"
    body = f'[target]\nkind = "postgresql"\nurl = "{url}"\n'
    target = load_client(_client(tmp_path, body), env={}).target
    assert target is not None
    settings = target.database.tls
    assert (settings.mode, settings.ca) == ("verify_identity", ca.ca)
    assert tls.libpq_args(settings) == {"sslmode": "verify-full", "sslrootcert": str(ca.ca)}
    assert settings.mode_text == "sslmode in target.url = verify-full"


@pytest.mark.parametrize(
    "target, expected",
    [
        ('kind = "postgresql"\nurl = "postgresql://h/db"\nssl_mode = "required"',
         "target.ssl_mode is for MySQL and Redis targets"),
        ('kind = "postgresql"\nurl = "postgresql://h/db?sslmode=allow"',
         "sslmode in target.url = allow tries cleartext first"),
        ('kind = "postgresql"\nurl = "postgresql://h/db?sslmode=verify-ca"',
         "needs sslrootcert in target.url"),
        ('kind = "redis"\nurl = "redis://h:6379/0"\nssl_ca = "CA"', "and the URL is redis://"),
        ('kind = "redis"\nurl = "rediss://h:6379/0"\nssl_mode = "preferred"',
         "does not fit a rediss:// URL"),
        ('kind = "redis"\nurl = "rediss://h:6379/0?ssl_ca_certs=/x"',
         "has redis-py's own TLS option(s) ssl_ca_certs"),
        ('kind = "redis"\nurl = "rediss://h:6379/0?ssl_ca=CA"\nssl_ca = "CA"',
         "target.ssl_ca is set both in target.url and beside it"),
        ('kind = "auditlog"\npath = "log"\nssl_mode = "required"', "this one is an audit log"),
    ],
)  # fmt: skip
def test_target_kind_mistakes(tmp_path: Path, ca: Authority, target: str, expected: str) -> None:
    body = "[target]\n" + target.replace("CA", str(ca.ca)) + "\n"
    with pytest.raises(ConfigError) as caught:
        load_client(_client(tmp_path, body), env={})
    assert expected in str(caught.value)


def test_libpq_refuses_a_key_others_can_read(tmp_path: Path, ca: Authority) -> None:
    client = ca.client("loose")
    client.key.chmod(0o644)
    url = (
        f"postgresql://bls@db/wh?sslmode=verify-full&sslrootcert={ca.ca}"
        f"&sslcert={client.cert}&sslkey={client.key}"
    )
    body = f'[target]\nkind = "postgresql"\nurl = "{url}"\n'
    with pytest.raises(ConfigError, match=f"chmod 600 {client.key}"):
        load_client(_client(tmp_path, body), env={})


def test_a_redis_target(tmp_path: Path, ca: Authority) -> None:
    body = f'[target]\nkind = "redis"\nurl = "rediss://cache:6380/2?ssl_ca={ca.ca}&db=2"\n'
    target = load_client(_client(tmp_path, body), env={}).target
    assert target is not None
    assert target.url == "rediss://cache:6380/2?db=2"  # our options out of redis-py's way
    assert target.database.tls.mode == "verify_identity"  # rediss://: redis-py's default
    assert tls.redis_args(target.database.tls, target.url)["ssl_ca_certs"] == str(ca.ca)
    plain = load_client(_client(tmp_path, '[target]\nkind = "redis"\n'), env={}).target
    assert plain is not None and plain.database.tls.mode == "disabled"
    assert tls.redis_args(plain.database.tls, plain.url) == {}


def test_reconcile_and_seed_urls(ca: Authority) -> None:
    db = parse_url(f"mysql://u@db:3306?ssl_mode=verify_identity&ssl_ca={ca.ca}")
    assert (db.tls.mode, db.tls.ca) == ("verify_identity", ca.ca)
    pg = parse_url(f"postgresql://u@db/wh?sslmode=verify-ca&sslrootcert={ca.ca}", postgres=True)
    assert (pg.tls.mode, pg.tls.ca) == ("verify_ca", ca.ca)
    with pytest.raises(ConfigError, match="ssl_ca in the URL mysql://u@db:3306: cannot read"):
        parse_url("mysql://u@db:3306?ssl_ca=/missing.pem")
    with pytest.raises(ConfigError, match="unknown option"):  # libpq's names are PostgreSQL's
        parse_url(f"mysql://u@db?sslrootcert={ca.ca}")
    with pytest.raises(ConfigError, match="unknown option"):
        parse_url(f"postgresql://u@db/wh?ssl_ca={ca.ca}", postgres=True)


def test_urls_made_for_spark_submit_carry_tls(tmp_path: Path, ca: Authority) -> None:
    """The Airflow operator's reconcile URLs name the same files, and parse back the same."""
    for url in (
        f"mysql://u@db:3306?ssl_mode=verify_identity&ssl_ca={ca.ca}",
        f"postgresql://u@db:5432/wh?sslmode=verify-full&sslrootcert={ca.ca}",
    ):
        db = parse_url(url, postgres=True)
        made, _ = database_url("h", db, tmp_path / "secrets")
        again = parse_url(made, postgres=True)
        assert again.tls == db.tls and again.tls.libpq == db.tls.libpq
    plain, _ = database_url("h", parse_url("mysql://u@db:3306"), tmp_path / "secrets")
    assert "ssl" not in plain  # no settings: the URL stays as it was
