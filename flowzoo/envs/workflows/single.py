"""Single: one solver, no workflow — the single-agent baseline and RL control."""

from __future__ import annotations

from dataclasses import dataclass

from flowzoo.envs.workflows.base import Episode, Outcome, Turn, Workflow, WorkflowOptions


@dataclass
class SingleOptions(WorkflowOptions):
    pass


class Single(Workflow):
    name = "single"
    Options = SingleOptions
    solving_roles = frozenset({"solver"})

    def default_templates(self) -> dict[str, str]:
        return {"solver": "Problem: {question}\nRole: solver. Solve it. {answer_format}\n"}

    def agents(self) -> list[str]:
        return ["solver"]

    def max_turns(self) -> int:
        return 1

    def prompt(self, agent: str, ep: Episode) -> str:
        return self.fill("solver", ep)

    def act(self, agent: str, text: str, ep: Episode, turn: Turn) -> str | None:
        return None

    def outcome(self, ep: Episode) -> Outcome:
        v = self.family.score(ep.task, ep.turns[-1].action)
        return Outcome(ep.turns[-1].action, v, {"solver": float(v.score)})
