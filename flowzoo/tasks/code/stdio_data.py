"""Generated stdin/stdout tasks (no download): small programs in the study's
competitive-programming format, so the format is exercised end to end and the tiny models
can learn it. Splits as for ``funcs``: train and test by template x constants, held-out
templates (one per level) in ``ood``.

A template gives (what the program reads and prints, the canonical program, the function
computing the expected output from an input, the inputs); the canonical program is never
executed here - a test checks that it scores 1 in the sandbox.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from flowzoo.tasks.base import Task, TaskSet, generate_distinct, stable_hash
from flowzoo.tasks.code.generated import LETTERS, WORDS, strong_draw

StdioTemplate = Callable[[random.Random], tuple[str, str, Callable[[str], str], list[str]]]

_READ_N = "n = int(input())\n"
_READ_XS = "xs = list(map(int, input().split()))\n"


def _int_line(r: random.Random, lo: int = -20, hi: int = 60) -> str:
    return f"{r.randint(lo, hi)}\n"


def _ints_line(r: random.Random, k: int = 6, hi: int = 20, lo: int = -9) -> str:
    return " ".join(str(r.randint(lo, hi)) for _ in range(r.randint(0, k))) + "\n"


def _arith(op: str, word: str) -> StdioTemplate:
    def make(r: random.Random):
        k = r.randint(2, 499)
        fn = {"+": lambda n: n + k, "-": lambda n: n - k, "*": lambda n: n * k}[op]
        return (
            f"an integer n and prints n {word} {k}",
            f"{_READ_N}print(n {op} {k})\n",
            lambda s: str(fn(int(s))),
            [_int_line(r) for _ in range(4)],
        )

    make.__name__ = f"_t_{word}"
    return make


def _t_rem(r: random.Random):
    k = r.randint(2, 99)
    return (
        f"an integer n and prints the remainder of n divided by {k}",
        f"{_READ_N}print(n % {k})\n",
        lambda s: str(int(s) % k),
        [_int_line(r, 0, 200) for _ in range(4)],
    )


def _t_sum_gt(r: random.Random):
    k = r.randint(-20, 99)
    return (
        f"a line of integers and prints the sum of those greater than {k}",
        f"{_READ_XS}print(sum(x for x in xs if x > {k}))\n",
        lambda s: str(sum(x for x in map(int, s.split()) if x > k)),
        [_ints_line(r, 6, k + 10, k - 10) for _ in range(4)],
    )


def _t_count_mult(r: random.Random):
    k = r.randint(2, 40)
    return (
        f"a line of integers and prints how many are multiples of {k}",
        f"{_READ_XS}print(sum(1 for x in xs if x % {k} == 0))\n",
        lambda s: str(sum(1 for x in map(int, s.split()) if x % k == 0)),
        [_ints_line(r, 8, 3 * k) for _ in range(3)] + [f"{k} {r.randint(1, 9)} {2 * k}\n"],
    )


def _t_max_or(r: random.Random):
    k = r.randint(-30, 30)
    return (
        f"a line of integers and prints the largest, or {k} if the line is empty",
        f"{_READ_XS}print(max(xs) if xs else {k})\n",
        lambda s: str(max(map(int, s.split()), default=k)),
        [_ints_line(r) for _ in range(3)] + ["\n"],
    )


def _words_line(r: random.Random) -> str:
    return " ".join(r.choice(WORDS) for _ in range(r.randint(1, 4))) + "\n"


def _t_count_char(r: random.Random):
    c = r.choice(LETTERS)
    return (
        f"a line of text and prints how many times the letter '{c}' occurs in it",
        f"s = input()\nprint(s.count('{c}'))\n",
        lambda s: str(s.rstrip("\n").count(c)),
        [_words_line(r) for _ in range(3)] + [r.choice([w for w in WORDS if c in w]) + "\n"],
    )


def _t_long_words(r: random.Random):
    k = r.randint(2, 5)
    return (
        f"a line of words and prints how many words are longer than {k} letters",
        f"s = input()\nprint(sum(1 for w in s.split() if len(w) > {k}))\n",
        lambda s: str(sum(1 for w in s.split() if len(w) > k)),
        [_words_line(r) for _ in range(4)],
    )


def _t_repeat(r: random.Random):
    k = r.randint(2, 7)
    sep = r.choice("-+,_:;")
    return (
        f"a word and prints it {k} times, separated by '{sep}'",
        f"s = input()\nprint('{sep}'.join([s] * {k}))\n",
        lambda s: sep.join([s.rstrip("\n")] * k),
        [w + "\n" for w in r.sample(WORDS, 3)],
    )


def _t_replace(r: random.Random):
    a, b = r.sample("abceghiklmnoprstuwy", 2)
    return (
        f"a line of text and prints it with every '{a}' replaced by '{b}'",
        f"s = input()\nprint(s.replace('{a}', '{b}'))\n",
        lambda s: s.rstrip("\n").replace(a, b),
        [_words_line(r) for _ in range(4)],
    )


def _lines_input(r: random.Random) -> str:
    xs = [r.randint(-9, 30) for _ in range(r.randint(1, 5))]
    return f"{len(xs)}\n" + "".join(f"{x}\n" for x in xs)


def _t_running(r: random.Random):
    k = r.randint(0, 499)
    prog = f"t = {k}\nfor _ in range(int(input())):\n    t += int(input())\n    print(t)\n"

    def solve(s: str) -> str:
        xs, t, out = [int(v) for v in s.split()[1:]], k, []
        for x in xs:
            t += x
            out.append(str(t))
        return "\n".join(out)

    return (
        f"a count n and then n integers, one per line, and prints the running sums "
        f"starting from {k}, one per line",
        prog,
        solve,
        [_lines_input(r) for _ in range(4)],
    )


def _t_pairs(r: random.Random):
    k = r.randint(1, 499)
    prog = "for _ in range(int(input())):\n    a, b = map(int, input().split())\n"
    prog += f"    print(a * b + {k})\n"

    def solve(s: str) -> str:
        rows = s.strip().split("\n")[1:]
        return "\n".join(str(int(a) * int(b) + k) for a, b in (x.split() for x in rows))

    def make_input() -> str:
        n = r.randint(1, 4)
        return f"{n}\n" + "".join(f"{r.randint(-9, 12)} {r.randint(-9, 12)}\n" for _ in range(n))

    return (
        f"a count n and then n lines of two integers a b, and prints a times b plus {k} "
        "for each line",
        prog,
        solve,
        [make_input() for _ in range(4)],
    )


STDIO_LEVELS: dict[int, tuple[StdioTemplate, ...]] = {
    1: (_arith("+", "plus"), _arith("-", "minus"), _arith("*", "times"), _t_rem),
    2: (_t_sum_gt, _t_count_mult, _t_max_or),
    3: (_t_count_char, _t_long_words, _t_repeat, _t_replace),
    4: (_t_running, _t_pairs),
}
#: held out whole (the ``ood`` split), one per level
STDIO_OOD_TEMPLATES = frozenset({"rem", "max_or", "long_words", "pairs"})


def _make_task(level: int, desc: str, program: str, solve, inputs: list[str]) -> Task:
    question = f"Write a Python program that reads {desc}."
    tests = tuple((i, solve(i) + "\n") for i in dict.fromkeys(inputs))
    tid = f"stdio-{level}-{stable_hash(question) % 10**10:010d}"
    meta = {"format": "stdio", "tests": tests, "entry_point": "", "level": level}
    return Task(id=tid, question=question, answer=program, family="code", meta=meta)


def stdio_tasks(
    n: int = 200, split: str = "train", seed: int = 0, levels=None, exhaust: bool = False
) -> TaskSet:
    """``n`` distinct generated stdin/stdout tasks (split by template x constants)."""
    r = random.Random(f"stdio:{seed}")

    def draw(lv: int) -> Task:
        return strong_draw(
            r, STDIO_LEVELS[lv], lambda tpl: _make_task(lv, *tpl(r)), STDIO_OOD_TEMPLATES
        )

    levels = tuple(STDIO_LEVELS) if levels is None else levels
    return generate_distinct(
        n, split, levels, STDIO_LEVELS, draw, "stdio", budget=500, exhaust=exhaust
    )
