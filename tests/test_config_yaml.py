"""Config files read YAML with the YAML 1.2 core schema (one loader for training configs and
sweep files): ``010`` is 10, ``0o10`` is 8, ``1:05`` is the string "1:05", ``yes``/``on``
are strings; tags outside the core schema and a ``%YAML`` directive of another version are
refused, named. Real files, the real loader, the real config."""

import math

import pytest
import yaml

from flowzoo.config import TrainConfig, load_config_file
from flowzoo.config.files import read_config_file, yaml_loader


def _read(tmp_path, text, name="c.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return read_config_file(p)


@pytest.mark.parametrize(
    ("scalar", "value"),
    [
        ("010", 10),  # decimal, as YAML 1.2 and TOML read it (1.1: octal 8)
        ("0010", 10),
        ("08", 8),  # 1.1: a string (no octal digit 8); 1.2: decimal 8
        ("-010", -10),
        ("+12", 12),
        ("0o10", 8),
        ("0o777", 511),
        ("0x1F", 31),
        ("0xff", 255),
        ("1e-5", 1e-5),  # 1.1: the string "1e-5"
        ("1E3", 1000.0),
        ("1.5e3", 1500.0),
        (".5", 0.5),
        ("1.", 1.0),
        ("-.inf", -math.inf),
        (".Inf", math.inf),
        ("1:05", "1:05"),  # 1.1: sexagesimal 65
        ("190:20:30", "190:20:30"),
        ("1_000", "1_000"),  # 1.1: 1000
        ("0b101", "0b101"),  # 1.1: 5
        ("0o", "0o"),
        ("0x", "0x"),
        ("0o18", "0o18"),
        ("yes", "yes"),  # 1.1: True
        ("no", "no"),
        ("on", "on"),
        ("off", "off"),
        ("y", "y"),
        ("n", "n"),
        ("Yes", "Yes"),
        ("OFF", "OFF"),
        ("true", True),
        ("True", True),
        ("TRUE", True),
        ("false", False),
        ("FALSE", False),
        ("tRue", "tRue"),
        ("null", None),
        ("~", None),
        ("", None),
        ("NULL", None),
        ("nULL", "nULL"),
        ("2024-01-02", "2024-01-02"),  # 1.1: a date
        ("2001-12-14t21:59:43.10-05:00", "2001-12-14t21:59:43.10-05:00"),
        ("=", "="),
        ("'010'", "010"),
        ('"1:05"', "1:05"),
        ("!!str 010", "010"),
        ("!!int 010", 10),
        ("!!int 0x10", 16),
        ("!!float 1", 1.0),
        ("!!bool true", True),
    ],
)
def test_a_yaml_scalar_reads_as_yaml_1_2_core_says(tmp_path, scalar, value):
    got = _read(tmp_path, f"v: {scalar}\n")["v"]
    assert got == value and type(got) is type(value)


def test_nan_reads_as_a_float_nan(tmp_path):
    assert all(math.isnan(_read(tmp_path, f"v: {s}\n")["v"]) for s in (".nan", ".NaN", ".NAN"))


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("v: !!int 1:05\n", "'1:05' is not an int in YAML 1.2"),
        ("v: !!int 1_000\n", "'1_000' is not an int"),
        ("v: !!float abc\n", "'abc' is not a float"),
        ("v: !!bool yes\n", "'yes' is not a bool"),
        ("v: !!null 0\n", "'0' is not a null"),
        ("v: !!timestamp 2024-01-02\n", "tag:yaml.org,2002:timestamp"),
        ("v: !!binary aGk=\n", "tag:yaml.org,2002:binary"),
        ("v: !!set {a, b}\n", "tag:yaml.org,2002:set"),
        ("v: !!omap [a: 1]\n", "tag:yaml.org,2002:omap"),
        ("!!merge <<: {lr: 0.1}\nv: 1\n", "tag:yaml.org,2002:merge"),
        ("v: !!python/name:os.system x\n", "python/name:os.system"),
        ("%YAML 1.1\n---\nv: 010\n", "%YAML 1.1: a flowzoo config is read as YAML 1.2 only"),
        ("%YAML 1.0\n---\nv: 1\n", "%YAML 1.0"),
    ],
)
def test_what_is_outside_the_core_schema_is_refused_naming_the_file(tmp_path, text, said):
    with pytest.raises(ValueError, match="c.yaml is not valid YAML") as e:
        _read(tmp_path, text)
    assert said in str(e.value)


def test_a_yaml_1_2_directive_and_a_merge_key_as_plain_text_read(tmp_path):
    assert _read(tmp_path, "%YAML 1.2\n---\nv: 010\n") == {"v": 10}
    assert _read(tmp_path, "<<: {a: 1}\nb: 2\n") == {"<<": {"a": 1}, "b": 2}  # 1.1 merged it


@pytest.mark.parametrize(
    ("text", "field", "value"),
    [
        ("seed: 010\n", "seed", 10),
        ("seed: 0o10\n", "seed", 8),
        ("seed: 0x10\n", "seed", 16),
        ("lr: 1e-5\n", "lr", 1e-5),
        ("lr: 2E-4\n", "lr", 2e-4),
        ("out_dir: 1:05\n", "out_dir", "1:05"),
        ("out_dir: 2024-01-02\n", "out_dir", "2024-01-02"),
        ("frozen_roles: no\n", "frozen_roles", "no"),  # Norway's "no" stays a role name
        ("eval_greedy: false\n", "eval_greedy", False),
        ("resume: True\n", "resume", True),
        ("env_options: {yes: 1}\n", "env_options", {"yes": 1}),
    ],
)
def test_a_training_config_reads_the_yaml_1_2_values(tmp_path, text, field, value):
    if field == "env_options":  # a key that 1.1 read as True is the string "yes"
        assert _read(tmp_path, text)[field] == value
        return
    p = tmp_path / "c.yaml"
    p.write_text(text)
    assert getattr(load_config_file(p), field) == value


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("eval_greedy: yes\n", "eval_greedy must be a bool, got 'yes'"),
        ("resume: off\n", "resume must be a bool, got 'off'"),
        ("mask_truncated: on\n", "mask_truncated must be a bool, got 'on'"),
        ("steps: 1_000\n", "steps must be an int, got '1_000'"),
        ("steps: 1:05\n", "steps must be an int, got '1:05'"),
        ("seed: 0b11\n", "seed must be an int, got '0b11'"),
    ],
)
def test_a_yaml_1_1_boolean_or_number_is_refused_by_the_setting_it_is_given_to(
    tmp_path, text, said
):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    with pytest.raises(ValueError, match=said):
        load_config_file(p)


def test_one_yaml_loader_in_the_package():
    """Every YAML file flowzoo reads goes through ``flowzoo.config.files.yaml_loader``: no other
    module calls PyYAML's loaders (whose 1.1 rules read 010 as 8)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    sources = [p for d in ("flowzoo", "baselines", "benchmarks") for p in (root / d).rglob("*.py")]
    sources += [root / "flowzoo_vf.py"]
    calls = ("yaml.load(", "yaml.safe_load", "yaml.full_load", "yaml.unsafe_load", "yaml.load_all")
    found = {
        str(p.relative_to(root)): c for p in sources for c in calls if c in p.read_text("utf-8")
    }
    assert found == {"flowzoo/config/files.py": "yaml.load("}
    assert "Loader=yaml_loader()" in (root / "flowzoo" / "config" / "files.py").read_text()


def test_a_dumped_config_still_round_trips(tmp_path):
    """A config PyYAML writes (its dumper quotes what YAML 1.1 would misread) reads back."""
    import dataclasses

    cfg = TrainConfig(seed=8, lr=1e-5, out_dir="010", frozen_roles="", report_to="tensorboard")
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(dataclasses.asdict(cfg)))
    assert load_config_file(p) == cfg
    assert yaml_loader() is yaml_loader()  # built once


@pytest.mark.parametrize(
    "text, match",
    [
        ("policy: no\n", "unknown policy sharing 'no'"),
        ("policy: off\n", "unknown policy sharing 'off'"),
        ("policy: solver=a\n", "misses roles"),
        ("policy: solver=a,aggregator=b,judge=c\n", "unknown roles \\['judge'\\]"),
        ("policy: 1\n", "policy"),
    ],
)
def test_the_sharing_choice_is_read_once_when_the_config_is_made(tmp_path, text, match):
    """A YAML ``policy: no`` (a string under YAML 1.2) or a map naming a role the env has
    not is refused when the config is made, not once the models have loaded."""
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises((ValueError, TypeError), match=match):
        load_config_file(path)
