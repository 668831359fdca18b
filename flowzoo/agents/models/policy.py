"""A policy: a Hugging Face causal LM and its tokenizer, loaded from a local path.

``Policy.generate`` samples completions for a batch of prompts with a KV cache and returns
the per-token log-probabilities of the sampling distribution (logits / temperature), which
is exactly what ``Policy.logprobs`` recomputes with grad for the RL update.
"""

from __future__ import annotations

import inspect
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
import torch.nn.functional as F

from flowzoo.agents.models.fastlm import fast_lm
from flowzoo.agents.models.sampler import sample

if TYPE_CHECKING:
    from flowzoo.agents.models.backends import VLLMBackend, VLLMLoraBackend

PRECISIONS = ("fp32", "bf16")
#: the fewest prompt tokens a role's budget must leave in the model's context: a prompt cut
#: to fewer holds neither its problem nor its instruction (refused at config time)
MIN_PROMPT_TOKENS = 64
#: of a prompt cut to fit, one part in this many of the room is kept from its tail (the
#: role's instruction and the chat template's turn marker); the rest is its head (the
#: chat template's opening and the problem statement)
TAIL_PARTS = 3


class PromptCutWarning(UserWarning):
    """A prompt did not fit the model's context and was cut in its middle."""


def prompt_room(context: int, max_new_tokens: int, model: str = "the model") -> int:
    """The prompt tokens that fit beside ``max_new_tokens`` in a ``context``-token model; a
    budget that leaves none is a ValueError naming both (a prompt cut to nothing, or to
    one token, ran as if nothing had happened)."""
    room = context - max_new_tokens
    if room < 1:
        raise ValueError(
            f"max_new_tokens={max_new_tokens} leaves no room for a prompt in {model}'s "
            f"context of {context} tokens; give max_new_tokens below {context} (at most "
            f"{context - MIN_PROMPT_TOKENS} leaves a prompt {MIN_PROMPT_TOKENS} tokens)"
        )
    return room


def cut_middle(ids: list[int], room: int) -> list[int]:
    """``ids`` cut to ``room`` tokens from the middle: the first ``room - room // 3``
    tokens (the chat template's opening and the problem statement) and the last
    ``room // 3`` (:data:`TAIL_PARTS`: the role's instruction and the template's turn
    marker) kept. A prompt that fits is returned unchanged (the same list)."""
    if len(ids) <= room:
        return ids
    tail = room // TAIL_PARTS
    head = room - tail
    return ids[:head] + (ids[len(ids) - tail :] if tail else [])


def check_room(limits: dict[str, int], context: int, model: str) -> None:
    """Refuse, before a model is built, a role whose token budget leaves fewer than
    :data:`MIN_PROMPT_TOKENS` of the model's context for its prompt (every prompt would be
    cut to almost nothing); names the role, its budget, the context and the largest valid
    budget."""
    bad = {r: n for r, n in limits.items() if context - n < MIN_PROMPT_TOKENS}
    if bad:
        shown = ", ".join(f"{r}: {n}" for r, n in sorted(bad.items()))
        raise ValueError(
            f"max_new_tokens ({shown}) leaves fewer than {MIN_PROMPT_TOKENS} of {model}'s "
            f"{context}-token context for the prompt; give at most "
            f"{context - MIN_PROMPT_TOKENS} (role_settings {{ROLE: {{max_new_tokens: N}}}} "
            "or max_new_tokens)"
        )


def check_budgets(
    limits: dict[str, int], path: str | os.PathLike, model: str, other: set[str] | None = None
) -> None:
    """:func:`check_room` for the roles the local model at ``path`` plays (those in
    ``other``, played by another model, are checked by their own policy when it samples);
    nothing for a folder without a readable config (a served model)."""
    context = model_context(path)
    if context is not None:
        check_room({r: n for r, n in limits.items() if r not in (other or set())}, context, model)


def model_context(path: str | os.PathLike) -> int | None:
    """A local model's context length as :class:`Policy` reads it (its config.json's
    ``max_position_embeddings``, 2048 when it has none); None when ``path`` holds no
    readable config.json (a served model, a scripted player)."""
    import json

    try:
        cfg = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
        n = cfg.get("max_position_embeddings", 2048) if isinstance(cfg, dict) else None
    except (OSError, ValueError, RecursionError):
        return None
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


def check_device(device: str | torch.device) -> torch.device:
    """``device`` as a ``torch.device``; a ValueError naming what this machine has instead of
    a failure deep inside the first forward pass."""
    try:
        d = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"bad device {device!r} ({e}); e.g. 'cpu', 'cuda', 'cuda:1'") from None
    if d.type == "cuda":
        n = torch.cuda.device_count()
        if n == 0:
            raise ValueError(f"device {device!r}: this machine has no CUDA device; use 'cpu'")
        if d.index is not None and d.index >= n:
            raise ValueError(f"device {device!r}: this machine has {n} CUDA device(s), 0..{n - 1}")
    elif d.type == "meta":
        raise ValueError("device 'meta' holds no weights; use 'cpu' or 'cuda[:i]'")
    return d


def _free_device_cache(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()


@dataclass
class Generation:
    """One sampled completion."""

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    text: str
    #: the completion ended with EOS (False: cut at max_new_tokens)
    finished: bool
    #: why no completion came (a served model that failed for good); None when one did
    error: str | None = None
    #: prompt tokens cut from the prompt's middle to fit the context (0: it fit whole)
    prompt_cut: int = 0


def _cache_of(out):
    cache = getattr(out, "cache", None)
    return cache if cache is not None else getattr(out, "past_key_values", None)


def _is_local_model_dir(path: str | os.PathLike) -> bool:
    p = Path(path)
    return p.is_dir() and (p / "config.json").exists()


class Policy:
    """A causal LM + tokenizer from a local path (exactly as a real checkpoint loads)."""

    #: a fixed player, never trained (set on frozen local models: ``players.frozen_player``)
    frozen: bool

    def __init__(
        self,
        path: str | os.PathLike,
        device: str = "cpu",
        dtype: torch.dtype | None = None,
        model=None,
        tokenizer=None,
        precision: str = "fp32",
        grad_checkpointing: bool = False,
        fast: bool = True,
    ) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if precision not in PRECISIONS:
            raise ValueError(f"unknown precision {precision!r}; valid: {', '.join(PRECISIONS)}")
        self.path = str(path)
        self.device = check_device(device)
        if model is None and not _is_local_model_dir(path):
            raise FileNotFoundError(
                f"no model at {path!r}: flowzoo loads local checkpoints only (a dir with config.json)"
            )
        self.tokenizer = tokenizer or AutoTokenizer.from_pretrained(self.path)
        #: a transformers causal LM, or a PEFT model wrapping one (``params.LoraParams``): Any
        #: (transformers types ``PreTrainedModel.to`` wrongly: ``@wraps(Module.to)``)
        if model is None:
            model = AutoModelForCausalLM.from_pretrained(self.path, dtype=dtype or torch.float32)
            own_memory(model)
        self.model: Any = cast(Any, model)
        self.model.to(self.device)
        #: bf16: forward passes autocast to bfloat16 (weights and optimizer stay fp32)
        self.precision = precision
        #: a generation backend (``flowzoo.agents.models.backends``); None: this class's own sampler
        self.backend: VLLMBackend | VLLMLoraBackend | None = None
        #: sample and score with flowzoo's own forward where it applies (``fastlm``)
        self.fast = fast
        if grad_checkpointing:
            if hasattr(self.model, "activation_checkpointing_enable"):  # transformers >= 5.2x
                self.model.activation_checkpointing_enable({"use_reentrant": False})
            else:
                self.model.gradient_checkpointing_enable(
                    gradient_checkpointing_kwargs={"use_reentrant": False}
                )
        tok = self.tokenizer
        if tok.pad_token_id is None:
            tok.pad_token = tok.eos_token
        self.eos_id = tok.eos_token_id
        self.pad_id = tok.pad_token_id
        self.bos_id = tok.bos_token_id
        self.use_chat_template = bool(getattr(tok, "chat_template", None))
        self.max_context = int(getattr(self.model.config, "max_position_embeddings", 2048))
        params = inspect.signature(self.model.forward).parameters
        # transformers 5 renamed past_key_values -> cache; support both
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._keep_kw = "logits_to_keep" in params

    def autocast(self):
        """The forward-pass precision context (bf16 autocast, or a no-op for fp32)."""
        return torch.autocast(
            self.device.type, dtype=torch.bfloat16, enabled=self.precision == "bf16"
        )

    # ------------------------------------------------------------------ encoding
    def encode_prompt(self, prompt: str) -> list[int]:
        """Prompt ids: the chat template where the tokenizer has one (thinking disabled, as
        in the study), else BOS + raw text."""
        tok = self.tokenizer
        if self.use_chat_template:
            msgs = [{"role": "user", "content": prompt}]
            try:
                # typed as ids or text; transformers 5 returns a BatchEncoding (see below)
                out: Any = tok.apply_chat_template(
                    msgs, add_generation_prompt=True, tokenize=True, enable_thinking=False
                )
            except TypeError:  # a template call without the thinking switch
                out = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
            # transformers 5 returns a BatchEncoding (a mapping), older versions a list of ids
            return list(out["input_ids"] if hasattr(out, "keys") else out)
        ids = tok(prompt, add_special_tokens=False)["input_ids"]
        return ([self.bos_id] if self.bos_id is not None else []) + list(ids)

    def fit_prompt(self, ids: list[int], max_new_tokens: int) -> list[int]:
        """The prompt's ids made to fit the model's context beside ``max_new_tokens``: a
        prompt that fits is returned as it is; a longer one is cut in its middle
        (:func:`cut_middle`: the head with the problem statement and the tail with the
        role's instruction kept). Why not the tail alone: a role then lost the problem it
        was asked about. A budget that leaves no room is a ValueError (:func:`prompt_room`)."""
        return cut_middle(ids, prompt_room(self.max_context, max_new_tokens, self.path))

    def decode(self, ids: list[int]) -> str:
        return cast(str, self.tokenizer.decode(ids, skip_special_tokens=True))  # one sequence

    # ------------------------------------------------------------------ sampling
    @torch.no_grad()
    def generate(
        self,
        prompts: list[str],
        max_new_tokens: int = 64,
        temperature: float = 0.7,
        seed: int | None = None,
        generator: torch.Generator | None = None,
    ) -> list[Generation]:
        """Sample one completion per prompt (greedy when ``temperature == 0``)."""
        if not prompts:
            return []
        if generator is None and seed is not None:
            generator = torch.Generator(device=self.device).manual_seed(seed)
        memo: dict[str, tuple[list[int], int]] = {}  # samples and roles repeat prompts
        for p in prompts:
            if p not in memo:
                ids = self.encode_prompt(p)
                fit = self.fit_prompt(ids, max_new_tokens)
                memo[p] = fit, len(ids) - len(fit)
        encoded = [list(memo[p][0]) for p in prompts]
        cut = [memo[p][1] for p in prompts]
        if any(cut):
            self._say_cut(max(cut), max_new_tokens)
        if self.backend is not None:
            gens = self._from_backend(encoded, max_new_tokens, temperature, generator)
        else:
            was_training = self.model.training
            self.model.eval()
            try:
                gens = self._sample_fitting(encoded, max_new_tokens, temperature, generator)
            finally:
                self.model.train(was_training)
        for g, n in zip(gens, cut, strict=True):
            g.prompt_cut = n
        return gens

    def _say_cut(self, n: int, max_new_tokens: int) -> None:
        """Warn once per policy that prompts were cut (each turn's count is on its
        :class:`Generation`, and the trainer's metrics and evaluations count them)."""
        if getattr(self, "_cut_said", False):
            return
        self._cut_said = True
        warnings.warn(
            f"{self.path}: a prompt longer than the room its {self.max_context}-token context "
            f"leaves beside max_new_tokens={max_new_tokens} was cut in its middle ({n} tokens "
            "dropped; its head with the problem and its tail with the instruction kept); "
            "counted per turn as prompt_cut. Lower max_new_tokens or use a model with a "
            "longer context",
            PromptCutWarning,
            stacklevel=3,
        )

    def _from_backend(self, encoded, max_new_tokens, temperature, generator) -> list[Generation]:
        assert self.backend is not None  # the caller checked
        out = []
        for ids, (comp, lps, fin) in zip(
            encoded,
            self.backend.generate(encoded, max_new_tokens, temperature, generator),
            strict=True,
        ):
            text_ids = comp[:-1] if fin and comp and comp[-1] == self.eos_id else comp
            out.append(Generation(ids, list(comp), list(lps), self.decode(text_ids), fin))
        return out

    def sync_backend(self) -> None:
        """Push the current weights to the generation backend (after an update)."""
        if self.backend is not None:
            self.backend.sync()

    def _sample_fitting(self, encoded, max_new_tokens, temperature, generator) -> list[Generation]:
        """Sample; a batch that runs out of device memory is split in halves, not crashed."""
        try:
            with self.autocast():
                return self._sample(encoded, max_new_tokens, temperature, generator)
        except torch.OutOfMemoryError:
            if len(encoded) == 1:
                raise
            _free_device_cache(self.device)
            half = len(encoded) // 2
            return self._sample_fitting(
                encoded[:half], max_new_tokens, temperature, generator
            ) + self._sample_fitting(encoded[half:], max_new_tokens, temperature, generator)

    def _fast_lm(self):
        return fast_lm(self.model) if self.fast else None

    def _sample(self, encoded, max_new_tokens, temperature, generator) -> list[Generation]:
        fl = self._fast_lm()
        if fl is not None:
            toks, lps = sample(
                fl,
                encoded,
                max_new_tokens,
                temperature,
                generator,
                self.eos_id,
                self.pad_id,
                self.device,
            )
            return self._generations(encoded, toks, lps)
        dev = self.device
        b = len(encoded)
        width = max(len(e) for e in encoded)
        ids = torch.full((b, width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((b, width), dtype=torch.long)
        for i, e in enumerate(encoded):  # left padding keeps the last positions aligned
            ids[i, width - len(e) :] = torch.tensor(e)
            mask[i, width - len(e) :] = 1
        ids, mask = ids.to(dev), mask.to(dev)
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        extra = {"logits_to_keep": 1} if self._keep_kw else {}
        out = self.model(
            input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, **extra
        )
        past = _cache_of(out)
        logits = out.logits[:, -1, :].float()
        next_pos = pos[:, -1:] + 1
        done = torch.zeros(b, dtype=torch.bool, device=dev)
        step_toks: list[torch.Tensor] = []
        step_lps: list[torch.Tensor] = []
        for _ in range(max_new_tokens):
            if temperature > 0:
                logp = F.log_softmax(logits / temperature, dim=-1)
                probs = logp.exp()
                if generator is not None and generator.device != probs.device:
                    probs = probs.to(generator.device)  # a CPU generator: sample on the CPU
                nxt = torch.multinomial(probs, 1, generator=generator).squeeze(1).to(dev)
            else:
                logp = F.log_softmax(logits, dim=-1)
                nxt = logits.argmax(-1)
            nxt = torch.where(done, torch.full_like(nxt, self.pad_id), nxt)
            step_toks.append(nxt)
            step_lps.append(logp.gather(1, nxt[:, None]).squeeze(1))
            done = done | (nxt == self.eos_id)
            if bool(done.all()):
                break
            mask = torch.cat([mask, torch.ones((b, 1), dtype=mask.dtype, device=dev)], dim=1)
            out = self.model(
                input_ids=nxt[:, None],
                attention_mask=mask,
                position_ids=next_pos,
                use_cache=True,
                **{self._cache_kw: past},
            )
            past = _cache_of(out)
            logits = out.logits[:, -1, :].float()
            next_pos = next_pos + 1
        all_toks = torch.stack(step_toks, 1).cpu().tolist()
        all_lps = torch.stack(step_lps, 1).cpu().tolist()
        return self._generations(encoded, all_toks, all_lps)

    def _generations(self, encoded, toks, lps) -> list[Generation]:
        """Each sampled row cut after its first EOS (finished) or kept whole (truncated)."""
        gens = []
        for ids, row, lp in zip(encoded, toks, lps, strict=True):
            n = row.index(self.eos_id) + 1 if self.eos_id in row else len(row)
            comp = row[:n]
            fin = bool(comp) and comp[-1] == self.eos_id
            text_ids = comp[:-1] if fin else comp
            gens.append(Generation(ids, comp, lp[:n], self.decode(text_ids), fin))
        return gens

    # ------------------------------------------------------------------ scoring
    def logprobs(
        self, prompt_ids: list[list[int]], completion_ids: list[list[int]], temperature: float = 1.0
    ) -> list[torch.Tensor]:
        """Per-token log-probs of each completion given its prompt (with grad), under
        ``logits / temperature`` — the distribution ``generate`` sampled from."""
        return self.score(prompt_ids, completion_ids, temperature)[0]

    def score(
        self,
        prompt_ids: list[list[int]],
        completion_ids: list[list[int]],
        temperature: float = 1.0,
        hidden: bool = False,
    ) -> tuple[list[torch.Tensor], list[torch.Tensor] | None]:
        """The one scoring path (GRPO's log-probs, PPO's log-probs and values): per-token
        log-probs of each completion and, with ``hidden``, the last hidden state (after the
        final norm) that predicts each of its tokens. flowzoo's fast forward where the model
        allows it, else the model's own."""
        fl = self._fast_lm()
        if fl is not None:
            with self.autocast():
                return fl.logprobs(prompt_ids, completion_ids, temperature, self.device, hidden)
        dev = self.device
        seqs = [p + c for p, c in zip(prompt_ids, completion_ids, strict=True)]
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, s in enumerate(seqs):  # right padding: positions are plain 0..n-1
            ids[i, : len(s)] = torch.tensor(s)
            mask[i, : len(s)] = 1
        ids, mask = ids.to(dev), mask.to(dev)
        with self.autocast():
            out = self.model(input_ids=ids, attention_mask=mask, output_hidden_states=hidden)
        logits = out.logits.float()
        t = temperature if temperature > 0 else 1.0
        logp = F.log_softmax(logits[:, :-1] / t, dim=-1)
        tgt = logp.gather(2, ids[:, 1:, None]).squeeze(2)
        spans = [
            slice(len(p) - 1, len(p) - 1 + len(c))
            for p, c in zip(prompt_ids, completion_ids, strict=True)
        ]
        lps = [tgt[i, sl] for i, sl in enumerate(spans)]
        if not hidden:
            return lps, None
        last = out.hidden_states[-1]
        return lps, [last[i, sl] for i, sl in enumerate(spans)]

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())


def own_memory(model: Any) -> None:
    """Give every parameter and buffer of a freshly loaded model memory of its own.

    Why: safetensors loads by mapping the weight file, and a tensor that is never written
    stays a view of that file: when the file is rewritten in place (a model re-shipped, a
    ``final/`` saved again by another run), a policy already running reads the new weights
    mid-run (a frozen KL reference, an untouched embedding row). Seen: a run's last
    evaluation scored its base model after the package's weights were re-shipped."""
    with torch.no_grad():
        for t in [*model.parameters(), *model.buffers()]:
            t.data = t.data.clone()
