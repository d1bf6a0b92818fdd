"""Scribe multicast on the overlay's common API: groups, trees, multicast, repair,
tree-shaping policies, reliable delivery (see docs/scribe.md, and docs/ARCHITECTURE.md
"Scribe's parts")."""

import emulator  # noqa: F401 (first: numba's cache keyed by every kernel source)

from .application import Scribe
from .groups import group_table
from .requests import (
    collapse_requests,
    create_requests,
    join_requests,
    leave_requests,
    multicast_requests,
)
from .types import TYPE_NAMES
from .wire import ScribeError

__all__ = [
    "TYPE_NAMES",
    "Scribe",
    "ScribeError",
    "collapse_requests",
    "create_requests",
    "group_table",
    "join_requests",
    "leave_requests",
    "multicast_requests",
]
