"""What a task row may tell the judge, on a real process sandbox: an entry point is a function
the reference solution defines (never a builtin the tests wrap around it), no row or program
reaches the judge's own names, and a remembered verdict is keyed on everything it depends on.
Each class in several variants: a program doing no work scores 0, legit rows still pass."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from flowzoo.tasks.base import Task
from flowzoo.tasks.code import CodeFamily, judge, load_code_file, names, stdio
from flowzoo.tasks.code.testcode import judge_spec


def fence(src: str) -> str:
    return f"```python\n{src}\n```"


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def task(tests: list[str], entry: str = "f", tid: str = "t", **meta) -> Task:
    m = {"entry_point": entry, "tests": tests, "setup": "", "prompt_code": "", **meta}
    return Task(id=tid, question="q", family="code", meta=m)


@pytest.fixture(scope="module")
def fam():
    f = CodeFamily(sandbox_options={"timeout_s": 5})
    yield f
    f.sandbox.close()


# ------------------------------------------------------- 1. the entry point, told structurally
#: MBPP rows whose first call is a builtin or wrapper around the function under test:
#: (tests, setup, reference, entry point, a no-work program that fakes the wrapper)
WRAPPED = {
    "set": (
        ["assert set(common([1, 2], [2, 3])) == set([2])", "assert set(common([5], [5])) == {5}"],
        "",
        "def common(a, b):\n    return [x for x in a if x in b]\n",
        "common",
        "def set(*a):\n    return {2}\ndef common(*a):\n    return None\n",
    ),
    "sorted": (
        ["assert sorted(evens([1, 2, 4])) == sorted([4, 2])", "assert sorted(evens([3])) == []"],
        "",
        "def evens(xs):\n    return [x for x in xs if x % 2 == 0]\n",
        "evens",
        "def sorted(*a):\n    return 0\ndef evens(*a):\n    return None\n",
    ),
    "len": (
        ["assert len(upto(3)) == 3", "assert len(upto(5)) == 5"],
        "",
        "def upto(n):\n    return list(range(n))\n",
        "upto",
        "def len(x):\n    return x\ndef upto(n):\n    return n\n",
    ),
    "abs": (
        ["assert abs(area(2) - 12.566) < 0.001", "assert abs(area(1) - 3.1416) < 0.001"],
        "",
        "import math\ndef area(r):\n    return math.pi * r * r\n",
        "area",
        "def abs(x):\n    return 0\ndef area(r):\n    return 0\n",
    ),
    "math.isclose": (
        ["assert math.isclose(half(3), 1.5)", "assert math.isclose(half(1), 0.5)"],
        "",
        "def half(x):\n    return x / 2\n",
        "half",
        "import math\nmath.isclose = lambda *a, **k: True\ndef isclose(*a, **k):\n"
        "    return True\ndef half(x):\n    return 0\n",
    ),
    "isclose_from_setup": (
        ["assert isclose(third(3), 1.0)", "assert isclose(third(1), 1 / 3)"],
        "from math import isclose",
        "def third(x):\n    return x / 3\n",
        "third",
        "def isclose(*a, **k):\n    return True\ndef third(x):\n    return 0\n",
    ),
    "list": (
        ["assert list(rev((1, 2))) == list((2, 1))", "assert list(rev(())) == []"],
        "",
        "def rev(t):\n    return t[::-1]\n",
        "rev",
        "def list(*a):\n    return 0\ndef rev(t):\n    return None\n",
    ),
    "tuple": (
        ["assert tuple(dup([1])) == tuple([1, 1])", "assert tuple(dup([])) == ()"],
        "",
        "def dup(xs):\n    return [x for x in xs for _ in (0, 1)]\n",
        "dup",
        "def tuple(*a):\n    return ()\ndef dup(xs):\n    return None\n",
    ),
    "round_str_bool_max": (
        [
            "assert round(third(1), 3) == 0.333",
            "assert str(third(3)) == '1.0'",
            "assert bool(third(3))",
            "assert max(third(6), 1) == 2",
        ],
        "",
        "def third(x):\n    return x / 3\n",
        "third",
        "def round(*a):\n    return 0.333\ndef str(x):\n    return '1.0'\n"
        "def bool(x):\n    return True\ndef max(*a):\n    return 2\ndef third(x):\n    return 0\n",
    ),
    "helper_first": (  # the reference's own helper is called first, the entry point inside it
        ["assert check_all(scale(2, [1, 2]), [2, 4])", "assert scale(3, []) == []"],
        "def check_all(a, b):\n    return a == b",
        "def scale(k, xs):\n    return [k * x for x in xs]\n",
        "scale",
        "def check_all(*a):\n    return True\ndef scale(*a):\n    return []\n",
    ),
}


@pytest.fixture(scope="module")
def wrapped_tasks(tmp_path_factory):
    d = tmp_path_factory.mktemp("mbpp")
    rows = [
        {"task_id": name, "text": "Do it.", "code": code, "test_list": tests}
        | ({"test_setup_code": setup} if setup else {})
        for name, (tests, setup, code, _, _) in WRAPPED.items()
    ]
    return load_code_file(write_jsonl(d / "mbpp.jsonl", rows), "mbpp")


def test_mbpp_entry_point_is_the_function_the_reference_defines(fam, wrapped_tasks):
    ts = list(wrapped_tasks)
    assert [t.meta["entry_point"] for t in ts] == [v[3] for v in WRAPPED.values()]
    hacks = [fence(v[4]) for v in WRAPPED.values()]
    pairs = [(t, fam.reference_completion(t)) for t in ts]
    pairs += [(t, h) for t, h in zip(ts, hacks, strict=True)]
    pairs += [(t, fam.wrong_completion(t)) for t in ts]
    got = fam.score_pairs(pairs)
    n = len(ts)
    assert [v.score for v in got[:n]] == [1.0] * n, [v.reason for v in got[:n]]
    assert [v.score for v in got[n:]] == [0.0] * (2 * n), [v.reason for v in got[n:]]


MBPP_OK = {"text": "Double it.", "code": "def dbl(x):\n    return 2 * x\n"}
MBPP_TESTS = ["assert dbl(2) == 4", "assert dbl(0) == 0"]


@pytest.mark.parametrize(
    "row,msg",
    [
        ({"entry_point": "len"}, "entry_point 'len' names a Python builtin"),
        ({"entry_point": "_fz_eq"}, "entry_point '_fz_eq' is reserved"),
        ({"entry_point": "_flowzoo_call"}, "entry_point '_flowzoo_call' is reserved"),
        ({"entry_point": "__init__"}, "entry_point '__init__' is reserved"),
        ({"entry_point": "dbl(1); import os"}, "entry_point must be a Python identifier"),
        ({"entry_point": ""}, "entry_point must be a Python identifier"),
        ({"entry_point": 3}, "entry_point must be a Python identifier"),
        ({"entry_point": "twice"}, "'twice' is not a function the reference solution defines"),
        (
            {"entry_point": "aux", "code": MBPP_OK["code"] + "def aux():\n    pass\n"},
            "entry_point 'aux' is never called in 'test_list'",
        ),
        ({"code": ""}, "needs its reference solution 'code'"),
        ({"code": "dbl = lambda x: 2 * x"}, "cannot tell the entry point.*give 'entry_point'"),
        ({"code": "def dbl(x) return"}, "reference solution does not parse"),
        ({"test_list": ["assert len([1]) == 1"]}, "cannot tell the entry point"),
        (
            {"test_list": ["assert max(1, 2) == 2"], "code": "def max(a, b):\n    return a\n"},
            "'max' names a Python builtin",
        ),
        ({"test_list": ["assert dbl(2) ==="]}, "does not parse"),
        ({"test_list": ["assert dbl(2) == 4", "  "]}, "'test_list' entry 1 is blank"),
        (  # the setup's own dbl would stand in for the candidate's
            {"test_setup_code": "def dbl(x):\n    return 2 * x"},
            "test_setup_code binds the entry point 'dbl' itself",
        ),
        (
            {"test_list": ["dbl = lambda x: 2 * x\nassert dbl(2) == 4"]},
            "test_list binds the entry point 'dbl'",
        ),
        (
            {"test_list": ["def g():\n    global dbl\n    dbl = abs\ng()\nassert dbl(2) == 4"]},
            "test_list binds the entry point 'dbl'",
        ),
    ],
)
def test_mbpp_rows_without_a_usable_entry_point_are_refused_at_load(tmp_path, row, msg):
    path = write_jsonl(tmp_path / "bad.jsonl", [{**MBPP_OK, "test_list": MBPP_TESTS, **row}])
    with pytest.raises(ValueError, match=rf"bad.jsonl:1: .*{msg}"):
        load_code_file(path, "mbpp")


def test_an_explicit_mbpp_entry_point_that_fits_is_kept(fam, tmp_path):
    code = "def aux(x):\n    return x\ndef dbl(x):\n    return 2 * aux(x)\n"
    row = {**MBPP_OK, "code": code, "test_list": MBPP_TESTS, "entry_point": "dbl"}
    t = load_code_file(write_jsonl(tmp_path / "ok.jsonl", [row]), "mbpp")[0]
    assert t.meta["entry_point"] == "dbl" and t.answer == code
    assert fam.score(t, fam.reference_completion(t)).correct


HE_OK = {
    "task_id": "X/1",
    "prompt": 'def inc(x):\n    """Add one."""\n',
    "canonical_solution": "    return x + 1\n",
    "entry_point": "inc",
    "test": "def check(candidate):\n    assert candidate(1) == 2\n",
}


@pytest.mark.parametrize(
    "row,msg",
    [
        (
            {"prompt": "def sorted(x):\n", "entry_point": "sorted", "canonical_solution": "  1"},
            "'sorted' names a Python builtin",
        ),
        ({"entry_point": "dec"}, "'dec' is not a function the reference solution defines"),
        ({"entry_point": "_fz_check"}, "is reserved"),
        ({"entry_point": "__builtins__"}, "is reserved"),
        ({"test": "def check(candidate):\n    assert _fz_eq(candidate(1), 2)\n"}, "_fz_eq"),
        ({"prompt": "def _fz_json_eq(a, b):\n    return True\n" + HE_OK["prompt"]}, "reserved"),
    ],
)
def test_humaneval_rows_naming_what_the_solution_does_not_define_are_refused(tmp_path, row, msg):
    path = write_jsonl(tmp_path / "he.jsonl", [{**HE_OK, **row}])
    with pytest.raises(ValueError, match=rf"he.jsonl:1: .*{msg}"):
        load_code_file(path, "humaneval")


def lcb_row(fn_name: str, starter: str = "") -> dict:
    cases = [{"input": "[1, 2]", "output": "3", "testtype": "functional"}]
    return {
        "question_content": "Sum the list.",
        "question_id": "lcb-x",
        "starter_code": starter,
        "public_test_cases": json.dumps(cases),
        "metadata": json.dumps({"func_name": fn_name}),
    }


@pytest.mark.parametrize("name", ["len", "sum", "_fz_json_eq", "_flowzoo_call", "__init__"])
@pytest.mark.parametrize("starter", ["", "class Solution:\n    def f(self, xs):\n        "])
def test_call_test_rows_naming_a_builtin_or_a_judge_name_are_refused(tmp_path, name, starter):
    path = write_jsonl(tmp_path / "lcb.jsonl", [lcb_row(name, starter)])
    with pytest.raises(ValueError, match=rf":1: function name '{name}' (names a|is res)"):
        load_code_file(path, "livecodebench")


@pytest.mark.parametrize(
    "entry,tests,hack",
    [
        ("set", ["assert set(f(1)) == set([1, 2])"], "def set(*a):\n    return 0"),
        ("abs", ["assert abs(f(2) - 4.0) < 1e-9"], "def abs(x):\n    return 0"),
        ("len", ["assert len(f(3)) == 3"], "def len(x):\n    return 3"),
        ("sorted", ["assert sorted(f([2, 1])) == [1, 2]"], "def sorted(x):\n    return [1, 2]"),
        ("_fz_json_eq", ["assert _fz_json_eq(f(1), 2)"], "def _fz_json_eq(*a):\n    return True"),
        ("__builtins__", ["assert f(1) == 2"], "__builtins__ = None"),
    ],
)
def test_a_task_built_in_code_with_a_builtin_or_judge_entry_is_never_judged(
    fam, entry, tests, hack
):
    """Past the loaders (a task made in code): the judge itself refuses the entry point, so
    the candidate never decides a builtin or a helper; the verdict is 0, ``bad_tests``."""
    t = task(tests, entry=entry)
    v = fam.score(t, fence(hack + "\ndef f(*a):\n    return None\n"))
    assert v.score == 0.0 and v.reason.startswith("bad_tests:") and entry in v.reason


@pytest.mark.parametrize(
    "setup,tests",
    [
        ("def f(x):\n    return x + 1", ["assert f(1) == 2"]),
        ("", ["from operator import neg as f\nassert f(1) == -1"]),
        ("", ["for f in [abs]:\n    assert f(-2) == 2"]),
    ],
)
def test_tests_that_rebind_the_entry_point_are_never_judged(fam, setup, tests):
    v = fam.score(task(tests, setup=setup), fence("def f(*a):\n    return None"))
    assert v.score == 0.0 and "binds the entry point 'f'" in v.reason


def test_local_names_like_the_entry_point_are_not_a_rebinding(fam):
    tests = ["assert [f for f in [3]] == [f(3)]", "assert (lambda f: f)(2) == f(2)"]
    got = fam.score_many(task(tests), [fence("def f(x):\n    return x"), fence("f = None")])
    assert [v.score for v in got] == [1.0, 0.0], [v.reason for v in got]


# ------------------------------------------------------------- 2. the judge's names
#: names a candidate might define hoping the judge's comparisons use them
JUDGE_NAMES = ("_fz_eq", "_fz_ne", "_fz_in", "_fz_notin", "_fz_chain", "_fz_check", "_fz_json_eq")
SPOOF = "".join(f"def {n}(*a, **k):\n    return True\n" for n in JUDGE_NAMES) + (
    "globals()['fz:eq'] = globals()['fz:check'] = lambda *a: True\n"
)


@pytest.mark.parametrize(
    "tests",
    [
        ["assert f(1) == 2", "assert f(2) != None", "assert 4 in [f(3)]", "assert 0 < f(1) == 2"],
        ["assert _fz_json_eq(f(1), [2])", "assert _fz_json_eq(f(2), 3)"],  # a converter's
        ["assert f(1) == 2, 'msg'", "assert [f(x) for x in (1, 2)] == [2, 3]"],
    ],
)
def test_a_program_defining_the_judges_names_decides_nothing(fam, tests):
    t = task(tests)
    right = fam.score(t, fence("def f(x):\n    return x + 1"))
    spoof = fam.score(t, fence(SPOOF + "def f(x):\n    return None"))
    assert right.score == 1.0, right.details["cases"]
    assert spoof.score == 0.0 and spoof.details["passed"] == 0, spoof.details["cases"]


@pytest.mark.parametrize(
    "field,code",
    [
        ("tests", "assert _fz_eq(f(1), 2)"),  # an old helper's spelling: would be proxied
        ("tests", "assert _fz_check(f(1))"),
        ("tests", "_fz_json_eq = lambda a, b: True\nassert _fz_json_eq(f(1), 2)"),
        ("setup", "def _fz_json_eq(a, b):\n    return True"),
        ("setup", "import json as _fz_json"),
        ("prompt_code", "def _flowzoo_call(*a):\n    return 2"),
    ],
)
def test_row_code_using_a_judge_name_is_refused(fam, tmp_path, field, code):
    """At load (MBPP rows) and, for a task made in code, at the judge: 0, ``bad_tests``."""
    meta = {"tests": ["assert f(1) == 2"], "setup": "", "prompt_code": ""}
    meta[field] = [code] if field == "tests" else code
    t = task(meta.pop("tests"), **meta)
    hack = fence(SPOOF + "def _flowzoo_call(*a):\n    return 2\ndef f(x):\n    return None")
    v = fam.score(t, hack)
    assert v.score == 0.0 and "reserved for the judge" in v.reason
    with pytest.raises(ValueError, match="reserved for the judge"):
        judge_spec("f", meta["prompt_code"], meta["setup"], tuple(t.meta["tests"]))
    if field != "prompt_code":  # MBPP rows carry no prompt code
        row = {"text": "t", "code": "def f(x):\n    return x + 1\n", "test_list": t.meta["tests"]}
        row["test_setup_code"] = meta["setup"]
        with pytest.raises(ValueError, match=":1: .*reserved for the judge"):
            load_code_file(write_jsonl(tmp_path / "r.jsonl", [row]), "mbpp")


def test_the_method_harness_still_reaches_the_solution_and_only_it(fam, tmp_path):
    starter = "class Solution:\n    def total(self, xs):\n        "
    t = load_code_file(write_jsonl(tmp_path / "m.jsonl", [lcb_row("total", starter)]))[0]
    right = "class Solution:\n    def total(self, xs):\n        return sum(xs)"
    forged = "def _flowzoo_call(*a):\n    return 3\n" + SPOOF  # the harness comes after it
    got = fam.score_many(t, [fence(right), fence(forged)])
    assert [v.score for v in got] == [1.0, 0.0], [v.reason for v in got]


# ---------------------------------------------------- 6. the memo, keyed on the whole verdict
#: pairs of tasks with the same id and tests that differ in one field the verdict reads, and
#: a program right for the first only
MEMO_VARIANTS = {
    "setup": (
        {"setup": "K = 1"},
        {"setup": "K = 2"},
        ["assert f(1) == K"],
        "def f(x):\n    return 1",
    ),
    "prompt_code": (
        {"prompt_code": "def helper(x):\n    return x * 10\n"},
        {"prompt_code": "def helper(x):\n    return x * 20\n"},
        ["assert f(2) == helper(2)"],
        "def f(x):\n    return 20",
    ),
    "entry_point": (  # the program extracted is the block defining the entry point
        {"entry_point": "f"},
        {"entry_point": "g"},
        ["assert f(1) == 1"],
        "def f(x):\n    return 1\n```\n\n```python\ndef g(x):\n    return 0",
    ),
    "harness": (
        {"harness": "\n\ndef _flowzoo_call(*a):\n    return Solution().f(*a)\n"},
        {"harness": ""},
        ["assert _fz_json_eq(_flowzoo_call(1), 2)"],
        "class Solution:\n    def f(self, x):\n        return 2",
    ),
    "float_tol": (
        {"format": "stdio", "entry_point": "", "float_tol": 0.1},
        {"format": "stdio", "entry_point": "", "float_tol": None},
        [("", "1.0\n")],
        "print(1.05)",
    ),
    "time_limit": (
        {"format": "stdio", "entry_point": "", "time_limit": 4.0},
        {"format": "stdio", "entry_point": "", "time_limit": 0.3},
        [("", "1\n")],
        "import time\ntime.sleep(1)\nprint(1)",
    ),
}


@pytest.mark.parametrize("variant", sorted(MEMO_VARIANTS))
def test_tasks_sharing_id_and_tests_never_share_verdicts(fam, variant):
    a_meta, b_meta, tests, program = MEMO_VARIANTS[variant]
    a, b = task(list(tests), tid="same", **a_meta), task(list(tests), tid="same", **b_meta)
    text = fence(program)
    assert fam.score(a, text).score == 1.0, fam.score(a, text).details
    assert fam.score(b, text).score == 0.0  # asked after a's verdict was remembered
    fresh = CodeFamily(sandbox=fam.sandbox)  # in one batch, b first
    assert [v.score for v in fresh.score_pairs([(b, text), (a, text)])] == [0.0, 1.0]


def test_the_memo_key_follows_the_family_and_judge_options(fam, monkeypatch):
    t = task(["assert f(1) == 1", "assert f(2) == 5"], tid="opts")
    text = fence("def f(x):\n    return x")
    first = fam.score(t, text)
    assert fam.score(t, text) is first  # re-scoring the same draft is a memo hit
    try:
        fam.partial_credit = True
        assert fam.score(t, text).score == 0.5
    finally:
        fam.partial_credit = False
    key = fam._memo_key(t, text)
    for name, value in (("REPLAY_LIMIT_S", 1.0), ("REPLAY_CALLS", 10)):
        with monkeypatch.context() as m:
            m.setattr(judge, name, value)
            assert fam._memo_key(t, text) != key
    other = task(list(t.meta["tests"]), tid="opts", source="somewhere else")
    assert fam._memo_key(other, text) != key and fam._memo_key(t, text + " ") != key
    assert CodeFamily(test_timeout_s=3)._memo_key(t, text) != CodeFamily()._memo_key(t, text)


def test_envs_on_one_backend_share_verdicts_and_a_repeat_runs_once(fam, monkeypatch):
    """Every env makes its own family and a problem's samples are played by different envs:
    the same program on the same tests must run once, not once per env or per row."""
    jobs: list[int] = []
    real = fam.sandbox.run_many

    def counting(batch, *a, **k):
        jobs.append(len(batch))
        return real(batch, *a, **k)

    monkeypatch.setattr(fam.sandbox, "run_many", counting)
    t = task(["assert f(1) == 2", "assert f(3) == 4"], tid="shared-memo")
    good, bad = fence("def f(x):\n    return x + 1"), fence("def f(x):\n    return x")
    out = fam.score_pairs([(t, good), (t, bad), (t, good), (t, good)])
    assert [v.score for v in out] == [1.0, 0.0, 1.0, 1.0] and out[2] is out[0]
    assert jobs and set(jobs) == {2}  # each judge round runs the two distinct programs
    ran = sum(jobs)
    other = CodeFamily(sandbox_options={"timeout_s": 5})  # another env's family
    assert other.sandbox is fam.sandbox
    assert [v.score for v in other.score_many(t, [bad, good])] == [0.0, 1.0]
    assert sum(jobs) == ran  # decided already: no program ran again
    assert CodeFamily(sandbox_options={"timeout_s": 5}, test_timeout_s=3).score(t, good).score == 1
    assert sum(jobs) > ran  # other options: another memo key
    ran = sum(jobs)
    own = CodeFamily(sandbox=fam.sandbox)  # its own sandbox object: its own memo
    assert own.score(t, good).score == 1.0 and sum(jobs) > ran


def test_a_cap_a_user_raises_is_in_the_key_of_a_shared_verdict(fam, monkeypatch):
    """Verdicts are shared by every env in the process, so a judge-side cap (one a message
    tells users to raise) must be in the key, or a verdict decided under the old cap
    outlives it; found by review: none of these were."""
    t = task(["assert f(1) == 2", "assert f(2) == 3"], tid="caps")
    right = fence("def f(x):\n    return x + 1")
    with monkeypatch.context() as m:
        m.setattr(names, "MAX_CODE_TOKENS", 3)
        assert fam.score(t, right).reason.startswith("bad_tests")
    assert CodeFamily(sandbox_options={"timeout_s": 5}).score(t, right).reason == "all_passed"
    key = fam._memo_key(t, right)
    for obj, name, value in (
        (stdio, "CHANNEL_BYTES", 1024),
        (judge, "FIRST_MAX_ENTRIES", 3),
        (judge.JudgeRun, "call_timeout_s", 0.5),
    ):
        with monkeypatch.context() as m:
            m.setattr(obj, name, value)
            assert fam._memo_key(t, right) != key, name


def test_flags_outlive_the_shared_memo_turning_over(fam):
    """An episode reads its turns' flags after scoring; other envs' scoring may have pushed
    the verdict out of the shared memo by then."""
    bad = task(["assert f(1) =="], tid="flags-turnover")
    text = fence("def f(x):\n    return x")
    assert fam.score(bad, text).reason.startswith("bad_tests")
    fam._memo.clear()  # turned over by other envs
    assert fam.flags(bad, text) == ["bad_tests"]
    assert fam.flags(bad, text + " ") == []
    kept = pickle.loads(pickle.dumps(fam._flagged))  # an env pickled mid-episode keeps them
    assert kept._d == fam._flagged._d and kept._d
    assert pickle.loads(pickle.dumps(fam._memo)) is fam._memo  # the process's verdicts
