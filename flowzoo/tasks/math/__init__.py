"""Math tasks: answer extraction, equivalence checking, task sources.

Public entry points other tools call: :func:`extract_answer` and :func:`is_equivalent`.
"""

from __future__ import annotations

import random
from collections.abc import Hashable, Sequence

from flowzoo.tasks.base import Task, Verdict
from flowzoo.tasks.math.data import (
    arithmetic_tasks,
    load_hf_local,
    load_math_dataset,
    load_math_file,
    reasoning_gym_tasks,
    solve_steps,
)
from flowzoo.tasks.math.extract import extract_answer, read_answer
from flowzoo.tasks.math.normal import normalize, to_number
from flowzoo.tasks.math.verify import check, is_equivalent

__all__ = [
    "MathFamily",
    "arithmetic_tasks",
    "check",
    "extract_answer",
    "is_equivalent",
    "load_hf_local",
    "load_math_dataset",
    "load_math_file",
    "normalize",
    "read_answer",
    "reasoning_gym_tasks",
]


class MathFamily:
    """Math answers: extracted from a completion, checked for equivalence with the gold."""

    name = "math"
    answer_format = "End with the final answer as \\boxed{ANSWER}."
    reports_tests = False

    def extract(self, text: str) -> str | None:
        return extract_answer(text)

    def score(self, task: Task, text: str) -> Verdict:
        """The completion's final answer checked against the gold, the problem's words
        allowed as its unit; a hedge, an unclosed box or an unreadable answer say so."""
        answer, why = read_answer(text)
        if answer is None:
            return Verdict(0.0, False, None, why)
        return check(task.answer, answer, question=task.question)

    def score_many(self, task: Task, texts: Sequence[str]) -> list[Verdict]:
        return [self.score(task, t) for t in texts]

    def flags(self, task: Task, text: str) -> list[str]:
        return []  # the verdict is the whole story: an answer checked against the gold

    def test_report(self, task: Task, text: str) -> str | None:
        return None  # a math problem has no tests

    def reference_completion(self, task: Task) -> str:
        """A correct, well-formed completion (worked steps where the task has them)."""
        steps = task.meta.get("steps")
        if steps:
            lines, _ = solve_steps(steps)
            return ". ".join(lines) + f". \\boxed{{{task.answer}}}"
        return f"The answer is \\boxed{{{task.answer}}}."

    def noisy_completion(self, task: Task, rng: random.Random) -> str:
        """A plausible wrong completion: one arithmetic slip carried through the steps."""
        steps = task.meta.get("steps")
        if not steps:
            return self.wrong_completion(task)
        at = rng.randrange(len(steps))
        slip = rng.choice([-10, -2, -1, 1, 2, 10])
        lines, val = solve_steps(steps, slip_at=at, slip=slip)
        return ". ".join(lines) + f". \\boxed{{{val}}}"

    def direct_completion(self, task: Task) -> str:
        """The right answer with no steps shown: the testbed's shortcut behaviour, reliable
        for one step and a guess beyond it (docs/testbed.md)."""
        return f"\\boxed{{{task.answer}}}"

    def shows_work(self, task: Task, text: str) -> bool | None:
        """Whether the completion writes out at least one step (``a op b = c``)."""
        return " = " in text

    def guess_completion(self, task: Task, rng: random.Random) -> str:
        """A direct answer that misses: near the value, or the value before the last step
        (what a model that skips the steps tends to write)."""
        steps = task.meta.get("steps") or []
        if not steps:
            return self.wrong_completion(task)
        gold = solve_steps(steps)[1]
        partial = solve_steps(steps[:-1])[1] if len(steps) > 1 else gold
        guess = partial if rng.random() < 0.3 and partial != gold else gold
        while guess == gold:
            guess = gold + rng.choice([-10, -3, -2, -1, 1, 2, 3, 10])
        return f"\\boxed{{{guess}}}"

    def wrong_completion(self, task: Task) -> str:
        """A well-formed completion whose answer is wrong."""
        num = to_number(normalize(task.answer))
        wrong = str(num[0] + 1) if num is not None else "-12345"
        return f"The answer is \\boxed{{{wrong}}}."

    def answer_class(self, task: Task, verdict: Verdict) -> Hashable | None:
        """Exact value for numbers, normalised text otherwise (None: no answer)."""
        if verdict.extracted is None:
            return None
        norm = normalize(verdict.extracted)
        num = to_number(norm)
        if num is not None:
            return ("num", num[0] / 100 if num[1] else num[0])
        return ("text", norm.replace(" ", "").lower())
