"""The command line: exit codes, messages, and the commands that touch no server."""

from __future__ import annotations

from pathlib import Path

import pytest

from binlogsync.cli import main
from binlogsync.errors import UsageError
from binlogsync.transport.curve import make_keys

pytestmark = pytest.mark.unit


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
