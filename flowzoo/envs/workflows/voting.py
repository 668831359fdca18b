"""Voting: k solvers answer the same prompt independently, an aggregator decides.

Turn order: ``solver_0 .. solver_{k-1}``, then ``aggregator``. Solvers see only the problem
(never each other). ``aggregator_mode="select"`` (default, as in the study's code): the
aggregator names a candidate (``\\boxed{2}`` = candidate 2, 1-based) and that solver's
answer is final; an unparseable choice falls back per ``aggregator_fallback``:
``"none"`` (default; no final answer, reward 0), ``"majority"`` or ``"first"``.
``aggregator_mode="answer"``: the aggregator writes the final answer itself (as it does
under ``conflict=True``, the role-conflict testbed, where that answer must be bare).
``infos`` record each solver's correctness and the plain majority vote's, so the learned
aggregator can be compared with majority voting.
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
    combine,
    considered_pick,
    is_bare,
    majority,
)
from flowzoo.envs.workflows.parsing import parse_choice
from flowzoo.tasks.base import Verdict

AGGREGATOR_MODES = ("select", "answer")
FALLBACKS = ("none", "majority", "first")


@dataclass
class VotingOptions(WorkflowOptions):
    n_voters: int = 3
    aggregator_mode: str = "select"
    aggregator_fallback: str = "none"


class Voting(Workflow):
    name = "voting"
    Options = VotingOptions
    template_fields = {"solver": (), "aggregator": ("candidates", "n")}
    parallel_roles = frozenset({"solver"})
    readings = Readings(
        extras=("majority_correct", "any_correct", "final_copied", "adopted_copied"),
        partner="aggregator",
        partner_quality="accuracy - majority_correct",
    )
    solving_roles = frozenset({"solver"})
    turn_tokens = {"math": {"solver": 96, "aggregator": 64}}
    parse_flags = frozenset({"choice_unparsed", "empty_action"})

    def expert_action(self, ep, agent, role, err, rng) -> str:
        if role != "aggregator":
            return super().expert_action(ep, agent, role, err, rng)
        if self.answer_mode:
            return combine(self.family, ep, "solver", err, rng)
        cands = [t.action for t in ep.turns if t.role == "solver"]
        good = [i for i, c in enumerate(cands) if self.family.score(ep.task, c).correct]
        bad = [i for i in range(len(cands)) if i not in good]
        pool = bad if (err and bad) else (good or bad)
        return f"Best is candidate {pool[0] + 1}. \\boxed{{{pool[0] + 1}}}"

    def behaviour_action(self, ep, agent, role, shortcut, rng) -> Act:
        """Aggregator: the considered pick (an answer two solvers share, else one that shows
        its steps) or, as its shortcut, candidate 1. Under ``conflict``: the considered
        pick's answer, bare, or (shortcut) the steps worked again."""
        cands = [t.action for t in ep.turns if t.role == "solver"]
        if role == "aggregator" and self.options.conflict:
            act = self.conflict_action(ep, cands, shortcut)
            if act is not None:
                return act
        if role != "aggregator" or self.answer_mode:
            return super().behaviour_action(ep, agent, role, shortcut, rng)
        pick = 0 if shortcut else considered_pick(self.family, ep.task, cands)
        return Act(f"\\boxed{{{pick + 1}}}")

    def behaviour(self, ep, i) -> bool | None:
        """Aggregator: the considered pick vs candidate 1 (None when they coincide or the
        choice did not parse); under ``conflict``, a bare answer vs worked steps."""
        turn = ep.turns[i]
        if turn.role == "aggregator" and self.options.conflict:
            return is_bare(turn.action)
        if turn.role != "aggregator" or self.answer_mode:
            return super().behaviour(ep, i)
        choice = turn.parsed.get("choice")
        cands = [t.action for t in ep.turns[:i] if t.role == "solver"]
        best = considered_pick(self.family, ep.task, cands)
        if choice is None or best == 0 or choice not in (0, best):
            return None
        return choice == best

    def wrong_action(self, ep, agent, role) -> str:
        if role == "aggregator" and not self.answer_mode:
            return "\\boxed{1}"
        return super().wrong_action(ep, agent, role)

    @classmethod
    def check_options(cls, options: VotingOptions) -> None:
        if not 1 <= options.n_voters <= 16:
            raise ValueError(f"n_voters must be in 1..16, got {options.n_voters}")
        if options.aggregator_mode not in AGGREGATOR_MODES:
            raise ValueError(
                f"unknown aggregator_mode {options.aggregator_mode!r}; valid: {', '.join(AGGREGATOR_MODES)}"
            )
        if options.aggregator_fallback not in FALLBACKS:
            raise ValueError(
                f"unknown aggregator_fallback {options.aggregator_fallback!r}; valid: {', '.join(FALLBACKS)}"
            )
        super().check_options(options)

    def __init__(self, options: VotingOptions, family) -> None:
        super().__init__(options, family)
        self.k = options.n_voters
        #: the aggregator writes the final answer (``aggregator_mode="answer"`` or conflict)
        self.answer_mode = options.aggregator_mode == "answer" or options.conflict

    @classmethod
    def final_role(cls) -> str | None:
        return "aggregator"

    def default_templates(self) -> dict[str, str]:
        if self.options.conflict:
            agg = (
                "Problem: {question}\n{candidates}\nRole: aggregator. Read the {n} candidates and "
                "give the final answer only, as \\boxed{{ANSWER}}.\n"
            )
        elif self.options.aggregator_mode == "select":
            agg = (
                "Problem: {question}\n{candidates}\nRole: aggregator. Pick the best of the {n} "
                "candidates. Reply with its number as \\boxed{{N}}.\n"
            )
        else:
            agg = (
                "Problem: {question}\n{candidates}\nRole: aggregator. Read the {n} candidates and "
                "give the final answer. {answer_format}\n"
            )
        return {
            "solver": "Problem: {question}\nRole: solver. Solve it. {answer_format}\n",
            "aggregator": agg,
        }

    def agents(self) -> list[str]:
        return [f"solver_{i}" for i in range(self.k)] + ["aggregator"]

    def max_turns(self) -> int:
        return self.k + 1

    def prompt(self, agent: str, ep: Episode) -> str:
        if agent == "aggregator":
            cands = "\n".join(
                self.candidate_line("Candidate", i, ep.turns_of(f"solver_{i}")[-1].action)
                for i in range(self.k)
            )
            return self.fill("aggregator", ep, candidates=cands, n=self.k)
        return self.fill("solver", ep)

    def act(self, agent: str, text: str, ep: Episode, turn: Turn) -> str | None:
        if agent == "aggregator":
            if not self.answer_mode:
                choice = parse_choice(text, self.k)
                turn.parsed["choice"] = choice
                if choice is None:
                    turn.flags.append("choice_unparsed")
            return None
        i = int(agent.rsplit("_", 1)[1])
        return f"solver_{i + 1}" if i + 1 < self.k else "aggregator"

    def outcome(self, ep: Episode) -> Outcome:
        solver_texts = [ep.turns_of(f"solver_{i}")[-1].action for i in range(self.k)]
        verdicts = self.family.score_many(ep.task, solver_texts)
        classes = [self.family.answer_class(ep.task, v) for v in verdicts]
        maj = majority(classes)
        agg_turn = ep.last_of_role("aggregator")
        info: dict = {
            "solver_correct": {f"solver_{i}": bool(v.correct) for i, v in enumerate(verdicts)},
            "solver_answers": {f"solver_{i}": v.extracted for i, v in enumerate(verdicts)},
            "majority_index": maj,
            "majority_correct": bool(maj is not None and verdicts[maj].correct),
            "any_correct": any(v.correct for v in verdicts),
            "n_distinct_answers": len({c for c in classes if c is not None}),
        }
        if not self.answer_mode:
            choice = agg_turn.parsed.get("choice")
            used = choice
            if choice is None:
                fb = self.options.aggregator_fallback
                used = maj if fb == "majority" else (0 if fb == "first" else None)
            info["selected_index"] = used
            info["choice_parsed"] = choice is not None
            # a candidate itself
            info["final_copied"] = info["adopted_copied"] = True if used is not None else None
            if used is None:
                final_text, verdict = None, Verdict(0.0, False, None, "no_choice")
            else:
                final_text, verdict = solver_texts[used], verdicts[used]
        else:
            final_text = agg_turn.action
            verdict = self.final_verdict(ep, agg_turn)
            info["final_copied"] = self.copied(ep, final_text, solver_texts)
            info["adopted_copied"] = self.adopted_copied(ep, final_text, solver_texts)
        signals = {f"solver_{i}": float(v.score) for i, v in enumerate(verdicts)}
        signals["aggregator"] = float(verdict.score)
        return Outcome(final_text, verdict, signals, info)
