"""stdin/stdout tests: the comparison, the judge in the real sandbox, early stop and the
per-task time budget, the generated tasks, and the envs on them."""

from __future__ import annotations

import random

import pytest

from flowzoo import make_env
from flowzoo.envs.scripted import oracle_policy, play_episode, wrong_policy
from flowzoo.sandbox import get_sandbox
from flowzoo.tasks.base import Task
from flowzoo.tasks.code import CodeFamily
from flowzoo.tasks.code.stdio import outputs_match, preview
from flowzoo.tasks.code.stdio_data import stdio_tasks


def fence(src: str) -> str:
    return f"```python\n{src}\n```"


def stdio_task(cases, **meta) -> Task:
    return Task(
        id=f"t-{len(cases)}-{hash(tuple(cases)) % 10**6}",
        question="q",
        answer="",
        family="code",
        meta={"format": "stdio", "tests": tuple(cases), "entry_point": "", **meta},
    )


@pytest.fixture(
    scope="module",
    params=["process", "process-spawn", pytest.param("docker", marks=pytest.mark.docker)],
)
def fam(request):
    """The stdio judge on every sandbox backend that works here (Docker skips with the
    reason when no engine answers)."""
    if request.param == "docker":
        from flowzoo.sandbox.docker import docker_unavailable_reason

        why = docker_unavailable_reason()
        if why:
            pytest.skip(f"no Docker engine: {why}")
        sbx = get_sandbox("docker", pool_size=2)
    else:
        sbx = get_sandbox("process", forkserver=request.param == "process")
    yield CodeFamily(sbx, case_timeout_s=1.0)
    sbx.close()


SUM = [(f"{i} {i + 3}\n", f"{2 * i + 3}\n") for i in range(12)]


def _patient(fam: CodeFamily) -> CodeFamily:
    """The same judge with a case timeout far past one case's run, for a check that expects
    cases to pass: on a loaded machine a spawned interpreter's start alone has taken over
    the fixture's 1 s (whose short limit the timeout checks keep)."""
    return CodeFamily(fam.sandbox, case_timeout_s=20.0)


def test_outputs_match_normalises_whitespace_and_numbers():
    assert outputs_match("3\n", "3")
    assert outputs_match("  1 2   3 \n\n", "1 2 3\n")
    assert outputs_match("1.0\n", "1.00\n")  # equal as decimals
    assert outputs_match("a\r\nb\n", "a\nb")
    assert not outputs_match("1 2\n3\n", "1 2 3\n")  # lines matter
    assert not outputs_match("0.3333\n", "0.33333333\n")  # no tolerance unless given
    assert outputs_match("0.3333\n", "0.33333333\n", float_tol=1e-3)
    assert not outputs_match("0.33\n", "0.33333333\n", float_tol=1e-3)
    assert outputs_match("1000001\n", "1000000\n", float_tol=1e-6)  # relative for big values
    assert outputs_match("nan\n", "nan\n")  # equal tokens match before any number parsing
    assert not outputs_match("nan\n", "1\n", float_tol=1e9)  # a NaN is never close
    assert not outputs_match("inf\n", "1e999\n", float_tol=1.0)
    assert not outputs_match("1e999999999\n", "1\n", float_tol=0.5)  # no overflow crash
    assert not outputs_match("", "1\n")
    assert outputs_match("", "\n")


def test_preview_is_distinct_for_long_outputs():
    a, b = "x" * 300 + "a", "x" * 300 + "b"
    assert preview(a) != preview(b) and len(preview(a)) <= 120


@pytest.mark.parametrize(
    "program, passed, reason_part",
    [
        ("a, b = map(int, input().split())\nprint(a + b)", 12, "all_passed"),
        (
            "import sys\na, b = map(int, sys.stdin.buffer.read().split())\nsys.stdout.write(f'{a+b}\\n')",
            12,
            "all_passed",
        ),
        ("a, b = map(int, open(0).read().split())\nprint('  ', a + b, '  ')", 12, "all_passed"),
        ("a, b = map(int, input().split())\nprint(a * b)", 0, "0/12"),
        ("raise ValueError('boom')", 0, "0/12"),
        ("while True:\n    pass", 0, "0/12"),
        ("print('x' * 10**8)", 0, "0/12"),
        ("def (", 0, "load_error"),
        ("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)", 0, "no_results:killed"),
    ],
    ids=["ok", "buffer", "open0", "wrong", "crash", "timeout", "huge", "syntax", "kill-runner"],
)
def test_stdio_judge_in_the_sandbox(fam, program, passed, reason_part):
    v = (_patient(fam) if passed == 12 else fam).score(stdio_task(SUM), fence(program))
    assert v.details.get("passed", 0) == passed
    assert v.correct == (passed == 12)
    assert reason_part in v.reason


def test_failures_say_why(fam):
    task = stdio_task(SUM)
    for program, why in [
        ("while True:\n    pass", "timeout"),
        ("print('x' * 10**8)", "too_big"),
        ("raise KeyError", "KeyError"),
        ("print(0)", "wrong_output"),
    ]:
        cases = fam.score(task, fence(program)).details["cases"]
        assert cases[0][2] == why
        assert cases[-1][2] == "not_run:early_stop"  # a crash stops at once, a wrong output
        assert {c[2] for c in cases} == {why, "not_run:early_stop"}  # after its chunk


def test_early_stop_runs_one_chunk_of_hundreds(fam):
    many = [(f"{i}\n", f"{i + 1}\n") for i in range(300)]
    task = stdio_task(many)
    wrong = fam.score(task, fence("print(int(input()) + 2)"))
    assert wrong.details["rounds"] == 1 and wrong.details["passed"] == 0
    right = _patient(fam).score(task, fence("print(int(input()) + 1)"))
    assert right.correct and right.details["passed"] == 300
    full = CodeFamily(fam.sandbox, early_stop=False, partial_credit=True)
    half = full.score(task, fence("n = int(input())\nprint(n + 1 if n < 150 else n)"))
    assert half.details["passed"] == 150 and half.score == pytest.approx(0.5)


def test_time_budget_bounds_a_task(fam):
    slow = [(f"{i}\n", f"{i}\n") for i in range(40)]
    budget = CodeFamily(fam.sandbox, time_budget_s=1.0, case_timeout_s=2.0)
    v = budget.score(stdio_task(slow), fence("import time\ntime.sleep(0.2)\nprint(input())"))
    cases = v.details["cases"]
    assert not v.correct
    assert 0 < v.details["passed"] < 40
    assert cases[-1][2] in ("not_run:time_budget", "lost:timeout")


def test_task_time_limit_and_float_tolerance(fam):
    tol = stdio_task([("1\n", "0.3333333\n")], float_tol=1e-4)
    assert _patient(fam).score(tol, fence("print(round(1/3, 5))")).correct
    assert not fam.score(tol, fence("print(0.3)")).correct
    task = stdio_task([("1\n", "0.3333333\n")], float_tol=1e-4, time_limit=0.5)
    v = fam.score(task, fence("import time\ntime.sleep(2)\nprint(1/3)"))
    assert v.details["cases"][0][2] == "timeout"


def test_the_program_never_sees_expected_outputs(fam):
    secret = "expected-output-9731"
    task = stdio_task([("probe\n", secret + "\n")])
    spy = "import os\nprint(open('cases.json').read())\nprint(os.listdir('.'))"
    v = fam.score(task, fence(spy))
    assert not v.correct
    assert secret not in str(v.details["cases"])


def test_behaviour_classes_follow_outputs(fam):
    task, fam = stdio_task(SUM), _patient(fam)
    a = fam.score(task, fence("a, b = map(int, input().split())\nprint(a * b)"))
    b = fam.score(task, fence("x, y = map(int, input().split())\nprint(y * x)"))
    c = fam.score(task, fence("print(7)"))
    assert fam.answer_class(task, a) == fam.answer_class(task, b) != fam.answer_class(task, c)


def test_every_generated_stdio_task_is_solved_by_its_canonical_program(fam):
    fam = _patient(fam)
    for split, n in (("train", 120), ("test", 100)):
        tasks = stdio_tasks(n, split=split)
        verdicts = fam.score_pairs([(t, fam.reference_completion(t)) for t in tasks])
        assert all(v.correct for v in verdicts), [
            (t.question, v.reason) for t, v in zip(tasks, verdicts, strict=True) if not v.correct
        ][:3]
        assert len({t.id for t in tasks}) == n


def test_generated_splits_are_disjoint_and_noisy_programs_fail_mostly(fam):
    train = {t.question for t in stdio_tasks(300, split="train")}
    test = {t.question for t in stdio_tasks(100, split="test")}
    assert not train & test
    rng = random.Random(0)
    tasks = stdio_tasks(60, split="test")
    noisy = fam.score_pairs([(t, fam.noisy_completion(t, rng)) for t in tasks])
    assert sum(v.correct for v in noisy) < 0.3 * len(tasks)


@pytest.mark.parametrize("env_id", ["voting-code", "eval-opt-code", "orch-workers-code"])
def test_code_envs_on_stdio_tasks(env_id):
    env = make_env(env_id, dataset="stdio", split="test", n_tasks=8)
    for i in range(3):
        good = play_episode(env, oracle_policy, seed=i)
        assert good["correct"] is True
        bad = play_episode(env, wrong_policy, seed=i)
        assert bad["correct"] is False


HACKS = {
    # the runner's memory (the child is its fork): only inputs are there
    "gc-scan": "import gc\nfor o in gc.get_objects():\n    if isinstance(o, dict) and 'inputs' in o:\n        print(o)\n",
    # forged verdict lines on every fd the program can find
    "forge-fds": (
        "import json, os\nline = json.dumps({'i': 0, 's': 'ok', 'o': '3', 'e': ''}) + '\\n'\n"
        "for fd in range(3, 64):\n    try:\n        os.write(fd, line.encode())\n    except OSError:\n        pass\n"
        "print(int(input().split()[0]) * 0)\n"
    ),
    "proc-parent-fd": (
        "import os\nfor n in os.listdir(f'/proc/{os.getppid()}/fd'):\n"
        "    try:\n        open(f'/proc/{os.getppid()}/fd/{n}', 'w').write('{\"done\": 1}\\n')\n"
        "    except OSError:\n        pass\nprint(0)\n"
    ),
    "exit-zero-early": "import os\nos._exit(0)\n",
    # a case that leaves a process behind to write later cases' answers
    "daemon": (
        "import os, sys, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(0.3)\n"
        "    print(3)\n    os._exit(0)\nprint(-1)\n"
    ),
}


@pytest.mark.parametrize("name", sorted(HACKS))
def test_stdio_reward_hacks_score_zero(fam, name):
    task = stdio_task(SUM)
    v = fam.score(task, fence(HACKS[name]))
    assert not v.correct and v.details["passed"] == 0, v


_FORGE = """
import json, os
ppid = os.getppid()
lines = [json.dumps({"i": i, "s": "ok", "o": str(2 * i + 3) + chr(10), "e": ""}) for i in range(12)]
lines.append(json.dumps({"done": 12}))
for fd in range(0, 40):
    try:
        with open(f"/proc/{ppid}/fd/{fd}", "w") as f:
            f.write(chr(10).join(lines) + chr(10))
    except OSError:
        pass
try:
    os.kill(ppid, 9)  # the runner's own lines never come: the forged ones would stand alone
except OSError:
    pass
"""

_DAEMON = """
import os, sys, time
a, b = map(int, input().split())
beat = "/tmp/fz-daemon-beat"
if os.path.exists(beat):
    first = os.stat(beat).st_mtime_ns
    time.sleep(0.2)
    if os.stat(beat).st_mtime_ns != first:
        print("a daemon of an earlier case is still running")
        sys.exit(0)
if a == 0 and os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.closerange(0, 4096)  # holds no pipe of the case: only the daemon stays
        for _ in range(400):
            open(beat, "w").close()
            time.sleep(0.02)
    os._exit(0)
print(a + b)
"""

_HOLD = """
import os, time
a, b = map(int, input().split())
print(a + b, flush=True)
os.close(1)
time.sleep(60)
"""


def test_no_case_reaches_the_runner_channel_or_outlives_its_limit(fam):
    """A case cannot forge the runner's report through /proc, nothing it starts outlives it
    (a setsid daemon included), and one that closes stdout and sleeps is held to its limit."""
    import time

    forged = fam.score(stdio_task(SUM), fence(_FORGE))
    assert not forged.correct and forged.details["passed"] == 0, forged
    daemon = _patient(fam).score(stdio_task(SUM[:4]), fence(_DAEMON))
    assert daemon.correct, daemon.details.get("cases")
    t0 = time.monotonic()
    held = fam.score(stdio_task(SUM[:3]), fence(_HOLD))
    # held to its 1 s case limit (the program would sleep 60 s); the bound leaves room for
    # a loaded machine
    assert not held.correct and time.monotonic() - t0 < 30, held
