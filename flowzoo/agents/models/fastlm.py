"""flowzoo's own forward pass for Qwen3-architecture models, for scoring and (through
:mod:`flowzoo.agents.models.sampler`) sampling.

Why not transformers' forward: on a small model the per-token Python work of the generic
module stack (cache objects, mask builders, hooks) costs more than the arithmetic, and a
rollout's prompts repeat (G samples of one problem, Voting's solvers), which a generic
forward recomputes for every row. Here:

- one forward per *distinct* prompt (prefill and, when training, the prompt's share of the
  forward and backward pass); every row attends to its prompt's keys and values;
- a preallocated KV cache written in place, one fused QKV and one fused gate/up matmul per
  layer, finished rows dropped from the batch once half of them are done;
- the LM head only at completion positions when scoring.

It reads the model's own parameters on every call (full weights, or a PEFT LoRA's effective
weight ``W + s * B @ A`` with gradients to ``A`` and ``B``), so it is always the model being
trained. Anything it does not implement (other architectures, sliding windows, biases,
DoRA, LoRA dropout while training, sharded or checkpointed models) makes :func:`fast_lm`
return None and the caller uses transformers' forward. ``tests/agents/models/test_fastlm.py``
checks log-probs, gradients and greedy samples against transformers'.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")
_MLP = ("gate_proj", "up_proj", "down_proj")


@dataclass
class LayerWeights:
    """One decoder layer's effective weights, fused for fewer matmuls."""

    ln1: torch.Tensor  # input norm
    ln2: torch.Tensor  # post-attention norm
    qkn: torch.Tensor  # q_norm's weight on every query head, then k_norm's on every key head
    qkv: torch.Tensor  # q, k and v projections stacked
    o: torch.Tensor  # output projection
    gu: torch.Tensor  # gate and up projections stacked
    down: torch.Tensor
    split: tuple[int, int, int]  # rows of q, k and v in ``qkv``


@dataclass
class TopWeights:
    """The weights around the layers: embedding, final norm, LM head."""

    embed: torch.Tensor
    norm: torch.Tensor
    head: torch.Tensor


class Unsupported(Exception):
    """The model has something this forward does not implement."""


def _root(model):
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def _weight(mod: nn.Module) -> torch.Tensor:
    """The weight a linear layer applies now: its own, or base + the active LoRA deltas."""
    if type(mod) is nn.Linear:
        if mod.bias is not None:
            raise Unsupported("linear bias")
        return mod.weight
    base = getattr(mod, "base_layer", None)
    if type(base) is not nn.Linear or not hasattr(mod, "lora_A"):
        raise Unsupported(f"layer type {type(mod).__name__}")
    if base.bias is not None:
        raise Unsupported("linear bias")
    w = base.weight
    if mod.disable_adapters or mod.merged:
        return w
    for a in mod.active_adapters:
        if a not in mod.lora_A:
            continue
        if getattr(mod, "use_dora", {}).get(a) or getattr(mod, "lora_bias", {}).get(a):
            raise Unsupported("DoRA / LoRA bias")
        drop = mod.lora_dropout[a]
        if mod.training and not isinstance(drop, nn.Identity) and drop.p > 0:
            raise Unsupported("LoRA dropout while training")
        delta = mod.lora_B[a].weight @ mod.lora_A[a].weight
        w = w + delta.to(w.dtype) * mod.scaling[a]
    return w


def _check(model) -> None:
    root = _root(model)
    cfg = getattr(root, "config", None)
    if getattr(cfg, "model_type", None) != "qwen3":
        raise Unsupported(f"model type {getattr(cfg, 'model_type', None)!r}")
    if getattr(cfg, "hidden_act", "silu") != "silu" or getattr(cfg, "attention_bias", False):
        raise Unsupported("activation / attention bias")
    if any(t != "full_attention" for t in getattr(cfg, "layer_types", None) or []):
        raise Unsupported("sliding-window layers")
    ckpt = getattr(type(root), "is_activation_checkpointing", None)  # transformers >= 5.2x
    ckpt = root.is_activation_checkpointing if ckpt is not None else root.is_gradient_checkpointing
    if ckpt and torch.is_grad_enabled():
        raise Unsupported("gradient checkpointing")
    if type(root.model.embed_tokens) is not nn.Embedding:
        raise Unsupported("embedding type")
    if any(type(p).__name__ == "DTensor" for p in root.parameters()):
        raise Unsupported("sharded (FSDP) parameters")


class FastLM:
    """Sampling and scoring for one model; see the module docstring for why and when."""

    def __init__(self, model) -> None:
        _check(model)
        self.model = model
        root = _root(model)
        cfg = root.config
        self.root = root
        self.n_heads = cfg.num_attention_heads
        self.n_kv = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.n_heads
        self.eps = cfg.rms_norm_eps
        self.scale = self.head_dim**-0.5

    # ------------------------------------------------------------------ weights
    def weights(self) -> tuple[list[LayerWeights], TopWeights]:
        """The effective weights now (differentiable when grad is on); QKV and gate/up fused."""
        layers = []
        for layer in self.root.model.layers:
            at, mlp = layer.self_attn, layer.mlp
            q, k, v, o = (_weight(getattr(at, n)) for n in _TARGETS)
            g, u, d = (_weight(getattr(mlp, n)) for n in _MLP)
            layers.append(
                LayerWeights(
                    ln1=layer.input_layernorm.weight,
                    ln2=layer.post_attention_layernorm.weight,
                    qkn=torch.cat(
                        [
                            at.q_norm.weight.expand(q.shape[0] // self.head_dim, -1),
                            at.k_norm.weight.expand(k.shape[0] // self.head_dim, -1),
                        ]
                    ),
                    qkv=torch.cat([q, k, v]),
                    o=o,
                    gu=torch.cat([g, u]),
                    down=d,
                    split=(q.shape[0], k.shape[0], v.shape[0]),
                )
            )
        top = TopWeights(
            embed=self.root.model.embed_tokens.weight,
            norm=self.root.model.norm.weight,
            head=_weight(self.root.lm_head),
        )
        return layers, top

    def rope(self, x: torch.Tensor, positions: torch.Tensor):
        """cos and a sign-folded sin, so a rotation is ``x * cos + swap_halves(x) * sin``."""
        cos, sin = self.root.model.rotary_emb(x, positions)
        half = sin.shape[-1] // 2
        sin = torch.cat([-sin[..., :half], sin[..., half:]], dim=-1)
        return cos.unsqueeze(1), sin.unsqueeze(1)

    # ------------------------------------------------------------------ one layer
    def qkv(self, w: LayerWeights, x: torch.Tensor, cos, sin):
        """Queries (normed, rotated), keys (normed, rotated), values: q and k share one norm
        and one rotation call (fewer small ops per decoding step)."""
        b, s, _ = x.shape
        d, nq = self.head_dim, w.split[0] // self.head_dim
        h = F.rms_norm(x, (x.shape[-1],), w.ln1, self.eps)
        heads = F.linear(h, w.qkv).view(b, s, -1, d)
        nqk = nq + w.split[1] // d
        qk = (F.rms_norm(heads[:, :, :nqk], (d,), None, self.eps) * w.qkn).transpose(1, 2)
        qk = qk * cos + torch.cat([qk[..., d // 2 :], qk[..., : d // 2]], dim=-1) * sin
        v = heads[:, :, nqk:].transpose(1, 2)
        return qk[:, :nq], qk[:, nq:], v

    def _rest(self, w: LayerWeights, x: torch.Tensor, q, k, v, mask, causal: bool = False):
        a = F.scaled_dot_product_attention(
            q,
            k.to(q.dtype),
            v.to(q.dtype),
            attn_mask=mask,
            is_causal=causal,
            scale=self.scale,
            enable_gqa=True,
        )
        return self.post(w, x, a)

    def post(self, w: LayerWeights, x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """Output projection, residual, MLP: the layer after its attention output ``a``."""
        b, s, _ = x.shape
        x = x + F.linear(a.transpose(1, 2).reshape(b, s, -1), w.o)
        h = F.rms_norm(x, (x.shape[-1],), w.ln2, self.eps)
        g, u = F.linear(h, w.gu).chunk(2, dim=-1)
        return x + F.linear(F.silu(g) * u, w.down)

    # ------------------------------------------------------------------ prompts
    def _causal(self, layers, top, seqs: list[list[int]], out: torch.Tensor, device):
        """One forward over ``seqs``, right-padded (a causal mask alone then keeps every real
        token from seeing padding, and the fused causal kernel applies): per-layer
        keys/values, the last layer's hidden states at positions ``out`` (n, m) only, the
        validity mask. The last layer's other positions feed nothing but their keys and
        values, so their queries, attention and MLP are skipped (nearly a third of a 3-layer
        model's prompt compute, forward and backward)."""
        ids, valid = _right_pad(seqs, device)
        n, width = ids.shape
        x = F.embedding(ids, top.embed)
        cos, sin = self.rope(x, torch.arange(width, device=device)[None, :].expand(n, width))
        kv = []
        for i, w in enumerate(layers):
            q, k, v = self.qkv(w, x, cos, sin)
            kv.append((k, v))
            if i < len(layers) - 1:
                x = self._rest(w, x, q, k, v, None, causal=True)
                continue
            q = q.gather(2, out[:, None, :, None].expand(-1, q.shape[1], -1, q.shape[3]))
            x = x.gather(1, out[:, :, None].expand(-1, -1, x.shape[-1]))
            see = torch.arange(width, device=device)[None, None, :] <= out[:, :, None]
            x = self._rest(w, x, q, k, v, see[:, None])
        return kv, x, valid

    def prefix(self, layers, top, prompts: list[list[int]], device):
        """The distinct prompts' forward: per-layer keys/values, each prompt's last
        normalised hidden state, the key-validity mask."""
        lens = torch.tensor([len(p) for p in prompts], device=device)
        kv, x, valid = self._causal(layers, top, prompts, (lens - 1)[:, None], device)
        return kv, F.rms_norm(x[:, 0], (x.shape[-1],), top.norm, self.eps), valid

    # ------------------------------------------------------------------ scoring
    def logprobs(
        self,
        prompt_ids: list[list[int]],
        completion_ids: list[list[int]],
        temperature: float,
        device: torch.device,
        hidden: bool = False,
    ) -> tuple[list[torch.Tensor], list[torch.Tensor] | None]:
        """Per-token log-probs of each completion (differentiable when grad is on): each
        distinct prompt's forward once, the completions attending to it; with ``hidden``,
        also the last (normed) hidden state that predicts each completion token (a critic
        reads its values from them)."""
        layers, top = self.weights()
        uniq, rows = distinct(prompt_ids, device)
        t = temperature if temperature > 0 else 1.0
        if len(uniq) == len(prompt_ids):  # nothing shared: one causal pass, no masks
            return self._joint(layers, top, prompt_ids, completion_ids, t, device, hidden)
        kv, last, valid = self.prefix(layers, top, uniq, device)
        b, width = len(prompt_ids), valid.shape[1]
        ids, cvalid = _right_pad(completion_ids, device)
        s = ids.shape[1]
        lens = valid.sum(-1)[rows]
        pos = lens[:, None] + torch.arange(s, device=device)[None, :]
        causal = torch.ones((s, s), dtype=torch.bool, device=device).tril()
        eye = torch.eye(s, dtype=torch.bool, device=device)
        own = causal & (cvalid[:, None, :] | eye)  # (b, s, s)
        mask = torch.cat([valid[rows][:, None, :].expand(b, s, width), own], dim=2)[:, None]
        x = F.embedding(ids, top.embed)
        cos, sin = self.rope(x, pos)
        for w, (kp, vp) in zip(layers, kv, strict=True):
            q, k, v = self.qkv(w, x, cos, sin)
            k = torch.cat([kp[rows], k.to(kp.dtype)], dim=2)
            v = torch.cat([vp[rows], v.to(vp.dtype)], dim=2)
            x = self._rest(w, x, q, k, v, mask)
        # the hidden state before token j: the prompt's last for j = 0, else completion j-1
        h = F.rms_norm(x[:, :-1], (x.shape[-1],), top.norm, self.eps)
        h = torch.cat([last[rows][:, None].to(h.dtype), h], dim=1)
        return self._scored(top, h[cvalid], ids[cvalid], t, completion_ids, hidden)

    def _joint(self, layers, top, prompt_ids, completion_ids, t: float, device, hidden: bool):
        """Prompt + completion as one right-padded causal pass (every prompt distinct); the
        last layer only at the positions that predict a completion token."""
        seqs = [p + c for p, c in zip(prompt_ids, completion_ids, strict=True)]
        start = torch.tensor([max(len(p) - 1, 0) for p in prompt_ids], device=device)
        clen = torch.tensor([len(c) for c in completion_ids], device=device)
        steps = torch.arange(max(1, int(clen.max())), device=device)[None, :]
        pick = steps < clen[:, None]  # (n, m): which gathered positions are real
        at = start[:, None] + torch.minimum(steps, (clen - 1).clamp(min=0)[:, None])
        _, x, _ = self._causal(layers, top, seqs, at, device)
        h = F.rms_norm(x[pick], (x.shape[-1],), top.norm, self.eps)
        flat = [tok for c in completion_ids for tok in c]
        targets = torch.tensor(flat, dtype=torch.long, device=device)
        return self._scored(top, h, targets, t, completion_ids, hidden)

    @staticmethod
    def _scored(top, h, targets, t: float, completion_ids, hidden: bool = False):
        """Log-probs of ``targets`` under the LM head at hidden states ``h`` (completion
        positions only), split per completion; and ``h`` split the same way if ``hidden``."""
        lp = F.log_softmax(F.linear(h, top.head).float() / t, dim=-1)
        lp = lp.gather(1, targets[:, None]).squeeze(1)
        sizes = [len(c) for c in completion_ids]
        return list(lp.split(sizes)), (list(h.split(sizes)) if hidden else None)


def _right_pad(seqs: list[list[int]], device) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids right-padded with 0 (at least one column) and where they are real."""
    width = max(1, max(len(x) for x in seqs))
    ids = torch.zeros((len(seqs), width), dtype=torch.long)
    valid = torch.zeros((len(seqs), width), dtype=torch.bool)
    for i, x in enumerate(seqs):
        ids[i, : len(x)] = torch.tensor(x, dtype=torch.long)
        valid[i, : len(x)] = True
    return ids.to(device), valid.to(device)


def distinct(seqs: list[list[int]], device) -> tuple[list[list[int]], torch.Tensor]:
    """The distinct sequences in first-seen order, and each row's index into them."""
    uniq: dict[tuple[int, ...], int] = {}
    idx = [uniq.setdefault(tuple(x), len(uniq)) for x in seqs]
    return [list(u) for u in uniq], torch.tensor(idx, device=device)


def fast_lm(model) -> FastLM | None:
    """A :class:`FastLM` for ``model`` now, or None where it does not apply (see module doc)."""
    try:
        return FastLM(model)
    except Unsupported:
        return None
