"""The training loop, read top to bottom: rollout -> advantages -> update -> eval -> checkpoint;
the class too: construction, the public ``train`` / ``train_step`` / ``update`` /
``evaluate``, then the helpers they call.

The rooms it wires: :mod:`config` (every hyperparameter), :mod:`routing` (role -> policy),
:mod:`rollout` (many envs at once), :mod:`batch` (the step's one batch, built once from its
episodes), :mod:`learner` (advantages, then the per-policy, per-role update and its
gradient diagnostics), :mod:`flowzoo.agents.train.checkpoint` and
:mod:`flowzoo.agents.runs.runlog` (what the run writes). Rewards come from the env alone
(the env is the one place rewards are mixed); the trainer never re-weights them.

Reproducibility: all randomness of step ``k`` (problems, sampling, minibatch order) is
derived from ``(seed, k)`` in one helper, :class:`Seeds`, so a resumed run (parameters,
optimizer states, the damper's EMA and the step restored) continues exactly. A run record
is honest: a crash is ``failed`` with its error and leaves no ``final/``, and Ctrl-C at any
point loses nothing (the state saved is always one the run can continue from exactly).
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

from flowzoo.agents.models import threads
from flowzoo.agents.models.parameterisation import LoadSettings, LoraSettings
from flowzoo.agents.models.policy import check_budgets
from flowzoo.agents.models.routing import Players, PolicyRouter, plan_roles
from flowzoo.agents.runs import rundir, runlog, signals, weights
from flowzoo.agents.train import checkpoint, distributed, heldout, stepmetrics, toolturns
from flowzoo.agents.train.batch import Batch
from flowzoo.agents.train.evaluate import evaluate_env
from flowzoo.agents.train.learner import Learner, TrainingDiverged
from flowzoo.agents.train.provenance import data_record, model_files_record, run_record
from flowzoo.agents.train.rollout import EpisodeRecord, rollout, tree_rollout
from flowzoo.agents.train.seeds import Seeds
from flowzoo.agents.train.watch import STOPPED, Watch
from flowzoo.config import TrainConfig, load_config_file
from flowzoo.envs.registry import has_ood

__all__ = ["TrainConfig", "Trainer", "TrainingDiverged", "load_config_file"]

#: consecutive steps without any reward variance before the run warns
NO_SIGNAL_STEPS = 5
#: a role's truncation rate above which the run warns
TRUNCATION_WARN = 0.05


class Trainer:
    """Runs a :class:`TrainConfig` end to end (see the module doc)."""

    def __init__(self, cfg: TrainConfig, progress: bool = True) -> None:
        from flowzoo.envs import make_env
        from flowzoo.tiny.build import resolve_model

        self.cfg = cfg
        self.dist = distributed.setup(cfg.device)
        #: whole copies or FSDP shards, behind one interface (:func:`distributed.layout`)
        self.par = distributed.layout(self.dist, sharded=cfg.fsdp)
        # before any parallel work: torch's default is every core of the machine
        threads.apply_threads(cfg.threads, announce=self.dist.main)
        #: this process's device (cuda:<local rank> under torchrun on GPUs)
        self.device = self.dist.device
        self.progress = progress and self.dist.main
        #: progress and notices (stderr): a reader that went away (``| tee`` killed by
        #: Ctrl-C) drops them and never stops the run or its last records
        self.console = runlog.SafeStream()
        #: the training bar's ETA from steady-state steps (evaluations timed apart)
        self.clock = runlog.StepClock()
        self._bar = None
        if self.dist.main:  # a refused run directory is said now, not after a model build
            rundir.check_dir(Path(cfg.run_dir), cfg)
        distributed.check_supported(cfg, self.dist)  # before a model is built
        if cfg.trackers and self.dist.main:
            from flowzoo.agents.runs.trackers import check_trackers

            check_trackers(cfg.trackers)
        #: every random stream of the run, derived in one place (see :class:`Seeds`)
        self.seeds = Seeds(cfg.seed)
        self.seeds.initial_weights()
        # the penalty shapes what training sees; evaluation scores the answer alone
        self.env_factory = lambda split, n: make_env(
            cfg.env,
            split=heldout.train_split(cfg) if split == "train" else split,
            n_tasks=n,
            **cfg.env_options,
            **({"overlong_penalty": cfg.overlong_penalty} if split == "train" else {}),
        )
        probe = self.env_factory("train", heldout.train_pool_size(cfg))
        self.train_tasks = probe.tasks
        #: the held-out set, its source and its measured overlap with the training pool; a
        #: separate held-out file is read and checked even when nothing evaluates on it
        #: (``eval_every=0``): a broken file is said now, not at the next run that evaluates
        evaluates = cfg.eval_every > 0 or bool(cfg.eval_dataset)
        self.held_out = heldout.resolve(cfg, self.train_tasks) if evaluates else None
        if self.held_out is not None and self.dist.main:
            print(f"flowzoo: {self.held_out.line()}", file=self.console)
        self.roles = probe.roles
        # (the deprecated per-role maps were folded into role_settings by the config)
        unknown = sorted(set(cfg.role_settings) - set(self.roles))
        if unknown:
            raise ValueError(
                f"role_settings names roles {unknown} that {cfg.env} does not have; "
                f"its roles: {', '.join(self.roles)}"
            )
        # who plays which role, checked before a model is built or loaded (a build takes minutes)
        plan_roles(self.roles, cfg.sharing, cfg.role_models, cfg.frozen)
        self.model_path = resolve_model(cfg.model)
        weights.check_weights(self.model_path)  # a truncated file, named, before a build
        self.base_model = weights.weights_identity(self.model_path)  # which build it was
        #: the sha256 of every data file the run reads (checked on resume, in the summary)
        self.data_files = data_record(cfg) | model_files_record(self.model_path)
        #: each role's token budget: given per role, else given for all, else the workflow's
        defaults = probe.turn_tokens()
        self.token_limits = {
            r: int(cfg.for_role(r, "max_new_tokens") or defaults[r]) for r in self.roles
        }
        # a budget that leaves no prompt: refused (a role another model plays: at run time)
        check_budgets(self.token_limits, self.model_path, cfg.model, set(cfg.role_models))
        #: each role's rollout temperature (evaluation samples every role at eval_temp)
        self.temperatures = {r: float(cfg.for_role(r, "temperature")) for r in self.roles}
        self.agents_per_role: defaultdict[str, int] = defaultdict(int)
        for a in probe.possible_agents:
            self.agents_per_role[probe.role_of(a)] += 1
        self._build_policies(probe)  # the router, sharded (FSDP), its generation backend
        self.learner = Learner(cfg, self.router, self.dist, self.roles, dict(self.agents_per_role))
        self.out = Path(cfg.run_dir)
        self.step = 0
        self.envs = [
            self.env_factory("train", heldout.train_pool_size(cfg))
            for _ in range(cfg.problems_per_step * cfg.group_size)
        ]
        self.eval_curve: list[tuple[int, float]] = []
        self._phase = "between"
        #: steps without any reward variance, the current streak, and warnings for the summary
        self.no_signal_steps, self._streak = 0, 0
        self.warnings: list[str] = []
        #: dynamic sampling's counts for the step's metrics line (None: off)
        self._sampling: dict | None = None
        #: per role, the truncated fraction of its recent turns (for the truncation warning)
        self._trunc: dict[str, list[float]] = defaultdict(list)
        self._trunc_warned: set[str] = set()
        self._cut_warned: set[str] = set()  # roles warned of prompts cut to fit the context
        #: the cliff early warning (``monitor_*`` settings): told each step, it responds
        self.watch = Watch(self)

    # ------------------------------------------------------------------ the public API
    def train(self) -> dict:
        """Run (or resume) to ``cfg.steps``; write config.json, metrics.jsonl, summary.json
        and, when completed, ``final/``. Under torchrun every process runs this loop (and
        evaluates its share of the held-out problems); process 0 logs and writes."""
        from tqdm import tqdm

        cfg = self.cfg
        main = self.dist.main
        # a resume reads and checks its checkpoint before anything in the directory changes:
        # a refused resume (a corrupt file, named) leaves the run's records as they were
        resumed, m = checkpoint.load(self) if cfg.resume else (False, None)
        # process 0 holds the directory's lock until the run's last record is written
        resumed_at = self.step if resumed else 0
        inputs = run_record(self.base_model, self.data_files)
        lock = rundir.prepare_dir(self.out, cfg, resumed_at, inputs) if main else None
        # from here on whatever fails (a resume, a tracker's start) is recorded as failed
        t_start = time.time()
        status, error = "completed", None
        log, bar = None, None
        stop = signals.StopSignals().install()  # SIGTERM and SIGHUP stop it as Ctrl-C does
        try:
            log = runlog.RunLog(self.out, main, cfg)
            log.start(self.step if resumed else None)
            if resumed and self.progress:
                print(
                    f"flowzoo: resumed {self.out} at step {self.step} of {cfg.steps}",
                    file=self.console,
                )
            self._phase = "between"
            # the ETA is the clock's (steady steps + evaluations), not tqdm's overall rate
            bar = self._bar = tqdm(
                total=cfg.steps,
                initial=self.step,
                desc=f"train {cfg.env} {cfg.policy}/{cfg.param}",
                disable=not self.progress,
                file=self.console,
                bar_format=runlog.BAR_FORMAT,
            )
            if m is not None:  # a step that was interrupted before its evaluation or line
                self._phase = "log"
                self._finish_step(m, log)
            if self.step == 0 and not self.eval_curve and cfg.eval_every > 0:
                base = self.evaluate()
                self.eval_curve.append((0, base["accuracy"]))
                self._watch_prompt_cuts({"step": -1, "eval": base})
                log.append({"step": -1, "eval": base})
            self.watch.start()  # rebuilt from the kept lines on a resume
            while self.step < cfg.steps and self.watch.stopped is None:
                m = None
                m = self.train_step()
                self.clock.step(m["time"]["step_s"])
                self._finish_step(m, log)
                left = runlog.evals_left(self.step, cfg.steps, cfg.eval_every)
                last = self.eval_curve[-1][1] if self.eval_curve else None
                line = self.clock.line(cfg.steps - self.step, left, m, last)
                bar.set_postfix_str(line + self.watch.postfix(), False)
                bar.update(1)
        except KeyboardInterrupt:
            stop.hold()  # taken: a second signal waits until the records are written
            status = "interrupted"
            self._save_on_interrupt(m)
            raise
        except TrainingDiverged as e:
            status, error = f"diverged: {e}", str(e)
            raise
        except Exception as e:  # recorded as failed, with its error; never as completed
            status, error = f"failed: {type(e).__name__}", f"{type(e).__name__}: {e}"
            raise
        finally:
            stop.hold()  # a second signal waits: the last records are written whole
            try:
                self._bar = None
                if bar is not None:
                    bar.close()  # on a SafeStream: a closed pipe cannot raise here
                if status == "completed" and self.watch.stopped is not None:
                    status = STOPPED  # ended cleanly by the monitor: final/ as for completed
                done = status in ("completed", STOPPED)
                failed = checkpoint.save_final(self) if done else None
                if failed:  # final/ is whole before a summary says completed, else failed
                    status, error = f"failed: {failed.split(':')[0]}", failed
                if log is not None:
                    try:
                        log.close(status)
                    except Exception as e:  # a tracker's finish; the summary is written anyway
                        self.warnings.append(f"a tracker failed to finish: {e!r}")
                wall = time.time() - t_start
                summary = runlog.summary(
                    cfg, self.out, status, self.step, wall, resumed, self.eval_curve, error
                )
                summary["no_signal_steps"] = self.no_signal_steps
                summary["monitor"] = self.watch.record()
                if status == STOPPED:
                    summary["weights"] = str(self.out / "final")
                summary["resumed_at"] = resumed_at  # wall_s is this session's, from that step
                summary["threads"] = torch.get_num_threads()  # results depend on it
                summary["base_model"] = self.base_model
                summary.update(run_record(self.base_model, self.data_files))
                wf = self.envs[0].workflow  # the analysis reads the workflow's readings from here
                summary["readings"] = wf.readings.record(wf.parallel_roles)
                if self.router.frozen:  # played, never trained, not in the gradient diagnostics
                    summary["frozen_roles"] = {
                        r: repr(self.router.policy_for(r)[1]) for r in self.router.frozen_roles
                    }
                if self.warnings:
                    summary["warnings"] = self.warnings
                if self.held_out is not None:  # where the held-out numbers come from
                    summary["held_out"] = self.held_out.record()
                if main:
                    rundir.write_json(self.out / "summary.json", summary)
                if failed:
                    raise ValueError(failed)
            finally:  # the directory is free again, whatever the records did
                stop.restore()
                if lock is not None:
                    lock.release()
        return summary

    def train_step(self) -> dict:
        """One rollout + update; returns the metrics line (written by :meth:`train`)."""
        step = self.step
        t0 = time.time()
        self._phase = "rollout"
        records = self._rollout(step)
        # the step's one batch: every round's kept episodes, whatever shape played them
        batch, self._sampling = Batch.of(self.cfg, records, self._sampling), None
        t_roll = time.time() - t0
        self._phase = "update"
        per_policy, adv_stats = self.update(batch)
        m = stepmetrics.step_metrics(step, batch, per_policy, adv_stats)
        m["time"] = {"rollout_s": round(t_roll, 3), "step_s": round(time.time() - t0, 3)}
        # what each policy's optimizer stepped at (per-role lrs and the schedule applied)
        m["lr"] = {n: float(o.param_groups[0]["lr"]) for n, o in self.learner.opts.items()}
        if batch.sampling is not None:
            m["sampling"] = dict(batch.sampling)
        self.step += 1
        self._phase = "log"
        return m

    def update(self, batch: Batch | list[EpisodeRecord]) -> tuple[dict, dict]:
        """One update of every policy that played in ``batch`` (the learner's: advantages,
        loss, optimizer steps); (per-policy statistics, group statistics). Episodes (a
        rollout's, as tests and benchmarks pass them) are made a batch first."""
        if not isinstance(batch, Batch):
            batch = Batch.of(self.cfg, batch)
        # rewards as the env mixed them (the overlong penalty included)
        if not all(math.isfinite(x) for x in batch.rewards):
            raise TrainingDiverged(f"non-finite reward at step {self.step}")
        out = self.learner.update(batch, self.step, self.seeds.minibatches(self.step))
        self._check_weights()
        return out

    def evaluate(self) -> dict:
        """Held-out accuracy: ``eval_samples`` samples per problem at the evaluation
        temperature (with a bootstrap CI over problems and per-problem counts), and greedy
        accuracy beside it. Under torchrun every process plays its share of the episodes and
        the counts are summed (under FSDP on gathered weights)."""
        cfg = self.cfg
        t0 = time.time()
        step = self.step  # the bars' labels (none when progress is off)
        at = lambda what: f"eval step {step} ({what})" if self.progress else ""  # noqa: E731
        if self._bar is not None:  # the training bar says why it waits
            self._bar.set_postfix_str(f"evaluating at step {self.step}")
        common: dict[str, Any] = dict(
            progress_file=self.console,
            n_episodes=cfg.eval_episodes,
            max_new_tokens=self.token_limits,
            env_options=cfg.env_options,
            seed=cfg.seed,
            shard=(self.dist.rank, self.dist.world),
            reduce=lambda xs: distributed.sum_floats(xs, self.dist),
        )
        ood_options = common["env_options"]
        if self.held_out is not None:  # the measured held-out set itself, overlap removed
            common["env_options"] = {**cfg.env_options, "dataset": self.held_out.tasks}

        def run(**kw) -> dict:  # one evaluation with the settings in ``common`` now
            return evaluate_env(cfg.env, self.router.policy_for, **common, **kw).as_dict()

        # FSDP: the policies' full parameters, gathered once (the reference stays sharded)
        with self.par.gathered(self._models(reference=False)):
            temp = cfg.eval_temp
            res = run(temperature=temp, samples=cfg.eval_samples, progress=at(f"T={temp}"))
            if cfg.eval_greedy and cfg.eval_temp > 0:
                g = run(temperature=0.0, progress=at("greedy"))
                res["greedy"] = {k: v for k, v in g.items() if k != "env"}
            if cfg.eval_ood_episodes > 0 and has_ood(cfg.env, **cfg.env_options):
                common["n_episodes"] = cfg.eval_ood_episodes
                common["env_options"] = ood_options
                o = run(temperature=temp, samples=cfg.eval_samples, split="ood", progress=at("ood"))
                res["ood"] = {k: v for k, v in o.items() if k != "env"}
        self.clock.evaluation(time.time() - t0)
        return res

    # ------------------------------------------------------------------ construction
    def _build_policies(self, probe) -> None:
        """The router of every role's policy (and the reference, when a KL needs one), laid
        out over the processes, with its generation backend attached."""
        cfg = self.cfg
        need_ref = any(cfg.for_role(r, "kl_coef") > 0 for r in self.roles)
        self.router = PolicyRouter(
            self.model_path,
            self.roles,
            sharing=cfg.sharing,
            param=cfg.param,
            lora=LoraSettings(r=cfg.lora_r, alpha=cfg.lora_alpha),
            load=LoadSettings(
                device=self.device,
                devices=dict(cfg.policy_devices),
                precision=cfg.precision,
                grad_checkpointing=cfg.grad_checkpointing,
                fast=cfg.fast_forward,
            ),
            players=Players(
                role_models=dict(cfg.role_models),
                frozen_roles=tuple(cfg.frozen),
                options=dict(
                    concurrency=cfg.endpoint_concurrency,
                    timeout_s=cfg.endpoint_timeout_s,
                    retries=cfg.endpoint_retries,
                    on_error=cfg.endpoint_on_error,
                ),
                stops={r: d["stop"] for r, d in cfg.role_settings.items() if "stop" in d},
                tools=toolturns.tool_roles(probe),
                seed=cfg.seed,
            ),
            need_reference=need_ref,
        )
        self.par.shard(self._models())
        if cfg.generation_backend != "transformers":
            from flowzoo.agents.models.backends import attach_router

            # a prompt of n chars is at most n tokens (+ BOS / template) for any tokenizer
            budget = cfg.vllm_max_model_len or (
                probe.max_prompt_chars + max(self.token_limits.values()) + 64
            )
            attach_router(
                self.router,
                cfg.generation_backend,
                memory=cfg.vllm_memory,
                seed=cfg.seed,
                max_model_len=budget,
            )

    def _models(self, reference: bool = True) -> list[torch.nn.Module]:
        """Every model this trainer holds (policies, then the reference), once each."""
        ms = [self.router.policies[n].model for n in self.router.names]
        if reference and self.router.reference is not None:
            ms.append(self.router.reference.model)
        return list({id(m): m for m in ms}.values())

    # the learner's state, as the trainer's (tests and benchmarks inspect it)
    @property
    def opts(self) -> dict:
        return self.learner.opts

    @property
    def heads(self) -> dict:
        return self.learner.heads

    @property
    def last_role_grads(self) -> dict:
        return self.learner.last_role_grads

    @property
    def ckpt_path(self) -> Path:
        return checkpoint.path(self.out, self.dist, self.cfg.fsdp)

    def save_checkpoint(self, pending: dict | None = None) -> None:
        checkpoint.save(self, pending)

    # ------------------------------------------------------------------ one step
    def _rollout(self, step: int) -> list[EpisodeRecord]:
        """The step's episodes; with ``resample_rounds`` (DAPO dynamic sampling), fresh
        problems are rolled out while fewer than ``problems_per_step`` problems have a group
        with reward variance, and the batch keeps at most that many informative problems."""
        cfg = self.cfg
        records = self._rollout_round(step, 0, set())
        rounds = 0
        if cfg.resample_rounds > 0:
            good = self._informative_problems(records)
            while len(good) < cfg.problems_per_step and rounds < cfg.resample_rounds:
                rounds += 1
                seen = {str(r.group) for r in records}
                records += self._rollout_round(step, rounds, seen)
                good = self._informative_problems(records)
            # at most problems_per_step problems: the informative ones first, else (none had
            # a signal) the first ones sampled, so a batch never grows with the rounds
            order = list(dict.fromkeys(str(r.group) for r in records))
            keep = set(good[: cfg.problems_per_step] or order[: cfg.problems_per_step])
            kept = [r for r in records if str(r.group) in keep]
            for i, r in enumerate(kept):  # renumber (the batch tells each turn its episode)
                r.index = i
            self._sampling = {
                "rounds": rounds + 1,
                "problems": len({str(r.group) for r in records}),
                "informative": len(good),
            }
            return kept
        return records

    def _informative_problems(self, records: list[EpisodeRecord]) -> list[str]:
        """Problems (in order of appearance) with at least one group of varied reward."""
        return Batch.of(self.cfg, records).problems_with_signal()

    def _rollout_round(self, step: int, round_: int, exclude: set[str]) -> list[EpisodeRecord]:
        cfg = self.cfg
        rng = self.seeds.problems(step, round_)
        pool = [t.id for t in self.train_tasks if t.id not in exclude] or [
            t.id for t in self.train_tasks
        ]
        picks = rng.choice(
            len(pool),
            size=cfg.problems_per_step,
            replace=len(pool) < cfg.problems_per_step,
        )
        task_ids = [pool[int(i)] for i in picks]
        opts, seeds, groups = [], [], []
        ks = distributed.mine(len(task_ids), self.dist)  # all of them in a single process
        task_ids = [task_ids[k] for k in ks]
        for k, tid in zip(ks, task_ids, strict=True):
            for g in range(cfg.group_size):
                opts.append({"task_id": tid})
                seeds.append(self.seeds.episode(step, round_, k, g))
                groups.append(tid)
        gen = self.seeds.sampler(step, round_, self.dist.rank, self.device)
        with self.par.gathered(self._models(reference=False)):  # FSDP: full parameters
            return self._sample(task_ids, opts, seeds, groups, gen, step)

    def _sample(self, task_ids, opts, seeds, groups, gen, step) -> list[EpisodeRecord]:
        cfg = self.cfg
        if cfg.rollout == "tree":
            return tree_rollout(
                self.envs[: len(task_ids)],
                self.router.policy_for,
                [{"task_id": t} for t in task_ids],
                cfg.group_size,
                self.seeds.tree(step),
                seeds=seeds[:: cfg.group_size],
                max_new_tokens=self.token_limits,
                temperature=self.temperatures,
                generator=gen,
            )
        return rollout(
            self.envs[: len(opts)],
            self.router.policy_for,
            opts,
            seeds,
            groups,
            self.token_limits,
            self.temperatures,
            gen,
        )

    def _check_weights(self) -> None:
        """Non-finite weights after an update end the run before they sample or are saved."""
        for name in self.router.names:
            for p in self.learner.params(name):
                if not torch.isfinite(p).all():
                    raise TrainingDiverged(
                        f"policy {name!r} has non-finite weights after the update at step "
                        f"{self.step}"
                    )

    # ------------------------------------------------------------------ the loop
    def _eval_due(self) -> bool:
        cfg = self.cfg
        return cfg.eval_every > 0 and (self.step % cfg.eval_every == 0 or self.step == cfg.steps)

    def _watch_signal(self, m: dict) -> None:
        """Count steps whose GRPO groups all have zero reward variance (nothing to learn from:
        every gradient is 0); after ``NO_SIGNAL_STEPS`` in a row, say so loudly, once."""
        a = m.get("adv") or {}
        dead = (
            a.get("groups", 0) > 0 and a["zero_std_groups"] + a["singleton_groups"] >= a["groups"]
        )
        self.no_signal_steps += dead
        self._streak = self._streak + 1 if dead else 0
        if self._streak == NO_SIGNAL_STEPS:
            msg = (
                f"no learning signal: every GRPO group of steps {m['step'] - NO_SIGNAL_STEPS + 1}"
                f"..{m['step']} had the same reward for all its members (all gradients are 0); "
                "the policy may never solve these problems, or always solve them"
            )
            self.warnings.append(msg)
            if self.dist.main:
                print(f"\nflowzoo: WARNING: {msg}", file=self.console)

    def _watch_truncation(self, m: dict) -> None:
        """A role whose turns are cut at their token budget more than ``TRUNCATION_WARN`` of
        the time (over the last 5 steps) is not playing the format it was trained on: warn
        loudly, once per role, naming the flag that fixes it."""
        for role, row in m.get("roles", {}).items():
            hist = self._trunc[role]
            hist.append(float(row.get("truncated_frac", 0.0)))
            del hist[:-5]
            rate = sum(hist) / len(hist)
            if rate > TRUNCATION_WARN and role not in self._trunc_warned:
                self._trunc_warned.add(role)
                msg = (
                    f"truncation: {rate:.0%} of role {role!r}'s recent turns were cut at "
                    f"{self.token_limits[role]} tokens (above {TRUNCATION_WARN:.0%}); raise "
                    f'it with --role-settings \'{{"{role}": {{"max_new_tokens": N}}}}\''
                )
                self.warnings.append(msg)
                if self.dist.main:
                    print(f"\nflowzoo: WARNING: {msg}", file=self.console)

    def _watch_prompt_cuts(self, row: dict) -> None:
        """Prompts cut to fit the model's context (counted in every metrics line): said
        loudly, once per role, and kept among the summary's warnings."""
        for msg in runlog.cut_warnings(row, self._cut_warned, self.token_limits):
            self.warnings.append(msg)
            if self.dist.main:
                print(f"\nflowzoo: WARNING: {msg}", file=self.console)

    def _finish_step(self, m: dict, log: runlog.RunLog) -> None:
        """Evaluate (when due), write the step's line, checkpoint (when due)."""
        cfg = self.cfg
        self._watch_signal(m)
        self._watch_truncation(m)
        if self._eval_due() and "eval" not in m:
            m["eval"] = self.evaluate()
            self.eval_curve.append((self.step, m["eval"]["accuracy"]))
        self._watch_prompt_cuts(m)
        self.watch.observe(m)  # the early warning, recorded on the line
        log.append(m)
        self._phase = "between"
        if self.watch.respond(log):  # stopped or rolled back: no periodic save after it
            return
        if self.step == cfg.steps or (cfg.save_every > 0 and self.step % cfg.save_every == 0):
            self.save_checkpoint()  # always at the end: a finished run is resumable too

    def _save_on_interrupt(self, m: dict | None) -> None:
        """Ctrl-C: save what the run can continue from exactly. Before a step's update the
        weights are untouched (save at this step); after it, save with the step's metrics
        line pending (the resumed run evaluates the same weights and writes it); during the
        update the weights are half-changed, so the last periodic checkpoint stands."""
        where = {"rollout": "before", "log": "after", "between": "between"}.get(self._phase)
        if self.cfg.fsdp or where is None:
            kept = "the last periodic checkpoint"
        else:
            self.save_checkpoint(pending=m if where == "after" and m is not None else None)
            kept = f"step {self.step}"
        if self.progress:
            print(
                f"\nflowzoo: interrupted; {self.out} continues from {kept} when you run the "
                "same command again (resume is on by default)",
                file=self.console,
            )
