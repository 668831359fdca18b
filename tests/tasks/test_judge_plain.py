"""Plain rows (``plain.py``): test code that can only call the candidate with literals and
compare with literals is replayed in the judge's process. The whitelist, both ways; the
verdicts equal the sandbox replay's on every plain shipped row; the prompt never runs."""

import os

import pytest

from flowzoo.tasks.base import Task
from flowzoo.tasks.code import CodeFamily, humaneval_tasks, judge
from flowzoo.tasks.code.data import load_code_dataset
from flowzoo.tasks.code.plain import is_plain
from flowzoo.tasks.code.testcode import judge_spec


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
