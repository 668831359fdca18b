"""The judge of stdin/stdout tests (the study's competitive-programming format).

The program runs in the sandbox (``stdio_runner.py``) with each case's input on stdin; only
the inputs go there. Outputs come back as data and are compared *here*, in the trusted
process, with the expected outputs the program never sees - the way LiveCodeBench grades
stdio: whitespace-normalised lines (outer blank lines and each line's surrounding spaces
ignored, tokens split on whitespace), numbers equal as decimals (``1.0`` == ``1.00``), and
a float tolerance only where the task gives one.

Cost control for tasks with hundreds of cases: the runner stops at the first case that
crashes or times out, cases go in growing chunks (8, 32, 128...) so a wrong output ends the
run after its chunk (``early_stop``, the study's default), and a per-task time budget bounds
the whole verdict; cases left unrun fail with the reason.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path

from flowzoo.sandbox import ExecResult, Job
from flowzoo.tasks.code.judge import CaseResult, RunRecord, channel_lines
from flowzoo.tasks.code.wire import shortened

STDIO_RUNNER_SOURCE = Path(__file__).with_name("stdio_runner.py").read_text()
FIRST_CHUNK = 8
CHUNK_GROWTH = 4
#: a case's output preview in a verdict (longer outputs keep a digest, so two different
#: outputs never share a preview: Voting's behaviour classes compare these)
PREVIEW_CHARS = 120
#: what one run may send back (the sandboxes cap a run's stdout at 1 MiB by default): a chunk
#: whose outputs would overflow it stops early and the rest go in the next run
CHANNEL_BYTES = 768 << 10


def _lines(text: str) -> list[str]:
    return [ln.strip() for ln in text.strip().splitlines()]


def _numbers_match(a: str, b: str, tol: float | None) -> bool:
    try:
        x, y = Decimal(a), Decimal(b)
        if not (x.is_finite() and y.is_finite()):
            return False
        if tol is None:
            return x == y
        return abs(x - y) <= Decimal(repr(tol)) * max(Decimal(1), abs(y))
    except (InvalidOperation, ArithmeticError, ValueError):
        return False


def outputs_match(got: str, expected: str, float_tol: float | None = None) -> bool:
    """Whether a program's stdout matches the expected output (see the module docstring);
    ``float_tol``: numbers may differ by ``tol * max(1, |expected|)``."""
    g, e = _lines(got), _lines(expected)
    if len(g) != len(e):
        return False
    for a, b in zip(g, e, strict=True):
        if a == b:
            continue
        ta, tb = a.split(), b.split()
        if len(ta) != len(tb):
            return False
        if any(x != y and not _numbers_match(x, y, float_tol) for x, y in zip(ta, tb, strict=True)):
            return False
    return True


def preview(text: str) -> str:
    """A case's output as a verdict records it: normalised, short, distinct per output."""
    return shortened("\n".join(_lines(text)), PREVIEW_CHARS)


@dataclass
class StdioRun(RunRecord):
    """One program judged against one task's stdin/stdout cases, chunk by chunk:
    :meth:`job` gives the next sandbox run, :meth:`feed` takes its result (the same
    protocol as :class:`flowzoo.tasks.code.judge.JudgeRun`)."""

    tests: tuple[tuple[str, str], ...]
    program: str
    case_timeout_s: float = 4.0
    #: seconds of sandbox time for the whole task (always bounded)
    time_budget_s: float = 60.0
    early_stop: bool = True
    float_tol: float | None = None
    #: bytes of stdout a case may print (more: the case fails as ``too_big``)
    max_output: int = 512 << 10
    cases: list[CaseResult] = field(default_factory=list)
    spent_s: float = 0.0
    _chunk: int = 0
    #: cases the last job asked for, and whether its runner reached its end line
    _asked: int = 0
    _finished: bool = False

    def __post_init__(self) -> None:
        self.done = not self.tests
        self._chunk = FIRST_CHUNK if self.early_stop else len(self.tests)

    def _budget_left(self) -> float:
        return self.time_budget_s - self.spent_s

    def job(self, timeout_s: float) -> Job | None:
        """The next chunk as a sandbox run; ``timeout_s`` bounds the run (also the budget)."""
        if self.done:
            return None
        start = len(self.cases)
        inputs = [t[0] for t in self.tests[start : start + self._chunk]]
        spec = {
            "inputs": inputs,
            "case_timeout": float(self.case_timeout_s),
            "max_output": int(self.max_output),
            "stop_on_error": bool(self.early_stop),
            "channel_bytes": CHANNEL_BYTES,
        }
        limit = min(
            max(timeout_s, len(inputs) * (self.case_timeout_s + 0.1) + 2.0), self._budget_left()
        )
        files = {"solution.py": self.program, "cases.json": json.dumps(spec)}
        self._asked = len(inputs)
        return Job(STDIO_RUNNER_SOURCE, files=files, timeout_s=max(0.5, limit))

    def feed(self, res: ExecResult) -> None:
        """Take a chunk's outputs, compare them, decide whether to run the next chunk."""
        self.rounds += 1
        self.spent_s += res.wall_s  # this run's own time, not the batch's queue
        self.status, self.stderr = res.status, res.stderr[-500:]
        start = len(self.cases)
        outs = self._parse(res, self._asked)
        self.answered = len(outs)
        for k, (status, out, err) in enumerate(outs):
            expected = self.tests[start + k][1]
            if status == "ok":
                ok = outputs_match(out, expected, self.float_tol)
                self.cases.append(CaseResult(ok, preview(out), None if ok else "wrong_output"))
            else:
                self.cases.append(CaseResult(False, preview(out) or None, err or status))
        failed = any(not c.passed for c in self.cases)
        if self.tamper or self.load_error is not None or (failed and self.early_stop):
            self.done = True
        elif len(outs) < self._asked and not self._finished:  # killed, out of time
            self.done = True
        elif len(self.cases) >= len(self.tests):
            self.done = True
        elif self._budget_left() <= 0.5:
            self.done = True
        self._chunk *= CHUNK_GROWTH

    def _parse(self, res: ExecResult, n: int) -> list[tuple[str, str, str]]:
        """The runner's lines, strictly: anything it would not write is tampering."""
        lines = channel_lines(res)
        outs: list[tuple[str, str, str]] = []
        finished = False
        try:
            for i, line in enumerate(lines):
                msg = json.loads(line)
                if type(msg) is not dict or finished:
                    raise ValueError("unexpected line")
                if set(msg) == {"load"} and i == 0 and len(lines) == 1:
                    self.load_error = str(msg["load"])[:100]
                    return []
                if set(msg) == {"done"}:
                    if msg["done"] != len(outs) or (not outs and n):
                        raise ValueError("bad end of outputs")
                    finished = True
                    continue
                if set(msg) != {"i", "s", "o", "e"} or msg["i"] != len(outs) or len(outs) >= n:
                    raise ValueError("output for a case not asked, or out of order")
                if msg["s"] not in ("ok", "error", "timeout", "too_big"):
                    raise ValueError("unknown case status")
                if type(msg["o"]) is not str or type(msg["e"]) is not str:
                    raise ValueError("malformed case")
                outs.append((msg["s"], msg["o"], msg["e"][:100]))
        except (ValueError, TypeError, KeyError, RecursionError):
            self.tamper.append("channel_forged")
            return []
        if not finished and res.exit_code == 0 and not res.truncated:
            self.tamper.append("early_exit")
            return []
        self._finished = finished
        return outs

    def results(self) -> list[CaseResult]:
        """Per-case results; every case not run fails with the reason it was not."""
        n = len(self.tests)
        if self.load_error is not None:
            return [CaseResult(False, None, f"load:{self.load_error}")] * n
        if self.tamper:
            return [CaseResult(False, None, "tamper")] * n
        if len(self.cases) < n:
            failed = any(not c.passed for c in self.cases)
            if failed and self.early_stop:
                why = "not_run:early_stop"
            elif self.answered < self._asked:
                why = f"lost:{self.status}"
            else:
                why = "not_run:time_budget"
            return self.cases + [CaseResult(False, None, why)] * (n - len(self.cases))
        return list(self.cases)
