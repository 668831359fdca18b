"""Peak RSS of one training step with 3 roles (orch-workers-math): isolated full copies and
isolated LoRA against the shared policy, each in a fresh process."""

from __future__ import annotations

import json
import subprocess
import sys

from benchmarks.common import Row

_CHILD = """
import json, resource, sys, tempfile
from flowzoo.agents.train.trainer import TrainConfig, Trainer
policy, param, model = sys.argv[1:4]
cfg = TrainConfig(env="orch-workers-math", model=model, policy=policy, param=param, lora_r=8, lora_alpha=16, steps=1,
                  problems_per_step=1, group_size=2, eval_every=0, save_every=0, max_new_tokens=24, filter_groups=False, mask_truncated=False,
                  out_dir=tempfile.mkdtemp(), resume=False)
t = Trainer(cfg, progress=False)
t.train_step()
params = sum(p.numel() for n in t.router.names for p in t.router.trainable(n))
print(json.dumps({"rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "trainable": params}))
"""


def _measure(policy: str, param: str, model: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, policy, param, model],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(quick: bool = False) -> list[Row]:
    from flowzoo.tiny.build import ensure_tiny

    model = str(ensure_tiny("tiny-s", progress=False))
    shared = _measure("shared", "full", model)
    iso = _measure("isolated", "full", model)
    lora = _measure("isolated", "lora", model)
    return [
        Row(
            "memory",
            "peak RSS, isolated full copies (3 roles)",
            iso["rss_mb"],
            shared["rss_mb"],
            "shared policy peak RSS",
            "MB",
            note=f"trainable params x{iso['trainable'] / shared['trainable']:.1f}",
        ),
        Row(
            "memory",
            "peak RSS, isolated LoRA (3 adapters)",
            lora["rss_mb"],
            shared["rss_mb"],
            "shared policy peak RSS",
            "MB",
            target=1.2,
            lower_is_better=True,
        ),
    ]
