"""Bad env options and data fail at the boundary with the value named, not deep inside."""

import dataclasses
import json

import numpy as np
import pytest

import flowzoo
from flowzoo.envs.registry import check_options
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


# ------------------------------------------------------------------ sandbox_options, by key
def _bad_values(opt) -> list:
    """Values of the wrong type or out of range for one declared sandbox setting."""
    if opt.check is not None:  # a choice
        return ["nope", 3]
    wrong = {"int": [True, "8", 8.5, None], "float": [True, "1", None], "bool": [1, "yes", None]}
    out = list(wrong.get(opt.kind, [3]))
    if opt.nullable:
        out = [v for v in out if v is not None]
    if opt.lo is not None:
        out.append(opt.lo if opt.lo_open else opt.lo - 1)
    if opt.hi is not None:
        out.append(opt.hi * 2)
    if opt.kind == "float":
        out.append(float("nan"))
    return out


def _sandbox_cases():
    from flowzoo.envs.options import sandbox_keys

    for backend in ("process", "docker", "sandbox-fusion"):
        for key, opt in sorted(sandbox_keys(backend).items()):
            for value in _bad_values(opt):
                yield pytest.param(backend, key, value, id=f"{backend}-{key}-{value!r}")


@pytest.mark.parametrize("backend,key,value", list(_sandbox_cases()))
def test_every_sandbox_setting_is_checked_by_type_and_range(backend, key, value):
    """No sandbox is built (docker and sandbox-fusion need none here): the check is make_env's."""
    with pytest.raises((TypeError, ValueError), match=f"sandbox_options: {key}="):
        flowzoo.make_env("single-code", sandbox=backend, sandbox_options={key: value})
    with pytest.raises(ValueError, match=f"sandbox_options: {key}="):  # a config's check
        check_options("single-code", {"sandbox": backend, "sandbox_options": {key: value}}, "cfg")


@pytest.mark.parametrize(
    "opts,exc,match",
    [
        ({"sandbox_options": True}, TypeError, "sandbox_options=True"),
        ({"sandbox_options": [("memory_mb", 256)]}, TypeError, "sandbox_options="),
        ({"sandbox_options": "memory_mb=256"}, TypeError, "sandbox_options="),
        ({"sandbox_options": {"memory_mb": -1}}, ValueError, "memory_mb=-1"),
        ({"sandbox_options": {"memory_mb": {}}}, TypeError, "memory_mb={}"),
        ({"sandbox_options": {"memory_mb": 32}}, ValueError, "memory_mb=32"),  # would be raised
        ({"sandbox_options": {1: 2}}, TypeError, "key 1"),
        ({"sandbox_options": {"memory": 256}}, ValueError, r"unknown sandbox_options \['memory'\]"),
        ({"sandbox_options": {"image": "x"}}, ValueError, "process backend"),  # docker's key
        ({"sandbox": "docker", "sandbox_options": {"mechanism": "bwrap"}}, ValueError, "docker"),
    ],
)
def test_sandbox_options_refused_by_name_before_anything_is_built(opts, exc, match):
    with pytest.raises(exc, match=match):
        flowzoo.make_env("voting-code", **opts)


def test_sandbox_options_beside_a_sandbox_instance_are_refused():
    from flowzoo.sandbox import get_sandbox

    sb = get_sandbox("process", forkserver=False)
    try:
        with pytest.raises(ValueError, match="Sandbox instance"):
            flowzoo.make_env("single-code", sandbox=sb, sandbox_options={"memory_mb": 256})
        env = flowzoo.make_env("single-code", sandbox=sb, sandbox_options={})
        assert env.family.sandbox is sb
    finally:
        sb.close()


def test_good_sandbox_options_reach_the_family_as_plain_python():
    opts = {"memory_mb": np.int64(256), "timeout_s": np.float32(2.5), "forkserver": np.bool_(False)}
    env = flowzoo.make_env("single-code", n_tasks=2, sandbox_options=opts)
    got = env.family.sandbox_options
    assert got == {"memory_mb": 256, "timeout_s": 2.5, "forkserver": False}
    assert [type(v) for v in got.values()] == [int, float, bool]
    json.dumps(got)


# ------------------------------------------------------------------ versioned ids
@pytest.mark.parametrize(
    "env_id",
    [
        "voting-math-v00",
        "voting-math-v01",
        "flowzoo/voting-math-v00",
        "voting-math-v",
        "voting-math-v+0",
        "voting-math-v-0",
        "voting-math-v0 ",
        "voting-math-v 0",
        "voting-math-v0.0",
        "voting-math-v\u0660",  # an Arabic-Indic zero: str.isdigit() says yes
        "voting-math-v\uff10",  # a full-width zero
        "voting-math-vO",
    ],
)
def test_malformed_versions_are_refused(env_id):
    with pytest.raises(ValueError, match="malformed version"):
        flowzoo.make_env(env_id)


@pytest.mark.parametrize("env_id", ["voting-math-v1", "flowzoo/voting-math-v10"])
def test_other_versions_are_refused_and_v0_accepted(env_id):
    with pytest.raises(ValueError, match="only version v0"):
        flowzoo.make_env(env_id)
    for good in ("voting-math-v0", "flowzoo/voting-math-v0", "voting-math"):
        assert flowzoo.make_env(good, n_tasks=2).env_id == "voting-math"


# ------------------------------------------------------------------ NumPy values at the boundary
def test_numpy_option_values_are_plain_python_after_make_env():
    env = flowzoo.make_env(
        "voting-math",
        n_voters=np.int64(2),
        n_tasks=np.int32(3),
        task_seed=np.uint8(1),
        max_cycles=np.int64(9),
        role_weight=np.float64(0.25),
        overlong_penalty=np.float32(0.5),
        reward_mode=np.str_("role"),
        max_action_chars=np.int16(100),
        prompt_templates={np.str_("solver"): np.str_("Q: {question}")},
    )
    o = env.workflow.options
    assert type(o.n_voters) is int and o.n_voters == 2 and len(env.tasks) == 3
    assert type(env.max_cycles) is int and type(env.max_action_chars) is int
    assert type(env.role_weight) is float and type(env.reward_mode) is str
    assert all(type(k) is str and type(v) is str for k, v in o.prompt_templates.items())
    json.dumps(dataclasses.asdict(o))
    json.dumps({"max_cycles": env.max_cycles, "role_weight": env.role_weight})


@pytest.mark.parametrize(
    "kw", [{"n_voters": np.bool_(True)}, {"max_cycles": np.float64(3.0)}, {"n_tasks": np.str_("3")}]
)
def test_numpy_values_of_the_wrong_kind_are_still_refused(kw):
    ((name, _),) = kw.items()
    with pytest.raises(TypeError, match=name):
        flowzoo.make_env("voting-math", **kw)


def test_a_config_check_returns_plain_python():
    got = check_options(
        "voting-code",
        {"n_voters": np.int64(2), "sandbox_options": {"memory_mb": np.int64(128)}},
        "env_options",
    )
    assert got == {"n_voters": 2, "sandbox_options": {"memory_mb": 128}}
    assert type(got["n_voters"]) is int and type(got["sandbox_options"]["memory_mb"]) is int


# ------------------------------------------------------------------ every check before building
@pytest.mark.parametrize(
    "env_id,kw",
    [
        ("voting-code", {"n_voters": 0}),
        ("voting-code", {"aggregator_mode": "vote"}),
        ("voting-code", {"aggregator_fallback": "random"}),
        ("eval-opt-code", {"max_rounds": 99}),
        ("orch-workers-code", {"n_workers": 17}),
        ("orch-workers-code", {"mode": "chaos"}),
        ("single-code", {"prompt_templates": {"judge": "x"}}),
        ("single-code", {"prompt_templates": {"solver": "{nope}"}}),
        ("single-code", {"prompt_templates": ["x"]}),
        ("single-code", {"sandbox_options": {"memory_mb": 0}}),
        ("single-code", {"test_timeout_s": 0}),
        ("single-code", {"max_cycles": 0}),
        ("single-code", {"n_tasks": -1}),
    ],
)
def test_every_option_is_checked_before_the_family_or_problems_are_built(monkeypatch, env_id, kw):
    from flowzoo.envs import registry
    from flowzoo.tasks import families

    built = []
    spec = families.FAMILIES["code"]

    def make(**o):
        built.append("family")
        return spec.make(**o)

    def load(*a):
        built.append("tasks")
        return spec.load(*a)

    monkeypatch.setitem(families.FAMILIES, "code", dataclasses.replace(spec, make=make, load=load))
    registry._load_tasks.cache_clear()
    with pytest.raises((TypeError, ValueError), match=next(iter(kw))):
        flowzoo.make_env(env_id, **kw)
    assert built == []
    flowzoo.make_env(env_id, n_tasks=2)  # the good path does build both
    assert built == ["family", "tasks"]


@pytest.mark.parametrize(
    "kw, error",
    [
        ({"sandbox": 3}, TypeError),
        ({"sandbox": object()}, TypeError),
        ({"sandbox": "kubernetes"}, ValueError),
        ({"tools": "run"}, TypeError),
        ({"tools": ["run", 1]}, TypeError),
        ({"sandbox_options": {"mechanism": 1}}, TypeError),
        ({"sandbox_options": {"mechanism": ["bwrap"]}}, TypeError),
        ({"sandbox_options": {"mechanism": "chroot"}}, ValueError),
    ],
)
def test_options_with_their_own_check_tell_a_wrong_type_from_a_wrong_value(kw, error):
    """An option whose values no domain describes (a sandbox, a list of tool names, a
    sandbox mechanism) raises TypeError for a value of the wrong type and ValueError for a
    value of the right type that is not allowed, as every other option does."""
    ((name, value),) = kw.items()
    shown = next(iter(value)) if isinstance(value, dict) else name
    with pytest.raises(error, match=shown) as got:
        flowzoo.make_env("single-code", n_tasks=2, **kw)
    assert type(got.value) is error
