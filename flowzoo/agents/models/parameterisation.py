"""The two parameterisations the study compares, as two classes with one interface:
:class:`FullParams` (every trainable policy a full copy of its base checkpoint) and
:class:`LoraParams` (one frozen base, one PEFT LoRA adapter per policy).

Why two classes: what a policy's trainable parameters are, how an update isolates them, what
the reference policy is and how a policy is saved all differ between the two, and nothing
else in the router does. :func:`build_params` picks one; the router never branches on it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import torch

from flowzoo.agents.models.policy import Policy
from flowzoo.agents.models.sharding import full_state_dict

PARAMETERISATIONS = ("full", "lora")


@dataclass
class LoraSettings:
    """The study's set-up: rank 64, alpha 32, all linear layers."""

    r: int = 64
    alpha: int = 32
    dropout: float = 0.0
    target_modules: str | tuple[str, ...] = "all-linear"


@dataclass
class LoadSettings:
    """How every trainable policy is loaded: where, at what precision, with which forward."""

    #: the default device (and the full-weight reference's)
    device: str = "cpu"
    #: policy name -> its own device (isolated policies spread over GPUs)
    devices: dict[str, str] = field(default_factory=dict)
    precision: str = "fp32"
    grad_checkpointing: bool = False
    #: flowzoo's fast forward pass (:mod:`flowzoo.agents.models.fastlm`) where the model allows it
    fast: bool = True

    def policy(self, path: str, device: str) -> Policy:
        return Policy(
            path,
            device=device,
            precision=self.precision,
            grad_checkpointing=self.grad_checkpointing,
            fast=self.fast,
        )

    def reference(self, path: str) -> Policy:
        """A frozen copy of ``path`` on the default device (no gradients, so no checkpointing)."""
        ref = Policy(path, device=self.device, precision=self.precision, fast=self.fast)
        ref.model.requires_grad_(False)
        return ref


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


class FullParams:
    """Full fine-tuning: each policy its own full copy (of its own base checkpoint where the
    role has one); the KL reference is that base, frozen."""

    param = "full"

    def __init__(
        self,
        names: list[str],
        base_path: str,
        own_paths: dict[str, str],
        devices: dict[str, str],
        load: LoadSettings,
        need_reference: bool,
    ) -> None:
        self.own_paths = own_paths
        self.policies = {n: load.policy(own_paths.get(n, base_path), devices[n]) for n in names}
        self.reference: Policy | None = load.reference(base_path) if need_reference else None
        #: a policy with its own base checkpoint is anchored to that base
        self._own_refs = (
            {p: load.reference(p) for p in sorted(set(own_paths.values()))}
            if need_reference
            else {}
        )

    def named_trainable(self, name: str) -> list[tuple[str, torch.nn.Parameter]]:
        return list(self.policies[name].model.named_parameters())

    def prepare_update(self, name: str) -> Policy:
        return self.policies[name]

    def reference_logprobs(self, name, prompt_ids, completion_ids, temperature):
        if self.reference is None:
            raise RuntimeError("no reference policy: build the router with need_reference=True")
        pol = self.policies[name]
        ref = self._own_refs.get(self.own_paths.get(name, ""), self.reference)
        return [
            t.detach().to(pol.device) for t in ref.logprobs(prompt_ids, completion_ids, temperature)
        ]

    def save_pretrained(self, out: Path, sharded: bool, write: bool) -> None:
        """Each policy as a loadable checkpoint in ``out/<name>``."""
        for name, pol in self.policies.items():
            state = full_state_dict(pol.model) if sharded else None
            if write:
                pol.model.save_pretrained(out / name, state_dict=state)
                pol.tokenizer.save_pretrained(out / name)


class LoraParams:
    """One frozen base with a LoRA adapter per policy (peft); the reference is the base with
    adapters off. Every policy sits on one device (the adapters share the base)."""

    param = "lora"

    def __init__(
        self,
        names: list[str],
        base_path: str,
        device: str,
        load: LoadSettings,
        lora: LoraSettings,
    ) -> None:
        from peft import LoraConfig, get_peft_model

        base = load.policy(base_path, device)
        cfg = LoraConfig(
            r=lora.r,
            lora_alpha=lora.alpha,
            lora_dropout=lora.dropout,
            target_modules=lora.target_modules
            if isinstance(lora.target_modules, str)
            else list(lora.target_modules),
            init_lora_weights=True,
        )
        #: the shared PEFT model (the vLLM backend serves its adapters from one engine)
        self.peft = get_peft_model(base.model, cfg, adapter_name=names[0])
        for name in names[1:]:
            self.peft.add_adapter(name, cfg)
        base.model = self.peft
        self.policies: dict[str, Policy] = {n: AdapterPolicy(base, n) for n in names}

    def named_trainable(self, name: str) -> list[tuple[str, torch.nn.Parameter]]:
        return [(n, p) for n, p in self.peft.named_parameters() if _is_adapter_of(n, name)]

    def prepare_update(self, name: str) -> Policy:
        """Activate ``name``'s adapter with only its parameters requiring grad."""
        pol = cast(AdapterPolicy, self.policies[name])  # every policy here is one
        pol.activate()
        for n, p in self.peft.named_parameters():
            p.requires_grad_(_is_adapter_of(n, name))
        return pol

    @torch.no_grad()
    def reference_logprobs(self, name, prompt_ids, completion_ids, temperature):
        pol = self.policies[name]
        with self.peft.disable_adapter():
            return [
                t.detach() for t in Policy.logprobs(pol, prompt_ids, completion_ids, temperature)
            ]

    def save_pretrained(self, out: Path, sharded: bool, write: bool) -> None:
        """Each adapter as a PEFT adapter dir under ``out/adapters`` with the tokenizer."""
        if not write:
            return
        for name in self.policies:
            self.peft.save_pretrained(str(out / "adapters"), selected_adapters=[name])
        next(iter(self.policies.values())).tokenizer.save_pretrained(out / "adapters")


def _is_adapter_of(param_name: str, policy: str) -> bool:
    return f".{policy}." in param_name and "lora_" in param_name


def check_params(param: str, own_paths: dict[str, str]) -> None:
    """Refuse a parameterisation that cannot hold the plan, before anything is loaded."""
    if param not in PARAMETERISATIONS:
        raise ValueError(
            f"unknown parameterisation {param!r}; valid: {', '.join(PARAMETERISATIONS)}"
        )
    if own_paths and param == "lora":
        raise ValueError(
            f"roles {sorted(own_paths)} have their own base checkpoints, but LoRA adapters share "
            "one base: use param='full', or freeze those roles"
        )


def build_params(
    param: str,
    names: list[str],
    base_path: str | os.PathLike,
    own_paths: dict[str, str],
    load: LoadSettings,
    lora: LoraSettings,
    need_reference: bool,
) -> FullParams | LoraParams:
    """The parameterisation ``param`` names, with every policy loaded."""
    check_params(param, own_paths)
    devices = {n: str(load.devices.get(n, load.device)) for n in names}
    bad = sorted(set(load.devices) - set(names))
    if bad:
        raise ValueError(f"devices name unknown policies {bad}; policies are {names}")
    if param == "full":
        return FullParams(names, str(base_path), own_paths, devices, load, need_reference)
    if len(set(devices.values())) > 1:
        raise ValueError(
            f"LoRA adapters share one base model, so every policy sits on one device; got {devices}"
        )
    return LoraParams(names, str(base_path), devices[names[0]], load, lora)


__all__ = [
    "PARAMETERISATIONS",
    "AdapterPolicy",
    "FullParams",
    "LoadSettings",
    "LoraParams",
    "LoraSettings",
    "build_params",
    "check_params",
]
