"""The words a run's summary and report use for its groups: the JSAC 2002 vocabulary
(groups, members, multicast messages) or the NGC 2001 publish/subscribe one (topics,
subscribers, events).

A scenario picks one with `report.vocabulary` (scenarios/config.py); it is read back from
the run's config.toml, so `report RUN_DIR` and the console summary agree with the run.
Only labels meant for people change: CSV columns, JSON keys and file names stay the same.
Pure stdlib: imported by cli.py and analysis/report.py.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from pathlib import Path

DEFAULT = "groups"
# word (as the "groups" vocabulary writes it) -> the pubsub word; longer phrases first
TERMS: dict[str, dict[str, str]] = {
    "groups": {},
    "pubsub": {
        "multicast messages": "events",
        "multicast message": "event",
        "groups": "topics",
        "group": "topic",
        "members": "subscribers",
        "member": "subscriber",
        "joins": "subscriptions",
        "scribe_join": "scribe subscriptions",   # the join traffic's link-stress label
    },
}


def vocabulary_of(run_dir: str | Path) -> str:
    """The run's `report.vocabulary` (DEFAULT when its config.toml has none or is absent)."""
    path = Path(run_dir) / "config.toml"
    try:
        cfg = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return DEFAULT
    v = (cfg.get("report") or {}).get("vocabulary", DEFAULT)
    return v if v in TERMS else DEFAULT


def _pattern(terms: dict[str, str]) -> re.Pattern | None:
    if not terms:
        return None
    words = sorted(terms, key=len, reverse=True)
    # whole words only: "group_size" (a column) and "groupId" stay as they are
    return re.compile(r"(?<![\w-])(" + "|".join(re.escape(w) for w in words) + r")(?![\w])",
                      re.IGNORECASE)


def translate(text: str, vocabulary: str = DEFAULT) -> str:
    """`text` in `vocabulary`'s words (case of the first letter kept)."""
    terms = TERMS.get(vocabulary, {})
    pat = _pattern(terms)
    if pat is None:
        return text

    def swap(m: re.Match) -> str:
        word = terms[m.group(0).lower()]
        return word[0].upper() + word[1:] if m.group(0)[0].isupper() else word
    return pat.sub(swap, text)


def translator(run_dir: str | Path) -> Callable[[str], str]:
    """A function that puts labels into the run's vocabulary (identity for "groups")."""
    vocabulary = vocabulary_of(run_dir)
    return lambda text: translate(text, vocabulary)


__all__ = ["DEFAULT", "TERMS", "translate", "translator", "vocabulary_of"]
