"""Bad env options and data fail at the boundary with the value named, not deep inside."""

import json

import pytest

import flowzoo
from flowzoo.tasks.code import load_code_file
from flowzoo.tasks.math import load_math_file


@pytest.mark.parametrize(
    "env_id,kw,match",
    [
        ("voting-code", {"sandbox_options": {"timeout": 3}}, "unknown sandbox_options"),
        ("voting-code", {"sandbox": "chroot"}, "unknown sandbox backend"),
        ("voting-math", {"n_tasks": 10**9}, "n_tasks"),
        ("voting-math", {"n_tasks": 0}, "n_tasks"),
        ("voting-math", {"prompt_templates": {"solver": "{question:>999999999999}"}}, "format"),
        ("voting-math", {"prompt_templates": {"solver": "{question!r}"}}, "format"),
    ],
)
def test_bad_env_options_are_refused_when_the_env_is_made(env_id, kw, match):
    with pytest.raises(ValueError, match=match):
        flowzoo.make_env(env_id, **kw)


@pytest.mark.parametrize(
    "row",
    [["a list"], {"question": "1+1?", "answer": {"x": 2}}, {"question": "1+1?", "answer": [2]}],
)
def test_math_rows_with_non_text_fields_are_refused(tmp_path, row):
    f = tmp_path / "m.jsonl"
    f.write_text(json.dumps(row) + "\n")
    with pytest.raises(ValueError, match=r"m\.jsonl(:1|.*row 0)"):  # the file and its row
        load_math_file(f)


def test_code_rows_with_non_text_fields_are_refused(tmp_path):
    f = tmp_path / "h.jsonl"
    row = {"task_id": "X/0", "prompt": "def f(x):\n", "entry_point": "f", "test": ["assert f(1)"]}
    f.write_text(json.dumps(row) + "\n")
    with pytest.raises(ValueError, match="must be text"):
        load_code_file(f, style="humaneval")


def test_the_env_mixes_the_overlong_penalty_per_turn():
    """A turn its generator cut at the token budget (``Cut``) pays ``overlong_penalty`` in
    the env, the one place rewards are mixed; the other turns and a plain env do not."""
    from flowzoo.envs.core import Cut
    from flowzoo.envs.scripted import oracle_policy

    env = flowzoo.make_env("eval-opt-math", overlong_penalty=0.25)
    env.reset(seed=0)
    final, reward = {}, {}
    for agent in env.agent_iter():
        _, r, term, trunc, info = env.last()
        if term or trunc:
            final[agent], reward[agent] = info, r
            env.step(None)
            continue
        text = oracle_policy(env, agent)
        env.step(Cut(text) if agent == "optimizer" else text)
    team = final["optimizer"]["team_reward"]
    assert team == 1.0 and "cut_at_budget" in final["optimizer"]["flags"]
    assert final["optimizer"]["turn_rewards"] == [team - 0.25]
    assert reward["optimizer"] == team - 0.25
    assert final["evaluator"]["turn_rewards"] == [team] and reward["evaluator"] == team
    with pytest.raises(ValueError, match="overlong_penalty"):
        flowzoo.make_env("voting-math", overlong_penalty=float("nan"))
