"""The testbed's behaviour menu: what the corpus expert writes, and the readings that tell a
role's considered behaviour from its shortcut (docs/testbed.md). No torch."""

from __future__ import annotations

import pytest

import flowzoo
from flowzoo.envs.scripted import BehaviourPolicy, play_episode
from flowzoo.envs.workflows.base import shows_work
from flowzoo.tasks.math import MathFamily

MATH_ENVS = ("single-math", "voting-math", "eval-opt-math", "orch-workers-math")


def _play(env_id: str, rate: float, n: int = 40, rates: dict | None = None):
    env = flowzoo.make_env(env_id, n_tasks=max(n, 500))
    pol = BehaviourPolicy(rate, seed=1, rates=rates)
    out = []
    for i, task in enumerate(list(env.tasks)[:n]):
        pol.targets.clear()
        play_episode(env, pol, seed=i, options={"task_id": task.id})
        out.append((task, env.turn_log(), env.behaviour_log(), dict(pol.targets)))
    return out


@pytest.mark.parametrize("env_id", MATH_ENVS)
def test_the_corpus_expert_never_teaches_a_wrong_fact(env_id):
    """Every solving turn's corpus target that works the steps states only right steps, and
    every bare answer it trains on is the gold; wrong guesses are only shown to later roles."""
    fam = MathFamily()
    env = flowzoo.make_env(env_id)
    solving = env.workflow.solving_roles - {"synthesizer"}  # it copies a pick: not a fact
    shown_wrong = 0
    for task, log, _, targets in _play(env_id, 0.5):
        for j, t in enumerate(log):
            if t.role not in solving:
                continue
            target = targets.get(j, t.action)
            assert fam.score(task, target).correct, (t.prompt, target)
            for step in target.split(". ")[:-1]:
                lhs, _, rhs = step.partition(" = ")
                assert eval(lhs) == int(rhs), step  # noqa: S307 - generated arithmetic only
            shown_wrong += not fam.score(task, t.action).correct
    if env_id != "single-math":
        assert shown_wrong > 0  # later roles do meet wrong candidates


@pytest.mark.parametrize("env_id", MATH_ENVS)
def test_each_role_reads_as_considered_or_shortcut_as_it_was_played(env_id):
    """The reading can come out either way: the considered behaviour everywhere reads True,
    the shortcut everywhere reads False, on every role it can decide."""
    # workers do the opposite of their strategy on a shortcut: under "always shortcut" the
    # orchestrator says "answer directly" and a worker told so works the steps; pin workers
    # to follow their strategy so every role plays one side of its menu
    for rate, want in ((0.0, True), (1.0, False)):
        seen: dict[str, set] = {}
        for _, log, beh, _ in _play(env_id, rate, n=30, rates={"worker": 0.0}):
            for t, b in zip(log, beh, strict=True):
                if b is not None:
                    seen.setdefault(t.role, set()).add(b)
        assert seen, env_id
        assert all(v == {want} for v in seen.values()), (rate, seen)


def test_menu_base_rates_follow_the_shortcut_rate():
    """With the corpus rates, each role's considered behaviour sits near half its turns (600
    episodes an env: the rarest decidable turns, the synthesizer's, number ~120, so the
    band is about 4 standard errors wide)."""
    rates: dict[str, list[bool]] = {}  # rates=None below: the corpus's SHORTCUT_RATES
    for env_id in MATH_ENVS:
        for _, log, beh, _ in _play(env_id, 0.5, n=600, rates=None):
            for t, b in zip(log, beh, strict=True):
                if b is not None:
                    rates.setdefault(f"{env_id}:{t.role}", []).append(b)
    share = {k: sum(v) / len(v) for k, v in rates.items()}
    assert all(0.3 <= s <= 0.7 for s in share.values()), share


def test_a_bare_answer_does_not_show_work_and_steps_do():
    fam = MathFamily()
    assert shows_work(fam, None, "3 * 4 = 12. 12 + 2 = 14. \\boxed{14}")
    assert not shows_work(fam, None, "\\boxed{14}")


def test_fact_drills_state_true_facts_and_no_rl_or_held_out_computation():
    """The drills plant the primitive (every step fact a chain uses) without holding a
    one-step problem of the RL pool or a held-out split."""
    from flowzoo.tasks.base import split_of
    from flowzoo.tasks.math.data import arithmetic_tasks, computation_key
    from flowzoo.tiny.corpus import fact_drills, step_facts

    facts = set(step_facts())
    for _, prompt, text in fact_drills(200):
        assert prompt == ""
        for step in text.rstrip(".").split(". "):
            lhs, _, rhs = step.partition(" = ")
            assert eval(lhs) == int(rhs), step  # noqa: S307 - generated arithmetic only
    keys = {computation_key([f]) for f in facts}
    for sp in ("train", "test"):
        one_step = {
            t.meta["key"] for t in arithmetic_tasks(500, split=sp, levels=(1,), exhaust=True)
        }
        assert one_step and not one_step & keys
    assert all(
        split_of(k) == "pretrain"
        for k in keys
        if k.count("+") + k.count("-") == 1
        and all(p.isdigit() and len(p) == 1 for p in k.replace("+", " ").replace("-", " ").split())
    )
