"""Generation backends behind ``Policy.generate``: ``transformers`` (the policy's own batched
KV-cache sampler, the default) and ``vllm``.

The vLLM backend serves a copy of the policy's weights and is re-synced after every update,
so rollouts always come from the policy being trained. vLLM pins its own torch and
transformers, so it usually lives in another environment: point ``FLOWZOO_VLLM_PYTHON`` (or
``python=``) at that environment's interpreter and the engine runs there as a worker process;
where ``vllm`` imports in this interpreter it runs in-process.

Full-parameter policies: one engine each, synced by a weight reload (tied embeddings
included: see ``vllm_worker``). LoRA policies (Shared-LoRA, Isolated-LoRA): one multi-LoRA
engine on the frozen base, one adapter per policy, each re-loaded from a versioned dir after
its update.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

BACKENDS = ("transformers", "vllm")
WORKER = Path(__file__).with_name("vllm_worker.py")


class BackendUnavailable(RuntimeError):
    """The requested generation backend cannot run here (the message says why)."""


def vllm_python() -> str | None:
    """The interpreter of an environment with vLLM: ``$FLOWZOO_VLLM_PYTHON``, else None."""
    p = os.environ.get("FLOWZOO_VLLM_PYTHON")
    return p if p and Path(p).exists() else None


def vllm_unavailable_reason(python: str | None = None) -> str | None:
    """None when a vLLM engine can be started here, else why not (for skips and errors)."""
    if python or vllm_python() or importlib.util.find_spec("vllm") is not None:
        return None
    return (
        "vLLM is not importable in this interpreter and FLOWZOO_VLLM_PYTHON is not set "
        "(vLLM pins its own torch/transformers: install it in a separate venv, see README)"
    )


#: LoRA ranks vLLM's multi-LoRA accepts (``max_lora_rank``)
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def request_seeds(n: int, generator: torch.Generator | None) -> list[int]:
    """Per-prompt sampling seeds drawn from ``generator``, so a seeded rollout repeats."""
    if generator is not None:
        seeds = torch.randint(0, 2**31 - 1, (n,), generator=generator, device=generator.device)
    else:
        seeds = torch.randint(0, 2**31 - 1, (n,))
    return [int(s) for s in seeds.tolist()]


class VLLMEngine:
    """One vLLM engine serving ``model`` (a local dir): in this process where ``vllm``
    imports, else a worker in the environment of ``python``/``$FLOWZOO_VLLM_PYTHON``.
    ``lora_rank > 0`` enables multi-LoRA for up to ``max_loras`` adapters at once."""

    def __init__(
        self,
        model: str,
        dtype: str,
        max_context: int,
        python: str | None = None,
        memory: float = 0.2,
        seed: int = 0,
        lora_rank: int = 0,
        max_loras: int = 1,
        workdir: str | None = None,
    ) -> None:
        why = vllm_unavailable_reason(python)
        if why:
            raise BackendUnavailable(why)
        self.dir = workdir or tempfile.mkdtemp(prefix="flowzoo-vllm-")
        python = python or vllm_python()
        self._engine = None
        self._proc = None
        if python is None:  # vllm imports here: in-process
            from flowzoo.agents.models.vllm_worker import Engine

            self._engine = Engine(model, dtype, memory, max_context, seed, lora_rank, max_loras)
            return
        self._log = open(os.path.join(self.dir, "worker.log"), "w")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        self._proc = subprocess.Popen(
            [python, str(WORKER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=env,
            text=True,
        )
        init = {
            "op": "init",
            "model": model,
            "dtype": dtype,
            "memory": memory,
            "max_model_len": max_context,
            "seed": seed,
            "lora_rank": lora_rank,
            "max_loras": max_loras,
        }
        self._call(init)

    def _call(self, req: dict) -> dict:
        proc = self._proc
        if proc is None:
            raise BackendUnavailable("the vLLM engine was closed")
        assert proc.stdin is not None and proc.stdout is not None  # opened with PIPE
        try:
            proc.stdin.write(json.dumps(req) + "\n")
            proc.stdin.flush()
            line = proc.stdout.readline()
        except (BrokenPipeError, OSError) as e:
            line = ""
            err = str(e)
        else:
            err = ""
        if not line:
            raise BackendUnavailable(
                f"the vLLM worker exited ({err or proc.poll()}); its log: {self._log.name}\n"
                + _tail(self._log.name)
            )
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"vLLM worker: {reply['error']} (log: {self._log.name})")
        return reply

    def generate(
        self,
        encoded: list[list[int]],
        max_new_tokens: int,
        temperature: float,
        seeds: list[int],
        lora: str | None = None,
    ) -> list[tuple[list[int], list[float], bool]]:
        if self._engine is not None:
            outs = self._engine.generate(encoded, max_new_tokens, temperature, seeds, lora)
        else:
            req = {
                "op": "generate",
                "prompts": encoded,
                "max_tokens": max_new_tokens,
                "temperature": temperature,
                "seeds": seeds,
                "lora": lora,
            }
            outs = self._call(req)["outputs"]
        return [(o["ids"], o["logprobs"], bool(o["finished"])) for o in outs]

    def load(self, path: str) -> None:
        """New full weights from a safetensors file (tied heads refreshed, see the worker)."""
        if self._engine is not None:
            self._engine.load(path)
        else:
            self._call({"op": "load", "path": path})

    def set_lora(self, name: str, path: str) -> None:
        """Serve adapter ``name`` from the PEFT dir ``path`` (replacing its last version)."""
        if self._engine is not None:
            self._engine.set_lora(name, path)
        else:
            self._call({"op": "lora", "name": name, "path": path})

    def close(self) -> None:
        """Stop the engine and remove its files (idempotent)."""
        if self._proc is not None:
            try:
                assert self._proc.stdin is not None  # opened with PIPE
                self._proc.stdin.close()
                self._proc.wait(30)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
            self._log.close()
            self._proc = None
        self._engine = None
        shutil.rmtree(self.dir, ignore_errors=True)


class VLLMBackend:
    """vLLM generation for one full-parameter policy (see the module doc): the engine serves a
    copy of the policy's weights, re-synced by :meth:`sync`. ``memory`` is vLLM's
    ``gpu_memory_utilization`` (on its CPU build: the fraction of RAM for the KV cache)."""

    def __init__(
        self,
        policy,
        python: str | None = None,
        memory: float = 0.2,
        seed: int = 0,
        max_model_len: int = 0,
    ) -> None:
        why = vllm_unavailable_reason(python)
        if why:
            raise BackendUnavailable(why)
        self.policy = policy
        self.dir = tempfile.mkdtemp(prefix="flowzoo-vllm-")
        policy.model.save_pretrained(self.dir)
        policy.tokenizer.save_pretrained(self.dir)
        dtype = str(next(policy.model.parameters()).dtype).replace("torch.", "")
        ctx = context_length(policy.max_context, max_model_len)
        self.engine = VLLMEngine(self.dir, dtype, ctx, python, memory, seed, workdir=self.dir)

    def generate(
        self,
        encoded: list[list[int]],
        max_new_tokens: int,
        temperature: float,
        generator: torch.Generator | None,
    ) -> list[tuple[list[int], list[float], bool]]:
        """(completion ids, their log-probs, finished with EOS) per prompt; per-prompt seeds
        come from ``generator`` so a seeded rollout is reproducible."""
        seeds = request_seeds(len(encoded), generator)
        return self.engine.generate(encoded, max_new_tokens, temperature, seeds)

    def sync(self) -> None:
        """Push the policy's current weights into the engine."""
        from safetensors.torch import save_file

        path = os.path.join(self.dir, "sync.safetensors")
        state, seen = {}, set()
        for k, v in self.policy.model.state_dict().items():
            if v.data_ptr() in seen:  # a tied weight (lm_head = embed_tokens): written once
                continue
            seen.add(v.data_ptr())
            state[k] = v.detach().to("cpu").contiguous()
        save_file(state, path)
        self.engine.load(path)

    def close(self) -> None:
        self.engine.close()


class VLLMLoraBackend:
    """vLLM generation for one LoRA adapter of a router: every adapter of the router is served
    by one engine holding the base weights once (multi-LoRA). :meth:`sync` writes the adapter
    to a new versioned dir, points the engine at it, and deletes the previous version (vLLM
    loads adapters from disk; a fresh adapter id per version defeats its adapter cache)."""

    def __init__(self, engine: VLLMEngine, peft_model, adapter: str) -> None:
        self.engine, self.peft, self.adapter = engine, peft_model, adapter
        self.version = 0
        self._live: str | None = None
        self.sync()

    def generate(self, encoded, max_new_tokens, temperature, generator):
        seeds = request_seeds(len(encoded), generator)
        return self.engine.generate(encoded, max_new_tokens, temperature, seeds, self.adapter)

    def sync(self) -> None:
        """Push this adapter's current weights into the engine."""
        self.version += 1
        out = os.path.join(self.engine.dir, f"{self.adapter}-v{self.version}")
        self.peft.save_pretrained(out, selected_adapters=[self.adapter])
        # PEFT writes the adapter named "default" at the top, any other in a subdir
        path = os.path.join(out, self.adapter)
        path = path if os.path.isdir(path) else out
        self.engine.set_lora(self.adapter, path)
        if self._live is not None:
            shutil.rmtree(self._live, ignore_errors=True)
        self._live = out

    def close(self) -> None:
        self.engine.close()


def _tail(path: str, n: int = 3000) -> str:
    try:
        return Path(path).read_text(errors="replace")[-n:]
    except OSError:
        return ""


def lora_rank_for(r: int) -> int:
    """The smallest ``max_lora_rank`` vLLM accepts that holds rank ``r``."""
    for k in VLLM_LORA_RANKS:
        if k >= r:
            return k
    raise ValueError(f"LoRA rank {r} is above vLLM's largest ({VLLM_LORA_RANKS[-1]})")


def context_length(model_context: int, max_model_len: int = 0) -> int:
    """The engine's context: the run's budget where one is given, never above the model's
    (a Qwen3 config says 40,960 tokens, whose KV cache a CPU engine cannot hold at its
    default memory share; a run needs its longest prompt plus its largest turn budget)."""
    return min(model_context, max_model_len) if max_model_len > 0 else model_context


def attach(policy, backend: str, **options) -> None:
    """Give one full-parameter ``policy`` a generation backend by name (``transformers``
    removes any other)."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown generation backend {backend!r}; valid: {', '.join(BACKENDS)}")
    old = getattr(policy, "backend", None)
    if old is not None:
        old.close()
    policy.backend = VLLMBackend(policy, **options) if backend == "vllm" else None


def attach_router(router, backend: str, **options) -> None:
    """Give every trainable policy of a :class:`PolicyRouter` a generation backend: one engine
    per full-parameter policy, or for LoRA one multi-LoRA engine on the frozen base with an
    adapter per policy (``max_loras`` = the number of policies)."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown generation backend {backend!r}; valid: {', '.join(BACKENDS)}")
    if router.param == "full" or backend == "transformers":
        for name in router.names:
            attach(router.policies[name], backend, **options)
        return
    first = router.policies[router.names[0]]
    engine = VLLMEngine(
        router.model_path,
        "float32",
        context_length(first.max_context, options.get("max_model_len", 0)),
        options.get("python"),
        options.get("memory", 0.2),
        options.get("seed", 0),
        lora_rank=lora_rank_for(router.lora.r),
        max_loras=len(router.names),
    )
    for name in router.names:
        router.policies[name].backend = VLLMLoraBackend(engine, router.params.peft, name)


__all__ = [
    "BACKENDS",
    "BackendUnavailable",
    "VLLMBackend",
    "VLLMEngine",
    "VLLMLoraBackend",
    "attach",
    "attach_router",
    "request_seeds",
    "vllm_unavailable_reason",
]
