"""Engine adapters: one per kind of database a target (or a source) is, the only code that
knows its engine (base.py says what the exactly-once core needs of one)."""
