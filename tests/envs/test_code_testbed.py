"""The code testbed's behaviour menu (docs/testbed.md): guarded tasks, whose considered
program guards the stated edge case and whose shortcut does not, played by the corpus expert
through every code workflow, with real programs scored in the sandbox."""

from __future__ import annotations

import pytest

import flowzoo
from flowzoo.envs.scripted import BehaviourPolicy, play_episode
from flowzoo.envs.workflows.base import shows_work
from flowzoo.tasks.code import CodeFamily
from flowzoo.tasks.code.guarded import guarded_tasks

CODE_ENVS = ("single-code", "voting-code", "eval-opt-code", "orch-workers-code")


@pytest.fixture(scope="module")
def family():
    return CodeFamily()


def test_the_guard_decides_every_task_and_nothing_else_does(family):
    """Every guarded task (each split, each level): its canonical program passes, the same
    program without its guard fails (the edge case is in the tests), and a funcs task has no
    shortcut to read."""
    for split in ("train", "test", "ood"):
        tasks = list(guarded_tasks(80, split=split))
        assert {t.meta["level"] for t in tasks} == {1, 2, 3, 4}
        for t in tasks:
            right, short = family.reference_completion(t), family.direct_completion(t)
            assert short is not None
            assert family.score(t, right).correct, t.question
            v = family.score(t, short)
            assert not v.correct and 0 < v.details["passed"] < v.details["total"], t.question
            assert shows_work(family, t, right) is True
            assert shows_work(family, t, short) is False
            assert shows_work(family, t, "no code here") is False
    funcs = flowzoo.make_env("voting-code").tasks[0]  # the default dataset: funcs
    assert family.direct_completion(funcs) is None and shows_work(family, funcs, "x") is None


def test_the_guard_is_read_from_the_parsed_program_not_its_text():
    """A guard is the function's first statement returning on a condition of its parameters,
    on one line, two, or as a conditional expression; a guard on something else, one that is
    not first, a loop's ``if`` and unparsable text are not."""
    from flowzoo.tasks.code.family import guards_first

    def f(body: str) -> str:
        return "def sum_gt(xs):\n" + body

    yes = [
        f("    if not xs:\n        return -1\n    return sum(xs)\n"),
        f("    if not xs: return -1\n    return sum(xs)\n"),
        f("    return -1 if not xs else sum(xs)\n"),
        f('    """Sum."""\n    if len(xs) == 0:\n        return -1\n    return sum(xs)\n'),
    ]
    no = [
        f("    if True:\n        return 0\n    return sum(xs)\n"),
        f("    for x in xs:\n        if x:\n            return x\n    return 0\n"),
        f("    return sum(xs)\n    if not xs:\n        return -1\n"),
        f("    return sum(xs)\n"),
        "  if a:\n  return",
        "x = 1\n",
        "(" * 5000,
    ]
    assert all(guards_first(p, "sum_gt") for p in yes)
    assert not any(guards_first(p, "sum_gt") for p in no)
    # a misnamed function is read all the same (it fails its tests either way); Python's
    # binding decides which definition is read (the last), *args count as parameters
    assert guards_first("def other(xs):\n    if not xs:\n        return -1\n", "sum_gt")
    guarded, plain = yes[0], f("    return sum(xs)\n")
    assert guards_first(plain + guarded, "sum_gt") and not guards_first(guarded + plain, "sum_gt")
    assert guards_first("def sum_gt(*xs):\n    if not xs:\n        return -1\n", "sum_gt")
    assert not guards_first(None, "sum_gt")  # type: ignore[arg-type]


def test_the_guard_is_read_from_the_program_that_is_scored(family):
    """A body-only block is read joined to the task's signature, and of several blocks the
    one that defines the entry point: the program scoring runs, not another one."""
    task = next(t for t in guarded_tasks(40, split="test") if t.meta["level"] == 1)
    guard, body = task.answer.split("\n", 1)[1].split("\n", 2)[:2], task.meta["shortcut"]
    body_only = "```python\n" + "\n".join(guard) + "\n" + body.split("\n", 1)[1] + "```"
    assert family.score(task, body_only).correct and family.shows_work(task, body_only)
    usage = family.reference_completion(task) + "\n```python\nprint(1)\n```"
    assert family.score(task, usage).correct and family.shows_work(task, usage)


def _play(env_id: str, rate: float, n: int, rates: dict | None = None):
    env = flowzoo.make_env(env_id, dataset="guarded", n_tasks=max(n, 200))
    pol = BehaviourPolicy(rate, seed=1, rates=rates)
    out = []
    for i, task in enumerate(list(env.tasks)[:n]):
        info = play_episode(env, pol, seed=i, options={"task_id": task.id})
        out.append((info, env.turn_log(), env.behaviour_log()))
    return out


@pytest.mark.parametrize("env_id", CODE_ENVS)
def test_each_code_role_reads_as_it_was_played(env_id):
    """The reading comes out either way: the considered behaviour reads True on every role
    it can decide, the shortcut False; and the team is right only through the considered
    behaviour (always considered: every episode right; always shortcut: none)."""
    for rate, want in ((0.0, True), (1.0, False)):
        seen: dict[str, set] = {}
        correct = []
        for info, log, beh in _play(env_id, rate, n=12, rates={"worker": 0.0}):
            correct.append(bool(info["correct"]))
            for t, b in zip(log, beh, strict=True):
                if b is not None:
                    seen.setdefault(t.role, set()).add(b)
        assert seen and all(v == {want} for v in seen.values()), (env_id, rate, seen)
        assert set(correct) == {want}, (env_id, rate, correct)


def test_code_menu_base_rates_sit_in_the_middle():
    """Played at the corpus's rates, every code role's considered share is between 0.25
    and 0.75 (150 episodes an env)."""
    shares = {}
    for env_id in CODE_ENVS:
        rates: dict[str, list[bool]] = {}
        for _, log, beh in _play(env_id, 0.5, n=150):
            for t, b in zip(log, beh, strict=True):
                if b is not None:
                    rates.setdefault(t.role, []).append(b)
        shares.update({f"{env_id}:{r}": sum(v) / len(v) for r, v in rates.items() if len(v) >= 8})
    assert len(shares) >= 7 and all(0.25 <= s <= 0.75 for s in shares.values()), shares
