"""A sweep file and ``--subset`` checked where they enter: a wrong type is an error naming
the key, the value and the type expected (exit 2, no traceback, nothing run or written); a
``--subset`` key that is no setting, or a selection that matches no run, is an error naming
what is valid (never "runs nothing and exits 0"). The real CLI in-process, real files;
nothing here trains (every refusal comes before a run starts)."""

import pytest

from flowzoo.agents.sweeps.runner import SweepSpec, expand, load_sweep, parse_subset, run_sweep
from flowzoo.cli import main

GRID = 'out_dir = "OUT"\n[base]\nsteps = 2\n[grid]\nenv = ["voting-math", "eval-opt-math"]\nseed = [0, 1]\n[[extra]]\nenv = "single-math"\nlr = 1e-4\n'


def _sweep(tmp_path, text, suffix=".toml"):
    p = tmp_path / f"s{suffix}"
    p.write_text(text.replace("OUT", str(tmp_path / "out")))
    return p


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("name = 3\n", "sweep key name must be a non-empty string, got 3 (an int)"),
        ('name = ""\n', "sweep key name must be a non-empty string, got ''"),
        ("name = [1]\n", "got [1] (a list)"),
        ('out_dir = ["x"]\n', "sweep key out_dir must be a non-empty string (a directory)"),
        ("out_dir = 7\n", "got 7 (an int)"),
        ('base = "steps=1"\n', "sweep key base must be a table of TrainConfig fields"),
        ("base = [1, 2]\n", "got [1, 2] (a list)"),
        ("grid = [1, 2]\n", "sweep key grid must be a table of non-empty lists"),
        ("[grid]\nseed = 3\n", "sweep key grid.seed must be a non-empty list of values, got 3"),
        ("[grid]\nseed = []\n", "grid.seed must be a non-empty list"),
        ('[grid]\nenv = "voting-math"\n', "got 'voting-math' (a string)"),
        ('extra = {env = "single-math"}\n', "sweep key extra must be a list of tables"),
        ("extra = [1, 2]\n", "sweep key extra[0] must be a table of TrainConfig fields, got 1"),
        ('extra = ["single-math"]\n', "extra[0] must be a table"),
        ("extra = true\n", "got True (a bool)"),
    ],
)
def test_a_wrong_type_in_a_toml_sweep_file_names_key_value_and_type(tmp_path, capsys, text, said):
    p = _sweep(tmp_path, text if "out_dir" in text else 'out_dir = "OUT"\n' + text)
    assert main(["sweep", str(p)]) == 2
    err = capsys.readouterr().err
    assert said in err and str(p) in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("name: [a, b]\n", "sweep key name must be a non-empty string, got ['a', 'b'] (a list)"),
        ("name: 1:05\nbase: 3\n", "sweep key base must be a table"),  # 1:05 is a name
        ("base: [steps, 3]\n", "got ['steps', 3] (a list)"),
        ("grid:\n  seed: 010\n", "grid.seed must be a non-empty list of values, got 10 (an int)"),
        ("grid: {seed: yes}\n", "got 'yes' (a string)"),
        ("extra:\n  env: single-math\n", "extra must be a list of tables"),
        ("extra:\n  - single-math\n", "extra[0] must be a table"),
        ("out_dir: null\n", "out_dir must be a non-empty string (a directory), got None"),
    ],
)
def test_a_wrong_type_in_a_yaml_sweep_file_names_key_value_and_type(tmp_path, capsys, text, said):
    p = _sweep(tmp_path, text, ".yaml")
    assert main(["sweep", str(p), "--out-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("base", "said"),
    [
        ('steps = "3"', "steps must be an int, got '3'"),
        ("steps = 2.5", "steps must be an int, got 2.5"),
        ('lr = "fast"', "lr must be a number, got 'fast'"),
        ('eval_greedy = "yes"', "eval_greedy must be a bool, got 'yes'"),
        ("env_options = 3", "env_options must be a table"),
        ("seed = -1", "seed must be in 0..4,294,967,295, got -1"),
    ],
)
def test_a_wrong_typed_setting_in_a_sweep_names_the_run_and_the_setting(
    tmp_path, capsys, base, said
):
    p = _sweep(tmp_path, f'out_dir = "OUT"\n[base]\n{base}\n[grid]\nenv = ["voting-math"]\n')
    assert main(["sweep", str(p)]) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err and "run env=voting_math" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("subset", "said"),
    [
        ("sed=0", "unknown --subset key 'sed'; valid: this sweep's settings env, seed, lr, steps"),
        ("Seed=0", "unknown --subset key 'Seed'"),
        ("envs=voting-math", "unknown --subset key 'envs'"),
        ("seed=0,polcy=shared", "unknown --subset key 'polcy'"),
        ("seed=7", "--subset seed=7 matches none of the 5 runs of sweep 's'; seed takes 0, 1"),
        ("env=votingmath", "env takes eval-opt-math, single-math, voting-math"),
        ("env=voting-math,lr=0.5", "matches none"),
        ("seed=0,seed=1", "--subset names 'seed' twice"),
        ("seed", "bad --subset entry 'seed'; expected key=value"),
        ("seed=", "bad --subset entry"),
    ],
)
def test_a_misspelt_or_empty_subset_is_an_error_not_a_silent_empty_sweep(
    tmp_path, capsys, subset, said
):
    p = _sweep(tmp_path, GRID)
    assert main(["sweep", str(p), "--subset", subset]) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()  # refused before the out_dir is made


@pytest.mark.parametrize(
    ("subset", "n"),
    [
        ("env=voting-math", 2),
        ("seed=1", 2),  # the extra run has the default seed 0
        ("seed=0", 3),
        ("policy=shared", 5),  # a default, never written in the file: every run has it
        ("lr=0.0001", 1),  # the extra's lr as parsed
        ("lr=1e-4", 1),  # as the file wrote it
        ("steps=2.0", 5),  # the same number
        ("eval_greedy=true", 5),
        ("env=voting-math,seed=1", 1),
    ],
)
def test_a_subset_selects_by_the_setting_as_written_or_as_parsed(tmp_path, subset, n):
    spec = load_sweep(_sweep(tmp_path, GRID))
    runs = expand(spec, parse_subset(subset))
    assert len(runs) == n
    assert all(r.config["out_dir"].startswith(str(tmp_path / "out")) for r in runs)


def test_a_sweep_spec_made_in_python_is_checked_the_same_way():
    with pytest.raises(ValueError, match=r"sweep key grid.seed must be a non-empty list"):
        SweepSpec("t", "x", grid={"seed": 0})
    with pytest.raises(ValueError, match=r"sweep key base must be a table"):
        SweepSpec("t", "x", base=[("steps", 1)])
    with pytest.raises(ValueError, match=r"sweep key out_dir must be a non-empty string"):
        SweepSpec("t", "")


@pytest.mark.parametrize("workers", [0, -1, 4097])
def test_workers_out_of_their_domain_are_refused(tmp_path, capsys, workers):
    spec = SweepSpec("t", str(tmp_path / "out"), base={"steps": 1})
    with pytest.raises(ValueError, match=r"workers must be in 1..4,096"):
        run_sweep(spec, workers=workers, progress=False)
    with pytest.raises(SystemExit) as e:
        main(["sweep", str(_sweep(tmp_path, GRID)), "--workers", str(workers)])
    assert e.value.code == 2 and "--workers: must be in 1..4,096" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
