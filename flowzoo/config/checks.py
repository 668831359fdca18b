"""The rules of a training config that tie fields together (each field's own domain is
checked by :func:`flowzoo.config.fields.check_fields`): apart from the dataclass so that
``train.py`` holds what a config *is*, and this file what makes one invalid."""

from __future__ import annotations

import json
import warnings
from typing import Any

from flowzoo.config.sharing import refuse_unknown_roles
from flowzoo.envs.registry import env_agents, list_envs

#: the older per-role maps, folded into ``role_settings`` (which wins) when a config is made
DEPRECATED_ROLE_MAPS = {"kl_per_role": "kl_coef", "max_new_tokens_per_role": "max_new_tokens"}


def _envs_with(n: int, roles: bool) -> list[str]:
    """The registered envs with at least ``n`` roles (or agents) at their default options:
    what an estimator that needs them applies to (an error names them)."""
    out = []
    for e in list_envs():
        try:
            agents = env_agents(e)
        except (ValueError, TypeError):  # a registered env that needs options to be made
            continue
        if len(set(agents.values()) if roles else agents) >= n:
            out.append(e)
    return out


def check_estimator(cfg: Any) -> None:
    """A credit-assignment estimator that does not apply to this algorithm or workflow,
    refused before any model loads, naming what does apply: a centralised critic needs
    PPO's critic, other agents and whole episodes; Dr. MAS and the per-role baseline need
    two roles to tell apart (Dr. MAS: and its own normalisation)."""
    algo = cfg.algo
    if cfg.critic_input != "local" and algo != "ppo":
        raise ValueError(
            f"critic_input={cfg.critic_input!r} (MAPPO's centralised critic) is what a "
            f"critic reads, and algo={algo!r} has none: it applies to algo='ppo' only "
            f"(with algo={algo!r} leave critic_input='local')"
        )
    if algo == "dr-mas" and cfg.adv_norm != "group":
        raise ValueError(
            f"algo='dr-mas' divides by each agent's own std (its groups split by role), "
            f"so adv_norm={cfg.adv_norm!r} does not apply to it: give adv_norm='group' "
            "(std_norm=False centres only), or that adv_norm with algo='grpo'"
        )
    if cfg.critic_input == "central" and cfg.rollout == "tree":
        raise ValueError(
            "critic_input='central' shows the critic each episode's whole transcript, and "
            "rollout='tree' keeps only each sibling's branching turn: use "
            "rollout='independent' (or critic_input='local')"
        )
    per_role = algo in ("role-baseline", "dr-mas")
    if not (per_role or cfg.critic_input == "central"):
        return
    agents = env_agents(cfg.env, **cfg.env_options)
    roles = list(dict.fromkeys(agents.values()))
    if per_role and len(roles) < 2:
        raise ValueError(
            f"algo={algo!r} tells roles apart, and {cfg.env} has one role "
            f"({', '.join(roles)}): it applies to envs with two or more roles "
            f"({', '.join(_envs_with(2, roles=True))}); on {cfg.env} use "
            + ("algo='grpo' (the same numbers)" if algo == "dr-mas" else "algo='grpo' or 'rloo'")
        )
    if cfg.critic_input == "central" and len(agents) < 2:
        raise ValueError(
            f"critic_input='central' shows the critic the other agents' turns, and "
            f"{cfg.env} has one agent ({', '.join(agents)}): it applies to envs with two "
            f"or more agents ({', '.join(_envs_with(2, roles=False))}); on {cfg.env} use "
            "critic_input='local'"
        )


def check_policy(cfg: Any) -> None:
    """The sharing choice read once, when the config is made, against the env's roles: a
    YAML ``policy: no`` (a string under YAML 1.2) or a role map naming a role the env has
    not was taken as given and failed only once the models had loaded."""
    if not isinstance(cfg.policy, str):
        raise TypeError(
            f"policy must be a string (shared | isolated | role=name,...), got "
            f"{type(cfg.policy).__name__} {cfg.policy!r}"
        )
    roles = list(dict.fromkeys(env_agents(cfg.env, **cfg.env_options).values()))
    try:
        sharing = cfg.sharing
        refuse_unknown_roles(dict(sharing.names), roles, "policy map")
        sharing.role_map(roles)
    except ValueError as e:
        raise ValueError(f"policy={cfg.policy!r}: {e}") from None


def fold_role_maps(cfg: Any) -> None:
    """The deprecated per-role maps moved into ``role_settings`` (a role's own entry
    there wins) and emptied, so one mechanism holds every per-role value and a config
    written either way is the same config (same identity)."""
    for name, key in DEPRECATED_ROLE_MAPS.items():
        given = getattr(cfg, name)
        if not given:
            continue
        warnings.warn(
            f"{name} is deprecated; give role_settings instead, e.g. "
            f"{json.dumps({r: {key: v} for r, v in given.items()})} (folded in for now)",
            FutureWarning,
            stacklevel=5,  # the line that made the config
        )
        merged = {r: dict(d) for r, d in cfg.role_settings.items()}
        for role, v in given.items():
            merged.setdefault(role, {}).setdefault(key, v)
        cfg.role_settings = merged
        setattr(cfg, name, {})
