"""TrainConfig: every hyperparameter of a training run, with help and domain on every field
(torch-free).

Why torch-free: the CLI builds its flags (help, defaults, choices, sections) from these fields,
and the report reads which keys shape a run; neither should need torch. The CLI and TOML/YAML
files map onto the fields one to one (flat keys: the sections only group the help); a preset
fills only the fields the user did not give. Each field declares its domain beside its help
(:func:`flowzoo.config.fields.setting`); :meth:`TrainConfig.validate` checks them all in one
place, then the few rules that tie fields together.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import os
from dataclasses import dataclass
from typing import Any

from flowzoo.analysis.warning import RESPONSES
from flowzoo.config.checks import check_estimator, check_policy, fold_role_maps
from flowzoo.config.fields import Domain, check_fields, setting
from flowzoo.config.files import read_config_file
from flowzoo.config.presets import apply_preset
from flowzoo.config.sharing import Sharing
from flowzoo.domain import native
from flowzoo.envs.registry import (  # MAX_TASKS: env's most
    MAX_TASKS,
    check_options,
    list_envs,
)

#: the experiment trackers ``report_to`` may name (:mod:`flowzoo.agents.runs.trackers` opens them)
TRACKERS = ("tensorboard", "wandb", "mlflow", "trackio")
#: one file each in flowzoo/agents/train/algorithms/ (a "-" in a name is "_" in its file's)
ALGOS = ("grpo", "ppo", "rloo", "role-baseline", "dr-mas")
ENDPOINT_ON_ERROR = ("raise", "empty")
ROLE_WEIGHTING = ("tokens", "per-agent", "equal-per-role")
GROUP_BY = ("task", "task_role", "task_role_turn", "task_agent_turn")
LR_SCHEDULES = ("constant", "cosine")
ADV_NORMS = ("group", "global", "per-role", "none")
#: what PPO's critic reads: the acting agent's own prompt, or the episode's whole transcript
CRITIC_INPUTS = ("local", "central")
LOSS_AGGS = ("token-mean", "seq-mean-token-mean", "sequence-mean")
#: what the early-warning monitor does on a warning (one list, the monitor's own)
MONITOR_RESPONSES = RESPONSES
#: config keys that do not shape a run's trajectory (its length, place and bookkeeping): a
#: resumed run may change them, and the report never separates cells by them
NOT_SHAPING = (
    "steps",
    "out_dir",
    "resume",
    "eval_every",
    "save_every",
    "device",
    "threads",
    "policy_devices",
    "grad_checkpointing",
    "fast_forward",
    "vllm_memory",
    "report_to",
    "endpoint_concurrency",
    "endpoint_timeout_s",
    "endpoint_retries",
)

#: the longest turn a role may be given (Qwen3's context is 40,960 tokens)
MAX_NEW_TOKENS = 32_768
#: episodes one step may sample (problems_per_step x group_size)
MAX_EPISODES_PER_STEP = 65_536
#: a size or count fails at its bound, not as an allocation deep inside a rollout
MAX_STEPS = 10**7
MAX_BATCH = 65_536
#: a role's own token budget (0, "the workflow's default", is the run-wide field's alone)
ROLE_TOKENS = Domain(int, lo=1, hi=MAX_NEW_TOKENS)
#: a coefficient, clip or temperature: a finite number >= 0
NON_NEGATIVE = Domain(float, lo=0)
#: what ``role_settings`` may set per role, and each one's domain: the run-wide field's
#: (filled in below the class, from the fields), except ``max_new_tokens`` (>= 1) and ``stop``
ROLE_SETTINGS: dict[str, Domain] = {}

#: the policy text -> its typed value, parsed once per distinct text
_parsed_sharing = functools.lru_cache(maxsize=64)(Sharing.parse)


def eval_temperature(eval_temp: float, temperature: float) -> float:
    """The temperature an evaluation samples at: ``eval_temp``, where -1 means the training
    ``temperature`` (also read from a run record's plain config by the report)."""
    return temperature if eval_temp < 0 else eval_temp


_f = setting


@dataclass
class TrainConfig:
    """One training run. Defaults suit a CPU run on a tiny model; ``preset="study"`` applies
    the study's settings (G=8, T=0.7, lr 2e-5 with 15 warmup steps and cosine decay, no KL,
    seq-mean-token-mean, clip 0.2/0.28, grad clip 1.0, groups by task x role, verl-style
    mini-batches of 4 problems, zero-variance groups and truncated turns dropped, LoRA
    r64/alpha32) to every field not given explicitly. Fields come in the sections of
    :data:`~flowzoo.config.sections.SECTIONS` (the order of ``flowzoo train --help``)."""

    # ------------------------------------------------------------------------------ run
    preset: str = _f("", "a preset filling every field not given (study)", ("", "study"))
    steps: int = _f(
        50, "rollout + update steps to run (a resumed run continues to this)", lo=0, hi=MAX_STEPS
    )
    seed: int = _f(
        0,
        "seed of everything random (problems, sampling, minibatch order)",
        lo=0,
        hi=2**32 - 1,  # numpy and torch take seeds below 2**32
    )
    # ---------------------------------------------------------------------------- model
    model: str = _f(
        "tiny-s",
        "tiny-s | tiny-m | tiny-l | tiny-s-code (a scale's code testbed, built on first use; "
        "tiny-s-code12: its recipe 12; tiny-s-conflict: the role-conflict testbed, with "
        "env_options conflict=true; any of these with -stageN: another behaviour stage of "
        "its recipe) | a local Hugging Face checkpoint path",
    )
    param: str = _f("full", "train all weights, or a LoRA adapter per policy", ("full", "lora"))
    lora_r: int = _f(64, "LoRA rank", lo=1, hi=4096)
    lora_alpha: int = _f(32, "LoRA alpha", lo=0)
    precision: str = _f("fp32", "bf16: autocast forward passes (fp32 weights)", ("fp32", "bf16"))
    grad_checkpointing: bool = _f(False, "recompute activations in backward (less memory)")
    fast_forward: bool = _f(
        True,
        "sample and score Qwen3 models with flowzoo's own forward (shared prompts computed "
        "once, static KV cache); off, or an unsupported model: transformers' forward",
    )
    device: str = _f("cpu", "cpu | cuda | cuda:N")
    policy_devices: dict[str, str] = _f(
        {},
        'policy -> device (JSON), e.g. {"solver": "cuda:0", "aggregator": "cuda:1"}',
        each=Domain(str, what="a device string"),
    )
    fsdp: bool = _f(False, "under torchrun: shard weights, gradients and AdamW state (FSDP2)")
    threads: int = _f(
        0,
        "CPU threads torch may use (0: OMP_NUM_THREADS if set, else the cores this process "
        "may use: its CPU affinity capped by the cgroup CPU quota)",
        lo=0,
        hi=4096,
    )
    # ---------------------------------------------------------------------------- roles
    policy: str = _f("shared", "shared | isolated | role=name,role=name (a custom role map)")
    role_settings: dict[str, Any] = _f(
        {},
        "role -> its own lr, temperature, max_new_tokens, kl_coef, clip_low, clip_high, stop "
        "(stop strings: served models only) (JSON), "
        'e.g. {"evaluator": {"lr": 1e-5, "temperature": 0.3}}; a shared policy steps at the '
        "lr its roles share (else lr) and scales each role's gradient by role lr / that lr",
        each=Domain(dict, keys=ROLE_SETTINGS, what="a table of settings"),
    )
    role_models: dict[str, str] = _f(
        {},
        "role -> who plays it (JSON): a local checkpoint or tiny scale (its own policy, "
        "trained unless frozen), openai:<url>#<model> or openai-completions:<url>#<model> (a "
        "served model, frozen), scripted[:<error rate>] (the workflow's expert, frozen)",
        each=Domain(str, nonempty=True, what="a model spec string"),
    )
    frozen_roles: str = _f(
        "", "comma-separated roles played by a fixed model (their role_models entry, else the base)"
    )
    endpoint_concurrency: int = _f(8, "served models: requests in flight at once", lo=1)
    endpoint_timeout_s: float = _f(
        60.0,
        "served models: seconds before a request is abandoned",
        lo=0,
        lo_open=True,
        finite=False,  # inf: never abandoned
    )
    endpoint_retries: int = _f(
        3, "served models: retries on 429/5xx/connection errors (backoff)", lo=0
    )
    endpoint_on_error: str = _f(
        "raise",
        "served models: a request failing for good stops the run (raise) or becomes an empty, "
        "flagged turn (empty)",
        ENDPOINT_ON_ERROR,
    )
    # -------------------------------------------------------------------------- rollout
    env: str = _f(
        "voting-math", "environment id (`flowzoo envs` lists them)", choices_from=list_envs
    )
    env_options: dict[str, Any] = _f(
        {},
        "options passed to make_env (JSON), e.g. reward_mode; checked against the env's "
        "declared options (split, n_tasks and overlong_penalty are set by their own fields)",
    )
    train_tasks: int = _f(
        0,
        "size of the training task pool (0: the task family's default, math 500, code 200)",
        lo=0,
        hi=MAX_TASKS,
    )
    problems_per_step: int = _f(16, "distinct problems per step", lo=1, hi=MAX_BATCH)
    group_size: int = _f(8, "episodes per problem (GRPO's G)", lo=1, hi=4096)
    rollout: str = _f(
        "independent",
        "independent: G whole episodes per problem; tree: G samples per turn from one state",
        ("independent", "tree"),
    )
    temperature: float = _f(0.7, "sampling temperature of rollouts", lo=0)
    max_new_tokens: int = _f(
        0,
        "most tokens a turn may generate (0: each role's default from its workflow)",
        lo=0,
        hi=MAX_NEW_TOKENS,
    )
    mask_truncated: bool = _f(True, "truncated turns (cut at max_new_tokens) add no loss")
    overlong_penalty: float = _f(
        0.0,
        "subtracted by the training env from the reward of a turn cut at its token budget",
        lo=0,
    )
    resample_rounds: int = _f(
        0,
        "DAPO dynamic sampling: up to this many extra rollouts of fresh problems while fewer "
        "than problems_per_step problems have an informative group",
        lo=0,
        hi=1000,
    )
    generation_backend: str = _f(
        "transformers",
        "rollout engine (vllm: weights, or LoRA adapters, synced after every update)",
        ("transformers", "vllm"),
    )
    vllm_memory: float = _f(
        0.2, "vLLM's gpu_memory_utilization (CPU build: RAM fraction)", lo=0, hi=1, lo_open=True
    )
    vllm_max_model_len: int = _f(
        0,
        "vLLM engine's context in tokens (0: the run's budget, the env's max_prompt_chars plus "
        "the largest turn budget, capped at the model's own context)",
        lo=0,
        hi=MAX_STEPS,
    )
    # ------------------------------------------------------------------------ algorithm
    algo: str = _f(
        "grpo",
        "policy-gradient algorithm (role-baseline: reward minus a running mean of the turn's "
        "role's rewards, over a running std with std_norm; dr-mas: Dr. MAS, GRPO with each "
        "group split by role, so every agent's own mean and std on each problem; both for "
        "multi-role envs only)",
        ALGOS,
    )
    loss_agg: str = _f("seq-mean-token-mean", "how token losses become one loss", LOSS_AGGS)
    std_norm: bool = _f(
        True,
        "divide centred rewards by their std (GRPO: adv_norm's; dr-mas: the agent's own; "
        "role-baseline: the role's running std)",
    )
    adv_norm: str = _f(
        "group",
        "GRPO: where advantages are normalised (group: the group's mean and std; global / "
        "per-role: the group's mean over the whole batch's / the role's std across problems, "
        "not Dr. MAS's per-agent form: that is algo=dr-mas)",
        ADV_NORMS,
    )
    group_by: str = _f(
        "task_role",
        "what turns must share to form a GRPO group (task_role: the study's, pooling a role's "
        "turns and same-role agents)",
        GROUP_BY,
    )
    filter_groups: bool = _f(
        True, "drop zero-variance and one-member groups from the update (DAPO); counts logged"
    )
    role_weighting: str = _f(
        "tokens", "how much each role's turns weigh in the loss", ROLE_WEIGHTING
    )
    clip_low: float = _f(0.2, "PPO-style ratio clip below 1", lo=0)
    clip_high: float = _f(0.28, "ratio clip above 1 (clip-higher)", lo=0)
    kl_coef: float = _f(0.0, "weight of the k3 KL to the frozen base model (0: no reference)", lo=0)
    damper_lambda: float = _f(
        0.0, "strength of the gradient-direction coherence damper (0: off)", lo=0
    )
    damper_decay: float = _f(0.9, "EMA decay of the damper's gradient direction", lo=0, hi=1)
    gamma: float = _f(1.0, "PPO discount over an agent's turns", lo=0, hi=1)
    gae_lambda: float = _f(0.95, "PPO GAE lambda", lo=0, hi=1)
    vf_coef: float = _f(0.5, "PPO value-loss weight", lo=0)
    value_clip: float = _f(0.2, "PPO value clip", lo=0)
    critic_input: str = _f(
        "local",
        "PPO: what the critic reads (local: the acting agent's prompt; central: MAPPO's "
        "centralised critic, every agent's turns of the episode before this one, then it)",
        CRITIC_INPUTS,
    )
    baseline_decay: float = _f(
        0.9,
        "role-baseline: EMA decay of each role's running reward mean and second moment (the "
        "past's weight per step; 0: the last step's mean); other algorithms ignore it",
        lo=0,
        hi=1,
    )
    # --------------------------------------------------------------------- optimisation
    lr: float = _f(
        5e-5, "AdamW learning rate (the peak, under a schedule)", lo=0, hi=1, lo_open=True
    )
    lr_schedule: str = _f("cosine", "learning-rate schedule after warmup", LR_SCHEDULES)
    lr_decay_steps: int = _f(
        0,
        "cosine: the step the lr reaches min_lr_ratio (the schedule's horizon; it shapes the "
        "run). 0: steps, fixed when the config is made, so extending a finished run keeps "
        "its schedule only when given explicitly",
        lo=0,
        hi=MAX_STEPS,
    )
    warmup_steps: int = _f(5, "rollout steps of linear warmup from 0 to lr", lo=0, hi=MAX_STEPS)
    min_lr_ratio: float = _f(0.0, "cosine: the final lr as a fraction of lr", lo=0, hi=1)
    weight_decay: float = _f(0.0, "AdamW weight decay", lo=0)
    grad_clip: float = _f(1.0, "global gradient-norm clip (0: off)", lo=0)
    minibatches: int = _f(
        1, "optimizer steps per rollout batch (>1: later ones off-policy)", lo=1, hi=MAX_BATCH
    )
    ppo_mini_batch: int = _f(
        4,
        "problems per optimizer step, as verl's ppo_mini_batch_size: a step takes this x "
        "group_size turns, so a policy with more turns makes more steps (0: use minibatches)",
        lo=0,
        hi=MAX_BATCH,
    )
    update_matched: bool = _f(
        False,
        "the update-matched control: every policy makes as many optimizer steps per rollout "
        "step as one shared policy would on the whole batch (its kept turns over all "
        "policies / (ppo_mini_batch x group_size)), so Shared and Isolated make the same "
        "number of Adam steps per role; off: the study's protocol, where each policy's own "
        "turn count sets its steps (no effect with ppo_mini_batch 0)",
    )
    ppo_epochs: int = _f(1, "passes over the rollout batch", lo=1, hi=1000)
    micro_batch: int = _f(
        16, "turns per forward/backward pass (halved on out-of-memory)", lo=1, hi=MAX_BATCH
    )
    # ----------------------------------------------------------------------- evaluation
    eval_every: int = _f(25, "steps between held-out evaluations (0: none)", lo=0, hi=MAX_STEPS)
    eval_episodes: int = _f(
        0, "held-out problems per evaluation (0: the whole test split)", lo=0, hi=1_000_000
    )
    eval_dataset: str = _f(
        "",
        "a separate held-out dataset spec (e.g. jsonl:test.jsonl), read whole; empty: the "
        "training dataset's test side (a single file is split by what is solved, one in five "
        "held out). Its overlap with the training problems is measured and recorded",
        what="a dataset spec string",
    )
    eval_temperature: float = _f(
        -1.0,
        "sampling temperature of evaluation (-1: the training temperature; 0: greedy)",
        lo=0,
        also=(-1,),
    )
    eval_samples: int = _f(4, "samples per held-out problem (k); 1 when greedy", lo=1, hi=4096)
    eval_greedy: bool = _f(True, "also report greedy accuracy (one sample) beside the sampled")
    eval_ood_episodes: int = _f(
        100,
        "out-of-distribution problems per evaluation (structure never trained: the ood split), "
        "sampled like the held-out ones; 0: none; skipped for datasets without an ood split",
        lo=0,
        hi=1_000_000,
    )
    cliff_margin: float = _f(
        0.0,
        "a floor under the eval's 95% CI when reading rises and falls (0: the CI alone)",
        lo=0,
    )
    cliff_window: int = _f(3, "evaluations averaged for the final accuracy", lo=1, hi=10_000)
    # --------------------------------------- the cliff early warning (flowzoo.analysis.warning)
    monitor_response: str = _f(
        "warn",
        "what a warning of the early-warning monitor does: warn (print it on the progress "
        "line and record it), stop (also end the run cleanly, recorded as stopped early), "
        "rollback (also restore the last checkpoint saved before it and continue at "
        "monitor_rollback_lr x the lr)",
        MONITOR_RESPONSES,
    )
    monitor_update_size: float = _f(
        0.017,
        "warn when the largest per-role mean |ratio - 1| of a step's update, averaged over "
        "monitor_update_window steps, exceeds this (0: rule off; tuned on committed runs, "
        "baselines/results/warning-eval/)",
        lo=0,
        hi=100,
    )
    monitor_update_window: int = _f(1, "steps averaged for monitor_update_size", lo=1, hi=10_000)
    monitor_reward_drop: float = _f(
        0.5,
        "warn when the training reward's mean over monitor_reward_window steps falls this far "
        "below its highest earlier mean (0: rule off)",
        lo=0,
        hi=1_000,
    )
    monitor_reward_window: int = _f(8, "steps averaged for monitor_reward_drop", lo=1, hi=10_000)
    monitor_rollback_lr: float = _f(
        0.5,
        "rollback: the factor every policy's lr is multiplied by after each rollback",
        lo=0,
        lo_open=True,
        hi=0.99,
    )
    # ------------------------------------------------------------ logging and checkpoints
    out_dir: str = _f(
        "", "run directory (empty: runs/<env>-<policy>-<param>-<algo>-<model>-s<seed>, see run_dir)"
    )
    resume: bool = _f(True, "continue from out_dir's checkpoint (false: start the run over)")
    save_every: int = _f(5, "steps between checkpoints (0: only at the end)", lo=0, hi=MAX_STEPS)
    report_to: str = _f(
        "",
        "comma-separated experiment trackers beside metrics.jsonl: tensorboard, wandb "
        "(WANDB_MODE=offline works without network), mlflow (MLFLOW_TRACKING_URI, default "
        "out_dir/mlruns), trackio",
    )
    # ------------------------------------------------------------------------ deprecated
    kl_per_role: dict[str, float] = _f(
        {},
        'deprecated, use role_settings (role -> {"kl_coef": ...}); folded into it when the '
        "config is made: role -> its own KL coefficient (the per-role KL anchor; JSON)",
        each=NON_NEGATIVE,
    )
    max_new_tokens_per_role: dict[str, int] = _f(
        {},
        'deprecated, use role_settings (role -> {"max_new_tokens": ...}); folded into it '
        'when the config is made: role -> its own max_new_tokens (JSON), e.g. {"orchestrator": 160}',
        each=ROLE_TOKENS,
    )

    def __new__(cls, *args: Any, **kwargs: Any) -> TrainConfig:
        """Note the fields a caller names (positionally or by keyword) for the preset: an
        explicit value wins even when it equals the field's default. (No args: a default
        config, or a copy or unpickling, which sets no fields through ``__init__``.)"""
        self = super().__new__(cls)
        if args or kwargs:
            names = [f.name for f in dataclasses.fields(cls)]
            self.__dict__["_explicit"] = set(names[: len(args)]) | set(kwargs)
        return self

    def __post_init__(self) -> None:
        explicit = self.__dict__.pop("_explicit", None)
        if self.preset:
            apply_preset(self, self.preset, explicit=explicit)
        self.validate()

    def validate(self) -> None:
        """Every value checked against its field's declared domain (one function reads them
        all), then the rules that tie fields together, so nothing fails later deep inside a
        rollout (ZeroDivisionError, MemoryError, TypeError). Errors name the field, the bad
        value and the valid ones."""
        for f in dataclasses.fields(self):  # a NumPy scalar is taken as its Python value
            setattr(self, f.name, native(getattr(self, f.name)))
        check_fields(self)
        fold_role_maps(self)
        if self.problems_per_step * self.group_size > MAX_EPISODES_PER_STEP:
            raise ValueError(
                f"problems_per_step x group_size must be <= {MAX_EPISODES_PER_STEP:,} episodes "
                f"per step, got {self.problems_per_step} x {self.group_size}"
            )
        if self.resample_rounds > 0 and not self.filter_groups:
            raise ValueError("resample_rounds (dynamic sampling) needs filter_groups=True")
        owned = {
            "overlong_penalty": "set overlong_penalty as its own field",
            "split": "the trainer sets split (train for rollouts, test for evaluation; a "
            "separate held-out set: eval_dataset)",
            "n_tasks": "set the training pool's size with train_tasks",
        }
        for k, why in owned.items():
            if k in self.env_options:
                raise ValueError(f"env_options may not set {k!r}: {why}")
        # checked as make_env would check them (names, types, ranges; "false" is not a bool)
        check_options(self.env, self.env_options, "env_options")
        if self.env_options.get("tools") and self.rollout == "tree":
            raise ValueError(
                f"env_options tools={self.env_options['tools']!r} with rollout='tree': tree "
                "rollouts through tool turns are not built (a sibling would branch inside a "
                "turn of several samples); use rollout='independent' (docs/tools.md)"
            )
        check_estimator(self)
        check_policy(self)
        if self.lr_decay_steps == 0 and self.lr_schedule == "cosine":
            self.lr_decay_steps = self.steps  # the horizon recorded, so it cannot drift
        if self.lr_schedule == "cosine" and self.lr_decay_steps < 1:
            raise ValueError(f"lr_decay_steps must be >= 1, got {self.lr_decay_steps}")
        bad = sorted(set(self.trackers) - set(TRACKERS))
        if bad:
            raise ValueError(f"unknown trackers {bad} in report_to; valid: {', '.join(TRACKERS)}")

    @property
    def frozen(self) -> list[str]:
        """``frozen_roles`` as a list."""
        return [r.strip() for r in self.frozen_roles.split(",") if r.strip()]

    @property
    def trackers(self) -> list[str]:
        """``report_to`` as a list."""
        return list(dict.fromkeys(t.strip() for t in self.report_to.split(",") if t.strip()))

    def for_role(self, role: str, key: str) -> Any:
        """A setting as ``role`` sees it: ``role_settings[role][key]``, else the run-wide
        value (the deprecated per-role maps were folded into ``role_settings``)."""
        d = self.role_settings.get(role, {})
        return d[key] if key in d else getattr(self, key)

    @property
    def eval_temp(self) -> float:
        """The temperature evaluation samples at (-1 resolved to the training temperature)."""
        return eval_temperature(self.eval_temperature, self.temperature)

    def lr_at(self, step: int) -> float:
        """The learning rate of rollout step ``step``: linear warmup over ``warmup_steps``,
        then constant or cosine down to ``min_lr_ratio * lr`` at ``lr_decay_steps`` (its own
        field, not ``steps``: a run's length does not shape it, its schedule does). A
        function of the step alone, so a resumed run continues on the same schedule."""
        if self.warmup_steps and step < self.warmup_steps:
            return self.lr * (step + 1) / self.warmup_steps
        if self.lr_schedule == "constant":
            return self.lr
        span = max(1, (self.lr_decay_steps or self.steps) - self.warmup_steps)
        frac = min(1.0, (step - self.warmup_steps) / span)
        floor = self.min_lr_ratio
        return self.lr * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * frac)))

    @property
    def sharing(self) -> Sharing:
        """``policy`` as its typed value (:class:`~flowzoo.config.sharing.Sharing`), parsed
        once per text: every reader of the choice asks this, none parses the string."""
        return _parsed_sharing(self.policy)

    @property
    def run_dir(self) -> str:
        """Where the run writes: ``out_dir``, or a name from what tells runs apart. One rule
        for the CLI, the Python API and sweeps, so a run is found where it was started."""
        if self.out_dir:
            return self.out_dir
        model = self.model.replace("/", "_").replace(os.sep, "_").strip("._") or "model"
        return f"runs/{self.env}-{self.policy}-{self.param}-{self.algo}-{model}-s{self.seed}"

    @classmethod
    def from_preset(cls, preset: str, **values: Any) -> TrainConfig:
        """A config from preset ``preset`` where every value given here wins, even one equal
        to the field's default (``TrainConfig(preset=..., param="full")`` does the same)."""
        return cls.from_dict({**values, "preset": preset}, source="from_preset")

    def identity(self) -> str:
        """Hash of everything that shapes the run's trajectory (not its length or place)."""
        d = dataclasses.asdict(self)
        for k in NOT_SHAPING:
            d.pop(k, None)
        if self.monitor_response == "warn":  # a warning changes nothing the run does
            for k in [k for k in d if k.startswith("monitor_")]:
                d.pop(k)
        # fields added after runs were recorded leave the identity at their defaults, so a
        # run directory written before them still resumes (it ran with those defaults)
        for k, default in LATER_FIELDS.items():
            if d.get(k) == default:
                d.pop(k, None)
        return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "config") -> TrainConfig:
        """A config from explicit values (a file, flags): unknown keys are an error, and a
        preset never overrides a value given here."""
        valid = {f.name for f in dataclasses.fields(cls)}
        bad = sorted(set(data) - valid)
        if bad:
            raise ValueError(
                f"unknown config keys {bad} in {source}; valid: {', '.join(sorted(valid))}"
            )
        cfg = cls.__new__(cls)
        cfg.__dict__["_explicit"] = set(data)  # read by __post_init__ for the preset
        defaults = cls()
        for f in dataclasses.fields(cls):
            setattr(cfg, f.name, data.get(f.name, getattr(defaults, f.name)))
        cfg.__post_init__()
        return cfg


#: fields added after committed runs were recorded, with the default every earlier run ran
#: with: left out of ``TrainConfig.identity`` at that default
LATER_FIELDS: dict[str, Any] = {
    "update_matched": False,
    "critic_input": "local",
    "baseline_decay": 0.9,
}


_DOMAINS = {f.name: f.metadata["domain"] for f in dataclasses.fields(TrainConfig)}
#: every setting's declared domain, by field name (the CLI's and the report's checks read it)
FIELD_DOMAINS: dict[str, Domain] = _DOMAINS
ROLE_SETTINGS.update(
    {k: _DOMAINS[k] for k in ("lr", "temperature")},
    max_new_tokens=ROLE_TOKENS,
    **{k: _DOMAINS[k] for k in ("kl_coef", "clip_low", "clip_high")},
    stop=Domain(list, each=Domain(str, nonempty=True), what="a list of strings"),
)


def load_config_file(path: str | os.PathLike, **overrides: Any) -> TrainConfig:
    """A TrainConfig from a TOML or YAML file (keys are the dataclass fields); ``overrides``
    (e.g. command-line flags) win over the file, and both over a preset."""
    return TrainConfig.from_dict({**read_config_file(path), **overrides}, source=str(path))
