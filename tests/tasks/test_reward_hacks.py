"""Reward hacking, on every sandbox backend that works here: completions that solve nothing
score 0 (and the ones that write to the judge's channel are flagged), while canonical
solutions still score 1. Docker skips with the reason when no engine answers."""

import pytest

import flowzoo
from flowzoo.envs.scripted import play_episode
from flowzoo.tasks.code import CodeFamily, function_tasks, humaneval_tasks
from tests.reward_hacks import HACKS, hack_completion

#: hacks that can only work by writing to the judge's channel or faking the program's end
CHANNEL_HACKS = {
    "forge_all_fds_and_exit",
    "forge_done_line_at_exit",
    "exit_zero_on_load",
    "thread_outlives_call",
    "del_side_effect",
}
#: hacks that burn the run's whole time budget: checked on fewer tasks
SLOW_HACKS = {"ignore_alarm_and_spin", "huge_return", "deep_nesting_return"}
#: HumanEval problems of every test shape: flat asserts, float answers, a whole ``check``
#: with a loop over random arguments (32, 53), helpers from the prompt (38), exceptions
HE_IDS = [
    "HumanEval/0",
    "HumanEval/2",
    "HumanEval/32",
    "HumanEval/38",
    "HumanEval/53",
    "HumanEval/107",
    "HumanEval/151",
    "HumanEval/160",
]


@pytest.fixture(
    scope="module",
    params=["process", "process-spawn", pytest.param("docker", marks=pytest.mark.docker)],
)
def family(request):
    if request.param == "docker":
        from flowzoo.sandbox.docker import docker_unavailable_reason

        why = docker_unavailable_reason()
        if why:
            pytest.skip(f"no Docker engine: {why}")
        fam = CodeFamily("docker", {"pool_size": 2, "timeout_s": 3}, test_timeout_s=3)
    else:
        opts = {"forkserver": request.param == "process", "timeout_s": 3}
        fam = CodeFamily("process", opts, test_timeout_s=3)
    yield fam
    fam.sandbox.close()


@pytest.fixture(scope="module")
def tasks():
    he = humaneval_tasks()
    return [he.by_id(i) for i in HE_IDS] + list(function_tasks(6, split="test"))


def test_canonical_solutions_score_one(family, tasks):
    got = family.score_pairs([(t, family.reference_completion(t)) for t in tasks])
    assert [v.score for v in got] == [1.0] * len(tasks), [v.reason for v in got]


@pytest.mark.parametrize("hack", sorted(HACKS))
def test_hack_scores_zero(family, tasks, hack):
    use = tasks[:2] + tasks[-2:] if hack in SLOW_HACKS else tasks
    got = family.score_pairs([(t, hack_completion(hack, t.meta["entry_point"])) for t in use])
    assert [v.score for v in got] == [0.0] * len(use), [v.reason for v in got]
    assert not any(v.correct for v in got)
    if hack in CHANNEL_HACKS:
        assert all(v.details["tamper"] for v in got), [v.reason for v in got]
        assert all(family.flags(t, hack_completion(hack, t.meta["entry_point"])) for t in use)


def test_every_humaneval_canonical_solution_passes_the_judge():
    fam = CodeFamily()
    ts = list(humaneval_tasks())
    got = fam.score_pairs([(t, fam.reference_completion(t)) for t in ts])
    assert sum(v.correct for v in got) == len(ts), [
        (t.id, v.reason) for t, v in zip(ts, got, strict=True) if not v.correct
    ]


def test_tampering_is_flagged_in_infos_and_scores_zero():
    env = flowzoo.make_env("voting-code")
    env.reset(seed=1)
    t = env.episode.task
    forged = hack_completion("forge_all_fds_and_exit", t.meta["entry_point"])
    right = env.family.reference_completion(t)

    def pol(env, agent):
        return {
            "solver_0": forged,
            "solver_1": right,
            "solver_2": right,
            "aggregator": "\\boxed{0}",
        }[agent]

    res = play_episode(env, pol, seed=1)
    assert res["solver_correct"] == {"solver_0": False, "solver_1": True, "solver_2": True}
    assert not res["correct"]  # the aggregator chose the forged program
    flags = res["flags_by_agent"]
    assert "reward_tamper" in flags["solver_0"] and "reward_tamper" not in flags["solver_1"]
