"""The prepared device check runs on CPU in --dry-run mode (CI has no GPU)."""

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"


def test_gpu_check_dry_run(tiny_model, tmp_path):
    out = tmp_path / "gc.json"
    from flowzoo.agents.models.backends import vllm_unavailable_reason

    vllm = vllm_unavailable_reason() is None  # CI provides vLLM's CPU environment
    subprocess.run(
        [sys.executable, str(SCRIPT), "--dry-run", "--out", str(out)] + ["--vllm"] * vllm,
        check=True,
        capture_output=True,
        timeout=600,
    )
    rep = json.loads(out.read_text())
    assert rep["device"] == "cpu" and rep["dry_run"]
    assert all(v < 1e-6 for v in rep["correctness"].values())
    assert set(rep["throughput"]) == {
        "tiny-s-fast/shared/fp32",
        "tiny-s-fast/isolated/fp32",
        "tiny-s-fast/shared/bf16",
        "tiny-s-fast/isolated/fp32/placed",
    }
    assert all(v["rollout_tokens_per_s"] > 0 for v in rep["throughput"].values())
    if vllm:  # the engine serves the updated weights: tied head, Shared- and Isolated-LoRA
        assert set(rep["vllm"]) == {
            "vllm/tied/isolated/full",
            "vllm/tied/shared/lora",
            "vllm/tied/isolated/lora",
        }
        assert all(v["logprob_gap_after_update"] < 1e-3 for v in rep["vllm"].values())
