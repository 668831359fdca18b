"""What ``flowzoo eval`` scores, decided before any model loads: a run's own held-out set, a
user's file (``--dataset``), or an env's own test split, and never a training problem
called held out.

Why its own room: the number an evaluation prints is read as test accuracy, so where its
problems come from is the number's meaning. A run directory is scored on the held-out set
the run measured (its ``eval_dataset``, else its dataset's test side or split; overlap with
its training pool dropped and counted), on any env of its task family; an env of another
family has none of the run's held-out problems and is refused. ``--dataset`` scores a file's
rows (any model); when the model is a run, rows its training data already holds (by every
criterion of :mod:`flowzoo.tasks.overlap`, reworded and reordered copies included) are left
out of the score, counted, named and recorded: refused as held-out rows, never scored as
ones. No torch here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flowzoo.agents.train import heldout
from flowzoo.agents.train.provenance import file_digest, spec_files
from flowzoo.config import TrainConfig
from flowzoo.envs.registry import SPECS, valid_options
from flowzoo.tasks import TaskSet
from flowzoo.tasks.families import family_spec
from flowzoo.tasks.files import WHOLE
from flowzoo.tasks.overlap import overlap, overlap_matches

#: what a bare ``--dataset`` path is read as, by task family: math rows' style is told by
#: their fields (``{question, answer}``, GSM8K's ``#### a``, MATH's ``\\boxed{}``); code
#: rows' format likewise (HumanEval, MBPP, LiveCodeBench, APPS/TACO, CodeContests, ...)
BARE_PATH = {"math": "hf", "code": "file"}


def run_config(model: str) -> TrainConfig | None:
    """The training config of a run directory (None: ``model`` is not a run)."""
    from flowzoo.agents.train.evaluate import is_run_dir

    if not is_run_dir(model):
        return None
    path = Path(model) / "config.json"
    return TrainConfig.from_dict(json.loads(path.read_text(encoding="utf-8")), source=str(path))


def dataset_spec(given: str, family: str) -> str:
    """A ``--dataset`` value as a spec the family's loader reads: a spec (``jsonl:PATH``,
    ``gsm8k:PATH``, ``mbpp:PATH``, ``hf:DIR``, a generator such as ``arith``) as given; an
    existing path (a ``.jsonl``/``.json``/``.parquet`` file, a ``save_to_disk`` folder) as
    :data:`BARE_PATH` reads it; anything else a ValueError naming it."""
    if Path(given).exists():
        kind = BARE_PATH.get(family, "file")
        if family == "code" and Path(given).is_dir():
            kind = "hf"
        return f"{kind}:{given}"
    kind, sep, _ = given.partition(":")
    if not sep and kind not in heldout.GENERATED:
        raise ValueError(
            f"--dataset {given!r}: no such file or folder, and not a dataset spec (a path, or "
            "STYLE:PATH such as jsonl:test.jsonl, gsm8k:PATH, mbpp:PATH, hf:DIR)"
        )
    return given


def files_of(spec: str) -> dict[str, str]:
    """Each file a dataset spec reads, by sha256 (none for a generator)."""
    return {str(p): file_digest(p) for p in spec_files(spec)}


@dataclass
class Scored:
    """The problems one env's ``test`` row is scored on, and what its record says of them."""

    #: the problems (None: the env's own test split, a generator's held-out problems)
    tasks: TaskSet | None
    #: where they come from, for the printed line and the record
    source: str
    #: what the results row records (source, sizes, overlap, left-out rows, file digests)
    record: dict[str, Any]
    #: lines to print before scoring (a warning first where rows were left out)
    lines: list[str] = field(default_factory=list)
    #: whether the env's out-of-distribution split is scored beside (not for a user's file)
    ood: bool = True


class EvalData:
    """What each env of one ``flowzoo eval`` is scored on (see the module doc); everything
    is loaded and checked when made, before a model loads."""

    def __init__(self, model: str, dataset: str | None = None) -> None:
        self.model = model
        self.dataset = dataset
        self.cfg = run_config(model)
        self._by_family: dict[str, Scored] = {}

    @property
    def run_family(self) -> str | None:
        return SPECS[self.cfg.env].family if self.cfg is not None else None

    def default_envs(self) -> list[str] | None:
        """The run's own env when no ``--env`` is given (None: not a run)."""
        return [self.cfg.env] if self.cfg is not None else None

    def options_for(self, env_id: str) -> dict[str, Any]:
        """The env options ``env_id`` plays with: the run's own, as far as that env takes
        them (an env of another family: none of its task options)."""
        if self.cfg is None:
            return {}
        opts = dict(self.cfg.env_options)
        if env_id == self.cfg.env:
            return opts
        keep = set(valid_options(env_id))
        if SPECS[env_id].family != self.run_family:
            keep -= {"dataset", "n_tasks", "task_seed", "split"}
        return {k: v for k, v in opts.items() if k in keep}

    def check_roles(self, env_id: str, role_models: dict[str, str]) -> str | None:
        """A run scored on an env with roles it never trained (``voting-math``'s run on
        ``eval-opt-math``): refused naming them, unless ``--role-model`` plays them or the run
        trained one policy for every role (they play it: the line returned says so)."""
        if self.cfg is None:
            return None
        from flowzoo.envs.registry import env_agents

        ran = list(dict.fromkeys(env_agents(self.cfg.env, **self.cfg.env_options).values()))
        roles = dict.fromkeys(env_agents(env_id, **self.options_for(env_id)).values())
        missing = [r for r in roles if r not in ran and r not in role_models]
        if not missing:
            return None
        names = set(self.cfg.sharing.role_map(ran).values())
        if len(names) == 1 and not self.cfg.frozen and not self.cfg.role_models:
            return (
                f"{env_id}: roles {missing} were never trained by {self.model} ({self.cfg.env}); "
                f"they play its one policy"
            )
        raise ValueError(
            f"{self.model} trained {self.cfg.env}'s roles {ran} with policies per role; "
            f"{env_id}'s roles {missing} have none: play them with --role-model ROLE=SPEC, or "
            f"evaluate on {self.cfg.env}"
        )

    def for_env(self, env_id: str) -> Scored:
        """What ``env_id``'s test row scores (loaded once per task family)."""
        fam = SPECS[env_id].family
        if fam not in self._by_family:
            self._by_family[fam] = self._load(env_id, fam)
        return self._by_family[fam]

    def _load(self, env_id: str, fam: str) -> Scored:
        if self.dataset:
            return self._file(env_id, fam)
        if self.cfg is not None:
            if fam != self.run_family:
                raise ValueError(
                    f"{self.model} trained on {self.run_family} problems ({self.cfg.env}); "
                    f"{env_id} plays {fam} problems, of which the run holds no held-out set: "
                    f"evaluate it on a {self.run_family} env, or give {fam} problems with "
                    "--dataset FILE"
                )
            held = heldout.for_run(self.cfg)
            spec = self.cfg.eval_dataset or heldout.dataset_of(self.cfg)
            record = {**held.record(), "files": files_of(spec)}
            return Scored(held.tasks, held.source, record, [held.line()])
        return Scored(None, f"{env_id}'s own test split", {"source": "the env's test split"})

    def _file(self, env_id: str, fam: str) -> Scored:
        assert self.dataset is not None
        spec = dataset_spec(self.dataset, fam)
        split = WHOLE if heldout.is_file(spec) else "test"
        n = family_spec(fam).n_tasks.get("test", 200)
        try:
            tasks = family_spec(fam).load(spec, split, n, 0)
        except (ValueError, FileNotFoundError) as e:
            hint = (
                "" if self.cfg is not None else " (a file of other problems: name its env: --env)"
            )
            # one of two plain classes, never ``type(e)(msg)``: a subclass (UnicodeError) takes
            # other arguments and would turn the message into a TypeError
            cls = FileNotFoundError if isinstance(e, FileNotFoundError) else ValueError
            raise cls(f"--dataset read as {fam} problems for {env_id}: {e}{hint}") from e
        whole = "its own test split" if tasks.origin == "own split" else "every row"
        source = f"--dataset {spec} ({whole if split == WHOLE else 'its test split'})"
        record: dict[str, Any] = {"source": source, "rows": len(tasks), "files": files_of(spec)}
        lines = []
        if self.cfg is not None and fam == self.run_family:
            tasks, more = self._left_out(tasks, source)
            record.update(more)
            lines.append(more.pop("line"))
        elif self.cfg is not None:
            record["overlap"] = f"none possible: the run trained on {self.run_family} problems"
        record["problems"] = len(tasks)
        lines.append(f"scoring {source}: {len(tasks)} problems")
        return Scored(tasks, source, record, lines, ood=False)

    def _left_out(self, tasks: TaskSet, source: str) -> tuple[TaskSet, dict[str, Any]]:
        """The rows of a user's file the run did not train on, and what the record says:
        the measured overlap with the run's training pool and the rows left out of the
        score (a run's training problems are never scored as held out)."""
        assert self.cfg is not None
        train = heldout.train_pool(self.cfg)
        measured = overlap(train, tasks, names=("the run's training data", "--dataset"))
        found = overlap_matches(train, tasks)
        out: dict[str, Any] = {
            "overlap": measured.as_dict(),
            "left_out_as_training": len(found),
            "left_out_ids": list(found)[:20],
        }
        counts = heldout.counts(measured.as_dict())
        if not found:
            out["line"] = (
                f"{source}: none of its {len(tasks)} rows is a training problem of "
                f"{self.model} ({len(train)} training problems; {counts})"
            )
            return tasks, out
        keep = [t for t in tasks if t.id not in found]
        if not keep:
            raise ValueError(
                f"every row of {source} ({len(tasks)}) is a training problem of "
                f"{self.model} ({counts}); none is held out: give problems the run never "
                "trained on"
            )
        some = ", ".join(list(found)[:5])
        out["line"] = (
            f"WARNING: {len(found)} of the {len(tasks)} rows of {source} are training problems "
            f"of {self.model} ({counts}; e.g. {some}): left out of the score, which is over "
            f"the other {len(keep)}"
        )
        return TaskSet(keep, name=tasks.name, split=tasks.split), out
