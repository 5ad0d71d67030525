"""Net-change apply on a real MariaDB target: reduced groups end as the unreduced ones do, row
for row; unique values swapped inside a group apply; a failing transaction is still named
exactly; and the workload of issue 7 (update, update, delete, re-insert) goes to the server in a
handful of statements instead of one per row change."""

from __future__ import annotations

import logging
import random
import string
from collections.abc import Iterator
from typing import Any

import pymysql
import pytest

from applykit import Recording
from binlogsync.apply import Applier, failed_at
from binlogsync.config import DatabaseSettings
from binlogsync.engines.mariadb.statements import Statement
from binlogsync.engines.mariadb.targettables import TargetTables
from binlogsync.errors import ConstraintError, MissingTableError, UnreachableError
from binlogsync.model import Change, Transaction
from binlogsync.position import Position
from binlogsync_dev.sandbox import Server

pytestmark = pytest.mark.integration

SCHEMA = {
    "p": "CREATE TABLE p (id INT PRIMARY KEY, v INT, s VARCHAR(20))",
    "c2": "CREATE TABLE c2 (a INT, b VARCHAR(5), v INT, PRIMARY KEY (a, b))",
    "u": "CREATE TABLE u (id INT PRIMARY KEY, name VARCHAR(10) NOT NULL, v INT, UNIQUE KEY (name))",
}
COLUMNS = {"p": ("id", "v", "s"), "c2": ("a", "b", "v"), "u": ("id", "name", "v")}
KEYLEN = {"p": 1, "c2": 2, "u": 1}


@pytest.fixture
def settings(target: Server) -> DatabaseSettings:
    return DatabaseSettings(target.host, target.port, target.user, target.password)


@pytest.fixture
def conn(target: Server, dbname: str) -> Iterator[pymysql.Connection]:
    """Two databases with the same tables: `dbname` (reduced) and `dbname`_u (unreduced)."""
    c = target.connect()
    for db in (dbname, f"{dbname}_u"):
        q(c, f"CREATE DATABASE `{db}`")
        c.select_db(db)
        for ddl in SCHEMA.values():
            q(c, ddl)
    c.select_db(dbname)
    yield c
    for db in (dbname, f"{dbname}_u"):
        q(c, f"DROP DATABASE `{db}`")
    c.close()


def q(c: pymysql.Connection, sql: str, args: Any = None) -> list[tuple[Any, ...]]:
    with c.cursor() as cur:
        cur.execute(sql, args)
        rows = list(cur.fetchall())
    c.commit()
    return rows


def pos(i: int) -> Position:
    return Position("binlog.000001", 100 * i)


def txn(i: int, *changes: Change) -> Transaction:
    return Transaction(pos(i), 1700000000.0, changes)


def renamed(log: list[Transaction], schema: str) -> list[Transaction]:
    return [
        Transaction(t.position, t.timestamp, tuple(c.renamed(schema) for c in t.changes))
        for t in log
    ]


def dump(c: pymysql.Connection, db: str, table: str) -> list[tuple[Any, ...]]:
    return q(c, f"SELECT * FROM `{db}`.`{table}` ORDER BY 1, 2")


def fallbacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "applied unreduced" in r.getMessage()]


# -- random histories --------------------------------------------------------------------------


class History:
    """Valid origin histories over p, c2 and u (u's name unique), with the expected state."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.state: dict[str, dict[Any, tuple[Any, ...]]] = {t: {} for t in SCHEMA}
        self.n = 0

    def key(self, table: str, row: tuple[Any, ...]) -> Any:
        return row[0] if KEYLEN[table] == 1 else row[:2]

    def new_key(self, table: str) -> Any:
        if table == "c2":
            return (self.rng.randint(1, 3), self.rng.choice("xyz"))
        return self.rng.randint(1, 8)

    def row(self, table: str, key: Any) -> tuple[Any, ...]:
        self.n += 1
        if table == "p":
            return (key, self.n, self.rng.choice(["", "a", "bb", None]))
        if table == "c2":
            return (*key, self.n)
        held = {r[1] for r in self.state["u"].values()}
        free = [x for x in "abcdef" if x not in held]
        return (key, self.rng.choice(free), self.n)

    def change(self) -> Change:
        rng = self.rng
        table = rng.choice(list(SCHEMA))
        rows, cols = self.state[table], COLUMNS[table]
        roll = rng.random()
        if roll < 0.02:
            rows.clear()
            return Change("truncate", "x", table)
        if roll < 0.35:
            key = self.new_key(table)
            if key not in rows and (table != "u" or len(rows) < 6):
                new = self.row(table, key)
                rows[key] = new
                return Change("insert", "x", table, cols, (), (new,))
        if roll < 0.55 and rows:
            key = rng.choice(list(rows))
            return Change("delete", "x", table, cols, (rows.pop(key),))
        if rows:
            # An update of one or more rows; some move to a free key, u's name may move to a
            # free name (a swap of two names takes three updates, as on the origin).
            pairs = []
            for key in rng.sample(list(rows), rng.randint(1, min(3, len(rows)))):
                old = rows.pop(key)
                target = key
                if rng.random() < 0.3:
                    other = self.new_key(table)
                    if other not in rows:
                        target = other
                self.n += 1
                if table == "u" and rng.random() < 0.5:
                    held = {r[1] for r in rows.values()}
                    name = rng.choice([x for x in "abcdef" if x not in held])
                    new = (target, name, self.n)
                elif table == "c2":
                    new = (*target, self.n)
                elif table == "u":
                    new = (target, old[1], self.n)
                else:
                    new = (target, self.n, old[2])
                rows[target] = new
                pairs.append((old, new))
            return Change(
                "update",
                "x",
                table,
                cols,
                tuple(p[0] for p in pairs),
                tuple(p[1] for p in pairs),
            )
        return self.change()


def test_random_groups_reduced_equal_unreduced(
    conn: pymysql.Connection,
    dbname: str,
    settings: DatabaseSettings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "binlogsync.apply")
    history = History(20261124)
    log = [
        txn(i, *[history.change() for _ in range(history.rng.randint(1, 3))])
        for i in range(1, 1201)
    ]
    reduced = Recording(settings, f"r-{dbname}")
    plain = Recording(settings, f"u-{dbname}", reduce=False)
    with reduced, plain:
        start = 0
        while start < len(log):  # groups of 1 to 80 transactions
            end = start + history.rng.randint(1, 80)
            assert reduced.apply(renamed(log[start:end], dbname)) == log[:end][-1].position
            assert plain.apply(renamed(log[start:end], f"{dbname}_u")) == log[:end][-1].position
            start = end
    assert fallbacks(caplog) == []
    for table, rows in history.state.items():
        expected = sorted(rows.values(), key=lambda r: (r[0], r[1]))
        assert dump(conn, dbname, table) == expected
        assert dump(conn, f"{dbname}_u", table) == expected
    assert len(reduced.statements) < len(plain.statements) * 2 // 3


def test_case_insensitive_keys_reduce_as_the_target_compares_them(
    conn: pymysql.Connection,
    dbname: str,
    settings: DatabaseSettings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "binlogsync.apply")
    # 'a' and 'A' are one key on the target and two to Python: a row whose key changes case
    # leaves a delete of the old spelling and an upsert of the new one, and deletes go first.
    for db in (dbname, f"{dbname}_u"):
        q(conn, f"CREATE TABLE `{db}`.ci (name VARCHAR(4) PRIMARY KEY, v INT)")
    rng = random.Random(4)
    state: dict[str, tuple[str, int]] = {}
    log = []
    for n in range(1, 400):
        lower = rng.choice("abc")
        spelling = rng.choice([lower, lower.upper()])
        old = state.get(lower)
        if old is None:
            change = Change("insert", "x", "ci", ("name", "v"), (), ((spelling, n),))
            state[lower] = (spelling, n)
        elif rng.random() < 0.3:
            change = Change("delete", "x", "ci", ("name", "v"), (state.pop(lower),))
        else:
            state[lower] = (spelling, n)
            change = Change("update", "x", "ci", ("name", "v"), (old,), ((spelling, n),))
        log.append(txn(n, change))
    with Applier(settings, f"r-{dbname}") as reduced:
        with Applier(settings, f"u-{dbname}", reduce=False) as plain:
            for start in range(0, len(log), 7):
                reduced.apply(renamed(log[start : start + 7], dbname))
                plain.apply(renamed(log[start : start + 7], f"{dbname}_u"))
    expected = sorted(state.values(), key=lambda r: r[0].lower())
    got = q(conn, f"SELECT name, v FROM `{dbname}`.ci ORDER BY name")
    assert got == q(conn, f"SELECT name, v FROM `{dbname}_u`.ci ORDER BY name") == expected
    assert fallbacks(caplog) == []


def test_unique_values_swapped_inside_a_group_apply(
    conn: pymysql.Connection,
    dbname: str,
    settings: DatabaseSettings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "binlogsync.apply")
    cols = COLUMNS["u"]
    a, b, c = (1, "ann", 0), (2, "bob", 0), (3, "cat", 0)
    with Recording(settings, f"o-{dbname}") as applier:
        applier.apply([txn(1, Change("insert", dbname, "u", cols, (), (a, b, c)))])
        applier.statements.clear()
        log = [
            # ann and bob swap names through a free one, as the origin has to do it.
            txn(2, Change("update", dbname, "u", cols, (a,), ((1, "tmp", 1),))),
            txn(3, Change("update", dbname, "u", cols, (b,), ((2, "ann", 1),))),
            txn(4, Change("update", dbname, "u", cols, ((1, "tmp", 1),), ((1, "bob", 1),))),
            # cat's row is deleted, its name re-inserted under another key, row 3 comes back
            # with a new name.
            txn(5, Change("delete", dbname, "u", cols, (c,), ())),
            txn(6, Change("insert", dbname, "u", cols, (), ((4, "cat", 2),))),
            txn(7, Change("insert", dbname, "u", cols, (), ((3, "dan", 2),))),
            # A key change that takes over a name freed in the same group.
            txn(8, Change("update", dbname, "u", cols, ((4, "cat", 2),), ((5, "cat", 3),))),
        ]
        assert applier.apply(log) == pos(8)
    assert fallbacks(caplog) == []
    assert [s.kind for s in applier.statements] == ["delete", "upsert"]
    assert dump(conn, dbname, "u") == [
        (1, "bob", 1),
        (2, "ann", 1),
        (3, "dan", 2),
        (5, "cat", 3),
    ]


def test_a_failing_transaction_in_a_reduced_group_is_named_exactly(
    conn: pymysql.Connection, dbname: str, settings: DatabaseSettings
) -> None:
    q(conn, "CREATE TABLE chk (id INT PRIMARY KEY, v INT CHECK (v >= 0))")
    cols = ("id", "v")
    log = [txn(1, Change("insert", dbname, "chk", cols, (), ((1, 1),)))]
    for i in range(2, 9):
        log.append(
            txn(
                i,
                Change("update", dbname, "chk", cols, ((1, i - 1),), ((1, i),)),
                Change("insert", dbname, "chk", cols, (), ((i, -1 if i == 5 else i),)),
            )
        )
    errors = []
    for reduce in (True, False):
        with Applier(settings, f"o-{dbname}", reduce=reduce) as applier:
            with pytest.raises(ConstraintError) as caught:
                applier.apply(log)
            errors.append(caught.value)
            assert applier.checkpoint() is None
    assert failed_at(errors[0]) == failed_at(errors[1]) == pos(5)
    assert str(errors[0]) == str(errors[1])
    assert "4025" in str(errors[0]) and str(pos(5)) in str(errors[0])
    assert q(conn, "SELECT COUNT(*) FROM chk") == [(0,)]


def test_a_table_the_target_lacks_is_named_exactly(
    conn: pymysql.Connection, dbname: str, settings: DatabaseSettings
) -> None:
    cols = COLUMNS["p"]
    log = [
        txn(i, Change("insert", dbname, "p" if i != 3 else "nope", cols, (), ((i, i, ""),)))
        for i in range(1, 6)
    ]
    with Applier(settings, f"o-{dbname}") as applier:
        with pytest.raises(MissingTableError) as caught:
            applier.apply(log)
    assert failed_at(caught.value) == pos(3)
    assert q(conn, "SELECT COUNT(*) FROM p") == [(0,)]


def test_a_group_failing_as_its_net_change_is_applied_unreduced(
    conn: pymysql.Connection,
    dbname: str,
    settings: DatabaseSettings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    class FailsFirst(Recording):
        """The first statement fails as a duplicate would (what only the reduced form met)."""

        def _execute(self, cursor: Any, statement: Statement) -> None:
            if not self.statements:
                self.statements.append(statement)
                raise pymysql.err.IntegrityError(1062, "Duplicate entry 'x' for key 'name'")
            super()._execute(cursor, statement)

    caplog.set_level(logging.WARNING, "binlogsync.apply")
    cols = COLUMNS["p"]
    log = [
        txn(i, Change("insert", dbname, "p", cols, (), ((i % 3, i, "s"),))) for i in range(1, 10)
    ]
    with FailsFirst(settings, f"o-{dbname}") as applier:
        assert applier.apply(log) == pos(9)
    assert len(fallbacks(caplog)) == 1 and "1062" in fallbacks(caplog)[0]
    assert dump(conn, dbname, "p") == [(0, 9, "s"), (1, 7, "s"), (2, 8, "s")]
    assert q(
        conn,
        "SELECT applied_transactions FROM binlogsync.checkpoint WHERE origin = %s",
        (f"o-{dbname}",),
    ) == [(9,)]


def test_a_lost_connection_in_a_reduced_group_is_not_replayed(
    conn: pymysql.Connection,
    dbname: str,
    settings: DatabaseSettings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Killed(Recording):
        def _execute(self, cursor: Any, statement: Statement) -> None:
            if not self.statements:
                q(conn, f"KILL {self.connection_id}")
            super()._execute(cursor, statement)

    caplog.set_level(logging.WARNING, "binlogsync.apply")
    cols = COLUMNS["p"]
    log = [txn(i, Change("insert", dbname, "p", cols, (), ((i, i, ""),))) for i in (1, 2)]
    with Killed(settings, f"o-{dbname}") as applier:
        with pytest.raises(UnreachableError) as caught:
            applier.apply(log)
        # Told as today: no transaction is blamed, the caller retries the whole group.
        assert failed_at(caught.value) is None
        assert len(applier.statements) == 1 and fallbacks(caplog) == []
        assert applier.apply(log) == pos(2)
    assert dump(conn, dbname, "p") == [(1, 1, ""), (2, 2, "")]


def test_foreign_keys_and_ddl_keep_the_unreduced_path(
    conn: pymysql.Connection, dbname: str, settings: DatabaseSettings
) -> None:
    q(conn, "CREATE TABLE parent (id INT PRIMARY KEY) ENGINE=InnoDB")
    q(
        conn,
        "CREATE TABLE child (id INT PRIMARY KEY, pid INT, "
        "FOREIGN KEY (pid) REFERENCES parent (id) ON DELETE CASCADE) ENGINE=InnoDB",
    )
    with Recording(settings, f"o-{dbname}") as applier:
        applier.apply(
            [
                txn(1, Change("insert", dbname, "parent", ("id",), (), ((1,),))),
                txn(2, Change("insert", dbname, "child", ("id", "pid"), (), ((1, 1),))),
            ]
        )
        applier.statements.clear()
        # Delete and re-insert of the parent: reduced, it would be one upsert and the child
        # would stay; the target's cascade must see the delete, as the unreduced path sends it.
        applier.apply(
            [
                txn(3, Change("delete", dbname, "parent", ("id",), ((1,),))),
                txn(4, Change("insert", dbname, "parent", ("id",), (), ((1,),))),
            ]
        )
        assert [s.kind for s in applier.statements] == ["delete", "upsert"]
        assert q(conn, "SELECT COUNT(*) FROM child") == [(0,)]
        applier.statements.clear()
        applier.apply(
            [
                txn(5, Change("insert", dbname, "p", COLUMNS["p"], (), ((1, 1, ""),))),
                txn(6, Change("ddl", dbname, "p", statement="ALTER TABLE p COMMENT 'x'")),
                txn(7, Change("delete", dbname, "p", COLUMNS["p"], ((1, 1, ""),))),
                txn(8, Change("insert", dbname, "p", COLUMNS["p"], (), ((1, 2, ""),))),
            ]
        )
        assert [s.kind for s in applier.statements] == ["upsert", "delete", "upsert"]


class CountingCursor(pymysql.cursors.Cursor):
    """Remembers the statements it ran."""

    ran: list[str] = []

    def execute(self, query: str, args: Any = None) -> int:
        self.ran.append(query)
        return super().execute(query, args)


def test_foreign_keys_are_seen_across_schemas_in_one_scan_for_tables_read_together(
    conn: pymysql.Connection, dbname: str
) -> None:
    # Which tables refer to a table cannot be looked up by its name (MariaDB opens every table
    # on the server to answer): the tables read together share one scan of all foreign keys.
    other = f"{dbname}_fk"
    q(conn, "CREATE TABLE Parent (id INT PRIMARY KEY) ENGINE=InnoDB")
    q(conn, f"CREATE DATABASE `{other}`")
    try:
        q(
            conn,
            f"CREATE TABLE `{other}`.child (id INT PRIMARY KEY, pid INT, "
            f"FOREIGN KEY (pid) REFERENCES `{dbname}`.Parent (id)) ENGINE=InnoDB",
        )
        tables = TargetTables("o", "t")
        CountingCursor.ran = []
        with conn.cursor(CountingCursor) as cur:
            found = {
                name: tables.table(cur, None, schema, name).foreign_keys
                for schema, name in ((dbname, "p"), (dbname, "Parent"), (other, "child"))
            }
            assert found == {"p": False, "Parent": True, "child": True}
            scans = [s for s in CountingCursor.ran if "REFERENTIAL_CONSTRAINTS" in s]
            assert len(scans) == 1
            tables.forget()  # after an error every definition is read again, the keys too
            assert tables.table(cur, None, dbname, "Parent").foreign_keys
            scans = [s for s in CountingCursor.ran if "REFERENTIAL_CONSTRAINTS" in s]
            assert len(scans) == 2
    finally:
        q(conn, f"DROP DATABASE `{other}`")


def test_tables_with_triggers_keep_the_unreduced_path(
    conn: pymysql.Connection, dbname: str, settings: DatabaseSettings
) -> None:
    # An audit trigger sees every row change; reduced, it would see only the net change.
    q(conn, "CREATE TABLE audit (n INT NOT NULL)")
    q(conn, "INSERT INTO audit VALUES (0)")
    q(conn, "CREATE TRIGGER p_count AFTER UPDATE ON p FOR EACH ROW UPDATE audit SET n = n + 1")
    cols = COLUMNS["p"]
    with Recording(settings, f"o-{dbname}") as applier:
        applier.apply([txn(1, Change("insert", dbname, "p", cols, (), ((1, 0, ""),)))])
        log = [
            txn(i, Change("update", dbname, "p", cols, ((1, i - 2, ""),), ((1, i - 1, ""),)))
            for i in range(2, 7)
        ]
        assert applier.apply(log) == pos(6)
    assert q(conn, "SELECT n FROM audit") == [(5,)]
    assert dump(conn, dbname, "p") == [(1, 5, "")]


# -- the workload of issue 7 -------------------------------------------------------------------

SBTEST = (
    "CREATE TABLE {} (id INT NOT NULL PRIMARY KEY, k INT NOT NULL DEFAULT 0, "
    "c CHAR(120) NOT NULL DEFAULT '', pad CHAR(60) NOT NULL DEFAULT '', KEY k_1 (k))"
)
SB_COLS = ("id", "k", "c", "pad")


def sysbench_log(tables: int, rows: int, transactions: int, seed: int) -> list[Transaction]:
    """sysbench oltp_write_only's changes: per transaction an index update, a non-index
    update, a delete and the re-insert of the deleted id, each on a random table and id."""
    rng = random.Random(seed)
    letters = string.ascii_letters + string.digits

    def text(n: int) -> str:
        return "".join(rng.choices(letters, k=n))

    state = {
        f"sbtest{t}": {i: (i, i, text(20), text(10)) for i in range(1, rows + 1)}
        for t in range(1, tables + 1)
    }
    log = [
        Transaction(
            pos(1),
            1.7e9,
            tuple(
                Change("insert", "x", name, SB_COLS, (), tuple(table.values()))
                for name, table in state.items()
            ),
        )
    ]
    for n in range(2, transactions + 2):
        changes = []
        for step in ("index", "non-index", "delete"):
            name = f"sbtest{rng.randint(1, tables)}"
            table = state[name]
            i = rng.randint(1, rows)
            old = table[i]
            if step == "index":
                new = (i, old[1] + 1, old[2], old[3])
            elif step == "non-index":
                new = (i, old[1], text(20), old[3])
            else:
                changes.append(Change("delete", "x", name, SB_COLS, (old,)))
                new = (i, rng.randint(1, rows), text(20), text(10))
                changes.append(Change("insert", "x", name, SB_COLS, (), (new,)))
                table[i] = new
                continue
            changes.append(Change("update", "x", name, SB_COLS, (old,), (new,)))
            table[i] = new
        log.append(Transaction(pos(n), 1.7e9, tuple(changes)))
    return log


def com_counters(c: pymysql.Connection) -> int:
    rows = q(
        c,
        "SHOW GLOBAL STATUS WHERE Variable_name IN "
        "('Com_insert', 'Com_update', 'Com_delete', 'Com_replace')",
    )
    return sum(int(v) for _, v in rows)


def test_the_sysbench_workload_goes_in_a_handful_of_statements(
    conn: pymysql.Connection,
    dbname: str,
    settings: DatabaseSettings,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.WARNING, "binlogsync.apply")
    tables, transactions = 4, 2000
    for db in (dbname, f"{dbname}_u"):
        for t in range(1, tables + 1):
            q(conn, SBTEST.format(f"`{db}`.sbtest{t}"))
    log = sysbench_log(tables, 1000, transactions, seed=7)
    counts = {}
    for db, reduce in ((dbname, True), (f"{dbname}_u", False)):
        with Recording(settings, f"o-{db}", reduce=reduce) as applier:
            applier.apply(renamed(log[:1], db))  # the seed rows
            applier.statements.clear()
            before = com_counters(conn)
            assert applier.apply(renamed(log[1:], db)) == log[-1].position
            counts[reduce] = (len(applier.statements), com_counters(conn) - before)
    assert fallbacks(caplog) == []
    for t in range(1, tables + 1):
        assert dump(conn, dbname, f"sbtest{t}") == dump(conn, f"{dbname}_u", f"sbtest{t}")
    with capsys.disabled():
        print(
            f"\n{transactions} sysbench-like transactions (8,000 row changes, 4 tables): "
            f"statements reduced {counts[True][0]} (server Com_*: {counts[True][1]}), "
            f"unreduced {counts[False][0]} (server Com_*: {counts[False][1]})"
        )
    # Reduced: per table one delete and one upsert statement at most (2,000 rows each).
    assert counts[True][0] <= 2 * tables
    assert counts[True][1] <= 2 * tables + 1  # and the checkpoint row
    # Unreduced: about one statement per run of equal operations, so more than one per
    # transaction on this workload.
    assert counts[False][0] > transactions
    assert counts[False][1] >= counts[False][0]


def test_one_table_name_in_two_schemas_is_keyed_by_each_schemas_own_key(
    conn: pymysql.Connection,
    dbname: str,
    settings: DatabaseSettings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The reduce asks how a table is keyed once and keeps the answer for the group; `kv` in the
    # second database has the same columns but another key (v, not id), and must not be
    # reduced by the first one's: there its two rows share an id and are still two rows.
    caplog.set_level(logging.WARNING, "binlogsync.apply")
    other = f"{dbname}_u"
    q(conn, f"CREATE TABLE `{dbname}`.kv (id INT PRIMARY KEY, v INT, s VARCHAR(20))")
    q(conn, f"CREATE TABLE `{other}`.kv (id INT, v INT PRIMARY KEY, s VARCHAR(20))")
    q(conn, f"INSERT INTO `{other}`.kv VALUES (1, 10, 'a'), (1, 20, 'b')")
    columns = ("id", "v", "s")
    group = [
        txn(1, Change("insert", dbname, "kv", columns, (), ((1, 10, "x"),))),
        txn(2, Change("update", other, "kv", columns, ((1, 10, "a"),), ((1, 10, "A"),))),
        txn(3, Change("update", other, "kv", columns, ((1, 20, "b"),), ((1, 20, "B"),))),
        txn(4, Change("update", dbname, "kv", columns, ((1, 10, "x"),), ((1, 11, "y"),))),
    ]
    with Recording(settings, f"r-{dbname}") as applier:
        assert applier.apply(group) == pos(4)
    assert fallbacks(caplog) == []
    assert dump(conn, dbname, "kv") == [(1, 11, "y")]
    assert dump(conn, other, "kv") == [(1, 10, "A"), (1, 20, "B")]
