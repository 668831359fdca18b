"""The code judge's own rules: strict decoding and equality, the answer channel's parser (fed
real ExecResults with crafted output), and replay rounds (a real sandbox; plain rows, as
most here are, replayed in the judge's process: ``plain.py``)."""

import json

import pytest

from flowzoo.sandbox import ExecResult
from flowzoo.tasks.base import Task
from flowzoo.tasks.code import CodeFamily
from flowzoo.tasks.code.judge import JudgeRun
from flowzoo.tasks.code.testcode import judge_spec
from flowzoo.tasks.code.wire import RemoteRef, WireError, decode, encode, strict_eq


@pytest.mark.parametrize(
    "a,b,eq",
    [
        (1, 1, True),
        (2, 2.0, True),
        (True, 1, False),
        (False, 0, False),
        (True, True, True),
        ([1, 2], (1, 2), False),
        ([1, [2, True]], [1, [2, 1]], False),
        ({1: "a"}, {1: "a"}, True),
        ({True: "a"}, {1: "a"}, False),
        ({1, 2}, {2, 1}, True),
        ({True, 2}, {1, 2}, False),
        ("1", 1, False),
        (None, 0, False),
        (float("nan"), float("nan"), False),
        (b"x", "x", False),
    ],
)
def test_strict_equality(a, b, eq):
    assert strict_eq(a, b) is eq and strict_eq(b, a) is eq


def test_wire_round_trip_and_strict_decoding():
    v = [1, 2.5, "s", None, True, (1, (2,)), {3, 4}, frozenset({5}), {1: [2]}, b"\x00", 1j]
    assert strict_eq(decode(json.loads(json.dumps(encode(v)))), v)
    ref = RemoteRef(3)
    assert encode([ref]) == [{"R": 3}]
    for bad in ({"X": 1}, {"T": 1, "S": 2}, {"S": [[1]]}, {"D": [[1]]}, {"B": "%%"}, {"C": "x"}):
        with pytest.raises(WireError):
            decode(bad)
    deep: list = []
    for _ in range(200):
        deep = [deep]
    with pytest.raises(WireError):
        decode(deep)
    with pytest.raises(TypeError):
        encode(object())


def _task(tests: list[str], entry: str = "f", setup: str = "", prompt: str = "") -> Task:
    meta = {"entry_point": entry, "tests": tests, "setup": setup, "prompt_code": prompt}
    return Task(id="t-" + str(abs(hash(tuple(tests)))), question="q", family="code", meta=meta)


def _run(task: Task, stdout: str, exit_code: int = 0, status: str = "ok") -> JudgeRun:
    spec = judge_spec("f", task.meta["prompt_code"], task.meta["setup"], tuple(task.meta["tests"]))
    run = JudgeRun(spec, "def f(x):\n    return x\n")
    run.feed(ExecResult(status, exit_code, stdout, ""))
    return run


@pytest.mark.parametrize(
    "stdout,signal",
    [
        ("[" * 100_000 + "\n", "channel_forged"),  # nesting that would overflow a recursive parser
        ('{"i": 0, "v": 1}\n{"i": 0, "v": 2}\n{"done": 1}\n', "channel_forged"),  # twice
        ('{"i": 0, "v": {"Q": 1}}\n{"done": 1}\n', "undecodable_value"),
        ('{"i": 0, "v": [1]}\n{"done": 1}\n{"i": 0, "v": 1}\n', "channel_forged"),  # after end
        ('{"i": 5, "v": 1}\n{"done": 1}\n', "channel_forged"),  # a call never asked
        ('{"i": 0, "v": 1, "e": "X"}\n{"done": 1}\n', "channel_forged"),
        ("not json\n", "channel_forged"),
        ("", "early_exit"),  # exit 0 with no answers
        # a complex part past a float (raised OverflowError out of the judge)
        ('{"i": 0, "v": {"C": [1' + "0" * 400 + ', 0]}}\n{"done": 1}\n', "undecodable_value"),
        # set members sharing one hash value: building the set costs their number squared
        (
            '{"i": 0, "v": {"S": ['
            + ", ".join(str(k * (2**61 - 1)) for k in range(1, 600))
            + ']}}\n{"done": 1}\n',
            "undecodable_value",
        ),
        (
            '{"i": 0, "v": {"D": ['
            + ", ".join(f"[{k * (2**61 - 1)}, 0]" for k in range(1, 600))
            + ']}}\n{"done": 1}\n',
            "undecodable_value",
        ),
    ],
)
def test_malformed_answers_are_tampering_never_an_exception(stdout, signal):
    run = _run(_task(["assert f(1) == 1"]), stdout)
    assert run.done and run.tamper == [signal]
    assert [c.passed for c in run.results()] == [False]


def test_a_crash_fails_the_calls_left_unanswered_without_a_tamper_flag():
    task = _task(["assert f(1) == 1", "assert f(2) == 2"])
    run = _run(task, '{"i": 0, "v": 1}\n', exit_code=-9, status="killed")
    assert not run.tamper
    assert [c.passed for c in run.results()] == [True, False]


def test_results_decide_with_strict_equality():
    task = _task(["assert f(1) == 1", "assert f(2) == [2]", "assert f(3) is True"])
    out = '{"i": 0, "v": true}\n{"i": 1, "v": {"T": [2]}}\n{"i": 2, "v": true}\n{"done": 3}\n'
    run = _run(task, out)
    assert [c.passed for c in run.results()] == [False, False, True]


@pytest.fixture(scope="module")
def fam():
    f = CodeFamily(sandbox_options={"timeout_s": 5})
    yield f
    f.sandbox.close()


def test_arguments_that_depend_on_results_take_extra_rounds(fam):
    task = _task(["assert f(f(f(1))) == 4", "assert [f(x) for x in range(f(2))] == [1, 2, 3]"])
    good = fam.score(task, "```python\ndef f(x):\n    return x + 1\n```")
    assert good.correct and good.details["rounds"] == 3
    bad = fam.score(task, "```python\ndef f(x):\n    return x + 2\n```")
    assert not bad.correct


def test_random_arguments_are_the_same_in_every_replay(fam):
    setup = "import random\nfrom random import randint\n"
    tests = [
        "for _ in range(50):\n    a, b = randint(0, 99), random.randint(0, 99)\n"
        "    assert f(a, b) == a + b"
    ]
    v = fam.score(_task(tests, setup=setup), "```python\ndef f(a, b):\n    return a + b\n```")
    assert v.correct and v.details["rounds"] == 1


def test_expected_exceptions_prompt_helpers_and_opaque_objects(fam):
    tests = [
        "try:\n    f(-1)\nexcept ValueError:\n    pass\nelse:\n    raise AssertionError",
        "assert f(2) == helper(2)",
        "assert f(make(3)) == 3",  # an object made by the candidate goes back as a handle
    ]
    prompt = "def helper(x):\n    return x * 10\n"
    src = (
        "class Box:\n    def __init__(self, v):\n        self.v = v\n"
        "def make(v):\n    return Box(v)\n"
        "def helper(x):\n    return 0\n"  # the candidate's own helper is not the judge's
        "def f(x):\n    if isinstance(x, Box):\n        return x.v\n"
        "    if x < 0:\n        raise ValueError('negative')\n    return x * 10\n"
    )
    v = fam.score(_task(tests, prompt=prompt), f"```python\n{src}```")
    assert v.correct, v.details["cases"]


def test_a_control_flow_exception_from_the_candidate_cannot_pass_a_test(fam):
    tests = ["assert all(map(f, [1, 2, 3]))", "assert list(map(f, [1])) == [True]"]
    for exc in ("StopIteration", "StopAsyncIteration", "GeneratorExit", "KeyboardInterrupt"):
        src = f"def f(x):\n    raise {exc}\n"
        v = fam.score(_task(tests), f"```python\n{src}```")
        assert not v.correct and v.details["passed"] == 0, (exc, v.details.get("cases"))


def test_behaviour_classes_never_merge_different_outputs(fam):
    """Voting reads programs' behaviour classes: outputs that differ only past the record's
    cut, and handles to objects of different types, are different behaviours."""
    task = _task(["assert f(1) == 0", "assert g(1) == 0"], entry="f")

    def cls(tail: str, kind: str) -> tuple:
        src = (
            f"def f(x):\n    return 'a' * 300 + {tail!r}\n"
            f"class {kind}:\n    pass\n"
            f"def g(x):\n    return {kind}()\n"
        )
        return fam.answer_class(task, fam.score(task, f"```python\n{src}```"))

    assert cls("x", "Box") == cls("x", "Box")
    assert cls("x", "Box") != cls("y", "Box")  # differs after 300 characters
    assert cls("x", "Box") != cls("x", "Crate")  # a handle of another type


def test_the_judge_never_shows_expected_values_to_the_candidate(fam):
    secret = 987654321
    task = _task([f"assert f(1) == {secret}"])
    spy = (
        "```python\nimport gc, os\n"
        "def f(x):\n"
        "    want = 987654320 + x\n"
        "    seen = [o for o in gc.get_objects() if isinstance(o, (list, tuple, dict))\n"
        "            and want in (o.values() if isinstance(o, dict) else o)]\n"
        "    text = ''.join(open(n).read() for n in os.listdir('.') if os.path.isfile(n))\n"
        "    return [len(seen), str(want) in text]\n```"
    )
    v = fam.score(task, spy)
    assert v.details["cases"][0][1] == "[0, False]"


def test_endless_trusted_test_code_is_cut_off():
    """Every path has a bound: a dataset's test that loops forever fails its case (and the
    cases after it), nothing is raised later in the caller's thread."""
    import time

    from flowzoo.tasks.code.judge import replay

    spec = judge_spec("f", "", "", ("while True:\n    pass", "assert f(1) == 1"))
    results, _ = replay(spec, {}, time_limit_s=0.5)
    assert [(c.passed, c.error) for c in results] == [(False, "JudgeLimit")] * 2
    time.sleep(0.3)  # a late asynchronous exception would surface here


def test_a_candidate_value_cannot_hold_the_trusted_replay(fam, monkeypatch):
    """The candidate's answer drives a C-level computation inside the trusted test code (a
    power of a huge exponent), which an in-thread deadline cannot interrupt: the replay runs
    in a process of its own, killed at its limit; every case fails, flagged, and the next
    verdict gets a fresh process."""
    import time

    from flowzoo.tasks.code import judge, replay_worker

    monkeypatch.setattr(judge, "REPLAY_LIMIT_S", 1.0)
    monkeypatch.setattr(replay_worker, "GRACE_S", 1.0)
    task = _task(["assert f(0) ** f(1) > 0", "assert f(0) == 10"])
    slow = "```python\ndef f(x):\n    return 10 if x == 0 else 10**9\n```"
    t0 = time.monotonic()
    v = fam.score(task, slow)
    assert time.monotonic() - t0 < 30  # in the judge's own thread this ran for minutes
    assert not v.correct and v.reason == "judge_limit:replay_killed"
    assert [c[2] for c in v.details["cases"]] == ["JudgeLimit", "JudgeLimit"]
    assert fam.flags(task, slow) == ["judge_limit"]
    ok = fam.score(task, "```python\ndef f(x):\n    return 10 if x == 0 else 2\n```")
    assert ok.correct and fam.flags(task, "x") == []
