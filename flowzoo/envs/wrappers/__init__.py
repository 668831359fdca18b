"""Views of the workflow envs in other shapes: single-agent Gymnasium, tokenised, discrete-choice.
Adapters to other engines (TRL, verifiers, SkyRL, TextArena, rLLM) live in
:mod:`flowzoo.integrations`."""

from flowzoo.envs.wrappers.choice import AggregatorChoiceEnv, EvaluatorChoiceEnv, step_consistency
from flowzoo.envs.wrappers.single_agent import SingleAgentEnv, scripted, single_agent, transcript
from flowzoo.envs.wrappers.tokenized import TokenizedView

__all__ = [
    "AggregatorChoiceEnv",
    "EvaluatorChoiceEnv",
    "SingleAgentEnv",
    "TokenizedView",
    "scripted",
    "single_agent",
    "step_consistency",
    "transcript",
]
