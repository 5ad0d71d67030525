"""The seed's default sizes (apart from run.py, so that building the command line imports no
more than argparse needs)."""

DEFAULT_CHUNK_ROWS = 10_000
DEFAULT_CHUNK_BYTES = 16 * 1024 * 1024
DEFAULT_WINDOW = 4
# Chunk readers. One: where the target's apply sets the pace (as on the 2-core machine of
# docs/benchmarks.md, where 2 took as long and cost more CPU), more readers only add work.
DEFAULT_PARALLEL = 1
