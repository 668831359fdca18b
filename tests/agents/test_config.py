"""TrainConfig (torch-free): values checked at the boundary with the field named, presets
that never override what the user gave, the CLI built from the fields' help."""

import subprocess
import sys

import pytest

from flowzoo.agents.config import TrainConfig, load_config_file
from flowzoo.agents.sweep import SweepSpec, expand


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
