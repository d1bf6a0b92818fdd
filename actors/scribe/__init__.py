"""Scribe multicast on Pastry: groups, trees, multicast, collapse (see docs/scribe.md)."""

from .groups import group_table, sha1_id128
from .protocol import Scribe, ScribeError
from .requests import (collapse_requests, create_requests, join_requests, leave_requests,
                       multicast_requests)
from .types import TYPE_NAMES

__all__ = ["Scribe", "ScribeError", "TYPE_NAMES", "group_table", "sha1_id128",
           "create_requests", "join_requests", "leave_requests", "multicast_requests",
           "collapse_requests"]
