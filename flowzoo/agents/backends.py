"""Generation backends behind ``Policy.generate``: ``transformers`` (the policy's own batched
KV-cache sampler, the default) and ``vllm``.

The vLLM backend serves a copy of the policy's weights and is re-synced after every update,
so rollouts always come from the policy being trained. vLLM pins its own torch and
transformers, so it usually lives in another environment: point ``FLOWZOO_VLLM_PYTHON`` (or
``python=``) at that environment's interpreter and the engine runs there as a worker process;
where ``vllm`` imports in this interpreter it runs in-process. Full-parameter policies only:
LoRA adapters would need vLLM's LoRA serving, which is not wired up.
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


class VLLMBackend:
    """vLLM generation for one policy (see the module doc). ``memory`` is vLLM's
    ``gpu_memory_utilization`` (on its CPU build: the fraction of RAM for the KV cache)."""

    def __init__(
        self,
        policy,
        python: str | None = None,
        memory: float = 0.2,
        seed: int = 0,
        start_timeout_s: float = 600.0,
    ) -> None:
        why = vllm_unavailable_reason(python)
        if why:
            raise BackendUnavailable(why)
        if getattr(policy.model.config, "tie_word_embeddings", False):
            raise BackendUnavailable(
                "vLLM's weight reload keeps a tied lm_head's old weights; use a model with "
                "tie_word_embeddings=False (flowzoo's tiny models are untied)"
            )
        self.policy = policy
        self.dir = tempfile.mkdtemp(prefix="flowzoo-vllm-")
        policy.model.save_pretrained(self.dir)
        policy.tokenizer.save_pretrained(self.dir)
        dtype = str(next(policy.model.parameters()).dtype).replace("torch.", "")
        init = {
            "op": "init",
            "model": self.dir,
            "dtype": dtype,
            "memory": memory,
            "max_model_len": policy.max_context,
            "seed": seed,
        }
        python = python or vllm_python()
        self._engine = None
        self._proc = None
        if python is None:  # vllm imports here: in-process
            from flowzoo.agents.vllm_worker import Engine

            self._engine = Engine(self.dir, dtype, memory, policy.max_context, seed)
        else:
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
            self._call(init)

    def _call(self, req: dict) -> dict:
        proc = self._proc
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
        generator: torch.Generator | None,
    ) -> list[tuple[list[int], list[float], bool]]:
        """(completion ids, their log-probs, finished with EOS) per prompt; per-prompt seeds
        come from ``generator`` so a seeded rollout is reproducible."""
        n = len(encoded)
        if generator is not None:
            seeds = torch.randint(0, 2**31 - 1, (n,), generator=generator, device=generator.device)
            seeds = [int(s) for s in seeds.tolist()]
        else:
            seeds = [int(s) for s in torch.randint(0, 2**31 - 1, (n,)).tolist()]
        if self._engine is not None:
            outs = self._engine.generate(encoded, max_new_tokens, temperature, seeds)
        else:
            outs = self._call(
                {
                    "op": "generate",
                    "prompts": encoded,
                    "max_tokens": max_new_tokens,
                    "temperature": temperature,
                    "seeds": seeds,
                }
            )["outputs"]
        return [(o["ids"], o["logprobs"], bool(o["finished"])) for o in outs]

    def sync(self) -> None:
        """Push the policy's current weights into the engine."""
        from safetensors.torch import save_file

        path = os.path.join(self.dir, "sync.safetensors")
        state = {
            k: v.detach().to("cpu").contiguous() for k, v in self.policy.model.state_dict().items()
        }
        save_file(state, path)
        if self._engine is not None:
            self._engine.load(path)
        else:
            self._call({"op": "load", "path": path})

    def close(self) -> None:
        if self._proc is not None:
            try:
                self._proc.stdin.close()
                self._proc.wait(30)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
            self._log.close()
            self._proc = None
        self._engine = None
        shutil.rmtree(self.dir, ignore_errors=True)


def _tail(path: str, n: int = 3000) -> str:
    try:
        return Path(path).read_text(errors="replace")[-n:]
    except OSError:
        return ""


def attach(policy, backend: str, **options) -> None:
    """Give ``policy`` a generation backend by name (``transformers`` removes any other)."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown generation backend {backend!r}; valid: {', '.join(BACKENDS)}")
    old = getattr(policy, "backend", None)
    if old is not None:
        old.close()
    policy.backend = VLLMBackend(policy, **options) if backend == "vllm" else None


__all__ = ["BACKENDS", "BackendUnavailable", "VLLMBackend", "attach", "vllm_unavailable_reason"]
