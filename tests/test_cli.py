"""The command line's small frictions: no abbreviated flags (``--step 3`` is an error, never
``--steps 3``), and ``flowzoo report`` without matplotlib naming the extra and the way around.
In-process, on the real parser (nothing here imports torch)."""

import argparse
import ast
import sys
from pathlib import Path

import pytest

from flowzoo.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "argv,flag",
    [
        (["train", "--step", "3"], "--step"),
        (["train", "--lr-sched", "constant"], "--lr-sched"),
        (["eval", "--temp", "0"], "--temp"),
        (["report", "runs", "--no-plot"], "--no-plot"),
        (["sweep", "s.toml", "--work", "2"], "--work"),
    ],
)
def test_an_abbreviated_flag_is_an_error(argv, flag, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert f"unrecognized arguments: {flag}" in capsys.readouterr().err


def test_the_full_flags_still_parse():
    a = build_parser().parse_args(["train", "--steps", "3", "--lr-schedule", "constant"])
    assert (a.steps, a.lr_schedule) == (3, "constant")
    assert build_parser().parse_args(["eval", "--threads", "2"]).threads == 2


def _parsers_allowing_abbreviations(path: Path) -> list[int]:
    """Lines of ``argparse.ArgumentParser(...)`` calls without ``allow_abbrev=False``."""
    bad = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "ArgumentParser"):
            continue
        off = any(
            k.arg == "allow_abbrev" and isinstance(k.value, ast.Constant) and k.value.value is False
            for k in node.keywords
        )
        if not off:
            bad.append(node.lineno)
    return bad


def test_every_script_parser_refuses_abbreviations():
    """The package's own parser is a subclass (checked above); every script's is built with
    ``allow_abbrev=False``."""
    files = [
        p for d in ("flowzoo", "baselines", "benchmarks") for p in sorted((ROOT / d).rglob("*.py"))
    ]
    bad = {
        str(p.relative_to(ROOT)): ln for p in files if (ln := _parsers_allowing_abbreviations(p))
    }
    # cli.py builds its parser from a subclass that defaults to allow_abbrev=False
    bad.pop("flowzoo/cli.py", None)
    assert not bad, f"argparse parsers that accept abbreviated flags: {bad}"


def test_report_without_matplotlib_names_the_extra_and_no_plots(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    runs = tmp_path / "runs"
    runs.mkdir()
    assert main(["report", str(runs)]) == 2
    err = capsys.readouterr().err
    assert "matplotlib" in err and "flowzoo[report]" in err and "--no-plots" in err
    assert not (runs / "report").exists()  # said before anything was written
    # --no-plots needs no matplotlib: it gets as far as reading the (empty) runs dir
    assert main(["report", str(runs), "--no-plots"]) == 2
    assert "no finished runs" in capsys.readouterr().err


def _all_parsers(p):
    """The parser and every subcommand's, depth first."""
    yield p
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            for sub in a.choices.values():
                yield from _all_parsers(sub)


def test_help_shows_no_rst_markup():
    """Docstrings and config field help are written for the docs (``x``, :mod:`x`); the
    terminal's --help shows their bare text, for every subcommand and every flag."""
    parsers = list(_all_parsers(build_parser()))
    assert len(parsers) >= 9  # flowzoo and its subcommands
    for p in parsers:
        text = p.format_help()
        assert "``" not in text and ":mod:`" not in text and ":func:`" not in text, p.prog
    root = parsers[0].format_help()
    assert "flowzoo command line: train, eval," in " ".join(root.split())


@pytest.mark.parametrize(
    ("flags", "name"),
    [
        ([], "tiny-s-code"),
        (["12"], "tiny-s-code12"),
        (["12", "--stage", "2"], "tiny-s-code12-stage2"),
        (["--stage", "1"], "tiny-s-code-stage1"),
    ],
)
def test_pretrain_tiny_builds_the_code_recipe_it_names(flags, name, monkeypatch):
    """`--code-testbed` builds recipe 11 (the config ``tiny-s-code`` names), `--code-testbed
    12` recipe 12 (``tiny-s-code12``), whatever flag follows it; `--stage N` the build
    ``<name>-stageN`` loads."""
    from flowzoo.tiny import build as tiny
    from flowzoo.tiny.recipe import named_config

    asked = []

    def stop(cfg, **_):
        asked.append(cfg)
        raise KeyboardInterrupt  # before anything is built

    monkeypatch.setattr(tiny, "ensure_tiny", stop)
    main(["pretrain-tiny", "--code-testbed", *flags, "--scale", "tiny-s", "--threads", "1"])
    assert [c.key() for c in asked] == [named_config(name).key()]


def test_pretrain_tiny_builds_the_models_it_names(monkeypatch):
    """`--model NAME` (repeatable) builds what the registry's name stands for (a conflict
    build, a stage of a code recipe), with no recipe number on the command line; an unknown
    name is refused naming the valid ones, and a flag that picks a recipe another way is
    refused beside it, before anything is built."""
    from flowzoo.tiny import build as tiny
    from flowzoo.tiny.recipe import named_config

    asked = []
    monkeypatch.setattr(tiny, "ensure_tiny", lambda cfg, **_: asked.append(cfg) or _stop())
    names = ["tiny-s-conflict", "tiny-s-code12-stage2"]
    main(["pretrain-tiny", "--model", names[0], "--model", names[1], "--threads", "1"])
    assert [c.key() for c in asked] == [named_config(names[0]).key()]
    with pytest.raises(SystemExit, match="no tiny build; valid: .*tiny-s-conflict"):
        main(["pretrain-tiny", "--model", "tiny-x"])
    with pytest.raises(SystemExit, match="goes without --scale"):
        main(["pretrain-tiny", "--model", names[0], "--scale", "tiny-s"])


def _stop():
    raise KeyboardInterrupt  # before anything is built


@pytest.mark.parametrize("recipe", [[], ["12"]])
@pytest.mark.parametrize("extra", [["--fast"], ["--ship"]])
def test_the_code_testbed_is_neither_the_tests_model_nor_shipped(extra, recipe, capsys):
    """`pretrain-tiny --code-testbed [12]` builds recipe 11 (or 12); with --fast it would
    silently build the tests' model, with --ship it would replace the shipped default: both
    refused before anything is built."""
    with pytest.raises(SystemExit, match="--code-testbed"):
        main(["pretrain-tiny", "--scale", "tiny-s", "--code-testbed", *recipe, *extra])
    with pytest.raises(SystemExit, match="--stage go with neither"):
        main(["pretrain-tiny", "--scale", "tiny-s", "--stage", "1", *extra])
