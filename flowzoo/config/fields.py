"""The domain of every config setting, declared beside its help (the domains and their check are
:mod:`flowzoo.domain`, shared with the envs' options).

Why declared: a bound written next to the help of the field it bounds is read with it, shown
in ``--help`` and the docs, and checked by one function (:func:`check_fields`), so no list of
field names elsewhere can drift from the fields. A dict-valued setting (a per-role map)
declares the domain of each value, and gets the same checks per value. Torch-free, like
:mod:`flowzoo.config`, which builds its fields with :func:`setting`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import field
from typing import Any

from flowzoo.domain import Domain, fault, problem

__all__ = ["Domain", "bound_flag", "check_fields", "fault", "problem", "sections_of", "setting"]


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
