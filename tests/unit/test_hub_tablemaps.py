"""The Table_map bodies capture sends with a BATCH: checked as hostile input, stored as facts
about the origin's binlog, and the one in force for a transaction found by its key."""

from __future__ import annotations

import sqlite3

import pytest

from binlogsync.errors import ProtocolError
from binlogsync.hub.tablemaps import MAX_BODY, MapReader, TableMaps, facts

pytestmark = pytest.mark.unit


def test_facts_are_keyed_by_the_body_they_come_with() -> None:
    header = {"maps": [[0, "shop", "orders", b"m1"], [2, "shop", "items", b"m2"]]}
    assert facts(header, [10, 20, 30]) == [
        ("shop", "orders", 10, b"m1"),
        ("shop", "items", 30, b"m2"),
    ]
    assert facts({}, [10]) == []


@pytest.mark.parametrize(
    "item",
    [
        "not a list",
        [0, "shop", "orders"],
        [5, "shop", "orders", b"m"],  # no such body
        [-1, "shop", "orders", b"m"],
        [True, "shop", "orders", b"m"],
        [0, "", "orders", b"m"],
        [0, "s" * 65, "orders", b"m"],
        [0, "shop", 7, b"m"],
        [0, "shop", "orders", "text, not bytes"],
        [0, "shop", "orders", b""],
        [0, "shop", "orders", b"x" * (MAX_BODY + 1)],
    ],
)
def test_malformed_maps_are_refused(item: object) -> None:
    with pytest.raises(ProtocolError):
        facts({"maps": [item]}, [10])


def test_the_map_in_force_is_the_newest_at_or_below_the_key() -> None:
    db = sqlite3.connect(":memory:", isolation_level=None)
    store = TableMaps(db)
    reader = MapReader(db, lambda: store.version)
    store.add("o1", [("shop", "t", 10, b"v1")])
    assert reader.at("o1", "shop", "t", 9) is None
    assert reader.at("o1", "shop", "t", 10) == b"v1"
    store.add("o1", [("shop", "t", 50, b"v2")])  # an ALTER TABLE before key 50
    assert reader.at("o1", "shop", "t", 49) == b"v1"
    assert reader.at("o1", "shop", "t", 50) == b"v2"
    assert reader.at("o1", "shop", "t", 10**9) == b"v2"
    assert reader.at("o2", "shop", "t", 50) is None  # per origin
    before = store.version
    store.add("o1", [("shop", "t", 60, b"v2")])  # the same map again: nothing written
    assert store.version == before
    assert db.execute("SELECT COUNT(*) FROM table_maps").fetchone()[0] == 2
