"""Rows and replies too big or too deep for the judge and the loaders: each is that row's (or
that file's) defined failure, bounded in memory, and the rest of the batch is judged as before.

1. A replay's reply (the row's code ran where it is written: untrusted) is inflated no further
   than its cap, and its JSON values and nesting are counted before any of it is built; past
   them the row's cases fail with ``judge_limit`` (status ``reply_too_big``). The first-pass
   cache is bounded by bytes.
2. Row code past Python's parser (a MemoryError or RecursionError from nesting, a
   SyntaxError from its limits, a null byte) is a ValueError naming the file, the row and the
   field at load, and ``bad_tests`` at scoring without stopping the batch.
3. A ``.gz`` task file is inflated a chunk at a time, no further than its cap; a plain file
   has the same cap on its size.

Real sandbox runs and real loaders throughout; memory is checked in a subprocess by its
peak resident size, against what the same attacks cost before the caps.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import pytest

import flowzoo
from flowzoo.tasks.base import Task
from flowzoo.tasks.code import CodeFamily, judge, load_code_file, names, replay_reply
from flowzoo.tasks.code.data import humaneval_tasks, load_code_dataset
from flowzoo.tasks.code.testcode import judge_spec
from flowzoo.tasks.files import WHOLE
from flowzoo.tasks.math import load_math_dataset

REPO = str(Path(flowzoo.__file__).resolve().parents[1])
RIGHT = "```python\ndef f(x):\n    return x + 1\n```"
WRONG = "```python\ndef f(x):\n    return x\n```"


def task(tests: list[str], tid: str, **meta: str) -> Task:
    m = {"entry_point": "f", "tests": tests, "setup": "", "prompt_code": "", **meta}
    return Task(id=tid, question="q", family="code", meta=m)


def forging(body: str) -> str:
    """Setup code that writes ``body`` (a Python expression, built in the replay's run) as the
    replay's reply on its channel and exits: what a row's own code can do there."""
    return textwrap.dedent(
        f"""
        import base64, os, zlib
        body = {body}
        os.write(3, base64.b64encode(zlib.compress(body.encode(), 9)) + b"\\n")
        os._exit(0)
        """
    )


def call_reply(args: str) -> str:
    """A reply (a Python expression of its JSON) whose one case passes ("forged") and whose
    one call has the arguments ``args`` (a Python expression of a JSON list)."""
    head = '{"cases": [[true, "forged", null]], "calls": [["f", '
    return f"{head!r} + {args} + {', {}]]}'!r}"


#: replies past the caps, each a few KB on the wire: (name, Python expression of the JSON)
BOMBS = {
    "16 MB of nested lists": call_reply("'[[' + '[],' * ((16 << 20) // 3) + '[]]]'"),
    "values under the byte cap": call_reply("'[[' + '[],' * 200_000 + '[]]]'"),
    "one-key dicts": call_reply("'[[' + '{\"T\": []},' * 60_000 + '[]]]'"),
    "deep": call_reply("'[' + '[' * 300 + ']' * 300 + ']'"),
    "a long string": call_reply("'[\"' + 'x' * (2 << 20) + '\"]'"),
}


@pytest.fixture(scope="module")
def fam():
    f = CodeFamily(sandbox_options={"timeout_s": 20, "memory_mb": 256})
    yield f
    f.sandbox.close()


# ------------------------------------------------------------------ 1. the replay's reply
def test_a_reply_past_the_caps_fails_its_row_and_the_batch_is_judged(fam):
    """Each bomb fails its own row (``judge_limit:reply_too_big``, never built); the same
    forgery kept small is read (the channel was reached: the row decides its own verdict);
    honest rows in the same batch score a correct program 1 and a wrong one 0."""
    honest = task(["assert f(1) == 2", "assert f(-1) == 0"], "honest")
    control = task(["assert f(1) == 2"], "control", setup=forging(call_reply("'[1]'")))
    bombs = [task(["assert f(1) == 2"], k, setup=forging(v)) for k, v in BOMBS.items()]
    pairs = [(honest, RIGHT), (honest, WRONG), (control, WRONG)] + [(b, RIGHT) for b in bombs]
    got = fam.score_pairs(pairs)
    assert [v.score for v in got[:2]] == [1.0, 0.0], [v.reason for v in got[:2]]
    assert got[2].score == 1.0 and got[2].details["cases"][0][1] == "forged", got[2].details
    for b, v in zip(bombs, got[3:], strict=True):
        assert v.score == 0.0 and v.reason == "judge_limit:reply_too_big", (b.id, v.reason)
        assert v.details["cases"] == [(False, None, "JudgeLimit")], b.id
        assert fam.flags(b, RIGHT) == ["judge_limit"], b.id
    assert fam.flags(honest, WRONG) == []


def _reply(obj_or_text: object) -> str:
    text = obj_or_text if isinstance(obj_or_text, str) else json.dumps(obj_or_text)
    return base64.b64encode(zlib.compress(text.encode("utf-8"), 9)).decode() + "\n"


@pytest.mark.parametrize(
    "text,outcome",
    [
        # structure inside a string is one value: read
        ('{"cases": [null], "calls": [["f", ["' + "[],{}:" * 50_000 + '"], {}]]}', "read"),
        # escaped quotes never end a string early: read
        ('{"cases": [null], "calls": [["f", ["\\"[[\\"\\\\"], {}]]}', "read"),
        # a backslash outside a string, hoping to hide what follows: never built
        ('{"cases": [null], "calls": [["f", [\\"' + "[]," * 200_000 + "[]], {}]]}", "refused"),
        # JSON that is not ASCII (the worker writes ASCII): not a reply
        ('{"cases": [null], "calls": [["f", ["\u00e9"], {}]]}', None),
        # a reply that does not close: not a reply
        ('{"cases": [null], "calls": [["f", [' + "[" * 10, None),
        # nested past the cap: refused before it is built
        ('{"cases": [null], "calls": [["f", [' + "[" * 300 + "]" * 300 + "], {}]]}", "too_big"),
    ],
    ids=["in a string", "escaped quotes", "a stray backslash", "not ascii", "unclosed", "deep"],
)
def test_a_reply_is_counted_before_it_is_built(text, outcome):
    """``read_reply`` on crafted replies: structure hidden in strings or behind escapes is
    counted as JSON reads it (never less), so nothing past the caps is built."""
    source = ("f", "", "", ("assert f(1) == 2",))
    try:
        got = replay_reply.read_reply(_reply(text), 1, 100, source)
    except replay_reply.ReplyTooBig:
        got = "too_big"
    if outcome == "read":
        assert got is not None and got != "too_big" and got.cost < 8 << 20
    elif outcome == "refused":
        assert got in (None, "too_big")
    else:
        assert got == outcome


def test_the_caps_grow_with_the_rows_own_source():
    """A row whose literal arguments are large gets a reply cap in proportion: its honest
    reply is read; the same reply for a short row is refused."""
    big = [list(range(i, i + 30_000)) for i in range(5)]  # 150k values, ~1 MB of JSON
    tests = tuple(f"assert f({xs!r}) == 0" for xs in big)
    reply = {"cases": [None] * 5, "calls": [["f", [xs], {}] for xs in big]}
    got = replay_reply.read_reply(_reply(reply), 5, 100, ("f", "", "", tests))
    assert got is not None and len(got.calls) == 5
    with pytest.raises(replay_reply.ReplyTooBig):
        replay_reply.read_reply(_reply(reply), 5, 100, ("f", "", "", ("assert f(1)",) * 5))


def test_honest_rows_replies_sit_far_under_the_caps(fam):
    """The HumanEval rows with the largest replies (random and computed arguments) score
    their canonical solution 1 and a wrong program 0 under the caps."""
    rows = {t.id: t for t in humaneval_tasks()}
    tasks = [rows[i] for i in ("HumanEval/32", "HumanEval/38", "HumanEval/53")]
    pairs = [(t, fam.reference_completion(t)) for t in tasks]
    pairs += [(t, fam.wrong_completion(t)) for t in tasks]
    got = fam.score_pairs(pairs)
    assert [v.score for v in got] == [1.0] * 3 + [0.0] * 3, [v.reason for v in got]


def test_the_first_pass_cache_is_bounded_by_bytes(fam, monkeypatch):
    """First passes are kept within a byte budget (oldest dropped first), not only a count."""
    monkeypatch.setattr(judge, "_FIRST", {})
    monkeypatch.setattr(judge, "_FIRST_BYTES", [0])
    # ``{i} + 1``: an operator keeps the row off the judge's in-process path (``plain.py``)
    first = task([f"assert f({i}) == {i} + 1" for i in range(20)], "c0")
    fam.score(first, WRONG)
    one = judge.first_cache_bytes()
    assert 0 < one < 1 << 20
    monkeypatch.setattr(judge, "FIRST_MAX_BYTES", int(one * 2.5))
    for k in range(1, 5):
        fam.score(task([f"assert f({i}) == {i} + {k}" for i in range(20)], f"c{k}"), WRONG)
        assert judge.first_cache_bytes() <= judge.FIRST_MAX_BYTES
    assert 1 <= len(judge._FIRST) <= 2
    assert judge.first_cache_bytes() == sum(cost for _, cost in judge._FIRST.values())


MEMORY_PROBE = """
import resource, sys
sys.path.insert(0, {repo!r})
from flowzoo.tasks.base import Task
from flowzoo.tasks.code import CodeFamily
from flowzoo.sandbox import get_sandbox
setup = {setup!r}
meta = {{"entry_point": "f", "prompt_code": "", "tests": ["assert f(1) == 2"]}}
rows = [Task(id=f"b{{i}}", question="q", family="code", meta={{**meta, "setup": setup + "#" * i}})
        for i in range(4)]
ok = Task(id="ok", question="q", family="code", meta={{**meta, "setup": ""}})
fam = CodeFamily(sandbox=get_sandbox("process", timeout_s=20, memory_mb=512))
fam.score(ok, "```python\\ndef f(x):\\n    return x + 1\\n```")
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
got = fam.score_pairs([(r, "```python\\ndef f(x):\\n    return x\\n```") for r in rows])
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
fam.sandbox.close()
print(sorted({{v.reason for v in got}}), (after - before) // 1024)
"""


def test_reply_bombs_leave_the_trainers_memory_bounded():
    """Four rows each replying 16 MB of nested lists (a few KB on the wire): the judge's
    peak memory grows by a few MB, where each once cost ~920 MB."""
    setup = forging(BOMBS["16 MB of nested lists"])
    code = MEMORY_PROBE.format(repo=REPO, setup=setup)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-2000:]
    reasons, grew_mb = r.stdout.strip().rsplit(" ", 1)
    assert reasons == "['judge_limit:reply_too_big']", r.stdout
    assert int(grew_mb) < 64, f"peak memory grew by {grew_mb} MB"


# ------------------------------------------------------------------ 2. past the parser
#: code Python's parser or compiler gives up on, each a different way
PAST_PARSER = {
    "unary minus (MemoryError)": "assert f(1) == " + "-" * 100_000 + "2",
    "not (MemoryError)": "assert " + "not " * 100_000 + "f(1)",
    "lambdas (MemoryError)": "x = " + "lambda: " * 5_000 + "1\nassert f(1) == 2",
    "a long sum (RecursionError)": "assert " + "+".join(["f(1)"] * 5_000) + " == 2",
    "attributes (RecursionError)": "assert f(1)" + ".a" * 5_000 + " == 2",
}
#: and code that is bad syntax at the parser's limits
UNPARSABLE = {
    "parentheses": "assert f(" + "(" * 1_000 + "1" + ")" * 1_000 + ") == 2",
    "indentation": "".join(" " * i + "if 1:\n" for i in range(120)) + " " * 120 + "pass",
    "a null byte": "assert f(1) == 2\x00",
}


def test_row_code_past_the_parser_fails_its_row_and_the_batch_is_judged(fam):
    """In a test, the setup or the prompt's code: the row scores 0 with ``bad_tests`` (a
    flag), and the honest row in the same batch still scores 1 and 0."""
    honest = task(["assert f(1) == 2"], "honest")
    bad = []
    for name, code in PAST_PARSER.items():
        bad.append(task([code], f"tests:{name}"))
        bad.append(task(["assert f(1) == 2"], f"setup:{name}", setup=code))
        bad.append(task(["assert f(1) == 2"], f"prompt:{name}", prompt_code=code))
    for name, code in UNPARSABLE.items():
        bad.append(task([code, "assert f(1) == 2"], f"tests:{name}"))
        bad.append(task(["assert f(1) == 2"], f"setup:{name}", setup=code))
    pairs = [(honest, RIGHT)] + [(t, RIGHT) for t in bad] + [(honest, WRONG)]
    got = fam.score_pairs(pairs)
    assert got[0].score == 1.0 and got[-1].score == 0.0, (got[0].reason, got[-1].reason)
    for t, v in zip(bad, got[1:-1], strict=True):
        assert v.score == 0.0 and v.reason.startswith("bad_tests:"), (t.id, v.reason)
        assert v.details["status"] == "bad_tests" and v.details["passed"] == 0, t.id
        assert fam.flags(t, RIGHT) == ["bad_tests"], t.id
    for code in PAST_PARSER.values():
        with pytest.raises(ValueError, match="past what Python's parser"):
            judge_spec("f", "", "", (code,))


def test_number_literals_sharing_hashes_fail_their_row_before_compiling(fam):
    """20,000 multiples of ``2**61 - 1`` in one test took 7.5 s to compile in the judge's
    process (one table of constants, every key colliding): the row is refused with
    ``bad_tests`` before any compile, on every field; honest numbers pass, however many (a
    literal repeated, lattice points that share hashes in pairs, 3,000 powers of two)."""
    import time

    p = 2**61 - 1
    keys = ", ".join(f"{k * p}: 0" for k in range(1, 20_000))
    folded = ", ".join(f"{k} * (2**61 - 1): 0" for k in range(1, 20_000))  # one constant each
    negated = ", ".join(f"-{k} * {p}" for k in range(1, 20_000))
    bad = [
        task([f"assert f({{{keys}}}) == 2"], "tests"),
        task(["assert f(1) == 2"], "setup", setup=f"X = {{{folded}}}"),
        task(["assert f(1) == 2"], "prompt", prompt_code=f"X = [{negated}]"),
    ]
    t0 = time.monotonic()
    got = fam.score_pairs([(t, RIGHT) for t in bad])
    assert time.monotonic() - t0 < 60  # not the minutes a compile of each would take here
    for t, v in zip(bad, got, strict=True):
        assert v.reason.startswith("bad_tests:") and "share hash values" in v.reason, t.id
    lattice = ", ".join(f"({x}, {y})" for x in range(-80, 81) for y in range(-80, 81))
    honest = task(
        [
            f"assert f(len([{lattice}])) == {161 * 161 + 1}",
            "assert f(len([" + ", ".join(["0"] * 20_000) + "])) == 20001",
            "assert f(len([" + ", ".join(f"2**{k}" for k in range(3_000)) + "])) == 3001",
        ],
        "honest",
        setup="X = [" + ", ".join(f"{k}.5" for k in range(20_000)) + "]",
    )
    (v,) = fam.score_pairs([(honest, RIGHT)])
    assert v.score == 1.0, v.reason


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


MBPP = {"task_id": 1, "text": "add one", "code": "def f(x):\n    return x + 1\n"}
HUMANEVAL = {
    "task_id": "h/0",
    "prompt": "def f(x):\n",
    "canonical_solution": "    return x + 1\n",
    "entry_point": "f",
    "test": "def check(candidate):\n    assert candidate(1) == 2\n",
}


def _bad_row(style: str, field: str, code: str) -> tuple[dict, str]:
    """A row with ``code`` in ``field`` and what its error must name."""
    if style == "mbpp":
        row = {**MBPP, "test_list": ["assert f(1) == 2"]}
        if field == "test_list":
            return {**row, "test_list": ["assert f(1) == 2", code]}, "test_list"
        if field == "test_setup_code":
            return {**row, "test_setup_code": code}, "test_setup_code"
        return {**row, "code": row["code"] + code}, "reference solution"
    if field == "test":
        return {**HUMANEVAL, "test": HUMANEVAL["test"] + code}, "test"
    if field == "prompt":
        return {**HUMANEVAL, "prompt": code + "\n" + HUMANEVAL["prompt"]}, "canonical_solution"
    return {**HUMANEVAL, "canonical_solution": "    return x + 1\n" + code}, "canonical_solution"


FIELDS = [
    ("mbpp", "test_list"),
    ("mbpp", "test_setup_code"),
    ("mbpp", "code"),
    ("humaneval", "test"),
    ("humaneval", "prompt"),
    ("humaneval", "canonical_solution"),
]


@pytest.mark.parametrize("style,field", FIELDS)
@pytest.mark.parametrize("kind", ["unary minus (MemoryError)", "a long sum (RecursionError)"])
def test_row_code_past_the_parser_is_refused_at_load_naming_file_row_field(
    tmp_path, style, field, kind
):
    good = {**MBPP, "test_list": ["assert f(1) == 2"]} if style == "mbpp" else HUMANEVAL
    code = PAST_PARSER[kind]
    if field in ("canonical_solution", "code"):
        code = "\n" + code.replace("assert ", "y = ").split("\n")[-1]
    bad, named = _bad_row(style, field, code)
    path = _write(tmp_path / "rows.jsonl", [good, bad])
    with pytest.raises(ValueError, match=rf"rows.jsonl:2: .*{named}.*past what Python"):
        load_code_file(path, style)
    with pytest.raises(ValueError, match=r"rows.jsonl:2: "):
        load_code_dataset(f"file:{path}", split=WHOLE)


def test_a_code_field_past_its_size_cap_is_refused_naming_the_row(tmp_path, fam, monkeypatch):
    monkeypatch.setattr(names, "MAX_CODE_CHARS", 2_000)
    long_test = "assert f(1) == 2" + " " * 3_000
    rows = [{**MBPP, "test_list": ["assert f(1) == 2"]}, {**MBPP, "test_list": [long_test]}]
    with pytest.raises(ValueError, match=r":2: test_list .* past the limit of 2,000 .*MAX_CODE"):
        load_code_file(_write(tmp_path / "long.jsonl", rows), "mbpp")
    v = fam.score(task([long_test + " "], "long"), RIGHT)  # a task made in code: at the judge
    assert v.score == 0.0 and "past the limit of 2,000" in v.reason


# ------------------------------------------------------------------ 3. task files
def _gz_of_spaces(path: Path, mb: int) -> Path:
    with gzip.open(path, "wb", compresslevel=9) as f:
        for _ in range(mb):
            f.write(b" " * (1 << 20))
    return path


@pytest.mark.parametrize("family", ["math", "code"])
def test_a_gzip_bomb_is_refused_naming_the_file_and_the_limit(tmp_path, monkeypatch, family):
    monkeypatch.setattr("flowzoo.tasks.files.GZIP_FLOOR_BYTES", 1 << 20)
    path = _gz_of_spaces(tmp_path / "bomb.jsonl.gz", 8)
    load = load_math_dataset if family == "math" else load_code_dataset
    msg = r"bomb.jsonl.gz: inflates .* past the limit of 1,048,576 bytes.*GZIP_MAX_RATIO.*gunzip"
    with pytest.raises(ValueError, match=msg):
        load(f"{'jsonl' if family == 'math' else 'file'}:{path}", split=WHOLE)


def test_a_plain_file_past_the_cap_is_refused_and_honest_gz_files_load(tmp_path, monkeypatch):
    text = "add one to x. " * 300  # rows that compress well: the file inflates >100x
    rows = [
        {**MBPP, "task_id": i, "text": text, "test_list": [f"assert f({i}) == {i + 1}"]}
        for i in range(300)
    ]
    plain = _write(tmp_path / "rows.jsonl", rows)
    gz = tmp_path / "rows.jsonl.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes(), 9))
    assert gz.stat().st_size * 100 < plain.stat().st_size  # under the floor: read
    assert len(load_code_file(gz, "mbpp")) == 300
    monkeypatch.setattr("flowzoo.tasks.files.MAX_FILE_BYTES", 10_000)
    with pytest.raises(
        ValueError, match=r"rows.jsonl: holds [\d,]+ bytes, past the limit of 10,000"
    ):
        load_code_file(plain, "mbpp")
    with pytest.raises(ValueError, match=r"rows.jsonl.gz: inflates .* past the limit of 10,000"):
        load_code_file(gz, "mbpp")


GZ_PROBE = """
import gzip, resource, sys
sys.path.insert(0, {repo!r})
from flowzoo.tasks.code.data import load_code_dataset
with gzip.open({path!r}, "wb", compresslevel=9) as f:
    for _ in range(200):
        f.write(b" " * (1 << 20))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    load_code_dataset("file:" + {path!r}, split="all")
    print("loaded", 0)
except ValueError as e:
    grew = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024
    print("refused" if "past the limit" in str(e) else repr(e), grew)
"""


def test_a_gzip_bomb_leaves_memory_bounded(tmp_path):
    """200 MB of spaces in a ~200 KB file, at the default caps: refused after 64 MiB, where
    the whole file was once inflated (a 298 KB one took 600 MB)."""
    code = GZ_PROBE.format(repo=REPO, path=str(tmp_path / "bomb.jsonl.gz"))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-2000:]
    outcome, grew_mb = r.stdout.split()
    assert outcome == "refused", r.stdout
    assert int(grew_mb) < 160, f"peak memory grew by {grew_mb} MB"
    assert os.path.getsize(tmp_path / "bomb.jsonl.gz") < 1 << 20
