"""PolicyRouter: role -> policy, for the two orthogonal choices the study compares.

**Sharing**: ``shared`` (every role updates one policy), ``isolated`` (one policy per *role*;
parallel same-role agents such as ``solver_0..2`` share their role's policy), or a user map
``{"solver": "a", "aggregator": "b"}``. **Parameterisation**: ``full`` (full fine-tuning; an
isolated policy is a full copy) or ``lora`` (one frozen base, one PEFT LoRA adapter per
policy; the reference policy is the base with adapters off). Each policy has its own
optimizer state.

**Per-role players** (:func:`plan_roles`): ``role_models`` gives a role its own local base
checkpoint (it then gets its own trainable policy, named after the role: full weights only)
or a fixed player (a served model, the scripted expert); ``frozen_roles`` are played by a
fixed copy of their model. Fixed players are routed like policies but are not in ``names``:
never updated, never in the gradient diagnostics, reported as frozen.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import torch

from flowzoo.agents.models.parameterisation import (
    AdapterPolicy,
    LoadSettings,
    LoraSettings,
    build_params,
    check_params,
)
from flowzoo.agents.models.policy import Policy
from flowzoo.agents.models.sharding import local
from flowzoo.config.sharing import SHARING, Sharing, refuse_unknown_roles


@dataclass
class Players:
    """Who plays a role besides a trained policy (:func:`plan_roles`)."""

    #: role -> its own local base checkpoint (a trainable policy of its own), or a fixed
    #: player spec (a served model, the scripted expert)
    role_models: dict[str, str] = field(default_factory=dict)
    #: roles played by a fixed copy of their model
    frozen_roles: tuple[str, ...] = ()
    #: endpoint options for served players (concurrency, timeout_s, retries, on_error)
    options: dict = field(default_factory=dict)
    #: role -> stop strings (a served player's turn may end at one)
    stops: dict[str, list[str]] = field(default_factory=dict)
    #: role -> the env's tools it may call (a served player is sent their OpenAI schema and
    #: its tool calls come back as the env's call text; docs/tools.md)
    tools: dict[str, tuple[str, ...]] = field(default_factory=dict)
    seed: int = 0


def plan_roles(
    roles: list[str],
    sharing: Sharing | str | dict[str, str],
    role_models: dict[str, str] | None = None,
    frozen_roles: list[str] | tuple[str, ...] = (),
) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """(role -> policy name, frozen policy name -> its player spec (``""``: the base model),
    trainable policy name -> its own model spec) for a sharing choice and per-role players."""
    from flowzoo.agents.models.players import is_local_spec

    role_models = dict(role_models or {})
    refuse_unknown_roles([*role_models, *frozen_roles], roles, "role_models/frozen_roles")
    mapping = Sharing.parse(sharing).role_map(roles)
    frozen: dict[str, str] = {}
    own: dict[str, str] = {}
    for role in roles:
        spec = role_models.get(role)
        if role in frozen_roles or (spec is not None and not is_local_spec(spec)):
            mapping[role] = f"frozen:{role}"
            frozen[mapping[role]] = spec or ""
        elif spec is not None:
            shared_with = [r for r, n in mapping.items() if n == role and r != role]
            if shared_with:
                raise ValueError(
                    f"role {role!r} has its own model but policy {role!r} also plays "
                    f"{shared_with}; rename that policy"
                )
            mapping[role] = role
            own[role] = spec
    if all(n in frozen for n in mapping.values()):
        raise ValueError(f"every role of {roles} is frozen: nothing would be trained")
    return mapping, frozen, own


class PolicyRouter:
    """Role -> policy: owns the trainable policies (through their parameterisation,
    :mod:`flowzoo.agents.models.parameterisation`), the fixed players and the reference policy."""

    def __init__(
        self,
        model_path: str | os.PathLike,
        roles: list[str],
        sharing: Sharing | str | dict[str, str] = "shared",
        param: str = "full",
        lora: LoraSettings | None = None,
        load: LoadSettings | None = None,
        players: Players | None = None,
        need_reference: bool = False,
    ) -> None:
        from flowzoo.tiny.build import resolve_model

        load, players = load or LoadSettings(), players or Players()
        self.model_path = str(model_path)
        self.roles = list(roles)
        self.map, frozen, own = plan_roles(
            self.roles, sharing, players.role_models, players.frozen_roles
        )
        check_params(param, own)
        #: frozen policy name -> its fixed player (a served model, a scripted expert, a model)
        self.frozen = _fixed_players(self.map, frozen, self.model_path, players)
        #: trainable policy name -> the checkpoint it starts from
        self.model_paths = {n: resolve_model(spec) for n, spec in own.items()}
        #: the trainable policies (frozen players are routed, never updated)
        self.names = [n for n in dict.fromkeys(self.map.values()) if n not in self.frozen]
        self.param = param
        self.lora = lora or LoraSettings()
        #: the parameterisation: what is trainable, the reference, how policies are saved
        self.params = build_params(
            param, self.names, self.model_path, self.model_paths, load, self.lora, need_reference
        )
        #: policy name -> its device
        self.devices = {n: str(load.devices.get(n, load.device)) for n in self.names}
        self.policies: dict[str, Policy] = self.params.policies

    # ------------------------------------------------------------------ routing
    def policy_for(self, role: str) -> tuple[str, Policy]:
        try:
            name = self.map[role]
        except KeyError:
            raise ValueError(f"no policy for role {role!r}; roles are {self.roles}") from None
        return name, self.policies[name] if name in self.policies else self.frozen[name]

    @property
    def frozen_roles(self) -> list[str]:
        """The roles played by a fixed player."""
        return [r for r in self.roles if self.map[r] in self.frozen]

    def roles_of(self, name: str) -> list[str]:
        return [r for r, n in self.map.items() if n == name]

    # ------------------------------------------------------------------ what updates touch
    def trainable(self, name: str) -> list[torch.nn.Parameter]:
        """The parameters an update of policy ``name`` may change."""
        return [p for _, p in self.params.named_trainable(name)]

    def named_trainable(self, name: str) -> list[tuple[str, torch.nn.Parameter]]:
        return self.params.named_trainable(name)

    def prepare_update(self, name: str) -> Policy:
        """Policy ``name`` ready to update: only its parameters require grad."""
        return self.params.prepare_update(name)

    def reference_logprobs(
        self, name: str, prompt_ids, completion_ids, temperature: float
    ) -> list[torch.Tensor]:
        """Log-probs under the reference policy (full: the frozen base; LoRA: adapters off),
        on policy ``name``'s device."""
        return self.params.reference_logprobs(name, prompt_ids, completion_ids, temperature)

    @property
    def reference(self) -> Policy | None:
        """The full-weight reference policy (None under LoRA or without a KL anchor)."""
        return getattr(self.params, "reference", None)

    # ------------------------------------------------------------------ persistence
    def state_dict(self) -> dict[str, dict[str, torch.Tensor]]:
        """Every trainable tensor, per policy (full weights, or that policy's adapter; a
        sharded (FSDP) policy gives this process's shards)."""
        return {
            n: {k: local(p.detach()).clone() for k, p in self.named_trainable(n)}
            for n in self.names
        }

    def load_state_dict(self, state: dict[str, dict[str, torch.Tensor]]) -> None:
        for name, tensors in state.items():
            params = dict(self.named_trainable(name))
            missing = set(params) - set(tensors)
            if missing:
                raise ValueError(f"checkpoint for policy {name!r} lacks {len(missing)} tensors")
            with torch.no_grad():
                for k, v in tensors.items():
                    local(params[k]).copy_(v)

    def save_pretrained(
        self, out_dir: str | os.PathLike, sharded: bool = False, write: bool = True
    ) -> None:
        """Each policy as a loadable checkpoint (full) or PEFT adapter dir (lora). ``sharded``
        (FSDP): every process calls this, the full weights are gathered and ``write`` (process
        0) saves them."""
        self.params.save_pretrained(Path(out_dir), sharded, write)


def _fixed_players(
    mapping: dict[str, str], frozen: dict[str, str], base: str, players: Players
) -> dict[str, object]:
    """Frozen policy name -> its player; one player per (spec, stop strings)."""
    from flowzoo.agents.models.endpoint import is_endpoint_spec
    from flowzoo.agents.models.players import frozen_player

    for role in players.stops:
        if mapping[role] not in frozen or not is_endpoint_spec(frozen[mapping[role]]):
            raise ValueError(
                f"stop strings for role {role!r}: only a served model's turn can end at "
                "one (a trained policy's turn ends at EOS or max_new_tokens)"
            )
    made: dict[tuple, object] = {}
    out: dict[str, object] = {}
    for name, spec in frozen.items():
        spec = spec or base
        role = name.removeprefix("frozen:")
        key = (spec, tuple(players.stops.get(role, ())), tuple(players.tools.get(role, ())))
        if key not in made:  # endpoint options (stop, tools) reach served models only
            opts = {**players.options, "stop": list(key[1])}
            if key[2] and is_endpoint_spec(spec):
                opts["tools"] = list(key[2])
            made[key] = frozen_player(spec, seed=players.seed, **opts)
        out[name] = made[key]
    return out


__all__ = [
    "SHARING",
    "Sharing",
    "AdapterPolicy",
    "LoadSettings",
    "LoraSettings",
    "Players",
    "PolicyRouter",
    "plan_roles",
]
