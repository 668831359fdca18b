"""flowzoo's own forward pass for Qwen3-architecture models, for sampling and scoring.

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
return None and the caller uses transformers' forward. ``tests/models/test_fastlm.py``
checks log-probs, gradients and greedy samples against transformers'.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")
_MLP = ("gate_proj", "up_proj", "down_proj")


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
    def _weights(self) -> tuple[list[dict], dict]:
        """The effective weights now (differentiable when grad is on); QKV and gate/up fused."""
        layers = []
        for layer in self.root.model.layers:
            at, mlp = layer.self_attn, layer.mlp
            q, k, v, o = (_weight(getattr(at, n)) for n in _TARGETS)
            g, u, d = (_weight(getattr(mlp, n)) for n in _MLP)
            layers.append(
                dict(
                    ln1=layer.input_layernorm.weight,
                    ln2=layer.post_attention_layernorm.weight,
                    # q_norm's weight on every query head, then k_norm's on every key head
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
        top = dict(
            embed=self.root.model.embed_tokens.weight,
            norm=self.root.model.norm.weight,
            head=_weight(self.root.lm_head),
        )
        return layers, top

    def _rope(self, x: torch.Tensor, positions: torch.Tensor):
        """cos and a sign-folded sin, so a rotation is ``x * cos + swap_halves(x) * sin``."""
        cos, sin = self.root.model.rotary_emb(x, positions)
        half = sin.shape[-1] // 2
        sin = torch.cat([-sin[..., :half], sin[..., half:]], dim=-1)
        return cos.unsqueeze(1), sin.unsqueeze(1)

    # ------------------------------------------------------------------ one layer
    def _qkv(self, w: dict, x: torch.Tensor, cos, sin):
        """Queries (normed, rotated), keys (normed, rotated), values: q and k share one norm
        and one rotation call (fewer small ops per decoding step)."""
        b, s, _ = x.shape
        d, nq = self.head_dim, w["split"][0] // self.head_dim
        h = F.rms_norm(x, (x.shape[-1],), w["ln1"], self.eps)
        heads = F.linear(h, w["qkv"]).view(b, s, -1, d)
        nqk = nq + w["split"][1] // d
        qk = (F.rms_norm(heads[:, :, :nqk], (d,), None, self.eps) * w["qkn"]).transpose(1, 2)
        qk = qk * cos + torch.cat([qk[..., d // 2 :], qk[..., : d // 2]], dim=-1) * sin
        v = heads[:, :, nqk:].transpose(1, 2)
        return qk[:, :nq], qk[:, nq:], v

    def _rest(self, w: dict, x: torch.Tensor, q, k, v, mask, causal: bool = False):
        a = F.scaled_dot_product_attention(
            q,
            k.to(q.dtype),
            v.to(q.dtype),
            attn_mask=mask,
            is_causal=causal,
            scale=self.scale,
            enable_gqa=True,
        )
        return self._post(w, x, a)

    def _post(self, w: dict, x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """Output projection, residual, MLP: the layer after its attention output ``a``."""
        b, s, _ = x.shape
        x = x + F.linear(a.transpose(1, 2).reshape(b, s, -1), w["o"])
        h = F.rms_norm(x, (x.shape[-1],), w["ln2"], self.eps)
        g, u = F.linear(h, w["gu"]).chunk(2, dim=-1)
        return x + F.linear(F.silu(g) * u, w["down"])

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
        x = F.embedding(ids, top["embed"])
        cos, sin = self._rope(x, torch.arange(width, device=device)[None, :].expand(n, width))
        kv = []
        for i, w in enumerate(layers):
            q, k, v = self._qkv(w, x, cos, sin)
            kv.append((k, v))
            if i < len(layers) - 1:
                x = self._rest(w, x, q, k, v, None, causal=True)
                continue
            q = q.gather(2, out[:, None, :, None].expand(-1, q.shape[1], -1, q.shape[3]))
            x = x.gather(1, out[:, :, None].expand(-1, -1, x.shape[-1]))
            see = torch.arange(width, device=device)[None, None, :] <= out[:, :, None]
            x = self._rest(w, x, q, k, v, see[:, None])
        return kv, x, valid

    def _prefix(self, layers, top, prompts: list[list[int]], device):
        """The distinct prompts' forward: per-layer keys/values, each prompt's last
        normalised hidden state, the key-validity mask."""
        lens = torch.tensor([len(p) for p in prompts], device=device)
        kv, x, valid = self._causal(layers, top, prompts, (lens - 1)[:, None], device)
        return kv, F.rms_norm(x[:, 0], (x.shape[-1],), top["norm"], self.eps), valid

    # ------------------------------------------------------------------ sampling
    @torch.no_grad()
    def sample(
        self,
        encoded: list[list[int]],
        max_new_tokens: int,
        temperature: float,
        generator: torch.Generator | None,
        eos_id: int | None,
        pad_id: int,
        device: torch.device,
    ) -> tuple[list[list[int]], list[list[float]]]:
        """Sampled (or greedy at temperature 0) completion ids and their log-probs per row,
        ``max_new_tokens`` each: what follows a row's EOS is not its completion (the caller
        cuts there, as for transformers' sampler)."""
        layers, top = self._weights()
        uniq, rows = _distinct(encoded, device)
        kv, last, valid = self._prefix(layers, top, uniq, device)
        b = len(encoded)
        # many rows per prompt: attend to one copy of each prompt's keys (cascade attention);
        # else every row gets its own copy in a preallocated cache
        kind = _SharedCache if b >= 2 * len(uniq) else _RowCache
        cache = kind(kv, valid, rows, max_new_tokens, self.scale)
        lens = valid.sum(-1)[rows]
        steps = torch.arange(max_new_tokens, device=device)
        cos_all, sin_all = self._rope(last, lens[:, None] + steps[None, :])
        logits = F.linear(last, top["head"])[rows].float()
        out_tok = torch.full((b, max_new_tokens), pad_id, dtype=torch.long, device=device)
        out_lp = torch.zeros((b, max_new_tokens), device=device)
        live = torch.arange(b, device=device)  # original row of each row still decoding
        done = torch.zeros(b, dtype=torch.bool, device=device)
        for t in range(max_new_tokens):
            if temperature > 0:
                logp = F.log_softmax(logits / temperature, dim=-1)
                nxt = _draw(logp.exp(), generator).to(device)
            else:
                logp = F.log_softmax(logits, dim=-1)
                nxt = logits.argmax(-1)
            out_tok[live, t] = nxt
            out_lp[live, t] = logp.gather(1, nxt[:, None]).squeeze(1)
            if t == max_new_tokens - 1:
                break
            if eos_id is not None:
                done = done | (nxt == eos_id)
            n_going = len(live) - int(done.sum())
            if n_going == 0:
                break
            if n_going <= len(live) // 2:  # drop finished rows: less work per step from here
                keep = (~done).nonzero().squeeze(1)
                live, nxt, done = live[keep], nxt[keep], done[keep]
                cache.keep(keep)
                cos_all, sin_all = cos_all[keep], sin_all[keep]
            # other finished rows keep decoding until then; their tokens are cut below
            x = F.embedding(nxt[:, None], top["embed"])
            cos, sin = cos_all[:, :, t : t + 1], sin_all[:, :, t : t + 1]
            for i, w in enumerate(layers):
                q, k, v = self._qkv(w, x, cos, sin)
                x = self._post(w, x, cache.attend(i, t, q, k, v))
            h = F.rms_norm(x[:, -1], (x.shape[-1],), top["norm"], self.eps)
            logits = F.linear(h, top["head"]).float()
        return out_tok.cpu().tolist(), out_lp.cpu().tolist()

    # ------------------------------------------------------------------ scoring
    def logprobs(
        self,
        prompt_ids: list[list[int]],
        completion_ids: list[list[int]],
        temperature: float,
        device: torch.device,
    ) -> list[torch.Tensor]:
        """Per-token log-probs of each completion (differentiable when grad is on): each
        distinct prompt's forward once, the completions attending to it."""
        layers, top = self._weights()
        uniq, rows = _distinct(prompt_ids, device)
        t = temperature if temperature > 0 else 1.0
        if len(uniq) == len(prompt_ids):  # nothing shared: one causal pass, no masks
            return self._joint(layers, top, prompt_ids, completion_ids, t, device)
        kv, last, valid = self._prefix(layers, top, uniq, device)
        b, width = len(prompt_ids), valid.shape[1]
        ids, cvalid = _right_pad(completion_ids, device)
        s = ids.shape[1]
        lens = valid.sum(-1)[rows]
        pos = lens[:, None] + torch.arange(s, device=device)[None, :]
        causal = torch.ones((s, s), dtype=torch.bool, device=device).tril()
        eye = torch.eye(s, dtype=torch.bool, device=device)
        own = causal & (cvalid[:, None, :] | eye)  # (b, s, s)
        mask = torch.cat([valid[rows][:, None, :].expand(b, s, width), own], dim=2)[:, None]
        x = F.embedding(ids, top["embed"])
        cos, sin = self._rope(x, pos)
        for w, (kp, vp) in zip(layers, kv, strict=True):
            q, k, v = self._qkv(w, x, cos, sin)
            k = torch.cat([kp[rows], k.to(kp.dtype)], dim=2)
            v = torch.cat([vp[rows], v.to(vp.dtype)], dim=2)
            x = self._rest(w, x, q, k, v, mask)
        # the hidden state before token j: the prompt's last for j = 0, else completion j-1
        h = F.rms_norm(x[:, :-1], (x.shape[-1],), top["norm"], self.eps)
        h = torch.cat([last[rows][:, None].to(h.dtype), h], dim=1)
        return self._scored(top, h[cvalid], ids[cvalid], t, completion_ids)

    def _joint(self, layers, top, prompt_ids, completion_ids, t: float, device):
        """Prompt + completion as one right-padded causal pass (every prompt distinct); the
        last layer only at the positions that predict a completion token."""
        seqs = [p + c for p, c in zip(prompt_ids, completion_ids, strict=True)]
        start = torch.tensor([max(len(p) - 1, 0) for p in prompt_ids], device=device)
        clen = torch.tensor([len(c) for c in completion_ids], device=device)
        steps = torch.arange(max(1, int(clen.max())), device=device)[None, :]
        pick = steps < clen[:, None]  # (n, m): which gathered positions are real
        at = start[:, None] + torch.minimum(steps, (clen - 1).clamp(min=0)[:, None])
        _, x, _ = self._causal(layers, top, seqs, at, device)
        h = F.rms_norm(x[pick], (x.shape[-1],), top["norm"], self.eps)
        flat = [tok for c in completion_ids for tok in c]
        targets = torch.tensor(flat, dtype=torch.long, device=device)
        return self._scored(top, h, targets, t, completion_ids)

    @staticmethod
    def _scored(top, h, targets, t: float, completion_ids) -> list[torch.Tensor]:
        """Log-probs of ``targets`` under the LM head at hidden states ``h`` (completion
        positions only), split per completion."""
        lp = F.log_softmax(F.linear(h, top["head"]).float() / t, dim=-1)
        lp = lp.gather(1, targets[:, None]).squeeze(1)
        return list(lp.split([len(c) for c in completion_ids]))


class _RowCache:
    """Every row's own keys/values: its prompt's, then its generated tokens', in one
    preallocated buffer per layer written in place."""

    def __init__(self, kv, valid, rows, max_new: int, scale: float) -> None:
        b, width = len(rows), valid.shape[1]
        self.width, self.scale = width, scale
        self.kv = []
        for k, v in kv:
            kc = k.new_zeros((b, k.shape[1], width + max_new, k.shape[3]))
            vc = v.new_zeros((b, v.shape[1], width + max_new, v.shape[3]))
            kc[:, :, :width], vc[:, :, :width] = k[rows], v[rows]
            self.kv.append((kc, vc))
        self.key_ok = torch.ones((b, width + max_new), dtype=torch.bool, device=valid.device)
        self.key_ok[:, :width] = valid[rows]

    def keep(self, idx: torch.Tensor) -> None:
        self.kv = [(k[idx], v[idx]) for k, v in self.kv]
        self.key_ok = self.key_ok[idx]

    def attend(self, layer: int, t: int, q, k, v) -> torch.Tensor:
        kc, vc = self.kv[layer]
        n = self.width + t + 1
        kc[:, :, n - 1 : n], vc[:, :, n - 1 : n] = k, v
        return F.scaled_dot_product_attention(
            q,
            kc[:, :, :n].to(q.dtype),
            vc[:, :, :n].to(q.dtype),
            attn_mask=self.key_ok[:, None, None, :n],
            scale=self.scale,
            enable_gqa=True,
        )


class _SharedCache:
    """Cascade attention: one copy of each prompt's keys/values, attended by all of its rows
    in one batched matmul (rows grouped by prompt), plus each row's own generated tokens; the
    two softmax parts are merged by their log-sum-exp. Reads each prompt once per step
    instead of once per row: decoding G samples of a prompt is memory-bound on those reads."""

    def __init__(self, kv, valid, rows, max_new: int, scale: float) -> None:
        self.scale = scale
        self.prefix = kv
        self.bias = torch.zeros(valid.shape, device=valid.device).masked_fill(
            ~valid, float("-inf")
        )[:, None, None, :]
        self.own = [
            (
                k.new_zeros((len(rows), k.shape[1], max_new, k.shape[3])),
                v.new_zeros((len(rows), v.shape[1], max_new, v.shape[3])),
            )
            for k, v in kv
        ]
        self._group(rows)

    def _group(self, pid: torch.Tensor) -> None:
        """Rows grouped by prompt: ``slot`` (prompts x most rows) row ids, the pad id being
        one past the last row; ``inv`` each row's place in that layout."""
        self.pid = pid
        b, n_p = len(pid), len(self.prefix[0][0])
        counts = torch.bincount(pid, minlength=n_p)
        r = int(counts.max())
        order = torch.argsort(pid, stable=True)
        start = counts.cumsum(0) - counts
        rank = torch.arange(b, device=pid.device) - start[pid[order]]
        self.slot = torch.full((n_p, r), b, dtype=torch.long, device=pid.device)
        self.slot[pid[order], rank] = order
        inv = torch.empty_like(pid)
        inv[order] = pid[order] * r + rank
        self.inv, self.r = inv, r

    def keep(self, idx: torch.Tensor) -> None:
        pid = self.pid[idx]
        used, pid = torch.unique(pid, return_inverse=True)  # prompts with rows left
        self.prefix = [(k[used], v[used]) for k, v in self.prefix]
        self.bias = self.bias[used]
        self.own = [(k[idx], v[idx]) for k, v in self.own]
        self._group(pid)

    def attend(self, layer: int, t: int, q, k, v) -> torch.Tensor:
        kp, vp = self.prefix[layer]
        ko, vo = self.own[layer]
        ko[:, :, t : t + 1], vo[:, :, t : t + 1] = k, v
        b, h, _, d = q.shape
        n_p, hk, _, _ = kp.shape
        g, r = h // hk, self.r
        q = q.to(kp.dtype)
        # the prompt part: (prompts, kv heads, rows x grouped heads, keys)
        qp = torch.cat([q[:, :, 0], q.new_zeros((1, h, d))])[self.slot]
        qp = qp.view(n_p, r, hk, g, d).permute(0, 2, 1, 3, 4).reshape(n_p, hk, r * g, d)
        s1 = torch.matmul(qp, kp.transpose(-1, -2)) * self.scale + self.bias
        m1 = s1.amax(-1, keepdim=True)
        e1 = (s1 - m1).exp()
        part = torch.cat([torch.matmul(e1, vp), e1.sum(-1, keepdim=True), m1], dim=-1)
        part = part.view(n_p, hk, r, g, d + 2).permute(0, 2, 1, 3, 4).reshape(n_p * r, h, d + 2)
        part = part[self.inv]
        o1, l1, m1 = part[..., :d], part[..., d : d + 1], part[..., d + 1 :]
        # the row's own tokens
        s2 = torch.matmul(q.view(b, hk, g, d), ko[:, :, : t + 1].transpose(-1, -2)) * self.scale
        m2 = s2.amax(-1, keepdim=True)
        e2 = (s2 - m2).exp()
        o2 = torch.matmul(e2, vo[:, :, : t + 1]).view(b, h, d)
        l2, m2 = e2.sum(-1, keepdim=True).view(b, h, 1), m2.view(b, h, 1)
        m = torch.maximum(m1, m2)
        a1, a2 = (m1 - m).exp(), (m2 - m).exp()
        return ((o1 * a1 + o2 * a2) / (l1 * a1 + l2 * a2)).view(b, h, 1, d)


def _right_pad(seqs: list[list[int]], device) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids right-padded with 0 (at least one column) and where they are real."""
    width = max(1, max(len(x) for x in seqs))
    ids = torch.zeros((len(seqs), width), dtype=torch.long)
    valid = torch.zeros((len(seqs), width), dtype=torch.bool)
    for i, x in enumerate(seqs):
        ids[i, : len(x)] = torch.tensor(x, dtype=torch.long)
        valid[i, : len(x)] = True
    return ids.to(device), valid.to(device)


def _distinct(seqs: list[list[int]], device) -> tuple[list[list[int]], torch.Tensor]:
    """The distinct sequences in first-seen order, and each row's index into them."""
    uniq: dict[tuple[int, ...], int] = {}
    idx = [uniq.setdefault(tuple(x), len(uniq)) for x in seqs]
    return [list(u) for u in uniq], torch.tensor(idx, device=device)


def _draw(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One token per row by inverse-CDF sampling: one uniform draw per row (``multinomial``
    draws one per vocabulary entry, which dominated a small model's sampling step)."""
    cdf = probs.cumsum(-1)
    dev = generator.device if generator is not None else cdf.device
    u = torch.rand((cdf.shape[0], 1), generator=generator, device=dev).to(cdf.device)
    idx = torch.searchsorted(cdf, u * cdf[:, -1:], right=True)
    return idx.squeeze(1).clamp_(max=cdf.shape[1] - 1)


def fast_lm(model) -> FastLM | None:
    """A :class:`FastLM` for ``model`` now, or None where it does not apply (see module doc)."""
    try:
        return FastLM(model)
    except Unsupported:
        return None
