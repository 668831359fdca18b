# ruff: noqa: E402
"""Policies, tiny models and the trainer, on a real (tiny, fast-pretrained) Qwen3 model."""

import json
import math

import pytest

torch = pytest.importorskip("torch")  # these tests train: they skip cleanly without torch

from flowzoo.agents.models.policy import Policy
from flowzoo.agents.train.algorithms.grpo import group_relative
from flowzoo.agents.train.batch import GroupKey
from flowzoo.agents.train.diagnostics import CoherenceDamper, role_gradient_stats
from flowzoo.agents.train.evaluate import evaluate_env, single_policy
from flowzoo.agents.train.losses import aggregate
from flowzoo.agents.train.trainer import TrainConfig, Trainer, TrainingDiverged, load_config_file
from flowzoo.envs.registry import STUDY_WORKFLOWS
from flowzoo.tiny.build import build_model, parameter_count
from flowzoo.tiny.recipe import SCALES


def _cfg(tiny_model, tmp_path, **kw):
    base = dict(
        env="voting-math",
        model=str(tiny_model),
        steps=1,
        problems_per_step=2,
        group_size=4,
        eval_every=0,
        eval_ood_episodes=0,
        save_every=0,
        max_new_tokens=40,
        # every turn trains in one Adam step at a constant lr (the protocol is tested apart)
        filter_groups=False,
        mask_truncated=False,
        ppo_mini_batch=0,
        lr_schedule="constant",
        warmup_steps=0,
        lr=1e-3,
        out_dir=str(tmp_path / "run"),
        resume=False,
    )
    base.update(kw)
    return TrainConfig(**base)


# ------------------------------------------------------------------ tiny models


def test_scales_have_the_stated_sizes():
    counts = {s: parameter_count(s) for s in SCALES}
    assert 1e5 <= counts["tiny-s"] <= 3e5
    assert 1e6 <= counts["tiny-m"] <= 2e6
    assert 5e6 <= counts["tiny-l"] <= 8e6
    m = build_model("tiny-s", 101)
    assert m.config.tie_word_embeddings is False
    assert m.lm_head.weight.data_ptr() != m.model.embed_tokens.weight.data_ptr()


def test_tiny_model_round_trips_through_from_pretrained(tiny_model):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model)
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    assert type(model).__name__ == "Qwen3ForCausalLM"
    text = "Problem: What is 3 + 4?\n\\boxed{7}"
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text
    assert tok.eos_token == "</s>" and tok.pad_token == "<pad>" and tok.bos_token == "<s>"
    meta = json.loads((tiny_model / "flowzoo_tiny.json").read_text())
    assert meta["parameters"] == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize(
    "env_id, dataset",
    [(f"{w}-math", "arith") for w in STUDY_WORKFLOWS]
    + [(f"{w}-code", d) for w in STUDY_WORKFLOWS for d in ("funcs", "stdio")],
)
def test_fast_pretrained_model_follows_every_role_format(tiny_policy, env_id, dataset):
    """Math and both code formats: every role's output parses on most prompts (the code
    roles write a fenced program, choose a candidate, give a verdict, propose a plan)."""
    res = evaluate_env(
        env_id,
        single_policy(tiny_policy),
        n_episodes=16,
        batch=16,
        env_options={"dataset": dataset},
    )
    for role, rate in res.parse_fail.items():
        assert rate <= 0.25, (role, res.parse_fail)
    for role, rate in res.no_answer.items():
        assert rate <= 0.25, (role, res.no_answer)


@pytest.mark.parametrize("env_id", ["eval-opt-math", "eval-opt-code"])
def test_sharded_evaluation_sums_to_the_whole(tiny_policy, env_id):
    """Data-parallel evaluation: two shards' counts, summed, give the unsharded figures
    (episode j keeps seed + j whichever process plays it)."""
    route, kw = single_policy(tiny_policy), {"n_episodes": 8, "max_new_tokens": 24}
    whole = evaluate_env(env_id, route, **kw).as_dict()
    signal = [whole["accuracy"], *whole["parse_fail"].values(), *whole["truncated"].values()]
    assert any(signal), whole  # not all zeros: the comparison below has something to compare
    other = {}

    def keep(xs):
        other["counts"] = xs
        return xs

    evaluate_env(env_id, route, shard=(1, 2), reduce=keep, **kw)

    def add(xs):
        return [a + b for a, b in zip(xs, other["counts"], strict=True)]

    summed = evaluate_env(env_id, route, shard=(0, 2), reduce=add, **kw).as_dict()
    assert {k: v for k, v in summed.items() if k != "cost"} == {
        k: v for k, v in whole.items() if k != "cost"
    }


def test_sampled_logprobs_match_a_forward_pass(tiny_policy):
    prompts = ["Problem: What is 3 + 4?\nRole: solver. Solve it.\n", "Problem: What is 9 - 2?\n"]
    gens = tiny_policy.generate(prompts * 2, max_new_tokens=24, temperature=0.7, seed=3)
    lps = tiny_policy.logprobs(
        [g.prompt_ids for g in gens], [g.completion_ids for g in gens], temperature=0.7
    )
    for g, lp in zip(gens, lps, strict=True):
        assert len(g.completion_ids) == len(g.logprobs) == len(lp)
        assert max(abs(a - b) for a, b in zip(g.logprobs, lp.tolist(), strict=True)) < 1e-4
    again = tiny_policy.generate(prompts * 2, max_new_tokens=24, temperature=0.7, seed=3)
    assert [g.text for g in again] == [g.text for g in gens]


def test_missing_model_path_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="local checkpoints only"):
        Policy(tmp_path / "nope")


# ------------------------------------------------------------------ algorithm pieces


def test_grpo_groups_singletons_and_norms():
    keys = [GroupKey("t1", agent="solver_0", turn=0)] * 3 + [
        GroupKey("t2", agent="solver_0", turn=0)
    ]
    adv, st = group_relative(keys, [1.0, 0.0, 0.0, 1.0])
    assert st.groups == 2 and st.singleton_groups == 1
    assert adv[3] == 0.0  # a size-1 group never gets its raw reward
    assert adv[0] > 0 > adv[1] and math.isclose(sum(adv[:3]), 0.0, abs_tol=1e-9)
    flat, _ = group_relative(keys[:3], [1.0, 1.0, 1.0])
    assert flat == [0.0, 0.0, 0.0]
    raw, _ = group_relative(keys[:3], [1.0, 0.0, 0.0], std_norm=False)
    assert math.isclose(raw[0], 2 / 3, rel_tol=1e-6)
    pr, _ = group_relative(keys[:3], [1.0, 0.0, 0.0], norm="per-role", roles=["solver"] * 3)
    assert math.isclose(pr[0], adv[0], rel_tol=1e-5)
    assert GroupKey.of("task", "t", "solver", "solver_1", 0) == GroupKey.of(
        "task", "t", "aggregator", "aggregator", 1
    )
    with pytest.raises(ValueError, match="valid"):
        GroupKey.of("episode", "t", "r", "a", 0)


def test_loss_aggregations():
    a, b = torch.tensor([1.0, 1.0]), torch.tensor([4.0])
    assert float(aggregate([a, b], [1, 1], "token-mean", 3, 2)) == pytest.approx(2.0)
    assert float(aggregate([a, b], [1, 1], "seq-mean-token-mean", 3, 2)) == pytest.approx(2.5)
    assert float(aggregate([a, b], [1, 1], "sequence-mean", 3, 2)) == pytest.approx(3.0)


def test_role_gradient_stats_and_damper():
    g = {"a": torch.tensor([3.0, 0.0]), "b": torch.tensor([0.0, 1.0])}
    st = role_gradient_stats(g)
    assert st["share"]["a"] == pytest.approx(0.75) and st["cosine"]["a|b"] == 0.0
    d = CoherenceDamper(0.5, decay=0.5)
    assert d.factor("x", torch.tensor([1.0, 0.0])) == 1.0
    assert d.factor("x", torch.tensor([1.0, 0.0])) == pytest.approx(0.5)
    assert d.factor("x", torch.tensor([-1.0, 0.0])) == 1.0
    # the EMA follows the damped gradient the step applied, not the raw one:
    # [1,0] (x1), then [1,0] damped to [0.5,0], then [-1,0] undamped
    assert torch.allclose(d.ema["x"], torch.tensor([(0.5 * 1.0 + 0.5 * 0.5) * 0.5 - 0.5, 0.0]))


# ------------------------------------------------------------------ the trainer


def _snapshot(trainer):
    return {n: {k: v.clone() for k, v in d.items()} for n, d in trainer.router.state_dict().items()}


def _changed(before, after):
    return {n for n in before if any(not torch.equal(before[n][k], after[n][k]) for k in before[n])}


def _varied_rewards(records):
    """A synthetic reward with within-group variance: even-length completions win."""
    for r in records:
        for t in r.turns:
            t.reward = 1.0 if len(t.completion_ids) % 2 == 0 else 0.0


@pytest.mark.parametrize(
    "policy,param",
    [("shared", "full"), ("isolated", "full"), ("shared", "lora"), ("isolated", "lora")],
)
def test_update_changes_exactly_the_policies_that_played(tiny_model, tmp_path, policy, param):
    tr = Trainer(
        _cfg(tiny_model, tmp_path, policy=policy, param=param, lora_r=4, lora_alpha=8),
        progress=False,
    )
    records = tr._rollout(0)
    _varied_rewards(records)
    if policy == "isolated":  # only the solvers play this batch
        for r in records:
            r.turns = [t for t in r.turns if t.role == "solver"]
    base_before = {
        k: v.clone()
        for k, v in tr.router.policies[tr.router.names[0]].model.named_parameters()
        if "lora_" not in k
    }
    before = _snapshot(tr)
    tr.update(records)
    after = _snapshot(tr)
    expected = {"shared"} if policy == "shared" else {"solver"}
    assert _changed(before, after) == expected
    if param == "lora":  # the frozen base never moves
        now = dict(tr.router.policies[tr.router.names[0]].model.named_parameters())
        assert all(torch.equal(v, now[k]) for k, v in base_before.items())


def test_per_role_gradients_add_up_to_the_total(tiny_model, tmp_path):
    tr = Trainer(_cfg(tiny_model, tmp_path, grad_clip=0.0), progress=False)
    records = tr._rollout(0)
    _varied_rewards(records)
    per_policy, _ = tr.update(records)
    g = tr.last_role_grads["shared"]
    summed = sum(g["roles"].values())
    assert torch.allclose(summed, g["total"], atol=1e-8)
    norms = [float(v.double().norm()) for v in g["roles"].values()]
    total = float(g["total"].double().norm())
    assert total <= sum(norms) + 1e-9
    roles = per_policy["shared"]["roles"]
    assert set(roles) == {"solver", "aggregator"}
    assert per_policy["shared"]["policy"]["grad_norm"] == pytest.approx(total, rel=1e-9)
    # what moved the weights: each role's part of the step after Adam, summing to the whole
    # (one optimizer step per update here, so the shares are those of that step)
    shares = [roles[r]["update_share"] for r in roles]
    assert sum(shares) == pytest.approx(1.0) and all(math.isfinite(x) for x in shares)
    assert all(math.isfinite(roles[r]["update_along"]) for r in roles)
    iso = Trainer(_cfg(tiny_model, tmp_path / "iso", policy="isolated"), progress=False)
    recs = iso._rollout(0)
    _varied_rewards(recs)
    pp, _ = iso.update(recs)
    moved = [st["roles"][n] for n, st in pp.items() if st["roles"][n]["grad_norm"] > 0]
    assert moved  # a policy of one role with a gradient: that role moved all of it
    for r in moved:
        assert r["update_share"] == pytest.approx(1.0)
        assert r["update_along"] > 0  # the step descends along its gradient


def test_ppo_update_moves_policy_and_value_head(tiny_model, tmp_path):
    tr = Trainer(_cfg(tiny_model, tmp_path, algo="ppo"), progress=False)
    records = tr._rollout(0)
    _varied_rewards(records)
    before = _snapshot(tr)
    head_before = tr.heads["shared"].proj.weight.clone()
    tr.update(records)
    assert _changed(before, _snapshot(tr)) == {"shared"}
    assert not torch.equal(head_before, tr.heads["shared"].proj.weight)


def test_kl_anchor_per_role_is_logged(tiny_model, tmp_path):
    tr = Trainer(_cfg(tiny_model, tmp_path, kl_per_role={"aggregator": 0.1}), progress=False)
    records = tr._rollout(0)
    _varied_rewards(records)
    per_policy, _ = tr.update(records)
    assert "kl" in per_policy["shared"]["roles"]["aggregator"]
    assert "kl" not in per_policy["shared"]["roles"]["solver"]


def test_resume_reproduces_the_next_step(tiny_model, tmp_path):
    a = Trainer(
        _cfg(tiny_model, tmp_path, steps=3, save_every=1, out_dir=str(tmp_path / "a")),
        progress=False,
    )
    a.train()
    rows_a = [json.loads(x) for x in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
    b = Trainer(
        _cfg(tiny_model, tmp_path, steps=2, save_every=1, out_dir=str(tmp_path / "b")),
        progress=False,
    )
    b.train()
    b2 = Trainer(
        _cfg(tiny_model, tmp_path, steps=3, save_every=1, out_dir=str(tmp_path / "b"), resume=True),
        progress=False,
    )
    summary = b2.train()
    assert summary["resumed"] and summary["steps_done"] == 3
    rows_b = [json.loads(x) for x in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows_b] == [0, 1, 2]
    for key in ("reward", "train_acc"):
        assert rows_a[2][key] == rows_b[2][key]
    # reward tampering is logged per role (none from a math policy)
    assert rows_a[2]["tamper_rate"] == dict.fromkeys(rows_a[2]["roles"], 0.0)
    for role, row in rows_a[2]["roles"].items():
        for k in ("loss", "grad_norm", "resp_len"):
            assert row[k] == pytest.approx(rows_b[2]["roles"][role][k], rel=1e-5, abs=1e-9)
    with pytest.raises(ValueError, match="different configuration"):
        Trainer(
            _cfg(tiny_model, tmp_path, steps=4, lr=0.5, out_dir=str(tmp_path / "b"), resume=True),
            progress=False,
        ).train()


def test_nan_reward_stops_and_keeps_the_last_good_checkpoint(tiny_model, tmp_path):
    class Poisoned(Trainer):
        def _rollout(self, step):
            records = super()._rollout(step)
            for t in (t for r in records for t in r.turns if step >= 1):
                t.reward = float("nan")
            return records

    tr = Poisoned(_cfg(tiny_model, tmp_path, steps=3, save_every=1), progress=False)
    with pytest.raises(TrainingDiverged, match="non-finite reward"):
        tr.train()
    state = torch.load(tr.ckpt_path, weights_only=False)
    assert state["step"] == 1
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"].startswith("diverged")


def test_short_run_raises_an_easy_reward(tiny_model, tmp_path):
    """Reward = the completion is at most 12 tokens: GRPO must learn to be brief."""

    class Brief(Trainer):
        def _rollout(self, step):
            records = super()._rollout(step)
            for t in (t for r in records for t in r.turns):
                t.reward = 1.0 if len(t.completion_ids) <= 12 else 0.0
            return records

    tr = Brief(
        _cfg(
            tiny_model,
            tmp_path,
            steps=10,
            lr=3e-3,
            group_size=6,
            problems_per_step=2,
            temperature=1.0,
        ),
        progress=False,
    )
    rewards = []
    for _ in range(10):
        m = tr.train_step()
        rewards.append(
            sum(r["reward"] * r["turns"] for r in m["roles"].values())
            / sum(r["turns"] for r in m["roles"].values())
        )
    assert sum(rewards[-3:]) / 3 > sum(rewards[:3]) / 3 + 0.15, rewards


def test_config_file_maps_onto_the_dataclass(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text(
        'env = "eval-opt-math"\npolicy = "isolated"\nsteps = 3\n'
        "[role_settings.evaluator]\nkl_coef = 0.05\n"
    )
    cfg = load_config_file(p, seed=4)
    assert (cfg.env, cfg.policy, cfg.steps, cfg.seed, cfg.role_settings) == (
        "eval-opt-math",
        "isolated",
        3,
        4,
        {"evaluator": {"kl_coef": 0.05}},
    )
    bad = tmp_path / "bad.toml"
    bad.write_text("stpes = 3\n")
    with pytest.raises(ValueError, match="stpes"):
        load_config_file(bad)
    with pytest.raises(ValueError, match="valid"):
        TrainConfig(algo="dpo")
    assert TrainConfig(preset="study").lr == 2e-5 and TrainConfig(preset="study").param == "lora"


def test_isolated_policies_take_their_own_devices(tiny_model, tmp_path):
    """The placement path (CPU only here: a machine with GPUs puts the solver on cuda:0 and
    the aggregator on cuda:1 the same way); bad placements are clear errors up front."""
    from flowzoo.cli import _train_config_from_args, build_parser

    args = build_parser().parse_args(
        ["train", "--policy", "isolated", "--policy-devices", '{"solver": "cpu"}']
    )
    assert _train_config_from_args(args).policy_devices == {"solver": "cpu"}
    cfg = _cfg(
        tiny_model,
        tmp_path,
        policy="isolated",
        algo="ppo",  # value heads follow their policy
        kl_coef=0.05,  # the reference's log-probs come to each policy's device
        policy_devices={"solver": "cpu", "aggregator": "cpu"},
    )
    tr = Trainer(cfg, progress=False)
    assert tr.router.devices == {"solver": "cpu", "aggregator": "cpu"}
    before = {k: v.clone() for k, v in tr.router.policies["solver"].model.state_dict().items()}
    records = tr._rollout(0)
    _varied_rewards(records)  # rewards with variance, so the update has a direction
    per_policy, _ = tr.update(records)
    assert set(per_policy) == {"solver", "aggregator"}
    assert per_policy["solver"]["roles"]["solver"]["kl"] >= -1e-6  # >= 0 up to float error
    after = tr.router.policies["solver"].model.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    with pytest.raises(ValueError, match="policies are"):
        Trainer(_cfg(tiny_model, tmp_path, policy_devices={"solver": "cpu"}), progress=False)
    with pytest.raises(ValueError, match="bad device"):
        Trainer(
            _cfg(tiny_model, tmp_path, policy="isolated", policy_devices={"solver": "gpu0"}),
            progress=False,
        )
    with pytest.raises(ValueError, match="one device"):
        Trainer(
            _cfg(
                tiny_model,
                tmp_path,
                policy="isolated",
                param="lora",
                policy_devices={"solver": "cpu", "aggregator": "cuda:1"},
            ),
            progress=False,
        )
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA device"):
            Trainer(
                _cfg(tiny_model, tmp_path, policy="isolated", policy_devices={"solver": "cuda:1"}),
                progress=False,
            )


def test_tree_rollout_groups_share_one_prompt(tiny_model, tmp_path):
    tr = Trainer(
        _cfg(
            tiny_model,
            tmp_path,
            rollout="tree",
            group_size=3,
            problems_per_step=2,
            group_by="task_agent_turn",
        ),
        progress=False,
    )
    records = tr._rollout(0)
    turns = [t for r in records for t in r.turns]
    by_key = {}
    for rec in records:
        for t in rec.turns:
            by_key.setdefault((rec.group, t.agent, t.turn), []).append(t)
    assert len(turns) == 2 * 4 * 3  # 2 problems x 4 voting turns x 3 siblings
    assert all(len(v) == 3 and len({tuple(x.prompt_ids) for x in v}) == 1 for v in by_key.values())
    _varied_rewards(records)
    before = _snapshot(tr)
    tr.update(records)
    assert _changed(before, _snapshot(tr)) == {"shared"}


def test_metrics_lines_map_onto_stable_tracker_scalars():
    from flowzoo.agents.runs.trackers import flat_scalars

    got = flat_scalars(
        {
            "step": 2,
            "reward": 0.5,
            "roles": {"solver": {"grad_share": 0.9}},
            "eval": {"env": "x"},
            "flag": True,
            "bad": float("nan"),
        }
    )
    assert got == {"reward": 0.5, "roles/solver/grad_share": 0.9}


# ------------------------------------------------------------------ GPU paths, tested on CPU


def _grads_after_update(tr, records):
    tr.update(records)
    return tr.last_role_grads["shared"]["total"].clone()


def test_update_splits_a_micro_batch_that_runs_out_of_memory(tiny_model, tmp_path, monkeypatch):
    """A micro-batch that does not fit is halved and retried with nothing half-accumulated:
    the gradient equals the one of a run that used the smaller micro-batch from the start."""
    ref = Trainer(_cfg(tiny_model, tmp_path, grad_clip=0.0, micro_batch=2), progress=False)
    records = ref._rollout(0)
    _varied_rewards(records)
    want = _grads_after_update(ref, records)

    real = Policy.logprobs
    calls = []

    def tight_memory(self, prompt_ids, completion_ids, temperature=1.0):
        calls.append(len(prompt_ids))
        out = real(self, prompt_ids, completion_ids, temperature)
        if len(prompt_ids) > 2:  # fails after the forward, as a real OOM in backward-ish code
            raise torch.OutOfMemoryError("simulated: CUDA out of memory")
        return out

    tr = Trainer(_cfg(tiny_model, tmp_path / "b", grad_clip=0.0, micro_batch=8), progress=False)
    monkeypatch.setattr(Policy, "logprobs", tight_memory)
    got = _grads_after_update(tr, records)
    assert tr.learner.micro_batch == {"shared": 2}
    assert max(calls) == 8 and calls[-1] <= 2
    assert torch.allclose(got, want, atol=1e-6)


def test_generate_splits_a_batch_that_runs_out_of_memory(tiny_policy, monkeypatch):
    real = type(tiny_policy)._sample

    def tight(self, encoded, *a):
        if len(encoded) > 2:
            raise torch.OutOfMemoryError("simulated")
        return real(self, encoded, *a)

    monkeypatch.setattr(type(tiny_policy), "_sample", tight)
    prompts = [f"Problem: What is {i} + 1?\nRole: solver." for i in range(5)]
    gens = tiny_policy.generate(prompts, max_new_tokens=8, temperature=0.0)
    assert [g.prompt_ids for g in gens] == [tiny_policy.encode_prompt(p) for p in prompts]


def test_bf16_autocast_and_gradient_checkpointing(tiny_model, tmp_path):
    fp32 = Policy(tiny_model)
    bf16 = Policy(tiny_model, precision="bf16")
    p = [fp32.encode_prompt("Problem: What is 2 + 3?\nRole: solver.")]
    c = [fp32.tokenizer("2 + 3 = 5. \\boxed{5}", add_special_tokens=False)["input_ids"]]
    a, b = fp32.logprobs(p, c)[0], bf16.logprobs(p, c)[0]
    assert b.dtype == torch.float32 and torch.allclose(a, b, atol=0.15) and not torch.equal(a, b)
    with pytest.raises(ValueError, match="precision"):
        Policy(tiny_model, precision="fp8")
    # checkpointing recomputes activations: same gradient, same metrics
    plain = Trainer(_cfg(tiny_model, tmp_path, grad_clip=0.0), progress=False)
    records = plain._rollout(0)
    _varied_rewards(records)
    want = _grads_after_update(plain, records)
    ckpt = Trainer(
        _cfg(tiny_model, tmp_path / "c", grad_clip=0.0, grad_checkpointing=True), progress=False
    )
    m = ckpt.router.policies["shared"].model
    assert getattr(m, "is_activation_checkpointing", None) or m.is_gradient_checkpointing
    assert torch.allclose(_grads_after_update(ckpt, records), want, atol=1e-6)
    # a bf16 step runs end to end with finite metrics
    tr = Trainer(_cfg(tiny_model, tmp_path / "d", precision="bf16"), progress=False)
    m = tr.train_step()
    assert all(math.isfinite(v["loss"]) for v in m["roles"].values())
