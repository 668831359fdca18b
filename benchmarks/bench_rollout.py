"""Batched rollout tokens/s vs one plain ``model.generate()`` on the same total batch, vs the
same rollout done env by env (batch 1), and, where a vLLM environment is configured
(``$FLOWZOO_VLLM_PYTHON``), vs the same rollout with vLLM's CPU build as the generation
backend (same model, prompts, batch, token budget and temperature)."""

from __future__ import annotations

import time

import torch

import flowzoo
from benchmarks.common import Row


def run(quick: bool = False) -> list[Row]:
    from flowzoo.agents.models.policy import Policy
    from flowzoo.agents.train.evaluate import single_policy
    from flowzoo.agents.train.rollout import rollout
    from flowzoo.tiny.build import ensure_tiny

    n_env, g = (16, 4) if quick else (64, 8)
    pol = Policy(ensure_tiny("tiny-s", progress=False))
    route = single_policy(pol)
    envs = [flowzoo.make_env("voting-math") for _ in range(n_env * g)]
    tasks = envs[0].tasks
    opts = [{"task_id": tasks[i // g].id} for i in range(n_env * g)]
    max_new = 48

    t = time.perf_counter()
    recs = rollout(
        envs,
        route,
        opts,
        seeds=list(range(len(envs))),
        max_new_tokens=max_new,
        temperature=0.7,
        generator=torch.Generator().manual_seed(0),
    )
    dt = time.perf_counter() - t
    ours = sum(len(x.completion_ids) for r in recs for x in r.turns) / dt

    # reference: plain model.generate() on exactly the same prompts, one call per tick
    tok = pol.tokenizer
    ticks: dict[int, list[list[int]]] = {}
    for r in recs:
        for x in r.turns:
            ticks.setdefault(x.step, []).append(x.prompt_ids)
    ref_tokens, dt = 0, 0.0
    for prompts in ticks.values():
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), tok.pad_token_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, p in enumerate(prompts):
            ids[i, width - len(p) :] = torch.tensor(p)
            mask[i, width - len(p) :] = 1
        t = time.perf_counter()
        with torch.no_grad():
            out = pol.model.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=max_new,
                do_sample=True,
                temperature=0.7,
                pad_token_id=tok.pad_token_id,
                eos_token_id=tok.eos_token_id,
            )
        dt += time.perf_counter() - t
        new = out[:, width:]
        ref_tokens += int(sum(((row != tok.pad_token_id).cumprod(0)).sum() for row in new))
    ref = ref_tokens / dt

    k = 8 if quick else 16
    t = time.perf_counter()
    n_tok = 0
    for i in range(k):
        rr = rollout(
            envs[i : i + 1],
            route,
            opts[i : i + 1],
            seeds=[i],
            max_new_tokens=max_new,
            temperature=0.7,
        )
        n_tok += sum(len(x.completion_ids) for r in rr for x in r.turns)
    single = n_tok / (time.perf_counter() - t)
    vllm_rows = []
    from flowzoo.agents.models.backends import attach, vllm_unavailable_reason

    if vllm_unavailable_reason() is None:
        attach(pol, "vllm", memory=0.15)
        try:
            pol.generate(["warm up"] * 4, max_new_tokens=8)
            t = time.perf_counter()
            vr = rollout(envs, route, opts, seeds=list(range(len(envs))), max_new_tokens=max_new,
                         temperature=0.7, generator=torch.Generator().manual_seed(0))  # fmt: skip
            with_vllm = sum(len(x.completion_ids) for r in vr for x in r.turns) / (
                time.perf_counter() - t
            )
        finally:
            attach(pol, "transformers")
        vllm_rows.append(
            Row(
                "rollout",
                "tokens/s vs vLLM's CPU build as the backend",
                ours,
                with_vllm,
                "the same rollout through vLLM (offline engine, worker process)",
                "tokens/s",
                target=1.0,
            )  # fmt: skip
        )
    return [
        *vllm_rows,
        Row(
            "rollout",
            f"tokens/s, {n_env} problems x G={g} (voting-math, tiny-s)",
            ours,
            ref,
            "one model.generate() on the same batch",
            "tokens/s",
            target=0.8,
        ),
        Row(
            "rollout",
            "batched rollout vs env-by-env",
            ours,
            single,
            "the same rollout, batch 1",
            "tokens/s",
            target=5.0,
        ),
    ]
