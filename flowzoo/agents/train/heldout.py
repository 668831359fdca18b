"""Where a run's held-out problems come from, and proof that they are held out.

Why its own room: every held-out number a run reports is only as good as the set behind it.
The set is either ``eval_dataset`` (a separate file or spec, read whole) or the test side of
the training dataset (a generator's test split, a saved dataset's own ``test`` split, or one
in five of a single file by what is solved). Either way the overlap with the training pool
is measured with :func:`flowzoo.tasks.overlap.overlap` before the run starts, printed, and
recorded in ``summary.json``; a held-out problem the training pool already holds is dropped
from evaluation (and counted), so "held out" is a measured fact, not an assumption.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from flowzoo.config import TrainConfig
from flowzoo.envs.registry import SPECS
from flowzoo.tasks import TaskSet
from flowzoo.tasks.families import family_spec
from flowzoo.tasks.files import WHOLE
from flowzoo.tasks.overlap import overlap, overlapping

#: dataset kinds that generate their problems (their held-out set is their ``test`` split)
GENERATED = ("arith", "funcs", "guarded", "stdio", "reasoning-gym")


def dataset_of(cfg: TrainConfig) -> str:
    """The training dataset spec a run's envs load (``env_options`` or the env's default)."""
    spec = SPECS[cfg.env]
    fam = family_spec(spec.family)
    return str(cfg.env_options.get("dataset", spec.defaults.get("dataset", fam.default_dataset)))


def is_file(dataset: str) -> bool:
    """Whether a spec names a user's file or saved dataset (not a generator)."""
    return dataset.partition(":")[0] not in GENERATED


def train_split(cfg: TrainConfig) -> str:
    """The split the training envs load: a user's file is trained on whole when a separate
    held-out set (``eval_dataset``) is given, else on its train side."""
    return WHOLE if cfg.eval_dataset and is_file(dataset_of(cfg)) else "train"


@dataclass
class HeldOut:
    """The held-out set a run evaluates on, where it came from, and its measured overlap."""

    tasks: TaskSet
    source: str
    overlap: dict[str, Any]
    dropped: list[str] = field(default_factory=list)

    def record(self) -> dict[str, Any]:
        """What ``summary.json`` says about the held-out set."""
        return {
            "source": self.source,
            "problems": len(self.tasks),
            "overlap": self.overlap,
            "dropped_as_overlapping": len(self.dropped),
        }

    def line(self) -> str:
        """One line for the start of a run."""
        o = self.overlap
        dropped = f"; {len(self.dropped)} overlapping dropped" if self.dropped else ""
        return (
            f"held-out set: {self.source} ({len(self.tasks)} problems); overlap with the "
            f"{o['n_a']} training problems: {o['any']} (by key {o['by_key']}, statement "
            f"{o['by_statement']}, tests {o['by_tests']}){dropped}"
        )


def resolve(cfg: TrainConfig, train: TaskSet, seed: int = 0) -> HeldOut:
    """The run's held-out set (see the module doc), cut to what ``train`` does not hold."""
    spec = SPECS[cfg.env]
    fam = family_spec(spec.family)
    if cfg.eval_dataset:
        name, split = cfg.eval_dataset, ("test" if not is_file(cfg.eval_dataset) else WHOLE)
        where = "the whole file" if split == WHOLE else "its test split"
        source = f"eval_dataset {name} ({where})"
    else:
        name, split = dataset_of(cfg), "test"
        kind = (
            "its test side, split from the training file by what is solved"
            if is_file(name)
            else "its test split"
        )
        source = f"dataset {name} ({kind})"
    n = int(cfg.env_options.get("n_tasks", fam.n_tasks.get("test", 200)))
    tasks = fam.load(name, split, n, int(cfg.env_options.get("task_seed", seed)))
    measured = overlap(train, tasks, names=("train", "held-out")).as_dict()
    dropped = overlapping(train, tasks)
    if dropped:
        keep = [t for t in tasks if t.id not in set(dropped)]
        if not keep:
            raise ValueError(
                f"every problem of the held-out set ({source}) is also a training problem; "
                "give a held-out file disjoint from the training data (eval_dataset)"
            )
        tasks = TaskSet(keep, name=tasks.name, split=tasks.split)
    return HeldOut(tasks, source, measured, dropped)


def train_pool_size(cfg: TrainConfig) -> int:
    """The RL pool's size: ``train_tasks``, or (0) the task family's default for the train
    split (a generated code pool is smaller than a math one: one template x constants in five
    is the RL pool)."""
    return cfg.train_tasks or family_spec(SPECS[cfg.env].family).n_tasks.get("train", 200)


def for_run(cfg: TrainConfig) -> HeldOut:
    """The held-out set a run evaluated on, rebuilt from its config (``flowzoo eval RUN``
    scores the same problems the run's own evaluations did)."""
    fam = family_spec(SPECS[cfg.env].family)
    train = fam.load(
        dataset_of(cfg),
        train_split(cfg),
        train_pool_size(cfg),
        int(cfg.env_options.get("task_seed", 0)),
    )
    return resolve(cfg, train)
