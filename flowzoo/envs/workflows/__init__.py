"""The workflows: each declares roles, turn order, prompts, parsers and its final answer."""

from flowzoo.envs.workflows.base import Episode, Outcome, Turn, Workflow, WorkflowOptions
from flowzoo.envs.workflows.eval_opt import EvalOpt
from flowzoo.envs.workflows.orch_workers import OrchWorkers
from flowzoo.envs.workflows.single import Single
from flowzoo.envs.workflows.voting import Voting

#: the workflows flowzoo ships (registered by ``flowzoo.envs.registry`` at import)
BUILTIN_WORKFLOWS: tuple[type[Workflow], ...] = (EvalOpt, Voting, OrchWorkers, Single)

__all__ = [
    "BUILTIN_WORKFLOWS",
    "Episode",
    "EvalOpt",
    "OrchWorkers",
    "Outcome",
    "Turn",
    "Voting",
    "Workflow",
    "WorkflowOptions",
]
