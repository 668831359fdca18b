"""The role-conflict testbed (``conflict=True``): the final role must answer briefly where the
solving roles are rewarded for working the steps, on the same surface choice; each rule is
tested so that it can come out either way."""

import pytest
from pettingzoo.test import api_test

import flowzoo
from flowzoo.envs.scripted import BehaviourPolicy, play_episode
from flowzoo.tiny.recipe import CONFLICT_ENV_OPTIONS, PretrainConfig, named_config


def _play(env, seed: int, final_role: str, final_text):
    """One episode: every solving turn works the steps (the reference), the final role says
    ``final_text(episode)``; returns (final info of the final agent, the episode)."""
    env.reset(seed=seed)
    last = {}
    for agent in env.agent_iter():
        obs, reward, term, trunc, info = env.last()
        if term or trunc:
            last[agent] = (reward, info)
            env.step(None)
            continue
        role = env.role_of(agent)
        ep = env.episode
        if role == final_role:
            env.step(final_text(ep))
        elif role == "orchestrator":
            env.step(env.workflow.plan_text())
        else:
            env.step(env.family.reference_completion(ep.task))
    return last, env.episode


@pytest.mark.parametrize(
    "env_id, final_role", [("voting-math", "aggregator"), ("orch-workers-math", "synthesizer")]
)
def test_the_final_role_must_answer_bare_under_conflict(env_id, final_role):
    env = flowzoo.make_env(env_id, conflict=True)
    gold = lambda ep: ep.task.answer  # noqa: E731
    bare, ep = _play(env, 3, final_role, lambda ep: f"\\boxed{{{gold(ep)}}}")
    reward, info = bare[final_role]
    assert reward == 1.0 and "final_not_bare" not in info.get("flags", [])
    assert "final answer only" in ep.turns[-1].prompt
    assert info["final_copied"] is True and info["adopted_copied"] is True
    assert env.behaviour_log()[-1] is True  # a bare answer: the considered behaviour
    # the same right answer with its steps shown: a format failure, reward 0, flagged
    worked, ep = _play(env, 3, final_role, lambda ep: env.family.reference_completion(ep.task))
    reward, info = worked[final_role]
    assert reward == 0.0 and "final_not_bare" in info["flags"]
    # working the steps again computes an answer rather than adopting one: not a copy reading
    assert info["final_copied"] is True and info["adopted_copied"] is None
    assert all(r == 0.0 for r, _ in worked.values())  # the team reward
    assert env.behaviour_log()[-1] is False
    # an answer none of the candidates gave: not copied
    other, _ = _play(env, 3, final_role, lambda ep: f"\\boxed{{{int(gold(ep)) + 1000}}}")
    assert other[final_role][1]["final_copied"] is False and other[final_role][0] == 0.0
    assert other[final_role][1]["adopted_copied"] is False
    # without the conflict the same worked final message is right
    plain = flowzoo.make_env(
        env_id, **({"aggregator_mode": "answer"} if "voting" in env_id else {})
    )
    ok, _ = _play(plain, 3, final_role, lambda ep: plain.family.reference_completion(ep.task))
    assert ok[final_role][0] == 1.0


def test_conflict_is_a_no_op_where_no_role_answers_from_others_work():
    for env_id in ("eval-opt-math", "single-math"):
        a, b = flowzoo.make_env(env_id, conflict=True), flowzoo.make_env(env_id)
        for seed in range(5):
            ra = play_episode(a, BehaviourPolicy(0.5, seed=seed), seed=seed)["rewards"]
            rb = play_episode(b, BehaviourPolicy(0.5, seed=seed), seed=seed)["rewards"]
            assert ra == rb


@pytest.mark.parametrize(
    "env_id, kw, err",
    [
        ("voting-code", {}, ValueError),
        ("orch-workers-code", {}, ValueError),
        ("orch-workers-math", {"mode": "decompose"}, ValueError),
    ],
)
def test_conflict_is_refused_where_it_has_no_meaning(env_id, kw, err):
    with pytest.raises(err, match="conflict"):
        flowzoo.make_env(env_id, conflict=True, **kw)


@pytest.mark.parametrize("bad", ["yes", 1, None])
def test_conflict_takes_a_bool_only(bad):
    with pytest.raises(TypeError, match="conflict"):
        flowzoo.make_env("voting-math", conflict=bad)


@pytest.mark.parametrize("env_id", ["voting-math", "orch-workers-math"])
def test_conflict_envs_pass_the_pettingzoo_api_test(env_id):
    api_test(flowzoo.make_env(env_id, conflict=True), num_cycles=5)


def test_the_testbed_expert_plays_both_sides_of_the_conflict():
    """The corpus's final role takes the bare answer or works the steps again, about as often
    as its rate says, and copies its answer from a candidate when it answers bare."""
    env = flowzoo.make_env("voting-math", conflict=True)
    bare = worked = copied = 0
    for seed in range(80):
        info = play_episode(env, BehaviourPolicy(0.5, seed=seed), seed=seed)
        b = env.behaviour_log()[-1]
        bare += b is True
        worked += b is False
        copied += b is True and info["final_copied"] is True
    assert 25 < bare < 55 and 25 < worked < 55
    assert copied == bare


def test_the_conflict_builds_continue_the_default_build_and_keep_every_other_key():
    for scale in ("tiny-s", "tiny-m"):
        cfg = named_config(f"{scale}-conflict")
        assert cfg.env_options == CONFLICT_ENV_OPTIONS
        assert cfg.parent().key() == named_config(scale).key()  # a stage on the testbed
        assert cfg.base().key() == named_config(scale).base().key()
        assert cfg.key() != named_config(scale).key()
        assert named_config(scale).parent().key() == named_config(scale).base().key()
    with pytest.raises(ValueError, match="stage_parent"):
        PretrainConfig(scale="tiny-s", stage_parent="shipped")
    with pytest.raises(ValueError, match="stage_parent"):
        PretrainConfig(scale="tiny-s", stage_parent="default", midtrain_steps=0)
    keys = {n: named_config(n).key() for n in ("tiny-s", "tiny-m", "tiny-s-code", "tiny-s-code12")}
    assert keys == {
        "tiny-s": "ca9ead3f2d06",
        "tiny-m": "a2896769594d",
        "tiny-s-code": "ea95c21dfc63",
        "tiny-s-code12": "04dd371918a9",
    }
    assert named_config("tiny-s-conflict-stage1").midtrain_seed == 1


@pytest.mark.parametrize(
    "dress",
    [
        lambda w: w.replace(" = ", "="),  # no spaces around the equals sign
        lambda w: w.replace(" = ", "\u00a0=\u00a0"),  # no-break spaces
        lambda w: w.replace(" = ", " \uff1d "),  # a fullwidth equals sign
        lambda w: w.replace(" = ", " equals "),
        lambda w: w.replace(" = ", " -> "),
        lambda w: "The answer: " + w.rsplit(". ", 1)[-1],  # prose, then the box
        lambda w: w.rsplit(". ", 1)[-1] + " thousand",  # a word after the box
    ],
)
def test_a_worked_or_dressed_final_message_is_not_bare_however_it_is_written(dress):
    """A red-team round got a worked final answer paid by writing ``5 + 9=14`` (the rule
    searched for " = "): the rule is now that the whole message is one boxed value."""
    env = flowzoo.make_env("voting-math", conflict=True)
    got, _ = _play(env, 4, "aggregator", lambda ep: dress(env.family.reference_completion(ep.task)))
    reward, info = got["aggregator"]
    assert reward == 0.0 and "final_not_bare" in info["flags"]
    assert env.behaviour_log()[-1] is False
