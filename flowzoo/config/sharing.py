"""How a config's ``policy`` field is read (``shared`` | ``isolated`` | a role map) and
what a role name may be: torch-free, so the config checks the sharing choice when it is
made (:func:`flowzoo.config.checks.check_policy`) with the same code the router uses."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

SHARING = ("shared", "isolated")


@dataclass(frozen=True)
class Sharing:
    """The ``policy`` choice as a typed value: read from its text once, at the config boundary
    (:attr:`flowzoo.config.train.TrainConfig.sharing`), and asked for its role map by the router,
    the checks and evaluation, so no caller parses the string or tests it for a dict."""

    #: ``shared`` (one policy plays every role), ``isolated`` (a policy per role) or ``map``
    kind: str
    #: (role, policy name) pairs of a ``map`` (empty otherwise)
    names: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, value: str | Mapping[str, str] | Sharing) -> Sharing:
        """``shared`` | ``isolated`` | ``solver=a,aggregator=b`` (the CLI and config form) or a
        role -> name mapping (the Python API's form)."""
        if isinstance(value, Sharing):
            return value
        if isinstance(value, Mapping):
            return cls("map", tuple((str(r), str(n)) for r, n in value.items()))
        if not isinstance(value, str):
            raise TypeError(
                f"policy must be a string (shared | isolated | role=name,...), got "
                f"{type(value).__name__} {value!r}"
            )
        if "=" not in value:
            if value not in SHARING:
                raise ValueError(
                    f"unknown policy sharing {value!r}; valid: {', '.join(SHARING)} or a "
                    f"role->name map (role=name,role=name)"
                )
            return cls(value)
        pairs = []
        for part in value.split(","):
            role, _, name = part.partition("=")
            if not role.strip() or not name.strip():
                raise ValueError(f"bad policy map entry {part!r}; expected role=name")
            pairs.append((role.strip(), name.strip()))
        return cls("map", tuple(pairs))

    def role_map(self, roles: Sequence[str]) -> dict[str, str]:
        """role -> policy name for these roles (a map must cover every role)."""
        if self.kind == "shared":
            return dict.fromkeys(roles, "shared")
        if self.kind == "isolated":
            return {r: r for r in roles}
        given = dict(self.names)
        missing = [r for r in roles if r not in given]
        if missing:
            raise ValueError(f"policy map misses roles {missing}; roles are {list(roles)}")
        return {r: given[r] for r in roles}

    def __str__(self) -> str:
        return self.kind if self.kind != "map" else ",".join(f"{r}={n}" for r, n in self.names)


def refuse_unknown_roles(named: Iterable[str], roles: Sequence[str], where: str) -> None:
    """Refuse a role name that is none of ``roles`` (a typo would otherwise be ignored, and
    the role played by the default), naming the bad names and the roles: one check for
    training's ``role_models``/``frozen_roles`` and ``flowzoo eval --role-model``."""
    bad = sorted(set(named) - set(roles))
    if bad:
        raise ValueError(f"{where} name unknown roles {bad}; roles are {list(roles)}")
