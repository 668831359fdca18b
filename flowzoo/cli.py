"""``flowzoo`` command line: ``train``, ``eval``, ``serve``, ``sweep``, ``report``,
``pretrain-tiny``, ``models``, ``envs``, ``demo``.

Subcommands that need torch import it lazily, so ``flowzoo envs`` works on a plain install.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from flowzoo.cli_eval import _cmd_eval
from flowzoo.cli_help import Parser


def _cmd_envs(args: argparse.Namespace) -> int:
    from flowzoo.envs.registry import SPECS, make_env

    rows = []
    for env_id, spec in SPECS.items():
        if args.family and spec.family != args.family:
            continue
        try:
            env = make_env(env_id)
        except ImportError as e:  # a family whose optional extra is missing
            rows.append((env_id, spec.pettingzoo_id, f"(unavailable: {e})"))
            continue
        agents = ", ".join(env.possible_agents)
        rows.append((env_id, spec.pettingzoo_id, agents))
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    print(f"{'id':<{w0}}  {'pettingzoo id':<{w1}}  agents (turn order)")
    for r in rows:
        print(f"{r[0]:<{w0}}  {r[1]:<{w1}}  {r[2]}")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from flowzoo.envs.registry import make_env, study_envs
    from flowzoo.envs.scripted import expert_policy, play_episode

    env_ids = args.env or list(study_envs("math"))
    print(
        f"Scripted noisy experts (error rate {args.error_rate}) on {args.episodes} test problems per env"
    )
    results = []
    for env_id in env_ids:
        env = make_env(env_id, split="test", n_tasks=max(args.episodes, 10))
        pol = expert_policy(args.error_rate, seed=args.seed)
        t0 = time.perf_counter()
        correct = steps = flags = 0
        majority: int | None = 0 if env_id.startswith("voting") else None
        for i in tqdm(range(args.episodes), desc=env_id, leave=False, file=sys.stderr):
            res = play_episode(env, pol, seed=args.seed * 100_000 + i)
            correct += res["correct"]
            if majority is not None:
                majority += res["majority_correct"]
            steps += 0 if env.episode is None else len(env.episode.turns)
            flags += res["n_flags"]
        dt = time.perf_counter() - t0
        maj = "-" if majority is None else f"{majority / args.episodes:.3f}"
        results.append((env_id, correct / args.episodes, maj, flags / args.episodes, steps / dt))
    print(f"{'env':<20} {'accuracy':>8} {'majority':>8} {'flags/ep':>8} {'turns/s':>9}")
    for env_id, acc, maj, fl, sps in results:
        print(f"{env_id:<20} {acc:8.3f} {maj:>8} {fl:8.2f} {sps:9.0f}")
    env = make_env(env_ids[0], split="test", render_mode="ansi")
    play_episode(env, expert_policy(args.error_rate, seed=args.seed), seed=args.seed)
    print("\nOne episode:\n" + (env.render() or ""))  # "ansi" renders to text, never None
    return 0


def _train_config_from_args(args: argparse.Namespace):
    """The flags given (only those) over the config file over a preset over the defaults."""
    import dataclasses

    from flowzoo.config import TrainConfig, load_config_file

    given = {
        k: v
        for k, v in vars(args).items()
        if k in {f.name for f in dataclasses.fields(TrainConfig)} and v is not None
    }
    if args.config:
        return load_config_file(args.config, **given)
    return TrainConfig.from_dict(given, source="the command line")


def _cmd_train(args: argparse.Namespace) -> int:
    cfg = _train_config_from_args(args)  # checked before torch is even imported
    from flowzoo.agents.runs.runlog import SafeStream
    from flowzoo.agents.train.trainer import Trainer, TrainingDiverged

    # a reader that goes away (`| tee` killed by the same Ctrl-C, `| head`) must never end
    # the run through a print: whatever writes to stdout/stderr drops its output instead
    sys.stdout, sys.stderr = SafeStream(sys.stdout), SafeStream(sys.stderr)

    if os.environ.get("RANK", "0") == "0":  # under torchrun, process 0 speaks
        print(
            f"flowzoo train: {cfg.env} | policy {cfg.policy}/{cfg.param} | {cfg.algo} | model {cfg.model} | {cfg.steps} steps -> {cfg.run_dir}"
        )
    try:
        trainer = Trainer(cfg)
        summary = trainer.train()
    except TrainingDiverged as e:
        from pathlib import Path

        from flowzoo.agents.train.checkpoint import last_good

        # named only when it passes its digest: a damaged checkpoint is never "good"
        print(f"flowzoo: training stopped: {e}; {last_good(Path(cfg.run_dir))}", file=sys.stderr)
        return 3
    if trainer.dist.main:  # under torchrun, one summary (process 0's)
        from flowzoo.analysis.summary import print_summary

        print_summary(summary)
        print(f"weights: {summary['weights']}  |  metrics: {cfg.run_dir}/metrics.jsonl")
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    from flowzoo.agents.models.serve import VLLMServer
    from flowzoo.tiny.build import resolve_model

    path = resolve_model(args.model)
    cfg = json.loads((Path(path) / "config.json").read_text())
    own = int(cfg.get("max_position_embeddings") or 4096)
    srv = VLLMServer(
        path,
        name=args.name,
        memory=args.memory,
        max_model_len=args.max_model_len or min(own, 4096),
        port=args.port,
    )
    print(f"flowzoo serve: starting vLLM for {args.model} (log: {srv.log}) ...", flush=True)
    srv.start()
    print(
        f"serving {args.model} as {srv.name!r} at {srv.base_url}\n"
        f"  chat:        --model {srv.spec('chat')}\n"
        f"  completions: --model {srv.spec('completions')}\n"
        "Ctrl-C stops it.",
        flush=True,
    )
    import signal

    def _stop(*_: object) -> None:
        raise KeyboardInterrupt

    # SIGTERM (kill, a job scheduler) stops the server too: it runs in a session of its own
    signal.signal(signal.SIGTERM, _stop)
    assert srv.proc is not None  # start() returned: the server runs
    try:
        srv.proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        srv.stop()
    return 0


def _cmd_pretrain(args: argparse.Namespace) -> int:
    import time

    from flowzoo.agents.models.threads import apply_threads
    from flowzoo.tiny.build import ensure_tiny, ship
    from flowzoo.tiny.recipe import RECIPES, PretrainConfig, fast_config

    if (args.code_testbed or args.stage) and (args.fast or args.ship):  # tests'; the default
        raise SystemExit("--code-testbed and --stage go with neither --fast nor --ship")
    if args.ship and (args.fast or args.steps):  # only a recipe's own build is shipped
        raise SystemExit("--ship ships a recipe's own build; it goes without --fast and --steps")
    apply_threads(args.threads)  # a build keeps it (its own pick is only the default)
    levers = {"steps": args.steps} if args.steps else {}
    if args.code_testbed:  # a recipe number on the command line: the registry's name instead
        name = {11: "-code", 12: "-code12"}[args.code_testbed]
        print(f"flowzoo: --code-testbed is deprecated; use --model <scale>{name}", file=sys.stderr)
    levers |= {0: {}, 11: RECIPES["-code"].levers, 12: RECIPES["-code12"].levers}[args.code_testbed]
    levers |= {"midtrain_seed": args.stage} if args.stage else {}
    # no --scale: with --fast the tests' model, else every scale
    scales = args.scale or (["tiny-s"] if args.fast else ["tiny-s", "tiny-m", "tiny-l"])
    cfgs = (
        _named_builds(args, levers)
        if args.model
        else [fast_config(s) if args.fast else PretrainConfig(scale=s, **levers) for s in scales]
    )
    names = args.model or [None] * len(cfgs)  # shipped under the name it is asked for by
    for cfg, name in zip(cfgs, names, strict=True):
        scale = name or cfg.scale
        t = time.time()
        path = ensure_tiny(cfg, cache_dir=args.cache_dir, shipped=False)
        meta = json.loads((path / "flowzoo_tiny.json").read_text())
        print(
            f"{scale}: {meta['parameters']:,} parameters, {meta['corpus_examples']} examples, "
            f"trained {meta['train_seconds']:.0f}s (this call {time.time() - t:.0f}s) -> {path}"
        )
        if args.ship:
            entry = ship(path, cfg, name)
            print(f"{scale}: shipped in the package ({entry['bytes']:,} bytes, key {entry['key']})")
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    from flowzoo.agents.sweeps.runner import load_sweep, parse_subset, run_sweep

    spec = load_sweep(args.config)
    if args.out_dir:
        spec.out_dir = args.out_dir
    rep = run_sweep(
        spec,
        backend=args.backend,
        workers=args.workers,
        subset=parse_subset(args.subset),
        address=args.address,
    )
    failed = {k: v for k, v in rep["runs"].items() if v.startswith("failed")}
    for k, v in rep["runs"].items():
        print(f"{v:<22} {k}")
    print(
        f"sweep {spec.name}: {len(rep['runs'])} runs, {len(failed)} failed, {rep['wall_s']:.0f}s -> {spec.out_dir}"
    )
    return 1 if failed else 0


def _named_builds(args: argparse.Namespace, levers: dict) -> list:
    """The builds ``--model`` names, through the registry (``flowzoo models``): a name
    stands for its whole recipe, so the flags that pick one another way go without it."""
    import dataclasses

    from flowzoo.tiny.build import model_table
    from flowzoo.tiny.recipe import named_config

    other = [f for f, on in (("--scale", args.scale), ("--code-testbed", args.code_testbed),
                             ("--stage", args.stage), ("--fast", args.fast)) if on]  # fmt: skip
    if other:
        raise SystemExit(f"--model names a whole recipe; it goes without {', '.join(other)}")
    out = []
    for name in args.model:
        cfg = named_config(name)
        if cfg is None:
            names = ", ".join(r["name"] for r in model_table())
            raise SystemExit(f"--model {name!r} is no tiny build; valid: {names} (+ -stageN)")
        out.append(dataclasses.replace(cfg, **levers) if levers else cfg)
    return out


def _cmd_models(args: argparse.Namespace) -> int:
    from flowzoo.tiny.build import model_table

    rows = model_table()
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    for r in rows:
        print(f"{r['name']:<20} key {r['key']}  parent {r['parent']:<12}  {r['status']}")
        print(f"{'':<20} recipe {r['recipe']} ({r['recipe_status']}): {r['what']} ({r['docs']})")
    print("any name + -stageN: another behaviour stage of its recipe; a local path: any checkpoint")
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from flowzoo.analysis.report import build_report

    dirs = args.runs_dir if len(args.runs_dir) > 1 else args.runs_dir[0]
    p = build_report(dirs, args.out, window=args.window, floor=args.floor, plots=not args.no_plots)
    print(f"wrote {p}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from flowzoo import __version__
    from flowzoo.agents.models.threads import threads_option
    from flowzoo.agents.sweeps.runner import WORKERS
    from flowzoo.analysis.inputs import KNOBS
    from flowzoo.config import FIELD_DOMAINS, MAX_STEPS
    from flowzoo.config.fields import Domain, bound_flag

    p = Parser(prog="flowzoo", description=__doc__)
    p.add_argument("--version", action="version", version=f"flowzoo {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("envs", help="list environment ids, PettingZoo ids and agents")
    e.add_argument("--family", choices=["math", "code"], default=None)
    e.set_defaults(fn=_cmd_envs)
    d = sub.add_parser("demo", help="play every env with noisy scripted experts and print a table")
    d.add_argument("--env", action="append", help="env id (repeatable); default: the math envs")
    d.add_argument("--episodes", type=int, default=200)
    d.add_argument("--error-rate", type=float, default=0.3)
    d.add_argument("--seed", type=int, default=0)
    d.set_defaults(fn=_cmd_demo)

    t = sub.add_parser("train", help="train a workflow's roles with GRPO or PPO")
    t.add_argument("--config", help="a TOML or YAML file of TrainConfig fields (flags override it)")
    _add_train_flags(t)
    t.set_defaults(fn=_cmd_train)

    ev = sub.add_parser(
        "eval", help="evaluate a model (or a run's policies) on held-out problems or your own file"
    )
    ev.add_argument(
        "--model",
        default="tiny-s",
        help="tiny-s | tiny-m | tiny-l (-code, -code12, -conflict, -stageN: see train) | a local checkpoint path | a training run dir (its "
        "trained policies, routed as in training: shared, isolated, LoRA, frozen roles) | "
        "openai:<base url>#<model> (chat API) | openai-completions:<base url>#<model>",
    )
    ev.add_argument(
        "--role-model",
        action="append",
        metavar="ROLE=SPEC",
        help="repeatable: play ROLE with SPEC (any --model form but a run dir, or "
        "scripted[:<error rate>])",
    )
    ev.add_argument("--concurrency", type=int, default=8, help="served models: requests in flight")
    ev.add_argument(
        "--timeout", type=float, default=60.0, help="served models: seconds per request"
    )
    ev.add_argument(
        "--on-error",
        choices=["raise", "empty"],
        default="raise",
        help="served models: a failed request stops (raise) or is an empty, flagged turn",
    )
    ev.add_argument(
        "--env",
        action="append",
        help="repeatable; default: a run's own env, else the three study math envs",
    )
    ev.add_argument(
        "--dataset",
        default=None,
        metavar="FILE_OR_SPEC",
        help="score your own problems: a .jsonl/.json/.parquet file or save_to_disk folder "
        "(styles told by the rows' fields) or a spec (jsonl:PATH, gsm8k:PATH, math:PATH, "
        "mbpp:PATH, hf:DIR, ...), every row scored (a saved dataset with splits: its test "
        "split); with a run as --model, rows the run trained on (by key, statement, tests, "
        "stated quantities + gold, n-grams) are left out of the score, counted and recorded. "
        "Default: a run's own held-out set (its eval_dataset, else its dataset's test side), "
        "else each env's test split",
    )
    ev.add_argument(
        "--episodes", type=int, default=0, help="problems per split (0: the whole split)"
    )
    ev.add_argument(
        "--temperature", type=float, default=0.7, help="sampling temperature (0: greedy)"
    )
    ev.add_argument("--samples", type=int, default=4, help="samples per problem (greedy: 1)")
    ev.add_argument(
        "--split",
        choices=["test", "ood", "both"],
        default="both",
        help="held-out problems (test: structure trained, problems not), out-of-distribution "
        "ones (ood: structure never trained), or both side by side",
    )
    ev.add_argument("--seed", type=int, default=0)
    threads_option(ev)
    ev.add_argument(
        "--json",
        default=None,
        help="results file, made new (an existing name is refused; default: a new "
        "runs/eval/eval-<time>-<model>-<build>.json); each row records the model, its weights "
        "digest and the role overrides",
    )
    # the numbers' domains: training's own fields (one declaration, one check)
    for flag, name in (
        ("--samples", "eval_samples"),
        ("--episodes", "eval_episodes"),
        ("--temperature", "temperature"),
        ("--seed", "seed"),
        ("--concurrency", "endpoint_concurrency"),
        ("--timeout", "endpoint_timeout_s"),
        ("--threads", "threads"),
    ):
        bound_flag(ev, flag, FIELD_DOMAINS[name])
    ev.set_defaults(fn=_cmd_eval)

    pt = sub.add_parser("pretrain-tiny", help="build and pretrain the tiny base models (cached)")
    pt.add_argument(
        "--scale",
        action="append",
        choices=["tiny-s", "tiny-m", "tiny-l"],
        default=None,
        help="repeatable; default: every scale (with --fast: tiny-s)",
    )
    pt.add_argument("--fast", action="store_true", help="seconds-scale run for tests")
    pt.add_argument(
        "--model",
        action="append",
        default=None,
        metavar="NAME",
        help="repeatable: build a named tiny model ahead (flowzoo models lists them, e.g. "
        "tiny-s-conflict, tiny-m-conflict, tiny-s-code12-stage2); goes without --scale",
    )
    pt.add_argument(
        "--code-testbed",
        nargs="?",
        type=int,
        const=11,
        default=0,
        choices=(11, 12),
        help="deprecated: the older spelling of --model tiny-s-code (11, the default) / "
        "tiny-s-code12 (12)",
    )
    pt.add_argument(
        "--stage",
        type=int,
        default=0,
        metavar="N",
        help="another behaviour stage of the recipe (what --model <name>-stageN loads)",
    )
    pt.add_argument(
        "--ship",
        action="store_true",
        help="copy the built model into the package (weights/<the --model name or scale>)",
    )
    pt.add_argument(
        "--steps", type=int, default=None, help="pretraining steps (default: the scale's budget)"
    )
    pt.add_argument("--cache-dir", default=None)
    threads_option(pt)
    # refused as parsed, before any build starts (a build takes minutes to hours)
    bound_flag(pt, "--steps", Domain(int, lo=1, hi=MAX_STEPS))
    bound_flag(pt, "--stage", Domain(int, lo=0, hi=2**32 - 1))  # the stage's seed
    bound_flag(pt, "--threads", FIELD_DOMAINS["threads"])
    pt.set_defaults(fn=_cmd_pretrain)

    md = sub.add_parser("models", help="list the tiny model names, their recipe keys and status")
    md.add_argument("--json", action="store_true", help="print the table as JSON")
    md.set_defaults(fn=_cmd_models)
    sw = sub.add_parser("sweep", help="run a matrix of training runs (resumable)")
    sw.add_argument("config", help="sweep file (.toml/.yaml) with [base], [grid], [[extra]]")
    sw.add_argument("--backend", choices=["local", "ray"], default="local")
    sw.add_argument(
        "--workers", type=int, default=None, help="local backend: runs at a time (default: cores)"
    )
    sw.add_argument(
        "--address", default=None, help="ray backend: cluster address (default: a local Ray)"
    )
    sw.add_argument("--subset", default=None, help="only runs matching key=value[,key=value]")
    sw.add_argument("--out-dir", default=None)
    bound_flag(sw, "--workers", WORKERS)
    sw.set_defaults(fn=_cmd_sweep)

    sv = sub.add_parser(
        "serve",
        help="serve a model (a tiny scale or a local path) with vLLM, OpenAI-compatible, on "
        "127.0.0.1 (needs FLOWZOO_VLLM_PYTHON: bash .ci/vllm-env.sh)",
    )
    sv.add_argument(
        "--model", default="tiny-s", help="a tiny model name (as train's --model) or a local path"
    )
    sv.add_argument("--name", default="tiny", help="the served model name (the spec's #name)")
    sv.add_argument("--port", type=int, default=8000)
    sv.add_argument(
        "--max-model-len",
        type=int,
        default=0,
        help="context in tokens (default: the model's own, at most 4096: a Qwen3 config's "
        "40,960 does not fit a CPU engine's default KV-cache share)",
    )
    sv.add_argument("--memory", type=float, default=0.1, help="vLLM's memory share (CPU: RAM)")
    sv.set_defaults(fn=_cmd_serve)
    rp = sub.add_parser(
        "report", help="aggregate runs into report.md with tables, plots and findings"
    )
    rp.add_argument(
        "runs_dir", nargs="+", help="one or more dirs of runs (e.g. a math and a code sweep)"
    )
    rp.add_argument("--out", default=None, help="default: the first RUNS_DIR/report")
    rp.add_argument("--window", type=int, default=3, help="evals averaged for the final accuracy")
    rp.add_argument(
        "--floor",
        type=float,
        default=0.0,
        help="a margin under every interval when reading rises and falls (0: the 95%% CI alone)",
    )
    rp.add_argument("--no-plots", action="store_true")
    for name, dom in KNOBS.items():  # the report's own check, at parse time too
        bound_flag(rp, f"--{name}", dom)
    rp.set_defaults(fn=_cmd_report)
    return p


def _bool(x: str) -> bool:
    v = x.lower()
    if v not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {x!r}")
    return v in ("1", "true", "yes", "on")


def _json_object(x: str) -> dict:
    try:
        v = json.loads(x)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not JSON ({e.msg}): {x!r}") from None
    if not isinstance(v, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {x!r}")
    return v


def _add_train_flags(p: argparse.ArgumentParser) -> None:
    """One flag per TrainConfig field, its help, default, range and choices from the
    dataclass, grouped by the field's section (a flag left out keeps the file's value, or the
    preset's, or the default)."""
    import dataclasses
    import typing

    from flowzoo.config import SECTION_OF, TrainConfig

    hints = typing.get_type_hints(TrainConfig)
    defaults = TrainConfig()
    groups: dict = {}
    for f in dataclasses.fields(TrainConfig):
        section = SECTION_OF[f.name]  # fields are declared section by section
        if section not in groups:
            groups[section] = p.add_argument_group(section)
        g = groups[section]
        flag = "--" + f.name.replace("_", "-")
        tp = hints[f.name]
        d = getattr(defaults, f.name)
        shown = json.dumps(d) if isinstance(d, dict) else d
        # an empty default is explained by the field's help (out_dir: the derived name)
        default = "" if d == "" else f" (default: {shown})"
        bounds = f.metadata["domain"].bounds
        default += f"; must be {bounds}" if bounds else ""
        kw: dict = {
            "dest": f.name,
            "default": None,
            "help": f"{f.metadata['help']}{default}".replace("%", "%%"),
        }
        if f.metadata.get("choices"):  # "" means "none": the default, never typed
            kw["choices"] = [c for c in f.metadata["choices"] if c != ""]
        if tp is bool:
            g.add_argument(flag, type=_bool, metavar="BOOL", **kw)
        elif tp in (int, float, str):
            g.add_argument(flag, type=tp, **kw)
        else:  # dicts: JSON on the command line
            g.add_argument(flag, type=_json_object, metavar="JSON", **kw)


def _say(msg: str) -> None:
    """An error line on stderr, unless its reader has gone away (then there is no one to
    tell, and a BrokenPipeError here would replace the exit status with a traceback)."""
    with contextlib.suppress(OSError, ValueError):
        print(msg, file=sys.stderr)


def _settle_streams() -> None:
    """A reader that went away (``| head``; ``| tee`` killed by the same Ctrl-C): what is
    still buffered for it goes to /dev/null, so the interpreter's last flush does not end
    the command with a BrokenPipeError report."""
    for outer in (sys.stdout, sys.stderr):
        stream = getattr(outer, "stream", outer)  # a SafeStream's own stream
        try:
            stream.flush()
        except (OSError, ValueError):
            with contextlib.suppress(OSError, ValueError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
        except AttributeError:  # no stream at all
            pass


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    finally:
        _settle_streams()


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.fn(args) or 0)
    except (ValueError, FileNotFoundError, ImportError) as e:
        _say(f"flowzoo: error: {e}")
        return 2
    except RuntimeError as e:  # e.g. no vLLM environment for `serve`: said, not a traceback
        if type(e).__name__ != "BackendUnavailable":
            raise
        _say(f"flowzoo: error: {e}")
        return 2
    except KeyboardInterrupt as e:  # Ctrl-C; SIGTERM / SIGHUP arrive as its subclass Stopped
        signum = getattr(e, "signum", None)  # either way the run or sweep recorded it
        _say(
            f"flowzoo: stopped by {e}; recorded as interrupted"
            if signum
            else "flowzoo: interrupted"
        )
        return 128 + signum if signum else 130
    except BrokenPipeError:  # the output's reader went away (`| head`): nothing to say it to
        return 141  # as a shell reports a command ended by SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
