"""The cliff early warning wired into a run: each step's metrics line goes to the monitor
(:class:`flowzoo.analysis.warning.Monitor`, the class the committed evaluation replays), its
warnings are printed on the progress line and recorded, and the chosen response applied.

Responses (``monitor_response``):

- ``warn`` (default): print, record in the step's ``metrics.jsonl`` line (``monitor``) and
  in ``summary.json`` (``monitor`` and ``warnings``). Nothing the run does changes.
- ``stop``: also end the run cleanly after the warning's step: a checkpoint there, ``final/``
  written, status ``stopped early by the monitor``. Run again, it stops there again.
- ``rollback``: also restore the last checkpoint saved before the warning (weights,
  optimizer, RNG, eval curve; a fresh run saves one at step 0 so there always is one) and
  continue with every policy's lr multiplied by ``monitor_rollback_lr``; the discarded
  steps' lines leave ``metrics.jsonl`` (their warning and evaluations are kept in the
  rollback's record, on the first line written after it, and in the summary). At most
  ``MAX_ROLLBACKS``; after that a warning only warns, and says so.

Why records on the lines: a resumed run rebuilds the monitor, its rollbacks (and so its
lr) and a stop from the lines it keeps, so a resume continues exactly as an unbroken run.
Under torchrun only ``warn`` is taken: every process would have to agree on a rollback.
"""

from __future__ import annotations

from typing import Any

from flowzoo.agents.runs import runlog
from flowzoo.agents.train import checkpoint
from flowzoo.analysis.warning import Alarm, Monitor, Thresholds

#: the status of a run the monitor stopped
STOPPED = "stopped early by the monitor"
#: rollbacks one run may make; later warnings only warn
MAX_ROLLBACKS = 3


class Watch:
    """One run's early warning: :meth:`start` once the run's records are open, then per
    step :meth:`observe` (before the line is written) and :meth:`respond` (after)."""

    def __init__(self, tr: Any) -> None:  # the run's Trainer (imported by it, not here)
        cfg = tr.cfg
        self.tr = tr
        self.response = cfg.monitor_response
        if self.response != "warn" and tr.dist.world > 1:
            raise ValueError(
                f"monitor_response {self.response!r} needs a single process (this run has "
                f"{tr.dist.world}: each would have to agree on it); valid under torchrun: warn"
            )
        self.thresholds = Thresholds.of(cfg)
        self.monitor = Monitor(self.thresholds)
        #: every warning of the run, those of discarded steps included
        self.alarms: list[Alarm] = []
        self.rollbacks: list[dict[str, Any]] = []
        #: the warning that stopped the run (None: not stopped)
        self.stopped: Alarm | None = None
        self._act: list[Alarm] | None = None
        #: rollbacks whose record is on no kept line yet (the next line written gets them)
        self._pending: list[dict[str, Any]] = []
        self._replayed = False

    # ---------------------------------------------------------------- the run's hooks
    def start(self) -> None:
        """Before the first step of this session: a resumed run's state rebuilt (a stop
        recorded there ends it at once); a fresh run that may roll back saves a checkpoint
        at step 0 (its base evaluation done), the one an early warning rolls back to."""
        self._replay()
        if self.response == "rollback" and self.tr.step == 0 and not self.tr.ckpt_path.exists():
            self.tr.save_checkpoint()

    def _replay(self) -> None:
        """Once, at the first hook of the session: the monitor, its warnings, rollbacks (and
        the lr they lowered) and a stop, rebuilt from the lines the run kept (none for a
        fresh run; a line left pending by an interrupt is told after them)."""
        if self._replayed:
            return
        self._replayed = True
        for line in self._kept():
            self.monitor.observe(line)
            rec = line.get("monitor") or {}
            for rb in rec.get("rollbacks", []):
                self.rollbacks.append(rb)
                self._scale_lr(float(rb["lr_factor"]))
                self.alarms += [Alarm.of(a) for a in rb["warnings"]]
            if rec.get("response") != "rollback":  # those are in their rollback's record
                self.alarms += [Alarm.of(a) for a in rec.get("warnings", [])]
            if rec.get("response") == "stop" and self.response == "stop":
                self.stopped = Alarm.of(rec["warnings"][0])

    def observe(self, m: dict) -> None:
        """Feed step line ``m`` to the monitor; its warnings (and the rollbacks no kept line
        records yet) are recorded on the line and printed."""
        self._replay()
        new = self.monitor.observe(m)
        rec: dict[str, Any] = {}
        if self._pending:
            rec["rollbacks"], self._pending = self._pending, []
        if new:
            self.alarms += new
            act = self.response
            if act == "rollback" and len(self.rollbacks) >= MAX_ROLLBACKS:
                act = f"warn ({MAX_ROLLBACKS} rollbacks made)"
            elif act in ("stop", "rollback"):
                self._act = new
            rec["warnings"] = [a.as_dict() for a in new]
            rec["response"] = act
            for a in new:
                self._say(f"{a.text()}; response: {act}")
        if rec:
            m["monitor"] = rec

    def respond(self, log: runlog.RunLog) -> bool:
        """After the warning's line is written: stop or roll back (True: the step is done,
        no periodic checkpoint after it)."""
        act, self._act = self._act, None
        if not act:
            return False
        tr = self.tr
        if self.response == "stop":
            self.stopped = act[0]
            tr.save_checkpoint()  # run again, it resumes here and stops here again
            return True
        at, curve = tr.step, list(tr.eval_curve)
        found, _ = checkpoint.load(tr)  # weights, optimizer, RNG, step and eval curve
        if not found:  # its checkpoint removed by hand while the run went on
            self._say("no checkpoint to roll back to: the warning only warns")
            return False
        to = tr.step
        factor = float(tr.cfg.monitor_rollback_lr)
        self._scale_lr(factor)
        log.start(to)  # the discarded steps' lines go; the rollback's record keeps theirs
        rb = {
            "warnings": [a.as_dict() for a in act],
            "at_step": at,
            "to_step": to,
            "discarded_steps": at - to,
            "discarded_evals": [[int(s), float(a)] for s, a in curve if s > to],
            "lr_factor": factor,
            "lr_scale": factor ** (len(self.rollbacks) + 1),
        }
        self.rollbacks.append(rb)
        self.monitor = Monitor(self.thresholds)
        kept = self._kept()
        for line in kept:
            self.monitor.observe(line)
        on_lines = [r for line in kept for r in (line.get("monitor") or {}).get("rollbacks", [])]
        self._pending = [r for r in self.rollbacks if r not in on_lines]  # discarded with
        if tr._bar is not None:  # their lines: told again on the next line written
            tr._bar.n = to
            tr._bar.refresh()
        self._say(
            f"rolled back from step {at} to the checkpoint at step {to}; every policy's lr "
            f"is now x{rb['lr_scale']:g} ({len(self.rollbacks)} of {MAX_ROLLBACKS} rollbacks)"
        )
        return True

    def postfix(self) -> str:
        """The progress line's note of the latest warning ("" when none)."""
        if not self.alarms:
            return ""
        a = self.alarms[-1]
        return f", WARNING {a.signal} {a.value:.3g} > {a.threshold:.3g} at step {a.step}"

    def record(self) -> dict[str, Any]:
        """The summary's ``monitor`` entry."""
        out: dict[str, Any] = {
            "response": self.response,
            "thresholds": self.thresholds.as_dict(),
            "warnings": [a.as_dict() for a in self.alarms],
        }
        if self.rollbacks:
            out["rollbacks"] = self.rollbacks
        if self.stopped is not None:
            out["stopped_early"] = {"warning": self.stopped.as_dict(), "at_step": self.tr.step}
        return out

    # ---------------------------------------------------------------- helpers
    def _kept(self) -> list[dict]:
        return runlog.own_metrics(self.tr.out / "metrics.jsonl")

    def _scale_lr(self, factor: float) -> None:
        for name in self.tr.learner.base_lr:
            self.tr.learner.base_lr[name] *= factor

    def _say(self, msg: str) -> None:
        self.tr.warnings.append(msg)
        if self.tr.dist.main:
            print(f"\nflowzoo: EARLY WARNING: {msg}", file=self.tr.console)
