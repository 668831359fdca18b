"""Sampling with flowzoo's own forward (:mod:`flowzoo.agents.models.fastlm`): the decoding loop
and its two KV caches, apart from the forward they drive.

Why apart: the forward (weights, one layer, the prompt pass, scoring) is what training
differentiates through; the sampler is a no-grad loop with its own memory layout (a
preallocated per-row cache, or cascade attention over one copy of each prompt) and its own
draw. Either can change without touching the other.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from flowzoo.agents.models.fastlm import FastLM, distinct


@torch.no_grad()
def sample(
    lm: FastLM,
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
    layers, top = lm.weights()
    uniq, rows = distinct(encoded, device)
    kv, last, valid = lm.prefix(layers, top, uniq, device)
    b = len(encoded)
    # many rows per prompt: attend to one copy of each prompt's keys (cascade attention);
    # else every row gets its own copy in a preallocated cache
    kind = SharedCache if b >= 2 * len(uniq) else RowCache
    cache = kind(kv, valid, rows, max_new_tokens, lm.scale)
    lens = valid.sum(-1)[rows]
    steps = torch.arange(max_new_tokens, device=device)
    cos_all, sin_all = lm.rope(last, lens[:, None] + steps[None, :])
    logits = F.linear(last, top.head)[rows].float()
    out_tok = torch.full((b, max_new_tokens), pad_id, dtype=torch.long, device=device)
    out_lp = torch.zeros((b, max_new_tokens), device=device)
    live = torch.arange(b, device=device)  # original row of each row still decoding
    done = torch.zeros(b, dtype=torch.bool, device=device)
    for t in range(max_new_tokens):
        if temperature > 0:
            logp = F.log_softmax(logits / temperature, dim=-1)
            nxt = draw(logp.exp(), generator).to(device)
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
        x = F.embedding(nxt[:, None], top.embed)
        cos, sin = cos_all[:, :, t : t + 1], sin_all[:, :, t : t + 1]
        for i, w in enumerate(layers):
            q, k, v = lm.qkv(w, x, cos, sin)
            x = lm.post(w, x, cache.attend(i, t, q, k, v))
        h = F.rms_norm(x[:, -1], (x.shape[-1],), top.norm, lm.eps)
        logits = F.linear(h, top.head).float()
    return out_tok.cpu().tolist(), out_lp.cpu().tolist()


class RowCache:
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


class SharedCache:
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


def draw(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One token per row by inverse-CDF sampling: one uniform draw per row (``multinomial``
    draws one per vocabulary entry, which dominated a small model's sampling step)."""
    cdf = probs.cumsum(-1)
    dev = generator.device if generator is not None else cdf.device
    u = torch.rand((cdf.shape[0], 1), generator=generator, device=dev).to(cdf.device)
    idx = torch.searchsorted(cdf, u * cdf[:, -1:], right=True)
    return idx.squeeze(1).clamp_(max=cdf.shape[1] - 1)
