"""Code tasks: programs extracted from completions, scored by unit tests in a sandbox.

Untrusted code only ever runs inside the sandbox backend chosen by ``sandbox=``
(``process`` by default, ``docker``, ``sandbox-fusion``, or a ready Sandbox instance).
"""

from __future__ import annotations

import random
import re
import threading
from collections.abc import Hashable, Sequence
from typing import Any

from flowzoo.sandbox import Job, Sandbox, get_sandbox
from flowzoo.tasks.base import Task, Verdict
from flowzoo.tasks.code.data import (
    function_tasks,
    humaneval_task,
    humaneval_tasks,
    load_code_dataset,
    load_code_file,
    mbpp_task,
    split_check_function,
)
from flowzoo.tasks.code.harness import build_test_program, extract_program, parse_results

__all__ = [
    "CodeFamily",
    "extract_program",
    "function_tasks",
    "humaneval_task",
    "humaneval_tasks",
    "load_code_dataset",
    "load_code_file",
    "mbpp_task",
    "split_check_function",
]

_SANDBOXES: dict[tuple, Sandbox] = {}
_SANDBOX_LOCK = threading.Lock()


def shared_sandbox(backend: str, options: dict[str, Any] | None = None) -> Sandbox:
    """One sandbox per (backend, options) per process, shared by every env that asks."""
    key = (backend, tuple(sorted((options or {}).items())))
    with _SANDBOX_LOCK:
        if key not in _SANDBOXES:
            _SANDBOXES[key] = get_sandbox(backend, **(options or {}))
        return _SANDBOXES[key]


class CodeFamily:
    """Score a completion by running the task's unit tests on its program in a sandbox."""

    name = "code"
    answer_format = "Write the complete Python function in a ```python code block."

    def __init__(
        self,
        sandbox: str | Sandbox = "process",
        sandbox_options: dict[str, Any] | None = None,
        partial_credit: bool = False,
        test_timeout_s: float = 10.0,
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
        self.partial_credit = bool(partial_credit)
        self.test_timeout_s = float(test_timeout_s)

    @property
    def sandbox(self) -> Sandbox:
        """The sandbox (created on first use, so building an env never starts one)."""
        if self._sandbox is None:
            self._sandbox = shared_sandbox(self._backend, self.sandbox_options)
        return self._sandbox

    def extract(self, text: str) -> str | None:
        return extract_program(text)

    def _job(self, task: Task, program: str) -> tuple[Job, str]:
        src, marker = build_test_program(program, task.meta.get("setup", ""), task.meta["tests"])
        return Job(src, timeout_s=self.test_timeout_s), marker

    def _verdict(self, task: Task, program: str | None, res, marker: str | None) -> Verdict:
        n = len(task.meta["tests"])
        if program is None:
            return Verdict(0.0, False, None, "no_code", {"passed": 0, "total": n})
        cases = parse_results(res.stdout, marker, n) if res is not None else None
        if cases is None:
            reason = (
                "sandbox_error" if res.status == "sandbox_error" else f"no_results:{res.status}"
            )
            return Verdict(
                0.0,
                False,
                program,
                reason,
                {"passed": 0, "total": n, "status": res.status, "stderr": res.stderr[-500:]},
            )
        passed = sum(c.passed for c in cases)
        all_ok = passed == n
        score = 1.0 if all_ok else (passed / n if self.partial_credit else 0.0)
        details = {
            "passed": passed,
            "total": n,
            "status": res.status,
            "cases": [(c.passed, c.value, c.error) for c in cases],
        }
        return Verdict(
            score, all_ok, program, "all_passed" if all_ok else f"{passed}/{n}_passed", details
        )

    def score(self, task: Task, text: str) -> Verdict:
        return self.score_many(task, [text])[0]

    def score_many(self, task: Task, texts: Sequence[str]) -> list[Verdict]:
        """Score several completions with one concurrent ``run_many`` batch."""
        ep, pc = task.meta.get("entry_point", ""), task.meta.get("prompt_code", "")
        programs = [extract_program(t, ep, pc) for t in texts]
        todo = [(i, p) for i, p in enumerate(programs) if p is not None]
        jobs, markers = [], []
        for _, p in todo:
            j, m = self._job(task, p)
            jobs.append(j)
            markers.append(m)
        results = self.sandbox.run_many(jobs) if jobs else []
        out: list[Verdict] = [self._verdict(task, None, None, None)] * len(texts)
        for (i, p), res, m in zip(todo, results, markers, strict=True):
            out[i] = self._verdict(task, p, res, m)
        return out

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
            msg += f" First failure: {task.meta['tests'][first_fail][:120]} ({got})."
        return msg

    def reference_completion(self, task: Task) -> str:
        """A correct completion: the canonical solution in a fenced block."""
        return f"```python\n{task.answer.rstrip()}\n```"

    def noisy_completion(self, task: Task, rng: random.Random) -> str:
        """A plausible buggy completion: one constant or comparison of the canonical
        solution changed (may occasionally still pass, like a real near-miss)."""
        src = task.answer
        nums = [m for m in re.finditer(r"(?<![\w.])\d+", src)]
        if nums and rng.random() < 0.7:
            m = rng.choice(nums)
            new = str(int(m.group()) + rng.choice([-1, 1, 2]))
            src = src[: m.start()] + new + src[m.end() :]
        else:
            swaps = [
                ("<=", "<"),
                (">=", ">"),
                (" > ", " >= "),
                (" < ", " <= "),
                (" + ", " - "),
                (" - ", " + "),
                ("==", "!="),
            ]
            hits = [(a, b) for a, b in swaps if a in src]
            if hits:
                a, b = rng.choice(hits)
                src = src.replace(a, b, 1)
            else:
                return self.wrong_completion(task)
        return f"```python\n{src.rstrip()}\n```"

    def wrong_completion(self, task: Task) -> str:
        """A well-formed completion that fails the tests (returns None)."""
        ep = task.meta.get("entry_point", "f")
        return f"```python\ndef {ep}(*args, **kwargs):\n    return None\n```"
