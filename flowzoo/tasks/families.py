"""The task family registry: everything an env needs to know about a family, in one record.

Why a registry: ``make_env`` builds an env for any registered family from its record (how the
family is made and which of ``make_env``'s options it takes, where its problems come from,
how many per split, which datasets hold structure out) without naming a family anywhere.
A new family is one :class:`FamilySpec` passed to :func:`register_family`, then
``flowzoo.register(SomeWorkflow, families=(name,))`` for the workflows that should run it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from flowzoo.tasks.base import TaskFamily, TaskSet


@dataclass(frozen=True)
class FamilySpec:
    """One task family as the envs see it."""

    name: str
    #: the family object from its options (those named in ``options``)
    make: Callable[..., TaskFamily]
    #: problems: ``load(dataset spec, split, n, seed)``
    load: Callable[[str, str, int, int], TaskSet]
    #: the dataset spec ``make_env`` uses when none is given
    default_dataset: str
    #: the ``make_env`` options passed to ``make`` (e.g. ``sandbox`` for code)
    options: tuple[str, ...] = ()
    #: problems per split when ``n_tasks`` is not given
    n_tasks: dict[str, int] = field(default_factory=dict)
    #: dataset kinds (the part before ``:``) that have an out-of-distribution split
    ood_datasets: tuple[str, ...] = ()


FAMILIES: dict[str, FamilySpec] = {}


def register_family(spec: FamilySpec) -> None:
    """Make a task family available to ``make_env`` and ``flowzoo.register``."""
    if not spec.name or "-" in spec.name or "/" in spec.name:
        raise ValueError(f"a family needs a plain name without '-' or '/', got {spec.name!r}")
    known = FAMILIES.get(spec.name)
    if known is not None and known != spec:
        raise ValueError(f"a different task family is already registered as {spec.name!r}")
    FAMILIES[spec.name] = spec


def family_spec(name: str) -> FamilySpec:
    """The registered family ``name``; an unknown one is a ValueError naming the valid ones."""
    try:
        return FAMILIES[name]
    except KeyError:
        raise ValueError(f"unknown task family {name!r}; valid: {', '.join(FAMILIES)}") from None


def get_family(name: str, **options) -> TaskFamily:
    """The task family called ``name``, made with ``options`` (only those it takes)."""
    spec = family_spec(name)
    bad = sorted(set(options) - set(spec.options))
    if bad:
        raise ValueError(f"{name} family takes options {list(spec.options)}; got {sorted(options)}")
    return spec.make(**options)


def _math(**options) -> TaskFamily:
    from flowzoo.tasks.math import MathFamily

    return MathFamily(**options)


def _load_math(dataset: str, split: str, n: int, seed: int) -> TaskSet:
    from flowzoo.tasks.math import load_math_dataset

    return load_math_dataset(dataset, split=split, n=n, seed=seed)


def _code(**options) -> TaskFamily:
    from flowzoo.tasks.code import CodeFamily

    return CodeFamily(**options)


def _load_code(dataset: str, split: str, n: int, seed: int) -> TaskSet:
    from flowzoo.tasks.code import load_code_dataset

    return load_code_dataset(dataset, split=split, n=n, seed=seed)


register_family(
    FamilySpec(
        "math",
        _math,
        _load_math,
        default_dataset="arith",
        n_tasks={"train": 500, "test": 200, "ood": 200},
        ood_datasets=("arith",),
    )
)
register_family(
    FamilySpec(
        "code",
        _code,
        _load_code,
        default_dataset="funcs",
        options=(
            "sandbox",
            "sandbox_options",
            "partial_credit",
            "test_timeout_s",
            "case_timeout_s",
            "time_budget_s",
            "early_stop",
        ),
        n_tasks={"train": 200, "test": 100, "ood": 100},
        ood_datasets=("funcs", "guarded", "stdio"),
    )
)

__all__ = ["FAMILIES", "FamilySpec", "family_spec", "get_family", "register_family"]
