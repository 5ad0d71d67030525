"""The values reconcile's options may take, in a module of their own so the command line
(options.py) can offer them without importing the modules that use them (PyMySQL and the rest:
0.15 s on every `binlogsync reconcile`, a warm server's client included)."""

from __future__ import annotations

JSON_MODES = ("text", "value")  # checksums.py: how JSON columns are compared
HASHES = ("crc", "sha1", "sha256")  # checksums.py: the row hashes
HASH_CHOICES = ("auto", *HASHES)
PORTABLE = "sha256"  # the hash whose encoding PostgreSQL computes too
PIN_MODES = ("auto", "checkpoint", "gtid", "none")  # pinning.py
