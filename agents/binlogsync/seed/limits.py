"""The seed's default sizes (apart from run.py, so that building the command line imports no
more than argparse needs)."""

DEFAULT_CHUNK_ROWS = 10_000
DEFAULT_CHUNK_BYTES = 16 * 1024 * 1024
DEFAULT_WINDOW = 4
DEFAULT_PARALLEL = 2  # chunk readers: one per core of a small origin host
