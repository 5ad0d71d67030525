"""The server agent: durable log per origin (log.py), routing rules (routing.py), delivery
cursors per target (cursors.py) and the run loop around one ROUTER socket (server.py)."""
