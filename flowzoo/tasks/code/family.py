"""The code family: a completion's program run on the task's tests in a sandbox, its
verdict shared between the envs of one process, and the limits a data row may set.

Its own file so that the package's ``__init__`` only says what the package offers."""

from __future__ import annotations

import ast
import hashlib
import json
import pkgutil
import random
import re
import sys
import warnings
from collections.abc import Hashable, Sequence
from typing import Any

from flowzoo.sandbox import Sandbox, check_backend_keys, get_sandbox
from flowzoo.sandbox.forksafe import ForkLock
from flowzoo.tasks.base import Task, Verdict
from flowzoo.tasks.code import judge
from flowzoo.tasks.code.contests import ROW_MAX_CASE_S
from flowzoo.tasks.code.harness import extract_program
from flowzoo.tasks.code.judge import JudgeRun
from flowzoo.tasks.code.names import first_blank
from flowzoo.tasks.code.stdio import StdioRun
from flowzoo.tasks.code.testcode import judge_spec
from flowzoo.tasks.memo import Memo

_SANDBOXES: dict[tuple, Sandbox] = {}
_SANDBOX_LOCK = ForkLock()  # a forked child gets it free (``forksafe.py``)


class _SharedVerdicts(Memo[str, Verdict]):
    """The process's verdicts: a copy or a pickle of them is that process's verdicts (in
    another process, its own), so an env pickled with its family keeps sharing."""

    def __reduce__(self) -> tuple:
        return (_shared_verdicts, ())


#: the verdicts of every family on a named backend in this process. Why shared: every env
#: makes its own :class:`CodeFamily` and a problem's samples (an evaluation's 4, a GRPO
#: group's G) are played by different envs, so a memo per family ran the same program on the
#: same tests once per env; a verdict is keyed by everything that decides it
#: (:meth:`CodeFamily._memo_key`). A family given its own sandbox object keeps its own memo:
#: an object's id may be reused once it is gone.
_VERDICTS: Memo[str, Verdict] = _SharedVerdicts()


def _shared_verdicts() -> Memo[str, Verdict]:
    return _VERDICTS


_SETTING = re.compile(r"_?[A-Z][A-Z0-9_]*")
#: this package and its modules, by name (those loaded are read)
_PACKAGE = __name__.rpartition(".")[0]
_MODULES = (
    _PACKAGE,
    *sorted(f"{_PACKAGE}.{m.name}" for m in pkgutil.iter_modules(sys.modules[_PACKAGE].__path__)),
)


def judge_settings() -> tuple:
    """Every limit the judge side reads at scoring time, as it is now: the upper-case
    numbers of each loaded module of this package (``names.MAX_CODE_TOKENS``,
    ``stdio.CHANNEL_BYTES``, ``replay_reply.REPLY_BASE_BYTES`` ...) and the numeric
    defaults of the judge runs (``JudgeRun.call_timeout_s``, ``StdioRun.max_output``).
    Collected, not listed: a verdict shared between envs must not outlive a cap a user
    raised, and a cap added later is in the key without anyone remembering to add it."""
    out = [
        (name, k, v)
        for name in _MODULES
        if (mod := sys.modules.get(name)) is not None
        for k, v in vars(mod).items()
        if _SETTING.fullmatch(k) and isinstance(v, (int, float))
    ]
    for cls in (JudgeRun, StdioRun):
        out += [
            (cls.__name__, k, v)
            for k, v in vars(cls).items()
            if not k.startswith("_") and isinstance(v, (int, float))
        ]
    return tuple(out)


def shared_sandbox(backend: str, options: dict[str, Any] | None = None) -> Sandbox:
    """One sandbox per (backend, options) per process, shared by every env that asks."""
    key = (backend, tuple(sorted((options or {}).items())))
    with _SANDBOX_LOCK:
        if key not in _SANDBOXES:
            _SANDBOXES[key] = get_sandbox(backend, **(options or {}))
        return _SANDBOXES[key]


#: operator and comparison slips of :meth:`CodeFamily.noisy_completion`
_SLIPS = (
    ("<=", "<"),
    (">=", ">"),
    (" > ", " >= "),
    (" < ", " <= "),
    (" + ", " - "),
    (" - ", " + "),
    (" * ", " + "),
    (" % ", " // "),
    ("==", "!="),
    ("range(1, ", "range("),
)


def _digest(parts: object) -> str:
    """A digest of plain data (anything else by its repr): memo keys, never hash() sums."""
    try:
        text = json.dumps(parts, sort_keys=True, default=repr, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):  # mixed key types, a cycle: its repr
        text = repr(parts)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def is_stdio(task: Task) -> bool:
    """Whether a task's tests are stdin/stdout pairs (else test statements, e.g. asserts)."""
    return task.meta.get("format") == "stdio"


#: a code row's text fields besides its tests (each a string where present)
_ROW_TEXT = ("entry_point", "prompt_code", "setup", "harness")


def row_fields_error(task: Task) -> str | None:
    """Why a code row's fields cannot be judged, else None: the loaders refuse such rows,
    a :class:`Task` built by hand reaches the judge as it is. A row with no tests would pass
    every program; a test or text field that is not a string has no code to read."""
    tests = task.meta.get("tests")
    if not isinstance(tests, list | tuple) or not tests:
        return "the row has no tests (a non-empty list)"
    if is_stdio(task):
        ok = all(
            isinstance(t, list | tuple) and len(t) == 2 and all(type(x) is str for x in t)
            for t in tests
        )
        return None if ok else "a stdin/stdout test is not a pair of strings"
    if not all(type(t) is str for t in tests):
        return "a test is not a string"
    if (blank := first_blank(tests)) is not None:
        return f"test {blank} is blank"
    for name in _ROW_TEXT:
        if name in task.meta and type(task.meta[name]) is not str:
            return f"{name} is not a string"
        if name in task.meta and not _is_text(task.meta[name]):
            return f"{name} is not valid text (a lone surrogate)"
    return None


def _is_text(s: str) -> bool:
    """Whether ``s`` is text a source file can hold (no lone surrogate)."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


#: the longest any verifier time limit may be (seconds), as the user's own config sets it
MAX_LIMIT_S = 3600.0
#: the most seconds data may ask the judge to wait: a task's own per-case ``time_limit`` (a
#: CodeContests row's) is capped at ``case_timeout_s`` here, and a data row's options may set
#: no timeout past its entry (a row is data: it must never hold a verdict for an hour, which
#: the user's own ``MAX_LIMIT_S`` allows); the user's config sets longer ones
ROW_LIMITS_S = {"test_timeout_s": 10.0, "case_timeout_s": ROW_MAX_CASE_S, "time_budget_s": 60.0}


def check_row_limits(options: Any, where: str) -> None:
    """A ValueError naming the row (``where``) when its options set a timeout of the code
    family past :data:`ROW_LIMITS_S` (values of other types are checked where the env is
    made)."""
    if not hasattr(options, "items"):
        return
    for name, cap in ROW_LIMITS_S.items():
        v = options.get(name)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and not v <= cap:
            raise ValueError(
                f"{where}: a data row may set {name} to at most {cap:g} s, got {v!r}; a "
                "longer limit is set by your own config (make_env's arguments, "
                "TrainConfig.env_options), never by a row"
            )


#: the longest program :func:`guards_first` parses (a completion's budget is far below it)
_GUARD_MAX_CHARS = 20_000


def guards_first(program: str, entry: str | None) -> bool:
    """Whether the function ``entry`` (else the first function) begins by returning on
    a condition of its parameters: ``if not xs: return -1`` on one line or two, or ``return -1
    if not xs else ...`` (the guarded tasks' considered form). Parsed, never run; a guard on
    something else, one after the first statement, or text that does not parse reads False."""
    if not isinstance(program, str) or len(program) > _GUARD_MAX_CHARS:
        return False
    try:
        with warnings.catch_warnings():  # an invalid escape must not decide (or print)
            warnings.simplefilter("ignore")
            tree = ast.parse(program.removeprefix("\ufeff"))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    fns = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    # the entry point as Python binds it (the last definition), else the first function: a
    # misnamed program fails its tests anyway, and whether it guarded is what is asked
    named = [f for f in fns if f.name == entry]
    fn = named[-1] if named else (fns[0] if fns else None)
    if fn is None or not fn.body:
        return False
    a = fn.args
    params = {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg) if p}
    body = fn.body
    if len(body) > 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # a docstring
    first = body[0]

    def on_params(test: ast.expr) -> bool:
        return any(isinstance(n, ast.Name) and n.id in params for n in ast.walk(test))

    if isinstance(first, ast.If):
        return bool(first.body) and isinstance(first.body[0], ast.Return) and on_params(first.test)
    if isinstance(first, ast.Return) and isinstance(first.value, ast.IfExp):
        return on_params(first.value.test)
    return False


class CodeFamily:
    """Score a completion by running the task's tests on its program in a sandbox: test
    statements (asserts, function calls) through the call judge, stdin/stdout pairs through
    the stdio judge; both decide where the program cannot reach."""

    name = "code"
    reports_tests = True
    answer_format = "Write the complete Python code in a ```python code block."

    def __init__(
        self,
        sandbox: str | Sandbox = "process",
        sandbox_options: dict[str, Any] | None = None,
        partial_credit: bool = False,
        test_timeout_s: float = 10.0,
        case_timeout_s: float = 4.0,
        time_budget_s: float = 60.0,
        early_stop: bool = True,
    ) -> None:
        if isinstance(sandbox, str):
            self._backend: str | None = sandbox
            self._sandbox: Sandbox | None = None
            from flowzoo.sandbox import BACKENDS

            if sandbox not in BACKENDS:
                raise ValueError(
                    f"unknown sandbox backend {sandbox!r}; valid: {', '.join(BACKENDS)}"
                )
        else:
            self._backend, self._sandbox = None, sandbox
        self.sandbox_options = dict(sandbox_options or {})
        if self._backend is not None:
            check_backend_keys(self._backend, self.sandbox_options)
        self.partial_credit = bool(partial_credit)
        for name, v in (
            ("test_timeout_s", test_timeout_s),
            ("case_timeout_s", case_timeout_s),
            ("time_budget_s", time_budget_s),
        ):  # every verdict is bounded: no limit may be 0 (none), negative, NaN or infinite
            ok = isinstance(v, (int, float)) and not isinstance(v, bool)
            if not ok or not 0 < v <= MAX_LIMIT_S:
                raise ValueError(f"{name} must be a number in (0, {MAX_LIMIT_S:g}], got {v!r}")
        self.test_timeout_s = float(test_timeout_s)
        #: stdio tests: seconds per case (a task's own ``time_limit`` wins), seconds per task,
        #: and whether a task stops at its first failing case (the study's grader)
        self.case_timeout_s = float(case_timeout_s)
        self.time_budget_s = float(time_budget_s)
        self.early_stop = bool(early_stop)
        self._memo: Memo[str, Verdict] = _VERDICTS if self._backend is not None else Memo(4096)
        self._flagged: Memo[str, list[str]] = Memo(4096)

    @property
    def sandbox(self) -> Sandbox:
        """The sandbox (created on first use, so building an env never starts one)."""
        if self._sandbox is None:
            self._sandbox = shared_sandbox(self._backend, self.sandbox_options)
        return self._sandbox

    def extract(self, text: str) -> str | None:
        return extract_program(text)

    def program_of(self, task: Task, text: str) -> str | None:
        """The program a completion submits for ``task``: what scoring runs and what the
        behaviour reading parses (a body-only block joined to the task's signature, the
        block that defines the entry point)."""
        ep, pc = task.meta.get("entry_point", ""), task.meta.get("prompt_code", "")
        return extract_program(text, ep, pc)

    def _case_limit(self, task: Task) -> float:
        """Seconds per stdin/stdout case: the task's own ``time_limit`` (data: capped at
        :data:`ROW_LIMITS_S`), else the family's ``case_timeout_s``."""
        own = task.meta.get("time_limit")
        if not own:
            return self.case_timeout_s
        return min(float(own), ROW_LIMITS_S["case_timeout_s"])

    def _run(self, task: Task, program: str) -> JudgeRun | StdioRun:
        if is_stdio(task):
            return StdioRun(
                tuple(task.meta["tests"]),
                program,
                case_timeout_s=self._case_limit(task),
                time_budget_s=self.time_budget_s,
                early_stop=self.early_stop,
                float_tol=task.meta.get("float_tol"),
            )
        spec = judge_spec(
            task.meta.get("entry_point", ""),
            task.meta.get("prompt_code", ""),
            task.meta.get("setup", ""),
            tuple(task.meta["tests"]),
        )
        # a harness the task adds to every program (e.g. the call reaching a Solution method)
        return JudgeRun(spec, program + task.meta.get("harness", ""))

    def _verdict(self, task: Task, program: str | None, run: JudgeRun | StdioRun | None) -> Verdict:
        n = len(task.meta["tests"])
        if program is None or run is None:
            return Verdict(0.0, False, None, "no_code", {"passed": 0, "total": n})
        cases = run.results()
        passed = sum(c.passed for c in cases)
        all_ok = passed == n and not run.tamper
        if run.tamper:
            passed = 0
        score = 1.0 if all_ok else (passed / n if self.partial_credit else 0.0)
        details = {
            "passed": passed,
            "total": n,
            "status": run.status,
            "rounds": run.rounds,
            "tamper": list(run.tamper),
            "cases": [(c.passed, c.value, c.error) for c in cases],
        }
        if run.status == "sandbox_error":
            reason = "sandbox_error"
            details["stderr"] = run.stderr
        elif run.tamper:
            reason = "tamper:" + ",".join(run.tamper)
        elif run.status in judge.JUDGE_LIMITS:  # the replay held past its limit, or its
            reason = f"judge_limit:{run.status}"  # reply was past the judge's caps
        elif run.load_error is not None:
            reason = f"load_error:{run.load_error}"
        elif run.answered == 0 and run.status != "ok":
            reason = f"no_results:{run.status}"
        else:
            reason = "all_passed" if all_ok else f"{passed}/{n}_passed"
        return Verdict(score, all_ok, program, reason, details)

    def _memo_key(
        self, task: Task, text: str, task_digest: str | None = None, opts: str | None = None
    ) -> str:
        """What a remembered verdict is keyed by: everything it depends on - the task (its id
        and every meta field: tests, setup, prompt code, entry point, harness, format,
        tolerance, time limit), the completion, and the options of this family, its sandbox
        and the judge that decide a verdict (:meth:`_options_digest`, once per call)."""
        return _digest(
            [opts or self._options_digest(), task_digest or _digest([task.id, task.meta]), text]
        )

    def _options_digest(self) -> str:
        return _digest(
            (
                judge_settings(),
                self.partial_credit,
                self.test_timeout_s,
                self.case_timeout_s,
                self.time_budget_s,
                self.early_stop,
                self._backend,
                sorted(self.sandbox_options.items(), key=repr),
                None if self._sandbox is None or self._backend else id(self._sandbox),
            )
        )

    def score(self, task: Task, text: str) -> Verdict:
        return self.score_many(task, [text])[0]

    def score_many(self, task: Task, texts: Sequence[str]) -> list[Verdict]:
        """Score several completions of one task (see :meth:`score_pairs`)."""
        return self.score_pairs([(task, t) for t in texts])

    def score_pairs(self, pairs: Sequence[tuple[Task, str]]) -> list[Verdict]:
        """Score (task, completion) pairs: each judge round of every program is one
        concurrent ``run_many`` batch (most programs are decided in one round). Memoised per
        (task, completion), so re-scoring a draft costs nothing, and a pair that repeats in
        one call runs once."""
        digests: dict[int, str] = {}  # a task's digest once per call, however many texts
        for t, _ in pairs:
            if id(t) not in digests:
                digests[id(t)] = _digest([t.id, t.meta])
        opts = self._options_digest()
        keys = [self._memo_key(t, text, digests[id(t)], opts) for t, text in pairs]
        out: list[Verdict | None] = [self._memo.get(k) for k in keys]
        first: dict[str, int] = {}  # a key's first unscored row: the one that runs
        for i, v in enumerate(out):
            if v is None:
                first.setdefault(keys[i], i)
        todo = list(first.values())
        runs: dict[int, JudgeRun | StdioRun] = {}
        programs: dict[int, str] = {}
        for i in todo:
            task, text = pairs[i]
            why = row_fields_error(task)
            if why is not None:  # a row built past the loaders: its own verdict, no raise
                out[i] = self._bad_tests(task, text, ValueError(why))
                continue
            program = self.program_of(task, text)
            if program is None:
                out[i] = self._verdict(task, None, None)
                continue
            programs[i] = program
            try:
                runs[i] = self._run(task, program)
            except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
                # the task's own tests do not compile (past the parser's limits included):
                # this row's cases fail, flagged; the batch's other rows are scored
                out[i] = self._bad_tests(task, program, e)
        while True:
            active = [r for r in runs.values() if not r.done]
            if not active:
                break
            jobs = [r.job(self.test_timeout_s) for r in active]
            for r, res in zip(active, self.sandbox.run_many(jobs), strict=True):
                r.feed(res)
        for i, r in runs.items():
            out[i] = self._verdict(pairs[i][0], programs[i], r)
        for i in todo:
            if out[i].details.get("status") != "sandbox_error":  # transient: not remembered
                self._memo.put(keys[i], out[i])
        for i, k in enumerate(keys):  # the repeats: their first row's verdict
            if out[i] is None:
                out[i] = out[first[k]]
        self._note_flags([_digest([digests[id(t)], text]) for t, text in pairs], out)
        return out  # type: ignore[return-value]

    @staticmethod
    def _bad_tests(task: Task, program: str, err: BaseException) -> Verdict:
        tests = task.meta.get("tests")
        n = len(tests) if isinstance(tests, list | tuple) else 0
        why = f"{type(err).__name__}({str(err)[:160]!r})"
        details = {
            "passed": 0,
            "total": n,
            "status": "bad_tests",
            "cases": [(False, None, "bad_tests")] * n,
        }
        return Verdict(0.0, False, program, f"bad_tests:{why}"[:200], details)

    def flags(self, task: Task, text: str) -> list[str]:
        """Flags of a completion already scored on ``task``: ``reward_tamper`` when its
        program was caught writing to the judge's channel or faking its exit,
        ``judge_limit`` when replaying the tests on its answers was killed at the limit or
        replied past the judge's caps, ``bad_tests`` when the task's tests do not compile."""
        return list(self._flagged.get(_digest([_digest([task.id, task.meta]), text])) or ())

    @staticmethod
    def _flags_of(v: Verdict) -> list[str]:
        status = v.details.get("status")
        out = ["reward_tamper"] if v.details.get("tamper") else []
        out += ["judge_limit"] if status in judge.JUDGE_LIMITS else []
        return out + (["bad_tests"] if status == "bad_tests" else [])

    def _note_flags(self, keys: list[str], verdicts: list[Verdict]) -> None:
        """Keep this family's flags beside the shared memo, which other envs' scoring may
        turn over before this episode asks: only flagged verdicts are kept (they are rare),
        the oldest out past 4,096; ``keys`` are (task digest, completion) digests."""
        for k, v in zip(keys, verdicts, strict=True):
            if got := self._flags_of(v):
                self._flagged.put(k, got)
            else:
                self._flagged.discard(k)

    def answer_class(self, task: Task, verdict: Verdict) -> Hashable | None:
        """Behaviour: the values (or error types) the program produced on every test case."""
        cases = verdict.details.get("cases")
        if not cases:
            return None
        return tuple((v if v is not None else p, e) for p, v, e in cases)

    def test_report(self, task: Task, text: str) -> str:
        """A one-line summary of the draft's test results (for ``evaluator_sees_tests``)."""
        v = self.score(task, text)
        if v.extracted is None:
            return "no code found."
        if "cases" not in v.details:
            return f"the program did not run ({v.details.get('status')})."
        cases = v.details["cases"]
        first_fail = next((i for i, c in enumerate(cases) if not c[0]), None)
        msg = f"{v.details['passed']}/{v.details['total']} tests passed."
        if first_fail is not None:
            p, val, err = cases[first_fail]
            got = f"got {val}" if val is not None else f"raised {err}"
            test = task.meta["tests"][first_fail]
            if is_stdio(task):
                test = f"input {test[0][:60]!r} expected {test[1][:60]!r}"
            msg += f" First failure: {test[:120]} ({got[:120]})."
        return msg

    def reference_completion(self, task: Task) -> str:
        """A correct completion: the canonical solution in a fenced block."""
        return f"```python\n{task.answer.rstrip()}\n```"

    def noisy_completion(self, task: Task, rng: random.Random) -> str:
        """A plausible buggy completion, the slips people make: an off-by-one constant, a
        wrong operator or comparison, or a missing case (a conditional's fallback dropped);
        a quoted letter changed where nothing else applies. May occasionally still pass,
        like a real near-miss."""
        src = task.answer
        nums = list(re.finditer(r"(?<![\w.'])\d+", src))
        cases = list(re.finditer(r" if \w+ else [^\n]+", src))
        slips = [(a, b) for a, b in _SLIPS if a in src]
        letters = list(re.finditer(r"'([a-z])'", src))
        kinds = [k for k, ok in (("case", cases), ("num", nums), ("op", slips)) if ok]
        weights = {"case": 1, "num": 3, "op": 2}
        if not kinds and not letters:
            return self.wrong_completion(task)
        kind = rng.choices(kinds, [weights[k] for k in kinds])[0] if kinds else "letter"
        if kind == "case":
            m = rng.choice(cases)
            src = src[: m.start()] + src[m.end() :]
        elif kind == "num":
            m = rng.choice(nums)
            new = str(int(m.group()) + rng.choice([-1, 1, 2]))
            src = src[: m.start()] + new + src[m.end() :]
        elif kind == "op":
            a, b = rng.choice(slips)
            src = src.replace(a, b, 1)
        else:
            m = rng.choice(letters)
            c = chr((ord(m.group(1)) - 96) % 26 + 97)
            src = src[: m.start(1)] + c + src[m.end(1) :]
        return f"```python\n{src.rstrip()}\n```"

    def direct_completion(self, task: Task) -> str | None:
        """A guarded task's shortcut: the program without its edge-case guard, right on every
        ordinary input and wrong on the edge case (``flowzoo.tasks.code.guarded``); None for
        a task with no stated edge case."""
        short = task.meta.get("shortcut")
        return f"```python\n{short.rstrip()}\n```" if isinstance(short, str) else None

    def shows_work(self, task: Task, text: str) -> bool | None:
        """On a guarded task, whether the program guards a case before computing
        (:func:`guards_first`); None for a task with no stated edge case."""
        if not isinstance(task.meta.get("shortcut"), str):
            return None
        program = self.program_of(task, text)
        return program is not None and guards_first(program, task.meta.get("entry_point"))

    def wrong_completion(self, task: Task) -> str:
        """A well-formed completion that fails the tests (returns None; prints nothing)."""
        if is_stdio(task):
            return "```python\nprint()\n```"
        ep = task.meta.get("entry_point", "f")
        return f"```python\ndef {ep}(*args, **kwargs):\n    return None\n```"
