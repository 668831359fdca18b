# ruff: noqa: E402
"""Per-role settings (lr, temperature, max tokens, KL, clip), per-role base checkpoints and
frozen roles (a frozen copy, the scripted expert), on the tiny model with real updates."""

import json

import pytest

torch = pytest.importorskip("torch")

from flowzoo.agents.train.trainer import Trainer
from flowzoo.config import TrainConfig
from tests.agents.train.test_training import _cfg, _varied_rewards


def _weights(pol):
    return {k: v.detach().clone() for k, v in pol.model.state_dict().items()}


def _moved(before, pol) -> float:
    return max(float((before[k] - v).abs().max()) for k, v in pol.model.state_dict().items())


def test_role_settings_are_checked_where_they_are_given(tiny_model, tmp_path):
    with pytest.raises(ValueError, match="unknown keys"):
        TrainConfig(role_settings={"solver": {"learning_rate": 1e-3}})
    with pytest.raises(ValueError, match="out of range"):
        TrainConfig(role_settings={"solver": {"lr": 2.0}})
    with pytest.raises(ValueError, match="out of range"):
        TrainConfig(role_settings={"solver": {"max_new_tokens": 0}})
    with pytest.raises(ValueError, match="table of settings"):
        TrainConfig(role_settings={"solver": 0.1})
    with pytest.raises(ValueError, match="unknown trackers"):
        TrainConfig(report_to="tensorboard,neptune")
    with pytest.raises(ValueError, match="does not have"):
        Trainer(_cfg(tiny_model, tmp_path, role_settings={"critic": {"lr": 1e-4}}), progress=False)
    with pytest.raises(ValueError, match="unknown roles"):
        Trainer(_cfg(tiny_model, tmp_path, frozen_roles="critic"), progress=False)
    cfg = TrainConfig(
        kl_coef=0.1,
        kl_per_role={"solver": 0.3},
        role_settings={"solver": {"kl_coef": 0.5, "clip_low": 0.1}},
    )
    assert cfg.for_role("solver", "kl_coef") == 0.5  # role_settings wins over kl_per_role
    assert cfg.for_role("aggregator", "kl_coef") == 0.1
    assert cfg.for_role("solver", "clip_low") == 0.1
    assert cfg.for_role("aggregator", "clip_high") == cfg.clip_high


def test_isolated_policies_step_at_their_roles_lr(tiny_model, tmp_path):
    cfg = _cfg(
        tiny_model,
        tmp_path,
        policy="isolated",
        lr=1e-3,
        warmup_steps=2,
        role_settings={"aggregator": {"lr": 1e-5}},
    )
    tr = Trainer(cfg, progress=False)
    records = tr._rollout(0)
    _varied_rewards(records)
    tr.update(records)
    # the warmup factor (1/2 at step 0) applies to each policy's own lr
    assert tr.opts["solver"].param_groups[0]["lr"] == pytest.approx(1e-3 / 2)
    assert tr.opts["aggregator"].param_groups[0]["lr"] == pytest.approx(1e-5 / 2)
    # the metrics line says what each policy stepped at (not the config's lr alone)
    m = tr.train_step()
    assert m["lr"]["aggregator"] < m["lr"]["solver"] and set(m["lr"]) == {"solver", "aggregator"}


def test_a_shared_policy_scales_each_roles_gradient_by_its_lr(tiny_model, tmp_path):
    """One optimizer cannot step at two lrs: a shared policy steps at lr and scales a role's
    gradient by role lr / lr, so an aggregator at lr x 0 adds nothing to the update."""
    role_lr = {"aggregator": {"lr": 1e-9}}
    tr = Trainer(_cfg(tiny_model, tmp_path, grad_clip=0.0, role_settings=role_lr), progress=False)
    assert tr.learner.base_lr["shared"] == tr.cfg.lr
    assert tr.learner.grad_scale == pytest.approx({"solver": 1.0, "aggregator": 1e-9 / 1e-3})
    records = tr._rollout(0)
    _varied_rewards(records)
    tr.update(records)
    g = tr.last_role_grads["shared"]["roles"]
    share = float(g["aggregator"].norm() / (g["solver"].norm() + 1e-12))
    assert share < 1e-4


def test_per_role_temperature_and_tokens_reach_the_rollout(tiny_model, tmp_path):
    """Solvers sampled greedily all write the same answer to one prompt; the aggregator,
    at T=1.5, is still sampled; max_new_tokens per role caps that role only."""
    cfg = _cfg(
        tiny_model,
        tmp_path,
        role_settings={
            "solver": {"temperature": 0.0},
            "aggregator": {"temperature": 1.5, "max_new_tokens": 5},
        },
    )
    tr = Trainer(cfg, progress=False)
    records = tr._rollout(0)
    for rec in records:
        solver_texts = {t.text for t in rec.turns if t.role == "solver"}
        assert len(solver_texts) == 1
        for t in rec.turns:
            if t.role == "aggregator":
                assert len(t.completion_ids) <= 5
    agg = [t.text for rec in records for t in rec.turns if t.role == "aggregator"]
    assert len(set(agg)) > 1
    assert tr.learner._temp("aggregator") == 1.5  # the update scores at the sampled T


def test_a_frozen_role_plays_but_is_never_updated(tiny_model, tmp_path):
    cfg = _cfg(tiny_model, tmp_path, frozen_roles="aggregator", lr=5e-3, steps=2)
    tr = Trainer(cfg, progress=False)
    assert tr.router.names == ["shared"] and tr.router.frozen_roles == ["aggregator"]
    name, frozen = tr.router.policy_for("aggregator")
    before_frozen, before_shared = _weights(frozen), _weights(tr.router.policies["shared"])
    roll = tr._rollout

    def varied(step):  # a reward with variance whatever the test model's skill
        records = roll(step)
        _varied_rewards(records)
        return records

    tr._rollout = varied
    summary = tr.train()
    assert _moved(before_frozen, frozen) == 0.0
    assert _moved(before_shared, tr.router.policies["shared"]) > 0
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    for m in lines:
        # the frozen role's turns were played (reward stats) but never in the update
        assert "aggregator" in m["roles"]
        assert m["roles"]["aggregator"]["frozen"] is True
        assert "grad_norm" not in m["roles"]["aggregator"]
        assert "grad_share" not in m["roles"]["aggregator"]
        assert "grad_norm" in m["roles"]["solver"]
    assert list(summary["frozen_roles"]) == ["aggregator"]
    assert "aggregator" not in summary["mean_grad_share"]


def test_the_scripted_expert_can_play_a_role(tiny_model, tmp_path):
    cfg = _cfg(tiny_model, tmp_path, role_models={"aggregator": "scripted"}, steps=1)
    tr = Trainer(cfg, progress=False)
    records = tr._rollout(0)
    agg = [t for r in records for t in r.turns if t.role == "aggregator"]
    assert agg and all(t.policy == "frozen:aggregator" and t.text for t in agg)
    # the error-free expert picks a correct candidate whenever one exists
    for r in records:
        if r.info.get("any_correct"):
            assert r.correct
    with pytest.raises(ValueError, match="scripted"):
        Trainer(
            _cfg(tiny_model, tmp_path, role_models={"aggregator": "scripted:x"}), progress=False
        )


def test_a_role_can_start_from_its_own_checkpoint(tiny_model, tmp_path):
    from flowzoo.tiny.build import save_random_model

    other = save_random_model(tmp_path / "other", seed=7)
    cfg = _cfg(tiny_model, tmp_path, policy="isolated", role_models={"aggregator": str(other)})
    tr = Trainer(cfg, progress=False)
    assert tr.router.policies["aggregator"].path == str(other)
    assert tr.router.policies["solver"].path == str(tiny_model)
    with pytest.raises(ValueError, match="share\\s+one base"):
        Trainer(
            _cfg(tiny_model, tmp_path, param="lora", role_models={"aggregator": str(other)}),
            progress=False,
        )
    with pytest.raises(ValueError, match="nothing would be trained"):
        Trainer(_cfg(tiny_model, tmp_path, frozen_roles="solver,aggregator"), progress=False)
