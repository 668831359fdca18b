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
from dataclasses import dataclass
from pathlib import Path

import torch

from flowzoo.models.policy import Policy
from flowzoo.models.sharding import full_state_dict, local

SHARING = ("shared", "isolated")
PARAMETERISATIONS = ("full", "lora")


@dataclass
class LoraSettings:
    """The study's set-up: rank 64, alpha 32, all linear layers."""

    r: int = 64
    alpha: int = 32
    dropout: float = 0.0
    target_modules: str | tuple[str, ...] = "all-linear"


def role_map(roles: list[str], sharing: str | dict[str, str]) -> dict[str, str]:
    """role -> policy name for a sharing choice (a dict must cover every role)."""
    if isinstance(sharing, dict):
        missing = [r for r in roles if r not in sharing]
        if missing:
            raise ValueError(f"policy map misses roles {missing}; roles are {roles}")
        return {r: str(sharing[r]) for r in roles}
    if sharing == "shared":
        return dict.fromkeys(roles, "shared")
    if sharing == "isolated":
        return {r: r for r in roles}
    raise ValueError(
        f"unknown policy sharing {sharing!r}; valid: {', '.join(SHARING)} or a role->name map"
    )


def parse_policy_arg(arg: str) -> str | dict[str, str]:
    """CLI form: ``shared`` | ``isolated`` | ``solver=a,aggregator=b``."""
    if "=" not in arg:
        return arg
    out = {}
    for part in arg.split(","):
        role, _, name = part.partition("=")
        if not role.strip() or not name.strip():
            raise ValueError(f"bad policy map entry {part!r}; expected role=name")
        out[role.strip()] = name.strip()
    return out


def plan_roles(
    roles: list[str],
    sharing: str | dict[str, str],
    role_models: dict[str, str] | None = None,
    frozen_roles: list[str] | tuple[str, ...] = (),
) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """(role -> policy name, frozen policy name -> its player spec (``""``: the base model),
    trainable policy name -> its own model spec) for a sharing choice and per-role players."""
    from flowzoo.models.players import is_local_spec

    role_models = dict(role_models or {})
    bad = sorted((set(role_models) | set(frozen_roles)) - set(roles))
    if bad:
        raise ValueError(f"role_models/frozen_roles name unknown roles {bad}; roles are {roles}")
    mapping = role_map(roles, sharing)
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


class AdapterPolicy(Policy):
    """A view of a shared PEFT model with one adapter active."""

    def __init__(self, base: Policy, adapter: str) -> None:
        self.__dict__.update(base.__dict__)
        self.adapter = adapter

    def activate(self) -> None:
        if self.model.active_adapter != self.adapter:
            self.model.set_adapter(self.adapter)

    def generate(self, *a, **kw):
        self.activate()
        return super().generate(*a, **kw)

    def logprobs(self, *a, **kw):
        self.activate()
        return super().logprobs(*a, **kw)


class PolicyRouter:
    """Owns the policies, their trainable parameters and the reference policy."""

    def __init__(
        self,
        model_path: str | os.PathLike,
        roles: list[str],
        sharing: str | dict[str, str] = "shared",
        param: str = "full",
        lora: LoraSettings | None = None,
        device: str = "cpu",
        need_reference: bool = False,
        precision: str = "fp32",
        grad_checkpointing: bool = False,
        fast: bool = True,
        devices: dict[str, str] | None = None,
        role_models: dict[str, str] | None = None,
        frozen_roles: list[str] | tuple[str, ...] = (),
        player_options: dict | None = None,
        seed: int = 0,
        role_stops: dict[str, list[str]] | None = None,
    ) -> None:
        from flowzoo.models.endpoint import is_endpoint_spec
        from flowzoo.models.players import frozen_player
        from flowzoo.models.tiny import resolve_model

        if param not in PARAMETERISATIONS:
            raise ValueError(
                f"unknown parameterisation {param!r}; valid: {', '.join(PARAMETERISATIONS)}"
            )
        self.model_path = str(model_path)
        self.roles = list(roles)
        self.map, frozen, own = plan_roles(self.roles, sharing, role_models, frozen_roles)
        if own and param == "lora":
            raise ValueError(
                f"roles {sorted(own)} have their own base checkpoints, but LoRA adapters share "
                "one base: use param='full', or freeze those roles"
            )
        #: frozen policy name -> its fixed player (a served model, a scripted expert, a model)
        self.frozen: dict[str, object] = {}
        players: dict[tuple, object] = {}
        stops = {r: list(s) for r, s in (role_stops or {}).items()}
        for role in stops:
            if self.map[role] not in frozen or not is_endpoint_spec(frozen[self.map[role]]):
                raise ValueError(
                    f"stop strings for role {role!r}: only a served model's turn can end at "
                    "one (a trained policy's turn ends at EOS or max_new_tokens)"
                )
        for name, spec in frozen.items():
            spec = spec or self.model_path
            role = name.removeprefix("frozen:")
            key = (spec, tuple(stops.get(role, ())))
            if key not in players:  # endpoint options (stop included) reach served models only
                opts = {**(player_options or {}), "stop": list(key[1])}
                players[key] = frozen_player(spec, seed=seed, **opts)
            self.frozen[name] = players[key]
        #: trainable policy name -> the checkpoint it starts from
        self.model_paths = {n: resolve_model(spec) for n, spec in own.items()}
        #: the trainable policies (frozen players are routed, never updated)
        self.names = [n for n in dict.fromkeys(self.map.values()) if n not in self.frozen]
        self.param = param
        self.device = device
        self.lora = lora or LoraSettings()
        #: policy name -> its device (isolated policies spread over GPUs); others on ``device``
        self.devices = {n: str((devices or {}).get(n, device)) for n in self.names}
        bad = sorted(set(devices or {}) - set(self.names))
        if bad:
            raise ValueError(f"devices name unknown policies {bad}; policies are {self.names}")
        if param == "lora" and len(set(self.devices.values())) > 1:
            raise ValueError(
                "LoRA adapters share one base model, so every policy sits on one device; "
                f"got {self.devices}"
            )
        #: every policy is loaded with these, on its own device (``self.devices``)
        self._policy_kw = {
            "precision": precision,
            "grad_checkpointing": grad_checkpointing,
            "fast": fast,
        }
        self.policies: dict[str, Policy] = {}
        self.reference: Policy | None = None
        self._own_refs: dict[str, Policy] = {}
        if param == "full":
            for name in self.names:
                self.policies[name] = Policy(
                    self.model_paths.get(name, self.model_path),
                    device=self.devices[name],
                    **self._policy_kw,
                )
            if need_reference:
                self.reference = Policy(
                    self.model_path, device=device, precision=precision, fast=fast
                )
                self.reference.model.requires_grad_(False)
                # a policy with its own base checkpoint is anchored to that base
                for path in sorted(set(self.model_paths.values())):
                    ref = Policy(path, device=device, precision=precision, fast=fast)
                    ref.model.requires_grad_(False)
                    self._own_refs[path] = ref
        else:
            self._build_lora()

    def _build_lora(self) -> None:
        from peft import LoraConfig, get_peft_model

        base = Policy(self.model_path, device=self.devices[self.names[0]], **self._policy_kw)
        cfg = LoraConfig(
            r=self.lora.r,
            lora_alpha=self.lora.alpha,
            lora_dropout=self.lora.dropout,
            target_modules=self.lora.target_modules
            if isinstance(self.lora.target_modules, str)
            else list(self.lora.target_modules),
            init_lora_weights=True,
        )
        peft_model = get_peft_model(base.model, cfg, adapter_name=self.names[0])
        for name in self.names[1:]:
            peft_model.add_adapter(name, cfg)
        base.model = peft_model
        for name in self.names:
            self.policies[name] = AdapterPolicy(base, name)
        self._peft = peft_model

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

    def trainable(self, name: str) -> list[torch.nn.Parameter]:
        """The parameters an update of policy ``name`` may change."""
        if self.param == "full":
            return [p for p in self.policies[name].model.parameters()]
        return [p for n, p in self._peft.named_parameters() if f".{name}." in n and "lora_" in n]

    def named_trainable(self, name: str) -> list[tuple[str, torch.nn.Parameter]]:
        if self.param == "full":
            return list(self.policies[name].model.named_parameters())
        return [
            (n, p) for n, p in self._peft.named_parameters() if f".{name}." in n and "lora_" in n
        ]

    def prepare_update(self, name: str) -> Policy:
        """Activate ``name`` (its adapter for LoRA) with only its parameters requiring grad."""
        pol = self.policies[name]
        if self.param == "lora":
            pol.activate()
            for n, p in self._peft.named_parameters():
                p.requires_grad_(f".{name}." in n and "lora_" in n)
        return pol

    @torch.no_grad()
    def reference_logprobs(
        self, name: str, prompt_ids, completion_ids, temperature: float
    ) -> list[torch.Tensor]:
        """Log-probs under the reference policy (base weights; LoRA: adapters off), on policy
        ``name``'s device (the full-weight reference sits on the router's ``device``)."""
        pol = self.policies[name]
        if self.param == "lora":
            with self._peft.disable_adapter():
                return [
                    t.detach()
                    for t in Policy.logprobs(pol, prompt_ids, completion_ids, temperature)
                ]
        if self.reference is None:
            raise RuntimeError("no reference policy: build the router with need_reference=True")
        ref = self._own_refs.get(self.model_paths.get(name, ""), self.reference)
        return [
            t.detach().to(pol.device) for t in ref.logprobs(prompt_ids, completion_ids, temperature)
        ]

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
        out = Path(out_dir)
        for name in self.names:
            pol = self.policies[name]
            d = out / name
            if self.param == "full":
                state = full_state_dict(pol.model) if sharded else None
                if write:
                    pol.model.save_pretrained(d, state_dict=state)
                    pol.tokenizer.save_pretrained(d)
            elif write:
                self._peft.save_pretrained(out / "adapters", selected_adapters=[name])
        if self.param == "lora" and write:
            self.policies[self.names[0]].tokenizer.save_pretrained(out / "adapters")
