"""The `crc` row hash on a real MariaDB: the value each row gets is the one its definition
says (the session variable is set before it is read), and a chunk's fold (BIT_XOR of the
non-linear a·(b + 1)) sees two rows swap values where pt-table-checksum's XOR of CRC32s cannot. Every hash tells zero dates apart from
NULL and from 1970-01-01."""

from __future__ import annotations

import pytest

from binlogsync.reconcile.checksums import Encoding, bucket_sql, checksum_sql, row_hashes_sql
from binlogsync.reconcile.chunks import Chunk, buckets
from binlogsync.reconcile.schema import describe, pair
from binlogsync_dev.sandbox import Server
from reconcile_kit import ROWS, execute, make_table

pytestmark = pytest.mark.integration


def _encoding(server: Server, db: str, table: str = "t", hash: str = "crc") -> Encoding:
    with server.connect(db) as conn, conn.cursor() as cur:
        found = describe(cur, db, table)
    assert found is not None
    return Encoding.of([pair(found, found, "itself")], "text", hash)


def test_every_row_gets_the_hash_its_definition_says(origin: Server, dbname: str) -> None:
    make_table([origin], dbname)  # every column type, NULLs included
    encoding = _encoding(origin, dbname)
    enc = encoding.row()
    direct = f"(CRC32({enc}) * (CRC32C({enc}) + 1))"
    with origin.connect(dbname) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT id, {encoding.row_hash()}, {direct} FROM t ORDER BY id")
        rows = cur.fetchall()
        assert len(rows) == ROWS
        assert all(via_variable == computed for _id, via_variable, computed in rows)
        assert len({h for _id, h, _c in rows}) == ROWS  # and no two rows alike
        # The largest value a·(b + 1) can take still fits BIGINT UNSIGNED.
        top = "CAST(4294967295 AS UNSIGNED)"  # CRC32's and CRC32C's type: INT UNSIGNED
        cur.execute(f"SELECT {top} * ({top} + 1)")
        assert cur.fetchone()[0] == 2**64 - 2**32


def test_a_swap_between_two_rows_shows_in_the_chunk_checksum(origin: Server, dbname: str) -> None:
    ddl = "CREATE TABLE {t} (id INT PRIMARY KEY, v CHAR(8) NOT NULL)"
    execute(
        origin,
        None,
        f"CREATE DATABASE `{dbname}`",
        f"USE `{dbname}`",
        ddl.format(t="a"),
        ddl.format(t="b"),
        "INSERT INTO a VALUES (1, 'aaaaaaaa'), (2, 'bbbbbbbb'), (3, 'cccccccc')",
        "INSERT INTO b VALUES (1, 'bbbbbbbb'), (2, 'aaaaaaaa'), (3, 'cccccccc')",  # 1 and 2 swap
    )
    with origin.connect(dbname) as conn, conn.cursor() as cur:
        sums = {}
        for table in ("a", "b"):
            for hash in ("crc", "sha1", "sha256"):
                cur.execute(
                    checksum_sql(dbname, table, _encoding(origin, dbname, table, hash), "TRUE")
                )
                sums[(table, hash)] = cur.fetchone()
            # pt-table-checksum's fold of the same encoding: linear, so the swap cancels.
            cur.execute(
                f"SELECT COUNT(*), BIT_XOR(CRC32({_encoding(origin, dbname, table).row()})) FROM {table}"
            )
            sums[(table, "xor")] = cur.fetchone()
    assert sums[("a", "xor")] == sums[("b", "xor")]
    assert sums[("a", "crc")] != sums[("b", "crc")]
    assert sums[("a", "sha1")] != sums[("b", "sha1")]
    assert sums[("a", "sha256")] != sums[("b", "sha256")]


def test_zero_dates_compare_equal_and_a_zero_against_null_or_1970_differs(
    origin: Server, dbname: str
) -> None:
    """The encoding takes the server's text of a date, so zero, partial and invalid dates
    compare as themselves: alike when both sides hold one, different from NULL and from
    1970-01-01 (what capture once made of them)."""
    ddl = "CREATE TABLE {t} (id INT PRIMARY KEY, d DATE, dtm DATETIME(6), ts TIMESTAMP(3) NULL)"
    zero = "'0000-00-00', '0000-00-00', '0000-00-00'"
    execute(
        origin,
        None,
        f"CREATE DATABASE `{dbname}`",
        f"USE `{dbname}`",
        "SET SESSION sql_mode = 'ALLOW_INVALID_DATES', time_zone = '+00:00'",
        ddl.format(t="a"),
        ddl.format(t="b"),
        f"INSERT INTO a VALUES (1, {zero}), (2, '2024-00-10', '2024-05-00 10:11:12.5', "
        f"'0000-00-00'), (3, {zero}), (4, '2004-04-31', '0000-00-00', NULL), (5, {zero}), "
        f"(6, {zero})",
        f"INSERT INTO b VALUES (1, {zero}), (2, '2024-00-10', '2024-05-00 10:11:12.5', "
        f"'0000-00-00'), (3, NULL, '0000-00-00', '0000-00-00'), (4, '2004-04-31', "
        "'1970-01-01 00:00:00', NULL), (5, '0000-00-00', '0000-00-00', '1970-01-01 00:00:01'), "
        "(6, '0000-00-00', '0000-00-00 00:00:00.000001', '0000-00-00')",
    )
    with origin.connect(dbname) as conn, conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        for hash in ("crc", "sha1", "sha256"):
            hashes = {}
            for table in ("a", "b"):
                encoding = _encoding(origin, dbname, table, hash)
                cur.execute(row_hashes_sql(dbname, table, ("id",), encoding, "TRUE"))
                hashes[table] = dict(cur.fetchall())
            same = sorted(i for i in hashes["a"] if hashes["a"][i] == hashes["b"][i])
            assert same == [1, 2], hash


@pytest.mark.parametrize("hash", ["crc", "sha1"])
def test_one_pass_buckets_are_the_pieces_checksummed_one_by_one(
    origin: Server, dbname: str, hash: str
) -> None:
    """The one-pass narrowing of a differing chunk (tasks._bucketed): each bucket's count and
    fold from `bucket_sql` equal the checksum of the piece `chunks.buckets` gives it, rows
    below and above the extent used (as the other side may hold) included."""
    make_table([origin], dbname)
    encoding = _encoding(origin, dbname, hash=hash)
    with origin.connect(dbname) as conn, conn.cursor() as cur:
        cur.execute("SELECT MIN(id), MAX(id) FROM t")
        low, high = (int(v) for v in cur.fetchone())
        for chunk in (Chunk(0, "0", None, None), Chunk(0, "1", (low + 100,), (high - 50,))):
            # An extent narrower than the rows: the first and last buckets are open-ended.
            width, pieces = buckets(chunk, low + 200, high - 300, 7)
            assert len(pieces) == 7
            where, params = chunk.where(("id",))
            last = len(pieces) - 1
            cur.execute(
                bucket_sql(dbname, "t", "id", encoding, where),
                [low + 200, low + 200 + last * width, last, low + 200, width, *params],
            )
            per_bucket = {int(b): (int(n), total) for b, n, total in cur.fetchall()}
            seen = 0
            for b, piece in enumerate(pieces):
                w, p = piece.where(("id",))
                cur.execute(checksum_sql(dbname, "t", encoding, w), p)
                count, total = cur.fetchone()
                assert per_bucket.get(b, (0, 0)) == (count, total)
                seen += count
            cur.execute(f"SELECT COUNT(*) FROM t WHERE {where}", params)
            assert seen == cur.fetchone()[0]
