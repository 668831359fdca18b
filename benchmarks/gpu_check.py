"""One prepared device check for a single-GPU machine (torch, transformers, peft present,
no network, only this repository copied over). Finishes in minutes and writes a JSON.

    python benchmarks/gpu_check.py --out gpu_check.json          # on the GPU machine
    python benchmarks/gpu_check.py --dry-run                     # anywhere: CPU, tiny sizes

It measures: a GRPO update on the device vs the CPU on the same tiny model and batch
(relative difference of the loss and of the per-role gradient norms); rollout tokens/s and
seconds per update for tiny-l's shape and for a randomly initialised Qwen3 config of a few
hundred million parameters, Shared and Isolated, fp32 and bf16 autocast; peak device memory;
with two or more GPUs, Isolated with its policies placed on two of them; with ``--vllm``
(where vLLM imports, or ``$FLOWZOO_VLLM_PYTHON`` names its environment), the vLLM backend on
a tied-embedding model (full weights) and with LoRA adapters (Shared and Isolated): rollout
tokens/s and the largest log-prob gap between the engine's samples and the trained policy
after an update (the sync check; < 1e-3 expected with fp32).
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import tempfile
import time
from pathlib import Path

import torch


def _trainer(
    model_path: str,
    device: str,
    policy: str,
    ppg: int,
    g: int,
    max_new: int,
    precision: str = "fp32",
    placement: dict[str, str] | None = None,
    backend: str = "transformers",
    **extra,
):
    from flowzoo.agents.train.trainer import TrainConfig, Trainer

    cfg = TrainConfig(
        env="voting-math",
        model=model_path,
        policy=policy,
        steps=1,
        problems_per_step=ppg,
        group_size=g,
        max_new_tokens=max_new,
        # every turn trains, in one Adam step (the protocol options are tested apart): the
        # same update on two devices, whatever order either would cut mini-batches in
        filter_groups=False,
        mask_truncated=False,
        ppo_mini_batch=0,
        eval_every=0,
        save_every=0,
        device=device,
        precision=precision,
        policy_devices=placement or {},
        out_dir=tempfile.mkdtemp(),
        resume=False,
        generation_backend=backend,
        vllm_memory=0.15,
        **extra,
    )
    return Trainer(cfg, progress=False)


def _varied(records) -> None:
    for r in records:
        for t in r.turns:
            t.reward = float(len(t.completion_ids) % 2 == 0)


def correctness(model_path: str, device: str) -> dict:
    """The same records updated on CPU and on the device: losses and grad norms compared."""
    cpu = _trainer(model_path, "cpu", "shared", 2, 4, 32)
    records = cpu._rollout(0)
    _varied(records)
    dev_records = copy.deepcopy(records)
    dev = _trainer(model_path, device, "shared", 2, 4, 32)
    a, _ = cpu.update(records)
    b, _ = dev.update(dev_records)
    out = {}
    for role, row in a["shared"]["roles"].items():
        other = b["shared"]["roles"][role]
        for k in ("loss", "grad_norm"):
            denom = max(abs(row[k]), 1e-12)
            out[f"{role}.{k}.rel_diff"] = abs(row[k] - other[k]) / denom
    return out


def throughput(
    model_path: str,
    device: str,
    policy: str,
    *shape: int,
    precision: str,
    placement: dict[str, str] | None = None,
) -> dict:
    """Rollout tokens/s, seconds per update and peak memory (summed over the GPUs);
    ``shape`` as for _trainer."""
    tr = _trainer(model_path, device, policy, *shape, precision=precision, placement=placement)
    gpus = range(torch.cuda.device_count()) if device.startswith("cuda") else range(0)
    for i in gpus:
        torch.cuda.reset_peak_memory_stats(i)
    t = time.perf_counter()
    records = tr._rollout(0)
    roll = time.perf_counter() - t
    _varied(records)
    t = time.perf_counter()
    tr.update(records)
    upd = time.perf_counter() - t
    tokens = sum(len(x.completion_ids) for r in records for x in r.turns)
    res = {
        "rollout_tokens_per_s": tokens / roll,
        "update_s": upd,
        "params": sum(p.numel() for p in tr.router.policies[tr.router.names[0]].model.parameters()),
    }
    if gpus:
        res["peak_mem_gb"] = sum(torch.cuda.max_memory_allocated(i) for i in gpus) / 2**30
    return res


def vllm_rows(out: Path, device: str, shape: tuple[int, int, int]) -> dict:
    """The vLLM backend on a random tied-embedding model: full weights (Isolated) and LoRA
    (Shared, Isolated); per row rollout tokens/s and the served-vs-trained log-prob gap after
    one update. A reason instead where no vLLM can start."""
    from flowzoo.agents.models.backends import vllm_unavailable_reason
    from flowzoo.tiny.build import save_random_model

    why = vllm_unavailable_reason()
    if why:
        return {"skipped": why}
    tied = str(save_random_model(out / "tied", tie=True))
    rows = {}
    for policy, param in (("isolated", "full"), ("shared", "lora"), ("isolated", "lora")):
        extra = {"param": param, "lora_r": 8, "lora_alpha": 16} if param == "lora" else {}
        tr = _trainer(tied, device, policy, *shape, backend="vllm", lr=1e-2, **extra)
        try:
            t = time.perf_counter()
            records = tr._rollout(0)
            roll = time.perf_counter() - t
            _varied(records)
            tr.update(records)
            gap = 0.0
            for name in tr.router.names:
                pol = tr.router.policies[name]
                gens = pol.generate(["Problem: 2 + 3?\n"] * 4, max_new_tokens=16, seed=1)
                lps = pol.logprobs(
                    [g.prompt_ids for g in gens], [g.completion_ids for g in gens], 0.7
                )
                gap = max(
                    gap,
                    *(float((torch.tensor(g.logprobs) - lp.detach().cpu()).abs().max())
                      for g, lp in zip(gens, lps, strict=True)),
                )  # fmt: skip
            tokens = sum(len(x.completion_ids) for r in records for x in r.turns)
            rows[f"vllm/tied/{policy}/{param}"] = {
                "rollout_tokens_per_s": tokens / roll,
                "logprob_gap_after_update": gap,
            }
        finally:
            for name in tr.router.names:
                tr.router.policies[name].backend.close()
    return rows


def random_tiny(out: Path, scale: str) -> str:
    """A randomly initialised tiny model of ``scale``'s shape (throughput needs no training,
    and pretraining tiny-l here would take the machine's whole budget)."""
    from flowzoo.tiny.build import build_model, build_tokenizer

    tok = build_tokenizer()
    build_model(scale, len(tok)).save_pretrained(out)
    tok.save_pretrained(out)
    return str(out)


def random_qwen3(out: Path, hidden: int, layers: int) -> str:
    """A randomly initialised Qwen3 of real-ish size with the tiny tokenizer, saved locally."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from flowzoo.tiny.build import build_tokenizer

    tok = build_tokenizer()
    cfg = Qwen3Config(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=hidden * 3,
        num_hidden_layers=layers,
        num_attention_heads=max(1, hidden // 64),
        num_key_value_heads=max(1, hidden // 256),
        head_dim=64,
        max_position_embeddings=1024,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    Qwen3ForCausalLM(cfg).save_pretrained(out)
    tok.save_pretrained(out)
    return str(out)


def main() -> int:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--dry-run", action="store_true", help="CPU only, tiny sizes (for CI)")
    ap.add_argument("--out", default="gpu_check.json")
    ap.add_argument("--vllm", action="store_true", help="also the vLLM backend rows")
    args = ap.parse_args()
    from flowzoo.tiny.build import ensure_tiny, fast_config

    device = "cpu" if args.dry_run or not torch.cuda.is_available() else "cuda"
    report: dict = {
        "device": device,
        "torch": torch.__version__,
        "machine": platform.platform(),
        "dry_run": args.dry_run,
    }
    if device == "cuda":
        report["gpu"] = torch.cuda.get_device_name(0)
    small = str(ensure_tiny(fast_config("tiny-s"), progress=False))
    report["correctness"] = correctness(small, device)
    runs = [("tiny-s-fast", small, p, "fp32", None) for p in ("shared", "isolated")]
    if args.dry_run:
        shape = (2, 4, 16)
        runs.append(("tiny-s-fast", small, "shared", "bf16", None))
        # the placement path, both policies named (on the CPU: the same device)
        runs.append(("tiny-s-fast", small, "isolated", "fp32", {"solver": "cpu"}))
    else:
        tiny_l = random_tiny(Path(tempfile.mkdtemp()) / "tl", "tiny-l")
        q3 = random_qwen3(Path(tempfile.mkdtemp()) / "q3", hidden=1024, layers=20)
        runs += [("tiny-l-random", tiny_l, p, "fp32", None) for p in ("shared", "isolated")]
        runs += [
            ("qwen3-random-~300M", q3, p, pr, None)
            for p in ("shared", "isolated")
            for pr in ("fp32", "bf16")
        ]
        if torch.cuda.device_count() >= 2:  # Isolated with its two policies on two GPUs
            two = {"solver": "cuda:0", "aggregator": "cuda:1"}
            runs.append(("qwen3-random-~300M", q3, "isolated", "bf16", two))
        shape = (8, 8, 64)
    report["throughput"] = {}
    for name, path, policy, precision, placement in runs:
        key = f"{name}/{policy}/{precision}" + ("/placed" if placement else "")
        report["throughput"][key] = throughput(
            path, device, policy, *shape, precision=precision, placement=placement
        )
    if args.vllm:
        report["vllm"] = vllm_rows(Path(tempfile.mkdtemp()), device, (2, 4, 16))
    Path(args.out).write_text(json.dumps(report, indent=1))
    for k, v in report.get("vllm", {}).items():
        print(f"{k:<40} {v}")
    print(
        f"device {device}  correctness: "
        + ", ".join(f"{k} {v:.2e}" for k, v in report["correctness"].items())
    )
    print(
        f"{'model/policy/precision':<40} {'params':>12} {'rollout tok/s':>14} {'update s':>9} {'peak GB':>8}"
    )
    for k, v in report["throughput"].items():
        print(
            f"{k:<40} {v['params']:>12,} {v['rollout_tokens_per_s']:>14.0f} {v['update_s']:>9.2f} {v.get('peak_mem_gb', float('nan')):>8.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
