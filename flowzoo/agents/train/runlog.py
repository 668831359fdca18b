"""What a run writes: ``config.json``, ``metrics.jsonl`` (one line per step), the scalars to
the trackers of ``report_to`` (:mod:`trackers`), and ``summary.json`` (status, curve
reading, gradient shares, frozen roles).

Why its own room: a run record must be honest whatever happens to the process (a crash is
``failed`` with its error, an interrupt says how to resume, a torn last line of
``metrics.jsonl`` from a kill is skipped, not fatal), and the same rules serve the report.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import sys
import tempfile
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from flowzoo.analysis.curves import mean_grad_share
from flowzoo.analysis.readings import evals_of, trajectory
from flowzoo.analysis.records import read_metrics
from flowzoo.config import NOT_SHAPING, TrainConfig

if TYPE_CHECKING:  # runlog itself needs no torch (the CLI and sweeps import it)
    from flowzoo.agents.train.batch import Batch

#: what a fresh start (``resume=False``) removes from a run directory before it begins
RUN_STATE = ("checkpoint", "final", "metrics.jsonl", "summary.json", "tensorboard", "mlruns")
#: the file a live run holds locked (``fcntl.flock``), its pid inside
LOCK_FILE = ".flowzoo.lock"
#: what flowzoo writes in a run directory before the run's config.json (a sweep writes its
#: run_config.json and train.log first): a directory holding only these is a run's
PRE_RUN = frozenset({"run_config.json", "train.log", LOCK_FILE})
#: keys every config.json a flowzoo run writes has (a model's config.json has none of them)
RUN_KEYS = ("env", "policy", "param", "algo", "model")


def atomic_write(path: Path, data: str | bytes | Callable[[IO[bytes]], None]) -> None:
    """Write ``path`` whole or not at all: a temp file in the same directory, flushed to
    disk, then ``os.replace``d over ``path`` (a kill mid-write leaves the old file, never a
    torn one). ``data``: text, bytes, or a function writing to the open binary file. Every
    record a run writes (config, summary, metrics rewrite, checkpoint) goes through here."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            if callable(data):
                data(f)
            else:
                f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a record is as any new file
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


class SafeStream:
    """A text stream for progress bars and notices that a reader going away cannot break:
    after a failed write (EPIPE once ``| tee`` died with Ctrl-C, EIO from a closed terminal,
    a closed file) later output is dropped. Nothing a run records goes only to a stream, so
    dropping it loses nothing, while the error would have stopped the run's last records."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self._stream, self.broken = stream, False

    @property
    def stream(self) -> IO[str] | None:
        """The stream given, else the process's stderr at the time of writing."""
        return self._stream if self._stream is not None else sys.stderr

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                return self.stream.write(text)  # type: ignore[union-attr]
            except (OSError, ValueError, AttributeError):  # AttributeError: no stderr at all
                self.broken = True
        return len(text)

    def flush(self) -> None:
        if not self.broken:
            try:
                self.stream.flush()  # type: ignore[union-attr]
            except (OSError, ValueError, AttributeError):
                self.broken = True

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding: the stream's own
        return getattr(self.stream, name)


#: the training bar: tqdm's own rate and remaining time left out (the postfix holds the ETA)
BAR_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]"


class StepClock:
    """The training bar's ETA from steady-state steps: the session's first step (warm-up,
    allocation) is left out of the rate and evaluations are timed apart, so neither the base
    evaluation nor a step that also evaluated inflates the seconds per step."""

    def __init__(self, window: int = 20) -> None:
        self.window = window
        self.steps: list[float] = []
        self.evals: list[float] = []

    def step(self, seconds: float) -> None:
        """A training step's rollout and update (its evaluation not included)."""
        self.steps.append(seconds)

    def evaluation(self, seconds: float) -> None:
        self.evals.append(seconds)

    @property
    def step_s(self) -> float | None:
        """Seconds per step over the recent steps after the first (None: not measured yet)."""
        steady = self.steps[1:][-self.window :]
        return sum(steady) / len(steady) if steady else None

    def eta(self, steps_left: int, evals_left: int) -> float | None:
        """Seconds to the end: the steps left at the steady rate, the evaluations left at
        their mean cost (None until one steady step is measured)."""
        per_step = self.step_s
        if per_step is None:
            return None
        per_eval = sum(self.evals) / len(self.evals) if self.evals else 0.0
        return steps_left * per_step + evals_left * per_eval

    def line(
        self,
        steps_left: int,
        evals_left: int,
        m: dict | None = None,
        last_eval: float | None = None,
    ) -> str:
        """The bar's postfix: ``eta 12:04 (3.1s/step + 4 evals x 20s)``, then the step's
        reward and accuracy and the last held-out accuracy where given."""
        eta = self.eta(steps_left, evals_left)
        if eta is None:
            out = ["eta after the 2nd step" if steps_left else "eta 0:00"]
        else:
            mins, secs = divmod(int(round(eta)), 60)
            h, mins = divmod(mins, 60)
            clock = f"{h}:{mins:02d}:{secs:02d}" if h else f"{mins}:{secs:02d}"
            evals = ""
            if evals_left and self.evals:
                evals = f" + {evals_left} evals x {sum(self.evals) / len(self.evals):.0f}s"
            out = [f"eta {clock} ({self.step_s:.1f}s/step{evals})"]
        if m is not None:
            out += [f"reward {m['reward']:.2f}", f"acc {m['train_acc']:.2f}"]
        if last_eval is not None:
            out.append(f"eval {last_eval:.2f}")
        return ", ".join(out)


def evals_left(step: int, steps: int, every: int) -> int:
    """Evaluations a run at ``step`` still makes: every ``every`` steps and at the end."""
    if every <= 0 or step >= steps:
        return 0
    due = steps // every - step // every
    return due + (steps % every != 0)


def write_json(path: Path, obj: Any) -> None:
    """``obj`` as indented JSON, written atomically (:func:`atomic_write`)."""
    atomic_write(path, json.dumps(obj, indent=1, default=str))


class RunDirInUse(ValueError):
    """Another live process holds the run directory."""


def _in_use(out: Path, holder: str) -> str:
    return (
        f"{out} is in use by another flowzoo run (pid {holder}); wait for it to end, or use "
        "another out_dir"
    )


class RunLock:
    """An exclusive ``fcntl.flock`` on ``DIR/.flowzoo.lock`` while a run is live, so two
    trainings never interleave their checkpoints and metrics in one directory. The kernel
    drops it when the process ends (a kill or a crash leaves no stale lock)."""

    def __init__(self, out: Path) -> None:
        import fcntl

        self.path = out / LOCK_FILE
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # BlockingIOError: held; the holder wrote its pid after locking
            holder = os.read(fd, 64).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise RunDirInUse(_in_use(out, holder)) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self.fd: int | None = fd

    def release(self) -> None:
        """Unlock (the file stays: removing it would let a third process lock a new file
        while a second still waits on the old one)."""
        if self.fd is not None:
            os.ftruncate(self.fd, 0)
            os.close(self.fd)  # closing the descriptor drops the flock
            self.fd = None


def _is_run_config(p: Path) -> bool:
    """``p`` is a config.json a flowzoo run wrote (not a model's or another tool's)."""
    try:
        d = json.loads(p.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(d, dict) and all(k in d for k in RUN_KEYS)


def check_not_foreign(out: Path) -> None:
    """Refuse a non-empty directory that holds no flowzoo run: a run writes, replaces and
    (with ``resume=False``) removes files in its directory, never files it did not write."""
    if not out.exists():
        return
    if not out.is_dir():
        raise ValueError(f"out_dir {out} is a file, not a directory; use another out_dir")
    names = sorted(x.name for x in out.iterdir())
    if not names or set(names) <= PRE_RUN or _is_run_config(out / "config.json"):
        return
    shown = ", ".join(names[:5]) + (f", ... ({len(names)} entries)" if len(names) > 5 else "")
    raise ValueError(
        f"{out} is not empty and holds no flowzoo run (no flowzoo config.json; it has: "
        f"{shown}); a run writes only into a new or empty directory or its own run's, so "
        "nothing there was touched: use another out_dir"
    )


def _shown(v: Any) -> str:
    s = json.dumps(v, sort_keys=True, default=str)
    return s if len(s) <= 60 else s[:57] + "..."


def config_diff(stored: dict, cfg: TrainConfig) -> list[str]:
    """The settings that shape a run (not its length or place: ``NOT_SHAPING``) on which a
    stored config.json and ``cfg`` differ, as ``key: stored -> now``. A key the stored run
    lacks ran at its default; one no longer a setting is a difference."""
    now = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in NOT_SHAPING}
    defaults = dataclasses.asdict(TrainConfig())
    out = []
    for k in sorted(set(now) | (set(stored) - set(NOT_SHAPING))):
        was = stored.get(k, defaults.get(k))
        if k not in now:
            out.append(f"{k}: {_shown(was)} -> (not a setting)")
        elif json.dumps(was, sort_keys=True, default=str) != json.dumps(
            now[k], sort_keys=True, default=str
        ):
            out.append(f"{k}: {_shown(was)} -> {_shown(now[k])}")
    return out


def check_dir(out: Path, cfg: TrainConfig) -> None:
    """Everything that refuses a run directory, read-only (also called before any model is
    loaded, so a refusal comes in seconds, not after a build): a directory that is not a
    flowzoo run, one held by a live run, and (with ``resume``) one holding a run of another
    configuration, naming the settings that differ."""
    check_not_foreign(out)
    lock = out / LOCK_FILE
    if lock.exists():  # probe the lock without creating anything
        import fcntl

        fd = os.open(lock, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "unknown"
            raise RunDirInUse(_in_use(out, holder)) from None
        finally:
            os.close(fd)
    cfg_path = out / "config.json"
    if cfg.resume and cfg_path.exists():
        try:
            stored = json.loads(cfg_path.read_text())
            diff = config_diff(stored, cfg) if isinstance(stored, dict) else ["(not a table)"]
        except (OSError, ValueError) as e:
            raise ValueError(
                f"{cfg_path} cannot be read ({type(e).__name__}: {str(e)[:80]}); the run there "
                "cannot be resumed: use another out_dir, or --resume false to start over there"
            ) from None
        if diff:  # with or without a checkpoint: its records are another run's
            raise ValueError(
                f"{out} holds a run of a different configuration ({'; '.join(diff)}); use "
                "another out_dir, or resume=False to start over there (its checkpoint and "
                "metrics are removed)"
            )


def prepare_dir(out: Path, cfg: TrainConfig) -> RunLock:
    """Check (:func:`check_dir`), lock, then claim a run directory; returns the lock (release
    it when the run ends). Nothing in the directory changes before the checks pass and the
    lock is held; ``resume=False`` then starts the run over, removing ``RUN_STATE``."""
    check_dir(out, cfg)
    out.mkdir(parents=True, exist_ok=True)
    lock = RunLock(out)
    try:
        if not cfg.resume:
            for name in RUN_STATE:
                p = out / name
                if p.is_dir():
                    shutil.rmtree(p)
                elif p.exists():
                    p.unlink()
        cfg_path = out / "config.json"
        write_json(cfg_path, dataclasses.asdict(cfg))
    except BaseException:
        lock.release()
        raise
    return lock


def _umask() -> int:
    """The process's umask, read without changing it where Linux says it (os.umask sets it:
    a file another thread creates meanwhile would get mode 0666)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def umask_modes(root: Path) -> None:
    """Give files under ``root`` written 0600 the mode the umask gives any new file:
    safetensors writes its weights 0600, which the other users of a shared results
    directory (or a model server under another account) cannot read."""
    want = 0o666 & ~_umask()
    if want == 0o600:
        return
    for p in root.rglob("*"):
        if p.is_file() and not p.is_symlink() and p.stat().st_mode & 0o777 == 0o600:
            p.chmod(want)


class RunLog:
    """Appends metrics lines (and tracker scalars) for process 0."""

    def __init__(self, out: Path, main: bool, cfg: TrainConfig | None = None) -> None:
        from flowzoo.agents.train.trackers import open_trackers

        self.out, self.main = out, main
        self.path = out / "metrics.jsonl"
        names = cfg.trackers if (cfg is not None and main) else []
        config = dataclasses.asdict(cfg) if cfg is not None else {}
        self.trackers = open_trackers(names, out, config, out.name) if names else []

    def start(self, resumed_at: int | None) -> None:
        """A resumed run keeps the lines of the steps before ``resumed_at``; a new run none."""
        if not self.main:
            return
        if resumed_at is None:
            if self.path.exists():
                self.path.unlink()
            return
        keep = [r for r in read_metrics(self.path) if r["step"] < resumed_at]
        atomic_write(self.path, "".join(json.dumps(r, default=float) + "\n" for r in keep))

    def append(self, row: dict) -> None:
        if not self.main:
            return
        with self.path.open("a") as f:
            f.write(json.dumps(row, default=float) + "\n")
        if self.trackers:
            from flowzoo.agents.train.trackers import flat_scalars

            scalars, step = flat_scalars(row), int(row.get("step", 0)) + 1
            for t in self.trackers:
                t.log(scalars, step)

    def close(self, status: str = "completed") -> None:
        for t in self.trackers:
            t.finish(status)
        self.trackers = []


def _tokens(turn) -> int:
    """A turn's length in tokens: its ids where the policy is ours, the server's log-probs
    for a served role."""
    return len(turn.completion_ids) or len(turn.logprobs)


def step_metrics(step: int, batch: Batch, per_policy: dict, adv_stats: dict) -> dict:
    """The metrics line of one step, read from its batch (every turn it trained on, whichever
    round or rollout shape played it): reward and accuracy; per role the reward, response
    length, truncation, entropy estimate, the update's statistics and gradient-mass share,
    parse-flag and tamper rates; cosines between role gradients; group statistics."""
    records, turns, rewards = batch.records, batch.turns, batch.rewards
    role_rows: dict[str, dict[str, float]] = {}
    by_role: dict[str, list[int]] = defaultdict(list)
    for i, t in enumerate(turns):
        by_role[t.role].append(i)
    norms = {}
    for role, idx in by_role.items():
        ts = [turns[i] for i in idx]
        row = {
            "reward": float(np.mean([rewards[i] for i in idx])),
            "role_signal": float(np.mean([t.role_reward for t in ts])),
            "resp_len": float(np.mean([_tokens(t) for t in ts])),
            "entropy_est": float(np.mean([-np.mean(t.logprobs) for t in ts if t.logprobs]))
            if any(t.logprobs for t in ts)
            else 0.0,
            # cut at the budget: a turn that produced tokens and no EOS (a failed call has none)
            "truncated_frac": float(
                np.mean([not t.finished and bool(t.completion_ids or t.logprobs) for t in ts])
            ),
        }
        role_rows[role] = row
        if ts[0].policy.startswith("frozen:"):  # played by a fixed player: no gradient at all
            row["frozen"] = True
            continue
        upd = per_policy.get(ts[0].policy, {}).get("roles", {}).get(role, {})
        row.update({k: float(v) for k, v in upd.items()})
        norms[role] = row.get("grad_norm", 0.0)
    tot = sum(norms.values())
    for role in norms:
        role_rows[role]["grad_share"] = norms[role] / tot if tot > 0 else 0.0
    n = batch.role_turns
    return {
        "step": step,
        "reward": float(
            np.mean([r.rewards.get(r.turns[0].agent, 0.0) for r in records if r.turns])
        ),
        "train_acc": float(np.mean([r.correct for r in records])),
        "roles": role_rows,
        "cosine": {k: v for p in per_policy.values() for k, v in p.get("cosine", {}).items()},
        "policies": {n: p.get("policy", {}) for n, p in per_policy.items()},
        "adv": adv_stats,
        # what the step sampled (a compute-matched control is matched on these)
        "sampled": {
            "turns": len(turns),
            "tokens": int(sum(_tokens(t) for t in turns)),
        },
        "flag_rate": {r: batch.flagged[r] / max(1, n[r]) for r in n},
        # programs caught writing to their judge's channel or faking an exit, per role
        "tamper_rate": {r: batch.tampered[r] / max(1, n[r]) for r in n},
    }


def summary(
    cfg: TrainConfig,
    out: Path,
    status: str,
    steps_done: int,
    wall_s: float,
    resumed: bool,
    eval_curve: list[tuple[int, float]],
    error: str | None = None,
) -> dict:
    """The run's summary: how it ended (``completed``, ``interrupted``, ``diverged: ...``,
    ``failed: ...``), the curve's reading and the mean gradient-mass share per role."""
    s: dict[str, Any] = {
        "status": status,
        "steps_done": steps_done,
        "wall_s": round(wall_s, 2),
        "resumed": resumed,
        "env": cfg.env,
        "policy": cfg.policy,
        "param": cfg.param,
        "algo": cfg.algo,
        "model": cfg.model,
    }
    if error:
        s["error"] = error
    if status == "completed":
        s["weights"] = str(out / "final")
    metrics = read_metrics(out / "metrics.jsonl")
    evals = evals_of(metrics)
    if eval_curve and evals:
        s["curve"] = trajectory(evals, cfg.cliff_window, cfg.cliff_margin).as_dict()
        s["eval_curve"] = eval_curve
        first, last = evals[0][1], evals[-1][1]
        s["eval"] = {
            "problems": first.get("episodes"),
            "samples": first.get("samples", 1),
            "temperature": first.get("temperature"),
            "greedy_base": (first.get("greedy") or {}).get("accuracy"),
            "greedy_last": (last.get("greedy") or {}).get("accuracy"),
            "cost_s": round(
                sum(float((e.get("cost") or {}).get("wall_s", 0)) for _, e in evals), 1
            ),
            # each role's behaviour rate (the workflow's menu, docs/testbed.md), first and last
            "behaviour_base": first.get("behaviour") or {},
            "behaviour_last": last.get("behaviour") or {},
        }
        ood = [(step, e["ood"]) for step, e in evals if "ood" in e]
        if ood:
            # the second number: structure never trained, read by the same rules
            t = trajectory(ood, cfg.cliff_window, cfg.cliff_margin).as_dict()
            s["ood"] = {
                k: t[k] for k in ("base", "base_ci", "final", "final_ci", "gain", "gain_ci")
            }
            s["ood"]["problems"] = ood[0][1].get("episodes")
    s["mean_grad_share"] = mean_grad_share(metrics)
    return s
