"""The code testbed's tasks (``guarded``): function tasks whose description states an edge case
("..., or -1 if xs is empty"), so a program has a behaviour to choose besides its primitives.

The considered program guards the edge case first (``if not xs:`` / ``return -1``), then
computes; the shortcut writes the computation alone, which is right on every ordinary input
and wrong on the edge case, and every task's tests hold one edge case. Both programs are
well formed and state the same computation, so the choice is a *behaviour* the team reward
can select (the code side of the math testbed's "work the steps or answer directly",
docs/testbed.md), not a syntax the model must discover. Splits as for ``funcs``: train and
test by the computation (below), one template per level held out
whole in ``ood``; the difficulty dial is the level (a scalar, a list, a string, a loop).
Every constant a program must copy is a number: tiny-s copied the task's numbers into its
programs and not its quoted letters or words (a first version's ``swap_letter`` and
``repeat``: 0.04 of level-3 programs right with the guard begun, docs/testbed-code.md).
Some computations are ``funcs``' too (``x + 37``, ``sum_gt``, ``running``...), and a
pretrained base saw ``funcs``' pretraining split: a guarded task is keyed by its unguarded
body under the ``funcs`` name (``FUNCS_TWINS``), so it lands in the split ``funcs`` gives the
same computation, and the held-out template of level 1 is one ``funcs`` never has.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from flowzoo.tasks.base import Task, TaskSet, generate_distinct, stable_hash
from flowzoo.tasks.code.generated import WORDS, function_task, strong_draw

#: (description, entry, parameter, guard condition, edge value, edge words, body lines,
#: ordinary arguments, the edge argument)
Spec = tuple[str, str, str, str, str, str, str, list[str], str]
GuardedTemplate = Callable[[random.Random], Spec]

_NEG = " if x is negative"
_EMPTY_XS = " if xs is empty"
_EMPTY_S = " if s is empty"


#: the value every guarded task returns on its edge case. One value, not a constant per task:
#: tiny-s copied a per-task edge digit into 0.16-0.76 of its programs from build to build
#: (docs/testbed.md) while it copied the computation's constants reliably; the guard is the
#: behaviour, the value it returns is format
EDGE = -1


def _edge_int(r: random.Random) -> int:
    return EDGE


_OPS: dict[str, Callable[[int, int], int]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
}


def _scalar(op: str, word: str, name: str, lo: int, hi: int) -> GuardedTemplate:
    def make(r: random.Random) -> Spec:
        n, e = r.randint(lo, hi), _edge_int(r)
        # an edge argument whose unguarded result differs from the edge value
        x = -r.randint(1, 30)
        while _OPS[op](x, n) == e:
            x = -r.randint(1, 30)
        return (
            f"returns x {word} {n}",
            f"{name}_n",
            "x",
            "x < 0",
            str(e),
            _NEG,
            f"    return x {op} {n}\n",
            [str(r.randint(0, 60)) for _ in range(3)],
            str(x),
        )

    make.__name__ = f"_t_{name}"
    return make


def _t_square_plus(r: random.Random) -> Spec:
    n, e = r.randint(1, 99), _edge_int(r)
    return (
        f"returns x times x plus {n}",
        "square_plus",
        "x",
        "x < 0",
        str(e),
        _NEG,
        f"    return x * x + {n}\n",
        [str(r.randint(0, 30)) for _ in range(3)],
        str(-r.randint(1, 30)),
    )


def _ints(r: random.Random, n: int) -> str:
    return repr([r.randint(n - 10, n + 10) for _ in range(r.randint(1, 6))])


def _text(r: random.Random) -> str:
    return repr(" ".join(r.choice(WORDS) for _ in range(r.randint(1, 4))))


def _span(name: str, start: tuple[int, int], width: tuple[int, int], desc: str, body: str):
    """A list template bounded by ``lo`` in ``start`` and ``hi`` = ``lo`` + ``width``
    (``{lo}``, ``{hi}`` in ``desc`` and ``body``), its inputs centred between them."""

    def make(r: random.Random) -> Spec:
        lo = r.randint(*start)
        hi, e = lo + r.randint(*width), _edge_int(r)
        inputs = [_ints(r, (lo + hi) // 2) for _ in range(3)]
        text = desc.format(lo=lo, hi=hi)
        return (
            text,
            name,
            "xs",
            "not xs",
            str(e),
            _EMPTY_XS,
            body.format(lo=lo, hi=hi),
            inputs,
            "[]",
        )

    make.__name__ = f"_t_{name}"
    return make


_t_sum_between = _span(
    "sum_between",
    (-5, 20),
    (3, 15),
    "returns the sum of the numbers in xs from {lo} to {hi}",
    "    return sum(x for x in xs if {lo} <= x <= {hi})\n",
)
_t_clamp = _span(
    "clamp",
    (-5, 10),
    (2, 10),
    "returns xs with each number clamped to {lo}..{hi}",
    "    return [min(max(x, {lo}), {hi}) for x in xs]\n",
)


def _t_fizz(r: random.Random) -> Spec:
    a, e = r.randint(2, 19), _edge_int(r)
    return (
        f"returns the list 1..n with every multiple of {a} replaced by 0",
        "fizz",
        "n",
        "n < 1",
        str(e),
        " if n is less than 1",
        f"    return [0 if i % {a} == 0 else i for i in range(1, n + 1)]\n",
        [str(r.randint(1, 3 * a)) for _ in range(3)],
        str(-r.randint(0, 3)),
    )


#: per parameter: the guard's condition, how the description states the edge case, and the
#: edge argument a test passes
_EDGES = {
    "xs": ("not xs", _EMPTY_XS, "[]"),
    "s": ("not s", _EMPTY_S, "''"),
}


def _one(
    name: str, lo: int, hi: int, desc: str, param: str, body: str, inputs: Callable
) -> GuardedTemplate:
    """A template with one constant ``n`` in ``lo..hi`` (``{n}`` in ``desc`` and ``body``), a
    list or string parameter, and three ordinary inputs ``inputs(r, n)``."""

    def make(r: random.Random) -> Spec:
        n, e = r.randint(lo, hi), _edge_int(r)
        cond, words, edge_arg = _EDGES[param]
        ordinary = [inputs(r, n) for _ in range(3)]
        return (
            desc.format(n=n),
            name,
            param,
            cond,
            str(e),
            words,
            body.format(n=n),
            ordinary,
            edge_arg,
        )

    make.__name__ = f"_t_{name}"
    return make


def _mults(r: random.Random, n: int) -> str:
    return repr([n * r.randint(0, 4) + r.choice([0, 1]) for _ in range(5)])


_RUNNING = "    out, t = [], {n}\n    for x in xs:\n        t += x\n        out.append(t)\n    return out\n"
_PLUS_EACH = "    out = []\n    for x in xs:\n        out.append(x + {n})\n    return out\n"
#: the one-constant templates: name -> (lo, hi, description, parameter, body, inputs)
_ONE_CONSTANT: dict[str, tuple] = {
    "sum_gt": (
        0,
        149,
        "returns the sum of the numbers in xs that are greater than {n}",
        "xs",
        "    return sum(x for x in xs if x > {n})\n",
        _ints,
    ),
    "count_mult": (
        2,
        49,
        "returns how many numbers in xs are multiples of {n}",
        "xs",
        "    return sum(1 for x in xs if x % {n} == 0)\n",
        _mults,
    ),
    "count_gt": (
        0,
        149,
        "returns how many numbers in xs are greater than {n}",
        "xs",
        "    return sum(1 for x in xs if x > {n})\n",
        _ints,
    ),
    "last_plus": (
        1,
        149,
        "returns the last number in xs plus {n}",
        "xs",
        "    return xs[-1] + {n}\n",
        lambda r, n: _ints(r, 10),
    ),
    "words_times": (
        2,
        49,
        "returns the number of words in s times {n}",
        "s",
        "    return len(s.split()) * {n}\n",
        lambda r, n: _text(r),
    ),
    "len_times": (
        2,
        49,
        "returns the length of s times {n}",
        "s",
        "    return len(s) * {n}\n",
        lambda r, n: _text(r),
    ),
    "words_plus": (
        1,
        149,
        "returns the number of words in s plus {n}",
        "s",
        "    return len(s.split()) + {n}\n",
        lambda r, n: _text(r),
    ),
    "len_plus": (
        1,
        149,
        "returns the length of s plus {n}",
        "s",
        "    return len(s) + {n}\n",
        lambda r, n: _text(r),
    ),
    "long_words": (
        2,
        5,
        "returns the words of s longer than {n} letters",
        "s",
        "    return [w for w in s.split() if len(w) > {n}]\n",
        lambda r, n: _text(r),
    ),
    "running": (
        0,
        149,
        "returns the running totals of xs starting from {n}",
        "xs",
        _RUNNING,
        lambda r, n: _ints(r, 0),
    ),
    "plus_each": (
        1,
        149,
        "returns the list of each number in xs plus {n}",
        "xs",
        _PLUS_EACH,
        lambda r, n: _ints(r, 0),
    ),
}
_T = {name: _one(name, *spec) for name, spec in _ONE_CONSTANT.items()}


GUARDED_LEVELS: dict[int, tuple[GuardedTemplate, ...]] = {
    1: (
        _scalar("+", "plus", "add", 2, 199),
        _scalar("-", "minus", "sub", 2, 199),
        _scalar("*", "times", "times", 2, 19),
        _t_square_plus,
    ),
    2: (_T["sum_gt"], _T["count_mult"], _T["count_gt"], _T["last_plus"], _t_sum_between),
    3: (_T["words_times"], _T["len_times"], _T["words_plus"], _T["len_plus"], _T["long_words"]),
    4: (_T["running"], _T["plus_each"], _t_fizz, _t_clamp),
}
#: held out whole, one per level: the ``ood`` split (a function never trained)
GUARDED_OOD_TEMPLATES = frozenset({"square_plus", "sum_between", "long_words", "clamp"})
#: guarded templates whose computation (the unguarded body) is a ``funcs`` template's, under
#: that template's name: the two share a key, so they share a split (below)
FUNCS_TWINS = {"times": "mul"}


def _make_task(level: int, spec: Spec) -> Task:
    desc, entry, param, cond, edge, edge_words, body, args, edge_arg = spec
    signature = f"def {entry}({param}):"
    solution = f"{signature}\n    if {cond}:\n        return {edge}\n{body}"
    question = f"Write a Python function {entry}({param}) that {desc}, or {edge}{edge_words}."
    return function_task(
        "guarded",
        level,
        question,
        entry,
        param,
        solution,
        [*args, edge_arg],
        shortcut=f"{signature}\n{body}",
        source="guarded",
    )


def guarded_tasks(
    n: int = 200, split: str = "train", seed: int = 0, levels=None, exhaust: bool = False
) -> TaskSet:
    """``n`` distinct guarded function tasks of ``split`` (levels 1-4; held-out templates in
    ``ood``); ``exhaust=True``: up to ``n``, small levels used up."""
    r = random.Random(f"guarded:{seed}")

    def draw(lv: int) -> Task:
        task = strong_draw(
            r, GUARDED_LEVELS[lv], lambda tpl: _make_task(lv, tpl(r)), GUARDED_OOD_TEMPLATES
        )
        # the split is decided by the computation the guard protects (the unguarded body),
        # keyed as ``funcs`` keys it where ``funcs`` has it: a guarded held-out task's body is
        # then never a ``funcs`` pretraining task's (the base pretrained on those)
        name = task.meta["template"]
        task.meta["key"] = (
            f"{FUNCS_TWINS.get(name, name)}:{stable_hash(task.meta['shortcut']):016x}"
        )
        return task

    levels = tuple(GUARDED_LEVELS) if levels is None else levels
    return generate_distinct(
        n, split, levels, GUARDED_LEVELS, draw, "guarded", budget=500, exhaust=exhaust
    )
