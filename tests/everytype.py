"""A table with a column of every type binlogsync carries, and rows at each type's edges: NULLs,
zero and partial dates, text with every byte LOAD DATA escapes, a literal `\\N`, 4-byte utf-8,
a latin1 column. The seed's row reader and its text form are both held to it."""

from typing import Any

COLUMNS = """
    id INT PRIMARY KEY, ti TINYINT, su SMALLINT UNSIGNED, mi MEDIUMINT, bi BIGINT UNSIGNED,
    de DECIMAL(65,30), fl FLOAT, db DOUBLE, bt BIT(12), yr YEAR,
    d DATE, dt DATETIME(6), ts TIMESTAMP(3) NULL, tm TIME(6),
    ch CHAR(10), vc VARCHAR(300), bn BINARY(4), vb VARBINARY(300),
    tx TEXT, bl MEDIUMBLOB, en ENUM('x','y'), st SET('a','b','c'), js JSON, l1 VARCHAR(20) CHARACTER SET latin1
"""
ROWS = [
    "(1, -128, 65535, -8388608, 18446744073709551615, "
    "'-12345678901234567890.123456789012345678901234567890', 1.17549e-38, -2.2250738585072014e-308, "
    "b'101010101010', 1901, '1000-01-01', '9999-12-31 23:59:59.999999', '2038-01-19 03:14:07.999', "
    "'-838:59:59.000000', 'ü', REPEAT('é', 300), x'00ff0001', x'', 'line\\nbreak ''q''', x'00', "
    "'y', 'a,c', '{\"k\": [1, 2.5, \"🚀\"]}', 'ü')",
    "(2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
    "NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
    "(3, 0, 0, 0, 0, 0, 0, 0, b'0', 0, '0000-00-00', '0000-00-00 00:00:00', NULL, '00:00:00', '', "
    "'', x'00000000', x'', '', x'', 'x', '', '[]', '')",
    "(4, 1, 1, 1, 1, 0.5, 3.14159, 1e300, b'1', 2155, '2024-02-29', '2024-00-10 00:00:00', "
    "'1970-01-01 00:00:01.5', '123:00:00.5', 'x', 'y', x'01020304', x'ff', REPEAT('t', 70000), "
    "REPEAT(x'ab', 300), 'x', 'a,b,c', 'null', 'x')",
    # Every byte LOAD DATA escapes, a literal \N, text that looks like NULL, 4-byte utf-8.
    "(7, -1, 7, 7, 7, '-0.000000000000000000000000000001', -3.4028235e38, 5e-324, b'111111111111', "
    "2000, '2024-02-31', '2024-01-31 00:00:00', '2024-06-01 12:00:00', '-00:00:00.5', "
    "'\\\\N', 'a\\tb\\\\c\\rd\\0e\\nf', x'5c4e0a09', x'5c', '\\\\N\\\\', x'0a5c090d', '', 'b', "
    "'\"\\\\\\\\t🐬\"', 'é\\tö\\\\')",
]


def create(cur: Any, dbname: str) -> None:
    """The database `dbname` with the table `t` of COLUMNS holding ROWS."""
    cur.execute("SET SESSION sql_mode = ''")  # zero and partial dates
    cur.execute(f"CREATE DATABASE `{dbname}`")
    cur.execute(f"CREATE TABLE `{dbname}`.t ({COLUMNS})")
    cur.execute(f"INSERT INTO `{dbname}`.t VALUES {', '.join(ROWS)}")
