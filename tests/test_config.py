"""TrainConfig (torch-free): values checked at the boundary with the field named, presets
that never override what the user gave, the CLI built from the fields' help."""

import subprocess
import sys

import pytest

from flowzoo.agents.sweeps.runner import SweepSpec, expand
from flowzoo.config import TrainConfig, load_config_file


@pytest.mark.parametrize(
    "bad,field",
    [
        ({"micro_batch": 0}, "micro_batch"),
        ({"eval_episodes": -1}, "eval_episodes"),
        ({"temperature": -0.5}, "temperature"),
        ({"lr": 1e30}, "lr"),
        ({"lr": float("nan")}, "lr"),
        ({"group_size": 0}, "group_size"),
        ({"train_tasks": 10**12}, "train_tasks"),
        ({"train_tasks": -1}, "train_tasks"),
        ({"max_new_tokens": -1}, "max_new_tokens"),
        ({"steps": -1}, "steps"),
        ({"kl_per_role": {"solver": -1}}, "kl_per_role"),
        ({"damper_decay": 1.5}, "damper_decay"),
        ({"steps": "10"}, "steps"),
        ({"env_options": "x"}, "env_options"),
        ({"algo": "dpo"}, "algo"),
        ({"precision": "fp8"}, "precision"),
        # sizes and seeds have upper bounds: refused here, not as an allocation or a numpy
        # seed error deep inside
        ({"seed": -1}, "seed"),
        ({"seed": 2**40}, "seed"),
        ({"group_size": 10**6}, "group_size"),
        ({"max_new_tokens": 10**9}, "max_new_tokens"),
        ({"max_new_tokens_per_role": {"solver": 10**8}}, "max_new_tokens_per_role"),
        ({"problems_per_step": 4096, "group_size": 4096}, "episodes per step"),
        ({"eval_samples": 10**6}, "eval_samples"),
    ],
)
def test_bad_values_are_refused_naming_the_field(bad, field):
    with pytest.raises(ValueError, match=field):
        TrainConfig(**bad)


def test_explicit_values_win_over_a_preset(tmp_path):
    assert TrainConfig.from_dict({"preset": "study", "lr": 1e-4}).lr == 1e-4
    assert TrainConfig.from_dict({"preset": "study"}).lr == 2e-5
    assert TrainConfig(preset="study", group_size=4).group_size == 4
    f = tmp_path / "c.toml"
    f.write_text('preset = "study"\nlr = 3e-4\n')
    assert load_config_file(f).lr == 3e-4 and load_config_file(f).param == "lora"
    assert load_config_file(f, lr=1e-3).lr == 1e-3
    with pytest.raises(ValueError, match="unknown config keys"):
        TrainConfig.from_dict({"learning_rate": 1e-3})


@pytest.mark.parametrize(
    "make",
    [
        lambda: TrainConfig(preset="study", param="full", lr=5e-5),
        lambda: TrainConfig.from_preset("study", param="full", lr=5e-5),
        lambda: TrainConfig.from_dict({"preset": "study", "param": "full", "lr": 5e-5}),
    ],
)
def test_an_explicit_value_equal_to_the_default_still_wins(make):
    """``param="full"`` and ``lr=5e-5`` are the defaults; given explicitly they must beat the
    study preset's LoRA and 2e-5 in Python exactly as on the command line."""
    cfg = make()
    assert (cfg.param, cfg.lr, cfg.group_size) == ("full", 5e-5, 8)


def test_the_default_run_dir_is_one_rule_everywhere(tmp_path):
    cfg = TrainConfig(env="eval-opt-math", policy="isolated", seed=3)
    assert cfg.out_dir == "" and cfg.run_dir == "runs/eval-opt-math-isolated-full-grpo-tiny-s-s3"
    assert TrainConfig(out_dir=str(tmp_path)).run_dir == str(tmp_path)
    r = _cli("train", "--env", "voting-math", "--steps", "0", "--help", block_torch=True)
    assert "runs/<env>-<policy>-<param>-<algo>-<model>-s<seed>" in " ".join(r.stdout.split())


def test_toml_configs_read_without_tomllib(tmp_path):
    """Python 3.10 has no ``tomllib``: config and sweep files are read with ``tomli``."""
    f = tmp_path / "c.toml"
    f.write_text("lr = 3e-4\n[role_settings.solver]\ntemperature = 0.5\n")
    code = (
        "import sys; sys.modules['tomllib'] = None\n"
        "from flowzoo.config import load_config_file\n"
        f"c = load_config_file({str(f)!r}); print(c.lr, c.role_settings)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[0] == "0.0003" and "'temperature': 0.5" in out.stdout


@pytest.mark.parametrize(
    "name,text,kind",
    [("bad.toml", "lr = 1e-5\nsteps = = 3\n", "TOML"), ("bad.yaml", "lr: [1, 2\n", "YAML")],
)
def test_a_config_file_that_does_not_parse_is_named(tmp_path, name, text, kind):
    f = tmp_path / name
    f.write_text(text)
    with pytest.raises(ValueError, match=rf"(?s){f} is not valid {kind}: .*line 2"):
        load_config_file(f)
    r = _cli("train", "--config", str(f), block_torch=True)
    assert r.returncode == 2 and f"{f} is not valid {kind}" in r.stderr


def test_threads_is_a_setting_that_does_not_shape_the_run():
    """A resumed run may change its thread count; a negative one is refused, named."""
    assert TrainConfig(threads=4).identity() == TrainConfig().identity()
    with pytest.raises(ValueError, match="threads must be in 0..4,096, got -1"):
        TrainConfig(threads=-1)


def test_sweep_cells_are_validated_before_launch_and_get_distinct_dirs(tmp_path):
    long = "x" * 60
    spec = SweepSpec("s", str(tmp_path), base={}, grid={"out_dir": [long + "a", long + "b"]})
    runs = expand(spec)
    assert len({r.run_id for r in runs}) == 2
    bad = SweepSpec("s", str(tmp_path), grid={"lr": [1e-4, -1.0]})
    with pytest.raises(ValueError, match="lr"):
        expand(bad)
    # one run written twice (equal once parsed) would share a dir: refused, naming both
    twice = SweepSpec("s", str(tmp_path), grid={"lr": [1e-4, 0.0001]}, extra=[{"seed": 0}])
    with pytest.raises(ValueError, match="same configuration once parsed"):
        expand(twice)


def _cli(*args: str, block_torch: bool = False) -> subprocess.CompletedProcess:
    pre = "import sys; sys.modules['torch'] = None; " if block_torch else ""
    code = pre + "import sys; from flowzoo.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120
    )


def test_cli_help_names_every_flag_with_its_help_and_choices():
    r = _cli("train", "--help", block_torch=True)
    assert r.returncode == 0
    text = " ".join(r.stdout.split())
    assert "--group-by {task,task_role,task_role_turn,task_agent_turn}" in text
    assert "AdamW learning rate (the peak, under a schedule) (default: 5e-05)" in text
    assert _cli("--version").stdout.startswith("flowzoo ")


def test_envs_and_config_need_no_torch():
    r = _cli("envs", block_torch=True)
    assert r.returncode == 0 and "voting-math" in r.stdout, r.stderr
    bad = _cli("train", "--lr", "-1", block_torch=True)
    assert bad.returncode == 2 and "lr must be" in bad.stderr


def test_a_misspelt_env_fails_before_any_model_is_built():
    """With torch blocked, nothing could build a model: the error comes from the checks."""
    for cmd in (["train"], ["eval", "--model", "tiny-l"]):
        r = _cli(*cmd, "--env", "votng-math", block_torch=True)
        assert r.returncode == 2 and "unknown env 'votng-math'; valid: eval-opt-math" in r.stderr


def test_help_shows_no_empty_choice_and_one_default():
    text = " ".join(_cli("train", "--help", block_torch=True).stdout.split())
    assert "--preset {study}" in text and "{,study}" not in text
    out_dir = text[text.rindex("--out-dir OUT_DIR") :][:120]
    assert out_dir.count("default") == 0 and "runs/<env>-<policy>" in out_dir


# ------------------------------------------------------------------ values outside their domain


@pytest.mark.parametrize("t", [float("nan"), float("inf"), float("-inf"), -0.5, -2.0])
def test_eval_temperature_outside_its_domain_is_refused(t):
    with pytest.raises(ValueError, match="eval_temperature"):
        TrainConfig(eval_temperature=t)
    assert TrainConfig(eval_temperature=-1).eval_temp == TrainConfig().temperature


@pytest.mark.parametrize(
    "env, options, msg",
    [
        ("voting-math", {"split": "test"}, "may not set 'split'"),
        ("voting-math", {"n_tasks": 5}, "may not set 'n_tasks'.*train_tasks"),
        ("voting-math", {"overlong_penalty": 0.1}, "overlong_penalty"),
        ("voting-code", {"partial_credit": "false"}, "partial_credit='false' has type str"),
        ("voting-math", {"n_voters": "3"}, "n_voters='3' has type str"),
        ("voting-math", {"reward_mode": "teams"}, "reward_mode must be one of"),
        ("voting-math", {"role_weight": 2.0}, "role_weight.*out of range"),
        ("voting-math", {"no_such_option": 1}, r"unknown option\(s\) \['no_such_option'\]"),
        ("voting-math", {"dataset": 3}, "dataset"),
    ],
)
def test_env_options_are_checked_with_the_config(env, options, msg):
    with pytest.raises(ValueError, match=msg):
        TrainConfig(env=env, env_options=options)


def test_valid_env_options_pass():
    cfg = TrainConfig(env="voting-code", env_options={"partial_credit": True, "n_voters": 3})
    assert cfg.env_options["partial_credit"] is True


def test_eval_temperature_flag_of_eval_is_checked(tmp_path, capsys):
    from flowzoo.cli import main

    for bad in ("-1", "nan", "inf"):  # refused as the command line is parsed
        with pytest.raises(SystemExit) as e:
            main(["eval", "--model", "tiny-s", "--temperature", bad])
        assert e.value.code == 2
        assert "--temperature: must be a finite number >= 0" in capsys.readouterr().err


@pytest.mark.parametrize(
    "text, msg",
    [
        ("lr: 0.001\nsteps: 3\nlr: 0.5\n", "duplicate key 'lr'"),
        ("env_options:\n  reward_mode: team\n  reward_mode: role\n", "duplicate key"),
        ("a: &x [1, 2]\nb: *x\n", "aliases"),
        ("a: &a ['x','x']\nb: &b [*a,*a]\nc: &c [*b,*b]\n", "aliases"),
    ],
)
def test_yaml_duplicates_and_aliases_are_refused_naming_the_file(tmp_path, text, msg):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    with pytest.raises(ValueError, match=f"(?s)c.yaml.*{msg}"):
        load_config_file(p)


def test_an_oversized_config_file_is_refused_unread(tmp_path):
    p = tmp_path / "big.yaml"
    p.write_text("# pad\n" * 300_000)
    with pytest.raises(ValueError, match="big.yaml.*at most"):
        load_config_file(p)


def test_toml_duplicate_keys_are_refused(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text("lr = 0.001\nlr = 0.5\n")
    with pytest.raises(ValueError, match="c.toml"):
        load_config_file(p)


def test_the_cosine_horizon_is_its_own_shaping_field():
    """Decided: ``steps`` is a run's length (a resumed run may extend it); the cosine's
    horizon is ``lr_decay_steps``, fixed to ``steps`` when the config is made, and shapes
    the run. Extending a cosine run changes its identity unless the horizon is kept."""
    a = TrainConfig(steps=10, warmup_steps=0)
    assert a.lr_decay_steps == 10 and a.lr_at(10) == pytest.approx(a.lr * a.min_lr_ratio)
    longer = TrainConfig(steps=20, warmup_steps=0)
    assert longer.identity() != a.identity()  # its schedule differs: not the same run
    kept = TrainConfig(steps=20, warmup_steps=0, lr_decay_steps=10)
    assert kept.identity() == a.identity()  # same schedule, longer run: a resume continues
    assert [kept.lr_at(s) for s in range(10)] == [a.lr_at(s) for s in range(10)]
    const = TrainConfig(steps=10, lr_schedule="constant")
    assert TrainConfig(steps=30, lr_schedule="constant").identity() == const.identity()
    with pytest.raises(ValueError, match="lr_decay_steps"):
        TrainConfig(lr_decay_steps=-1)


def test_eval_dataset_is_a_shaping_field_with_help():
    import dataclasses

    f = {x.name: x for x in dataclasses.fields(TrainConfig)}["eval_dataset"]
    assert "held-out" in f.metadata["help"]
    assert TrainConfig(eval_dataset="jsonl:t.jsonl").identity() != TrainConfig().identity()
