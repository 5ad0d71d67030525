"""The binlog service in `binlogsync status` and on the Airflow page: its subscribers with
server_id, address, position and lag, and an origin it stopped at with the reason."""

from __future__ import annotations

import pytest

from binlogsync.ops import overview
from binlogsync.statusview import render

pytestmark = pytest.mark.unit

STATUS = {
    "hub": "hub",
    "epoch": "e1",
    "version": "0",
    "time": 1_700_000_000.0,
    "uptime": 5.0,
    "hosts": [],
    "origins": [],
    "targets": [],
    "binlog_service": {
        "bind": "127.0.0.1:3307",
        "server_id": 900,
        "files": 3,
        "first_file": "hub-bin.000002",
        "head": {"file": "hub-bin.000004", "position": 1234},
        "gtid_state": "1-900-77,2-900-5",
        "retain_hours": 24.0,
        "origins": [
            {
                "origin": "shop-db",
                "domain": 1,
                "last_gtid": "1-900-77",
                "indexed_key": 9,
                "stalled": None,
            },
            {
                "origin": "crm-db",
                "domain": 2,
                "last_gtid": "2-900-5",
                "indexed_key": 3,
                "stalled": "the hub holds no Table_map of crm.x — upgrade it",
            },
        ],  # fmt: skip
        "subscribers": [
            {
                "server_id": 41,
                "address": "10.0.0.7:51234",
                "mode": "gtid",
                "file": "hub-bin.000004",
                "position": 1234,
                "gtid": "1-900-77",
                "lag_seconds": 0.0,
                "transactions": 77,
                "connected_seconds": 3.0,
            },
            {
                "server_id": 0,
                "address": "10.0.0.9:40000",
                "mode": "file",
                "file": "hub-bin.000003",
                "position": 99,
                "gtid": "",
                "lag_seconds": 12.5,
                "transactions": 1,
                "connected_seconds": 1.0,
                "tls": "TLSv1.3",
            },
        ],  # fmt: skip
    },
}


def test_status_lists_the_subscribers_and_a_stopped_origin() -> None:
    text = render(STATUS)
    assert "binlog service on 127.0.0.1:3307 (server_id 900): 3 file(s)" in text
    assert "GTID 1-900-77,2-900-5" in text
    assert "crm-db (domain 2) STOPPED: the hub holds no Table_map" in text
    lines = [line for line in text.splitlines() if line.startswith("10.0.0.")]
    assert lines[0].split() == ["10.0.0.7:51234", "41", "gtid", "hub-bin.000004:1234",
                                "1-900-77", "0.0", "s", "-"]  # fmt: skip
    assert lines[1].split()[-3:] == ["12.5", "s", "TLSv1.3"]


def test_a_hub_without_the_service_shows_nothing_of_it() -> None:
    plain = {k: v for k, v in STATUS.items() if k != "binlog_service"}
    assert "binlog service" not in render(plain)
    assert overview.from_status(plain)["subscribers"] == []
    assert overview.from_status(plain)["binlog_service"] is None


def test_the_airflow_page_gets_the_subscribers() -> None:
    data = overview.from_status(STATUS)
    assert data["binlog_service"]["gtid_state"] == "1-900-77,2-900-5"
    assert [s["server_id"] for s in data["subscribers"]] == [41, 0]
    assert data["subscribers"][1]["position"] == "hub-bin.000003:99"
    assert data["subscribers"][1]["gtid"] is None
