# ruff: noqa: E402
"""The study's protocol on a real tiny model: task x role groups, verl-style mini-batches,
schedules, dynamic sampling, truncation masking, and sampled evaluation with per-problem
counts."""

import dataclasses
import json
import math

import pytest

torch = pytest.importorskip("torch")

from flowzoo.agents.train.batch import Batch, GroupKey, informative
from flowzoo.agents.train.evaluate import evaluate_env, single_policy
from flowzoo.agents.train.trainer import TrainConfig, Trainer
from tests.agents.train.test_training import _cfg, _varied_rewards

#: what a metrics line says of the clock, not of the run
TIMING = ("time", "wall_s", "elapsed_s", "step_s", "timing", "tokens_per_s", "throughput")


def test_task_role_pools_a_roles_turns_and_its_same_role_agents():
    key = lambda agent, role, turn: GroupKey.of("task_role", "t1", role, agent, turn)  # noqa: E731
    assert key("solver_0", "solver", 0) == key("solver_2", "solver", 0)
    assert key("evaluator", "evaluator", 0) == key("evaluator", "evaluator", 2)
    assert key("solver_0", "solver", 0) != key("aggregator", "aggregator", 0)
    assert GroupKey.of("task_role", "t2", "solver", "solver_0", 0) != key("solver_0", "solver", 0)
    # the per-agent, per-turn key splits what task_role pools
    per_turn = GroupKey.of("task_agent_turn", "t1", "evaluator", "evaluator", 0)
    assert per_turn != GroupKey.of("task_agent_turn", "t1", "evaluator", "evaluator", 1)


def test_informative_groups():
    keys = ["a", "a", "b", "b", "c"]
    assert informative(keys, [1, 0, 1, 1, 1]) == [True, True, False, False, False]


def test_mini_batches_give_the_role_with_more_turns_more_optimizer_steps(tiny_model, tmp_path):
    """verl cuts a policy's batch into fixed-size mini-batches: under Isolated, the solver
    policy (3 solvers) makes 3x the aggregator's Adam steps; one big batch makes one."""
    cfg = _cfg(tiny_model, tmp_path, policy="isolated", ppo_mini_batch=1)
    tr = Trainer(cfg, progress=False)
    records = tr._rollout(0)
    _varied_rewards(records)
    per_policy, _ = tr.update(records)
    # 2 problems x 4 episodes: 24 solver turns / (1 x 4) = 6 steps; 8 aggregator turns: 2
    assert per_policy["solver"]["policy"]["opt_steps"] == 6
    assert per_policy["aggregator"]["policy"]["opt_steps"] == 2
    one = Trainer(_cfg(tiny_model, tmp_path, policy="isolated"), progress=False)
    recs = one._rollout(0)
    _varied_rewards(recs)
    pp, _ = one.update(recs)
    assert pp["solver"]["policy"]["opt_steps"] == pp["aggregator"]["policy"]["opt_steps"] == 1
    # later mini-batches are off-policy: the ratio leaves 1 and the clip acts; one on-policy
    # step leaves the ratio at 1 (up to the sampler's rounding) and the clip idle
    many, one_step = per_policy["solver"]["roles"]["solver"], pp["solver"]["roles"]["solver"]
    assert many["ratio_dev"] > 10 * one_step["ratio_dev"] and many["clip_frac"] > 0
    assert one_step["clip_frac"] == 0.0 and one_step["ratio_dev"] < 0.01


def test_the_update_matched_control_gives_every_policy_the_shared_step_count(tiny_model, tmp_path):
    """update_matched: each Isolated policy makes as many Adam steps as one shared policy
    would on the whole batch (32 turns / 4 = 8), where the study's protocol gives the
    solvers 6 and the aggregator 2; a shared run is unchanged by it."""
    cfg = _cfg(tiny_model, tmp_path, policy="isolated", ppo_mini_batch=1, update_matched=True)
    tr = Trainer(cfg, progress=False)
    records = tr._rollout(0)
    _varied_rewards(records)
    per_policy, _ = tr.update(records)
    assert per_policy["solver"]["policy"]["opt_steps"] == 8
    assert per_policy["aggregator"]["policy"]["opt_steps"] == 8
    assert dataclasses.asdict(tr.cfg)["update_matched"] is True  # recorded with the config
    shared = Trainer(
        _cfg(tiny_model, tmp_path / "s", ppo_mini_batch=1, update_matched=True), progress=False
    )
    recs = shared._rollout(0)
    _varied_rewards(recs)
    pp, _ = shared.update(recs)
    assert [p["policy"]["opt_steps"] for p in pp.values()] == [8]


def test_update_matching_changes_nothing_for_a_shared_policy(tiny_model, tmp_path):
    """A shared run under update_matched is the shared run of the study's protocol, weight
    for weight and line for line: why the conflict sweep runs its Shared side once for both
    protocols (baselines/sweeps/conflict-claims.toml)."""
    outs = []
    for matched in (False, True):
        cfg = _cfg(
            tiny_model, tmp_path / str(matched), steps=2, ppo_mini_batch=1, update_matched=matched
        )
        Trainer(cfg, progress=False).train()
        run = tmp_path / str(matched) / "run"
        lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        kept = [{k: v for k, v in m.items() if k not in TIMING} for m in lines]
        outs.append((kept, (run / "final" / "shared" / "model.safetensors").read_bytes()))
    assert outs[0][0] == outs[1][0] and outs[0][1] == outs[1][1]


def test_warmup_and_cosine_schedules():
    cfg = TrainConfig(lr=1e-4, steps=115, warmup_steps=15, lr_schedule="cosine")
    assert cfg.lr_at(0) == pytest.approx(1e-4 / 15)
    assert cfg.lr_at(14) == pytest.approx(1e-4)
    assert cfg.lr_at(15) == pytest.approx(1e-4)
    assert cfg.lr_at(65) == pytest.approx(0.5e-4)
    assert cfg.lr_at(115) == pytest.approx(0.0, abs=1e-12)
    floor = TrainConfig(lr=1e-4, steps=100, lr_schedule="cosine", min_lr_ratio=0.1)
    assert floor.lr_at(100) == pytest.approx(1e-5)
    const = TrainConfig(lr=1e-4, steps=100, warmup_steps=10, lr_schedule="constant")
    assert const.lr_at(5) == pytest.approx(6e-5) and const.lr_at(50) == 1e-4
    # the study's optimiser protocol is the default; the preset adds its lr and warmup
    default = TrainConfig()
    assert (default.ppo_mini_batch, default.lr_schedule, default.warmup_steps) == (4, "cosine", 5)
    assert TrainConfig(preset="study").lr_schedule == "cosine"
    assert TrainConfig(preset="study").warmup_steps == 15


def test_the_optimizer_steps_at_the_scheduled_rate(tiny_model, tmp_path):
    cfg = _cfg(tiny_model, tmp_path, warmup_steps=4, lr=1e-3)
    tr = Trainer(cfg, progress=False)
    records = tr._rollout(0)
    _varied_rewards(records)
    per_policy, _ = tr.update(records)
    assert per_policy["shared"]["policy"]["lr"] == pytest.approx(2.5e-4)
    assert tr.opts["shared"].param_groups[0]["lr"] == pytest.approx(2.5e-4)


def test_filtered_groups_and_masked_truncated_turns_add_no_loss(tiny_model, tmp_path):
    cfg = _cfg(tiny_model, tmp_path, filter_groups=True)
    tr = Trainer(cfg, progress=False)
    records = tr._rollout(0)
    for r in records:  # problem 0: every member right (no variance); problem 1: varied
        for t in r.turns:
            t.reward = 1.0 if r.group == records[0].group else float(r.index % 2)
    per_policy, stats = tr.update(records)
    n_dead = sum(len(r.turns) for r in records if r.group == records[0].group)
    assert stats["dropped_groups"] == 2 and stats["dropped_turns"] == n_dead
    seen = sum(v["turns"] for v in per_policy["shared"]["roles"].values())
    assert seen == sum(len(r.turns) for r in records) - n_dead

    cut = Trainer(_cfg(tiny_model, tmp_path, max_new_tokens=3, mask_truncated=True), progress=False)
    recs = cut._rollout(0)
    _varied_rewards(recs)
    assert all(not t.finished for r in recs for t in r.turns)
    before = {k: v.clone() for k, v in cut.router.policies["shared"].model.state_dict().items()}
    _, st = cut.update(recs)
    assert st["masked_truncated"] == sum(len(r.turns) for r in recs)
    after = cut.router.policies["shared"].model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # nothing trained


def test_overlong_penalty_and_the_truncation_warning(tiny_model, tmp_path):
    cfg = _cfg(tiny_model, tmp_path, max_new_tokens=3, overlong_penalty=0.5, steps=1)
    tr = Trainer(cfg, progress=False)
    s = tr.train()
    assert any("truncation" in w and "'solver'" in w for w in s["warnings"])
    recs = tr._rollout(1)
    t = recs[0].turns[0]
    assert not t.finished  # cut at 3 tokens: the env flagged it and took the penalty off
    info = recs[0].agent_infos[t.agent]
    assert "cut_at_budget" in info["flags"]
    assert t.reward == pytest.approx(info["team_reward"] - 0.5)
    # the workflow's own budgets do not cut the formats the model was trained on
    ok = Trainer(_cfg(tiny_model, tmp_path, max_new_tokens=0), progress=False)
    assert ok.token_limits == {"solver": 96, "aggregator": 64}
    assert all(t.finished for r in ok._rollout(0) for t in r.turns)


def test_dynamic_sampling_keeps_at_most_the_batch_of_informative_problems(tiny_model, tmp_path):
    cfg = _cfg(tiny_model, tmp_path, filter_groups=True, resample_rounds=3, problems_per_step=2)
    tr = Trainer(cfg, progress=False)
    records = tr._rollout(0)
    s = tr._sampling
    assert 1 <= s["rounds"] <= 4 and s["problems"] == 2 * s["rounds"]
    kept = {str(r.group) for r in records}
    assert len(kept) <= 2 and [r.index for r in records] == list(range(len(records)))
    if s["informative"] < 2:
        assert s["rounds"] == 4  # it kept sampling to its limit
    with pytest.raises(ValueError, match="filter_groups"):
        TrainConfig(resample_rounds=2, filter_groups=False)


def test_sampled_evaluation_counts_per_problem_and_is_reproducible(tiny_policy):
    route = single_policy(tiny_policy)
    kw = dict(n_episodes=6, temperature=0.7, samples=3)
    a = evaluate_env("voting-math", route, **kw)
    b = evaluate_env("voting-math", route, **kw)
    assert a.per_problem == b.per_problem and len(a.per_problem) == 6
    assert all(0 <= c <= 3 for c in a.per_problem)
    assert a.accuracy == pytest.approx(sum(a.per_problem) / 18)
    lo, hi = a.ci
    assert lo <= a.accuracy <= hi
    d = a.as_dict()
    assert d["samples"] == 3 and "majority_correct" in d and d["cost"]["episodes"] == 18
    # the behaviour rates come with their denominators: decided turns, at most the role's
    # turns (3 solvers per episode), each rate a count over them
    assert "solver" in a.behaviour_n  # every solver turn decides: worked or direct
    assert set(a.behaviour_n) == set(a.behaviour) == set(d["behaviour_n"])
    for role, n in a.behaviour_n.items():
        assert 0 < n <= 18 * (3 if role == "solver" else 1)
        assert a.behaviour[role] * n == pytest.approx(round(a.behaviour[role] * n))
        # the turns of each behaviour that scored, at most that behaviour's turns
        considered = round(a.behaviour[role] * n)
        hit_c, hit_s = a.behaviour_hits[role]
        assert 0 <= hit_c <= considered and 0 <= hit_s <= n - considered
    assert d["behaviour_hits"] == a.behaviour_hits
    # the solvers' hits are their own answers' verdicts: summed, at most the turns right
    solver_right = sum(hits for hits in a.behaviour_hits["solver"])
    assert solver_right <= a.behaviour_n["solver"]
    g = evaluate_env("voting-math", route, n_episodes=6, temperature=0.0, samples=3)
    assert g.samples == 1 and len(g.per_problem) == 6  # greedy: one sample is all there is
    assert not math.isnan(g.accuracy)


def test_group_keys_follow_the_config(tiny_model, tmp_path):
    tr = Trainer(_cfg(tiny_model, tmp_path, group_by="task_role"), progress=False)
    records = tr._rollout(0)
    # 2 problems x 2 roles
    assert len(set(Batch.of(tr.cfg, records).groups)) == 4


def test_every_env_has_what_the_rollout_relies_on():
    import flowzoo
    from flowzoo.agents.train.rollout import RolloutEnv

    for env_id in flowzoo.list_envs():
        env = flowzoo.make_env(env_id, n_tasks=2)
        env.reset(seed=0)
        assert isinstance(env, RolloutEnv), env_id
    assert not isinstance(object(), RolloutEnv)


def test_the_algorithm_is_chosen_once_from_the_config():
    from flowzoo.agents.train.algorithms import ALGORITHMS, algorithm_for
    from flowzoo.config import ALGOS

    assert set(ALGORITHMS) == set(ALGOS)
    ppo, grpo = algorithm_for(TrainConfig(algo="ppo")), algorithm_for(TrainConfig())
    assert ppo.critic and not grpo.critic and grpo.name == "grpo"
    # the loss reads the role's clip range: a ratio of 2 with a positive advantage is
    # clipped at 1 + clip_high, so the loss is -(1.28) per token under the study's clip
    cfg = TrainConfig(clip_high=0.28)
    new, old, adv = torch.log(torch.full((3,), 2.0)), torch.zeros(3), torch.ones(3)
    loss, clipped = grpo.loss(cfg, "solver", new, old, adv, None)
    assert torch.allclose(loss, torch.full((3,), -1.28)) and clipped.tolist() == [1.0] * 3
    with pytest.raises(ValueError, match="critic"):
        ppo.loss(cfg, "solver", new, old, adv, None)
