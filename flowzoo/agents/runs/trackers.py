"""Experiment trackers beside ``metrics.jsonl`` (``report_to``): TensorBoard, Weights &
Biases, MLflow, Trackio. Each gets the same flat scalars with stable names (the metrics
line's path: ``reward``, ``roles/solver/grad_share``, ``eval/accuracy``), the run's config
once, and its final status. None needs the network: wandb honours ``WANDB_MODE=offline``
(set here when no API key is configured), MLflow writes to ``MLFLOW_TRACKING_URI`` or a
local file store in the run dir (``mlruns/``), TensorBoard and Trackio write locally.

Why its own room: a tracker is optional and its library heavy; the run's own record is
``metrics.jsonl``, and a tracker that fails to start says which extra to install.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from flowzoo.config import TRACKERS  # the names report_to may use; defined with the config


def flat_scalars(row: dict) -> dict[str, float]:
    """Every finite numeric leaf of a metrics line, named by its path (no ``step``)."""
    out: dict[str, float] = {}

    def walk(prefix: str, v: Any) -> None:
        if isinstance(v, dict):
            for k, x in v.items():
                walk(f"{prefix}/{k}" if prefix else str(k), x)
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            out[prefix] = float(v)

    walk("", {k: v for k, v in row.items() if k != "step"})
    return out


class Tracker:
    """One tracker: ``log(scalars, step)``, ``finish(status)``."""

    #: its ``report_to`` name, the module it imports, the pip package that provides it
    name, module, package = "", "", ""

    def __init__(self, out: Path, config: dict, run_name: str) -> None:
        """Start the run (``out``: the run dir; ``config``: what it records)."""

    def log(self, scalars: dict[str, float], step: int) -> None:
        raise NotImplementedError

    def finish(self, status: str) -> None:
        """Flush and close; ``status`` is the run's (completed, failed: ...)."""


class TensorBoardTracker(Tracker):
    name, module, package = "tensorboard", "torch.utils.tensorboard", "tensorboard"

    def __init__(self, out: Path, config: dict, run_name: str) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.w = SummaryWriter(log_dir=str(out / "tensorboard"))
        self.w.add_text("config", "\n".join(f"    {k}: {v}" for k, v in config.items()))

    def log(self, scalars, step):
        for k, v in scalars.items():
            self.w.add_scalar(k, v, step)

    def finish(self, status):
        self.w.add_text("status", status)
        self.w.close()


class WandbTracker(Tracker):
    name, module, package = "wandb", "wandb", "wandb"

    def __init__(self, out: Path, config: dict, run_name: str) -> None:
        import wandb

        if not (os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_MODE")):
            os.environ["WANDB_MODE"] = "offline"  # no key, no network: a local run to sync later
        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "flowzoo"),
            name=run_name,
            dir=str(out),
            config=config,
            id=_stable_id(out),
            resume="allow",
            reinit="create_new",
        )

    def log(self, scalars, step):
        self.run.log(scalars, step=step)

    def finish(self, status):
        self.run.summary["status"] = status
        self.run.finish(exit_code=0 if status == "completed" else 1)


class MlflowTracker(Tracker):
    name, module, package = "mlflow", "mlflow", "mlflow-skinny"

    def __init__(self, out: Path, config: dict, run_name: str) -> None:
        import mlflow

        uri = os.environ.get("MLFLOW_TRACKING_URI")
        if not uri:  # a local file store in the run dir (MLflow 3 asks for the opt-in)
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            uri = (out / "mlruns").resolve().as_uri()
        self.client = mlflow.MlflowClient(tracking_uri=uri)
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME", "flowzoo")
        exp = self.client.get_experiment_by_name(name)
        exp_id = exp.experiment_id if exp else self.client.create_experiment(name)
        self.run_id = self.client.create_run(exp_id, run_name=run_name).info.run_id
        for k, v in config.items():
            self.client.log_param(self.run_id, k, str(v)[:500])

    def log(self, scalars, step):
        import time

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        ms = [Metric(_mlflow_key(k), v, now, step) for k, v in scalars.items()]
        for i in range(0, len(ms), 900):  # the API takes at most 1000 per batch
            self.client.log_batch(self.run_id, metrics=ms[i : i + 900])

    def finish(self, status):
        self.client.set_tag(self.run_id, "flowzoo.status", status[:5000])
        self.client.set_terminated(self.run_id, "FINISHED" if status == "completed" else "FAILED")


class TrackioTracker(Tracker):
    name, module, package = "trackio", "trackio", "trackio"

    def __init__(self, out: Path, config: dict, run_name: str) -> None:
        import trackio

        self.trackio = trackio
        trackio.init(
            project=os.environ.get("TRACKIO_PROJECT", "flowzoo"),
            name=trackio_name(out, run_name),
            config=config,
            resume="allow",
        )

    def log(self, scalars, step):
        self.trackio.log(scalars, step=step)

    def finish(self, status):
        self.trackio.finish()


_CLASSES = {c.name: c for c in (TensorBoardTracker, WandbTracker, MlflowTracker, TrackioTracker)}
if set(_CLASSES) != set(TRACKERS):  # the config's choices and what can be opened
    raise RuntimeError(
        f"config.TRACKERS {TRACKERS} and the tracker classes {tuple(_CLASSES)} differ"
    )


def _stable_id(out: Path) -> str:
    """One tracker run per run dir, so a resumed run continues the same tracker run."""
    import hashlib

    return hashlib.sha256(str(out.resolve()).encode()).hexdigest()[:16]


def trackio_name(out: Path, run_name: str) -> str:
    """Trackio resumes a run by its name within a project, so the name carries the run dir's
    stable id: two run dirs of the same name (``runs/a/run``, ``runs/b/run``) are two runs,
    and a resumed run continues its own."""
    return f"{run_name}-{_stable_id(out)[:8]}"


def _mlflow_key(k: str) -> str:
    """MLflow keys allow letters, digits and ``_-. /``: anything else becomes ``_``."""
    return "".join(c if c.isalnum() or c in "_-. /" else "_" for c in k)


def _tracker(name: str) -> type[Tracker]:
    if name not in _CLASSES:
        raise ValueError(f"unknown tracker {name!r}; valid: {', '.join(TRACKERS)}")
    return _CLASSES[name]


def _missing(cls: type[Tracker], e: ImportError) -> RuntimeError:
    return RuntimeError(
        f"report_to={cls.name!r} needs {cls.package} ({e}); install it with "
        f"pip install 'flowzoo[trackers]'"
    )


def check_trackers(names: list[str]) -> None:
    """Every named tracker's library imports, else a clear error naming what to install:
    checked when a trainer is built, before the run directory is claimed."""
    import importlib

    for name in names:
        cls = _tracker(name)
        try:
            importlib.import_module(cls.module)
        except ImportError as e:
            raise _missing(cls, e) from None


def open_trackers(names: list[str], out: Path, config: dict, run_name: str) -> list[Tracker]:
    """Start the named trackers; a missing library is a clear error naming what to install."""
    trackers = []
    for name in names:
        cls = _tracker(name)
        try:
            trackers.append(cls(out, config, run_name))
        except ImportError as e:
            for t in trackers:
                t.finish("failed: another tracker could not start")
            raise _missing(cls, e) from None
    return trackers


__all__ = ["TRACKERS", "Tracker", "check_trackers", "flat_scalars", "open_trackers"]
