"""``flowzoo eval``: score a model (a tiny name, a checkpoint, a run's policies, a served
model) on held-out problems (a run's own held-out set, a user's file with ``--dataset``, an
env's test split: :mod:`flowzoo.agents.train.evaldata`), with per-role overrides and the
data checked before any model loads. Apart from ``cli.py`` so that each command reads in
one screenful."""

from __future__ import annotations

import argparse
import contextlib
import json
from pathlib import Path


def _cmd_eval(args: argparse.Namespace) -> int:
    from flowzoo.envs.registry import has_ood, list_envs, study_envs

    bad = [e for e in args.env or [] if e not in list_envs()]
    if bad:  # before torch is imported or any model is built or loaded
        raise ValueError(f"unknown env {bad[0]!r}; valid: {', '.join(list_envs())}")
    if args.dataset and args.split == "ood":
        raise ValueError(
            "--split ood with --dataset: a file has no out-of-distribution split (its rows are "
            "scored whole); drop --split, or drop --dataset to score an env's ood split"
        )
    # --temperature, --samples, --episodes and the other numbers: checked as parsed
    from flowzoo.agents.models.threads import apply_threads
    from flowzoo.agents.runs.weights import check_weights
    from flowzoo.agents.train.evaldata import EvalData
    from flowzoo.agents.train.evaluate import evaluate_env, is_run_dir, model_policies

    check_weights(args.model)  # a truncated weights file named, before anything loads it

    apply_threads(args.threads)  # before a model is loaded (torch's default: every core)

    role_models = {}
    for item in args.role_model or []:
        role, _, spec = item.partition("=")
        if not role or not spec:
            raise ValueError(f"bad --role-model {item!r}; expected role=spec")
        role_models[role.strip()] = spec.strip()
    _check_role_models(role_models, args)  # before any model is loaded
    # what each env scores: the run's own held-out set, the user's file (a run's training
    # rows left out), or the env's test split; loaded and checked before any model loads
    data = EvalData(args.model, args.dataset)
    envs = args.env or data.default_envs() or list(study_envs("math"))
    scored = {env_id: data.for_env(env_id) for env_id in envs}
    notes = [n for e in envs if (n := data.check_roles(e, role_models))]
    endpoint = dict(concurrency=args.concurrency, timeout_s=args.timeout, on_error=args.on_error)
    _, _, policy_for = model_policies(args.model, role_models, **endpoint)
    what = "run " if is_run_dir(args.model) else ""
    print(
        f"flowzoo eval: {what}{args.model} in every role"
        + "".join(f"; {r}: {s}" for r, s in role_models.items())
    )
    for line in dict.fromkeys([*notes, *(line for s in scored.values() for line in s.lines)]):
        print(f"flowzoo eval: {line}")
    from flowzoo.agents.train.evalfiles import eval_output, write_new

    # named uniquely, never over a file or through a link; what produced it recorded in it
    settings = dict(envs=envs, split=args.split, episodes=args.episodes, seed=args.seed)
    settings.update(samples=args.samples, temperature=args.temperature, dataset=args.dataset)
    out, record = eval_output(args.json, args.model, role_models, **settings)
    rows = []
    for env_id in envs:
        row: dict = {}
        env_options = data.options_for(env_id)
        here = scored[env_id]
        test_options = env_options if here.tasks is None else {**env_options, "dataset": here.tasks}
        splits = ["test", "ood"] if args.split == "both" else [args.split]
        for split in splits:
            if split == "ood" and not here.ood:
                print(f"{env_id:<20} ood: --dataset is scored whole (a file has no ood split)")
                continue
            if split == "ood" and not has_ood(env_id, **env_options):
                print(f"{env_id:<20} ood: this dataset has no out-of-distribution split")
                continue
            r = evaluate_env(
                env_id,
                policy_for,
                n_episodes=args.episodes,
                temperature=args.temperature,
                samples=args.samples,
                seed=args.seed,
                env_options=test_options if split == "test" else env_options,
                split=split,
                progress=f"{env_id} {split}",
            )
            fails = ", ".join(f"{k} {v:.2f}" for k, v in r.parse_fail.items())
            lo, hi = r.ci
            print(
                f"{env_id:<20} {split:<4} accuracy {r.accuracy:.3f} [{lo:.3f}, {hi:.3f}] "
                f"({r.episodes} problems x {r.samples} at T={r.temperature})  "
                f"parse failures: {fails}"
            )
            if r.prompts_cut:
                print(f"{env_id:<20} {split:<4} WARNING: prompts cut to fit: {r.prompts_cut}")
            d = {"split": split, **r.as_dict()}
            if split == "test":  # where the test problems came from, and what was left out
                d["data"] = here.record
            if row:
                row[split] = d
            else:
                row = d
        rows.append(row)
    text = json.dumps([{**row, "provenance": record} for row in rows], indent=1)
    out = write_new(out, text, numbered=not args.json)
    print(f"results (accuracy, CI, per-problem counts, parse failures): {out}")
    return 0


def _check_role_models(role_models: dict[str, str], args: argparse.Namespace) -> None:
    """A role in ``--role-model`` that none of the evaluated envs has is refused, naming
    their roles, before any model is loaded: the check training makes of ``role_models``
    (a typo would otherwise be ignored, the role played by ``--model``). A role of one of
    several envs (``aggregator`` with the three math envs) plays in that one."""
    if not role_models:
        return
    from flowzoo.agents.models.routing import refuse_unknown_roles
    from flowzoo.agents.train.evaluate import is_run_dir
    from flowzoo.envs.registry import make_env, study_envs

    envs = args.env
    if not envs and is_run_dir(args.model):  # the run's own env (an unreadable config: said later)
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            envs = [json.loads((Path(args.model) / "config.json").read_text())["env"]]
    roles = [r for e in envs or study_envs("math") for r in make_env(e).roles]
    refuse_unknown_roles(role_models, list(dict.fromkeys(roles)), "--role-model")
