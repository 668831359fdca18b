"""Plain rows (``plain.py``): test code that can only call the candidate with literals and
compare with literals is replayed in the judge's process. The whitelist, both ways; the
verdicts equal the sandbox replay's on every plain shipped row; the prompt never runs."""

import os

import pytest

from flowzoo.tasks.base import Task
from flowzoo.tasks.code import CodeFamily, humaneval_tasks, judge
from flowzoo.tasks.code.data import load_code_dataset
from flowzoo.tasks.code.plain import PLAIN_MAX_CHARS, is_plain
from flowzoo.tasks.code.testcode import judge_spec
from flowzoo.tasks.code.wire import canonical_repr, decode


def _spec(tests, setup="", prompt="", entry="f"):
    return judge_spec(entry, prompt, setup, tuple(tests))


@pytest.mark.parametrize(
    "setup,tests",
    [
        ("", ["assert f(1) == 2"]),
        ("candidate = f\nMETA = {'a': [1, (2, 3)]}", ["assert candidate([1, -2.5]) != (0, 1)"]),
        ("", ["assert f(f(1)) == 3", "assert not f(x=None)", "pass"]),
        ("", ["assert f('a') in ['a', 'b'] and f(2) not in {1: 2}", "assert f(0), 'message'"]),
        ("", ["assert _fz_json_eq(f({'k': [1]}), {'k': [1]})"]),
        ("", ["assert f(1) == 2 == f(2)", "assert f(True) or f(+3j)"]),
    ],
)
def test_plain_rows_pass_the_whitelist(setup, tests):
    assert is_plain(_spec(tests, setup))


@pytest.mark.parametrize(
    "setup,tests",
    [
        ("", ["assert abs(f(1) - 2) < 1e-6"]),  # a builtin, an operator, an ordering
        ("", ["assert f(1) == 2 * 3"]),  # arithmetic on literals (sizes it could build)
        ("", ["assert f(1).real == 2"]),  # an attribute
        ("", ["assert f([1])[0] == 2"]),  # a subscript
        ("", ["assert f(*[1]) == 2"]),  # starred arguments
        ("", ["assert f(**{'x': 1}) == 2"]),
        ("", ["for i in range(3):\n    assert f(i) == i"]),  # a loop
        ("", ["x = f(1)\nassert x == 2"]),  # a binding in a test
        ("", ["assert f(1) == 2, str(f)"]),  # a message that is code
        ("", ["assert f(1) is None"]),  # identity: not the strict comparison
        ("", ["assert f(lambda: 1) == 2"]),
        ("", ["assert f(f'{1}') == 2"]),
        ("", ["assert f((y := 1)) == 2"]),
        ("import math", ["assert f(1) == 2"]),  # an import
        ("x = 1", ["assert f(x) == 2"]),  # a name that is not the candidate's
        ("g = f\ng = 1", ["assert g(1) == 2"]),  # an alias rebound to data
        ("g = len", ["assert g(1) == 2"]),
        ("def g(x):\n    return f(x)", ["assert g(1) == 2"]),
        ("", ["assert math.floor(f(1)) == 2"]),  # a stdlib module the tests use
        ("", ["assert open(f(1)) == 2"]),
    ],
)
def test_anything_else_is_replayed_in_the_sandbox(setup, tests):
    assert not is_plain(_spec(tests, setup))


def test_a_prompt_helper_is_not_the_candidates():
    """A name the prompt defines is the row's code, not a call to the candidate."""
    prompt = "def helper(x):\n    return x * 10\n"
    assert not is_plain(_spec(["assert f(2) == helper(2)"], prompt=prompt))
    assert is_plain(_spec(["assert f(2) == 20"], prompt=prompt))


def _verdicts(fam, pairs, monkeypatch, plain):
    with monkeypatch.context() as m:
        if not plain:
            m.setattr(judge, "is_plain", lambda spec: False)
        got = fam.score_pairs(pairs)
    return [
        (v.score, v.correct, v.reason, v.details.get("cases"), v.details["rounds"]) for v in got
    ]


@pytest.fixture(scope="module")
def fam():
    f = CodeFamily(sandbox_options={"timeout_s": 10})
    yield f
    f.sandbox.close()


def test_plain_rows_verdicts_equal_the_sandbox_replays(fam, monkeypatch):
    """Every plain shipped HumanEval row and generated function task: the canonical program,
    a wrong one and one that does not load get the same verdict (score, cases, rounds)
    replayed here as in a sandbox run."""
    rows = [t for t in humaneval_tasks() if is_plain(fam._run(t, "").spec)]
    rows += list(load_code_dataset("funcs", split="test", n=40))
    assert len(rows) > 150
    pairs = [(t, fam.reference_completion(t)) for t in rows]
    pairs += [(t, fam.wrong_completion(t)) for t in rows]
    pairs += [(t, "```python\ndef oops(:\n```") for t in rows[::10]]
    here = _verdicts(CodeFamily(sandbox=fam.sandbox), pairs, monkeypatch, plain=True)
    there = _verdicts(CodeFamily(sandbox=fam.sandbox), pairs, monkeypatch, plain=False)
    assert here == there
    assert sum(v[1] for v in here) == len(rows)  # the canonical ones pass, nothing else


def test_a_plain_rows_prompt_is_never_run_here(fam, tmp_path):
    marker = tmp_path / "ran"
    prompt = f"open({str(marker)!r}, 'w').write('x')\ndef f(x):\n    pass\n"
    task = Task(
        id="p",
        question="q",
        family="code",
        meta={
            "entry_point": "f",
            "prompt_code": prompt,
            "setup": "",
            "tests": ["assert f(2) == 4"],
        },
    )
    assert is_plain(fam._run(task, "").spec)
    assert fam.score(task, "```python\ndef f(x):\n    return x * 2\n```").correct
    assert not fam.score(task, "```python\ndef f(x):\n    return x\n```").correct
    assert not marker.exists() and not os.path.exists("ran")


def test_honest_sets_decode_and_record_in_one_order():
    """Members that share a hash are refused only past the cap; an honest set's record is
    the same text whatever order its members iterate in."""
    big = decode({"S": list(range(10_000)) + [-1, -2]})  # -1 and -2 share a hash
    assert len(big) == 10_002
    # lattice points around the origin: (x, -1) and (x, -2) share hashes, in pairs
    pts = [{"T": [x, y]} for x in range(-70, 71) for y in range(-70, 71) if abs(x) + abs(y) <= 70]
    assert len(decode({"S": pts})) == len(pts) == 9_941
    assert len(decode({"D": [[p, 0] for p in pts]})) == 9_941
    a = {"b", "a", "c"}
    b = set(reversed(sorted(a)))
    assert canonical_repr(a) == canonical_repr(b) == "{'a', 'b', 'c'}"
    value = {"k": [frozenset({2, 1}), (set(),), ({"z", "y"},)]}
    assert canonical_repr(value) == "{'k': [frozenset({1, 2}), (set(),), ({'y', 'z'},)]}"


def test_a_large_row_goes_to_the_sandbox():
    """Past PLAIN_MAX_CHARS a row's literals are the sandbox's to build and bound."""
    n = PLAIN_MAX_CHARS // 20  # about 25 characters a key: past the cap
    keys = ", ".join(f"{k * (2**61 - 2)}: 0" for k in range(1, n))  # hashes apart
    assert not is_plain(_spec([f"assert f({{{keys}}}) == 1"]))
    assert is_plain(_spec(["assert f({1: 0}) == 1"]))


def test_deep_dicts_are_judged_alike_on_both_paths(fam, monkeypatch):
    """A dict argument nested 50 deep: the sandbox replay's reply held it past its depth cap
    (a dict is three JSON levels), so the same row passed here and failed there."""
    arg = "1"
    for _ in range(50):
        arg = f"{{1: {arg}}}"
    task = Task(
        id="deep",
        question="q",
        family="code",
        meta={
            "entry_point": "f",
            "prompt_code": "",
            "setup": "",
            "tests": [f"assert f({arg}) == 1"],
        },
    )
    pairs = [(task, "```python\ndef f(d):\n    return 1\n```")]
    here = _verdicts(CodeFamily(sandbox=fam.sandbox), pairs, monkeypatch, plain=True)
    there = _verdicts(CodeFamily(sandbox=fam.sandbox), pairs, monkeypatch, plain=False)
    assert here == there and here[0][1]


def test_a_large_answer_sent_back_out_is_judged_alike_on_both_paths(fam, monkeypatch):
    """``f(f(1))`` sends the candidate's answer (120,000 items) back out as an argument: the
    sandbox replay's reply carries it, and its caps grew only with the row's source."""
    task = Task(
        id="nested",
        question="q",
        family="code",
        meta={"entry_point": "f", "prompt_code": "", "setup": "", "tests": ["assert f(f(1)) == 1"]},
    )
    prog = "```python\ndef f(x):\n    return [0] * 120_000 if x == 1 else 1\n```"
    here = _verdicts(CodeFamily(sandbox=fam.sandbox), [(task, prog)], monkeypatch, plain=True)
    there = _verdicts(CodeFamily(sandbox=fam.sandbox), [(task, prog)], monkeypatch, plain=False)
    assert here == there and here[0][1], (here, there)


@pytest.mark.parametrize(
    "fields,why",
    [
        ({"prompt_code": None}, "prompt_code is not a string"),
        ({"setup": 5}, "setup is not a string"),
        ({"entry_point": 5}, "entry_point is not a string"),
        ({"tests": [None]}, "a test is not a string"),
        ({"tests": [b"assert f(1) == 1"]}, "a test is not a string"),
        ({"tests": [["assert f(1) == 1"]]}, "a test is not a string"),
        ({"tests": []}, "no tests"),
        ({"tests": ["assert f(1) == 1", "  \n"]}, "test 1 is blank"),
        ({"tests": "assert f(1) == 1"}, "no tests"),
        ({"tests": ["assert f('\ud800') == 1"]}, "not valid text"),
        ({"prompt_code": "def f(x):\n    '\ud800'\n"}, "prompt_code is not valid text"),
        ({"format": "stdio", "tests": [["1\n"]]}, "not a pair of strings"),
        ({"format": "stdio", "tests": [None]}, "not a pair of strings"),
    ],
)
def test_a_hand_built_bad_row_gets_its_own_verdict(fam, fields, why):
    """Rows the loaders would refuse, built as Tasks: ``bad_tests``, never a raise, and the
    batch's good row is scored."""
    base = {"entry_point": "f", "prompt_code": "", "setup": "", "tests": ["assert f(1) == 1"]}
    bad = Task(id="bad", question="q", family="code", meta={**base, **fields})
    good = Task(id="good", question="q", family="code", meta=base)
    prog = "```python\ndef f(x):\n    return x\n```"
    got = CodeFamily(sandbox=fam.sandbox).score_pairs([(bad, prog), (good, prog)])
    assert got[0].score == 0.0 and got[0].reason.startswith("bad_tests") and why in got[0].reason
    assert got[1].correct


def test_a_set_answer_is_recorded_in_one_order(fam):
    """The record of a set answer (``details["cases"]``, the text Voting's behaviour classes
    read) lists its members sorted, whatever order the candidate's set iterated in."""
    task = Task(
        id="sets",
        question="q",
        family="code",
        meta={"entry_point": "f", "prompt_code": "", "setup": "", "tests": ["assert f(1) == 0"]},
    )
    words = ["pear", "apple", "fig", "kiwi", "banana"]
    for order in (words, words[::-1]):
        prog = f"```python\ndef f(x):\n    s = set()\n    for w in {order!r}:\n        s.add(w)\n    return s\n```"
        v = CodeFamily(sandbox=fam.sandbox).score(task, prog)
        assert v.details["cases"][0][1] == "{'apple', 'banana', 'fig', 'kiwi', 'pear'}"
