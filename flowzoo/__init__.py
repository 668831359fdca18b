"""flowzoo: multi-agent LLM workflows as reinforcement-learning environments.

``flowzoo.make_env("voting-math")`` returns a PettingZoo AEC env. Importing flowzoo loads the
env registry (and registers ``flowzoo/<id>-v0`` with PettingZoo) but never torch.
"""

__version__ = "0.1.0"

from flowzoo.envs.registry import env, list_envs, make_env, register  # noqa: E402

__all__ = ["__version__", "env", "list_envs", "make_env", "register"]
