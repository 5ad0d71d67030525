"""The client agent: capture on an origin (origin.py), apply on a target (target.py), one run
loop that owns the hub link (agent.py). One process may be both origin and target."""
