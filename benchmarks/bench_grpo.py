"""GRPO step time: flowzoo's trainer vs TRL's ``GRPOTrainer`` (CPU, no vLLM) on the same tiny
model, the same single-turn math prompts and verifier, equal batch (problems x generations)
and completion length; then how each scales when the batch grows 4x.

A step is generation + reward + one optimizer update in both; flowzoo's also measures the
per-role gradient (one role here, so no extra backward pass).
"""

from __future__ import annotations

import contextlib
import io
import os
import statistics
import tempfile
import time

from benchmarks.common import Row

GEN = 4
MAX_NEW = 32


def _ours(model: str, problems: int, steps: int) -> float:
    from flowzoo.agents.train.trainer import TrainConfig, Trainer

    cfg = TrainConfig(
        env="single-math",
        model=model,
        problems_per_step=problems,
        group_size=GEN,
        max_new_tokens=MAX_NEW,
        filter_groups=False,  # every turn trains (the protocol options are tested apart)
        mask_truncated=False,
        temperature=1.0,
        lr=1e-5,
        eval_every=0,
        save_every=0,
        steps=steps,
        out_dir=tempfile.mkdtemp(prefix="fz-bench-grpo-"),
    )
    tr = Trainer(cfg, progress=False)
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        tr.train_step()
        times.append(time.perf_counter() - t)
    return statistics.median(times[1:])


def _trl(model: str, problems: int, steps: int) -> float | None:
    try:
        os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
        from datasets import Dataset
        from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
        from trl import GRPOConfig, GRPOTrainer
    except ImportError:
        return None
    import flowzoo

    env = flowzoo.make_env("single-math")
    tasks = {t.id: t for t in list(env.tasks)[: problems * steps]}
    rows = []
    for task in tasks.values():
        env.reset(options={"task_id": task.id})
        rows.append({"prompt": env.observe("solver")["prompt"], "task_id": task.id})

    def reward(completions, task_id, **kw):
        """The env's own verifier (the family's score), as flowzoo's trainer uses it."""
        return [
            env.family.score(tasks[t], c).score for c, t in zip(completions, task_id, strict=True)
        ]

    times: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            self.t = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            times.append(time.perf_counter() - self.t)

    tok = AutoTokenizer.from_pretrained(model)
    tok.padding_side = "left"
    cfg = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="fz-bench-trl-"),
        per_device_train_batch_size=problems * GEN,
        num_generations=GEN,
        max_completion_length=MAX_NEW,
        max_steps=steps,
        learning_rate=1e-5,
        temperature=1.0,
        report_to="none",
        use_cpu=True,
        logging_steps=10_000,
        save_strategy="no",
        shuffle_dataset=False,
        seed=0,
    )
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(model),
        reward_funcs=reward,
        args=cfg,
        train_dataset=Dataset.from_list(rows),
        processing_class=tok,
        callbacks=[Clock()],
    )
    trainer.train()
    return statistics.median(times[1:])


def run(quick: bool = False) -> list[Row]:
    from flowzoo.tiny.build import ensure_tiny

    model = str(ensure_tiny("tiny-s", progress=False))
    steps = 4 if quick else 6
    sizes = (2, 8) if quick else (2, 8, 32)
    rows, times = [], {}
    for problems in sizes:
        ours = _ours(model, problems, steps)
        with contextlib.redirect_stdout(io.StringIO()):  # TRL prints its metrics
            theirs = _trl(model, problems, steps)
        if theirs is None:
            return []
        times[problems] = (ours, theirs)
        rows.append(
            Row(
                "grpo",
                f"GRPO step s, {problems} problems x {GEN} gens x {MAX_NEW} tokens",
                ours,
                theirs,
                "TRL GRPOTrainer, same model/batch",
                "s/step",
                target=1.0,
                lower_is_better=True,
            )
        )
    lo, hi = sizes[0], sizes[-1]
    rows.append(
        Row(
            "grpo",
            f"step-time growth, {lo} -> {hi} problems (ours / TRL's)",
            times[hi][0] / times[lo][0],
            times[hi][1] / times[lo][1],
            "TRL's growth",
            "x",
            target=1.0,
            lower_is_better=True,
            note="target: growth no worse than TRL's (a lower fixed cost makes growth look "
            "steeper; see the s/step rows)",
        )
    )
    return rows
