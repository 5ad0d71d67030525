"""Seeding a target through the hub: the origin's current rows, while it keeps taking writes.

    tables.py    which tables to seed (the hub's routes to the target, --tables), their keys
    chunks.py    one chunk: a consistent snapshot at binlog position P, the next rows by key
    sender.py    chunks to the hub as REPAIRs with a `seed` map, a few in flight, confirmed
    run.py       the driver: resume from the hub's records, rate limit, retries, progress
    progress.py  the progress bar (rows, rows/s, ETA per table)

The mechanism is the reconciliation's repair (reconcile/repair.py, hub/repairs.py): a chunk's
full row images are applied by the target's normal apply path, and its checkpoint goes back to
min(checkpoint, P), so the hub replays everything after P over them. Rows written after P end in
their latest image; nothing is lost and nothing counts twice. A table's first chunk also empties
the target's table (after a confirmed first chunk nothing of the old rows is left; a later chunk
never empties it again), and the first chunk of a seed of every routed table resets the
checkpoint to P even when the target was behind the hub's log.
"""
