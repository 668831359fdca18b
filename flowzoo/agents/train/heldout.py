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
from pathlib import Path
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


def has_own_splits(dataset: str) -> bool:
    """Whether a spec names a saved Hugging Face dataset holding its own splits (a
    ``DatasetDict`` written by ``save_to_disk``: its folder has ``dataset_dict.json``)."""
    kind, _, arg = dataset.partition(":")
    if kind != "hf":
        return False
    style, sep, rest = arg.partition(":")
    path = Path(rest if sep and style in ("auto", "jsonl", "gsm8k", "math") else arg)
    return (path / "dataset_dict.json").is_file()


def train_split(cfg: TrainConfig) -> str:
    """The split the training envs load: a user's file is trained on whole when a separate
    held-out set (``eval_dataset``) is given, else on its train side; a saved dataset with
    its own splits always trains on its own ``train`` (read "whole", it would be its
    ``test``)."""
    dataset = dataset_of(cfg)
    if cfg.eval_dataset and is_file(dataset) and not has_own_splits(dataset):
        return WHOLE
    return "train"


@dataclass
class HeldOut:
    """The held-out set a run evaluates on, where it came from, and its measured overlap."""

    tasks: TaskSet
    source: str
    overlap: dict[str, Any]
    dropped: list[str] = field(default_factory=list)

    def record(self) -> dict[str, Any]:
        """What ``summary.json`` (and an evaluation's results) says about the held-out set:
        where from, its size, its measured overlap with the training pool by each criterion,
        how many overlapping problems were dropped, and, for one file split in two, how many
        rows the split moved from test to train (:attr:`TaskSet.decontamination`)."""
        out = {
            "source": self.source,
            "problems": len(self.tasks),
            "overlap": self.overlap,
            "dropped_as_overlapping": len(self.dropped),
        }
        if self.tasks.decontamination:
            out["split_decontamination"] = dict(self.tasks.decontamination)
        return out

    def line(self) -> str:
        """One line for the start of a run (and ``flowzoo eval``)."""
        o = self.overlap
        dropped = f"; {len(self.dropped)} overlapping dropped" if self.dropped else ""
        moved = self.tasks.decontamination.get("moved_to_train", 0)
        split = f"; the file's split moved {moved} copies of train rows to train" if moved else ""
        return (
            f"held-out set: {self.source} ({len(self.tasks)} problems); overlap with the "
            f"{o['n_a']} training problems: {o['any']} ({counts(o)}){dropped}{split}"
        )


def counts(o: dict[str, Any]) -> str:
    """An overlap record's counts by criterion, for a printed line."""
    return (
        f"by key {o['by_key']}, statement {o['by_statement']}, tests {o['by_tests']}, "
        f"solved (quantities + gold) {o.get('by_solved', 0)}, n-gram {o.get('by_ngram', 0)}"
    )


def resolve(cfg: TrainConfig, train: TaskSet, seed: int = 0) -> HeldOut:
    """The run's held-out set (see the module doc), cut to what ``train`` does not hold."""
    spec = SPECS[cfg.env]
    fam = family_spec(spec.family)
    if cfg.eval_dataset:
        name, split = cfg.eval_dataset, ("test" if not is_file(cfg.eval_dataset) else WHOLE)
    else:
        name, split = dataset_of(cfg), "test"
    n = int(cfg.env_options.get("n_tasks", fam.n_tasks.get("test", 200)))
    tasks = fam.load(name, split, n, int(cfg.env_options.get("task_seed", seed)))
    source = source_of(name, tasks, "eval_dataset" if cfg.eval_dataset else "dataset")
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


def source_of(name: str, tasks: TaskSet, role: str) -> str:
    """Where a held-out set came from, as its loader made it (``TaskSet.origin``): a
    generator's test split, a saved dataset's own test split, a separate file read whole, or
    the test side of one file split by what is solved."""
    where = {
        "own split": "its own test split",
        "whole file": "the whole file",
        "split by what is solved": "its test side, split from the training file by what is solved",
    }.get(tasks.origin, "its test split")
    return f"{role} {name} ({where})"


def train_pool_size(cfg: TrainConfig) -> int:
    """The RL pool's size: ``train_tasks``, or (0) the task family's default for the train
    split (a generated code pool is smaller than a math one: one template x constants in five
    is the RL pool)."""
    return cfg.train_tasks or family_spec(SPECS[cfg.env].family).n_tasks.get("train", 200)


def for_run(cfg: TrainConfig) -> HeldOut:
    """The held-out set a run evaluated on, rebuilt from its config (``flowzoo eval RUN``
    scores the same problems the run's own evaluations did)."""
    return resolve(cfg, train_pool(cfg))


def train_pool(cfg: TrainConfig) -> TaskSet:
    """The problems a run trained on, as its training envs loaded them (a user's file: its
    train side, or all of it beside a separate held-out file)."""
    fam = family_spec(SPECS[cfg.env].family)
    return fam.load(
        dataset_of(cfg),
        train_split(cfg),
        train_pool_size(cfg),
        int(cfg.env_options.get("task_seed", 0)),
    )
