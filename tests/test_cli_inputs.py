"""Every number a command takes is checked against its stated domain as the command line is
parsed (exit 2, the domain named, before anything is read, built or written), and the help
says the domain; ``eval --role-model`` refuses a role the evaluated envs do not have, with
the check training makes of ``role_models``. The real parser and CLI, in-process."""

import json

import pytest

from flowzoo.cli import build_parser, main
from flowzoo.cli_eval import _check_role_models


def _sub(name):
    return build_parser()._subparsers._group_actions[0].choices[name]


def _refused(argv, capsys, flag, domain):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: must be" in err and domain in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("flag", "value", "domain"),
    [
        ("--samples", "0", "in 1..4,096, got 0"),
        ("--samples", "-3", "in 1..4,096"),
        ("--samples", "4097", "in 1..4,096, got 4,097"),
        ("--samples", "1000000000", "in 1..4,096"),
        ("--samples", "two", "an int in 1..4,096, got 'two'"),
        ("--samples", "1.5", "an int in 1..4,096"),
        ("--episodes", "-1", "in 0..1,000,000"),
        ("--episodes", "1000001", "in 0..1,000,000"),
        ("--seed", "-1", "in 0..4,294,967,295"),
        ("--seed", str(2**32), "in 0..4,294,967,295"),
        ("--temperature", "-0.5", "a finite number >= 0"),
        ("--temperature", "nan", "a finite number >= 0"),
        ("--concurrency", "0", ">= 1"),
        ("--timeout", "0", "> 0"),
        ("--timeout", "-5", "> 0"),
        ("--threads", "-1", "in 0..4,096"),
        ("--threads", "100000", "in 0..4,096"),
    ],
)
def test_eval_numbers_out_of_their_domain_are_refused(tmp_path, capsys, flag, value, domain):
    out = tmp_path / "r.json"
    _refused(
        ["eval", "--env", "voting-math", flag, value, "--json", str(out)], capsys, flag, domain
    )
    assert not out.exists()


def test_eval_samples_edges_parse_and_the_help_states_the_maximum():
    p = build_parser()
    assert p.parse_args(["eval", "--samples", "1"]).samples == 1
    assert p.parse_args(["eval", "--samples", "4096"]).samples == 4096
    assert p.parse_args(["eval", "--timeout", "inf"]).timeout == float("inf")  # never abandoned
    text = " ".join(_sub("eval").format_help().split())
    assert "--samples SAMPLES samples per problem (greedy: 1); must be in 1..4,096" in text
    assert "must be in 0..1,000,000" in text


@pytest.mark.parametrize(
    ("flag", "value", "domain"),
    [
        ("--steps", "0", "in 1..10,000,000, got 0"),
        ("--steps", "-1", "in 1..10,000,000"),
        ("--steps", "-500", "in 1..10,000,000"),
        ("--steps", "10000001", "in 1..10,000,000"),
        ("--steps", "1e3", "an int in 1..10,000,000, got '1e3'"),
        ("--steps", "ten", "an int"),
        ("--stage", "-1", "in 0..4,294,967,295, got -1"),
        ("--stage", "-7", "in 0..4,294,967,295"),
        ("--stage", str(2**32), "in 0..4,294,967,295"),
        ("--stage", "two", "an int"),
        ("--threads", "-2", "in 0..4,096"),
    ],
)
def test_pretrain_tiny_refuses_a_bad_count_before_any_build_starts(
    tmp_path, capsys, flag, value, domain
):
    cache = tmp_path / "cache"
    argv = ["pretrain-tiny", "--scale", "tiny-s", "--cache-dir", str(cache), flag, value]
    _refused(argv, capsys, flag, domain)
    assert not cache.exists()  # nothing built, nothing cached


def test_pretrain_tiny_counts_in_their_domain_parse_and_the_help_says_it():
    a = build_parser().parse_args(["pretrain-tiny", "--steps", "1", "--stage", "3"])
    assert (a.steps, a.stage) == (1, 3)
    assert build_parser().parse_args(["pretrain-tiny"]).steps is None  # the scale's budget
    text = " ".join(_sub("pretrain-tiny").format_help().split())
    assert "(default: the scale's budget); must be in 1..10,000,000" in text
    assert "loads); must be in 0..4,294,967,295" in text


def test_every_bounded_flag_says_its_domain_in_its_help():
    for name, flags in {
        "eval": ("--samples", "--episodes", "--seed", "--threads"),
        "pretrain-tiny": ("--steps", "--stage", "--threads"),
        "sweep": ("--workers",),
        "report": ("--window", "--floor"),
    }.items():
        actions = _sub(name)._option_string_actions
        for flag in flags:
            assert "must be " in actions[flag].help, (name, flag)


# ------------------------------------------------------------------------- --role-model


@pytest.mark.parametrize(
    ("env", "spec", "bad"),
    [
        ("voting-math", "solvr=scripted", "solvr"),
        ("voting-math", "Solver=scripted", "Solver"),
        ("voting-math", "aggregater=scripted:0.2", "aggregater"),
        ("voting-math", "solver_0=scripted", "solver_0"),  # an agent's name, not its role
        ("voting-math", "evaluator=scripted", "evaluator"),  # another workflow's role
        ("eval-opt-math", "optimiser=scripted", "optimiser"),
        ("orch-workers-math", "workers=scripted", "workers"),
    ],
)
def test_a_misspelt_role_in_eval_role_model_is_refused_naming_the_roles(
    tmp_path, capsys, env, spec, bad
):
    out = tmp_path / "r.json"
    argv = ["eval", "--model", "tiny-s", "--env", env, "--role-model", spec, "--json", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"--role-model name unknown roles ['{bad}']; roles are [" in err
    assert "Traceback" not in err and not out.exists()


def test_a_role_of_any_evaluated_env_is_taken_and_of_none_refused(tmp_path):
    two = build_parser().parse_args(["eval", "--env", "voting-math", "--env", "eval-opt-math"])
    _check_role_models({"evaluator": "scripted", "aggregator": "scripted"}, two)
    with pytest.raises(ValueError, match=r"unknown roles \['worker'\]"):
        _check_role_models({"worker": "scripted"}, two)
    default = build_parser().parse_args(["eval"])  # the study's three math envs
    _check_role_models({"synthesizer": "scripted", "optimizer": "scripted"}, default)
    with pytest.raises(ValueError, match=r"unknown roles \['judge'\]; roles are \['optimizer'"):
        _check_role_models({"judge": "scripted"}, default)


def test_a_run_dirs_own_env_decides_its_roles(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"env": "voting-math"}))
    (run / "summary.json").write_text(json.dumps({"status": "completed"}))
    args = build_parser().parse_args(["eval", "--model", str(run)])
    _check_role_models({"aggregator": "scripted"}, args)
    with pytest.raises(ValueError, match=r"unknown roles \['evaluator'\]"):
        _check_role_models({"evaluator": "scripted"}, args)


def test_training_refuses_the_same_typo_with_the_same_check():
    from flowzoo.agents.models.routing import plan_roles

    with pytest.raises(ValueError, match=r"name unknown roles \['solvr'\]; roles are"):
        plan_roles(["solver", "aggregator"], "shared", {"solvr": "tiny-s"})
