"""The domain of every config setting, declared beside its help, and the one check that reads it.

Why declared: a bound written next to the help of the field it bounds is read with it, shown
in ``--help`` and the docs, and checked by one function (:func:`check_fields`), so no list of
field names elsewhere can drift from the fields. A dict-valued setting (a per-role map)
declares the domain of each value, and gets the same checks per value. Torch-free, like
:mod:`flowzoo.config`, which builds its fields with :func:`setting`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

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
        if self.type is int:
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


def _of_type(v: Any, t: type) -> bool:
    if isinstance(v, bool):  # True is an int to Python; a count of True is a typo
        return t is bool
    if t is float:
        return isinstance(v, (int, float))
    return isinstance(v, t)


def _in_range(v: float, d: Domain) -> bool:
    if v in d.also:
        return True
    if d.finite and isinstance(v, float) and not math.isfinite(v):
        return False
    if d.lo is not None and not (v > d.lo if d.lo_open else v >= d.lo):
        return False  # nan fails every comparison: refused here too
    return d.hi is None or v <= d.hi


def _show(v: Any) -> str:
    return f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else repr(v)


def problem(path: str, v: Any, d: Domain, entry: bool = False) -> str | None:
    """What is wrong with value ``v`` of setting ``path`` under ``d`` (None: nothing), naming
    the setting, the bad value and what is valid. ``entry``: ``v`` is one value of a map."""
    valid = d.valid()
    if valid is not None:
        if not isinstance(v, d.type) or v not in valid:
            shown = ", ".join(c if c else '""' for c in valid)
            return f"unknown {path} {v!r}; valid: {shown}"
        return None
    if not _of_type(v, d.type):
        return f"{path} must be {d.kind}, got {v!r}"
    if d.type is str and "\0" in v:
        return f"{path} must be {d.kind} without NUL characters, got {v!r}"
    if d.nonempty and not v:
        return f"{path} must be {d.kind}, not empty"
    if d.type in (int, float) and not _in_range(v, d):
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


def bound_flag(parser: Any, flag: str, d: Domain) -> None:
    """Bound argparse ``flag`` (already added to ``parser``) to domain ``d``: its text read
    as the domain's type and checked by :func:`problem` while the command line is parsed,
    so a value out of the domain is refused, exit 2, naming the domain, before anything is
    read, built or written; and its help says the domain."""
    import argparse

    def parse(text: str) -> Any:
        try:
            v = d.type(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"must be {d.kind}{' ' + d.bounds if d.bounds else ''}, got {text!r}"
            ) from None
        if msg := problem("value", v, d):
            raise argparse.ArgumentTypeError(msg.removeprefix("value "))
        return v

    action = parser._option_string_actions[flag]
    action.type = parse
    action.help = f"{action.help or ''}; must be {d.bounds}".lstrip("; ")


def check_fields(obj: Any) -> None:
    """Check every field of dataclass ``obj`` against the domain its metadata declares (the
    one place bounds are checked), raising ``ValueError`` with the first problem."""
    for f in dataclasses.fields(obj):
        d = f.metadata.get("domain")
        if d is not None and (msg := problem(f.name, getattr(obj, f.name), d)):
            raise ValueError(msg)


def setting(
    default: Any,
    help: str,
    choices: tuple[str, ...] | None = None,
    *,
    lo: float | None = None,
    hi: float | None = None,
    lo_open: bool = False,
    finite: bool = True,
    also: tuple[float, ...] = (),
    each: Domain | None = None,
    choices_from: Callable[[], Sequence[str]] | None = None,
    what: str = "",
) -> Any:
    """A dataclass field with its help and its domain in the metadata; the type is the
    default's (a test checks it matches the annotation). ``choices`` also become the CLI
    flag's choices; ``choices_from`` lists them when checked (a registry that can grow)."""
    dom = Domain(
        type(default),
        lo=lo,
        hi=hi,
        lo_open=lo_open,
        finite=finite,
        also=also,
        choices=choices_from or choices,
        each=each,
        what=what,
    )
    meta = {"help": help, "choices": choices, "domain": dom}
    if isinstance(default, dict):
        return field(default_factory=lambda: dict(default), metadata=meta)
    return field(default=default, metadata=meta)


def sections_of(cls: Any, sections: Mapping[str, Sequence[str]]) -> dict[str, str]:
    """Field name -> its section title; raises ``TypeError`` when a field of ``cls`` is in no
    section or in two, or a section names no field (the table cannot drift from the class)."""
    names = [f.name for f in dataclasses.fields(cls)]
    where: dict[str, str] = {}
    for title, members in sections.items():
        for n in members:
            if n in where or n not in names:
                raise TypeError(f"section {title!r}: {n!r} is in two sections or no field")
            where[n] = title
    missing = [n for n in names if n not in where]
    if missing:
        raise TypeError(f"fields in no section: {missing}")
    return where
