"""A served model as a policy: requests/s and tokens/s through a local ``vllm serve`` (vLLM's
CPU build, OpenAI completions API, ``concurrency`` requests in flight) vs the in-process
transformers sampler, on the same tiny-s model, prompts, token budget and temperature.
Skipped (no rows) where no vLLM environment is configured (``$FLOWZOO_VLLM_PYTHON``)."""

from __future__ import annotations

import sys
import time

import flowzoo
from benchmarks.common import Row


def run(quick: bool = False) -> list[Row]:
    from flowzoo.agents.models.backends import BackendUnavailable, vllm_python
    from flowzoo.agents.models.endpoint import EndpointPolicy
    from flowzoo.agents.models.policy import Policy
    from flowzoo.agents.models.serve import VLLMServer
    from flowzoo.tiny.build import ensure_tiny

    if vllm_python() is None:
        print("[endpoint] skipped: FLOWZOO_VLLM_PYTHON is not set", file=sys.stderr)
        return []
    n, max_new, conc = (32, 32, 8) if quick else (128, 48, 64)
    path = ensure_tiny("tiny-s", progress=False)
    env = flowzoo.make_env("voting-math")
    prompts = []
    for t in env.tasks[:n]:
        env.reset(options={"task_id": t.id})
        prompts.append(env.observe(env.agent_selection)["prompt"])
    local = Policy(path)
    t = time.perf_counter()
    gens = local.generate(prompts, max_new_tokens=max_new, temperature=0.7, seed=0)
    dt_local = time.perf_counter() - t
    tok_local = sum(len(g.completion_ids) for g in gens)
    try:
        srv = VLLMServer(path).start()
    except BackendUnavailable as e:
        print(f"[endpoint] skipped: {e}", file=sys.stderr)
        return []
    try:
        ep = EndpointPolicy(srv.spec("completions"), concurrency=conc)
        ep.generate(prompts[:4], max_new_tokens=max_new, temperature=0.7, seed=0)  # warm
        ep.completion_tokens = 0
        t = time.perf_counter()
        ep.generate(prompts, max_new_tokens=max_new, temperature=0.7, seed=0)
        dt_ep = time.perf_counter() - t
    finally:
        srv.stop()
    note = f"{n} prompts, {max_new} new tokens, T=0.7, concurrency {conc}, tiny-s"
    return [
        Row("endpoint", "requests/s via vllm serve", n / dt_ep, n / dt_local,
            "in-process batch", "req/s", note=note),
        Row("endpoint", "tokens/s via vllm serve", ep.completion_tokens / dt_ep,
            tok_local / dt_local, "in-process batch", "tok/s", note=note),
    ]  # fmt: skip
