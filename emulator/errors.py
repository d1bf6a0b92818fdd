"""An exception told in one line, for error messages, warnings and logs that quote another
error: the engine's, the runtime's and the scenario runner's all use this one rule."""

from __future__ import annotations


def first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message (surrounding blank space dropped), or the name
    of its type when the message is empty."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
