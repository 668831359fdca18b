"""The update of one step's :class:`~flowzoo.agents.train.batch.Batch`: its advantages (from
the algorithm), then one policy at a time, one role at a time, with the role-level gradient
diagnostics the study is about.

For each policy that played, the batch's turns (less those left out: uninformative groups,
truncated turns) are cut into minibatches (a count, or verl's fixed size, so a policy that
plays more turns makes more optimizer steps); within one, each
role's turns run in length-sorted micro-batches, and every step logs per role the loss,
clip fraction and KL. The role-level gradient diagnostics (each role's gradient kept apart,
norms, cosines, the damper, what moved the weights) are hooks of
:class:`~flowzoo.agents.train.diagnostics.RoleProbe`; out-of-memory retries and FSDP's idle
passes are the layout's (:meth:`distributed.Replicated.micro_batches`): whether the policies
are whole or sharded, the update calls the same methods and never branches on it.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from typing import Any

import torch

from flowzoo.agents.train import distributed
from flowzoo.agents.train.algorithms import algorithm_for
from flowzoo.agents.train.algorithms.base import Critic
from flowzoo.agents.train.batch import Batch
from flowzoo.agents.train.diagnostics import CoherenceDamper, RoleProbe, TrainingDiverged
from flowzoo.agents.train.losses import Advantages, aggregate, k3_kl
from flowzoo.agents.train.rollout import TurnRecord
from flowzoo.agents.train.segments import per_turn, pieces
from flowzoo.config import TrainConfig


def _trainable(t: TurnRecord, adv: Advantages) -> bool:
    """A turn the update trains on: it has a completion and its advantage is not skipped."""
    return t.n_tokens > 0 and t.index not in adv.skip


class Learner:
    """Holds the optimizers (and PPO critics, the damper) of every policy of a router and
    applies one step's update."""

    def __init__(
        self,
        cfg: TrainConfig,
        router,
        dist: distributed.DistInfo,
        roles: list[str],
        agents_per_role: dict[str, int],
    ) -> None:
        self.cfg, self.router, self.dist = cfg, router, dist
        #: whole copies or FSDP shards, behind one interface (the update never asks which)
        self.par = distributed.layout(dist, sharded=cfg.fsdp)
        self.roles, self.agents_per_role = roles, agents_per_role
        self.step = 0
        #: the advantages and loss ``cfg.algo`` names (the one place it is read)
        self.algorithm = algorithm_for(cfg)
        #: what its estimator carries between steps (a running baseline; checkpointed)
        self.estimator_state = self.algorithm.state(cfg) if self.algorithm.state else None
        self.heads: dict[str, torch.nn.Module] = {}
        if self.algorithm.value_head is not None:
            for name in router.names:
                hs = router.policies[name].model.config.hidden_size
                self.heads[name] = self.algorithm.value_head(hs).to(router.policies[name].device)
        #: per policy, the lr its optimizer steps at (before the schedule): the lr its roles
        #: share, else ``cfg.lr``; per role, the factor its gradient is scaled by (role lr / that)
        self.base_lr: dict[str, float] = {}
        self.grad_scale: dict[str, float] = {}
        for name in router.names:
            lrs = {float(cfg.for_role(r, "lr")) for r in router.roles_of(name)}
            self.base_lr[name] = lrs.pop() if len(lrs) == 1 else cfg.lr
            for r in router.roles_of(name):
                self.grad_scale[r] = float(cfg.for_role(r, "lr")) / self.base_lr[name]
        self.opts = {
            name: torch.optim.AdamW(
                self.params(name), lr=self.base_lr[name], weight_decay=cfg.weight_decay
            )
            for name in router.names
        }
        self.damper = (
            CoherenceDamper(cfg.damper_lambda, cfg.damper_decay) if cfg.damper_lambda > 0 else None
        )
        #: per policy, the micro-batch size in use (shrinks when the device runs out of memory)
        self.micro_batch: dict[str, int] = {}
        #: the role-level gradient diagnostics, hooked into every optimizer step
        self.probe = RoleProbe(self.par, self.damper)

    @property
    def last_role_grads(self) -> dict[str, dict]:
        """Per policy, the last update's per-role gradients and their sum."""
        return self.probe.last

    @property
    def critic(self) -> Critic | None:
        """What the estimator needs of the critic (None for a critic-free algorithm)."""
        return Critic(self.router, self.heads) if self.algorithm.critic else None

    def params(self, name: str) -> list[torch.nn.Parameter]:
        """What policy ``name``'s optimizer steps: its trainable weights and its value head."""
        head = self.heads.get(name)
        return self.router.trainable(name) + (list(head.parameters()) if head is not None else [])

    def update(self, batch: Batch, step: int, rng: random.Random) -> tuple[dict, dict]:
        """The batch's advantages, then one update of every policy that played in it (a
        policy with no turns is left exactly as it was), its mini-batches drawn in ``rng``'s
        order (the trainer's :class:`Seeds`); (per policy its per-role statistics, the
        advantages' group statistics)."""
        self.step = step
        adv = self.algorithm.advantages(self.cfg, batch, self.critic, self.estimator_state)
        if self.cfg.mask_truncated:  # a turn cut at its budget: its end is not the model's
            adv.skip |= batch.truncated
            adv.stats["masked_truncated"] = len(batch.truncated)
        factor = self.cfg.lr_at(step) / self.cfg.lr  # the schedule, applied to each policy's lr
        for name, opt in self.opts.items():
            for group in opt.param_groups:
                group["lr"] = self.base_lr[name] * factor
        per_policy = {}
        self.probe.last = {}
        # the update-matched control: one step count for every policy, the shared policy's
        matched = None
        if self.cfg.update_matched:
            matched = self.n_minibatches(sum(_trainable(t, adv) for t in batch.turns))
        for name in self.router.names:
            mine = [t for t in batch.turns if t.policy == name]
            if distributed.sum_floats([len(mine)], self.dist)[0] > 0:
                per_policy[name] = self.update_policy(name, mine, adv, rng, matched)
                self.router.policies[name].sync_backend()  # the next rollout sees the update
        return per_policy, adv.stats

    def _weights(self, turns: list[TurnRecord]) -> list[float]:
        """Per-turn loss weights, mean 1 over the whole batch (all processes' shares)."""
        mode = self.cfg.role_weighting
        if mode == "tokens":
            w = [1.0] * len(turns)
        elif mode == "per-agent":
            w = [1.0 / self.agents_per_role[t.role] for t in turns]
        else:
            counts = distributed.sum_floats(
                [float(sum(t.role == r for t in turns)) for r in self.roles], self.dist
            )
            per_role = {r: c for r, c in zip(self.roles, counts, strict=True) if c > 0}
            w = [1.0 / (len(per_role) * per_role[t.role]) for t in turns]
        s, n = distributed.sum_floats([sum(w), float(len(turns))], self.dist)
        return [x * n / s for x in w] if s > 0 else w

    def _kl_for(self, role: str) -> float:
        return float(self.cfg.for_role(role, "kl_coef"))

    def _temp(self, role: str) -> float:
        """The temperature ``role``'s turns were sampled at (their log-probs are of it)."""
        return float(self.cfg.for_role(role, "temperature"))

    def update_policy(
        self,
        name: str,
        turns: list[TurnRecord],
        adv: Advantages,
        rng: random.Random,
        n_chunks: int | None = None,
    ) -> dict:
        """Minibatched update of one policy (``n_chunks`` optimizer steps an epoch when
        given, else its own turns' count); per-role gradients measured separately."""
        cfg = self.cfg
        pol = self.router.prepare_update(name)
        params = self.params(name)
        head = self.heads.get(name)
        stats: dict[str, Any] = {
            "roles": defaultdict(lambda: defaultdict(float)),
            "policy": defaultdict(float),
            "cosine": defaultdict(float),
        }
        turns = [t for t in turns if _trainable(t, adv)]
        order = list(range(len(turns)))
        n_updates = 0
        steps = n_chunks if n_chunks is not None else self.n_minibatches(len(turns))
        for _epoch in range(cfg.ppo_epochs):
            rng.shuffle(order)
            chunks = [order[i::steps] for i in range(steps)]
            for chunk in chunks:
                batch = [turns[i] for i in chunk]
                if distributed.sum_floats([len(batch)], self.dist)[0] == 0:
                    continue
                n_updates += 1
                self._one_update(name, pol, head, params, batch, adv, stats)
        # counts add up over the mini-batches (what the step trained on); the rest are means
        out: dict[str, dict[str, Any]] = {
            "roles": {
                r: {
                    k: v if k in ("tokens", "turns") else v / max(1, n_updates)
                    for k, v in d.items()
                }
                for r, d in stats["roles"].items()
            }
        }
        out["policy"] = {k: v / max(1, n_updates) for k, v in stats["policy"].items()}
        out["policy"]["opt_steps"] = n_updates
        out["policy"]["lr"] = self.opts[name].param_groups[0]["lr"]
        out["cosine"] = {k: v / max(1, n_updates) for k, v in stats["cosine"].items()}
        return out

    def n_minibatches(self, n_local: int) -> int:
        """Optimizer steps per epoch for a policy with ``n_local`` turns here: verl-style
        fixed-size mini-batches (``ppo_mini_batch`` x ``group_size`` turns, counted over all
        processes), so a policy playing more turns makes more steps; else ``minibatches``."""
        cfg = self.cfg
        if cfg.ppo_mini_batch <= 0:
            return cfg.minibatches
        n = int(distributed.sum_floats([float(n_local)], self.dist)[0])
        return max(1, -(-n // (cfg.ppo_mini_batch * cfg.group_size)))

    def _micro_step(
        self, name, pol, head, params, role, mb, adv, norm
    ) -> tuple[float, dict[str, float]]:
        """Loss of one micro-batch of one role, its gradient added to ``.grad``; (loss value,
        the micro-batch's mean kl and clip fraction)."""
        cfg = self.cfg
        wmap, total_tokens, total_seqs = norm
        beta, temp = self._kl_for(role), self._temp(role)
        # a turn with tool calls: each generated segment after its own prompt, joined back per
        # turn (tool output is only ever prompt: never in the loss; :mod:`.segments`)
        p_ids, c_ids = pieces(mb)
        new_lp, new_v = self.algorithm.outputs(pol, head, mb, adv, temp)
        ref_lp = (
            per_turn(mb, self.router.reference_logprobs(name, p_ids, c_ids, temp))
            if beta > 0
            else None
        )
        local: dict[str, float] = defaultdict(float)
        tok_losses = []
        for j, t in enumerate(mb):
            old = torch.tensor(t.all_logprobs, dtype=torch.float32, device=new_lp[j].device)
            values = (new_v[j], *adv.value_targets(t)) if new_v is not None else None
            pl, clipped = self.algorithm.loss(cfg, role, new_lp[j], old, adv.tokens(t, old), values)
            if ref_lp is not None:  # the KL anchor: per role, the same for every algorithm
                kl = k3_kl(new_lp[j], ref_lp[j])
                pl = pl + beta * kl
                local["kl"] += kl.mean().item() / len(mb)
            tok_losses.append(pl)
            local["clip_frac"] += float(clipped.mean()) / len(mb)
            # how far off-policy this turn is: 0 on the first mini-batch, grows on later ones
            local["ratio_dev"] += float((new_lp[j].detach() - old).exp().sub(1).abs().mean()) / len(
                mb
            )
        loss = aggregate(
            tok_losses, [wmap[t.index] for t in mb], cfg.loss_agg, total_tokens, total_seqs
        )
        if self.grad_scale.get(role, 1.0) != 1.0:  # a role lr apart from its policy's
            loss = loss * self.grad_scale[role]
        loss_value = loss.item()
        if not math.isfinite(loss_value):
            raise TrainingDiverged(
                f"loss of role {role!r} (policy {name!r}) is {loss_value} at step {self.step}"
            )
        self.par.backward(loss, params)
        return loss_value, dict(local)

    def _idle_pass(self, name: str, pol, role: str) -> None:
        """FSDP: a process out of micro-batches joins the others' gathers and reduce-scatters
        with a one-token pass whose loss is zero (it adds nothing to the gradient)."""
        tok = pol.eos_id if pol.eos_id is not None else 0
        p_ids, c_ids = [[tok]], [[tok]]
        lp = pol.logprobs(p_ids, c_ids, self._temp(role))
        if self._kl_for(role) > 0:
            self.router.reference_logprobs(name, p_ids, c_ids, self._temp(role))
        (lp[0].sum() * 0.0).backward()

    def _one_update(
        self, name, pol, head, params, batch: list[TurnRecord], adv: Advantages, stats
    ) -> None:
        """One optimizer step of policy ``name`` on ``batch``: weigh the turns, back-propagate
        each role's turns in micro-batches (the probe keeps each role's gradient apart and
        reads the role-level diagnostics), clip, step."""
        self.opts[name].zero_grad(set_to_none=True)
        norm = self._normalisers(batch)
        self.probe.begin(params)
        sums: dict[str, dict[str, float]] = {}
        for role, rturns in self._group_by_role(name, batch).items():
            acc: dict[str, float] = defaultdict(float)

            def run(mb: list[TurnRecord], role: str = role, acc: dict = acc) -> None:
                loss_value, local = self._micro_step(name, pol, head, params, role, mb, adv, norm)
                for k, v in local.items():
                    acc[k] += v * len(mb)
                acc["loss"] += loss_value

            def idle(role: str = role) -> None:
                self._idle_pass(name, pol, role)

            size = self.micro_batch.get(name, self.cfg.micro_batch)
            got = self.par.micro_batches(rturns, size, run, idle)
            if got != size:  # ran out of memory: the policy's later micro-batches are smaller
                self.micro_batch[name] = got
            acc["tokens"] += sum(t.n_tokens for t in rturns)
            acc["turns"] += len(rturns)
            sums[role] = acc
            self.probe.role_done(role)
        self._record_role_sums(sums, stats)
        self.probe.before_step(name, self.step, stats)
        if self.cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(params, self.cfg.grad_clip)
        self.opts[name].step()
        self.probe.after_step(stats)

    def _normalisers(self, batch: list[TurnRecord]) -> tuple[dict[int, float], float, float]:
        """Each turn's loss weight, and the loss normalisers over the whole batch (every
        process's share under data parallel): total tokens and sequences."""
        weights = self._weights(batch)
        wmap = {t.index: w for t, w in zip(batch, weights, strict=True)}
        total_tokens, total_seqs = distributed.sum_floats(
            [sum(t.n_tokens for t in batch), float(len(batch))], self.dist
        )
        return wmap, total_tokens, total_seqs

    def _group_by_role(self, name: str, batch: list[TurnRecord]) -> dict[str, list[TurnRecord]]:
        """The batch's turns per role, in a fixed role order with global counts (so every
        process makes the same collectives); turns of one prompt side by side (its forward
        is computed once in a micro-batch), similar lengths too (less padding)."""
        mine: dict[str, list[TurnRecord]] = defaultdict(list)
        for t in batch:
            mine[t.role].append(t)
        roles = [r for r in self.roles if r in self.router.roles_of(name)]
        counts = distributed.sum_floats([len(mine.get(r, [])) for r in roles], self.dist)
        return {
            r: sorted(
                mine.get(r, []),
                key=lambda t: (len(t.prompt_ids), t.prompt_ids, len(t.completion_ids)),
            )
            for r, n in zip(roles, counts, strict=True)
            if n > 0
        }

    def _record_role_sums(self, sums: dict[str, dict[str, float]], stats) -> None:
        """Per role, the global loss, tokens and turns; clip fraction, mean |ratio - 1| and
        KL as means over the role's turns."""
        for role, acc in sums.items():
            keys = ["loss", "tokens", "turns", "clip_frac", "ratio_dev"]
            keys += ["kl"] if self._kl_for(role) > 0 else []
            got = distributed.sum_floats([acc.get(k, 0.0) for k in keys], self.dist)
            g = dict(zip(keys, got, strict=True))
            rs = stats["roles"][role]
            for k, v in g.items():
                rs[k] += v / g["turns"] if k in ("clip_frac", "ratio_dev", "kl") else v
