"""The workflows: each declares roles, turn order, prompts, parsers and its final answer."""

from flowzoo.envs.workflows.base import Episode, Outcome, Turn, Workflow, WorkflowOptions
from flowzoo.envs.workflows.eval_opt import EvalOpt
from flowzoo.envs.workflows.orch_workers import OrchWorkers
from flowzoo.envs.workflows.single import Single
from flowzoo.envs.workflows.voting import Voting

WORKFLOW_CLASSES: dict[str, type[Workflow]] = {
    w.name: w for w in (EvalOpt, Voting, OrchWorkers, Single)
}

__all__ = [
    "WORKFLOW_CLASSES",
    "Episode",
    "EvalOpt",
    "OrchWorkers",
    "Outcome",
    "Turn",
    "Voting",
    "Workflow",
    "WorkflowOptions",
]
