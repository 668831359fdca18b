"""Math task sources: a procedural generator (no download) and loaders for local files.

The generator is what the tiny models learn on: graded difficulty, deterministic for a seed,
and a split decided by the *computation* (the chain of operands and operators, which fixes
the worked solution and the answer), never by the wording: "Compute 6 + 6", "What is 6 + 6?"
and a word problem with the same steps are one computation and always land on one side.
Levels 1-4 make the train and test splits; level 5 (four-step chains, a step count never
trained) is the out-of-distribution split. Sizes of each space: docs/envs.md.
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from flowzoo.tasks.base import (
    Task,
    TaskSet,
    check_split,
    check_statement,
    generate_distinct,
    parse_levels,
    stable_hash,
)
from flowzoo.tasks.files import (
    WHOLE,
    check_rows,
    check_size,
    file_split,
    math_key,
    read_located,
    read_parquet,
    row_place,
    saved_dataset,
    text_field,
)
from flowzoo.tasks.math.extract import extract_answer, find_boxed

_NAMES = ["Ana", "Ben", "Cleo", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jun", "Kai", "Lea"]
_THINGS = ["apples", "books", "coins", "pens", "cards", "shells", "stamps", "marbles"]


#: A worked solution is a list of steps ``(left, op, right)``; ``None`` as an operand means
#: "the previous step's result". Experts write the steps out; noisy ones slip on one of them.
Step = tuple[int | None, str, int | None]
_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


def solve_steps(
    steps: list[Step], slip_at: int | None = None, slip: int = 0
) -> tuple[list[str], int]:
    """Written-out steps (``"6 * 7 = 42"``) and the final value; ``slip`` is added to the
    result of step ``slip_at`` and carried through the rest, like a real arithmetic slip."""
    lines: list[str] = []
    prev = 0
    for i, (a, op, b) in enumerate(steps):
        x = prev if a is None else a
        y = prev if b is None else b
        prev = _OPS[op](x, y) + (slip if i == slip_at else 0)
        lines.append(f"{x} {op} {y} = {prev}")
    return lines, prev


def computation_key(steps: Iterable[Step]) -> str:
    """The canonical computation of a worked solution: operands of ``+`` and ``*`` in a fixed
    order (``3 * 4`` is ``4 * 3``; the previous result first), ``_`` for the previous result.
    Two problems with one key are paraphrases: the split keeps them on one side."""
    parts = []
    for a, op, b in steps:
        x, y = ("_" if a is None else str(a)), ("_" if b is None else str(b))
        if op in "+*" and (y == "_" or (x != "_" and int(x) > int(y))):
            x, y = y, x
        parts.append(f"{x}{op}{y}")
    return "|".join(parts)


_ASK = ("What is {e}?", "Compute {e}.", "Find {e}.", "Calculate {e}.")
Draw = tuple[str, list[Step]]


def _digit(r: random.Random) -> int:
    return r.randint(1, 9)


def _small_product(r: random.Random) -> tuple[int, int]:
    """Factors of the products every level uses (2..5: the facts stay few and well trained)."""
    return r.randint(2, 5), r.randint(2, 5)


def _level1(r: random.Random) -> Draw:
    a, b = _digit(r), _digit(r)
    ask = r.choice(_ASK)
    if r.random() < 0.5:
        return ask.format(e=f"{a} + {b}"), [(a, "+", b)]
    a, b = max(a, b), min(a, b)
    return ask.format(e=f"{a} - {b}"), [(a, "-", b)]


def _level2(r: random.Random) -> Draw:
    if r.random() < 0.5:
        (a, b), c = _small_product(r), _digit(r)
        op = "+" if r.random() < 0.5 else "-"
        return r.choice(_ASK).format(e=f"{a} * {b} {op} {c}"), [(a, "*", b), (None, op, c)]
    a, b, c = _gain_lose(r)
    return r.choice(_ASK).format(e=f"{a} + {b} - {c}"), [(a, "+", b), (None, "-", c)]


def _gain_lose(r: random.Random) -> tuple[int, int, int]:
    """Operands of ``a + b - c`` with a non-negative result."""
    a, b = _digit(r), _digit(r)
    return a, b, r.randint(1, min(9, a + b))


def _level3(r: random.Random) -> Draw:
    """Word problems: the same computations as level 2, in other words (so a split by wording
    would put paraphrases on both sides; the split by computation does not)."""
    name, thing = r.choice(_NAMES), r.choice(_THINGS)
    if r.random() < 0.5:
        (boxes, each), gone = _small_product(r), _digit(r)
        q = (
            f"{name} has {boxes} bags with {each} {thing} in each bag. "
            f"{name} gives away {gone} {thing}. How many {thing} are left?"
        )
        return q, [(boxes, "*", each), (None, "-", gone)]
    a, b, c = _gain_lose(r)
    q = (
        f"{name} has {a} {thing} and gets {b} more, then gives away {c}. "
        f"How many {thing} does {name} have now?"
    )
    return q, [(a, "+", b), (None, "-", c)]


def _level4(r: random.Random) -> Draw:
    """Three steps: a word problem, or a chain of three small steps (the level's size comes
    from composing small, well-trained step facts, not from large operands)."""
    roll = r.random()
    if roll < 0.2:
        a, b = r.sample(_NAMES, 2)
        thing = r.choice(_THINGS)
        x, k, y = r.randint(2, 9), r.randint(2, 3), _digit(r)
        q = (
            f"{a} has {x} {thing}. {b} has {k} times as many {thing} as {a}, "
            f"then finds {y} more. How many {thing} do they have together?"
        )
        return q, [(k, "*", x), (x, "+", None), (None, "+", y)]
    if roll < 0.6:
        a, b, c, d = _digit(r), _digit(r), _digit(r), _digit(r)
        e = f"{a} + {b} + {c} - {d}"
        return r.choice(_ASK).format(e=e), [(a, "+", b), (None, "+", c), (None, "-", d)]
    (a, b), c, d = _small_product(r), _digit(r), _digit(r)
    op1, op2 = ("+", "-") if r.random() < 0.5 else ("-", "+")
    steps: list[Step] = [(a, "*", b), (None, op1, c), (None, op2, d)]
    return r.choice(_ASK).format(e=f"{a} * {b} {op1} {c} {op2} {d}"), steps


def _level5(r: random.Random) -> Draw:
    """Out of distribution: four-step chains (no trained problem has more than three)."""
    (a, b), c, d, e = _small_product(r), _digit(r), _digit(r), _digit(r)
    op1, op2 = r.choice("+-"), r.choice("+-")
    steps: list[Step] = [(a, "*", b), (None, op1, c), (None, op2, d), (None, "+", e)]
    return r.choice(_ASK).format(e=f"{a} * {b} {op1} {c} {op2} {d} + {e}"), steps


LEVELS: dict[int, Callable[[random.Random], Draw]] = {
    1: _level1,
    2: _level2,
    3: _level3,
    4: _level4,
    5: _level5,
}
#: the levels whose structure is held out whole: the ``ood`` split
OOD_LEVELS = (5,)
#: the levels a split is drawn from when none are named
DEFAULT_LEVELS = {
    "pretrain": (1, 2, 3, 4),
    "train": (1, 2, 3, 4),
    "test": (1, 2, 3, 4),
    "ood": OOD_LEVELS,
}


def arithmetic_tasks(
    n: int = 200,
    split: str = "train",
    seed: int = 0,
    levels: Iterable[int] | None = None,
    exhaust: bool = False,
) -> TaskSet:
    """``n`` distinct generated problems of the given split, evenly over ``levels`` (None:
    the split's defaults; ``exhaust=True``: up to ``n``, small levels used up; see
    ``generate_distinct``)."""
    r = random.Random(f"arith:{seed}")
    levels = DEFAULT_LEVELS[check_split(split)] if levels is None else tuple(levels)

    def draw(lv: int) -> Task:
        q, steps = LEVELS[lv](r)
        _, a = solve_steps(steps)
        tid = f"arith-{lv}-{stable_hash(q):016x}"  # 64 bits: ~100k wordings never collide
        meta = {"level": lv, "steps": steps, "key": computation_key(steps)}
        if lv in OOD_LEVELS:
            meta["ood"] = True
        return Task(id=tid, question=q, answer=str(a), family="math", meta=meta)

    return generate_distinct(n, split, levels, LEVELS, draw, "arith", budget=200, exhaust=exhaust)


# ------------------------------------------------------------------------------ loaders


def _read_jsonl(path: str | os.PathLike) -> list[tuple[str, dict]]:
    """Rows of a JSONL(.gz)/JSON file with every number kept as written (a gold is exact),
    each with where it is (``:7``, a line; `` row 3``, a JSON list's row; from 1)."""
    return read_located(path, numbers="text")


def _task_from_row(row: dict, where: str, source: str, style: str) -> Task:
    """One row as a task; ``where``: the row's place in ``source`` (:func:`read_located`)."""
    at = f"{source}{where}"
    if not isinstance(row, dict):
        raise ValueError(
            f"{at}: expected an object of fields, got {type(row).__name__}; "
            "every row is one {...} object"
        )
    bad = [k for k in ("answer", "solution", "id") if k in row and not _scalar(row[k])]
    if bad:
        raise ValueError(
            f"{at}: field {bad[0]!r} must be text or a number, got "
            f"{type(row[bad[0]]).__name__}; fix the row or remove it"
        )
    q = text_field(row, ("question", "problem", "prompt"), at)
    if q is None:
        raise ValueError(
            f"{at}: field 'question' (or 'problem'/'prompt') is missing or empty; every row "
            "needs the problem's text"
        )
    check_statement(q, at)
    if style == "gsm8k":
        raw = str(row.get("answer", ""))
        ans = (
            raw.split("####")[-1].strip().replace(",", "") if "####" in raw else extract_answer(raw)
        )
    elif style == "math":
        sol = str(row.get("solution", row.get("answer", "")))
        boxed = find_boxed(sol)
        ans = boxed[-1] if boxed else (str(row["answer"]) if "answer" in row else None)
    else:
        ans = row.get("answer")
        ans = None if ans is None else str(ans)
    if ans is None or not str(ans).strip():
        raise ValueError(
            f"{at}: field 'answer' holds no gold answer ({style} style); give "
            "one, or name the file's style (gsm8k:PATH, math:PATH, hf:STYLE:PATH)"
        )
    tid = str(row.get("id") or row.get("unique_id") or f"{style}-{stable_hash(q) % 10**10:010d}")
    return Task(
        id=tid, question=q.strip(), answer=str(ans).strip(), family="math", meta={"source": source}
    )


def _scalar(v) -> bool:
    if isinstance(v, float) and not math.isfinite(v):  # NaN/inf from parquet or a dataset
        return False
    return isinstance(v, (str, int, float)) and not isinstance(v, bool)


#: the row styles a math file may be in
MATH_STYLES = ("jsonl", "gsm8k", "math")


def detect_math_style(rows: list[dict]) -> str:
    """A file's style from its fields: a ``solution`` field is MATH-style (``\\boxed{}``),
    answers carrying ``#### a`` are GSM8K-style, anything else plain ``{question, answer}``."""
    if any(isinstance(r, dict) and "solution" in r for r in rows):
        return "math"
    if any(isinstance(r, dict) and "####" in str(r.get("answer", "")) for r in rows):
        return "gsm8k"
    return "jsonl"


def load_math_file(path: str | os.PathLike, style: str = "jsonl") -> TaskSet:
    """Load a local JSONL file: ``jsonl`` ({id, question, answer}), ``gsm8k`` (``#### a``)
    or ``math`` (a ``\\boxed{}`` solution)."""
    if style not in MATH_STYLES:
        raise ValueError(f"unknown math file style {style!r}; valid: jsonl, gsm8k, math")
    rows = _read_jsonl(path)
    return TaskSet([_task_from_row(r, w, str(path), style) for w, r in rows], name=str(path))


def load_hf_local(path: str | os.PathLike, split: str = "train", style: str = "auto") -> TaskSet:
    """A Hugging Face ``datasets`` dataset from a local dir (``save_to_disk``) or data file,
    rows in ``style`` (``auto``: told by their fields). A dataset with the asked split uses
    it as is; one without (a single file or dataset) is split by what is solved.

    Never touches the hub: a path that does not exist is an error, not a download."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"local dataset path not found: {p} (flowzoo never downloads)")
    if style not in (*MATH_STYLES, "auto"):
        raise ValueError(f"unknown hf style {style!r}; valid: auto, {', '.join(MATH_STYLES)}")
    if p.is_file() and p.name.endswith((".jsonl", ".json", ".gz")):  # numbers kept exact
        located = _read_jsonl(p)
        style = detect_math_style([r for _, r in located]) if style == "auto" else style
        tasks = [_task_from_row(r, w, str(p), style) for w, r in located]
        return file_split(tasks, split, math_key, str(p))
    own = False  # whether the dataset itself holds the asked split
    if p.is_file() and p.suffix == ".parquet":  # read with its caps (size, rows, decoded bytes)
        ds: Any = read_parquet(p)
    else:
        try:
            import datasets
        except ImportError as e:
            raise ImportError("loading Hugging Face datasets needs `pip install datasets`") from e
        if p.is_dir():
            ds, own = saved_dataset(str(p), split, ", or a .jsonl/.parquet file")
        elif p.suffix == ".csv":
            check_size(p)  # capped like any task file
            ds = datasets.load_dataset("csv", data_files=str(p), split="train")
        else:
            raise ValueError(f"unsupported data file {p.name}; use .jsonl, .json, .parquet or .csv")
    check_rows(p, len(ds))
    rows = [dict(r) for r in ds]
    style = detect_math_style(rows) if style == "auto" else style
    tasks = [_task_from_row(r, row_place(i), str(p), style) for i, r in enumerate(rows)]
    return file_split(tasks, split, math_key, str(p), own=own)


def reasoning_gym_tasks(name: str, n: int = 200, split: str = "train", seed: int = 0) -> TaskSet:
    """Tasks from a ``reasoning-gym`` procedural generator (``pip install flowzoo[tasks]``).

    Train and test come from different seeds; test questions that also occur in the
    train draw of the same size are dropped, so the splits do not overlap."""
    try:
        import reasoning_gym
    except ImportError as e:
        raise ImportError(
            f"dataset 'reasoning-gym:{name}' needs the reasoning-gym package: "
            "pip install 'flowzoo[tasks]'"
        ) from e
    if check_split(split) == "ood":
        raise ValueError(f"reasoning-gym:{name} has no out-of-distribution split")

    def draw(s: int) -> list[dict]:
        return list(reasoning_gym.create_dataset(name, size=n, seed=s))

    train = draw(2 * seed)
    if split == "train":
        rows = train
    else:
        seen = {r["question"] for r in train}
        rows = [r for r in draw(2 * seed + 1) if r["question"] not in seen]
    tasks = []
    for r in rows:
        q = r["question"]
        tid = f"rg-{name}-{stable_hash(q) % 10**10:010d}"
        tasks.append(
            Task(
                id=tid,
                question=q,
                answer=str(r["answer"]),
                family="math",
                meta={"source": f"reasoning-gym:{name}"},
            )
        )
    uniq = list({t.id: t for t in tasks}.values())
    return TaskSet(uniq, name=f"reasoning-gym:{name}", split=split)


def load_math_dataset(spec: str, split: str = "train", n: int = 200, seed: int = 0) -> TaskSet:
    """Resolve a dataset spec: ``arith`` | ``arith:1-2`` | ``jsonl:PATH`` | ``gsm8k:PATH`` |
    ``math:PATH`` | ``hf:PATH`` | ``hf:STYLE:PATH`` | ``reasoning-gym:NAME``. A local file's
    ``train``/``test`` are disjoint sides split by what is solved; ``all`` is the whole file
    (a separate held-out file)."""
    kind, _, arg = spec.partition(":")
    if kind == "arith":
        return arithmetic_tasks(n=n, split=split, seed=seed, levels=parse_levels(spec, arg))
    if split != WHOLE and check_split(split) == "ood" and kind != "reasoning-gym":
        raise ValueError(f"math dataset {spec!r} has no out-of-distribution split (only arith)")
    if kind in MATH_STYLES and arg:  # one file: train and test split by what is solved
        return file_split(load_math_file(arg, style=kind), split, math_key, arg)
    if kind == "hf" and arg:
        style, sep, rest = arg.partition(":")
        if sep and style in (*MATH_STYLES, "auto"):  # hf:STYLE:PATH
            return load_hf_local(rest, split=split, style=style)
        return load_hf_local(arg, split=split)
    if kind == "reasoning-gym" and arg:
        return reasoning_gym_tasks(arg, n=n, split=split, seed=seed)
    raise ValueError(
        f"unknown math dataset {spec!r}; valid: arith, arith:LO-HI, jsonl:PATH, gsm8k:PATH, "
        "math:PATH, hf:PATH, hf:STYLE:PATH, reasoning-gym:NAME"
    )
