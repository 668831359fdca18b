"""Data never chooses the sandbox: only the user's own config (``make_env``'s arguments,
``TrainConfig.env_options``, an integration's env config) sets the backend, its mechanism,
``allow_weak_isolation`` or its limits.

Where data reaches env options: a SkyRL row's ``flowzoo.options`` (SkyRL builds each env from
its dataset row) and a verifiers task's ``info["options"]``. Rows that set a sandbox key there
are refused, naming the row and where the setting belongs. A task file's rows reach no option
at all (the loaders read each format's own fields): rows claiming a weak sandbox in extra
fields are judged in the user's sandbox, and a program that could only pass with the host's
files in view scores 0 there (and 1 where the user chose the weak mode, so the probe can
tell)."""

from __future__ import annotations

import copy
import importlib.util
import json
import warnings
from pathlib import Path

import pytest

import flowzoo
from flowzoo.envs.options import SANDBOX_CHOICE, row_env_options, user_sandbox_choice
from flowzoo.sandbox.process import probe

#: what rows try, each alone: the weak modes, another backend, the default named by data,
#: limits, empty and null settings, and a sandbox key hidden among ordinary options
HOSTILE = [
    {"sandbox_options": {"mechanism": "none", "allow_weak_isolation": True}},
    {"sandbox_options": {"allow_weak_isolation": True}},
    {"sandbox_options": {"mechanism": "unshare", "allow_weak_isolation": True}},
    {"sandbox_options": {"forkserver": False, "use_cgroups": False}},
    {"sandbox_options": {"timeout_s": 3600, "memory_mb": 1 << 20}},
    {"sandbox": "sandbox-fusion", "sandbox_options": {"url": "http://203.0.113.9:8080"}},
    {"sandbox": "docker", "sandbox_options": {"image": "attacker/image"}},
    {"sandbox": "process"},
    {"sandbox_options": {}},
    {"sandbox_options": None},
    {"n_voters": 3, "sandbox_options": {"mechanism": "none"}},
]
BENIGN = [None, {}, {"n_voters": 3}, {"reward_mode": "role", "role_weight": 0.5}]
SKYRL = importlib.util.find_spec("skyrl_gym") is not None
VF = importlib.util.find_spec("verifiers") is not None


@pytest.mark.parametrize("options", HOSTILE, ids=lambda o: ",".join(sorted(o)))
def test_a_row_that_chooses_the_sandbox_is_refused(options):
    with pytest.raises(ValueError, match="may not choose the sandbox") as e:
        row_env_options(options, "row 7")
    msg = str(e.value)
    assert "row 7" in msg and "your own config" in msg
    assert all(k in msg for k in options if k in SANDBOX_CHOICE)


@pytest.mark.parametrize("options", BENIGN)
def test_ordinary_row_options_pass(options):
    assert row_env_options(options, "row") == dict(options or {})


@pytest.mark.parametrize("options", ["sandbox_options", ["sandbox"], 3, b"{}"])
def test_row_options_that_are_not_an_object_are_refused(options):
    with pytest.raises(ValueError, match="JSON object"):
        row_env_options(options, "row")


def test_user_config_is_where_the_sandbox_comes_from():
    from omegaconf import OmegaConf

    want = {"sandbox": "process", "sandbox_options": {"forkserver": False, "timeout_s": 5.0}}
    assert user_sandbox_choice({**want, "other": 1}) == want
    assert user_sandbox_choice(OmegaConf.create({**want, "max_turns": 3})) == want
    assert user_sandbox_choice(None) == {} and user_sandbox_choice({"x": 1}) == {}
    with pytest.raises(TypeError, match="mapping"):
        user_sandbox_choice(["sandbox"])


# ------------------------------------------------------------------ SkyRL rows


@pytest.fixture(scope="module")
def skyrl_row():
    if not SKYRL:
        pytest.skip("skyrl-gym is not installed (pip install 'flowzoo[engines]')")
    from flowzoo.integrations.skyrl_env import skyrl_rows

    (row,) = skyrl_rows("voting-code", "aggregator", {"solver": "scripted"}, split="test", n=1)
    return row


def _tampered(row: dict, options, as_text: bool) -> dict:
    row = copy.deepcopy(row)
    opts = {**json.loads(row["flowzoo"]["options"]), **options}
    row["flowzoo"]["options"] = json.dumps(opts) if as_text else opts
    return row


@pytest.mark.parametrize("as_text", [True, False], ids=["json-text", "object"])
@pytest.mark.parametrize("options", HOSTILE, ids=lambda o: ",".join(sorted(o)))
def test_skyrl_row_options_never_choose_the_sandbox(skyrl_row, options, as_text):
    import skyrl_gym

    row = _tampered(skyrl_row, options, as_text)
    with pytest.raises(ValueError, match="may not choose the sandbox"):
        skyrl_gym.make("flowzoo", env_config=None, extras=row)


@pytest.mark.parametrize("kind", ["dict", "DictConfig"])
def test_skyrl_env_config_sets_the_sandbox_and_the_episode_is_judged(skyrl_row, kind):
    import skyrl_gym
    from omegaconf import OmegaConf

    from flowzoo.envs.scripted import ExpertPolicy

    cfg = {"sandbox_options": {"forkserver": False, "timeout_s": 8.0}}
    env_config = OmegaConf.create(cfg) if kind == "DictConfig" else cfg
    env = skyrl_gym.make("flowzoo", env_config=env_config, extras=skyrl_row)
    fam = env.view.env.family
    assert fam.sandbox_options == cfg["sandbox_options"] and not fam.sandbox.forkserver
    assert "bwrap" in fam.sandbox.isolation
    env.init(None)
    out = env.step(ExpertPolicy(0.0)(env.view.env, "aggregator"))
    assert out["done"] and out["reward"] == 1.0


def test_skyrl_rows_refuses_to_write_sandbox_settings_into_rows():
    if not SKYRL:
        pytest.skip("skyrl-gym is not installed (pip install 'flowzoo[engines]')")
    from flowzoo.integrations.skyrl_env import skyrl_rows

    for opts in ({"sandbox": "process"}, {"sandbox_options": {"forkserver": False}}):
        with pytest.raises(ValueError, match="env_config"):
            skyrl_rows("voting-code", "aggregator", split="test", n=1, **opts)


# ------------------------------------------------------------------ verifiers tasks


@pytest.fixture(scope="module")
def vf_env():
    if not VF:
        pytest.skip("verifiers is not installed (pip install 'flowzoo[engines]')")
    from flowzoo.integrations.verifiers_env import (
        FlowzooEnv,
        FlowzooEnvConfig,
        FlowzooTasksetConfig,
    )

    user = {"sandbox_options": {"forkserver": False}}
    ts = FlowzooTasksetConfig(id="flowzoo-vf", env="voting-code", n_tasks=2, options=user)
    return FlowzooEnv(FlowzooEnvConfig(taskset=ts))


def test_verifiers_task_info_carries_no_sandbox_and_the_config_sets_it(vf_env):
    infos = [t.data.info for t in vf_env.taskset.load()]
    assert infos and all(set(i["options"]) & set(SANDBOX_CHOICE) == set() for i in infos)
    env = vf_env.env_for(infos[0])
    assert env.family.sandbox_options == {"forkserver": False}


@pytest.mark.parametrize("options", HOSTILE, ids=lambda o: ",".join(sorted(o)))
def test_verifiers_task_info_never_chooses_the_sandbox(vf_env, options):
    info = dict(next(iter(vf_env.taskset.load())).data.info)
    info["options"] = {**info["options"], **options}
    with pytest.raises(ValueError, match="may not choose the sandbox"):
        vf_env.env_for(info)


# ------------------------------------------------------------------ task files

#: extra fields a row might use to ask for a weaker sandbox: none of them is read
CLAIMS = {
    "sandbox": "sandbox-fusion",
    "sandbox_options": {"mechanism": "none", "allow_weak_isolation": True},
    "mechanism": "none",
    "allow_weak_isolation": True,
    "isolation": "none",
    "options": {"sandbox_options": {"mechanism": "none", "allow_weak_isolation": True}},
    "metadata": {"sandbox": "none", "func_name": None},
}
#: a host file no sandboxed run can see (this checkout), which the weak mode shows
HOST_FILE = str(Path(__file__).resolve())
SEES_HOST = f"__import__('os').path.exists({HOST_FILE!r})"


def _rows(style: str) -> list[dict]:
    if style == "mbpp":
        row = {"text": "Return 1.", "code": "def f():\n    return 1\n",
               "test_list": ["assert f() == 1"]}  # fmt: skip
    elif style == "humaneval":
        row = {"task_id": "H/0", "prompt": "def f():\n", "entry_point": "f",
               "canonical_solution": "    return 1\n",
               "test": "def check(candidate):\n    assert candidate() == 1\n"}  # fmt: skip
    elif style == "livecodebench":
        cases = json.dumps([{"input": "\n", "output": "1\n", "testtype": "stdin"}])
        row = {"question_content": "Print 1.", "public_test_cases": cases,
               "private_test_cases": "[]", "starter_code": ""}  # fmt: skip
    else:
        row = {"description": "Print 1.", "public_tests": {"input": ["\n"], "output": ["1\n"]},
               "private_tests": {"input": [], "output": []}}  # fmt: skip
    return [{**CLAIMS, **row}]


def _probe_program(style: str) -> str:
    """Passes only where the host's files are in view."""
    if style in ("livecodebench", "codecontests"):
        return f"```python\nprint(1 if {SEES_HOST} else 0)\n```"
    return f"```python\ndef f():\n    return 1 if {SEES_HOST} else 0\n```"


@pytest.mark.parametrize("style", ["mbpp", "humaneval", "livecodebench", "codecontests"])
def test_task_file_rows_claiming_a_weak_sandbox_are_judged_in_the_users(style, tmp_path):
    path = tmp_path / f"{style}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _rows(style)))
    env = flowzoo.make_env("voting-code", dataset=f"file:{path}", split="all")
    fam, (task,) = env.family, list(env.tasks)
    assert not set(task.meta) & set(CLAIMS)
    assert fam.sandbox_options == {} and "bwrap" in fam.sandbox.isolation
    good = "```python\nprint(1)\n```" if task.meta.get("format") == "stdio" else None
    assert fam.score(task, good or fam.reference_completion(task)).score == 1.0
    assert fam.score(task, _probe_program(style)).score == 0.0
    if not probe("none"):
        return
    with warnings.catch_warnings():  # the user's own choice of the weak mode: the probe passes
        warnings.simplefilter("ignore")
        weak = flowzoo.make_env(
            "voting-code", dataset=f"file:{path}", split="all",
            sandbox_options={"mechanism": "none", "allow_weak_isolation": True},
        )  # fmt: skip
        assert weak.family.score(task, _probe_program(style)).score == 1.0


def test_saved_dataset_rows_claiming_a_weak_sandbox_are_judged_in_the_users(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = _rows("mbpp")
    flat = [{k: json.dumps(v) if isinstance(v, dict) else v for k, v in r.items()} for r in rows]
    datasets.Dataset.from_list(flat).save_to_disk(str(tmp_path / "ds"))
    env = flowzoo.make_env("voting-code", dataset=f"hf:{tmp_path / 'ds'}", split="all")
    fam = env.family
    assert fam.sandbox_options == {} and "bwrap" in fam.sandbox.isolation
    task = env.tasks[0]
    assert fam.score(task, _probe_program("mbpp")).score == 0.0


@pytest.mark.parametrize("split", ["test", "ood", "train"])
def test_a_row_may_not_choose_its_split(split):
    """A red-team round moved a SkyRL row to the held-out split through its options (the env
    read ``{"split": ..., **row}``): a row's options may not name a split at all."""
    from flowzoo.envs.options import row_env_options

    with pytest.raises(ValueError, match="split"):
        row_env_options({"split": split}, "row 7")
    assert row_env_options({"n_voters": 3}, "row 7") == {"n_voters": 3}
