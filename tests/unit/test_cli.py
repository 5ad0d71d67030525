"""The command line: exit codes, messages, and the commands that touch no server."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from binlogsync.cli import _command, main, parser
from binlogsync.errors import UsageError
from binlogsync.transport.curve import make_keys
from binlogsync_dev.cli import main as dev_main
from binlogsync_dev.cli import parser as dev_parser
from binlogsync_dev.sandbox import Sandbox

pytestmark = pytest.mark.unit
AGENTS = str(Path(__file__).resolve().parents[2] / "agents")  # this tree's code, not an install


def test_keys_refuses_to_overwrite_an_existing_pair(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["keys", "--dir", str(tmp_path), "--name", "hub"]) == 0
    before = (tmp_path / "hub.key_secret").read_bytes()
    capsys.readouterr()
    # A second run would lock out every client that trusts the old public key.
    assert main(["keys", "--dir", str(tmp_path), "--name", "hub"]) == 2
    err = capsys.readouterr().err
    assert "hub.key" in err and "hub.key_secret" in err and "--force" in err
    assert (tmp_path / "hub.key_secret").read_bytes() == before
    assert main(["keys", "--dir", str(tmp_path), "--name", "hub", "--force"]) == 0
    assert (tmp_path / "hub.key_secret").read_bytes() != before


def test_make_keys_refuses_when_only_one_half_exists(tmp_path: Path) -> None:
    (tmp_path / "db.key").write_text("left over\n")
    with pytest.raises(UsageError, match="db.key"):
        make_keys(tmp_path, "db")
    public, secret = make_keys(tmp_path, "db", force=True)
    assert public.exists() and secret.exists()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_runtime_failure_exits_1_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Nobody listens: UnreachableError is a failure at run time (1), not bad input (2).
    config = tmp_path / "hub.toml"
    config.write_text(f'[hub]\nbind = "tcp://127.0.0.1:{_free_port()}"\n')
    assert main(["status", "--config", str(config), "--timeout", "0.2"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: the hub at tcp://127.0.0.1:") and " — " in err
    assert err.count("\n") == 1


def test_config_error_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--config", str(tmp_path / "missing.toml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "missing.toml" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["skip", "--config", "t.toml", "--origin", "o", "--position", "binlog.1", "--reason", "r"],
        ["capture-skip", "--config", "h.toml", "--origin", "o", "--to", "x:y", "--reason", "r"],
    ],
)
def test_a_malformed_position_is_a_usage_error_exit_2(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert "is neither a GTID state nor FILE:OFFSET" in capsys.readouterr().err


def test_a_reader_that_stops_early_gets_no_traceback(tmp_path: Path) -> None:
    # `binlogsync … | head -1`: more output than a pipe holds, and the reader leaves after one
    # line, so the command's writes fail with EPIPE while it is still printing.
    names = [arg for i in range(800) for arg in ("--name", f"host{i:04}")]
    proc = subprocess.Popen(
        [sys.executable, "-m", "binlogsync.cli", "keys", "--dir", str(tmp_path), *names],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": AGENTS},
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith(b"host0000: public ")
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1
    assert b"Traceback" not in err and b"BrokenPipe" not in err, err.decode()


def _subparsers(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("no subcommands")


def test_every_option_of_every_command_is_described() -> None:
    top = parser()
    commands = _subparsers(top)
    assert {"server", "client", "keys", "status", "skip", "reconcile"} <= set(commands)
    # The dev harness's commands are not the product's (python -m binlogsync_dev has them).
    assert not {"sandbox", "demo", "bench", "airflow"} & set(commands)
    assert {"sandbox", "demo", "bench", "airflow"} <= set(_subparsers(dev_parser()))
    missing = [
        f"{name} {action.option_strings or action.dest}"
        for name, p in [("binlogsync", top), *commands.items()]
        for action in p._actions
        if not isinstance(action, argparse._SubParsersAction) and not (action.help or "").strip()
    ]
    assert not missing, f"options without help: {missing}"


def test_a_command_parses_the_same_with_only_its_own_options_built() -> None:
    argv = ["--log-level", "debug", "reconcile", "--source", "mysql://u@h:1", "--target",
            "mysql://u@h:2", "--tables", "s.t", "--since-last"]  # fmt: skip
    assert _command(argv) == "reconcile" and _command(["--version"]) == ""
    assert vars(parser(_command(argv)).parse_args(argv)) == vars(parser().parse_args(argv))
    assert "--since-last" not in _subparsers(parser("status"))["reconcile"].format_help()


def test_help_shows_defaults() -> None:
    commands = _subparsers(parser())
    status = commands["status"].format_help()
    assert "(default: 5.0)" in status and "(default: info)" in status
    assert "(default: 1)" in _subparsers(dev_parser())["sandbox"].format_help()
    assert "default: None" not in status  # required options and flags show no default


@pytest.mark.parametrize(
    "argv",
    [
        ["--log-level", "debug", "status", "--config", "x"],
        ["status", "--config", "x", "--log-level", "debug"],
    ],
)
def test_log_level_before_or_after_the_command(argv: list[str]) -> None:
    assert parser().parse_args(argv).log_level == "debug"


def test_log_level_defaults_to_info() -> None:
    assert parser().parse_args(["status", "--config", "x"]).log_level == "info"


@pytest.mark.parametrize(
    "body",
    [
        # A client's config: the database password is not needed to ask the hub.
        '[client]\nname = "a"\nhub = "{hub}"\n[target]\npassword_env = "NOPE_NOT_SET"\n',
        '[admin]\nhub = "{hub}"\n',
    ],
)
def test_status_reaches_the_hub_named_by_client_or_admin_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str
) -> None:
    hub = f"tcp://127.0.0.1:{_free_port()}"
    config = tmp_path / "c.toml"
    config.write_text(body.format(hub=hub))
    assert main(["status", "--config", str(config), "--timeout", "0.2"]) == 1
    assert f"the hub at {hub} did not answer" in capsys.readouterr().err


@pytest.mark.parametrize("action", ["stop", "status"])
def test_sandbox_commands_on_a_folder_without_one_are_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], action: str
) -> None:
    folder = tmp_path / "nothing-here"
    assert dev_main(["sandbox", action, "--dir", str(folder)]) == 2
    assert f"no sandbox runs in {folder}" in capsys.readouterr().err
    assert not folder.exists()  # a mistyped --dir is not created
    # A sandbox whose servers have all gone (sandbox.json left behind) does not run either.
    folder.mkdir()
    dead = {"name": "origin", "port": 1, "server_id": 1, "datadir": "x", "pid": 2**22 + 1}
    (folder / "sandbox.json").write_text(json.dumps([dead]))
    assert dev_main(["sandbox", action, "--dir", str(folder)]) == 2


def _executable(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)


def test_dev_binlogsync_runs_in_the_callers_folder(tmp_path: Path) -> None:
    # A copy of ./dev in a fake checkout whose .venv is already installed (stamp newer than
    # pyproject.toml, every package findable), so it installs nothing; its `binlogsync` runs
    # this tree's code. It compiles the checkout's modules (an editable install leaves them as
    # source), also where PYTHONDONTWRITEBYTECODE would keep Python from ever writing them.
    repo, caller, stubs = tmp_path / "repo", tmp_path / "caller", tmp_path / "stubs"
    _executable(repo / "dev", (Path(AGENTS).parent / "dev").read_text())
    (repo / "pyproject.toml").write_text("")
    os.utime(repo / "pyproject.toml", (1_000_000_000, 1_000_000_000))
    _executable(repo / ".venv" / "bin" / "python", f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (repo / "agents" / "probe").mkdir(parents=True)
    (repo / "agents" / "probe" / "__init__.py").write_text("VALUE = 1\n")
    _executable(
        repo / ".venv" / "bin" / "binlogsync",
        f'#!/bin/sh\nPYTHONPATH="{AGENTS}" exec "{sys.executable}" -m binlogsync.cli "$@"\n',
    )
    (repo / ".venv" / ".installed").touch()
    for tool in ("mariadbd", "java"):  # present, so dev asks apt-get for nothing
        _executable(stubs / tool, "#!/bin/sh\nexit 0\n")
    caller.mkdir()
    result = subprocess.run(
        ["../repo/dev", "binlogsync", "keys", "--dir", "k", "--name", "x"],
        cwd=caller,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PATH": f"{stubs}:{os.environ['PATH']}", "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert result.returncode == 0, result.stderr
    assert (caller / "k" / "x.key").exists() and not (repo / "k").exists()
    assert list((repo / "agents" / "probe" / "__pycache__").glob("__init__.*.pyc"))


def test_sandbox_remove_data_keeps_the_logs(tmp_path: Path) -> None:
    # The demo keeps the logs it told the user to read and drops only the bulky datadirs.
    for name in ("origin", "target1"):
        (tmp_path / name / "data" / "mysql").mkdir(parents=True)
        (tmp_path / name / "error.log").write_text("log\n")
    (tmp_path / "template" / "mysql").mkdir(parents=True)
    Sandbox(tmp_path).remove_data()
    assert (tmp_path / "origin" / "error.log").exists() and (tmp_path / "target1").is_dir()
    assert not (tmp_path / "origin" / "data").exists() and not (tmp_path / "template").exists()


def test_demo_keeps_its_folder_by_default() -> None:
    assert dev_parser().parse_args(["demo"]).dir == "demo-run"  # listed in .gitignore


def test_check_config_passes_a_good_file_and_names_the_bad_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["keys", "--dir", str(tmp_path / "keys"), "--name", "db1", "--name", "hub"]) == 0
    good = tmp_path / "db1.toml"
    good.write_text(
        '[client]\nname = "db1"\nhub = "tcp://hub:5555"\n\n'
        '[target]\nhost = "127.0.0.1"\nport = 3306\nuser = "binlogsync"\n\n'
        '[security]\nsecret_key_file = "keys/db1.key_secret"\nhub_public_key_file = "keys/hub.key"\n'
    )
    capsys.readouterr()
    assert main(["check-config", "--config", str(good)]) == 0
    assert "valid client config for db1 (target)" in capsys.readouterr().out
    bad = tmp_path / "bad.toml"
    bad.write_text(good.read_text().replace("keys/hub.key", "keys/nohub.key"))
    assert main(["check-config", "--config", str(bad)]) == 2
    assert "hub_public_key_file" in capsys.readouterr().err


def test_bench_dir_is_made_when_missing_and_a_file_there_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`bench … --dir D` with D missing was a traceback from tempfile; D is now made (the
    scratch folder's parent), and a file in its place is a usage error naming it."""
    from binlogsync_dev.cli import _scratch_parent

    folder = tmp_path / "a" / "b"
    _scratch_parent(str(folder))
    assert folder.is_dir()
    blocked = tmp_path / "file"
    blocked.write_text("x")
    assert dev_main(["bench", "oltp", "--dir", str(blocked)]) == 2
    assert f"bench --dir {blocked}: not a folder" in capsys.readouterr().err
