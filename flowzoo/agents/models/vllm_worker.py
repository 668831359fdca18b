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
  ``load_weights`` fails there), then :func:`refresh_tied_heads`.
- ``{"op": "lora", "name": n, "path": dir}``: serve adapter ``n`` from a PEFT dir (a new
  version replaces the old one, which is unloaded); ``generate`` takes ``"lora": n``.

Tied embeddings (Qwen3 0.6B-4B): the checkpoint has no ``lm_head.weight``, so the layer-wise
reload finds nothing for the head, puts its old kernel tensors back, and on the CPU build the
head's GEMM runs on a packed copy made at load time: both keep the old weights. After every
reload the head is re-written from the embedding and its packed kernel rebuilt.
"""

import json
import os
import sys


class Engine:
    """An offline ``vllm.LLM`` in this process (in-process executor, no multiprocessing)."""

    def __init__(
        self,
        model,
        dtype="float32",
        memory=0.2,
        max_model_len=None,
        seed=0,
        lora_rank=0,
        max_loras=1,
    ):
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        from vllm import LLM

        kw = {}
        if max_model_len:
            kw["max_model_len"] = int(max_model_len)
        from vllm.platforms import current_platform

        if current_platform.is_cpu():
            # vLLM 0.32's CPU build kills the engine when a seeded request's prefill is split
            # ("CPU Generator does not use offset"): every rollout request is seeded
            kw["enable_chunked_prefill"] = False
        if lora_rank:  # multi-LoRA: every adapter on one copy of the base weights
            kw.update(enable_lora=True, max_loras=int(max_loras), max_lora_rank=int(lora_rank))
        #: adapter name -> its current LoRARequest
        self.loras = {}
        self._lora_ids = 0
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

    def set_lora(self, name, path):
        """Serve adapter ``name`` from ``path`` from now on (a fresh id, so vLLM's adapter
        cache cannot hand back the previous version), and unload the previous version."""
        from vllm.lora.request import LoRARequest

        self._lora_ids += 1
        old = self.loras.get(name)
        self.loras[name] = LoRARequest(f"{name}@{self._lora_ids}", self._lora_ids, path)
        if old is not None:
            self.llm.llm_engine.remove_lora(old.lora_int_id)

    def generate(self, prompts, max_tokens, temperature, seeds, lora=None):
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
        if lora is not None and lora not in self.loras:
            raise KeyError(f"no adapter {lora!r} loaded; loaded: {sorted(self.loras)}")
        outs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=list(p)) for p in prompts],
            params,
            use_tqdm=False,
            lora_request=self.loras[lora] if lora is not None else None,
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
        self.llm.collective_rpc(refresh_tied_heads)


def refresh_tied_heads(worker):
    """Runs in each vLLM worker after a reload: every output head tied to the input embedding
    gets the embedding's new weights (through its weight loader, which shards and pads) and
    its derived kernel rebuilt (``process_weights_after_loading``: the CPU build's packed
    GEMM; a no-op on CUDA). Untied heads were reloaded from their own tensor: left alone.
    Returns the number of heads refreshed."""
    model = worker.get_model() if hasattr(worker, "get_model") else worker.model_runner.model
    config = getattr(model, "config", None)
    text = getattr(config, "get_text_config", lambda: config)()
    if not getattr(text, "tie_word_embeddings", False):
        return 0
    embeds = [m for _, m in model.named_modules() if type(m).__name__ == "VocabParallelEmbedding"]
    heads = [m for _, m in model.named_modules() if type(m).__name__ == "ParallelLMHead"]
    if len(embeds) != 1:
        return 0
    src = embeds[0].weight
    for head in heads:
        if head.weight is not src:  # the tie was broken by the reload's fallback: re-write
            head.weight.data.copy_(src.data)
        head.quant_method.process_weights_after_loading(head)
    return len(heads)


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
                    req.get("lora_rank", 0),
                    req.get("max_loras", 1),
                )
                reply = {"ok": True}
            elif op == "generate":
                reply = {
                    "outputs": engine.generate(
                        req["prompts"],
                        req["max_tokens"],
                        req["temperature"],
                        req["seeds"],
                        req.get("lora"),
                    )
                }
            elif op == "lora":
                engine.set_lora(req["name"], req["path"])
                reply = {"ok": True}
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
