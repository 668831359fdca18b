"""The replay of a row's test code: what runs inside the replay's own sandbox run.

Why: a row's test code (a HumanEval ``check``, MBPP ``test_setup_code``/``test_list``, the
prompt's helpers) comes from a file someone else wrote. Replayed in a process of the trainer
it had the trainer's uid, cwd, files and network whenever a completion was scored. So the
replay is a sandbox run of its own, in the backend that runs candidates, separate from the
candidate's run: no network, no host files, writes only to the run's own scratch dirs, and
killed at the replay's limit plus :data:`GRACE_S` (a C-level computation or a blocking call
in the test code can no longer hold a verdict either). A plain row (``plain.py``: literals
and calls only) is replayed by the same :func:`replay` in the judge's process instead.

This module is shipped into that run as source (with ``testcode``, ``names`` and ``wire``
and empty package files: stdlib only), and the judge (``judge.py``) talks to it by files and
one line of output:

- ``replay.json`` (from the judge): the test code's source (entry point, prompt code, setup,
  tests), the candidate's answers known so far - plain data, already strictly decoded by the
  judge and re-encoded in the wire format - and the replay's bounds;
- one line on the fd that was stdout (anything the test code prints goes to stderr):
  base64 of zlib-compressed JSON ``{"cases": [[passed, value, error] | null, ...],
  "calls": [[name, args, kwargs], ...]}``. The judge reads it as untrusted data
  (``replay_reply.read_reply``: shape, types, sizes; never unpickled, never executed) and computes
  the calls' keys itself. The candidate never runs here: its answers arrive as data.
"""

from __future__ import annotations

import base64
import builtins
import functools
import importlib
import json
import os
import threading
import time
import zlib
from collections import defaultdict
from typing import Any, NamedTuple

from flowzoo.tasks.code.testcode import CHECK, HELPERS, JudgeSpec, Pending
from flowzoo.tasks.code.wire import RemoteRef, canonical_repr, decode, encode, shortened

#: how long past the replay's own limit its sandbox run may go before it is killed
GRACE_S = 5.0
#: a replay pass's bounds: calls the tests may make, and seconds (Python bytecode is
#: interrupted at the limit; a replay's sandbox run is killed shortly after it)
REPLAY_CALLS = 20_000
REPLAY_LIMIT_S = 60.0


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
#: CandidateError in the row's test code
_FLOW = (StopIteration, StopAsyncIteration)


class Outcome(NamedTuple):
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
            return canonical_repr(self.value)
        if self.kind == "ref":  # a handle: its type, as the candidate's process named it
            return f"ref:{self.name}"
        return f"{self.kind}:{self.name}"


# ------------------------------------------------------------------------------ replay
def call_key(call: list) -> str:
    """A recorded call's key (name, encoded args and kwargs): the answers the judge knows are
    filed under it, by the replay's session and when the judge reads a replay's calls."""
    return json.dumps(call, sort_keys=True)


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
        key = call_key(enc)
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
                import importlib.util  # only here: every replay run would pay for it

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


class CaseResult(NamedTuple):
    """One test case's result: passed, the values seen (a record), the error."""

    passed: bool
    value: str | None
    error: str | None


def replay(
    spec: JudgeSpec,
    known: dict[str, list[Outcome]],
    max_calls: int = REPLAY_CALLS,
    time_limit_s: float = REPLAY_LIMIT_S,
) -> tuple[list[CaseResult | None], _Session]:
    """Run the row's tests once against the known answers; a case is ``None`` while it
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
    """Bounds one replay pass of the row's test code even where it never calls the
    candidate, e.g. an endless loop in a dataset's test: past the limit the replaying thread
    gets an asynchronous :class:`JudgeLimit`; a pending one is cleared on exit. The waiting
    is a bare thread on a lock (``threading.Timer`` made the replay wait for it to start: a
    scheduler turn in every replay's run)."""

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

    def _wait(self, gate: Any) -> None:
        if not gate.acquire(timeout=self.seconds):
            self._fire()

    def __enter__(self) -> _Deadline:
        import _thread

        self._tid = threading.get_ident()
        self._active = True
        self._gate = _thread.allocate_lock()
        self._gate.acquire()
        _thread.start_new_thread(self._wait, (self._gate,))
        return self

    def __exit__(self, *exc: object) -> None:
        self._gate.release()  # the waiter wakes and goes
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
    except BaseException as e:  # the row's test failed (or the candidate's answer raised)
        err = str(e) if type(e) is CandidateError else type(e).__name__
    if session.pending:
        return None
    if not case:
        return None if err is None else CaseResult(False, None, f"setup:{err}")
    value = None
    if session.case_outcomes:
        value = shortened(", ".join(o.summary() for o in session.case_outcomes), 200)
    return CaseResult(err is None, value, err)


# ------------------------------------------------------------------------------ its run
#: the modules the replay's run imports besides the stdlib, shipped in dependency order
_SHIPPED = ("wire", "names", "testcode", "replay_worker")
#: the replay run's program: it loads the shipped modules from their code, compiled by the
#: judge for this very interpreter build (compiling them in every run cost more than the
#: replay), or from their source where the sandbox runs another Python (a Docker image);
#: both travel zlib-compressed in ``compiled.json``
MAIN_SOURCE = """\
import base64, json, marshal, sys, types, zlib

with open("compiled.json", "rb") as _f:
    _b = json.loads(_f.read())
_fast = _b["python"] == sys.version and _b["marshal"] == marshal.version
for _name in ["flowzoo", "flowzoo.tasks", "flowzoo.tasks.code"] + _b["order"]:
    _m = sys.modules[_name] = types.ModuleType(_name)
    _parent, _, _leaf = _name.rpartition(".")
    if _parent:
        setattr(sys.modules[_parent], _leaf, _m)
    if _name in _b["code"]:
        _m.__file__ = _name.replace(".", "/") + ".py"
        _raw = zlib.decompress(base64.b64decode(_b["code" if _fast else "source"][_name]))
        if _fast:
            _c = marshal.loads(_raw)
        else:
            _c = compile(_raw, _m.__file__, "exec", dont_inherit=True)
        exec(_c, _m.__dict__)
    else:
        _m.__path__ = []
from flowzoo.tasks.code.replay_worker import main

main(_fast)
"""


def _pack(data: bytes) -> str:
    return base64.b64encode(zlib.compress(data, 6)).decode("ascii")


@functools.lru_cache(maxsize=1)
def _package_files() -> dict[str, str]:
    """The shipped modules, compressed (a replay's request is copied several times on its
    way into the run): their compiled code, and their source for another Python."""
    import marshal
    import sys
    from pathlib import Path  # the judge's side only: the replay's run never imports it

    here = Path(__file__).parent
    code, source = {}, {}
    for m in _SHIPPED:
        path = f"flowzoo/tasks/code/{m}.py"
        text = (here / f"{m}.py").read_text(encoding="utf-8")
        compiled = compile(text, path, "exec", dont_inherit=True)
        code[f"flowzoo.tasks.code.{m}"] = _pack(marshal.dumps(compiled))
        source[f"flowzoo.tasks.code.{m}"] = _pack(text.encode("utf-8"))
    order = [f"flowzoo.tasks.code.{m}" for m in _SHIPPED]
    bundle = {
        "python": sys.version,
        "marshal": marshal.version,
        "order": order,
        "code": code,
        "source": source,
    }
    return {"compiled.json": json.dumps(bundle)}


#: compiled specs kept by :func:`compiled_spec`: at most so many, and so many bytes
SPEC_CACHE_ENTRIES = 512
SPEC_CACHE_BYTES = 32 << 20
_SPECS: dict[tuple, str] = {}
_SPECS_BYTES = [0]
_SPECS_LOCK = threading.Lock()


def _renew_specs_lock() -> None:
    """A forked child gets the lock free (a thread holding it at the fork is not in it)."""
    global _SPECS_LOCK
    _SPECS_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_renew_specs_lock)


def compiled_spec(spec: JudgeSpec) -> str | None:
    """``spec``'s compiled test code as the replay's run loads it (base64 of ``marshal``):
    made once per task by the judge, which compiled it anyway, instead of in every replay,
    where parsing, checking and compiling the row's code cost more than the replay itself.
    The run uses it only where its Python is this build (else it compiles the source), and
    it is the judge's own compilation of the row's source: nothing the row chose but its
    code. None where it cannot be marshalled."""
    key = spec.source
    with _SPECS_LOCK:
        got = _SPECS.get(key)
    if got is not None:
        return got
    import marshal

    try:
        raw = marshal.dumps(
            (spec.remote, spec.modules, spec.prompt, spec.setup, spec.cases, spec.n_cases)
        )
    except ValueError:
        return None
    text = base64.b64encode(raw).decode("ascii")
    cost = len(text) + sum(map(len, key[:3])) + sum(len(t) for t in key[3])
    if cost <= SPEC_CACHE_BYTES // 8:
        with _SPECS_LOCK:
            if key not in _SPECS:
                _SPECS[key] = text
                _SPECS_BYTES[0] += cost
            while len(_SPECS) > SPEC_CACHE_ENTRIES or _SPECS_BYTES[0] > SPEC_CACHE_BYTES:
                k, v = next(iter(_SPECS.items()))
                del _SPECS[k]
                _SPECS_BYTES[0] -= len(v) + sum(map(len, k[:3])) + sum(len(t) for t in k[3])
    return text


def request(
    source: tuple,
    known: dict[str, list[Outcome]],
    max_calls: int,
    time_limit_s: float,
    spec: JudgeSpec | None = None,
) -> tuple[str, dict[str, str]]:
    """One replay as a sandbox program: its main source and files (see the module doc);
    with ``spec`` (``source`` compiled by the judge) the run loads its code instead of
    compiling the source again."""
    entry, prompt, setup, tests = source
    req = {
        "source": [entry, prompt, setup, list(tests)],
        "known": {
            k: [[o.kind, encode(o.value) if o.kind == "value" else o.value, o.name] for o in outs]
            for k, outs in known.items()
        },
        "max_calls": int(max_calls),
        "time_limit_s": float(time_limit_s),
    }
    compiled = compiled_spec(spec) if spec is not None and spec.source == source else None
    if compiled is not None:
        req["spec"] = compiled
    return MAIN_SOURCE, {**_package_files(), "replay.json": json.dumps(req)}


def main(compiled: bool = False) -> None:
    """Inside the replay's run: one replay of ``replay.json``, its reply on the channel;
    ``compiled``: this run's Python is the judge's build, so the test code the judge compiled
    (``spec``) is loaded, not compiled again."""
    with open("replay.json", encoding="utf-8") as f:
        req = json.load(f)
    # the reply gets its own copy of stdout; anything the test code prints goes to stderr
    chan = os.dup(1)
    os.dup2(2, 1)
    known = {
        k: [Outcome(kind, decode(v) if kind == "value" else v, name) for kind, v, name in outs]
        for k, outs in req["known"].items()
    }
    entry, prompt, setup, tests = req["source"]
    if compiled and "spec" in req:
        import marshal

        remote, modules, prompt_code, setup_code, cases, n_cases = marshal.loads(
            base64.b64decode(req["spec"])
        )
        spec = JudgeSpec(
            remote,
            modules,
            prompt_code,
            setup_code,
            cases,
            n_cases,
            source=(entry, prompt, setup, tuple(tests)),
        )
    else:
        from flowzoo.tasks.code.testcode import judge_spec

        spec = judge_spec(entry, prompt, setup, tuple(tests))
    cases, session = replay(spec, known, req["max_calls"], req["time_limit_s"])
    reply = {
        "cases": [None if c is None else [c.passed, c.value, c.error] for c in cases],
        "calls": session.calls,
    }
    view = memoryview(base64.b64encode(zlib.compress(json.dumps(reply).encode())) + b"\n")
    while view:
        view = view[os.write(chan, view) :]
    os._exit(0)  # nothing the test code left behind (a thread, an atexit hook) runs on
