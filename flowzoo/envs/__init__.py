"""PettingZoo AEC environments for multi-agent LLM workflows. Never imports torch."""

from flowzoo.envs.registry import list_envs, make_env, valid_options

__all__ = ["list_envs", "make_env", "valid_options"]
