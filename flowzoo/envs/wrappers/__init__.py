"""Views of the workflow envs for other RL libraries: single-agent Gymnasium, tokenised,
discrete-choice, TRL (see the README's "Using flowzoo with other RL libraries")."""

from flowzoo.envs.wrappers.choice import AggregatorChoiceEnv, EvaluatorChoiceEnv, step_consistency
from flowzoo.envs.wrappers.single_agent import SingleAgentEnv, scripted, single_agent, transcript
from flowzoo.envs.wrappers.tokenized import TokenizedView
from flowzoo.envs.wrappers.trl_adapter import FlowzooToolEnv, RoleEpisodes

__all__ = [
    "AggregatorChoiceEnv",
    "EvaluatorChoiceEnv",
    "FlowzooToolEnv",
    "RoleEpisodes",
    "SingleAgentEnv",
    "TokenizedView",
    "scripted",
    "single_agent",
    "step_consistency",
    "transcript",
]
