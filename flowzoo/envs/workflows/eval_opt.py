"""Eval-Opt: an optimizer drafts, an evaluator critiques, the optimizer revises.

Turn order: ``optimizer, evaluator, optimizer, evaluator, ...``. The evaluator replies with a
verdict (``Verdict: ACCEPT`` or ``Verdict: REVISE``; CORRECT/INCORRECT are read the same way)
and feedback. The loop stops at ACCEPT or after ``max_rounds`` evaluator turns (3 for math,
2 for code, as in the study). The final answer is the last draft. An unreadable verdict
counts as REVISE and is flagged ``verdict_unparsed``. With ``evaluator_sees_tests=True``
(code tasks; off by default, as in the study) the evaluator also sees the draft's test report.
"""

from __future__ import annotations

from dataclasses import dataclass

from flowzoo.envs.workflows.base import (
    Act,
    Episode,
    Outcome,
    Readings,
    Turn,
    Workflow,
    WorkflowOptions,
    quote,
    shows_work,
    testbed_words,
)
from flowzoo.envs.workflows.parsing import parse_feedback, parse_verdict
from flowzoo.tasks.base import Verdict


@dataclass
class EvalOptOptions(WorkflowOptions):
    max_rounds: int = 3
    evaluator_sees_tests: bool = False


class EvalOpt(Workflow):
    name = "eval-opt"
    Options = EvalOptOptions
    template_fields = {
        "optimizer": (),
        "optimizer_revise": ("draft", "feedback"),
        "evaluator": ("draft", "tests"),
    }
    solving_roles = frozenset({"optimizer"})
    readings = Readings(
        extras=("first_draft_correct", "evaluator_accuracy"),
        partner="evaluator",
        partner_quality="evaluator_accuracy",
    )
    turn_tokens = {"math": {"optimizer": 96, "evaluator": 128}}
    parse_flags = frozenset({"verdict_unparsed", "empty_action"})
    #: evaluator rounds as in the study: 3 for math, 2 for code
    family_defaults = {"math": {"max_rounds": 3}, "code": {"max_rounds": 2}}

    def expert_action(self, ep, agent, role, err, rng) -> str:
        if role != "evaluator":
            return super().expert_action(ep, agent, role, err, rng)
        ok = self.family.score(ep.task, ep.last_of_role("optimizer").action).correct
        if ok != err:
            return "Verdict: ACCEPT\nFeedback: the draft is correct."
        return "Verdict: REVISE\nFeedback: the result is wrong; recompute it."

    def behaviour_action(self, ep, agent, role, shortcut, rng) -> Act:
        """Evaluator: demand the work (accept a draft that shows its steps, send a bare answer
        back) or, as its shortcut, rubber-stamp every draft. A rule read off the draft, not
        the gold, so a small model can learn it. The optimizer's drafts and revisions: work
        the steps or answer directly."""
        if role != "evaluator":
            return super().behaviour_action(ep, agent, role, shortcut, rng)
        if shortcut or shows_work(self.family, ep.task, ep.last_of_role("optimizer").action):
            return Act("Verdict: ACCEPT\nFeedback: the draft is correct.")
        return Act(f"Verdict: REVISE\nFeedback: {testbed_words(self.family)[2]}")

    def behaviour(self, ep, i) -> bool | None:
        """Evaluator: on a wrong draft, REVISE (it checked) vs ACCEPT (rubber-stamp); a right
        draft cannot tell them apart."""
        turn = ep.turns[i]
        if turn.role != "evaluator":
            return super().behaviour(ep, i)
        if self.family.score(ep.task, turn.parsed["draft"]).correct:
            return None
        return turn.parsed["verdict"] == "revise"

    def wrong_action(self, ep, agent, role) -> str:
        if role == "evaluator":
            return "Verdict: REVISE\nFeedback: recheck the computation."
        return super().wrong_action(ep, agent, role)

    @classmethod
    def check_options(cls, options: EvalOptOptions) -> None:
        if not 1 <= options.max_rounds <= 10:
            raise ValueError(f"max_rounds must be in 1..10, got {options.max_rounds}")
        super().check_options(options)

    def __init__(self, options: EvalOptOptions, family) -> None:
        if options.evaluator_sees_tests and not family.reports_tests:  # needs the family
            raise ValueError(
                f"evaluator_sees_tests needs a task family with test reports (code), not {family.name}"
            )
        super().__init__(options, family)

    def default_templates(self) -> dict[str, str]:
        return {
            "optimizer": "Problem: {question}\nRole: optimizer. Solve it. {answer_format}\n",
            "optimizer_revise": (
                "Problem: {question}\nDraft: {draft}\nFeedback: {feedback}\n"
                "Role: optimizer. Revise the draft using the feedback. {answer_format}\n"
            ),
            "evaluator": (
                "Problem: {question}\nDraft: {draft}\n{tests}Role: evaluator. Check the draft. "
                "Reply 'Verdict: ACCEPT' or 'Verdict: REVISE', then 'Feedback: ...'.\n"
            ),
        }

    def agents(self) -> list[str]:
        return ["optimizer", "evaluator"]

    def max_turns(self) -> int:
        return 2 * self.options.max_rounds

    def prompt(self, agent: str, ep: Episode) -> str:
        if agent == "evaluator":
            draft = ep.last_of_role("optimizer").action
            tests = ""
            if self.options.evaluator_sees_tests:
                tests = "Tests: " + self.family.test_report(ep.task, draft) + "\n"
            return self.fill("evaluator", ep, draft=quote(draft), tests=tests)
        last_eval = ep.last_of_role("evaluator")
        if last_eval is None:
            return self.fill("optimizer", ep)
        return self.fill(
            "optimizer_revise",
            ep,
            draft=quote(ep.last_of_role("optimizer").action),
            feedback=last_eval.parsed.get("feedback", ""),
        )

    def act(self, agent: str, text: str, ep: Episode, turn: Turn) -> str | None:
        if agent == "optimizer":
            return "evaluator"
        verdict = parse_verdict(text)
        if verdict is None:
            turn.flags.append("verdict_unparsed")
            verdict = "revise"
        turn.parsed["verdict"] = verdict
        turn.parsed["feedback"] = parse_feedback(text)
        turn.parsed["draft"] = ep.last_of_role("optimizer").action
        rounds = len(ep.turns_of("evaluator"))
        if verdict == "accept" or rounds >= self.options.max_rounds:
            return None
        return "optimizer"

    def outcome(self, ep: Episode) -> Outcome:
        drafts = [t.action for t in ep.turns_of("optimizer")]
        scored: dict[str, Verdict] = {}
        uniq = list(dict.fromkeys(drafts))
        for text, v in zip(uniq, self.family.score_many(ep.task, uniq), strict=True):
            scored[text] = v
        final_text = drafts[-1]
        verdict = scored[final_text]
        evals = ep.turns_of("evaluator")
        hits = [
            (t.parsed["verdict"] == "accept") == bool(scored[t.parsed["draft"]].correct)
            for t in evals
        ]
        info = {
            "rounds": len(evals),
            "accepted": bool(evals) and evals[-1].parsed["verdict"] == "accept",
            "draft_correct": [bool(scored[d].correct) for d in drafts],
            "first_draft_correct": bool(scored[drafts[0]].correct),
            "evaluator_accuracy": sum(hits) / len(hits) if hits else 0.0,
        }
        signals = {"optimizer": float(verdict.score), "evaluator": info["evaluator_accuracy"]}
        return Outcome(final_text, verdict, signals, info)
