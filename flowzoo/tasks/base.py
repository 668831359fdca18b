"""Task, TaskSet and Verdict: what is solved and how an answer is scored.

A *task family* (math, code) knows how to pull an answer out of a completion, how to
score it against a task, and how to tell two answers apart for majority voting. The
environments only talk to this interface, so a new family is one module.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

#: the most characters a problem statement may hold: past any model's context (128k tokens
#: are ~0.5 MB of text), so a longer one could only be cut to fit; refused where it loads
MAX_STATEMENT_CHARS = 1 << 20


#: a UTF-16 surrogate alone (a JSON "\\ud800" escape): no character
SURROGATE_RE = re.compile("[\\ud800-\\udfff]")


def check_statement(text: Any, where: str) -> None:
    """A ValueError naming ``where`` (the file and row) when a problem statement holds more
    than :data:`MAX_STATEMENT_CHARS` characters (a 30 MB field once loaded silently), or holds
    a NUL character or a lone UTF-16 surrogate (no text a model reads holds either; a NUL
    cuts the statement short in C-string tooling, a surrogate cannot be encoded or hashed):
    refused, never stripped, so the row is fixed at its source."""
    if isinstance(text, str) and ("\x00" in text or SURROGATE_RE.search(text)):
        what = "a NUL character (\\u0000)" if "\x00" in text else "a lone UTF-16 surrogate"
        raise ValueError(
            f"{where}: its problem statement holds {what}, which no statement holds; fix "
            "or remove the row"
        )
    if isinstance(text, str) and len(text) > MAX_STATEMENT_CHARS:
        raise ValueError(
            f"{where}: its problem statement holds {len(text):,} characters, past the limit "
            f"of {MAX_STATEMENT_CHARS:,} (more than any model's context: it could only be "
            "cut); shorten it or remove the row, or raise "
            "flowzoo.tasks.base.MAX_STATEMENT_CHARS"
        )


@dataclass(frozen=True)
class Task:
    """One problem: an id, the text shown to agents, and the gold used to score."""

    id: str
    question: str
    answer: str = ""
    family: str = "math"
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        # every loader builds its tasks here; the code loaders name the row around this
        check_statement(self.question, f"task {str(self.id)[:60]!r}")


@dataclass(frozen=True)
class Verdict:
    """The outcome of scoring one answer: a score in [0, 1] and why."""

    score: float
    correct: bool
    extracted: str | None = None
    reason: str = ""
    details: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


def stable_hash(text: str) -> int:
    """A process-independent hash (Python's ``hash`` is salted per run)."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big")


class TaskSet(Sequence[Task]):
    """An ordered, indexable collection of tasks with lookup by id."""

    def __init__(self, tasks: Iterable[Task], name: str = "tasks", split: str = "all") -> None:
        self._tasks: list[Task] = list(tasks)
        self.name = name
        self.split = split
        #: how a loader made this set from a file ("" for generated sets): "split by what is
        #: solved", "whole file" or "own split" (a saved dataset's own split)
        self.origin = ""
        #: what a split of one file moved from its test side to train, by criterion (the
        #: counts :func:`flowzoo.tasks.files.file_split` records; empty when nothing was split)
        self.decontamination: dict[str, int] = {}
        self._by_id: dict[str, int] = {}
        for i, t in enumerate(self._tasks):
            if t.id in self._by_id:
                raise ValueError(f"duplicate task id {t.id!r} in task set {name!r}")
            self._by_id[t.id] = i
        if not self._tasks:
            raise ValueError(f"task set {name!r} ({split}) is empty")

    def __len__(self) -> int:
        return len(self._tasks)

    def __getitem__(self, i):  # type: ignore[override,unused-ignore]
        return self._tasks[i]

    def __iter__(self) -> Iterator[Task]:
        return iter(self._tasks)

    def by_id(self, task_id: str) -> Task:
        """The task with this id; a KeyError naming a few valid ids otherwise."""
        try:
            return self._tasks[self._by_id[task_id]]
        except KeyError:
            some = ", ".join(list(self._by_id)[:5])
            raise KeyError(f"unknown task id {task_id!r} in {self.name!r}; e.g. {some}") from None

    def ids(self) -> list[str]:
        return [t.id for t in self._tasks]

    def __repr__(self) -> str:
        return f"TaskSet(name={self.name!r}, split={self.split!r}, n={len(self)})"


#: ``pretrain``, ``train`` and ``test`` share their structure (levels, templates) and are
#: disjoint by what is solved; ``ood`` holds structure that none of them ever contains.
#: ``pretrain`` is what the tiny base models' corpus draws from, ``train`` the RL pool: RL
#: trains on computations its base never saw (a prefix of the pretraining pool taught recall)
SPLITS = ("pretrain", "train", "test", "ood")
#: one in-distribution computation (or template x constants) in TEST_FRACTION_DEN is held out
#: for test, one for the RL pool; the rest are the pretraining side
TEST_FRACTION_DEN = 5


def split_of(key: str, ood: bool = False) -> str:
    """The split a generated task belongs to, fixed by its canonical key (what is solved: a
    math problem's computation, a code task's template and constants), never by its wording,
    so every paraphrase of a held-out computation is held out too. ``ood``: the task's
    structure is held out whole (never in pretrain, train or test)."""
    if ood:
        return "ood"
    bucket = stable_hash(key) % TEST_FRACTION_DEN
    return "test" if bucket == 0 else "train" if bucket == 1 else "pretrain"


def normalise_statement(text: str) -> str:
    """A statement with case and spacing folded and closing punctuation dropped, for duplicate
    detection (operators and symbols stay: ``3 * 4 - 2`` is not ``3 * 4 + 2``)."""
    return " ".join(text.lower().split()).rstrip(" .?!")


def parse_levels(spec: str, arg: str) -> tuple[int, ...] | None:
    """The level range of a generator spec (``arith:1-2`` -> (1, 2)); no range -> None (the
    generator's default levels for the split)."""
    if not arg:
        return None
    lo, _, hi = arg.partition("-")
    try:
        return tuple(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        name = spec.partition(":")[0]
        raise ValueError(f"bad level range in {spec!r}; e.g. '{name}:1-2'") from None


def check_split(split: str) -> str:
    """``split`` itself, or a ValueError naming the valid ones."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; valid: {', '.join(SPLITS)}")
    return split


def generate_distinct(
    n: int,
    split: str,
    levels: Iterable[int],
    known_levels: Iterable[int],
    draw: Callable[[int], Task],
    name: str,
    budget: int = 500,
    exhaust: bool = False,
) -> TaskSet:
    """``n`` distinct generated tasks of ``split``, levels taken in turn; ``draw(level)``
    makes one candidate carrying ``meta["key"]`` (and ``meta["ood"]`` for held-out
    structure). Why one loop: the no-overlap guarantee (split by canonical key) must hold for
    every generator. Held-out splits keep one wording per computation (each problem is an
    independent unit of the bootstrap); the train split keeps every distinct wording.

    A level that yields nothing new in ``budget`` draws in a row is used up: it is dropped and
    the others fill in (a small level of a held-out split holds few computations). Then
    ``exhaust=False`` fails when every level is used up before ``n``; ``exhaust=True`` (large
    pools: pretraining corpora) returns what there is (it may be under ``n``)."""
    check_split(split)
    levels = tuple(levels)
    bad = [lv for lv in levels if lv not in set(known_levels)]
    if bad or not levels:
        raise ValueError(f"unknown levels {bad or levels}; valid: {sorted(known_levels)}")
    seen: set[str] = set()
    tasks: list[Task] = []
    live = list(levels)
    dry = dict.fromkeys(levels, 0)
    attempts = 0
    while len(tasks) < n and live:
        attempts += 1
        if attempts > budget * n + 20_000:
            break
        lv = live[len(tasks) % len(live)]
        t = draw(lv)
        key = t.meta["key"]
        unit = t.question if split in ("pretrain", "train") else key
        if unit in seen or split_of(key, bool(t.meta.get("ood"))) != split:
            dry[lv] += 1
            if dry[lv] >= budget:
                live.remove(lv)
            continue
        dry[lv] = 0
        seen.add(unit)
        tasks.append(t)
    if len(tasks) < n and not exhaust or not tasks:
        raise ValueError(
            f"cannot generate {n} distinct {split} {name} tasks at levels {levels}; ask for fewer"
        )
    return TaskSet(tasks, name=name, split=split)


@runtime_checkable
class TaskFamily(Protocol):
    """How a family of tasks is presented and scored; the envs use nothing else. A new family
    implements every method here and is registered with a
    :class:`~flowzoo.tasks.families.FamilySpec`.

    Two hooks are optional (the testbed's behaviour menu, docs/testbed.md; the envs read
    them with ``getattr``): ``direct_completion(task) -> str | None``, the shortcut answer
    where the task has one (math: the bare answer; code: the program without its edge-case
    guard), and ``shows_work(task, text) -> bool | None``, whether a completion takes the
    considered behaviour (None where the task has no shortcut)."""

    name: str
    #: the sentence every solving role's prompt ends with, stating the output format
    answer_format: str
    #: whether :meth:`test_report` says something (Eval-Opt's ``evaluator_sees_tests``)
    reports_tests: bool

    def extract(self, text: str) -> str | None:
        """The answer inside a completion, or None if there is none."""
        ...

    def score(self, task: Task, text: str) -> Verdict:
        """Score a completion (not a pre-extracted answer) against the task."""
        ...

    def score_many(self, task: Task, texts: Sequence[str]) -> list[Verdict]:
        """Score several completions of the same task (batched where it pays)."""
        ...

    def answer_class(self, task: Task, verdict: Verdict) -> Hashable | None:
        """A key such that equal keys mean 'the same answer', for majority voting."""
        ...

    def flags(self, task: Task, text: str) -> list[str]:
        """Flags for a turn's ``infos`` beyond its score (e.g. a program caught tampering
        with its judge); ``[]`` when there is nothing to say."""
        ...

    def test_report(self, task: Task, text: str) -> str | None:
        """What the task's tests say about a completion, for a role allowed to see them
        (None where the family has no tests)."""
        ...

    def reference_completion(self, task: Task) -> str:
        """A correct, well-formed completion (the scripted expert's answer)."""
        ...

    def noisy_completion(self, task: Task, rng: random.Random) -> str:
        """A plausible wrong completion (the scripted expert's slip)."""
        ...

    def wrong_completion(self, task: Task) -> str:
        """A well-formed completion whose answer is wrong."""
        ...
