"""A protocol parameter, declared once: its type, default, valid values and meaning.

Each protocol declares its parameters next to its code (``actors.pastry.protocol.PARAMETERS``,
``actors.scribe.application.PARAMETERS``) and checks the dicts it is given against them;
the scenario schema (scenarios/config.py) composes its [pastry] and [scribe] sections from
the same declarations, so every default, range and help text exists in one place.

A declaration describes the *setting*, the value a scenario file holds. ``means`` maps a
setting value to the value the protocol works with where the two differ (Scribe's
``heartbeat_us = 0`` is ``None``: no repair); a protocol takes either.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field

TYPE_WORDS = {int: "an integer", float: "a number", bool: "true/false", str: "a string",
              list: "a list"}


def type_ok(t: type, v) -> bool:
    """``v`` is a value of setting type ``t`` (numpy scalars count; a bool is not a number;
    a number is finite)."""
    if t is bool:
        return isinstance(v, bool)
    if isinstance(v, bool):
        return False
    if t is int:
        return isinstance(v, numbers.Integral)
    if t is float:
        return isinstance(v, numbers.Real) and math.isfinite(v)
    return isinstance(v, t)


def type_problem(name: str, t: type, v) -> str | None:
    """None if ``v`` is of setting type ``t`` (:func:`type_ok`), else one line saying why
    not."""
    if type_ok(t, v):
        return None
    if t is float and isinstance(v, numbers.Real) and not isinstance(v, bool):
        return f"{name} must be a finite number, got {v!r}"
    return f"{name} must be {TYPE_WORDS[t]}, got {v!r}"


@dataclass(frozen=True)
class Param:
    """One parameter. Valid values: of ``type``; among ``choices`` if given; otherwise
    ``>= low`` (``> low`` if ``strict``), and even if ``even``."""

    type: type
    default: object
    help: str
    low: float | None = None
    strict: bool = False
    even: bool = False
    choices: tuple = ()
    means: dict = field(default_factory=dict, hash=False)
    # a named set of other parameters' values per choice (Pastry's ``join``): see
    # :func:`with_presets`
    presets: dict = field(default_factory=dict, hash=False)

    def in_range(self, v) -> bool:
        """``v`` (already of the declared type) is a valid value."""
        if self.choices:
            return v in self.choices
        if self.low is not None and not (v > self.low if self.strict else v >= self.low):
            return False
        return not (self.even and v % 2)

    def valid(self) -> str:
        """The valid values in words, e.g. ``an even integer >= 2``, ``oracle | protocol``."""
        if self.choices:
            return " | ".join(str(c) for c in self.choices)
        words = TYPE_WORDS[self.type]
        if self.even:
            words = "an even " + words.removeprefix("an ")
        if self.low is not None:
            low = int(self.low) if float(self.low).is_integer() else self.low
            words += f" {'>' if self.strict else '>='} {low}"
        return words

    def describe(self) -> str:
        """What the parameter is and which values it takes: the tail of an error line."""
        return f"{self.valid()} ({self.help})"

    def problem(self, name: str, v) -> str | None:
        """None if ``v`` is a valid setting of ``name``, else one line saying why not."""
        if not self.choices and (why := type_problem(name, self.type, v)):
            return why
        if not type_ok(self.type, v) or not self.in_range(v):
            return f"{name} = {v!r} is out of range: {self.describe()}"
        return None

    def is_meant(self, v) -> bool:
        """``v`` is already a protocol value that a setting stands for (``None``, ...)."""
        return any(v is x for x in self.means.values())

    def value(self, v):
        """The protocol's value of setting ``v``."""
        for setting, meant in self.means.items():
            if type_ok(self.type, v) and v == setting:
                return meant
        return v


CUSTOM = "custom"


def with_presets(declared: dict[str, Param], given: dict, prefix: str = "") -> dict:
    """``given`` (a section as written, possibly partial) with its presets resolved.

    A parameter with ``presets`` names a set of other parameters' values per choice, e.g.
    Pastry's ``join = "2001"``. Given by name, a preset fills the keys it sets that are not
    given, and a given key that disagrees with it is a one-line ValueError (``prefix``
    names the section). Not given, its name is inferred from the values the keys end up
    with (given, else their defaults): the preset they all agree with, else ``custom``.
    So an old section with only the keys resolves to the same run, and ``custom`` is
    never a silent default. O(parameters x preset keys)."""
    out = dict(given)
    for name, p in declared.items():
        if not p.presets:
            continue
        if name in given:
            preset = p.presets.get(given[name]) if isinstance(given[name], str) else None
            for key, v in (preset or {}).items():
                if key in given and given[key] != v:
                    raise ValueError(
                        f"{prefix}{key} = {given[key]!r} contradicts {prefix}{name} = "
                        f"{given[name]!r}, which sets {v!r}; drop one of them, or set "
                        f"{prefix}{name} = {CUSTOM!r}")
                out[key] = v
            continue
        keys = {key for preset in p.presets.values() for key in preset}
        vals = {key: given.get(key, declared[key].default) for key in keys}
        out[name] = next((choice for choice, preset in p.presets.items()
                          if all(vals[k] == v for k, v in preset.items())), CUSTOM)
    return out


def checked(owner: str, declared: dict[str, Param], params: dict) -> dict:
    """``params`` with every name of ``declared`` present and valid, as the protocol's
    values (``Param.value``); a one-line ValueError, prefixed with ``owner``, names the
    first unknown, missing or invalid parameter. Names outside ``declared`` are the
    caller's to check first (they are refused here)."""
    unknown, missing = set(params) - set(declared), set(declared) - set(params)
    if unknown:
        raise ValueError(f"{owner}: unknown parameter(s) {sorted(unknown)}; valid: "
                         f"{', '.join(declared)}")
    if missing:
        raise ValueError(f"{owner}: missing parameter(s) {sorted(missing)} (complete "
                         "parameters come from the scenario schema: "
                         "scenarios.config.protocol_params)")
    try:
        with_presets(declared, params)
    except ValueError as e:
        raise ValueError(f"{owner}: {e}") from None
    out = {}
    for name, p in declared.items():
        v = params[name]
        if not p.is_meant(v):
            why = p.problem(name, v)
            if why is not None:
                raise ValueError(f"{owner}: {why}")
            v = p.value(v)
        out[name] = v
    return out

