"""How a config's ``policy`` field is read (``shared`` | ``isolated`` | a role map) and
what a role name may be: torch-free, so the config checks the sharing choice when it is
made (:func:`flowzoo.config.checks.check_policy`) with the same code the router uses."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

SHARING = ("shared", "isolated")


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


def refuse_unknown_roles(named: Iterable[str], roles: Sequence[str], where: str) -> None:
    """Refuse a role name that is none of ``roles`` (a typo would otherwise be ignored, and
    the role played by the default), naming the bad names and the roles: one check for
    training's ``role_models``/``frozen_roles`` and ``flowzoo eval --role-model``."""
    bad = sorted(set(named) - set(roles))
    if bad:
        raise ValueError(f"{where} name unknown roles {bad}; roles are {list(roles)}")
