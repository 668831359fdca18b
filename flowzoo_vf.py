"""The ``vf-eval`` plugin id ``flowzoo-vf``: verifiers imports plugins as top-level modules,
so this re-exports :mod:`flowzoo.integrations.verifiers_env`."""

from flowzoo.integrations.verifiers_env import FlowzooEnv, FlowzooTaskset

__all__ = ["FlowzooEnv", "FlowzooTaskset"]
