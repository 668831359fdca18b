"""What values a setting or an option may take (:class:`Domain`) and the one check of a value
against it (:func:`fault`).

Why one module for both: the config's settings (:mod:`flowzoo.config.fields`) and the envs'
options (:class:`flowzoo.envs.options.Opt`) describe their values the same way and judge
them with the same code, each wording its own error. It imports nothing of the package, so
the environment side and the config (which builds on the environment side) both reach it.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Domain", "fault", "native", "problem"]

_KINDS = {
    int: "an int",
    float: "a number",
    str: "a string",
    bool: "a bool",
    dict: "a table (a JSON object)",
    list: "a list",
}


@dataclass(frozen=True)
class Domain:
    """The values a setting may take.

    ``type``: its Python type (``float`` also takes an int; only ``bool`` takes a bool).
    Numbers lie in ``lo..hi`` (``lo_open``: ``lo`` itself excluded; ``finite``: nan and inf
    refused) or are one of ``also``. ``choices``: every valid value (a function for a registry
    that can grow). A dict's values, or a list's items, each lie in ``each``; ``keys`` makes a
    dict a table with these keys only, each value in its own domain. ``what`` names the type in
    an error where the plain name would say too little."""

    type: type
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    finite: bool = True
    also: tuple[float, ...] = ()
    choices: tuple[str, ...] | Callable[[], Sequence[str]] | None = None
    each: Domain | None = None
    keys: Mapping[str, Domain] | None = None
    nonempty: bool = False
    what: str = ""

    @property
    def kind(self) -> str:
        """The type as an error names it ("an int", "a table of settings")."""
        return self.what or _KINDS.get(self.type, self.type.__name__)

    @property
    def bounds(self) -> str:
        """The range as an error and ``--help`` say it ("in 1..4,096", "in (0, 1]",
        "a finite number >= 0"); empty when the type is the whole domain."""
        if self.lo is None and self.hi is None:
            return ""
        if self.lo is None:  # an upper bound alone
            s = f"<= {self.hi:,}" if self.type is int else f"a finite number <= {self.hi:g}"
        elif self.type is int:
            s = f"in {self.lo:,}..{self.hi:,}" if self.hi is not None else f">= {self.lo}"
        elif self.hi is not None:
            s = f"in {'(' if self.lo_open else '['}{self.lo:g}, {self.hi:g}]"
        else:
            s = f"{'a finite number ' if self.finite else ''}{'>' if self.lo_open else '>='} {self.lo:g}"
        return " or ".join([*(f"{a:g}" for a in self.also), s])

    def valid(self) -> tuple[str, ...] | None:
        """The choices, listed now (a registry's current ids)."""
        c = self.choices
        return tuple(c()) if callable(c) else c

    @property
    def described(self) -> str:
        """The whole domain in words ("an int in 1..64", "a finite number >= 0", "one of
        'a', 'b'"): what an error says a value must be."""
        valid = self.valid()
        if valid is not None:
            return "one of " + ", ".join(map(repr, valid))
        b = self.bounds
        return b if b.startswith(("a ", "an ")) else " ".join(x for x in (self.kind, b) if x)


def _of_type(v: Any, t: type) -> bool:
    if isinstance(v, bool):  # True is an int to Python; a count of True is a typo
        return t is bool
    if t is float:
        return isinstance(v, (int, float))
    return isinstance(v, t)


def _in_range(v: float, d: Domain) -> bool:
    if v in d.also:
        return True
    if d.finite and d.type is float and not _finite(v):
        return False
    if d.lo is not None and not (v > d.lo if d.lo_open else v >= d.lo):
        return False  # nan fails every comparison: refused here too
    return d.hi is None or v <= d.hi


def _finite(x: float) -> bool:
    """Whether a number is a finite float (an int too large for a float is not)."""
    try:
        return math.isfinite(x)
    except OverflowError:
        return False


def native(value: Any, _depth: int = 0) -> Any:
    """``value`` with every NumPy scalar (at any depth of dicts, lists and tuples) replaced by
    its Python twin: ``np.int64(3)`` -> ``3``, ``np.bool_(True)`` -> ``True``. The type checks
    then judge the Python value, so a NumPy bool is still refused where an int is meant."""
    np = sys.modules.get("numpy")
    if np is not None and isinstance(value, np.generic):
        v = value.item()
        if isinstance(v, np.floating):  # a longdouble's item() is itself: as a float
            return float(v)
        return v
    if _depth > 8 or type(value) not in (dict, list, tuple):  # deeper: left to the type checks
        return value
    if isinstance(value, dict):
        return {native(k, _depth + 1): native(v, _depth + 1) for k, v in value.items()}
    return type(value)(native(v, _depth + 1) for v in value)


def _show(v: Any) -> str:
    return f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else repr(v)


def fault(v: Any, d: Domain) -> str | None:
    """How ``v`` falls outside ``d`` at its top level: ``"choice"``, ``"type"`` or
    ``"range"`` (None: it does not). The one check of a value against a domain, for the
    config's settings (:func:`problem`) and the envs' options
    (:class:`flowzoo.envs.options.Opt`), each of which words its own error."""
    valid = d.valid()
    if valid is not None:
        if not _of_type(v, d.type):
            return "type"
        return None if v in valid else "choice"
    if not _of_type(v, d.type):
        return "type"
    if d.type in (int, float) and not _in_range(v, d):
        return "range"
    if d.type is str and "\0" in v:
        return "nul"
    return None


def problem(path: str, v: Any, d: Domain, entry: bool = False) -> str | None:
    """What is wrong with value ``v`` of setting ``path`` under ``d`` (None: nothing), naming
    the setting, the bad value and what is valid. ``entry``: ``v`` is one value of a map."""
    why = fault(v, d)
    valid = d.valid()
    if valid is not None:
        if why:
            shown = ", ".join(c if c else '""' for c in valid)
            return f"unknown {path} {v!r}; valid: {shown}"
        return None
    if why == "type":
        return f"{path} must be {d.kind}, got {v!r}"
    if why == "nul":
        return f"{path} must be {d.kind} without NUL characters, got {v!r}"
    if d.nonempty and not v:
        return f"{path} must be {d.kind}, not empty"
    if why == "range":
        lead = f"{path} is out of range: must be" if entry else f"{path} must be"
        return f"{lead} {d.bounds}, got {_show(v)}"
    if d.type is dict:
        for k in v:
            if not isinstance(k, str):
                return f"{path} keys must be strings, got {k!r}"
        if d.keys is not None:
            bad = sorted(set(v) - set(d.keys))
            if bad:
                return f"{path} has unknown keys {bad}; valid: {', '.join(d.keys)}"
        for k, x in v.items():
            sub = d.keys[k] if d.keys is not None else d.each
            if sub is not None and (msg := problem(f"{path}[{k!r}]", x, sub, entry=True)):
                return msg
    if d.type is list and d.each is not None:
        for i, x in enumerate(v):
            if msg := problem(f"{path}[{i}]", x, d.each, entry=True):
                return msg
    return None
