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


def test_one_frozen_batch_carries_every_rounds_turns_of_a_tree_rollout(tiny_model, tmp_path):
    """Tree rollouts with dynamic sampling: round 0 finds one problem with a signal, so a
    second round is sampled; the step's one batch holds the kept turns of both rounds, each
    told its position and episode, with its reward, group and flags fixed when it was built;
    nothing in the batch can be reassigned."""
    import dataclasses

    from flowzoo.agents.train.batch import Batch

    cfg = _cfg(
        tiny_model, tmp_path, rollout="tree", group_size=2, max_new_tokens=4,
        resample_rounds=2, filter_groups=True,
    )  # fmt: skip
    tr = Trainer(cfg, progress=False)
    rounds: dict[int, list] = {}
    play = tr._rollout_round

    def one_signal_a_round(step, round_, exclude):  # the round's first problem alone varies
        recs = play(step, round_, exclude)
        for r in recs:
            for t in r.turns:
                t.reward = float(r.index % 2) if r.group == recs[0].group else 0.0
        rounds[round_] = list(recs)  # (the trainer extends round 0's list with the next)
        return recs

    tr._rollout_round = one_signal_a_round
    seen: list[Batch] = []
    update = tr.update
    tr.update = lambda batch: seen.append(batch) or update(batch)
    m = tr.train_step()
    (batch,) = seen
    assert m["sampling"] == {"rounds": 2, "problems": 4, "informative": 2}
    firsts = [recs[0].group for recs in rounds.values()]
    want = [t for recs in rounds.values() for r in recs if r.group in firsts for t in r.turns]
    assert len(rounds) == 2 and {r.group for r in batch.records} == set(firsts)
    assert list(batch.turns) == want  # both rounds' turns, every sibling's, in order
    assert [t.index for t in batch.turns] == list(range(len(want)))
    assert all(t in batch.records[t.episode].turns for t in batch.turns)
    assert batch.rewards == tuple(t.reward for t in want) and all(batch.informative)
    assert dict(batch.role_turns) == {r: sum(t.role == r for t in want) for r in batch.role_turns}
    assert dict(batch.flagged) == {
        r: sum(t.role == r and bool(t.flags) for t in want) for r in batch.role_turns
    }
    assert m["flag_rate"] == {r: batch.flagged[r] / batch.role_turns[r] for r in batch.role_turns}
    # frozen: no field can be reassigned, and what it holds cannot be changed in place
    with pytest.raises(dataclasses.FrozenInstanceError):
        batch.turns = ()  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        batch.rewards = batch.rewards  # type: ignore[misc]
    with pytest.raises(TypeError):
        batch.rewards[0] = 5.0  # type: ignore[index]
    with pytest.raises(TypeError):
        batch.flagged["solver"] = 0  # type: ignore[index]
    with pytest.raises(AttributeError):
        batch.truncated.add(0)  # type: ignore[attr-defined]
    want[0].reward = 5.0  # a turn edited after the batch was built: the batch is unchanged
    assert batch.rewards[0] != 5.0


def test_ppo_returns_carry_each_turns_own_reward(tiny_model, tmp_path):
    """An agent's turns trained on different rewards (a cut turn pays the overlong penalty):
    with a fresh (zero) critic, gamma = lambda = 1, each turn's return is its own reward."""
    from flowzoo.agents.train.batch import Batch

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
    batch = Batch.of(cfg, records)
    adv = tr.learner.algorithm.advantages(cfg, batch, tr.learner.critic)
    for t in batch.turns:
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
    from flowzoo.agents.train.algorithms import algorithm_for
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
    from flowzoo.agents.train.algorithms import rloo
    from flowzoo.agents.train.batch import Batch

    batch = Batch.of(cfg, records)
    adv = tr.learner.algorithm.advantages(cfg, batch, None)
    assert adv.scalar == rloo.leave_one_out(batch.groups, batch.rewards)[0]
    assert stats["groups"] == len(set(batch.groups))
