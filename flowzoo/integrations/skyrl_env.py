"""flowzoo workflows as SkyRL-gym text environments (registered as ``flowzoo``).

SkyRL trains one conversation per environment: here the trained agent (an agent name, or a
role: then every agent of it) acts, the other agents are played host-side by partners
(``others``: role or agent -> player spec: a served model, ``scripted[:<error rate>]``, a
local checkpoint), and the reward is the trained agent's reward from the flowzoo env (its
verifier or judge), given on the step that ends the episode. Each observation is the role's
whole prompt at that turn, as a user message; ``metadata["flowzoo"]`` carries flowzoo's
``infos`` (role, correctness, parse flags).

A SkyRL dataset row (:func:`skyrl_rows` writes them) holds the first prompt, ``env_class:
"flowzoo"`` and a ``flowzoo`` field (env id, problem id, split, seed, options, the trained
agent or role, partners) that SkyRL hands to the env as ``extras``.
"""

from __future__ import annotations

import json
from typing import Any

from skyrl_gym import register
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
from skyrl_gym.envs.registration import registry

from flowzoo.envs.options import SANDBOX_CHOICE, row_env_options, user_sandbox_choice
from flowzoo.envs.registry import make_env
from flowzoo.envs.wrappers.single_agent import SingleAgentEnv

ENV_CLASS = "flowzoo"
#: upper bound on the trained agent's turns in one episode (the workflows end well before)
MAX_TURNS = 16


def _plain(info: dict) -> dict:
    """JSON-safe copy of an infos dict (SkyRL logs metadata)."""
    return {
        k: v for k, v in info.items() if isinstance(v, (str, int, float, bool, list, type(None)))
    }


class FlowzooTextEnv(BaseTextEnv):
    """One flowzoo episode from the trained agent's side (see the module doc)."""

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None) -> None:
        super().__init__()
        spec = dict((extras or {}).get("flowzoo") or {})
        for key in ("env", "task_id", "controlled"):
            if key not in spec:
                raise ValueError(f"extras['flowzoo'] lacks {key!r}; skyrl_rows() writes it")
        # the row's options may not choose the sandbox: only the user's env_config does
        where = f"SkyRL row {spec.get('task_id')!r} (extras['flowzoo']['options'])"
        row = row_env_options(_table(spec.get("options")), where)
        from flowzoo.tasks.code.family import check_row_limits  # no timeout past a row's caps

        check_row_limits(row, where)
        opts = {"split": spec.get("split", "train"), **row, **user_sandbox_choice(env_config)}
        env = make_env(spec["env"], **opts)
        others = _table(spec.get("others"))
        if others:  # keyed by role or agent: each gets its role's token budget
            budgets = env.turn_tokens()
            budgets |= {a: budgets[env.role_of(a)] for a in env.possible_agents}
            from flowzoo.agents.models.players import partners  # torch only when partners are used

            others = partners(others, budgets)
        self.view = SingleAgentEnv(env, spec["controlled"], others)
        self.row = spec
        self.max_turns = MAX_TURNS

    def init(self, prompt=None) -> tuple[list[dict[str, str]], dict[str, Any]]:
        """Reset to the row's problem; the trained agent's first prompt (partners that act
        before it have played)."""
        obs, info = self.view.reset(
            seed=int(self.row.get("seed", 0)), options={"task_id": self.row["task_id"]}
        )
        self.turns = 0
        return [{"role": "user", "content": obs["prompt"]}], {"flowzoo": _plain(info)}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        obs, reward, term, trunc, info = self.view.step(action if isinstance(action, str) else "")
        done = bool(term or trunc) or self.turns >= self.max_turns
        return BaseTextEnvStepOutput(
            observations=[] if done else [{"role": "user", "content": obs["prompt"]}],
            reward=float(reward),
            done=done,
            metadata={"flowzoo": _plain(info)},
            postprocessed_action=None,
        )


def _table(value: Any) -> dict:
    """A row's ``options``/``others``: JSON text (what :func:`skyrl_rows` writes, since an
    empty dict is a struct with no fields, which parquet cannot store) or a dict."""
    if value is None or value == "":
        return {}
    table = json.loads(value) if isinstance(value, str) else value
    if not isinstance(table, dict):
        raise ValueError(f"a flowzoo row's options/others must be a JSON object, got {value!r}")
    return table


def skyrl_rows(
    env_id: str,
    controlled: str,
    others: dict[str, str] | None = None,
    split: str = "train",
    n: int = 0,
    seed: int = 0,
    **options: Any,
) -> list[dict[str, Any]]:
    """SkyRL dataset rows (``prompt``, ``env_class``, ``flowzoo``) for ``n`` problems of a
    split (0: all); problem j's episode resets with ``seed + j``. Every field is a string,
    number or list, so the rows write to parquet as they are (SkyRL's dataset format).
    ``sandbox``/``sandbox_options`` are refused here: rows never choose the sandbox, SkyRL's
    ``env_config`` for the ``flowzoo`` env class does (read by :class:`FlowzooTextEnv`)."""
    given = sorted(k for k in options if k in SANDBOX_CHOICE)
    if given:
        raise ValueError(
            f"skyrl_rows: {given} would be written into every row, and rows may not choose the "
            "sandbox; set them in SkyRL's env_config for the flowzoo env class instead"
        )
    env = make_env(env_id, split=split, **options)
    tasks = env.tasks[:n] if n else env.tasks
    rows = []
    for j, t in enumerate(tasks):
        env.reset(seed=seed + j, options={"task_id": t.id})
        spec = {"env": env_id, "task_id": t.id, "split": split, "seed": seed + j,
                "options": json.dumps(options), "controlled": controlled,
                "others": json.dumps(dict(others or {}))}  # fmt: skip
        first = env.observe(env.agent_selection)["prompt"]
        rows.append({"prompt": [{"role": "user", "content": first}], "env_class": ENV_CLASS,
                     "flowzoo": spec})  # fmt: skip
    return rows


if ENV_CLASS not in registry:
    register(id=ENV_CLASS, entry_point="flowzoo.integrations.skyrl_env:FlowzooTextEnv")

__all__ = ["ENV_CLASS", "FlowzooTextEnv", "skyrl_rows"]
