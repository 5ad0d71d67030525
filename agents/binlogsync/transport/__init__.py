"""ZeroMQ transport: message frames (frames.py), CURVE keys (curve.py), the client's link to
the hub (link.py). docs/protocol.md is the reference for what travels."""
