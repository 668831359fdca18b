"""The code judge: decides verdicts where candidate code cannot reach.

Why: a candidate that runs in the same interpreter as its tests can forge the verdict (find
the results marker, patch the harness, return an object equal to everything, read the
expected values from memory). So the two are split:

- the **candidate process** (``runner.py``, in the sandbox) holds the program and a list of
  calls — names and plain-data arguments — and answers each with plain data;
- the **judge** (here, in the trusted process; it never executes candidate code) runs the
  task's trusted test code with every name the program defines replaced by a proxy
  (:class:`RemoteFunction`), decodes the answers strictly (``wire.decode``: exact builtins
  only) and compares with type-strict equality (every ``==``/``!=``/``in`` in the test code
  is rewritten to ``wire.strict_eq``/``strict_in``, reached by names no row and no
  candidate can spell). Float tolerance applies only where the
  test code itself says so (``abs(a - b) < eps``, ``math.isclose``).

Calls are discovered by replaying the test code: a first pass records every call the tests
make (an unknown result is an absorbing :class:`Pending` placeholder), the sandbox answers
them all in one run, and the replay is repeated with the answers until no call is unknown
(tests whose later arguments depend on earlier results take extra rounds; a bounded number).
The final replay, with every answer known, is the verdict. Early exit, crash, timeout or a
broken channel fail the calls left unanswered; a channel carrying anything but what the
runner writes is flagged as tampering and fails the whole run.
"""

from __future__ import annotations

import builtins
import importlib.util
import json
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flowzoo.sandbox import ExecResult, Job
from flowzoo.tasks.code.testcode import CHECK, HELPERS, JudgeSpec, Pending
from flowzoo.tasks.code.wire import RemoteRef, WireError, decode, encode, shortened

RUNNER_SOURCE = Path(__file__).with_name("runner.py").read_text()
#: the tamper signals a verdict can carry (``details["tamper"]``)
TAMPER_SIGNALS = ("channel_forged", "undecodable_value", "early_exit")


class CandidateError(Exception):
    """The candidate raised an exception that is not a builtin ``Exception`` class."""


class CandidateTimeout(Exception):
    """A call to the candidate overran its time limit."""


class CandidateLost(Exception):
    """The call got no answer (the program exited, crashed, timed out or broke the channel)."""


class JudgeLimit(Exception):
    """The test code made more calls, or took longer, than the judge allows."""


class _Stop(BaseException):
    """An argument depends on a result not known yet: this case needs another round."""


#: exceptions that steer control flow where they are raised: a candidate's becomes a plain
#: CandidateError in the trusted test code
_FLOW = (StopIteration, StopAsyncIteration)


@dataclass(frozen=True)
class Outcome:
    """What one call returned, as the judge sees it."""

    kind: str  # value | ref | raise | timeout | too_big | lost | load
    value: Any = None
    name: str = ""

    def result(self) -> Any:
        if self.kind == "value":
            return self.value
        if self.kind == "ref":
            return RemoteRef(self.value)
        if self.kind == "raise":
            cls = getattr(builtins, self.name, None)
            err: Exception = CandidateError(self.name)
            # control flow never crosses: a StopIteration re-raised inside ``all(map(f, xs))``
            # would end the iteration early and turn a failing test into a pass
            if isinstance(cls, type) and issubclass(cls, Exception) and not issubclass(cls, _FLOW):
                try:
                    err = cls(f"raised by the candidate: {self.name}")
                except TypeError:  # a class that needs other arguments
                    pass
            raise err
        if self.kind == "timeout":
            raise CandidateTimeout("the call timed out")
        if self.kind == "load":
            raise CandidateError(f"load:{self.name}")
        raise CandidateLost(self.name or self.kind)

    def summary(self) -> str:
        if self.kind == "value":
            return repr(self.value)
        if self.kind == "ref":  # a handle: its type, as the candidate's process named it
            return f"ref:{self.name}"
        return f"{self.kind}:{self.name}"


# ------------------------------------------------------------------------------ replay
class _Session:
    """One replay pass: answers calls from what is known, records the calls it makes."""

    def __init__(self, known: dict[str, list[Outcome]], max_calls: int, deadline: float) -> None:
        self.known = known
        self.calls: list[list] = []
        self.keys: list[str] = []
        self.seen: dict[str, int] = defaultdict(int)
        self.pending = False
        self.case_outcomes: list[Outcome] = []
        self.max_calls = max_calls
        self.deadline = deadline

    def call(self, name: str, args: tuple, kwargs: dict) -> Any:
        if len(self.calls) >= self.max_calls or time.monotonic() > self.deadline:
            raise JudgeLimit("the tests made too many calls or took too long")
        try:
            enc = [name, [encode(a) for a in args], {k: encode(v) for k, v in kwargs.items()}]
        except TypeError:
            if _has_pending(args) or _has_pending(tuple(kwargs.values())):
                self.pending = True
                raise _Stop() from None
            raise
        key = json.dumps(enc, sort_keys=True)
        n = self.seen[key]
        self.seen[key] = n + 1
        self.calls.append(enc)
        self.keys.append(key)
        outs = self.known.get(key, ())
        if n < len(outs):
            self.case_outcomes.append(outs[n])
            return outs[n].result()
        self.pending = True
        return Pending()


def _has_pending(values: tuple, depth: int = 0) -> bool:
    for v in values:
        if type(v) is Pending:
            return True
        if depth < 8 and type(v) in (list, tuple, set, frozenset):
            if _has_pending(tuple(v), depth + 1):
                return True
        if depth < 8 and type(v) is dict and _has_pending(tuple(v.values()), depth + 1):
            return True
    return False


class RemoteFunction:
    """A name the candidate's program defines, as the test code sees it: calling it asks the
    candidate process (through the judge's round trip) and returns plain data."""

    def __init__(self, name: str, session: _Session) -> None:
        self._name, self._session = name, session

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._session.call(self._name, args, kwargs)

    def __repr__(self) -> str:
        return f"<candidate function {self._name}>"


def _fresh_builtins() -> dict:
    """Builtins whose ``import random`` gives a fresh, seeded module each pass, so tests that
    draw random arguments make the same calls in every replay."""
    fresh: dict[str, Any] = {}

    def _import(name, globals=None, locals=None, fromlist=(), level=0):
        if name == "random" and level == 0:
            if "random" not in fresh:
                spec = importlib.util.find_spec("random")
                mod = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(mod)
                mod.seed(0)
                fresh["random"] = mod
            return fresh["random"]
        return builtins.__import__(name, globals, locals, fromlist, level)

    b = dict(vars(builtins))
    b["__import__"] = _import
    return b


@dataclass
class CaseResult:
    passed: bool
    value: str | None
    error: str | None


#: a replay pass's bounds: calls the tests may make, and seconds (Python bytecode is
#: interrupted at the limit; the isolated replay is killed shortly after it)
REPLAY_CALLS = 20_000
REPLAY_LIMIT_S = 60.0


def replay(
    spec: JudgeSpec,
    known: dict[str, list[Outcome]],
    max_calls: int = REPLAY_CALLS,
    time_limit_s: float = REPLAY_LIMIT_S,
) -> tuple[list[CaseResult | None], _Session]:
    """Run the trusted tests once against the known answers; a case is ``None`` while it
    still waits for an answer (or depends on one)."""
    session = _Session(known, max_calls, time.monotonic() + time_limit_s)
    ns: dict[str, Any] = {"__name__": "__judge__", "__builtins__": _fresh_builtins()}
    if spec.prompt is not None:
        try:
            exec(spec.prompt, ns)
        except Exception:
            pass
    for name in spec.modules:
        try:
            ns[name] = importlib.import_module(name)
        except ImportError:
            pass
    for name in spec.remote:
        ns[name] = RemoteFunction(name, session)
    # the judge's helpers last, by names no row or candidate can spell (``testcode._hidden``)
    ns.update(HELPERS)
    ns[CHECK] = lambda v: session.pending or bool(v)
    results: list[CaseResult | None] = []
    timer = _Deadline(time_limit_s)
    try:
        with timer:
            setup_err = _run(spec.setup, ns, session)
            for code in spec.cases:
                if timer.expired:
                    results.append(CaseResult(False, None, "JudgeLimit"))
                else:
                    results.append(setup_err or _run(code, ns, session, case=True))
    except JudgeLimit:  # the deadline struck between two cases
        pass
    results += [CaseResult(False, None, "JudgeLimit")] * (spec.n_cases - len(results))
    return results, session


class _Deadline:
    """Bounds one replay pass of the (trusted) test code even where it never calls the
    candidate, e.g. an endless loop in a dataset's test: past the limit the replaying thread
    gets an asynchronous :class:`JudgeLimit`; a pending one is cleared on exit."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.expired = False
        self._lock = threading.Lock()
        self._active = False

    def _fire(self) -> None:
        with self._lock:
            if self._active:
                self.expired = True
                _async_raise(self._tid, JudgeLimit)

    def __enter__(self) -> _Deadline:
        self._tid = threading.get_ident()
        self._active = True
        self._timer = threading.Timer(self.seconds, self._fire)
        self._timer.daemon = True
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()
        with self._lock:
            self._active = False
            if self.expired:
                _async_raise(self._tid, None)  # clear one not delivered yet


def _async_raise(tid: int, exc: type[BaseException] | None) -> None:
    import ctypes

    arg = ctypes.py_object(exc) if exc is not None else None
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(tid), arg)


def _run(code, ns: dict, session: _Session, case: bool = False) -> CaseResult | None:
    session.pending = False
    session.case_outcomes = []
    try:
        exec(code, ns)
        err = None
    except _Stop:
        return None
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # the trusted test failed (or the candidate's answer raised)
        err = str(e) if type(e) is CandidateError else type(e).__name__
    if session.pending:
        return None
    if not case:
        return None if err is None else CaseResult(False, None, f"setup:{err}")
    value = None
    if session.case_outcomes:
        value = shortened(", ".join(o.summary() for o in session.case_outcomes), 200)
    return CaseResult(err is None, value, err)


# ------------------------------------------------------------------------------ a run
def channel_lines(res: ExecResult) -> list[str]:
    """The complete lines a runner wrote (a last line cut by the output cap is dropped)."""
    lines = res.stdout.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    elif lines and res.truncated:
        lines.pop()
    return lines


@dataclass(kw_only=True)
class RunRecord:
    """What every judge run (call tests here, stdin/stdout tests in ``stdio.py``) records
    about its sandbox rounds; the verdict's details are read from it."""

    tamper: list[str] = field(default_factory=list)
    rounds: int = 0
    #: answers the last round gave (0 with some asked: the program gave no results)
    answered: int = 0
    status: str = ""
    stderr: str = ""
    load_error: str | None = None
    done: bool = False


@dataclass
class JudgeRun(RunRecord):
    """One program judged against one task's tests, round by round: :meth:`job` gives the
    next sandbox run (or None when decided), :meth:`feed` takes its result."""

    spec: JudgeSpec
    program: str
    call_timeout_s: float = 2.0
    load_timeout_s: float = 5.0
    max_rounds: int = 4
    known: dict[str, list[Outcome]] = field(default_factory=dict)
    cases: list[CaseResult | None] = field(default_factory=list)
    #: replay in a process of its own (:mod:`replay_worker`), which a deadline can always end
    isolated: bool = True
    _calls: list = field(default_factory=list)
    _keys: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._replay()

    def _replay(self) -> None:
        if not (self.isolated and self.spec.source):
            self.cases, session = replay(self.spec, self.known)
            self._calls, self._keys = session.calls, session.keys
            return
        from flowzoo.tasks.code.replay_worker import ReplayKilled, pool

        try:
            got = pool().replay(self.spec.source, self.known, REPLAY_CALLS, REPLAY_LIMIT_S)
            # (module globals read at call time: a test shortens the limit)
        except ReplayKilled:  # held past its limit (C-level work or a blocking call): killed
            self.cases = [CaseResult(False, None, "JudgeLimit")] * self.spec.n_cases
            self._calls, self._keys = [], []
            self.status = "replay_killed"  # every case fails; not tampering: no one can tell
            self.done = True
            return
        self.cases = [None if c is None else CaseResult(*c) for c in got["cases"]]
        self._calls, self._keys = got["calls"], got["keys"]

    def job(self, timeout_s: float) -> Job | None:
        if self.done:
            return None
        calls = self._calls
        spec = {
            "calls": calls,
            "call_timeout": float(self.call_timeout_s),
            "load_timeout": float(self.load_timeout_s),
        }
        files = {"solution.py": self.program, "calls.json": json.dumps(spec)}
        return Job(RUNNER_SOURCE, files=files, timeout_s=timeout_s)

    def feed(self, res: ExecResult) -> None:
        """Take a sandbox run's answers; replay; decide whether another round is needed."""
        self.rounds += 1
        self.status, self.stderr = res.status, res.stderr[-500:]
        keys = self._keys
        answers = self._parse(res, len(keys))
        self.answered = sum(a.kind != "lost" for a in answers)
        seen: dict[str, int] = defaultdict(int)
        for key, out in zip(keys, answers, strict=False):
            n = seen[key]
            seen[key] = n + 1
            have = self.known.setdefault(key, [])
            if n >= len(have):
                have.append(out)
        self._replay()
        if all(c is not None for c in self.cases) or self.rounds >= self.max_rounds:
            self.done = True

    def _parse(self, res: ExecResult, n: int) -> list[Outcome]:
        """The runner's answers, strictly: anything it would not write is tampering."""
        lost = Outcome("lost", name=res.status)
        lines = channel_lines(res)
        answers: list[Outcome | None] = [None] * n
        finished = False
        try:
            for i, line in enumerate(lines):
                msg = json.loads(line)
                if type(msg) is not dict or finished:
                    raise WireError("unexpected line")
                if "load" in msg and i == 0 and len(lines) == 1 and type(msg["load"]) is str:
                    self.load_error = msg["load"][:100]
                    return [Outcome("load", name=self.load_error)] * n
                if "done" in msg:
                    if msg != {"done": n} or any(a is None for a in answers):
                        raise WireError("bad end of answers")
                    finished = True
                    continue
                answers[self._index(msg, n, answers)] = self._outcome(msg)
        except (ValueError, RecursionError, TypeError, KeyError) as e:
            kind = "undecodable_value" if isinstance(e, WireError) and "value" in str(e) else None
            self._flag(kind or "channel_forged")
            return [Outcome("lost", name="tamper")] * n
        if not finished and res.exit_code == 0 and not res.truncated:
            self._flag("early_exit")
            return [Outcome("lost", name="tamper")] * n
        return [a if a is not None else lost for a in answers]

    @staticmethod
    def _index(msg: dict, n: int, answers: list) -> int:
        i = msg.get("i")
        if type(i) is not int or not 0 <= i < n or answers[i] is not None:
            raise WireError("answer for a call not asked, or twice")
        if i > 0 and answers[i - 1] is None:
            raise WireError("answers out of order")
        return i

    @staticmethod
    def _outcome(msg: dict) -> Outcome:
        keys = set(msg) - {"i"}
        if keys == {"v"}:
            try:
                return Outcome("value", decode(msg["v"]))
            except WireError as e:
                raise WireError(f"value: {e}") from None
        if keys == {"r", "t"} and type(msg["r"]) is int and type(msg["t"]) is str:
            return Outcome("ref", msg["r"], name=msg["t"][:100])
        if keys == {"e"} and type(msg["e"]) is str:
            return Outcome("raise", name=msg["e"][:100])
        if keys == {"x"} and msg["x"] in ("timeout", "too_big"):
            return Outcome(msg["x"])
        raise WireError("malformed answer")

    def _flag(self, signal: str) -> None:
        if signal not in self.tamper:
            self.tamper.append(signal)

    def results(self) -> list[CaseResult]:
        """Per-case results; a case still waiting after the last round fails, and so does
        every case of a program that did not load."""
        if self.load_error is not None:
            return [CaseResult(False, None, f"load:{self.load_error}")] * self.spec.n_cases
        return [
            c if c is not None else CaseResult(False, None, "judge_incomplete") for c in self.cases
        ]
