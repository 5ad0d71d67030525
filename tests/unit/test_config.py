"""Configuration: the examples load, and every mistake names the key and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from binlogsync.config import (
    AdminConfig,
    ClientConfig,
    HubConfig,
    load_admin,
    load_any,
    load_client,
    load_hub,
)
from binlogsync.errors import ConfigError
from binlogsync.transport.curve import make_keys

pytestmark = pytest.mark.unit
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _keys(folder: Path) -> None:
    for name in ("hub", "shop-db"):
        make_keys(folder / "keys", name)
    (folder / "keys" / "authorized").mkdir()


def test_examples_load(tmp_path: Path) -> None:
    _keys(tmp_path)
    for name in ("hub.toml", "client.toml"):
        (tmp_path / name).write_text((EXAMPLES / name).read_text())
    (tmp_path / "target.pw").write_text("s3cret\n")
    client_text = (
        (tmp_path / "client.toml")
        .read_text()
        .replace("/etc/binlogsync/target.pw", str(tmp_path / "target.pw"))
    )
    (tmp_path / "client.toml").write_text(client_text)
    hub = load_hub(tmp_path / "hub.toml")
    assert [r.origin for r in hub.routes] == ["shop-db", "shop-db"]
    assert hub.routes[1].target_schema("shop") == "shop_copy"
    assert hub.security.enabled and hub.metrics.port == 9101
    client = load_client(tmp_path / "client.toml", env={"BINLOGSYNC_ORIGIN_PASSWORD": "pw"})
    assert client.origin is not None and client.origin.database.password == "pw"
    assert client.target is not None and client.target.database.password == "s3cret"
    assert "pw" not in repr(client)  # passwords stay out of logs


def _client(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "c.toml"
    path.write_text('[client]\nname = "a"\nhub = "tcp://127.0.0.1:5555"\n' + body)
    return path


@pytest.mark.parametrize(
    "body, expected",
    [
        ("", "neither [origin] nor [target]"),
        ("[origin]\nport = 3306\n", "origin.server_id is missing"),
        ("[origin]\nserver_id = 0\n", "origin.server_id must be > 0"),
        ("[origin]\nserver_id = 5\nport = 'x'\n", "origin.port must be int"),
        ("[origin]\nserver_id = 5\nport = 70000\n", "origin.port must be a TCP port"),
        ("[origin]\nserver_id = 5\npassword = 'pw'\n", "secrets never go there"),
        (
            "[origin]\nserver_id = 5\npassword_env = 'NOPE_NOT_SET'\n",
            "$NOPE_NOT_SET, which is not set",
        ),
        ("[origin]\nserver_id = 5\npassword_file = 'missing.pw'\n", "cannot read"),
        ("[origin]\nserver_id = 5\ntables = ['nodot']\n", "is not SCHEMA.TABLE"),
        ("[origin]\nserver_id = 5\nstart = 'yesterday'\n", "origin.start must be"),
        (
            "[target]\napply_schema_changes = 'some'\n",
            "target.apply_schema_changes must be one of off, additive, all, got 'some'",
        ),
        ("[origin]\nserver_id = 5\nsevrer = 1\n", "unknown key(s): sevrer"),
        ("[origin]\nserver_id = 5\ncandidates = 'db2:3306'\n", "origin.candidates must be list"),
        (
            "[origin]\nserver_id = 5\ncandidates = ['db2']\n",
            'origin.candidates[0] must be "host:port"',
        ),
        (
            "[origin]\nserver_id = 5\ncandidates = ['db2:0']\n",
            'origin.candidates[0] must be "host:port"',
        ),
        (
            "[origin]\nserver_id = 5\nhost = 'db1'\ncandidates = ['db2:3306', 'db1:3306']\n",
            "origin.candidates[1] 'db1:3306' is named twice (or is origin.host:port)",
        ),
        ("[target]\n[extra]\n", "unknown table(s) in config: extra"),
        ("[target]\nseed_connections = 5\n", "target.seed_connections is 5; at most 4"),
        ("[target]\nseed_connections = 0\n", "target.seed_connections must be > 0"),
        (
            "[target]\nkind = 'redis'\nseed_connections = 2\n",
            "target.seed_connections is for kind 'mysql', and this target is 'redis'",
        ),
        ("max_message_bytes = 65536\n[target]\n", "max_message_bytes must be between 1048576"),
        ("max_message_bytes = 2147483648\n[target]\n", "and 1073741824 (1 GiB)"),
        (
            "[target]\n[security]\nsecret_key_file = 'k.key_secret'\n",
            "security.hub_public_key_file is missing",
        ),
    ],
)
def test_client_config_errors_name_the_key(tmp_path: Path, body: str, expected: str) -> None:
    with pytest.raises(ConfigError) as error:
        load_client(_client(tmp_path, body), env={})
    assert expected in str(error.value)


def test_hub_config_errors(tmp_path: Path) -> None:
    path = tmp_path / "h.toml"
    path.write_text('[hub]\nbind = "localhost:5555"\n')
    with pytest.raises(ConfigError, match="hub.bind must be a ZeroMQ endpoint"):
        load_hub(path)
    path.write_text('[hub]\nbind = "tcp://127.0.0.1:1"\n[[route]]\norigin = "a"\ntargets = ["a"]\n')
    with pytest.raises(ConfigError, match="sends 'a' to itself"):
        load_hub(path)
    path.write_text('[hub]\nbind = "tcp://127.0.0.1:1"\n[[route]]\norigin = "a"\ntargets = []\n')
    with pytest.raises(ConfigError, match="targets must be a non-empty list"):
        load_hub(path)
    path.write_text("[hub\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_hub(path)
    with pytest.raises(ConfigError, match="does not exist"):
        load_hub(tmp_path / "nothing.toml")


@pytest.mark.parametrize(
    "body, expected",
    [
        # The typo of a required key is named before the key is reported missing.
        (
            "[origin]\nsever_id = 5\n",
            "[origin] has unknown key(s): sever_id (did you mean server_id?)",
        ),
        ("[origin]\nserver_id = 5\nbatch_transaction = 9\n", "did you mean batch_transactions?"),
        ("[target]\ngroup_transaction = 9\n", "did you mean group_transactions?"),
        (
            "[target]\n[metrics]\nprot = 9\n",
            "[metrics] has unknown key(s): prot (did you mean port?)",
        ),
        ("[target]\n[security]\nsecret_key = 'x'\n", "did you mean secret_key_file?"),
        ("[origin]\nserver_id = 5\nzzz = 1\n", "unknown key(s): zzz —"),  # no close match
        # An unknown table comes before "neither [origin] nor [target]".
        ("[orgin]\nserver_id = 5\n", "unknown table(s) in config: orgin (did you mean origin?)"),
        ("[target]\n[securty]\n", "securty (did you mean security?)"),
    ],
)
def test_typos_are_named_with_a_suggestion(tmp_path: Path, body: str, expected: str) -> None:
    with pytest.raises(ConfigError) as error:
        load_client(_client(tmp_path, body), env={})
    assert expected in str(error.value)


def test_client_key_typo_is_suggested_even_for_an_absent_optional_key(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[client]\nname = "a"\nhub = "tcp://h:1"\nheartbeat_intervall = 2\n[target]\n')
    with pytest.raises(ConfigError, match=r"did you mean heartbeat_interval\?"):
        load_client(path, env={})


def test_hub_typos_are_named_with_a_suggestion(tmp_path: Path) -> None:
    path = tmp_path / "h.toml"
    path.write_text('[hub]\nnmae = "h"\nbind = "tcp://127.0.0.1:1"\n')
    with pytest.raises(
        ConfigError, match=r"\[hub\] has unknown key\(s\): nmae \(did you mean name\?\)"
    ):
        load_hub(path)
    path.write_text('[hub]\nbind = "tcp://127.0.0.1:1"\n[[rout]]\norigin = "a"\n')
    with pytest.raises(ConfigError, match=r"rout \(did you mean route\?\)"):
        load_hub(path)
    path.write_text('[hub]\nbind = "tcp://127.0.0.1:1"\n[[route]]\norigin = "a"\ntarget = ["b"]\n')
    with pytest.raises(ConfigError, match=r"target \(did you mean targets\?\)"):
        load_hub(path)


def _secured_client(tmp_path: Path, secret: str, hub_public: str = "keys/hub.key") -> Path:
    return _client(
        tmp_path,
        f"[target]\n[security]\nsecret_key_file = '{secret}'\nhub_public_key_file = '{hub_public}'\n",
    )


def _secured_hub(tmp_path: Path, secret: str, authorized: str = "keys/authorized") -> Path:
    path = tmp_path / "h.toml"
    path.write_text(
        '[hub]\nbind = "tcp://127.0.0.1:1"\n'
        f"[security]\nsecret_key_file = '{secret}'\nauthorized_keys_dir = '{authorized}'\n"
    )
    return path


def test_a_public_key_given_as_secret_key_file_is_refused(tmp_path: Path) -> None:
    # It used to load, and the agent then hung without a word.
    _keys(tmp_path)
    with pytest.raises(ConfigError) as error:
        load_client(_secured_client(tmp_path, "keys/shop-db.key"), env={})
    assert "security.secret_key_file" in str(error.value) and "shop-db.key" in str(error.value)
    assert "NAME.key_secret" in error.value.fix
    with pytest.raises(ConfigError, match=r"security\.secret_key_file.*only a public key"):
        load_hub(_secured_hub(tmp_path, "keys/hub.key"))
    assert load_client(
        _secured_client(tmp_path, "keys/shop-db.key_secret"), env={}
    ).security.enabled
    assert load_hub(_secured_hub(tmp_path, "keys/hub.key_secret")).security.enabled


@pytest.mark.parametrize(
    "content", ["not a key\n", 'public-key = "tooshort"\n', "", 'public-key = "' + "~" * 40 + '"\n']
)
def test_key_files_that_are_not_curve_keys_are_refused(tmp_path: Path, content: str) -> None:
    _keys(tmp_path)
    (tmp_path / "bad.key").write_text(content)
    with pytest.raises(ConfigError, match=r"security\.hub_public_key_file: .*bad\.key"):
        load_client(_secured_client(tmp_path, "keys/shop-db.key_secret", "bad.key"), env={})
    with pytest.raises(ConfigError, match=r"security\.secret_key_file: .*bad\.key"):
        load_client(_secured_client(tmp_path, "bad.key"), env={})
    (tmp_path / "keys" / "authorized" / "bad.key").write_text(content)
    with pytest.raises(ConfigError, match=r"security\.authorized_keys_dir: .*bad\.key"):
        load_hub(_secured_hub(tmp_path, "keys/hub.key_secret"))


def test_authorized_keys_dir_must_be_a_folder(tmp_path: Path) -> None:
    _keys(tmp_path)
    with pytest.raises(ConfigError, match=r"security\.authorized_keys_dir: .* is not a folder"):
        load_hub(_secured_hub(tmp_path, "keys/hub.key_secret", "keys/hub.key"))


def test_hub_admin_keys_dir(tmp_path: Path) -> None:
    _keys(tmp_path)
    assert load_hub(_secured_hub(tmp_path, "keys/hub.key_secret")).security.admin_keys_dir is None
    path = _secured_hub(tmp_path, "keys/hub.key_secret")
    path.write_text(path.read_text() + "admin_keys_dir = 'keys/admins'\n")
    with pytest.raises(ConfigError, match=r"security\.admin_keys_dir: .*admins does not exist"):
        load_hub(path)
    (tmp_path / "keys" / "admins").mkdir()
    make_keys(tmp_path / "keys" / "admins", "ops")
    assert load_hub(path).security.admin_keys_dir == tmp_path / "keys" / "admins"
    (tmp_path / "keys" / "admins" / "broken.key").write_text("nothing\n")
    with pytest.raises(ConfigError, match=r"security\.admin_keys_dir: .*broken\.key"):
        load_hub(path)


def test_origin_parts(tmp_path: Path) -> None:
    origin = load_client(_client(tmp_path, "[origin]\nserver_id = 5\n"), env={}).origin
    assert origin is not None and (origin.part_rows, origin.part_bytes) == (10000, 8388608)
    body = "[origin]\nserver_id = 5\npart_rows = 50\npart_bytes = 65536\n"
    origin = load_client(_client(tmp_path, body), env={}).origin
    assert origin is not None and (origin.part_rows, origin.part_bytes) == (50, 65536)
    for bad in ("part_rows = 0", "part_bytes = -1", "part_rows = 1.5"):
        with pytest.raises(ConfigError, match=rf"origin\.{bad.split()[0]} must be"):
            load_client(_client(tmp_path, f"[origin]\nserver_id = 5\n{bad}\n"), env={})


def _admin(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "admin.toml"
    path.write_text(body)
    return path


def test_admin_config(tmp_path: Path) -> None:
    _keys(tmp_path)
    make_keys(tmp_path / "keys", "ops")
    config = load_admin(_admin(tmp_path, '[admin]\nhub = "tcp://hub:5555"\n'))
    assert config == AdminConfig(name="admin", hub="tcp://hub:5555")
    path = _admin(
        tmp_path,
        '[admin]\nname = "ops"\nhub = "tcp://hub:5555"\n[security]\n'
        "secret_key_file = 'keys/ops.key_secret'\nhub_public_key_file = 'keys/hub.key'\n",
    )
    config = load_admin(path)
    assert config.name == "ops" and config.security.enabled
    assert config.security.hub_public_key_file == tmp_path / "keys" / "hub.key"


@pytest.mark.parametrize(
    "body, expected",
    [
        ("[admin]\n", "admin.hub is missing"),
        ('[admin]\nhub = "hub:5555"\n', "admin.hub must be a ZeroMQ endpoint"),
        ('[admin]\nhub = "tcp://h:1"\nhbu = 1\n', "hbu (did you mean hub?)"),
        ('[admin]\nhub = "tcp://h:1"\n[origin]\n', "unknown table(s) in config: origin"),
        (
            '[admin]\nhub = "tcp://h:1"\n[security]\nsecret_key_file = "keys/hub.key"\n',
            "security.hub_public_key_file is missing",
        ),
        ("[client]\n", "unknown table(s) in config: client"),
        ("[security]\n", "has no [admin] table"),
    ],
)
def test_admin_config_errors(tmp_path: Path, body: str, expected: str) -> None:
    with pytest.raises(ConfigError) as error:
        load_admin(_admin(tmp_path, body))
    assert expected in str(error.value)


def test_load_any_picks_the_kind_by_its_table(tmp_path: Path) -> None:
    hub = tmp_path / "h.toml"
    hub.write_text('[hub]\nbind = "tcp://127.0.0.1:1"\n')
    assert isinstance(load_any(hub), HubConfig)
    assert isinstance(load_any(_client(tmp_path, "[target]\n")), ClientConfig)
    assert isinstance(load_any(_admin(tmp_path, '[admin]\nhub = "tcp://h:1"\n')), AdminConfig)
    with pytest.raises(
        ConfigError, match=r"no \[hub\], \[client\] or \[admin\].*clinet \(did you mean client\?\)"
    ):
        load_any(_admin(tmp_path, '[clinet]\nhub = "tcp://h:1"\n'))
    with pytest.raises(ConfigError, match=r"both \[client\] and \[admin\]"):
        load_any(_admin(tmp_path, '[client]\n[admin]\nhub = "tcp://h:1"\n'))


def test_a_client_config_loads_without_its_secrets(tmp_path: Path) -> None:
    # `binlogsync status` with a client's config must not need the database password.
    body = "[origin]\nserver_id = 5\npassword_env = 'NOPE_NOT_SET'\n[target]\npassword_file = 'no.pw'\n"
    with pytest.raises(ConfigError, match="NOPE_NOT_SET"):
        load_client(_client(tmp_path, body), env={})
    config = load_client(_client(tmp_path, body), env={}, secrets=False)
    assert config.origin is not None and config.origin.database.password == ""
    assert config.target is not None and config.target.database.password == ""
    # What is checked without reading secrets still is: the secret in the TOML itself.
    with pytest.raises(ConfigError, match="secrets never go there"):
        load_client(_client(tmp_path, "[target]\npassword = 'pw'\n"), env={}, secrets=False)
    assert isinstance(load_any(_client(tmp_path, body), env={}, secrets=False), ClientConfig)


def test_a_metrics_port_in_use_is_a_config_error(tmp_path: Path) -> None:
    import socket

    from prometheus_client import CollectorRegistry

    from binlogsync.config import Metrics
    from binlogsync.metrics import serve

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError) as error:
            serve(Metrics("127.0.0.1", port), CollectorRegistry())
    assert f"metrics.port {port}" in str(error.value) and "in use" in str(error.value)
    assert "[metrics]" in error.value.fix


def test_origin_candidates_share_the_origins_credentials(tmp_path: Path) -> None:
    body = (
        "[origin]\nserver_id = 5\nhost = 'db1'\nuser = 'cap'\npassword_env = 'PW'\n"
        "candidates = ['db2:3307', '10.0.0.3:3306']\n"
    )
    origin = load_client(_client(tmp_path, body), env={"PW": "s3cret"}).origin
    assert origin is not None
    assert [(d.host, d.port, d.user, d.password) for d in origin.servers] == [
        ("db1", 3306, "cap", "s3cret"),
        ("db2", 3307, "cap", "s3cret"),
        ("10.0.0.3", 3306, "cap", "s3cret"),
    ]
