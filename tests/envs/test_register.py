"""A new workflow is one file: this test module defines a fifth workflow, registers it with
``flowzoo.register`` and uses it like the built-in ones (PettingZoo's API test, its registry,
scripted experts, evaluation's notion of solving roles)."""

from dataclasses import dataclass

import pettingzoo
import pytest
from pettingzoo.test import api_test

import flowzoo
from flowzoo.envs.registry import workflow_readings
from flowzoo.envs.scripted import expert_policy, oracle_policy, play_episode, wrong_policy
from flowzoo.envs.workflows import Workflow, WorkflowOptions
from flowzoo.envs.workflows.base import Outcome, Readings, quote


@dataclass
class RelayOptions(WorkflowOptions):
    pass


class Relay(Workflow):
    """A drafter answers; a checker sees the draft and gives the final answer."""

    name = "relay"
    Options = RelayOptions
    template_fields = {"drafter": (), "checker": ("draft",)}
    solving_roles = frozenset({"drafter", "checker"})
    #: what the study reads from it: evaluation averages draft_correct; capture follows the
    #: drafter's decision quality
    readings = Readings(
        extras=("draft_correct",), partner="drafter", partner_quality="draft_correct"
    )

    def default_templates(self) -> dict[str, str]:
        return {
            "drafter": "Problem: {question}\nRole: drafter. {answer_format}\n",
            "checker": "Problem: {question}\nDraft: {draft}\nRole: checker. {answer_format}\n",
        }

    def agents(self) -> list[str]:
        return ["drafter", "checker"]

    def max_turns(self) -> int:
        return 2

    def prompt(self, agent, ep) -> str:
        if agent == "drafter":
            return self.fill("drafter", ep)
        return self.fill("checker", ep, draft=quote(ep.turns[0].action))

    def act(self, agent, text, ep, turn):
        return "checker" if agent == "drafter" else None

    def outcome(self, ep) -> Outcome:
        v = self.family.score(ep.task, ep.turns[-1].action)
        first = self.family.score(ep.task, ep.turns[0].action)
        return Outcome(
            ep.turns[-1].action,
            v,
            {"drafter": float(first.score), "checker": float(v.score)},
            {"draft_correct": bool(first.correct)},
        )


@pytest.fixture(scope="module")
def ids():
    return flowzoo.register(Relay)


def test_a_registered_workflow_is_a_full_env(ids):
    assert ids == ["relay-math", "relay-code"]
    assert "relay-math" in flowzoo.list_envs()
    assert flowzoo.register(Relay) == ids  # registering the same class again is harmless
    api_test(flowzoo.make_env("relay-math"), num_cycles=20)
    env = pettingzoo.make("aec", "flowzoo/relay-math-v0")
    assert env.possible_agents == ["drafter", "checker"]


def test_its_readings_are_declared_with_it(ids):
    """The study's readings come with the workflow (no table elsewhere to edit): the record
    every run writes, and the extra its episodes report."""
    assert workflow_readings("relay") == {
        "extras": ["draft_correct"],
        "partner": "drafter",
        "partner_quality": "draft_correct",
        "parallel": [],
    }
    info = play_episode(flowzoo.make_env("relay-math"), oracle_policy, seed=0)
    assert info["draft_correct"] is True


def test_scripted_experts_and_rewards_work_on_it(ids):
    env = flowzoo.make_env("relay-math", split="test")
    assert play_episode(env, oracle_policy, seed=0)["correct"]
    assert not play_episode(env, wrong_policy, seed=0)["correct"]
    acc = [play_episode(env, expert_policy(0.5, seed=s), seed=s)["correct"] for s in range(20)]
    assert 0 < sum(acc) < 20


def test_register_refuses_what_is_not_a_workflow(ids):
    class Nameless(Relay):
        name = ""

    class Other(Relay):
        pass

    with pytest.raises(ValueError, match="Workflow subclass"):
        flowzoo.register(object)
    with pytest.raises(ValueError, match="plain `name`"):
        flowzoo.register(Nameless)
    with pytest.raises(ValueError, match="already registered"):
        flowzoo.register(Other)
    with pytest.raises(ValueError, match="families"):
        flowzoo.register(Relay, families=("chess",))


def test_pettingzoo_make_gives_the_order_enforced_env(ids):
    env = pettingzoo.make("aec", "flowzoo/voting-math-v0")
    with pytest.raises(AssertionError, match="reset"):
        env.step("x")
    env.reset(seed=0)
    assert env.role_of("solver_1") == "solver" and env.unwrapped.env_id == "voting-math"
    api_test(flowzoo.env("relay-code"), num_cycles=10)
