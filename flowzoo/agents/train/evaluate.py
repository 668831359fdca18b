"""Held-out evaluation of policies on workflow envs: sampled accuracy with a bootstrap CI
over problems, per-problem counts (so two evaluations compare paired), per-role parse
failures and truncation, and the workflow's own decision readings (Voting's majority of the
sampled solvers beside its aggregator, Eval-Opt's evaluator accuracy)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import torch

from flowzoo.agents.models.policy import Policy
from flowzoo.agents.train.rollout import TokenLimit, rollout
from flowzoo.analysis.stats import bootstrap_ci


@dataclass
class EvalResult:
    env_id: str
    #: distinct problems played
    episodes: int
    #: mean correctness over every sampled episode (k per problem)
    accuracy: float
    #: role -> fraction of that role's turns with a parse failure
    parse_fail: dict[str, float] = field(default_factory=dict)
    #: role -> fraction of that role's turns whose answer could not be extracted (solving roles)
    no_answer: dict[str, float] = field(default_factory=dict)
    extra: dict[str, float] = field(default_factory=dict)
    #: samples per problem and the temperature they were drawn at
    samples: int = 1
    temperature: float = 0.0
    #: per problem, how many of its samples were correct (the unit of the bootstrap)
    per_problem: list[int] = field(default_factory=list)
    #: role -> fraction of that role's turns cut at its token budget
    truncated: dict[str, float] = field(default_factory=dict)
    #: wall seconds and generated tokens this evaluation cost (this process)
    cost: dict[str, float] = field(default_factory=dict)
    #: role -> share of its decidable turns showing the considered behaviour of the
    #: workflow's menu (worked steps, the considered pick, a check); docs/testbed.md
    behaviour: dict[str, float] = field(default_factory=dict)
    #: role -> how many of its turns decided a behaviour (the denominator of ``behaviour``:
    #: a coordinating role decides only on contested turns, so it can be small)
    behaviour_n: dict[str, int] = field(default_factory=dict)
    #: role -> [score summed over its considered turns, over its shortcut turns] (what
    #: :mod:`flowzoo.analysis.decompose` splits a gain with)
    behaviour_hits: dict[str, list[float]] = field(default_factory=dict)
    #: role -> how many of its turns had their prompt cut in its middle to fit the model's
    #: context (roles with none left out)
    prompts_cut: dict[str, int] = field(default_factory=dict)
    #: extra reading -> how many episodes it was defined for (the denominator of ``extra``:
    #: ``adopted_copied`` reads only final messages that adopt an answer); not in
    #: :meth:`as_dict`, so run records keep their shape
    extra_n: dict[str, int] = field(default_factory=dict)

    @property
    def ci(self) -> tuple[float, float]:
        """95% bootstrap interval of the accuracy, over problems."""
        _, lo, hi = bootstrap_ci([c / self.samples for c in self.per_problem])
        return lo, hi

    def as_dict(self) -> dict:
        d = {
            "env": self.env_id,
            "episodes": self.episodes,
            "samples": self.samples,
            "temperature": self.temperature,
            "accuracy": self.accuracy,
            "parse_fail": self.parse_fail,
            "no_answer": self.no_answer,
            "truncated": self.truncated,
            "cost": self.cost,
            "behaviour": self.behaviour,
            "behaviour_n": self.behaviour_n,
            "behaviour_hits": self.behaviour_hits,
            "prompts_cut": self.prompts_cut,
            **self.extra,
        }
        if self.per_problem:
            d["ci"] = list(self.ci)
            d["per_problem"] = self.per_problem
        return d


def evaluate_env(
    env_id: str,
    policy_for: Callable[[str], tuple[str, Policy]],
    n_episodes: int = 0,
    batch: int = 32,
    temperature: float = 0.0,
    max_new_tokens: TokenLimit = 0,
    split: str = "test",
    seed: int = 0,
    env_options: dict | None = None,
    shard: tuple[int, int] = (0, 1),
    reduce: Callable[[list[float]], list[float]] | None = None,
    samples: int = 1,
    progress: str = "",
    progress_file: IO[str] | None = None,
) -> EvalResult:
    """Play ``n_episodes`` distinct test problems (0: the whole split), ``samples`` times
    each at ``temperature`` (greedy: one), and score them; per problem the correct count.

    ``max_new_tokens=0`` uses each role's default budget. ``shard=(rank, world)`` plays every
    world-th episode and ``reduce`` sums the counts over the processes (data-parallel
    training evaluates on every process); episode (problem ``j``, sample ``s``) always has
    env seed ``seed + j + n * s``, and sampling draws from a stream seeded by ``seed`` and
    the process's rank, so an evaluation does not depend on what ran before it (base and
    final see the same noise), and a greedy one not on how episodes are dealt out either.
    ``progress``: a label for a progress bar over the episodes, advanced as each batch of
    episodes ends (none when empty), on ``progress_file`` (default stderr) through a
    :class:`~flowzoo.agents.runs.runlog.SafeStream`: a closed pipe never stops an evaluation.
    Opened under a training bar it sits below it, and is gone when the evaluation ends."""
    from flowzoo.envs import make_env

    t0 = time.time()
    rank, world = shard
    opts = {"split": split, **(env_options or {})}
    probe = make_env(env_id, **opts)
    tasks, roles, fam = probe.tasks, list(probe.roles), probe.family
    if temperature == 0:
        samples = 1
    n = min(n_episodes, len(tasks)) if n_episodes > 0 else len(tasks)
    limits = max_new_tokens or probe.turn_tokens()
    # a problem's samples side by side: one batch computes their shared prompts once
    episodes = [(j, s) for j in range(n) for s in range(samples)]
    mine = episodes[rank::world]
    envs = [probe] + [make_env(env_id, **opts) for _ in range(min(batch, len(mine)) - 1)]
    # counts: per problem correct, then per role (turns, parse failures, answer turns, no
    # answer, truncated, behaviour decided, behaviour considered, prompts cut to fit), then
    # per extra key (sum, episodes that report it) - a fixed layout every process shares;
    # then, per role, the turns of each behaviour that scored (the gain's decomposition)
    W = 10
    correct = [0.0] * n
    per_role = {r: [0.0] * W for r in roles}
    extra_keys = probe.workflow.readings.extras  # what the workflow declares it decides
    extra = {k: [0.0, 0.0] for k in extra_keys}
    solving, parse_flags = probe.workflow.solving_roles, probe.workflow.parse_flags
    tokens = 0
    bar = None
    if progress:
        from tqdm.auto import tqdm

        from flowzoo.agents.runs.runlog import SafeStream

        out = progress_file if isinstance(progress_file, SafeStream) else SafeStream(progress_file)
        bar = tqdm(total=len(mine), desc=progress, unit="ep", leave=False, file=out)
    for start in range(0, len(mine), len(envs)):
        chunk = mine[start : start + len(envs)]
        gen = torch.Generator().manual_seed(seed * 1_000_003 + start + 7919 * rank)
        recs = rollout(
            envs[: len(chunk)],
            policy_for,
            reset_options=[{"task_id": tasks[j].id} for j, _ in chunk],
            seeds=[seed + j + n * s for j, s in chunk],
            max_new_tokens=limits,
            temperature=temperature,
            generator=gen,
        )
        for env, rec, (j, _) in zip(envs, recs, chunk, strict=False):
            correct[j] += rec.correct
            for k in extra_keys:  # None: not defined for this episode (no answer to read)
                if rec.info.get(k) is not None:
                    extra[k][0] += float(rec.info[k])
                    extra[k][1] += 1
            for t in rec.turns:
                tokens += t.n_tokens  # a turn with tool calls: every generated segment
                per_role[t.role][4] += any(not s.finished for s in t.segments)
                per_role[t.role][7] += any(s.prompt_cut > 0 for s in t.segments)
            for view, b in zip(env.turn_log(), env.behaviour_log(), strict=True):
                row = per_role[view.role]
                row[0] += 1
                row[1] += bool(parse_flags & set(view.flags))
                if view.role in solving:
                    row[2] += 1
                    row[3] += fam.extract(view.action) is None
                if b is not None:
                    row[5] += 1
                    row[6] += b
                    # what the turn scored: its own verdict where the workflow gives one
                    # (a solver's answer), else the team's
                    hit = env.infos.get(view.agent, {}).get("role_reward", rec.correct)
                    row[8 if b else 9] += float(hit)
        if bar is not None:
            bar.update(len(chunk))
    if bar is not None:
        bar.close()
    flat = [
        *correct,
        *(x for r in roles for x in per_role[r]),
        *(x for k in extra.values() for x in k),
    ]
    if reduce is not None:
        flat = list(reduce(flat))
    correct, flat = flat[:n], flat[n:]
    per_role = {r: flat[W * i : W * i + W] for i, r in enumerate(roles)}
    flat = flat[W * len(roles) :]
    extra = {k: flat[2 * i : 2 * i + 2] for i, k in enumerate(extra_keys)}
    total = n * samples
    return EvalResult(
        env_id,
        n,
        sum(correct) / total,
        {r: c[1] / c[0] for r, c in per_role.items() if c[0] > 0},
        {r: c[3] / c[2] for r, c in per_role.items() if c[2] > 0},
        {k: v[0] / v[1] for k, v in extra.items() if v[1] > 0},
        samples=samples,
        temperature=temperature,
        per_problem=[int(round(c)) for c in correct],
        truncated={r: c[4] / c[0] for r, c in per_role.items() if c[0] > 0},
        cost={"wall_s": round(time.time() - t0, 2), "tokens": tokens, "episodes": len(mine)},
        behaviour={r: c[6] / c[5] for r, c in per_role.items() if c[5] > 0},
        behaviour_n={r: int(c[5]) for r, c in per_role.items() if c[5] > 0},
        behaviour_hits={r: [c[8], c[9]] for r, c in per_role.items() if c[5] > 0},
        prompts_cut={r: int(c[7]) for r, c in per_role.items() if c[7] > 0},
        extra_n={k: int(v[1]) for k, v in extra.items() if v[1] > 0},
    )


def single_policy(policy: Policy, name: str = "shared") -> Callable[[str], tuple[str, Policy]]:
    """Route every role to one policy."""
    return lambda role: (name, policy)


def run_policies(run_dir: str | Path, device: str = "cpu") -> tuple[str, dict, Callable]:
    """A training run's trained policies, routed as in training: (env id, env options,
    ``policy_for``). Full fine-tuning loads ``final/<policy>``; LoRA loads the base model
    once and each policy's adapter from ``final/adapters``."""
    from flowzoo.agents.models.parameterisation import AdapterPolicy
    from flowzoo.agents.models.players import frozen_player
    from flowzoo.agents.models.policy import Policy
    from flowzoo.agents.models.routing import plan_roles
    from flowzoo.config import TrainConfig
    from flowzoo.envs import make_env
    from flowzoo.tiny.build import resolve_model

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
    mapping, frozen, _ = plan_roles(roles, cfg.sharing, cfg.role_models, cfg.frozen)
    names = [n for n in dict.fromkeys(mapping.values()) if n not in frozen]
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
    for n, spec in frozen.items():  # the run's fixed players, as it played them
        pols[n] = frozen_player(spec or cfg.model, seed=cfg.seed)

    def policy_for(role: str) -> tuple[str, Any]:
        # a role of another env (flowzoo eval --env): the run's one trained policy, if one
        name = mapping.get(role) or (names[0] if len(names) == 1 else None)
        if name is None:
            raise ValueError(
                f"{run} has no policy for role {role!r} (it trained {sorted(mapping)}); play "
                "it with --role-model ROLE=SPEC"
            )
        return name, pols[name]

    return cfg.env, dict(cfg.env_options), policy_for


def is_run_dir(path: str | Path) -> bool:
    """A training run's directory (its config and a final or summary record)."""
    p = Path(path)
    return (p / "config.json").exists() and (
        (p / "final").exists() or (p / "summary.json").exists()
    )


def model_policies(
    model: str, role_models: dict[str, str] | None = None, **endpoint_options
) -> tuple[str | None, dict, Callable]:
    """What ``flowzoo eval --model`` plays: (the run's env id or None, env options,
    ``policy_for``). ``model``: a tiny scale, a local path, a run dir (routed as in its
    training) or an endpoint spec; ``role_models`` overrides single roles the same way."""
    from flowzoo.agents.models.players import frozen_player

    env_id: str | None = None
    env_options: dict[str, Any] = {}
    if is_run_dir(model):
        env_id, env_options, base_for = run_policies(model)
    else:
        base_for = single_policy(frozen_player(model, **endpoint_options), "model")
    players = {r: frozen_player(s, **endpoint_options) for r, s in (role_models or {}).items()}

    def policy_for(role: str):
        if role in players:
            return f"role:{role}", players[role]
        return base_for(role)

    return env_id, env_options, policy_for
