"""A new task family is one record: this module defines a third family (spelling words
backwards), registers it, and runs the built-in workflows on it through ``make_env`` —
PettingZoo's API test, scripted experts, rewards — without touching flowzoo's source."""

import random
import warnings

import pytest
from pettingzoo.test import api_test

import flowzoo
from flowzoo.envs.registry import SPECS
from flowzoo.envs.scripted import oracle_policy, play_episode, wrong_policy
from flowzoo.envs.workflows import BUILTIN_WORKFLOWS
from flowzoo.tasks import FamilySpec, Task, TaskFamily, TaskSet, Verdict, register_family
from flowzoo.tasks.families import FAMILIES, family_spec, get_family

WORDS = ["river", "stone", "cloud", "maple", "ember", "frost", "quill", "tiger"]


class Backwards:
    """Answer: the word spelled backwards, on the last line after ``Answer:``."""

    name = "backwards"
    answer_format = "End with 'Answer: WORD'."
    reports_tests = False

    def extract(self, text: str) -> str | None:
        tail = text.rpartition("Answer:")
        return tail[2].strip() or None if tail[1] else None

    def score(self, task: Task, text: str) -> Verdict:
        got = self.extract(text)
        ok = got == task.answer
        return Verdict(float(ok), ok, got, "exact" if ok else "differs")

    def score_many(self, task, texts):
        return [self.score(task, t) for t in texts]

    def answer_class(self, task, verdict):
        return verdict.extracted

    def flags(self, task, text):
        return []

    def test_report(self, task, text):
        return None

    def reference_completion(self, task):
        return f"Answer: {task.answer}"

    def noisy_completion(self, task, rng: random.Random):
        return f"Answer: {task.answer[1:]}"

    def wrong_completion(self, task):
        return f"Answer: {task.answer}x"


def _load(dataset: str, split: str, n: int, seed: int) -> TaskSet:
    words = WORDS[: len(WORDS) // 2] if split == "train" else WORDS[len(WORDS) // 2 :]
    tasks = [Task(f"bw-{w}", f"Spell '{w}' backwards.", w[::-1], family="backwards") for w in words]
    return TaskSet(tasks[:n], name=dataset, split=split)


@pytest.fixture(scope="module")
def ids():
    register_family(FamilySpec("backwards", Backwards, _load, default_dataset="words"))
    out = []
    for wf in BUILTIN_WORKFLOWS:
        out += flowzoo.register(wf, families=("backwards",))
    yield out
    for env_id in out:  # later tests see only the built-in envs
        SPECS.pop(env_id)
    FAMILIES.pop("backwards")


def test_the_family_satisfies_the_protocol_the_envs_use(ids):
    assert isinstance(Backwards(), TaskFamily)
    assert isinstance(get_family("math"), TaskFamily)
    assert family_spec("backwards").default_dataset == "words"
    assert "voting-backwards" in ids and set(ids) <= set(flowzoo.list_envs())


@pytest.mark.parametrize("workflow", ["voting", "eval-opt", "orch-workers", "single"])
def test_builtin_workflows_run_a_registered_family(ids, workflow):
    env_id = f"{workflow}-backwards"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        api_test(flowzoo.make_env(env_id), num_cycles=50)
    env = flowzoo.make_env(env_id, split="test")
    assert {t.answer for t in env.tasks} == {w[::-1] for w in WORDS[4:]}
    assert set(play_episode(env, oracle_policy, seed=0)["rewards"].values()) == {1.0}
    assert set(play_episode(env, wrong_policy, seed=0)["rewards"].values()) == {0.0}


def test_bad_family_registrations_and_options_are_refused(ids):
    with pytest.raises(ValueError, match="already registered"):
        register_family(FamilySpec("backwards", Backwards, _load, default_dataset="other"))
    with pytest.raises(ValueError, match="plain name"):
        register_family(FamilySpec("back-wards", Backwards, _load, default_dataset="w"))
    with pytest.raises(ValueError, match="unknown task family 'chess'; valid: math, code"):
        family_spec("chess")
    with pytest.raises(ValueError, match="takes options"):
        get_family("math", sandbox="process")
    with pytest.raises(ValueError, match="unknown option"):
        flowzoo.make_env("voting-backwards", sandbox="docker")  # a code family's option
    assert list(FAMILIES)[:2] == ["math", "code"]
