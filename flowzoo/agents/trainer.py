"""The training loop: rollout -> advantages -> per-policy, per-role update -> eval -> checkpoint.

Every hyperparameter is one field of :class:`TrainConfig` (the CLI and TOML/YAML files map
onto it one to one). Each step logs, per role, the loss, the gradient norm of that role's
contribution, its gradient-mass share and (shared policies) the cosine between role
gradients — the quantities the study uses to explain why runs peak and then fall off a cliff.

Reproducibility: all randomness of step ``k`` (problems, sampling, minibatch order) is
derived from ``(seed, k)``, so a resumed run, which restores parameters, optimizer states,
the damper's EMA and the step, continues exactly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import random
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from flowzoo.agents import distributed
from flowzoo.agents.algorithms.grpo import (
    ADV_NORMS,
    GROUP_BY,
    LOSS_AGGS,
    GroupKey,
    advantages,
    aggregate,
    clipped_token_loss,
    k3_kl,
)
from flowzoo.agents.algorithms.ppo import ValueHead, gae, logprobs_and_values, value_loss
from flowzoo.agents.curves import mean_grad_share
from flowzoo.agents.diagnostics import (
    CoherenceDamper,
    analyze_curve,
    dot,
    flat_grad,
    role_gradient_stats,
)
from flowzoo.agents.evaluate import evaluate_env
from flowzoo.agents.rollout import EpisodeRecord, TurnRecord, rollout, tree_rollout
from flowzoo.agents.routing import LoraSettings, PolicyRouter, parse_policy_arg

ALGOS = ("grpo", "ppo")
ROLE_WEIGHTING = ("tokens", "per-agent", "equal-per-role")


class TrainingDiverged(RuntimeError):
    """A loss, gradient or reward became NaN/inf; the last good checkpoint is kept."""


@dataclass
class TrainConfig:
    """One training run. Defaults suit a CPU run on a tiny model; ``preset="study"`` applies
    the study's settings (G=8, T=0.7, lr 2e-5, no KL, seq-mean-token-mean, clip 0.2/0.28,
    grad clip 1.0, LoRA r64/alpha32)."""

    env: str = "voting-math"
    env_options: dict[str, Any] = field(default_factory=dict)
    model: str = "tiny-s"
    #: shared | isolated | role=name,role=name (a custom map)
    policy: str = "shared"
    #: full | lora
    param: str = "full"
    lora_r: int = 64
    lora_alpha: int = 32
    algo: str = "grpo"
    steps: int = 20
    problems_per_step: int = 4
    group_size: int = 8
    train_tasks: int = 500
    temperature: float = 0.7
    max_new_tokens: int = 64
    lr: float = 1e-4
    weight_decay: float = 0.0
    clip_low: float = 0.2
    clip_high: float = 0.28
    kl_coef: float = 0.0
    #: role -> its own KL coefficient (the per-role KL anchor); overrides kl_coef for that role
    kl_per_role: dict[str, float] = field(default_factory=dict)
    loss_agg: str = "seq-mean-token-mean"
    std_norm: bool = True
    #: group | global | per-role | none
    adv_norm: str = "group"
    #: task | task_role_turn | task_agent_turn (the study's)
    group_by: str = "task_agent_turn"
    #: tokens | per-agent | equal-per-role
    role_weighting: str = "tokens"
    #: reward = team_weight * team + (1 - team_weight) * the role's own signal
    team_weight: float = 1.0
    damper_lambda: float = 0.0
    damper_decay: float = 0.9
    grad_clip: float = 1.0
    #: optimizer steps per rollout batch (>1 makes later minibatches off-policy, so clipping acts)
    minibatches: int = 1
    ppo_epochs: int = 1
    micro_batch: int = 16
    gamma: float = 1.0
    gae_lambda: float = 0.95
    vf_coef: float = 0.5
    value_clip: float = 0.2
    #: independent (G whole episodes per problem) | tree (G samples per turn from one state)
    rollout: str = "independent"
    eval_every: int = 5
    eval_episodes: int = 64
    eval_temperature: float = 0.0
    save_every: int = 5
    cliff_margin: float = 0.1
    cliff_window: int = 3
    seed: int = 0
    out_dir: str = "runs/default"
    device: str = "cpu"
    #: policy name -> device, e.g. {"solver": "cuda:0", "aggregator": "cuda:1"}: isolated
    #: policies on different GPUs of one process; unnamed policies go on ``device``
    policy_devices: dict[str, str] = field(default_factory=dict)
    #: under torchrun: shard every policy's weights, gradients and AdamW state over the
    #: processes (FSDP2) instead of replicating them (GRPO, full fine-tuning)
    fsdp: bool = False
    #: fp32 | bf16 (autocast forward passes; fp32 weights and optimizer)
    precision: str = "fp32"
    #: recompute activations in the backward pass (less memory, ~30% more compute)
    grad_checkpointing: bool = False
    #: transformers | vllm (rollouts through vLLM, weights synced after every update)
    generation_backend: str = "transformers"
    #: vLLM's gpu_memory_utilization (on its CPU build: the RAM fraction for the KV cache)
    vllm_memory: float = 0.2
    resume: bool = True
    preset: str = ""

    def __post_init__(self) -> None:
        if self.preset:
            apply_preset(self, self.preset)
        checks = [
            ("algo", self.algo, ALGOS),
            ("loss_agg", self.loss_agg, LOSS_AGGS),
            ("group_by", self.group_by, GROUP_BY),
            ("adv_norm", self.adv_norm, ADV_NORMS),
            ("role_weighting", self.role_weighting, ROLE_WEIGHTING),
            ("param", self.param, ("full", "lora")),
            ("rollout", self.rollout, ("independent", "tree")),
            ("precision", self.precision, ("fp32", "bf16")),
            ("generation_backend", self.generation_backend, ("transformers", "vllm")),
        ]
        for name, value, valid in checks:
            if value not in valid:
                raise ValueError(f"unknown {name} {value!r}; valid: {', '.join(valid)}")
        if self.group_size < 1 or self.problems_per_step < 1 or self.steps < 0:
            raise ValueError("group_size and problems_per_step must be >= 1 and steps >= 0")
        if not 0.0 <= self.team_weight <= 1.0:
            raise ValueError(f"team_weight must be in [0, 1], got {self.team_weight}")
        if self.minibatches < 1 or self.ppo_epochs < 1:
            raise ValueError("minibatches and ppo_epochs must be >= 1")
        if self.generation_backend == "vllm" and self.param != "full":
            raise ValueError(
                "generation_backend='vllm' serves full-parameter policies only (param='full'); "
                "LoRA adapters would need vLLM's LoRA serving, which is not wired up"
            )

    def identity(self) -> str:
        """Hash of everything that shapes the run's trajectory (not its length or place)."""
        d = dataclasses.asdict(self)
        for k in (
            "steps",
            "out_dir",
            "resume",
            "eval_every",
            "save_every",
            "device",
            "policy_devices",
            "grad_checkpointing",
            "vllm_memory",
        ):
            d.pop(k, None)
        return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


PRESETS: dict[str, dict[str, Any]] = {
    "study": dict(
        group_size=8,
        temperature=0.7,
        lr=2e-5,
        kl_coef=0.0,
        loss_agg="seq-mean-token-mean",
        clip_low=0.2,
        clip_high=0.28,
        grad_clip=1.0,
        group_by="task_agent_turn",
        param="lora",
        lora_r=64,
        lora_alpha=32,
        team_weight=1.0,
    ),
}


def apply_preset(cfg: TrainConfig, name: str) -> None:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; valid: {', '.join(PRESETS)}")
    for k, v in PRESETS[name].items():
        setattr(cfg, k, v)


def read_config_file(path: str | os.PathLike) -> dict[str, Any]:
    """The table in a TOML or YAML file (training configs and sweep files alike)."""
    p = Path(path)
    text = p.read_text()
    if p.suffix == ".toml":
        import tomllib

        return tomllib.loads(text)
    if p.suffix in (".yaml", ".yml"):
        import yaml

        return yaml.safe_load(text) or {}
    raise ValueError(f"config file must be .toml, .yaml or .yml, got {p.name}")


def load_config_file(path: str | os.PathLike, **overrides: Any) -> TrainConfig:
    """A TrainConfig from a TOML or YAML file (keys are the dataclass fields)."""
    p = Path(path)
    data = {**read_config_file(p), **overrides}
    valid = {f.name for f in dataclasses.fields(TrainConfig)}
    bad = sorted(set(data) - valid)
    if bad:
        raise ValueError(f"unknown config keys {bad} in {p}; valid: {', '.join(sorted(valid))}")
    return TrainConfig(**data)


def _check_fsdp(cfg: TrainConfig, info: distributed.DistInfo) -> None:
    """What ``fsdp=True`` supports, as one clear error instead of a hang between processes."""
    if not info.active:
        raise ValueError(
            "fsdp=True shards policies over torchrun processes; run it under "
            "`torchrun --nproc_per_node N` with N >= 2 (one process needs no sharding)"
        )
    bad = {
        "algo": (cfg.algo, "grpo"),
        "param": (cfg.param, "full"),
        "generation_backend": (cfg.generation_backend, "transformers"),
    }
    for key, (got, want) in bad.items():
        if got != want:
            raise ValueError(f"fsdp=True supports {key}={want!r} only, got {got!r}")
    if cfg.damper_lambda > 0:
        raise ValueError("fsdp=True does not support the coherence damper (damper_lambda > 0)")


def _finite(x: float) -> bool:
    return math.isfinite(x)


class Trainer:
    """Runs a :class:`TrainConfig` end to end (see the module doc)."""

    def __init__(self, cfg: TrainConfig, progress: bool = True) -> None:
        from flowzoo.agents.tiny import resolve_model
        from flowzoo.envs import make_env

        self.cfg = cfg
        self.dist = distributed.setup(cfg.device)
        #: this process's device (cuda:<local rank> under torchrun on GPUs)
        self.device = self.dist.device
        self.progress = progress and self.dist.main
        if self.dist.active and cfg.adv_norm in ("global", "per-role"):
            raise ValueError(
                f"adv_norm={cfg.adv_norm!r} normalises over the whole batch, which data-parallel "
                "processes do not share; use adv_norm='group' or 'none' under torchrun"
            )
        if cfg.fsdp:
            _check_fsdp(cfg, self.dist)
        if self.dist.active and cfg.policy_devices:
            raise ValueError(
                "policy_devices places policies on one process's GPUs; under torchrun every "
                "process trains on its own GPU (drop policy_devices, or run one process)"
            )
        torch.manual_seed(cfg.seed)
        self.model_path = resolve_model(cfg.model)
        self.env_factory = lambda split, n: make_env(
            cfg.env, split=split, n_tasks=n, **cfg.env_options
        )
        probe = self.env_factory("train", cfg.train_tasks)
        self.train_tasks = probe.tasks
        self.roles = probe.roles
        self.agents_per_role = defaultdict(int)
        for a in probe.possible_agents:
            self.agents_per_role[probe.role_of(a)] += 1
        need_ref = cfg.kl_coef > 0 or any(v > 0 for v in cfg.kl_per_role.values())
        self.router = PolicyRouter(
            self.model_path,
            self.roles,
            sharing=parse_policy_arg(cfg.policy),
            param=cfg.param,
            lora=LoraSettings(r=cfg.lora_r, alpha=cfg.lora_alpha),
            device=self.device,
            need_reference=need_ref,
            precision=cfg.precision,
            grad_checkpointing=cfg.grad_checkpointing,
            devices=cfg.policy_devices,
        )
        if cfg.fsdp:
            for pol in self._models():
                distributed.shard(pol)
        if cfg.generation_backend != "transformers":
            from flowzoo.agents.backends import attach

            for name in self.router.names:
                attach(
                    self.router.policies[name],
                    cfg.generation_backend,
                    memory=cfg.vllm_memory,
                    seed=cfg.seed,
                )
        self.heads: dict[str, ValueHead] = {}
        if cfg.algo == "ppo":
            for name in self.router.names:
                hs = self.router.policies[name].model.config.hidden_size
                self.heads[name] = ValueHead(hs).to(self.router.policies[name].device)
        self.opts = {
            name: torch.optim.AdamW(
                self._params(name),
                lr=cfg.lr,
                weight_decay=cfg.weight_decay,
            )
            for name in self.router.names
        }
        self.damper = (
            CoherenceDamper(cfg.damper_lambda, cfg.damper_decay) if cfg.damper_lambda > 0 else None
        )
        self.out = Path(cfg.out_dir)
        self.step = 0
        self.envs = [
            self.env_factory("train", cfg.train_tasks)
            for _ in range(cfg.problems_per_step * cfg.group_size)
        ]
        self.eval_curve: list[tuple[int, float]] = []
        #: per policy, the micro-batch size in use (shrinks when the device runs out of memory)
        self.micro_batch: dict[str, int] = {}

    def _models(self, reference: bool = True) -> list[torch.nn.Module]:
        """Every model this trainer holds (policies, then the reference), once each."""
        ms = [self.router.policies[n].model for n in self.router.names]
        if reference and self.router.reference is not None:
            ms.append(self.router.reference.model)
        return list({id(m): m for m in ms}.values())

    def _gathered(self):
        """FSDP: the policies' full parameters for a block of generation (a collective; the
        reference only scores in the update, so it stays sharded); else nothing."""
        if not self.cfg.fsdp:
            return contextlib.nullcontext()
        return distributed.gathered(self._models(reference=False))

    def _params(self, name: str) -> list[torch.nn.Parameter]:
        """What policy ``name``'s optimizer steps: its trainable weights and its value head."""
        head = self.heads.get(name)
        return self.router.trainable(name) + (list(head.parameters()) if head is not None else [])

    # ------------------------------------------------------------------ persistence
    @property
    def ckpt_path(self) -> Path:
        """FSDP: one file per process (its shards); else one file, written by process 0."""
        name = f"state.rank{self.dist.rank}.pt" if self.cfg.fsdp else "state.pt"
        return self.out / "checkpoint" / name

    def save_checkpoint(self) -> None:
        """Every policy (or adapter), optimizers, value heads, damper EMA, step — atomically."""
        if not (self.cfg.fsdp or self.dist.main):
            return
        state = {
            "identity": self.cfg.identity(),
            "world": self.dist.world,
            "step": self.step,
            "router": self.router.state_dict(),
            "opts": {n: o.state_dict() for n, o in self.opts.items()},
            "heads": {n: h.state_dict() for n, h in self.heads.items()},
            "damper": self.damper.state_dict() if self.damper else None,
            "eval_curve": self.eval_curve,
            "torch_rng": torch.get_rng_state(),
        }
        self.ckpt_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.ckpt_path.with_suffix(".tmp")
        torch.save(state, tmp)
        os.replace(tmp, self.ckpt_path)

    def load_checkpoint(self) -> bool:
        found = self.ckpt_path.exists()
        if self.cfg.fsdp:  # every process resumes, or none does
            n = int(distributed.sum_floats([float(found)], self.dist)[0])
            if 0 < n < self.dist.world:
                raise ValueError(
                    f"{self.ckpt_path.parent} holds shards for {n} of {self.dist.world} "
                    "processes; resume with the world size that wrote it, or resume=False"
                )
        if not found:
            return False
        state = torch.load(self.ckpt_path, weights_only=False)
        if state["identity"] != self.cfg.identity():
            raise ValueError(
                f"{self.ckpt_path} belongs to a different configuration; use another out_dir or resume=False"
            )
        if self.cfg.fsdp:
            if state.get("world") != self.dist.world:
                raise ValueError(
                    f"{self.ckpt_path} was written by {state.get('world')} FSDP processes, "
                    f"this run has {self.dist.world}; resume with the same number"
                )
            lo = -distributed.max_int(-state["step"], self.dist)
            hi = distributed.max_int(state["step"], self.dist)
            if lo != hi:
                raise ValueError(f"FSDP shards in {self.ckpt_path.parent} are of steps {lo}..{hi}")
        self.router.load_state_dict(state["router"])
        for pol in self.router.policies.values():
            pol.sync_backend()
        for n, o in self.opts.items():
            o.load_state_dict(state["opts"][n])
        for n, h in self.heads.items():
            h.load_state_dict(state["heads"][n])
        if self.damper and state["damper"]:
            self.damper.load_state_dict(state["damper"])
        self.step = state["step"]
        self.eval_curve = [tuple(x) for x in state["eval_curve"]]
        torch.set_rng_state(state["torch_rng"])
        return True

    # ------------------------------------------------------------------ one step
    def _rollout(self, step: int) -> list[EpisodeRecord]:
        cfg = self.cfg
        rng = np.random.default_rng([cfg.seed, step])
        picks = rng.choice(
            len(self.train_tasks),
            size=cfg.problems_per_step,
            replace=len(self.train_tasks) < cfg.problems_per_step,
        )
        task_ids = [self.train_tasks[int(i)].id for i in picks]
        opts, seeds, groups = [], [], []
        ks = distributed.mine(len(task_ids), self.dist)  # all of them in a single process
        task_ids = [task_ids[k] for k in ks]
        for k, tid in zip(ks, task_ids, strict=True):
            for g in range(cfg.group_size):
                opts.append({"task_id": tid})
                seeds.append(int(cfg.seed * 1_000_003 + step * 1009 + k * 31 + g))
                groups.append(tid)
        gen = torch.Generator(device=self.device).manual_seed(
            int(cfg.seed * 7_919 + step + 104_729 * self.dist.rank)
        )
        with self._gathered():
            return self._sample(task_ids, opts, seeds, groups, gen, step)

    def _sample(self, task_ids, opts, seeds, groups, gen, step) -> list[EpisodeRecord]:
        cfg = self.cfg
        if cfg.rollout == "tree":
            return tree_rollout(
                self.envs[: len(task_ids)],
                self.router.policy_for,
                [{"task_id": t} for t in task_ids],
                cfg.group_size,
                random.Random(f"tree:{cfg.seed}:{step}"),
                seeds=seeds[:: cfg.group_size],
                max_new_tokens=cfg.max_new_tokens,
                temperature=cfg.temperature,
                generator=gen,
            )
        return rollout(
            self.envs[: len(opts)],
            self.router.policy_for,
            opts,
            seeds,
            groups,
            cfg.max_new_tokens,
            cfg.temperature,
            gen,
        )

    def _turn_reward(self, t: TurnRecord) -> float:
        w = self.cfg.team_weight
        return w * t.team_reward + (1.0 - w) * t.role_reward

    def _grpo_advantages(self, records: list[EpisodeRecord]) -> tuple[dict[int, float], dict]:
        cfg = self.cfg
        turns = [t for r in records for t in r.turns]
        keys = [
            GroupKey.of(cfg.group_by, str(records[t.episode].group), t.role, t.agent, t.turn)
            for t in turns
        ]
        rewards = [self._turn_reward(t) for t in turns]
        adv, stats = advantages(keys, rewards, cfg.std_norm, cfg.adv_norm, [t.role for t in turns])
        return {id(t): a for t, a in zip(turns, adv, strict=True)}, dataclasses.asdict(stats)

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
        return float(self.cfg.kl_per_role.get(role, self.cfg.kl_coef))

    def _update_policy(
        self, name: str, turns: list[TurnRecord], adv: dict[int, Any], rng: random.Random
    ) -> dict:
        """Minibatched update of one policy; per-role gradients measured separately."""
        cfg = self.cfg
        pol = self.router.prepare_update(name)
        params = self._params(name)
        head = self.heads.get(name)
        stats: dict[str, Any] = {
            "roles": defaultdict(lambda: defaultdict(float)),
            "policy": defaultdict(float),
            "cosine": defaultdict(float),
        }
        order = list(range(len(turns)))
        n_updates = 0
        for _epoch in range(cfg.ppo_epochs):
            rng.shuffle(order)
            chunks = [order[i :: cfg.minibatches] for i in range(cfg.minibatches)]
            for chunk in chunks:
                batch = [turns[i] for i in chunk if turns[i].completion_ids]
                if distributed.sum_floats([len(batch)], self.dist)[0] == 0:
                    continue
                n_updates += 1
                self._one_update(name, pol, head, params, batch, adv, stats)
        out = {
            "roles": {
                r: {k: v / max(1, n_updates) for k, v in d.items()}
                for r, d in stats["roles"].items()
            }
        }
        out["policy"] = {k: v / max(1, n_updates) for k, v in stats["policy"].items()}
        out["cosine"] = {k: v / max(1, n_updates) for k, v in stats["cosine"].items()}
        return out

    def _micro_step(
        self, name, pol, head, params, role, mb, adv, wmap, total_tokens, total_seqs
    ) -> tuple[float, dict[str, float]]:
        """Loss of one micro-batch of one role, its gradient added to ``.grad``; (loss value,
        the micro-batch's mean kl and clip fraction)."""
        cfg = self.cfg
        beta = self._kl_for(role)
        p_ids = [t.prompt_ids for t in mb]
        c_ids = [t.completion_ids for t in mb]
        if head is not None:
            new_lp, new_v = logprobs_and_values(pol, head, p_ids, c_ids, cfg.temperature)
        else:
            new_lp, new_v = pol.logprobs(p_ids, c_ids, cfg.temperature), None
        ref_lp = (
            self.router.reference_logprobs(name, p_ids, c_ids, cfg.temperature)
            if beta > 0
            else None
        )
        local: dict[str, float] = defaultdict(float)
        tok_losses = []
        for j, t in enumerate(mb):
            old = torch.tensor(t.logprobs, dtype=torch.float32, device=new_lp[j].device)
            a = adv[id(t)]
            a_t = a["adv"] if isinstance(a, dict) else torch.full_like(old, float(a))
            pl, clipped = clipped_token_loss(new_lp[j], old, a_t, cfg.clip_low, cfg.clip_high)
            if ref_lp is not None:
                kl = k3_kl(new_lp[j], ref_lp[j])
                pl = pl + beta * kl
                local["kl"] += kl.mean().item() / len(mb)
            if new_v is not None:
                pl = pl + cfg.vf_coef * value_loss(new_v[j], a["old_v"], a["ret"], cfg.value_clip)
            tok_losses.append(pl)
            local["clip_frac"] += float(clipped.mean()) / len(mb)
        loss = aggregate(
            tok_losses, [wmap[id(t)] for t in mb], cfg.loss_agg, total_tokens, total_seqs
        )
        loss_value = loss.item()
        if not _finite(loss_value):
            raise TrainingDiverged(
                f"loss of role {role!r} (policy {name!r}) is {loss_value} at step {self.step}"
            )
        if cfg.fsdp:  # FSDP reduce-scatters from backward hooks, which autograd.grad skips
            loss.backward()
        elif loss.requires_grad:
            _accumulate(loss, params)
        return loss_value, dict(local)

    def _idle_pass(self, name: str, pol, role: str) -> None:
        """FSDP: a process out of micro-batches joins the others' gathers and reduce-scatters
        with a one-token pass whose loss is zero (it adds nothing to the gradient)."""
        tok = pol.eos_id if pol.eos_id is not None else 0
        p_ids, c_ids = [[tok]], [[tok]]
        lp = pol.logprobs(p_ids, c_ids, self.cfg.temperature)
        if self._kl_for(role) > 0:
            self.router.reference_logprobs(name, p_ids, c_ids, self.cfg.temperature)
        (lp[0].sum() * 0.0).backward()

    def _one_update(self, name, pol, head, params, batch: list[TurnRecord], adv, stats) -> None:
        cfg = self.cfg
        dist = self.dist
        opt = self.opts[name]
        opt.zero_grad(set_to_none=True)
        weights = self._weights(batch)
        wmap = {id(t): w for t, w in zip(batch, weights, strict=True)}
        # loss normalisers over the whole batch (every process's share under data parallel)
        total_tokens, total_seqs = distributed.sum_floats(
            [sum(len(t.completion_ids) for t in batch), float(len(batch))], dist
        )
        by_role: dict[str, list[TurnRecord]] = defaultdict(list)
        for t in batch:
            by_role[t.role].append(t)
        # a fixed role order with global counts, so every process makes the same collectives
        roles = [r for r in self.roles if r in self.router.roles_of(name)]
        n_role = distributed.sum_floats([len(by_role.get(r, [])) for r in roles], dist)
        roles = [r for r, n in zip(roles, n_role, strict=True) if n > 0]
        role_grads: dict[str, torch.Tensor] = {}
        sums: dict[str, dict[str, float]] = {}
        prev = flat_grad(params)
        for role in roles:
            # similar lengths share a micro-batch: less padding computed, the same summed gradient
            rturns = sorted(
                by_role.get(role, []), key=lambda t: len(t.prompt_ids) + len(t.completion_ids)
            )
            acc: dict[str, float] = defaultdict(float)
            size = self.micro_batch.get(name, cfg.micro_batch)
            # FSDP: every process makes the same number of sharded passes, agreed beforehand
            passes = -(-len(rturns) // size)
            idle = distributed.max_int(passes, dist) - passes if cfg.fsdp else 0
            i = 0
            while i < len(rturns):
                mb = rturns[i : i + size]
                try:
                    loss_value, local = self._micro_step(
                        name, pol, head, params, role, mb, adv, wmap, total_tokens, total_seqs
                    )
                except torch.OutOfMemoryError:
                    # nothing of this micro-batch reached .grad (see _accumulate): halve, retry
                    if size == 1 or cfg.fsdp:  # FSDP: the others are mid-collective; no retry
                        raise
                    size = max(1, size // 2)
                    self.micro_batch[name] = size
                    if pol.device.type == "cuda":
                        torch.cuda.empty_cache()
                    continue
                for k, v in local.items():
                    acc[k] += v * len(mb)
                acc["loss"] += loss_value
                i += len(mb)
            for _ in range(idle):
                self._idle_pass(name, pol, role)
            acc["tokens"] += sum(len(t.completion_ids) for t in rturns)
            acc["turns"] += len(rturns)
            sums[role] = acc
            cur = flat_grad(params)
            # FSDP: each process holds its shard of the summed gradient already
            role_grads[role] = cur - prev if cfg.fsdp else distributed.sum_(cur - prev, dist)
            prev = cur
        for role in roles:  # global sums; clip_frac and kl become means over the role's turns
            keys = ["loss", "tokens", "turns", "clip_frac"]
            keys += ["kl"] if self._kl_for(role) > 0 else []
            got = distributed.sum_floats([sums[role].get(k, 0.0) for k in keys], dist)
            g = dict(zip(keys, got, strict=True))
            rs = stats["roles"][role]
            for k, v in g.items():
                rs[k] += v / g["turns"] if k in ("clip_frac", "kl") else v
        total = sum(role_grads.values()) if role_grads else prev
        if dist.active and not cfg.fsdp:
            _write_flat_grad(params, total)
        self.last_role_grads[name] = {"roles": role_grads, "total": total.clone()}
        reduce = None
        if cfg.fsdp:  # norms and cosines of sharded gradients: sum the Gram matrix

            def reduce(g: torch.Tensor) -> torch.Tensor:
                return torch.tensor(distributed.sum_floats(g.flatten().tolist(), dist)).view_as(g)

        rg = role_gradient_stats(role_grads, reduce)
        sq = dot(total, total)
        total_norm = math.sqrt(distributed.sum_floats([sq], dist)[0] if cfg.fsdp else sq)
        if not math.isfinite(total_norm):  # the same verdict on every process
            raise TrainingDiverged(f"non-finite gradient for policy {name!r} at step {self.step}")
        if self.damper is not None:
            total = torch.zeros_like(total)
            for role, g in role_grads.items():
                f = self.damper.factor(f"{name}/{role}", g)
                stats["roles"][role]["damper_factor"] += f
                total += f * g
            _write_flat_grad(params, total)
            total_norm = math.sqrt(dot(total, total))  # the damped gradient the step applies
        for role in role_grads:
            stats["roles"][role]["grad_norm"] += rg["norm"][role]
        for pair, c in rg["cosine"].items():
            stats["cosine"][pair] += c
        stats["policy"]["grad_norm"] += total_norm
        stats["policy"]["grad_norm_sum_of_roles"] += sum(rg["norm"].values())
        if cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
        opt.step()

    def train_step(self) -> dict:
        """One rollout + update; returns the metrics line (also written to metrics.jsonl)."""
        step = self.step
        t0 = time.time()
        records = self._rollout(step)
        t_roll = time.time() - t0
        per_policy, adv_stats = self.update(records)
        turns = [t for r in records for t in r.turns]
        metrics = self._metrics(step, records, turns, per_policy, adv_stats)
        metrics["time"] = {"rollout_s": round(t_roll, 3), "step_s": round(time.time() - t0, 3)}
        self.step += 1
        return metrics

    def update(self, records: list[EpisodeRecord]) -> tuple[dict, dict]:
        """Advantages, then one update of every policy that played in ``records`` (a policy
        with no turns is left exactly as it was)."""
        cfg = self.cfg
        turns = [t for r in records for t in r.turns]
        rewards = [self._turn_reward(t) for t in turns]
        if not all(_finite(x) for x in rewards):
            raise TrainingDiverged(f"non-finite reward at step {self.step}")
        if cfg.algo == "grpo":
            adv, adv_stats = self._grpo_advantages(records)
        else:
            adv, adv_stats = self._ppo_advantages(records)
        rng = random.Random(f"{cfg.seed}:{self.step}")
        per_policy = {}
        self.last_role_grads = {}
        for name in self.router.names:
            mine = [t for t in turns if t.policy == name]
            if distributed.sum_floats([len(mine)], self.dist)[0] > 0:
                per_policy[name] = self._update_policy(name, mine, adv, rng)
                self.router.policies[name].sync_backend()  # the next rollout sees the update
        return per_policy, adv_stats

    def _ppo_advantages(self, records: list[EpisodeRecord]) -> tuple[dict[int, dict], dict]:
        cfg = self.cfg
        out: dict[int, dict] = {}
        for name in self.router.names:
            pol = self.router.prepare_update(name)
            head = self.heads[name]
            trajs: dict[tuple[int, str], list[TurnRecord]] = defaultdict(list)
            for r in records:
                for t in r.turns:
                    if t.policy == name:
                        trajs[(r.index, t.agent)].append(t)
            flat = [t for ts in trajs.values() for t in ts if t.completion_ids]
            values: dict[int, torch.Tensor] = {}
            with torch.no_grad():
                for i in range(0, len(flat), cfg.micro_batch):
                    mb = flat[i : i + cfg.micro_batch]
                    _, vs = logprobs_and_values(
                        pol,
                        head,
                        [t.prompt_ids for t in mb],
                        [t.completion_ids for t in mb],
                        cfg.temperature,
                    )
                    for t, v in zip(mb, vs, strict=True):
                        values[id(t)] = v.detach().cpu()
            advs = []
            for ts in trajs.values():
                ts = [t for t in sorted(ts, key=lambda x: x.turn) if t.completion_ids]
                if not ts:
                    continue
                a, ret = gae(
                    [values[id(t)] for t in ts],
                    self._turn_reward(ts[-1]),
                    cfg.gamma,
                    cfg.gae_lambda,
                )
                for t, ai, ri in zip(ts, a, ret, strict=True):
                    dev = pol.device
                    out[id(t)] = {
                        "adv": ai.to(dev),
                        "ret": ri.to(dev),
                        "old_v": values[id(t)].to(dev),
                    }
                    advs.append(ai)
            if advs:
                allv = torch.cat(advs)
                mu, sd = allv.mean(), allv.std(unbiased=False)
                for k in [id(t) for t in flat]:
                    if k in out:
                        out[k]["adv"] = (out[k]["adv"] - mu) / (sd + 1e-6)
        return out, {}

    def _metrics(self, step, records, turns, per_policy, adv_stats) -> dict:
        role_rows: dict[str, dict[str, float]] = {}
        by_role = defaultdict(list)
        for t in turns:
            by_role[t.role].append(t)
        norms = {}
        for role, ts in by_role.items():
            row = {
                "reward": float(np.mean([self._turn_reward(t) for t in ts])),
                "role_signal": float(np.mean([t.role_reward for t in ts])),
                "resp_len": float(np.mean([len(t.completion_ids) for t in ts])),
                "entropy_est": float(np.mean([-np.mean(t.logprobs) for t in ts if t.logprobs]))
                if any(t.logprobs for t in ts)
                else 0.0,
                "truncated_frac": float(np.mean([not t.finished for t in ts])),
            }
            name = ts[0].policy
            upd = per_policy.get(name, {}).get("roles", {}).get(role, {})
            row.update({k: float(v) for k, v in upd.items()})
            role_rows[role] = row
            norms[role] = row.get("grad_norm", 0.0)
        tot = sum(norms.values())
        for role in role_rows:
            role_rows[role]["grad_share"] = norms[role] / tot if tot > 0 else 0.0
        parse, tamper = defaultdict(int), defaultdict(int)
        used = self.envs[: len(records)] if self.cfg.rollout == "independent" else []
        for env in used:  # this process's share of the step's episodes
            for t in env.episode.turns:
                if t.flags:
                    parse[t.role] += 1
                if "reward_tamper" in t.flags:
                    tamper[t.role] += 1
        return {
            "step": step,
            "reward": float(
                np.mean([r.rewards.get(r.turns[0].agent, 0.0) for r in records if r.turns])
            ),
            "train_acc": float(np.mean([r.correct for r in records])),
            "roles": role_rows,
            "cosine": {k: v for p in per_policy.values() for k, v in p.get("cosine", {}).items()},
            "policies": {n: p.get("policy", {}) for n, p in per_policy.items()},
            "adv": adv_stats,
            "flag_rate": {r: parse[r] / max(1, len(by_role[r])) for r in by_role},
            # programs caught writing to their judge's channel or faking an exit, per role
            "tamper_rate": {r: tamper[r] / max(1, len(by_role[r])) for r in by_role},
        }

    # ------------------------------------------------------------------ eval and loop
    def evaluate(self) -> dict:
        """Held-out accuracy; under torchrun every process plays its share of the problems
        and the counts are summed (under FSDP on gathered weights)."""
        cfg = self.cfg
        with self._gathered():
            res = evaluate_env(
                cfg.env,
                self.router.policy_for,
                n_episodes=cfg.eval_episodes,
                temperature=cfg.eval_temperature,
                max_new_tokens=cfg.max_new_tokens,
                env_options=cfg.env_options,
                seed=cfg.seed,
                shard=(self.dist.rank, self.dist.world),
                reduce=lambda xs: distributed.sum_floats(xs, self.dist),
            )
        return res.as_dict()

    def train(self) -> dict:
        """Run (or resume) to ``cfg.steps``; write config.json, metrics.jsonl, summary.json.
        Under torchrun every process runs this loop (and evaluates its share of the held-out
        problems); process 0 logs and writes."""
        from tqdm import tqdm

        cfg = self.cfg
        main = self.dist.main
        metrics_path = self.out / "metrics.jsonl"
        if main:
            self.out.mkdir(parents=True, exist_ok=True)
            (self.out / "config.json").write_text(
                json.dumps(dataclasses.asdict(cfg), indent=1, default=str)
            )
        resumed = cfg.resume and self.load_checkpoint()
        if main and resumed:
            _truncate_metrics(metrics_path, self.step)
        elif main and metrics_path.exists():
            metrics_path.unlink()
        t_start = time.time()
        status = "completed"
        tb = _tensorboard(self.out) if main else None
        bar = tqdm(
            total=cfg.steps,
            initial=self.step,
            desc=f"train {cfg.env} {cfg.policy}/{cfg.param}",
            disable=not self.progress,
            file=sys.stderr,
        )
        try:
            if self.step == 0 and not self.eval_curve and cfg.eval_every > 0:
                base = self.evaluate()
                self.eval_curve.append((0, base["accuracy"]))
                if main:
                    _append(metrics_path, {"step": -1, "eval": base})
            while self.step < cfg.steps:
                m = self.train_step()
                if cfg.eval_every > 0 and (
                    self.step % cfg.eval_every == 0 or self.step == cfg.steps
                ):
                    m["eval"] = self.evaluate()
                    self.eval_curve.append((self.step, m["eval"]["accuracy"]))
                if main:
                    _append(metrics_path, m)
                    _log_scalars(tb, m)
                if cfg.save_every > 0 and (
                    self.step % cfg.save_every == 0 or self.step == cfg.steps
                ):
                    self.save_checkpoint()
                post = {"reward": f"{m['reward']:.2f}", "acc": f"{m['train_acc']:.2f}"}
                if self.eval_curve:
                    post["eval"] = f"{self.eval_curve[-1][1]:.2f}"
                bar.set_postfix(post)
                bar.update(1)
        except KeyboardInterrupt:
            status = "interrupted"
            # FSDP: the processes stopped at different points; the last periodic shards stand
            if not cfg.fsdp:
                self.save_checkpoint()
            raise
        except TrainingDiverged as e:
            status = f"diverged: {e}"
            raise
        finally:
            bar.close()
            if tb is not None:
                tb.close()
            wall = time.time() - t_start
            summary = (
                self.summary(status, wall, resumed)
                if main
                else {
                    "status": status,
                    "steps_done": self.step,
                    "rank": self.dist.rank,
                    "resumed": resumed,
                    "wall_s": round(wall, 2),
                }
            )
            if main:
                (self.out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
            if status == "completed" and (main or cfg.fsdp):
                self.router.save_pretrained(self.out / "final", sharded=cfg.fsdp, write=main)
        return summary

    def summary(self, status: str, wall_s: float, resumed: bool) -> dict:
        cfg = self.cfg
        out: dict[str, Any] = {
            "status": status,
            "steps_done": self.step,
            "wall_s": round(wall_s, 2),
            "resumed": resumed,
            "env": cfg.env,
            "policy": cfg.policy,
            "param": cfg.param,
            "algo": cfg.algo,
            "model": cfg.model,
        }
        if self.eval_curve:
            steps, acc = zip(*self.eval_curve, strict=True)
            out["curve"] = analyze_curve(
                list(steps), list(acc), cfg.cliff_window, cfg.cliff_margin
            ).as_dict()
            out["eval_curve"] = self.eval_curve
        mp = self.out / "metrics.jsonl"
        rows = (
            [json.loads(x) for x in mp.read_text().splitlines() if x.strip()] if mp.exists() else []
        )
        out["mean_grad_share"] = mean_grad_share(rows)
        return out


def _accumulate(loss: torch.Tensor, params: list[torch.nn.Parameter]) -> None:
    """Add d(loss)/d(params) to ``.grad``. Why not ``backward()``: if the device runs out of
    memory half-way, backward leaves some gradients accumulated and others not; here nothing
    is written until the whole gradient exists, so the micro-batch can be retried smaller."""
    live = [p for p in params if p.requires_grad]
    grads = torch.autograd.grad(loss, live, allow_unused=True)
    for p, g in zip(live, grads, strict=True):
        if g is None:
            continue
        if p.grad is None:
            p.grad = g
        else:
            p.grad.add_(g)


def _write_flat_grad(params, flat: torch.Tensor) -> None:
    i = 0
    for p in params:
        n = p.numel()
        p.grad = flat[i : i + n].view_as(p).to(p.dtype).clone()
        i += n


def _tensorboard(out: Path):
    """A SummaryWriter when TensorBoard is installed, else None (metrics.jsonl always)."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return None
    return SummaryWriter(log_dir=str(out / "tensorboard"))


def _log_scalars(writer, row: dict) -> None:
    """Every numeric leaf of a metrics line, named by its path (roles/solver/grad_share)."""
    if writer is None:
        return
    step = int(row.get("step", 0)) + 1

    def walk(prefix: str, v) -> None:
        if isinstance(v, dict):
            for k, x in v.items():
                walk(f"{prefix}/{k}" if prefix else str(k), x)
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            writer.add_scalar(prefix, v, step)

    walk("", {k: v for k, v in row.items() if k != "step"})


def _append(path: Path, row: dict) -> None:
    with path.open("a") as f:
        f.write(json.dumps(row, default=float) + "\n")


def _truncate_metrics(path: Path, step: int) -> None:
    """Keep the metrics lines of steps before ``step`` (a resume rewrites the rest)."""
    if not path.exists():
        return
    keep = [
        ln for ln in path.read_text().splitlines() if ln.strip() and json.loads(ln)["step"] < step
    ]
    path.write_text("".join(ln + "\n" for ln in keep))
