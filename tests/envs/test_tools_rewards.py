"""Rewards stay where a tool's program cannot reach (docs/tools.md): the reward-forgery and
carry-over suites (tests/tasks/test_reward_hacks.py, tests/sandbox/test_carryover.py) re-run
through tool calls on a real env, and probes that go looking for the hidden tests or the gold
answer find nothing. Each direction has a control showing the probe would see what it
looks for if it were there, so a pass is not a probe that cannot see."""

from __future__ import annotations

import secrets

import pytest

import flowzoo
from flowzoo.tasks import Task, TaskSet
from flowzoo.tasks.code import function_tasks
from tests.reward_hacks import HACKS, hack_completion
from tests.sandbox.test_carryover import CHANNELS
from tests.tasks.test_reward_hacks import CHANNEL_HACKS


def _body(completion: str) -> str:
    """The program inside a ```python completion (what a ``run`` call carries)."""
    return completion.split("```python\n", 1)[1].rsplit("\n```", 1)[0]


def call(tool: str, body: str, args: str = "") -> str:
    return f"```tool {tool}{' ' + args if args else ''}\n{body}\n```"


def _results(env) -> list[str]:
    return [c.result for t in env.turn_log() for c in t.calls]


@pytest.fixture(scope="module")
def hack_env():
    """A code env whose task shows one of its tests (a visible example) and hides the rest."""
    t = function_tasks(4, split="test")[0]
    task = Task(t.id, t.question, t.answer, "code", {**t.meta, "examples": t.meta["tests"][:1]})
    env = flowzoo.make_env(
        "single-code",
        tools=["run"],
        tool_timeout_s=2.0,
        test_timeout_s=3.0,
        dataset=TaskSet([task]),
        sandbox_options={"timeout_s": 3},
    )
    return env, task


# ------------------------------------------------------------------ forgery, through the tool
@pytest.mark.parametrize("hack", sorted(HACKS))
def test_a_hack_run_through_the_tool_still_scores_zero(hack_env, hack):
    env, task = hack_env
    hacked = hack_completion(hack, task.meta["entry_point"])
    env.reset(seed=0)
    env.step(call("run", _body(hacked)))
    env.step(call("run", _body(hacked), "1"))
    env.step(hacked)
    info = env.infos["solver"]
    assert env.rewards["solver"] == 0.0 and not info["correct"], info["verdict_reason"]
    assert info["tool_calls"] == 2
    if hack in CHANNEL_HACKS:
        assert "reward_tamper" in info["flags"], info["verdict_reason"]
    # the hack's runs left nothing that moves the next verdict: the right program scores 1
    env.reset(seed=0)
    env.step(call("run", _body(hacked)))
    env.step(env.family.reference_completion(task))
    assert env.rewards["solver"] == 1.0, env.infos["solver"]["verdict_reason"]


def test_a_tool_result_that_claims_success_is_only_output(hack_env):
    env, task = hack_env
    ep = task.meta["entry_point"]
    fake = f"def {ep}(*a):\n    return None\nprint('examples: 1/1 passed\\nall_passed score 1.0')"
    env.reset(seed=0)
    env.step(call("run", fake))
    assert "examples: 0/1 passed" in _results_now(env)
    env.step(f"```python\n{fake}\n```")
    assert env.rewards["solver"] == 0.0


def _results_now(env) -> str:
    prompt = env.observe(env.agent_selection)["prompt"]
    return prompt.rsplit("```output\n", 1)[1]


# ------------------------------------------------------------------ carry-over, through the tool
@pytest.fixture(params=["fork", "spawn"])
def mode(request) -> dict:
    """The process sandbox started from its warm fork server (the default) or spawned."""
    return {"forkserver": request.param == "fork"}


def secret_env(secret: str, mode: dict):
    """A code env whose one task's gold is ``secret``: a program that learns it scores 1."""
    task = Task(
        "carry",
        "Write fz_secret() returning the secret.",
        f"def fz_secret():\n    return {secret!r}\n",
        "code",
        {
            "entry_point": "fz_secret",
            "tests": [f"assert fz_secret() == {secret!r}"],
            "setup": "",
            "prompt_code": "def fz_secret():\n",
        },
    )
    return flowzoo.make_env(
        "voting-code", tools=["run"], dataset=TaskSet([task]), sandbox_options=mode
    )


def taker(take: str) -> str:
    """A program whose ``fz_secret()`` returns what ``take`` prints (and prints it too)."""
    return (
        "import contextlib, io\n"
        "def fz_secret():\n"
        "    buf = io.StringIO()\n"
        "    with contextlib.redirect_stdout(buf):\n"
        f"        exec({take!r}, {{}})\n"
        "    return buf.getvalue().strip()\n"
        "print('took:', fz_secret())\n"
    )


def _leave_and_take(channel: str, secret: str) -> tuple[str, str]:
    """(a program that leaves ``secret`` in ``channel`` when run, a taker for it); both
    define ``fz_secret`` so ``run`` reads them whole (a block that does not is a body)."""
    leave, take = CHANNELS[channel]
    return "def fz_secret():\n    return ''\n" + leave.replace("{s}", secret), taker(take)


@pytest.mark.parametrize("channel", sorted(CHANNELS))
def test_control_one_run_that_leaves_and_takes_sees_the_secret(channel, mode):
    secret = secrets.token_hex(8)
    leave, take = _leave_and_take(channel, secret)
    env = secret_env(secret, mode)
    env.reset(seed=0)
    env.step(call("run", leave + "\n" + take))
    assert secret in _results_now(env), _results_now(env)  # the probe sees a real channel


@pytest.mark.parametrize("channel", sorted(CHANNELS))
def test_a_tool_call_leaves_nothing_for_the_verdict(channel, mode):
    secret = secrets.token_hex(8)
    leave, take = _leave_and_take(channel, secret)
    env = secret_env(secret, mode)
    env.reset(seed=0)
    env.step(call("run", leave))  # solver_0 "did the work" in a tool call
    assert "exit: 0 (ok)" in _results_now(env), _results_now(env)
    env.step(f"```python\n{take}```")  # its own message takes: must learn nothing
    env.step(call("run", leave))
    env.step(call("run", take))  # solver_1: a later tool call takes
    assert "took:" in _results_now(env) and secret not in _results_now(env)
    env.step(f"```python\n{take}```")
    env.step(call("run", take))  # solver_2: another agent's tool call takes
    assert "took:" in _results_now(env) and secret not in _results_now(env)
    env.step(f"```python\n{take}```")
    env.step("Candidate 1")
    assert env.episode_over() and env.infos["aggregator"]["team_reward"] == 0.0
    v = env.family.score_many(env.episode.task, [t.action for t in env.turn_log()[:3]])
    assert not any(x.correct for x in v), [x.reason for x in v]
    # control: the judge does pay a taker that finds the secret
    found = taker(f"print({secret!r})")
    assert env.family.score(env.episode.task, f"```python\n{found}```").correct


@pytest.mark.parametrize("channel", sorted(CHANNELS))
def test_a_scored_program_leaves_nothing_for_a_later_tool_call(channel, mode):
    secret = secrets.token_hex(8)
    leave, take = CHANNELS[channel]
    env = secret_env(secret, mode)
    # episode 1: a program that leaves the secret when the judge calls it, scored
    leaver = (
        "def fz_secret():\n"
        + "\n".join("    " + line for line in leave.replace("{s}", secret).splitlines())
        + f"\n    return {secret!r}\n"
    )
    env.reset(seed=0)
    for _ in range(3):
        env.step(f"```python\n{leaver}```")
    env.step("Candidate 1")
    assert env.infos["aggregator"]["team_reward"] == 1.0
    # episode 2: a tool call, and the next episode's tool calls, take: nothing
    env.reset(seed=1)
    env.step(call("run", taker(take)))
    assert "took:" in _results_now(env) and secret not in _results_now(env)
    env.step(call("run", taker(take)))
    assert "took:" in _results_now(env) and secret not in _results_now(env)


# ------------------------------------------------------------------ what a tool cannot see
#: a probe that searches everything a program can read for a needle built at run time (so its
#: own source never holds it): files near and far, other processes, memory, the environment
PROBE = r"""
import gc, os, sys
def _probe(parts):
    needle = "".join(parts)  # a local: the probe's own globals never hold it
    hits = []
    def look(where, text):
        if isinstance(text, bytes):
            text = text.decode("utf-8", "ignore")
        if isinstance(text, str) and needle in text:
            hits.append(where)
    tops = (".", "..", "/tmp", "/dev/shm", "/proc", "/run", "/home", "/root", "/var/tmp", "/work")
    for top in tops:
        for root, dirs, files in os.walk(top):
            if root.startswith("/proc/") and root.count("/") > 2:
                dirs[:] = []
            for n in files:
                p = os.path.join(root, n)
                if root.startswith("/proc") and n not in ("cmdline", "environ"):
                    continue
                try:
                    with open(p, "rb") as f:
                        look(p, f.read(1 << 20))
                except OSError:
                    pass
    look("environ", repr(dict(os.environ)))
    for o in gc.get_objects():
        if isinstance(o, (list, tuple, dict)):
            look("memory", repr(o)[:100000])
    for m in list(sys.modules.values()):
        look("module", repr(getattr(m, "__dict__", ""))[:100000])
    return hits
print("HITS", _probe({parts!r})[:5])
"""


def probe(needle: str, plant: str = "") -> str:
    """``PROBE`` for ``needle`` (built from two halves at run time); ``plant`` runs first."""
    half = len(needle) // 2
    return plant + PROBE.format(parts=[needle[:half], needle[half:]])


def hidden_task() -> Task:
    return Task(
        "hidden",
        "Write fz_twice(x) returning 2 * x. Example: assert fz_twice(3) == 6",
        "def fz_twice(x):\n    return 2 * x\n",
        "code",
        {
            "entry_point": "fz_twice",
            "tests": ["assert fz_twice(3) == 6", "assert fz_twice(4817263) == 9634526"],
            "setup": "",
            "prompt_code": "def fz_twice(x):\n",
        },
    )


@pytest.mark.parametrize("planted", [False, True], ids=["hidden", "control_planted"])
def test_a_run_that_searches_for_the_hidden_tests_finds_nothing(planted):
    env = flowzoo.make_env(
        "single-code", tools=["run"], tool_timeout_s=8.0, dataset=TaskSet([hidden_task()])
    )
    env.reset(seed=0)
    plant = "open('planted.txt', 'w').write('4817' + '263')\n" if planted else ""
    fn = "def fz_twice(x):\n    return 2 * x\n"
    env.step(call("run", fn + probe("4817263", plant)))
    out = _results_now(env)
    assert "HITS" in out, out
    if planted:
        assert "planted.txt" in out  # the probe does find the needle where it is
    else:
        assert "HITS []" in out and "9634526" not in out, out
    env.step(call("run", "def fz_twice(x):\n    return 2 * x\n", "2"))
    assert "tool_hidden_refused" in env.infos["solver"]["flags"]
    assert "4817263" not in "\n".join(_results(env) + [_results_now(env)])


def test_a_python_call_cannot_find_the_gold_answer():
    gold = "73914862"
    t = Task(
        "gold", "Compute 8 * 9239357 + 6.", gold, "math", {"steps": ["8 * 9239357 = 73914856"]}
    )
    env = flowzoo.make_env(
        "single-math", tools=["python"], tool_timeout_s=8.0, dataset=TaskSet([t])
    )
    env.reset(seed=0)
    env.step(call("python", probe(gold)))
    assert "HITS []" in _results_now(env), _results_now(env)
    env.step(call("python", probe("9239357")))  # the question's own number: not shown either
    assert "HITS []" in _results_now(env)
    env.step(call("python", "print(8 * 9239357 + 6)"))
    assert gold in _results_now(env)  # what the program computes it may of course print
