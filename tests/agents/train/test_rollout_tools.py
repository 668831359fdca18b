"""Rollouts through tool turns are not built yet (issue 63 item 3, docs/tools.md): an env made
with ``tools=`` is refused by name before any policy is asked, never trained on step records
that would miscount its turns."""

import pytest

pytest.importorskip("torch")

import flowzoo  # noqa: E402
from flowzoo.agents.train.rollout import rollout, tree_rollout  # noqa: E402


def _never(role):
    raise AssertionError("no policy is asked for an env that is refused")


@pytest.mark.parametrize("how", ["rollout", "tree_rollout"])
def test_a_rollout_refuses_an_env_with_tools(how):
    envs = [
        flowzoo.make_env("voting-math", n_tasks=2),
        flowzoo.make_env("voting-math", n_tasks=2, tools=["python"]),
    ]
    with pytest.raises(NotImplementedError, match="tools=\\['python'\\].*not built yet"):
        if how == "rollout":
            rollout(envs, _never)
        else:
            tree_rollout(envs, _never, [None, None], branch=2, rng=None)


def test_a_train_config_with_tools_is_refused_when_made():
    from flowzoo.config import TrainConfig

    with pytest.raises(ValueError, match="tool turns is not built yet"):
        TrainConfig(env="voting-math", env_options={"tools": ["python"]})
    with pytest.raises(ValueError, match="valid: python"):  # a bad name: the env's own error
        TrainConfig(env="voting-math", env_options={"tools": ["run"]})
