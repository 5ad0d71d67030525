"""How large a message may be on the ZeroMQ hops, in one place.

`MAX_MESSAGE_BYTES` is the default of `max_message_bytes` (hub and clients) and what the tools
accept from the hub; a socket's `maxmsgsize` is that plus `FRAME_ROOM`, the header and frames
around the bodies, so a body of the full size still fits in its message.
"""

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
FRAME_ROOM = 64 * 1024
