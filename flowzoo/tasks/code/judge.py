"""The code judge: decides verdicts where candidate code cannot reach.

Why: a candidate that runs in the same interpreter as its tests can forge the verdict (find
the results marker, patch the harness, return an object equal to everything, read the
expected values from memory). So the two are split:

- the **candidate process** (``runner.py``, in the sandbox) holds the program and a list of
  calls — names and plain-data arguments — and answers each with plain data;
- the **judge** (here; it never executes candidate code) decodes the answers strictly
  (``wire.decode``: exact builtins only) and hands them, as plain data, to the **replay**
  (``replay_worker.py``): the task's test code run with every name the program defines
  replaced by a proxy (``RemoteFunction``) and compared with type-strict equality (every
  ``==``/``!=``/``in`` in the test code is rewritten to ``wire.strict_eq``/``strict_in``,
  reached by names no row and no candidate can spell). Float tolerance applies only where
  the test code itself says so (``abs(a - b) < eps``, ``math.isclose``).

The row's test code is untrusted too (a file someone else wrote), so the replay is a sandbox
run of its own, in the same backend, never the candidate's run: it sees no host file and no
network, writes only to its own scratch dirs, and its reply is read here as untrusted data
(``replay_reply.read_reply``). The candidate never runs there; the row decides only its own
verdict, as it always does. A plain row (``plain.py``: tests that only call the candidate
with literals and compare with literals, checked by a syntax whitelist) gives a sandbox
nothing to confine: its replays run here, its prompt code never.

Calls are discovered by replaying the test code: a first pass records every call the tests
make (an unknown result is an absorbing ``Pending`` placeholder; this first pass is the
same for every program of a task and is run once), the sandbox answers
them all in one run, and the replay is repeated with the answers until no call is unknown
(tests whose later arguments depend on earlier results take extra rounds; a bounded number).
The final replay, with every answer known, is the verdict. Early exit, crash, timeout or a
broken channel fail the calls left unanswered; a channel carrying anything but what the
runner writes is flagged as tampering and fails the whole run.
"""

from __future__ import annotations

import atexit
import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from flowzoo.sandbox import ExecResult, Job, Sandbox, get_sandbox
from flowzoo.sandbox.forksafe import ForkLock
from flowzoo.tasks.code import replay_reply, replay_worker
from flowzoo.tasks.code.plain import is_plain
from flowzoo.tasks.code.replay_worker import (
    REPLAY_CALLS,
    REPLAY_LIMIT_S,
    CaseResult,
    Outcome,
    call_key,
    replay,
)
from flowzoo.tasks.code.testcode import JudgeSpec
from flowzoo.tasks.code.wire import WireError, decode

RUNNER_SOURCE = Path(__file__).with_name("runner.py").read_text()
#: the tamper signals a verdict can carry (``details["tamper"]``)
TAMPER_SIGNALS = ("channel_forged", "undecodable_value", "early_exit")
#: the statuses of a run whose row's replay failed every case at the judge's limits (flag
#: ``judge_limit``): killed past its time, or a reply past the caps of ``read_reply``
JUDGE_LIMITS = ("replay_killed", "reply_too_big")
#: the first-pass cache's bounds: entries, and bytes its replies hold built (their ``cost``)
FIRST_MAX_ENTRIES = 256
FIRST_MAX_BYTES = 64 << 20


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
    next sandbox run (or None when decided), :meth:`feed` takes its result. The runs
    alternate: the row's test code replayed in a run of its own (:mod:`replay_worker`), then
    the candidate answering the calls it made, then the replay again with the answers; a
    plain row's replays (``plain.py``) happen here, so only the candidate's runs remain."""

    spec: JudgeSpec
    program: str
    call_timeout_s: float = 2.0
    load_timeout_s: float = 5.0
    max_rounds: int = 4
    known: dict[str, list[Outcome]] = field(default_factory=dict)
    cases: list[CaseResult | None] = field(default_factory=list)
    #: replay the row's code in a sandbox run of its own (in the family, every row that is
    #: not plain). False runs any row here, its prompt too: a measurement reference only,
    #: never for rows one did not write
    isolated: bool = True
    _calls: list = field(default_factory=list)
    _keys: list[str] = field(default_factory=list)
    #: the next run ("replay" or "candidate"), the run :meth:`job` handed out, and whether
    #: a caller takes jobs at all (one that feeds candidate runs only gets replays run here)
    _want: str = "replay"
    _issued: str | None = None
    _driven: bool = False
    #: characters of the replay request last sent (its reply's caps grow with them)
    _sent: int = 0

    def __post_init__(self) -> None:
        if not self._confined:
            self._replay_here()

    @property
    def _confined(self) -> bool:
        return self.isolated and bool(self.spec.source) and not is_plain(self.spec)

    def _replay_here(self) -> None:
        """The replay in this process: a plain row's (``plain.py``: its prompt never run), or
        any row's with ``isolated=False`` (the reference, trusted rows only)."""
        spec = self.spec._replace(prompt=None) if self.isolated else self.spec
        self.cases, session = replay(spec, self.known, REPLAY_CALLS, REPLAY_LIMIT_S)
        # the keys made again from the calls, as a sandbox replay's reply is read: the
        # deadline's asynchronous exception can land between a call's two appends
        self._calls = session.calls
        self._keys = [call_key(c) for c in session.calls]
        self._replayed()

    def _replay_job(self) -> Job:
        # module globals read at call time: a test shortens the limit
        main, files = replay_worker.request(
            self.spec.source, self.known, REPLAY_CALLS, REPLAY_LIMIT_S, spec=self.spec
        )
        # the reply's caps grow with what the judge sent in: the answers a nested call
        # (``f(f(1))``) sends back out as arguments, besides the row's own source
        self._sent = len(files["replay.json"])
        return Job(main, files=files, timeout_s=REPLAY_LIMIT_S + replay_worker.GRACE_S)

    def _take_replay(self, res: ExecResult) -> None:
        """A replay run's reply; one that overran, died, answered garbage or past the reply
        caps (``replay_reply.read_reply``: never built) fails every case."""
        got, status = None, "replay_killed"
        if res.exit_code == 0 and res.status != "sandbox_error":
            try:
                got = replay_reply.read_reply(
                    res.stdout, self.spec.n_cases, REPLAY_CALLS, self.spec.source, self._sent
                )
            except replay_reply.ReplyTooBig:
                status = "reply_too_big"
        if got is None:
            self.cases = [CaseResult(False, None, "JudgeLimit")] * self.spec.n_cases
            self._calls, self._keys = [], []
            if res.status == "sandbox_error":
                self.status, self.stderr = res.status, res.stderr[-500:]
            else:  # held past its limit, no reply, or one too big: every case fails
                self.status = status
            self.done = True
            return
        self.cases, self._calls, self._keys = got.cases, got.calls, got.keys
        if not self.known:  # the first pass: the same for every program of this task
            entry = (tuple(got.cases), got.calls, got.keys)
            _, prompt, setup, tests = self.spec.source  # the key holds the row's source too
            cost = got.cost + len(prompt) + len(setup) + sum(len(t) for t in tests)
            _first_store(self._first_key(), entry, cost)
        self._replayed()

    def _replayed(self) -> None:
        self._want = "candidate"
        if self.rounds and (
            all(c is not None for c in self.cases) or self.rounds >= self.max_rounds
        ):
            self.done = True

    def _first_pass_known(self) -> bool:
        """Take the first replay (no answers yet: the row's calls) from the cache, if there."""
        if self.known:
            return False
        with _FIRST_LOCK:
            got = _FIRST.get(self._first_key())
        if got is None:
            return False
        cases, self._calls, self._keys = got[0]
        self.cases = list(cases)
        self._replayed()
        return True

    def _first_key(self) -> tuple:
        return (self.spec.source, REPLAY_CALLS, REPLAY_LIMIT_S)

    def _replay_direct(self) -> None:
        """A replay for a caller that runs the candidate itself: on this module's sandbox."""
        if self._first_pass_known():
            return
        job = self._replay_job()
        res = direct_sandbox().run(job.source, files=job.files, timeout_s=job.timeout_s)
        self._take_replay(res)

    def job(self, timeout_s: float) -> Job | None:
        """The next sandbox run: the replay (its own time limit) or the candidate's."""
        if self.done:
            return None
        self._driven = True
        if self._want == "replay" and not self._first_pass_known():
            self._issued = "replay"
            return self._replay_job()
        self._issued = "candidate"
        calls = self._calls
        spec = {
            "calls": calls,
            "call_timeout": float(self.call_timeout_s),
            "load_timeout": float(self.load_timeout_s),
        }
        files = {"solution.py": self.program, "calls.json": json.dumps(spec)}
        return Job(RUNNER_SOURCE, files=files, timeout_s=timeout_s)

    def feed(self, res: ExecResult) -> None:
        """Take the result of the run :meth:`job` gave: a replay's cases and calls, or the
        candidate's answers (then the replay with them decides whether another round is
        needed)."""
        issued, self._issued = self._issued, None
        if issued == "replay":
            self._take_replay(res)
            return
        if self._want == "replay":  # a caller feeding the candidate's run without a replay
            self._replay_direct()
        if self.done:
            return
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
        if not self._confined:
            self._replay_here()
        elif self._driven:
            self._want = "replay"
        else:
            self._replay_direct()

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


#: first replays by task source and bounds: the row's calls before any answer is known (no
#: candidate's data), which every program of the task starts from; each with its cost
_FIRST: dict[tuple, tuple[tuple, int]] = {}
_FIRST_BYTES = [0]
_FIRST_LOCK = ForkLock()


def _first_store(key: tuple, entry: tuple, cost: int) -> None:
    """Keep a first pass, oldest dropped first, within :data:`FIRST_MAX_ENTRIES` and
    :data:`FIRST_MAX_BYTES` (one larger than the byte budget is not kept)."""
    if cost > FIRST_MAX_BYTES:
        return
    with _FIRST_LOCK:
        old = _FIRST.pop(key, None)
        if old is not None:
            _FIRST_BYTES[0] -= old[1]
        _FIRST[key] = (entry, cost)
        _FIRST_BYTES[0] += cost
        while len(_FIRST) > FIRST_MAX_ENTRIES or _FIRST_BYTES[0] > FIRST_MAX_BYTES:
            _FIRST_BYTES[0] -= _FIRST.pop(next(iter(_FIRST)))[1]


def first_cache_bytes() -> int:
    """The bytes the first-pass cache's replies hold built, by their cost (a bound)."""
    with _FIRST_LOCK:
        return _FIRST_BYTES[0]


_DIRECT: Sandbox | None = None
_DIRECT_LOCK = ForkLock()


def direct_sandbox() -> Sandbox:
    """The sandbox that runs replays for a caller driving a :class:`JudgeRun` itself (the
    family hands replays to its own sandbox as jobs): the default process sandbox."""
    global _DIRECT
    with _DIRECT_LOCK:
        if _DIRECT is None:
            _DIRECT = get_sandbox("process")
            atexit.register(_DIRECT.close)
        return _DIRECT
