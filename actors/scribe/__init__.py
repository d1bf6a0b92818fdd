"""Scribe multicast on Pastry: groups, trees, multicast, collapse (see docs/scribe.md)."""

from .groups import group_table, sha1_id128
from .protocol import Scribe, ScribeError
from .requests import (
                       collapse_requests,
                       create_requests,
                       join_requests,
                       leave_requests,
                       multicast_requests,
)
from .types import TYPE_NAMES

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
                       "sha1_id128",
]
