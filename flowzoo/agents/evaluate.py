"""Held-out evaluation of policies on workflow envs: accuracy and per-role parse failures."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from flowzoo.agents.policy import Policy
from flowzoo.agents.rollout import rollout


@dataclass
class EvalResult:
    env_id: str
    episodes: int
    accuracy: float
    #: role -> fraction of that role's turns with a parse failure
    parse_fail: dict[str, float] = field(default_factory=dict)
    #: role -> fraction of that role's turns whose answer could not be extracted (solving roles)
    no_answer: dict[str, float] = field(default_factory=dict)
    extra: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {
            "env": self.env_id,
            "episodes": self.episodes,
            "accuracy": self.accuracy,
            "parse_fail": self.parse_fail,
            "no_answer": self.no_answer,
            **self.extra,
        }


EXTRA_KEYS = ("majority_correct", "any_correct", "first_draft_correct")


def evaluate_env(
    env_id: str,
    policy_for: Callable[[str], tuple[str, Policy]],
    n_episodes: int = 100,
    batch: int = 32,
    temperature: float = 0.0,
    max_new_tokens: int = 96,
    split: str = "test",
    seed: int = 0,
    env_options: dict | None = None,
    shard: tuple[int, int] = (0, 1),
    reduce: Callable[[list[float]], list[float]] | None = None,
) -> EvalResult:
    """Play ``n_episodes`` distinct test problems (greedy by default) and score them.

    ``shard=(rank, world)`` plays every world-th problem and ``reduce`` sums the counts over
    the processes (data-parallel training evaluates on every process); episode ``j`` always
    has seed ``seed + j``, so the result does not depend on how the problems are dealt out."""
    from flowzoo.envs import make_env

    rank, world = shard
    opts = {"split": split, **(env_options or {})}
    probe = make_env(env_id, **opts)
    tasks, roles, fam = probe.tasks, list(probe.roles), probe.family
    n_episodes = min(n_episodes, len(tasks))
    mine = list(range(rank, n_episodes, world))
    envs = [probe] + [make_env(env_id, **opts) for _ in range(min(batch, len(mine)) - 1)]
    # counts: correct, then per role (turns, parse failures, answer turns, no answer), then
    # per extra key (sum, episodes that report it) - a fixed layout every process shares
    correct = 0.0
    per_role = {r: [0.0, 0.0, 0.0, 0.0] for r in roles}
    extra = {k: [0.0, 0.0] for k in EXTRA_KEYS}
    solving, parse_flags = probe.workflow.solving_roles, probe.workflow.parse_flags
    for start in range(0, len(mine), len(envs)):
        js = mine[start : start + len(envs)]
        recs = rollout(
            envs[: len(js)],
            policy_for,
            reset_options=[{"task_id": tasks[j].id} for j in js],
            seeds=[seed + j for j in js],
            max_new_tokens=max_new_tokens,
            temperature=temperature,
        )
        for env, rec in zip(envs, recs, strict=False):
            correct += rec.correct
            for k in EXTRA_KEYS:
                if k in rec.info:
                    extra[k][0] += float(rec.info[k])
                    extra[k][1] += 1
            for t in env.turn_log():
                row = per_role[t.role]
                row[0] += 1
                row[1] += bool(parse_flags & set(t.flags))
                if t.role in solving:
                    row[2] += 1
                    row[3] += fam.extract(t.action) is None
    flat = [
        correct,
        *(x for r in roles for x in per_role[r]),
        *(x for k in extra.values() for x in k),
    ]
    if reduce is not None:
        flat = list(reduce(flat))
    correct, flat = flat[0], flat[1:]
    per_role = {r: flat[4 * i : 4 * i + 4] for i, r in enumerate(roles)}
    flat = flat[4 * len(roles) :]
    extra = {k: flat[2 * i : 2 * i + 2] for i, k in enumerate(EXTRA_KEYS)}
    n = n_episodes
    return EvalResult(
        env_id,
        n,
        correct / n,
        {r: c[1] / c[0] for r, c in per_role.items() if c[0] > 0},
        {r: c[3] / c[2] for r, c in per_role.items() if c[2] > 0},
        {k: v[0] / n for k, v in extra.items() if v[1] > 0},
    )


def single_policy(policy: Policy, name: str = "shared") -> Callable[[str], tuple[str, Policy]]:
    """Route every role to one policy."""
    return lambda role: (name, policy)


def run_policies(run_dir: str | Path, device: str = "cpu") -> tuple[str, dict, Callable]:
    """A training run's trained policies, routed as in training: (env id, env options,
    ``policy_for``). Full fine-tuning loads ``final/<policy>``; LoRA loads the base model
    once and each policy's adapter from ``final/adapters``."""
    from flowzoo.agents.config import TrainConfig
    from flowzoo.agents.policy import Policy
    from flowzoo.agents.routing import AdapterPolicy, parse_policy_arg, role_map
    from flowzoo.agents.tiny import resolve_model
    from flowzoo.envs import make_env

    run = Path(run_dir)
    cfg_path, final = run / "config.json", run / "final"
    if not cfg_path.exists():
        raise FileNotFoundError(f"{run} is not a run directory (no config.json)")
    cfg = TrainConfig.from_dict(json.loads(cfg_path.read_text()), source=str(cfg_path))
    if not final.exists():
        status = "unknown"
        if (run / "summary.json").exists():
            status = json.loads((run / "summary.json").read_text()).get("status", status)
        raise FileNotFoundError(f"{run} has no final weights (the run's status: {status})")
    roles = list(make_env(cfg.env, **cfg.env_options).roles)
    mapping = role_map(roles, parse_policy_arg(cfg.policy))
    names = list(dict.fromkeys(mapping.values()))
    if cfg.param == "full":
        pols = {n: Policy(final / n, device=device) for n in names}
    else:
        from peft import PeftModel

        base = Policy(resolve_model(cfg.model), device=device)
        ad = final / "adapters"
        where = {n: ad / n if (ad / n).exists() else ad for n in names}
        model = PeftModel.from_pretrained(base.model, where[names[0]], adapter_name=names[0])
        for n in names[1:]:
            model.load_adapter(where[n], adapter_name=n)
        base.model = model.to(base.device)
        pols = {n: AdapterPolicy(base, n) for n in names}
    return cfg.env, dict(cfg.env_options), lambda role: (mapping[role], pols[mapping[role]])
