"""TrainConfig's declared fields: every field has help, a domain of its type and a section;
every bound is enforced naming the field; per-role settings and the old per-role maps; the
help grouped by section; every field round-trips through a config file and the CLI; the
config's settings and the envs' options share one domain check."""

import pytest

import flowzoo
from flowzoo.config import TrainConfig, load_config_file
from tests.test_config import _cli


def _fields():
    import dataclasses

    return dataclasses.fields(TrainConfig)


def test_every_field_declares_help_a_domain_of_its_type_and_a_section():
    import typing

    from flowzoo.config import SECTION_OF

    hints = typing.get_type_hints(TrainConfig)
    for f in _fields():
        assert f.metadata["help"], f.name
        want = typing.get_origin(hints[f.name]) or hints[f.name]
        assert f.metadata["domain"].type is want, f.name
        assert f.name in SECTION_OF
    # the sections, TRL-style, and the per-role maps set apart as deprecated
    for s in ("model", "rollout", "algorithm", "optimisation", "evaluation", "deprecated"):
        assert s in SECTION_OF.values()


@pytest.mark.parametrize(
    "f", [f for f in _fields() if f.metadata["domain"].lo is not None], ids=lambda f: f.name
)
def test_every_declared_bound_is_enforced_naming_the_field(f):
    """Read from the declarations themselves: a value just past either bound is refused, so
    a bound declared but not checked (or checked elsewhere, differently) fails here."""
    d = f.metadata["domain"]
    step = 1 if d.type is int else 1e-9
    outside = [d.lo if d.lo_open else d.lo - step]
    if d.hi is not None:
        outside.append(d.hi + step)
    for v in outside:
        if v in d.also:
            continue
        with pytest.raises(ValueError, match=rf"^{f.name} must be .*got"):
            TrainConfig(**{f.name: v})
    with pytest.raises(ValueError, match=f"^{f.name} must be"):
        TrainConfig(**{f.name: True})  # a bool is never a number here


@pytest.mark.parametrize(
    "old, new",
    [
        ({"kl_per_role": {"solver": -1}}, {"role_settings": {"solver": {"kl_coef": -1}}}),
        (
            {"kl_per_role": {"solver": float("inf")}},
            {"role_settings": {"solver": {"kl_coef": 1e999}}},
        ),
        (
            {"max_new_tokens_per_role": {"solver": 0}},
            {"role_settings": {"solver": {"max_new_tokens": 0}}},
        ),
        (
            {"max_new_tokens_per_role": {"solver": 10**8}},
            {"role_settings": {"solver": {"max_new_tokens": 10**8}}},
        ),
        (
            {"max_new_tokens_per_role": {"solver": 3.0}},
            {"role_settings": {"solver": {"max_new_tokens": 3.0}}},
        ),
        ({"role_models": {"solver": ""}}, {"role_models": {"solver": 3}}),
    ],
)
def test_dict_valued_fields_check_each_value_by_the_same_domain(old, new):
    for bad in (old, new):
        (field,) = bad
        with pytest.raises(ValueError, match=rf"^{field}\['solver'\]"):
            TrainConfig(**bad)
    with pytest.raises(ValueError, match=r"^role_settings\['solver'\]\['lr'\].*\(0, 1\]"):
        TrainConfig(role_settings={"solver": {"lr": 0}})  # the run-wide lr's own domain
    with pytest.raises(ValueError, match=r"role_settings\['solver'\]\['stop'\]"):
        TrainConfig(role_settings={"solver": {"stop": "</s>"}})


def test_the_old_per_role_maps_fold_into_role_settings_with_a_warning():
    import dataclasses

    with pytest.warns(FutureWarning, match="kl_per_role is deprecated; give role_settings"):
        old = TrainConfig(
            kl_per_role={"solver": 0.3, "aggregator": 0.2},
            role_settings={"solver": {"kl_coef": 0.5}},
        )
    assert old.kl_per_role == {} and old.role_settings == {
        "solver": {"kl_coef": 0.5},  # role_settings wins where both give a value
        "aggregator": {"kl_coef": 0.2},
    }
    with pytest.warns(FutureWarning, match="max_new_tokens_per_role is deprecated"):
        tok = TrainConfig.from_dict({"max_new_tokens_per_role": {"orchestrator": 160}})
    assert tok.for_role("orchestrator", "max_new_tokens") == 160
    assert tok.for_role("worker", "max_new_tokens") == tok.max_new_tokens
    new = TrainConfig(role_settings={"solver": {"kl_coef": 0.5}, "aggregator": {"kl_coef": 0.2}})
    assert old.identity() == new.identity()  # one run, however it was written
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a recorded config re-read says nothing
        assert TrainConfig.from_dict(dataclasses.asdict(old)) == old
    r = _cli("train", "--kl-per-role", '{"solver": -1}', block_torch=True)
    assert r.returncode == 2 and "kl_per_role['solver'] is out of range" in r.stderr


def test_a_config_file_round_trips(tmp_path):
    import dataclasses

    import yaml

    cfg = TrainConfig(
        env="eval-opt-math",
        lr=3e-5,
        seed=7,
        role_settings={"evaluator": {"temperature": 0.3, "stop": ["</s>"]}},
        env_options={"reward_mode": "role"},
        eval_temperature=-1.0,
        report_to="tensorboard",
    )
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(dataclasses.asdict(cfg)))
    back = load_config_file(p)
    assert back == cfg and back.identity() == cfg.identity()


def test_help_groups_the_flags_by_section_and_states_each_range():
    text = _cli("train", "--help", block_torch=True).stdout
    sections = [
        line[:-1] for line in text.splitlines() if line and line[0] != " " and line.endswith(":")
    ]
    assert sections[-8:] == [
        "roles",
        "rollout",
        "algorithm",
        "optimisation",
        "evaluation",
        "early warning",
        "logging and checkpoints",
        "deprecated",
    ]
    rollout = text[text.index("\nrollout:") : text.index("\nalgorithm:")]
    assert "--group-size" in rollout and "--lr " not in rollout
    flat = " ".join(text.split())
    assert "(default: 8); must be in 1..4,096" in flat and "must be in (0, 1]" in flat


#: fields left at their default in the every-field round trip, and why
_KEPT_DEFAULT = {
    # deprecated: folded into role_settings and emptied when the config is made
    "kl_per_role": "folded",
    "max_new_tokens_per_role": "folded",
    # resample_rounds > 0 (set below) needs filter_groups=True, its default
    "filter_groups": "tied to resample_rounds",
    # critic_input="central" needs whole episodes, and rollout is "tree" below
    "critic_input": "tied to rollout",
}


def _another_value(name: str, default, domain):
    """A valid value of a field other than its default, read from its declared domain."""
    choices = domain.valid()
    if choices is not None:
        return next(c for c in choices if c != default)
    if domain.type is bool:
        return not default
    if domain.type is int:
        hi = domain.hi if domain.hi is not None else default + 2
        return default + 1 if default + 1 <= hi else default - 1
    if domain.type is float:
        if domain.hi is not None:
            mid = (max(domain.lo or 0.0, 0.0) + domain.hi) / 2
            return mid if mid != default else mid / 2
        return max(default, 0.0) + 0.375
    raise AssertionError(f"{name}: give it a value in _every_field_set")


def _every_field_set() -> TrainConfig:
    """A config whose every field (but ``_KEPT_DEFAULT``) differs from its default: the
    strings and tables by hand (they mean something), the rest from each field's domain."""
    import dataclasses

    given = {
        "preset": "study",  # a preset over explicit values: every value here still wins
        "model": "Qwen/Qwen3-0.6B",
        "device": "cuda",
        "policy_devices": {"solver": "cuda:1"},
        "policy": "isolated",
        "role_settings": {
            "solver": {
                "lr": 1e-4,
                "temperature": 0.9,
                "max_new_tokens": 96,
                "kl_coef": 0.05,
                "clip_low": 0.1,
                "clip_high": 0.3,
                "stop": ["</s>", "\n\nQ:", 'naïve "quoted" \\ stop'],
            },
            "aggregator": {"temperature": 0.25},
        },
        "role_models": {"aggregator": "http://127.0.0.1:8000/v1"},
        "frozen_roles": "aggregator",
        "env": "voting-code",
        "env_options": {"reward_mode": "role"},
        "resample_rounds": 2,
        "eval_dataset": "jsonl:held out.jsonl",
        "eval_temperature": 0.5,
        "lr_decay_steps": 40,
        "out_dir": "runs/every field",
        "report_to": "tensorboard,wandb",
    }
    base = TrainConfig()
    for f in dataclasses.fields(TrainConfig):
        if f.name not in given and f.name not in _KEPT_DEFAULT:
            given[f.name] = _another_value(f.name, getattr(base, f.name), f.metadata["domain"])
    cfg = TrainConfig.from_dict(given)
    changed = {
        f.name for f in dataclasses.fields(cfg) if getattr(cfg, f.name) != getattr(base, f.name)
    }
    assert changed == {f.name for f in dataclasses.fields(cfg)} - set(_KEPT_DEFAULT)
    return cfg


def _toml_value(v) -> str:
    """TOML for a config value (the stdlib reads TOML but does not write it)."""
    import json

    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a JSON string is a TOML basic string
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"no TOML for {v!r}")


@pytest.mark.parametrize("suffix", [".toml", ".yaml"])
def test_every_field_round_trips_through_a_config_file_and_the_cli(tmp_path, suffix):
    """Every field written to the file formats the CLI reads comes back equal, with the same
    identity, read directly and through ``flowzoo train --config``; the run record's
    ``config.json`` reads back equal too."""
    import dataclasses
    import json

    import yaml

    from flowzoo.cli import _train_config_from_args, build_parser

    cfg = _every_field_set()
    table = dataclasses.asdict(cfg)
    p = tmp_path / f"every{suffix}"
    if suffix == ".toml":
        p.write_text("".join(f"{k} = {_toml_value(v)}\n" for k, v in table.items()))
    else:
        p.write_text(yaml.safe_dump(table, allow_unicode=True))
    back = load_config_file(p)
    assert back == cfg and back.identity() == cfg.identity()
    assert back.for_role("solver", "stop") == cfg.role_settings["solver"]["stop"]
    args = build_parser().parse_args(["train", "--config", str(p)])
    assert _train_config_from_args(args) == cfg
    # what a run records (config.json) is read back by resume, eval and report the same way
    assert TrainConfig.from_dict(json.loads(json.dumps(table))) == cfg


def test_the_agents_extra_is_an_alias_of_the_torch_extra():
    """The torch side's extra is named for what it installs; the old name stays an alias
    (the same requirements, so the two cannot drift apart)."""
    import configparser
    from pathlib import Path

    cp = configparser.ConfigParser()
    cp.read(Path(__file__).resolve().parents[1] / "setup.cfg")
    extras = cp["options.extras_require"]
    reqs = {name: sorted(extras[name].split()) for name in ("torch", "agents")}
    assert reqs["torch"] and reqs["torch"] == reqs["agents"]
    assert any(r.startswith("torch") for r in reqs["torch"])


def test_fields_added_later_keep_the_identity_of_runs_written_before_them():
    """A run directory written before a field existed resumes: at the default every earlier
    run ran with, a later field leaves the identity as it was (pinned: the identity of the
    default config before update_matched, critic_input and baseline_decay existed); away
    from it, the identity changes (another trajectory)."""
    from flowzoo.config import LATER_FIELDS

    assert TrainConfig().identity() == "148e800bc3841c4e"
    for k, default in LATER_FIELDS.items():
        assert getattr(TrainConfig(), k) == default
    assert TrainConfig(update_matched=True).identity() != TrainConfig().identity()


def test_env_options_and_settings_share_one_domain_check():
    """An env option's values are a :class:`flowzoo.domain.Domain`, judged by the same
    :func:`fault` as the config's settings: both refuse the same values for the same reason
    (each words its own error), an int too large for a float included."""
    from flowzoo.domain import Domain, fault, problem
    from flowzoo.envs.options import DECLARED

    opt = DECLARED["role_weight"]
    assert isinstance(opt.domain, Domain)
    cases = [(2.0, "range"), ("x", "type"), (float("nan"), "range"), (10**400, "range")]
    cases += [(True, "type"), (0.5, None), (1, None)]
    for v, why in cases:
        assert fault(v, opt.domain) == why, v
        assert (problem("role_weight", v, opt.domain) is None) == (why is None), v
        if why is None:
            assert opt.validate(v) == float(v)
        else:
            with pytest.raises(TypeError if why == "type" else ValueError, match="role_weight"):
                opt.validate(v)
    choice = DECLARED["reward_mode"].domain
    assert fault("teams", choice) == "choice" and fault(3, choice) == "type"
    assert DECLARED["max_cycles"].allowed() == "an int in 1..1,000,000 or None"


def test_options_and_settings_take_mappings_and_numpy_values_and_refuse_nul():
    """Found by a red team of the shared domain check (fresh inputs): any mapping is a dict
    option's value (taken as a dict), a NumPy scalar a setting's or option's Python value (a
    longdouble too, whose item() is itself), a NUL inside an option's string is refused where
    it is given (not later, in a container's start), and a bound with no lower end words its
    error instead of crashing on it."""
    import types

    import numpy as np

    from flowzoo.envs.options import Opt

    env = flowzoo.make_env(
        "voting-code", sandbox_options=types.MappingProxyType({"timeout_s": 2.0})
    )
    assert env.family.sandbox.limits.timeout_s == 2.0
    assert flowzoo.make_env("voting-math", role_weight=np.longdouble(0.5)) is not None
    with pytest.raises(ValueError, match="image=.* holds a NUL character"):
        flowzoo.make_env("voting-code", sandbox="docker", sandbox_options={"image": "py\0x"})
    with pytest.raises(ValueError, match="k=20 is out of range; k must be an int <= 10"):
        Opt("k", "int", "h", hi=10).validate(20)
    with pytest.raises(TypeError, match="k must be a finite number <= 1"):
        Opt("k", "float", "h", hi=1.0).validate("x")
    cfg = TrainConfig(
        steps=np.int64(10), lr=np.float32(1e-4), env_options={"role_weight": np.float32(0.5)}
    )
    assert type(cfg.steps) is int and type(cfg.lr) is float
    assert type(cfg.env_options["role_weight"]) is float
    assert (
        cfg.identity()
        == TrainConfig(
            steps=10, lr=float(np.float32(1e-4)), env_options={"role_weight": 0.5}
        ).identity()
    )
