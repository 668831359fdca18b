# ruff: noqa: E402
"""Data-parallel and FSDP training across processes (torchrun, gloo on the CPU): a 2-process
update of a batch equals the single-process update of the same batch, per-role gradients
included; a 2-process `flowzoo train` runs end to end with process 0 logging, and an FSDP run
resumes from its per-process shards."""

import dataclasses
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")  # these tests train: they skip cleanly without torch

from flowzoo.agents.models.policy import Policy
from flowzoo.agents.train.trainer import Trainer
from tests.agents.train.test_training import _cfg, _varied_rewards

WORKER = Path(__file__).with_name("dist_worker.py")
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]


def _single_and_two_process(cfg, tmp_path, two_cfg=None, keep=None):
    """One batch (rewards with variance in every group) updated by a single-process trainer
    and by 2 torchrun processes running ``two_cfg``; (single trainer, its stats, theirs)."""
    single = Trainer(cfg, progress=False)
    records = single._rollout(0)[:keep]
    _varied_rewards(records)
    (tmp_path / "cfg.pkl").write_bytes(pickle.dumps(two_cfg or cfg))
    (tmp_path / "rec.pkl").write_bytes(pickle.dumps(records))
    want_stats, _ = single.update(records)
    out = tmp_path / "dist.pt"
    proc = subprocess.run(
        [*TORCHRUN, str(WORKER), str(tmp_path / "cfg.pkl"), str(tmp_path / "rec.pkl"), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(WORKER.parents[2])},  # this checkout's flowzoo
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return single, want_stats, torch.load(out)


def _same_adam_step(single, got) -> None:
    """Adam's first step is ~lr * sign(g), so entries whose gradient is float noise (|g| ~
    1e-9, sign set by summation order) are left out of the comparison."""
    moved = 0
    for k, p in single.router.policies["shared"].model.named_parameters():
        real = p.grad.abs() > 1e-5
        moved += int(real.sum())
        assert torch.allclose(got["state"][k][real], p.detach()[real], atol=1e-6), k
    assert moved > 1000


@pytest.mark.parametrize("weighting", ["tokens", "equal-per-role"])
def test_two_process_update_equals_the_single_process_update(tiny_model, tmp_path, weighting):
    cfg = _cfg(
        tiny_model,
        tmp_path,
        problems_per_step=4,
        max_new_tokens=32,
        grad_clip=0.0,
        role_weighting=weighting,
    )
    single, want_stats, got = _single_and_two_process(cfg, tmp_path)
    want = single.last_role_grads["shared"]
    assert set(got["roles"]) == set(want["roles"]) == {"solver", "aggregator"}
    for role, g in want["roles"].items():
        assert torch.allclose(got["roles"][role], g, atol=1e-6), role
    assert torch.allclose(got["total"], want["total"], atol=1e-6)
    _same_adam_step(single, got)
    for role, row in want_stats["shared"]["roles"].items():
        other = got["per_policy"]["shared"]["roles"][role]
        for k in ("loss", "tokens", "turns", "clip_frac", "grad_norm"):
            assert other[k] == pytest.approx(row[k], rel=1e-5, abs=1e-7), (role, k)


def test_torchrun_flowzoo_train_runs_with_process_zero_logging(tiny_model, tmp_path):
    out = tmp_path / "ddp"
    argv = _train_argv(tiny_model, out, "--steps", "2", "--group-size", "2", "--eval-every", "1")
    argv += ["--eval-temperature", "0", "--save-every", "2", "--eval-ood-episodes", "0"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if r["step"] >= 0]
    assert len(steps) == 2 and all("eval" in r for r in steps)
    assert json.loads((out / "summary.json").read_text())["status"] == "completed"
    assert (out / "final").exists()
    assert proc.stdout.count("status completed") == 1  # process 0 alone prints the summary
    # greedy held-out evaluation was dealt out over the 2 processes: the same figures as 1
    from flowzoo.agents.train.evaluate import evaluate_env, single_policy

    one = evaluate_env(
        "voting-math", single_policy(Policy(tiny_model)), n_episodes=8, max_new_tokens=24
    ).as_dict()
    assert rows[0]["step"] == -1
    assert {k: v for k, v in rows[0]["eval"].items() if k != "cost"} == {
        k: v for k, v in one.items() if k != "cost"
    }


def test_fsdp_update_equals_the_single_process_update(tiny_model, tmp_path):
    """Sharded weights, gradients and AdamW state; the sharded reference policy (KL) too;
    the processes hold different numbers of micro-batches (one joins with zero-loss passes)."""
    cfg = _cfg(
        tiny_model,
        tmp_path,
        problems_per_step=4,
        max_new_tokens=32,
        grad_clip=1.0,
        kl_coef=0.05,
        micro_batch=2,
    )
    # problem 4 keeps 1 of its 4 episodes: the processes get uneven shares
    fsdp = dataclasses.replace(cfg, fsdp=True)
    single, want_stats, got = _single_and_two_process(cfg, tmp_path, fsdp, keep=-3)
    want, other = want_stats["shared"], got["per_policy"]["shared"]
    assert set(other["roles"]) == {"solver", "aggregator"}
    for role, row in want["roles"].items():
        for k in ("loss", "tokens", "turns", "clip_frac", "kl", "grad_norm"):
            assert other["roles"][role][k] == pytest.approx(row[k], rel=1e-4, abs=1e-7), (role, k)
    assert other["cosine"] == pytest.approx(want["cosine"], rel=1e-4, abs=1e-6)
    assert other["policy"]["grad_norm"] == pytest.approx(want["policy"]["grad_norm"], rel=1e-4)
    _same_adam_step(single, got)


def test_fsdp_refuses_what_it_does_not_support(tiny_model, tmp_path):
    with pytest.raises(ValueError, match="torchrun"):
        Trainer(_cfg(tiny_model, tmp_path, fsdp=True), progress=False)


def _train(model, out, *extra) -> None:
    """`flowzoo train` under 2 torchrun processes; it must succeed."""
    proc = subprocess.run(
        _train_argv(model, out, *extra), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


def _train_argv(model, out, *extra):
    return [
        *TORCHRUN,
        "-m",
        "flowzoo.cli",
        "train",
        "--model",
        str(model),
        "--problems-per-step",
        "4",
        "--max-new-tokens",
        "24",
        "--eval-episodes",
        "8",
        "--filter-groups",  # every turn trains (the protocol options are tested apart)
        "false",
        "--mask-truncated",
        "false",
        "--out-dir",
        str(out),
        *extra,
    ]


def test_fsdp_train_checkpoints_shards_and_resumes(tiny_model, tmp_path):
    out = tmp_path / "fsdp"
    # reward variance, so the update moves the weights: the fast test model answers ~5% of
    # single-math problems at T=1, and 2 steps x 8 problems x 8 samples make ~6 correct
    # expected (none in P ~ 0.2%)
    flags = ["--fsdp", "true", "--eval-every", "1", "--save-every", "1", "--group-size", "8"]
    flags += ["--temperature", "1.0", "--env", "single-math", "--problems-per-step", "8"]
    _train(tiny_model, out, "--steps", "1", *flags)
    shards = sorted(p.name for p in (out / "checkpoint").glob("*.pt"))
    assert shards == ["state.rank0.pt", "state.rank1.pt"]
    _train(tiny_model, out, "--steps", "2", *flags)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["resumed"] and summary["steps_done"] == 2
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [-1, 0, 1] and all("eval" in r for r in rows)
    assert any(r["policies"]["shared"]["grad_norm"] > 0 for r in rows[1:])
    # the gathered final weights load as a plain checkpoint and differ from the base model
    trained = Policy(out / "final" / "shared").model.state_dict()
    base = Policy(tiny_model).model.state_dict()
    assert set(trained) == set(base)
    assert any(not torch.equal(trained[k], base[k]) for k in base)
    # and the resumed run continued exactly: the same weights as 2 steps in one go
    straight = tmp_path / "straight"
    _train(tiny_model, straight, "--steps", "2", *flags)
    same = Policy(straight / "final" / "shared").model.state_dict()
    for k in base:
        assert torch.equal(same[k], trained[k]), k
