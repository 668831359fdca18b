"""Data-parallel training across processes (torchrun, gloo on the CPU): a 2-process update of
a batch equals the single-process update of the same batch, per-role gradients included; a
2-process `flowzoo train` runs end to end with process 0 logging."""

import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from flowzoo.agents.trainer import Trainer
from tests.test_agents import _cfg

WORKER = Path(__file__).with_name("dist_worker.py")
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]


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
    single = Trainer(cfg, progress=False)
    records = single._rollout(0)
    for r in records:  # rewards with variance in every group
        for t in r.turns:
            t.team_reward = float(len(t.completion_ids) % 2 == 0)
    (tmp_path / "cfg.pkl").write_bytes(pickle.dumps(cfg))
    (tmp_path / "rec.pkl").write_bytes(pickle.dumps(records))
    want_stats, _ = single.update(records)
    want = single.last_role_grads["shared"]
    out = tmp_path / "dist.pt"
    proc = subprocess.run(
        [*TORCHRUN, str(WORKER), str(tmp_path / "cfg.pkl"), str(tmp_path / "rec.pkl"), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = torch.load(out)
    assert set(got["roles"]) == set(want["roles"]) == {"solver", "aggregator"}
    for role, g in want["roles"].items():
        assert torch.allclose(got["roles"][role], g, atol=1e-6), role
    assert torch.allclose(got["total"], want["total"], atol=1e-6)
    # the same AdamW step; Adam's first step is ~lr * sign(g), so entries whose gradient is
    # float noise (|g| ~ 1e-9, sign set by summation order) are left out of the comparison
    moved = 0
    for k, p in single.router.policies["shared"].model.named_parameters():
        real = p.grad.abs() > 1e-5
        moved += int(real.sum())
        assert torch.allclose(got["state"][k][real], p.detach()[real], atol=1e-6), k
    assert moved > 1000
    for role, row in want_stats["shared"]["roles"].items():
        other = got["per_policy"]["shared"]["roles"][role]
        for k in ("loss", "tokens", "turns", "clip_frac", "grad_norm"):
            assert other[k] == pytest.approx(row[k], rel=1e-5, abs=1e-7), (role, k)


def test_torchrun_flowzoo_train_runs_with_process_zero_logging(tiny_model, tmp_path):
    out = tmp_path / "ddp"
    proc = subprocess.run(
        [
            *TORCHRUN,
            "-m",
            "flowzoo.cli",
            "train",
            "--model",
            str(tiny_model),
            "--steps",
            "2",
            "--problems-per-step",
            "4",
            "--group-size",
            "2",
            "--max-new-tokens",
            "24",
            "--eval-every",
            "1",
            "--eval-episodes",
            "8",
            "--save-every",
            "2",
            "--out-dir",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if r["step"] >= 0]
    assert len(steps) == 2 and all("eval" in r for r in steps)
    assert json.loads((out / "summary.json").read_text())["status"] == "completed"
    assert (out / "final").exists()
