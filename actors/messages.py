"""The stack's message record: the engine's fields plus the columns Pastry and Scribe
declare (emulator.batch.message_dtype merges them by name), and which of them the engine's
per-hop `message` log keeps.

The scenario runner hands ``MSG_DTYPE`` and ``MESSAGE_LOG_FIELDS`` to the Emulator; the
protocols build their messages with the same record. The declared order keeps the record's
layout what it was when the engine owned these fields.
"""

from __future__ import annotations

from emulator.batch import message_dtype

# Pastry: how a message is sent (0 direct, 1 routed), the node that started a routed
# message, its 128-bit key, the routing progress (overlay hops, path delay), and the
# application's fields it carries along a route (group, a, b, c: type-specific values)
PASTRY_MESSAGE_FIELDS = [
    ("mode", "i1"), ("origin", "i4"), ("key_hi", "u8"), ("key_lo", "u8"), ("group", "i4"),
    ("hops", "i2"), ("path_us", "i8"), ("a", "i8"), ("b", "i8"), ("c", "i8"),
]

# Scribe: the group a message is about (-1: none) and type-specific values (credentials,
# sequence numbers, node ids; see actors/scribe/types.py)
SCRIBE_MESSAGE_FIELDS = [("group", "i4"), ("a", "i8"), ("b", "i8"), ("c", "i8")]

MSG_DTYPE = message_dtype(PASTRY_MESSAGE_FIELDS, SCRIBE_MESSAGE_FIELDS)

# The per-hop message log keeps each hop's group: the analysis counts tree traffic per group
MESSAGE_LOG_FIELDS = ("group",)
