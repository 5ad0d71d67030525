"""`python -m binlogsync_dev`: the dev harness's commands (cli.py)."""

import sys

from binlogsync_dev.cli import main

sys.exit(main())
