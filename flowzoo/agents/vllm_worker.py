"""A vLLM engine for flowzoo's generation backend: in-process, or as a worker process.

vLLM pins its own torch/transformers, so it usually lives in a separate environment; this
file therefore imports nothing of flowzoo and can be run by that environment's interpreter
(``python vllm_worker.py``), speaking JSON lines on stdin/stdout:

- ``{"op": "init", "model": path, "dtype": "float32", "memory": 0.2, "max_model_len": N}``
- ``{"op": "generate", "prompts": [[ids]], "max_tokens": n, "temperature": t, "seeds": [..]}``
  -> ``{"outputs": [{"ids": [...], "logprobs": [...], "finished": bool}]}``; log-probs are
  of the *processed* distribution (logits / temperature), the one the trainer's ratio uses.
- ``{"op": "load", "path": file.safetensors}``: new weights, through
  ``collective_rpc("reload_weights")`` (the route that works on vLLM's CPU build; its
  ``load_weights`` fails there). Needs untied embeddings: a tied ``lm_head`` keeps old weights.
"""

import json
import os
import sys


class Engine:
    """An offline ``vllm.LLM`` in this process (in-process executor, no multiprocessing)."""

    def __init__(self, model, dtype="float32", memory=0.2, max_model_len=None, seed=0):
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        from vllm import LLM

        kw = {}
        if max_model_len:
            kw["max_model_len"] = int(max_model_len)
        self.llm = LLM(
            model=model,
            tokenizer=model,
            dtype=dtype,
            seed=seed,
            distributed_executor_backend="uni",
            gpu_memory_utilization=memory,
            logprobs_mode="processed_logprobs",
            enforce_eager=True,
            **kw,
        )

    def generate(self, prompts, max_tokens, temperature, seeds):
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = [
            SamplingParams(
                temperature=temperature,
                max_tokens=max_tokens,
                logprobs=0,
                seed=None if temperature == 0 else int(s),
                skip_special_tokens=True,
            )
            for s in seeds
        ]
        outs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=list(p)) for p in prompts], params, use_tqdm=False
        )
        result = []
        for o in outs:
            c = o.outputs[0]
            ids = list(c.token_ids)
            lps = [float(step[tok].logprob) for step, tok in zip(c.logprobs, ids, strict=True)]
            result.append({"ids": ids, "logprobs": lps, "finished": c.finish_reason == "stop"})
        return result

    def load(self, path):
        from safetensors.torch import load_file

        weights = list(load_file(path).items())
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})


def serve():
    """The worker loop: one JSON request per line, one JSON reply per line."""
    out = sys.stdout
    sys.stdout = sys.stderr  # vLLM's own prints must not corrupt the protocol
    engine = None
    for line in sys.stdin:
        req = json.loads(line)
        try:
            op = req["op"]
            if op == "init":
                engine = Engine(
                    req["model"],
                    req.get("dtype", "float32"),
                    req.get("memory", 0.2),
                    req.get("max_model_len"),
                    req.get("seed", 0),
                )
                reply = {"ok": True}
            elif op == "generate":
                reply = {
                    "outputs": engine.generate(
                        req["prompts"], req["max_tokens"], req["temperature"], req["seeds"]
                    )
                }
            elif op == "load":
                engine.load(req["path"])
                reply = {"ok": True}
            else:
                reply = {"error": f"unknown op {op!r}"}
        except Exception as e:  # reported to the caller, who raises it
            reply = {"error": f"{type(e).__name__}: {e}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    serve()
