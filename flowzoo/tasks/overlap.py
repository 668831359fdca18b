"""Contamination measured, not assumed: how much of one task set another already holds.

A held-out claim is only as good as the split behind it, so the library measures it. Two
tasks overlap when they ask the same thing: the same canonical key (a generated task's
computation or template x constants), the same statement up to case and spacing, or (code) the same tests. ``overlap(train, test)`` says how many of ``test``'s tasks
``train`` already contains by each of these, and which tasks repeat within each set.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from flowzoo.tasks.base import Task, normalise_statement


def tests_key(task: Task) -> str | None:
    """A code task's tests as one normalised string (None for tasks without tests), so two
    statements of one program with the same tests are caught."""
    tests = task.meta.get("tests")
    if not tests:
        return None
    return "\n".join(sorted(" ".join(str(t).split()) for t in tests))


@dataclass
class Overlap:
    """How much of ``b`` is already in ``a``, by each criterion, and repeats within each."""

    a: str
    b: str
    n_a: int
    n_b: int
    #: tasks of b whose canonical key (generated tasks: what is solved) occurs in a
    by_key: int
    #: tasks of b whose normalised statement occurs in a
    by_statement: int
    #: tasks of b whose tests occur in a (code)
    by_tests: int
    #: tasks of b overlapping a by any criterion
    any: int
    #: tasks in a (b) that repeat an earlier task of the same set by key or statement
    duplicates_a: int = 0
    duplicates_b: int = 0
    #: a few overlapping ids of b, to look at
    examples: list[str] = field(default_factory=list)

    @property
    def fraction(self) -> float:
        """Share of b's tasks that a already holds (by any criterion)."""
        return self.any / self.n_b if self.n_b else 0.0

    def as_dict(self) -> dict:
        return {**self.__dict__, "fraction": self.fraction}


Keys = tuple[str | None, str, str | None]


def _keys(task: Task) -> Keys:
    key = task.meta.get("key")
    return (str(key) if key else None), normalise_statement(task.question), tests_key(task)


def _duplicates(keys: list[Keys]) -> int:
    seen: set[str] = set()
    dup = 0
    for k, s, _ in keys:
        mine = {f"s:{s}"} | ({f"k:{k}"} if k else set())
        dup += bool(mine & seen)
        seen |= mine
    return dup


def overlap(a: Iterable[Task], b: Iterable[Task], names: tuple[str, str] = ("a", "b")) -> Overlap:
    """How many tasks of ``b`` (say a test split) ``a`` (a train split, a pretraining
    corpus) already holds, by canonical key, normalised statement and tests."""
    a, b = list(a), list(b)
    ka, kb = [_keys(t) for t in a], [_keys(t) for t in b]
    keys_a = {k for k, _, _ in ka if k}
    stmts_a = {s for _, s, _ in ka}
    tests_a = {t for _, _, t in ka if t is not None}
    hits = [(k in keys_a, s in stmts_a, t in tests_a) for k, s, t in kb]
    c: Counter[str] = Counter()
    examples: list[str] = []
    for i, (hk, hs, ht) in enumerate(hits):
        c["key"] += hk
        c["stmt"] += hs
        c["tests"] += ht
        if hk or hs or ht:
            c["any"] += 1
            if len(examples) < 5:
                examples.append(b[i].id)
    return Overlap(
        a=names[0],
        b=names[1],
        n_a=len(ka),
        n_b=len(kb),
        by_key=c["key"],
        by_statement=c["stmt"],
        by_tests=c["tests"],
        any=c["any"],
        duplicates_a=_duplicates(ka),
        duplicates_b=_duplicates(kb),
        examples=examples,
    )


def overlapping(a: Iterable[Task], b: Iterable[Task]) -> list[str]:
    """The ids of every task of ``b`` that ``a`` already holds (by the criteria of
    :func:`overlap`), so a held-out set can be cut down to what is really held out."""
    ka = [_keys(t) for t in a]
    keys_a = {k for k, _, _ in ka if k}
    stmts_a = {s for _, s, _ in ka}
    tests_a = {t for _, _, t in ka if t is not None}
    out = []
    for t in b:
        k, s, ts = _keys(t)
        if (k and k in keys_a) or s in stmts_a or (ts is not None and ts in tests_a):
            out.append(t.id)
    return out
