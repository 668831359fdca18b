"""Per-process training memory of one policy under FSDP against data parallel (both 2
processes, torchrun, gloo on the CPU), on a randomly initialised Qwen3 of ~25M parameters:
the bytes of weights + gradients + AdamW state each process holds after an update, its peak
RSS, and the update's seconds. FSDP should hold about half; the gathers cost time."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import Row


def _child(mode: str, model: str, out: str) -> None:
    """One process of the torchrun job: one rollout and one update, then its own figures."""
    from benchmarks.gpu_check import _varied
    from flowzoo.agents.models.sharding import local
    from flowzoo.agents.train.trainer import TrainConfig, Trainer

    cfg = TrainConfig(
        env="voting-math",
        model=model,
        steps=1,
        problems_per_step=2,
        group_size=2,
        max_new_tokens=16,
        filter_groups=False,  # every turn trains (the protocol options are tested apart)
        mask_truncated=False,
        eval_every=0,
        save_every=0,
        fsdp=mode == "fsdp",
        out_dir=tempfile.mkdtemp(prefix="fz-bench-fsdp-"),
        resume=False,
    )
    tr = Trainer(cfg, progress=False)
    records = tr._rollout(0)
    _varied(records)  # rewards with variance: every parameter gets a gradient and Adam state
    t0 = time.perf_counter()
    tr.update(records)
    upd = time.perf_counter() - t0
    params = list(tr.router.policies["shared"].model.parameters())
    nbytes = sum(local(p).numel() * local(p).element_size() for p in params)
    nbytes += sum(
        local(p.grad).numel() * local(p.grad).element_size() for p in params if p.grad is not None
    )
    for st in tr.opts["shared"].state.values():
        nbytes += sum(
            local(v).numel() * local(v).element_size() for v in st.values() if hasattr(v, "numel")
        )
    row = {
        "state_mb": nbytes / 2**20,
        "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "update_s": upd,
        "params": sum(p.numel() for p in params),
    }
    Path(f"{out}.rank{tr.dist.rank}").write_text(json.dumps(row))


def _measure(mode: str, model: str) -> dict:
    out = os.path.join(tempfile.mkdtemp(prefix="fz-bench-fsdp-"), mode)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    cmd += ["-m", "benchmarks.bench_fsdp", "--child", mode, model, out]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} run failed: {proc.stderr[-2000:]}")
    rows = [json.loads(Path(f"{out}.rank{r}").read_text()) for r in range(2)]
    return {k: max(r[k] for r in rows) for k in rows[0]}  # the larger process


def run(quick: bool = False) -> list[Row]:
    from benchmarks.gpu_check import random_qwen3, random_tiny

    d = Path(tempfile.mkdtemp(prefix="fz-bench-fsdp-model-"))
    model = random_tiny(d, "tiny-l") if quick else random_qwen3(d, hidden=512, layers=8)
    ddp, fsdp = _measure("ddp", model), _measure("fsdp", model)
    note = f"{fsdp['params']:,} parameters, 2 processes, per process (the larger)"
    return [
        Row(
            "fsdp",
            "weights+grads+AdamW per process, FSDP vs DP",
            fsdp["state_mb"],
            ddp["state_mb"],
            "data parallel",
            "MB",
            0.6,
            True,
            note,
        ),
        Row(
            "fsdp",
            "peak RSS per process, FSDP vs DP",
            fsdp["rss_mb"],
            ddp["rss_mb"],
            "data parallel",
            "MB",
            None,
            True,
            note,
        ),
        Row(
            "fsdp",
            "update seconds, FSDP vs DP",
            fsdp["update_s"],
            ddp["update_s"],
            "data parallel",
            "s",
            None,
            True,
            note,
        ),
    ]


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        _child(*sys.argv[2:5])
