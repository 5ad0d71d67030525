"""binlogsync: real-time MySQL/MariaDB synchronization over ZeroMQ.

The library behind the `binlogsync` command: capture on origins, the hub, apply on targets.
Nothing runs at import time.
"""

__version__ = "0.2.0"
