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
# application's fields it carries along a route (group, and a, b, c: the type-specific
# columns, named per message type in the protocols' types modules, see TypeFields)
PASTRY_MESSAGE_FIELDS = [
    ("mode", "i1"), ("origin", "i4"), ("key_hi", "u8"), ("key_lo", "u8"), ("group", "i4"),
    ("hops", "i2"), ("path_us", "i8"), ("a", "i8"), ("b", "i8"), ("c", "i8"),
]

# Scribe: the group a message is about (-1: none) and the type-specific columns
# (credentials, sequence numbers, node ids: named per type in actors/scribe/types.py)
SCRIBE_MESSAGE_FIELDS = [("group", "i4"), ("a", "i8"), ("b", "i8"), ("c", "i8")]

MSG_DTYPE = message_dtype(PASTRY_MESSAGE_FIELDS, SCRIBE_MESSAGE_FIELDS)

# The per-hop message log keeps each hop's group: the analysis counts tree traffic per group
MESSAGE_LOG_FIELDS = ("group",)

# The columns whose meaning depends on the message type
TYPE_SPECIFIC_COLUMNS = ("a", "b", "c")


class TypeFields:
    """What one message type keeps in the type-specific columns a, b, c: a subclass per
    type (in actors/pastry/types.py, actors/scribe/types.py) names each column the type
    uses, ``name = "a"``, with a comment saying what the value is. Handlers read
    ``m[JoinAck.acl]``; senders pass ``**JoinAck.fields(acl=..., parent_seq=...)`` to
    ``ctx.send`` / ``ctx.timer`` / the overlay's ``send`` and ``route``. Names only: the
    record, its columns and every message stay as they are. A subclass inherits the
    names of its bases (types with the same fields).
    """

    _columns: dict[str, str] = {}   # name -> column, filled per subclass

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        names = {k: getattr(cls, k) for k in dir(cls)
                 if not k.startswith("_") and isinstance(getattr(cls, k), str)}
        bad = {k: v for k, v in names.items() if v not in TYPE_SPECIFIC_COLUMNS}
        if bad:
            raise TypeError(f"{cls.__name__}: {bad} are not type-specific columns "
                            f"{TYPE_SPECIFIC_COLUMNS}")
        if len(set(names.values())) < len(names):
            raise TypeError(f"{cls.__name__}: two names for one column: {names}")
        cls._columns = names

    @classmethod
    def fields(cls, **values) -> dict:
        """``{column: value}`` of named values, e.g. ``JoinAck.fields(acl=x)`` is
        ``{"a": x}``: the keyword fields of a send (one dict per call, not per message)."""
        try:
            return {cls._columns[k]: v for k, v in values.items()}
        except KeyError as e:
            raise TypeError(f"{cls.__name__} has no field {e.args[0]!r} "
                            f"(it has {sorted(cls._columns)})") from None
