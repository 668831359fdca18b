# ruff: noqa: E402
"""The algorithm seam on a real tiny model: what each step reports whichever round or rollout
shape played its turns, PPO's per-turn rewards, and an algorithm added as one file (RLOO)."""

import pytest

torch = pytest.importorskip("torch")

from flowzoo.agents.train.trainer import Trainer
from tests.agents.train.test_training import _cfg


def _expected_flag_rate(records) -> dict[str, float]:
    """Per role, the share of the batch's turns the env flagged, read from each episode's
    final infos (voting's agents play one turn each, so an agent's flags are its turn's)."""
    hits: dict[str, list[bool]] = {}
    for r in records:
        for t in r.turns:
            hits.setdefault(t.role, []).append(bool(r.info["flags_by_agent"][t.agent]))
    return {role: sum(v) / len(v) for role, v in hits.items()}


@pytest.mark.parametrize(
    "shape",
    [
        # no problem is informative at 4 tokens: both rounds' episodes are kept and trained on
        {"resample_rounds": 1, "filter_groups": True},
        {"rollout": "tree", "group_by": "task_agent_turn", "group_size": 2},
    ],
    ids=["resampled", "tree"],
)
def test_flag_rates_count_every_turn_trained_on(tiny_model, tmp_path, shape):
    """Every turn is cut at a 4-token budget (flagged ``cut_at_budget``): the step's flag rate
    is the batch's, not the last round's (resampling) nor 0 (tree rollouts)."""
    cfg = _cfg(tiny_model, tmp_path, max_new_tokens=4, **shape)
    tr = Trainer(cfg, progress=False)
    kept = []
    rollout = tr._rollout
    tr._rollout = lambda step: kept.extend(rollout(step)) or kept  # keep what the step trained on
    m = tr.train_step()
    expected = _expected_flag_rate(kept)
    assert min(expected.values()) > 0.5  # the budget cut most turns
    assert m["flag_rate"] == pytest.approx(expected)
    # each turn carries the env's flags on it (for a one-turn agent: all of the agent's)
    assert all(
        set(t.flags) == set(r.info["flags_by_agent"][t.agent]) for r in kept for t in r.turns
    )
    if "resample_rounds" in shape:
        # two rounds sampled; the batch keeps problems_per_step problems x G, never more
        assert m["sampling"]["rounds"] == 2 and m["sampling"]["problems"] == 4
        assert len(kept) == cfg.problems_per_step * cfg.group_size


def test_ppo_returns_carry_each_turns_own_reward(tiny_model, tmp_path):
    """An agent's turns trained on different rewards (a cut turn pays the overlong penalty):
    with a fresh (zero) critic, gamma = lambda = 1, each turn's return is its own reward."""
    from flowzoo.agents.train import advantage

    cfg = _cfg(tiny_model, tmp_path, algo="ppo", gae_lambda=1.0)
    tr = Trainer(cfg, progress=False)
    records = tr._rollout(0)
    # one agent that spoke twice: solver_1's turn becomes solver_0's second (as an evaluator's
    # later turns in Eval-Opt), and each turn is credited its own reward
    for r in records:
        for t in r.turns:
            if t.agent == "solver_1":
                t.agent, t.turn = "solver_0", 1
            t.reward = 1.0 - 0.25 * t.turn
    assert sum(t.turn > 0 and bool(t.completion_ids) for r in records for t in r.turns) > 0
    turns = advantage.index_turns(records)
    adv = tr.learner.algorithm.estimate(
        cfg, records, turns, [t.reward for t in turns], tr.learner.critic
    )
    for t in turns:
        if t.completion_ids:
            ret = adv.returns[t.index]
            assert torch.allclose(ret, torch.full_like(ret, t.reward)), (t.turn, t.reward)


def test_rloo_advantages_match_a_hand_computation():
    """Group a: rewards 1, 0, 0 -> 1 - 0, 0 - 1/2, 0 - 1/2; group b: 2, 4 -> -2, 2; the
    one-member group c gets 0 (no one to leave out), all without std normalisation."""
    from flowzoo.agents.train.algorithms.rloo import leave_one_out

    adv, stats = leave_one_out(["a", "a", "b", "a", "c", "b"], [1.0, 0.0, 2.0, 0.0, 5.0, 4.0])
    assert adv == [1.0, -0.5, -2.0, -0.5, 0.0, 2.0]
    assert stats == {"groups": 3, "singleton_groups": 1, "zero_std_groups": 0}


def test_rloo_is_selected_by_name_and_trains(tiny_model, tmp_path):
    """``--algo rloo`` runs the loop: no critic, its advantages per turn, weights move."""
    from flowzoo.agents.train.algorithm import algorithm_for
    from flowzoo.cli import build_parser
    from tests.agents.train.test_training import _changed, _snapshot, _varied_rewards

    assert build_parser().parse_args(["train", "--algo", "rloo"]).algo == "rloo"
    cfg = _cfg(tiny_model, tmp_path, algo="rloo", steps=2)
    tr = Trainer(cfg, progress=False)
    assert algorithm_for(cfg).name == "rloo" and not tr.heads
    for step in range(2):
        records = tr._rollout(step)
        _varied_rewards(records)
        before = _snapshot(tr)
        _, stats = tr.update(records)
        assert _changed(before, _snapshot(tr)) == {"shared"}
        tr.step += 1
    # the estimator's advantages are the leave-one-out ones of its task x role groups
    from flowzoo.agents.train import advantage
    from flowzoo.agents.train.algorithms import rloo

    turns = advantage.index_turns(records)
    rewards = [t.reward for t in turns]
    adv = tr.learner.algorithm.estimate(cfg, records, turns, rewards, None)
    keys = advantage.group_keys(cfg, records, turns)
    assert adv.scalar == rloo.leave_one_out(keys, rewards)[0]
    assert stats["groups"] == len(set(keys))
