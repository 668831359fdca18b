"""Orch-Workers: an orchestrator plans, k workers carry out one item each, a synthesizer combines.

Turn order: ``orchestrator, worker_0 .. worker_{k-1}, synthesizer``.

- ``mode="strategies"`` (default, as in the study's code): the orchestrator proposes up to k
  distinct solution strategies without solving; each worker solves the whole problem with
  its strategy; the synthesizer compares the full solutions and gives the final answer.
- ``mode="decompose"``: the orchestrator splits the problem into sub-questions; workers
  answer them; the synthesizer combines the sub-answers.

Plan items are lines like ``Strategy 1: ...``, ``1. ...`` or ``- ...``. Fallbacks: no item
parses -> every worker gets the whole problem with no strategy (``plan_unparsed``); fewer
items than workers -> items are reused in turn (``plan_short``); an orchestrator that writes
a boxed answer is flagged ``orchestrator_solved``. The final answer is the synthesizer's.
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
    attempt,
    combine,
    considered_pick,
    is_bare,
    testbed_words,
)
from flowzoo.envs.workflows.parsing import parse_plan
from flowzoo.tasks.math.extract import find_boxed

MODES = ("strategies", "decompose")
NO_STRATEGY = "Solve the problem directly."


@dataclass
class OrchWorkersOptions(WorkflowOptions):
    n_workers: int = 3
    mode: str = "strategies"


class OrchWorkers(Workflow):
    name = "orch-workers"
    Options = OrchWorkersOptions
    template_fields = {
        "orchestrator": ("n",),
        "worker": ("item",),
        "synthesizer": ("plan", "results", "n"),
    }
    parallel_roles = frozenset({"worker"})
    readings = Readings(
        extras=("any_worker_correct", "final_copied", "adopted_copied"),
        partner="synthesizer",
        partner_quality="accuracy - any_worker_correct",
    )
    solving_roles = frozenset({"worker", "synthesizer"})
    turn_tokens = {
        "math": {"orchestrator": 160, "worker": 96, "synthesizer": 96},
        "code": {"orchestrator": 256},
    }
    parse_flags = frozenset({"plan_unparsed", "empty_action"})

    def expert_action(self, ep, agent, role, err, rng) -> str:
        if role == "orchestrator":
            return self.plan_text(poor=True) if err else self.plan_text()
        if role == "synthesizer":
            return combine(self.family, ep, "worker", err, rng)
        return super().expert_action(ep, agent, role, err, rng)

    def behaviour_action(self, ep, agent, role, shortcut, rng) -> Act:
        """Orchestrator: distinct strategies that work the steps, or (shortcut) one repeated
        "answer directly". Worker: follows its strategy, or (shortcut) does the opposite — so
        a worker can learn to work the steps whatever it is told. Synthesizer: the considered
        pick among the solutions, or (shortcut) solution 1's answer; under ``conflict`` the
        considered pick's answer, bare, or (shortcut) the steps worked again."""
        considered, direct, _ = testbed_words(self.family)
        if role == "synthesizer" and self.options.conflict:
            sols = [ep.turns_of(f"worker_{i}")[-1].action for i in range(self.k)]
            act = self.conflict_action(ep, sols, shortcut)
            if act is not None:
                return act
        if role == "orchestrator":
            ideas = [direct] if shortcut else list(considered)
            word = "Strategy" if self.options.mode == "strategies" else "Step"
            return Act("\n".join(f"{word} {i + 1}: {ideas[i % len(ideas)]}" for i in range(self.k)))
        if role == "worker":
            told_direct = ep.data["items"][int(agent.rsplit("_", 1)[1])] == direct
            return attempt(self.family, ep.task, told_direct != shortcut, rng)
        if role == "synthesizer" and self.options.mode == "strategies":
            sols = [ep.turns_of(f"worker_{i}")[-1].action for i in range(self.k)]
            pick = 0 if shortcut else considered_pick(self.family, ep.task, sols)
            if self.family.name == "code":  # the final answer is the picked program itself
                return Act(sols[pick])
            answer = self.family.extract(sols[pick])
            if answer is not None:
                return Act(f"\\boxed{{{answer}}}")
        return super().behaviour_action(ep, agent, role, shortcut, rng)

    def behaviour(self, ep, i) -> bool | None:
        """Orchestrator: a plan whose strategies work the steps vs one that says to answer
        directly (None: unparsed). Synthesizer: the considered pick's answer vs solution 1's
        (None when they agree); under ``conflict``, a bare answer vs worked steps."""
        turn = ep.turns[i]
        if turn.role == "synthesizer" and self.options.conflict:
            return is_bare(turn.action)
        if turn.role == "orchestrator":
            plan = turn.parsed.get("plan")
            if plan is None:
                return None
            return not any("direct" in item.lower() for item in plan)
        if turn.role == "synthesizer" and self.options.mode == "strategies":
            sols = [ep.turns_of(f"worker_{j}")[-1].action for j in range(self.k)]
            fam, task = self.family, ep.task
            best = considered_pick(fam, task, sols)
            keys = [fam.answer_class(task, v) for v in fam.score_many(task, [sols[0], sols[best]])]
            mine = fam.answer_class(task, fam.score(task, turn.action))
            if keys[0] == keys[1] or mine not in keys:
                return None
            return mine == keys[1]
        return super().behaviour(ep, i)

    def wrong_action(self, ep, agent, role) -> str:
        if role == "orchestrator":
            return self.plan_text()
        return super().wrong_action(ep, agent, role)

    def plan_text(self, poor: bool = False) -> str:
        """A well-formed plan of ``k`` items in this mode's words; ``poor``: the expert's
        mistake, a plan that is well formed but gives the workers nothing (a format failure
        is not the mistake a competent orchestrator makes)."""
        word = "Strategy" if self.options.mode == "strategies" else "Step"
        ideas = [
            "work step by step",
            "check each operation",
            "rewrite then compute",
            "estimate then refine",
        ]
        if poor:
            ideas = ["just answer", "guess quickly"]
        return "\n".join(f"{word} {i + 1}: {ideas[i % len(ideas)]}" for i in range(self.k))

    @classmethod
    def check_options(cls, options: OrchWorkersOptions) -> None:
        if not 1 <= options.n_workers <= 16:
            raise ValueError(f"n_workers must be in 1..16, got {options.n_workers}")
        if options.mode not in MODES:
            raise ValueError(f"unknown mode {options.mode!r}; valid: {', '.join(MODES)}")
        if options.conflict and options.mode != "strategies":
            raise ValueError(
                f"conflict=True needs mode='strategies' (the synthesizer compares whole "
                f"solutions), got mode={options.mode!r}"
            )
        super().check_options(options)

    def __init__(self, options: OrchWorkersOptions, family) -> None:
        super().__init__(options, family)
        self.k = options.n_workers

    @classmethod
    def final_role(cls) -> str | None:
        return "synthesizer"

    def default_templates(self) -> dict[str, str]:
        synth = "and give the final answer. {answer_format}\n"
        if self.options.conflict:
            synth = "and give the final answer only, as \\boxed{{ANSWER}}.\n"
        if self.options.mode == "strategies":
            return {
                "orchestrator": (
                    "Problem: {question}\nRole: orchestrator. Do not solve it. Propose {n} different "
                    "strategies, one per line as 'Strategy 1: ...'.\n"
                ),
                "worker": (
                    "Problem: {question}\nStrategy: {item}\nRole: worker. Solve it with this "
                    "strategy. {answer_format}\n"
                ),
                "synthesizer": (
                    "Problem: {question}\n{results}\nRole: synthesizer. Compare the {n} solutions "
                    + synth
                ),
            }
        return {
            "orchestrator": (
                "Problem: {question}\nRole: orchestrator. Split the problem into up to {n} "
                "sub-questions, one per line as 'Step 1: ...'.\n"
            ),
            "worker": (
                "Problem: {question}\nSub-question: {item}\nRole: worker. Answer the sub-question. "
                "{answer_format}\n"
            ),
            "synthesizer": (
                "Problem: {question}\nPlan:\n{plan}\n{results}\nRole: synthesizer. Combine the "
                "{n} sub-answers into the final answer. {answer_format}\n"
            ),
        }

    def agents(self) -> list[str]:
        return ["orchestrator"] + [f"worker_{i}" for i in range(self.k)] + ["synthesizer"]

    def max_turns(self) -> int:
        return self.k + 2

    def prompt(self, agent: str, ep: Episode) -> str:
        if agent == "orchestrator":
            return self.fill("orchestrator", ep, n=self.k)
        items: list[str] = ep.data["items"]
        if agent == "synthesizer":
            label = "Solution" if self.options.mode == "strategies" else "Sub-answer"
            results = "\n".join(
                self.candidate_line(label, i, ep.turns_of(f"worker_{i}")[-1].action)
                for i in range(self.k)
            )
            plan = "\n".join(f"{i + 1}. {it}" for i, it in enumerate(items))
            return self.fill("synthesizer", ep, plan=plan, results=results, n=self.k)
        i = int(agent.rsplit("_", 1)[1])
        return self.fill("worker", ep, item=items[i])

    def act(self, agent: str, text: str, ep: Episode, turn: Turn) -> str | None:
        if agent == "orchestrator":
            plan = parse_plan(text, self.k)
            if plan is None:
                turn.flags.append("plan_unparsed")
                fallback = NO_STRATEGY if self.options.mode == "strategies" else ep.task.question
                items = [fallback] * self.k
            else:
                if len(plan) < self.k:
                    turn.flags.append("plan_short")
                items = [plan[i % len(plan)] for i in range(self.k)]
            if self.options.mode == "strategies" and find_boxed(text):
                turn.flags.append("orchestrator_solved")
            turn.parsed["plan"] = plan
            ep.data["items"] = items
            return "worker_0"
        if agent == "synthesizer":
            return None
        i = int(agent.rsplit("_", 1)[1])
        return f"worker_{i + 1}" if i + 1 < self.k else "synthesizer"

    def outcome(self, ep: Episode) -> Outcome:
        synth_turn = ep.last_of_role("synthesizer")
        synth = synth_turn.action
        verdict = self.final_verdict(ep, synth_turn)
        plan_ok = ep.last_of_role("orchestrator").parsed.get("plan") is not None
        info: dict = {"plan_parsed": plan_ok, "plan_items": list(ep.data["items"])}
        signals = {
            "synthesizer": float(verdict.score),
            "orchestrator": float(verdict.score) if plan_ok else 0.0,
        }
        if self.options.mode == "strategies":
            texts = [ep.turns_of(f"worker_{i}")[-1].action for i in range(self.k)]
            wv = self.family.score_many(ep.task, texts)
            info["worker_correct"] = {f"worker_{i}": bool(v.correct) for i, v in enumerate(wv)}
            info["any_worker_correct"] = any(v.correct for v in wv)
            info["final_copied"] = self.copied(ep, synth, texts)
            info["adopted_copied"] = self.adopted_copied(ep, synth, texts)
            signals.update({f"worker_{i}": float(v.score) for i, v in enumerate(wv)})
        else:  # sub-answers are combined, not adopted: nothing to have copied
            info["final_copied"] = info["adopted_copied"] = None
            signals.update({f"worker_{i}": float(verdict.score) for i in range(self.k)})
        return Outcome(synth, verdict, signals, info)
