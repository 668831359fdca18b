"""TrainConfig: every hyperparameter of a training run, with help on every field (torch-free).

Why torch-free: the CLI builds its flags (help, defaults, choices) from these fields, and the
report reads which keys shape a run; neither should need torch. The CLI and TOML/YAML files
map onto the fields one to one; a preset fills only the fields the user did not give.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from typing import Any

from flowzoo.config_files import read_config_file
from flowzoo.envs.registry import MAX_TASKS, check_options, list_envs  # MAX_TASKS: env's most

#: the experiment trackers ``report_to`` may name (:mod:`flowzoo.agents.train.trackers` opens them)
TRACKERS = ("tensorboard", "wandb", "mlflow", "trackio")
ALGOS = ("grpo", "ppo", "rloo")
#: what ``role_settings`` may set per role, and the type of each
ROLE_KEYS = {
    "lr": float,
    "temperature": float,
    "max_new_tokens": int,
    "kl_coef": float,
    "clip_low": float,
    "clip_high": float,
    "stop": list,
}
ENDPOINT_ON_ERROR = ("raise", "empty")
ROLE_WEIGHTING = ("tokens", "per-agent", "equal-per-role")
GROUP_BY = ("task", "task_role", "task_role_turn", "task_agent_turn")
LR_SCHEDULES = ("constant", "cosine")
ADV_NORMS = ("group", "global", "per-role", "none")
LOSS_AGGS = ("token-mean", "seq-mean-token-mean", "sequence-mean")
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
#: upper bounds of sizes, counts and the seed (numpy and torch take seeds below 2**32)
UPPER_BOUNDS = {
    "seed": 2**32 - 1,
    "vllm_max_model_len": 10**7,
    "steps": 10**7,
    "problems_per_step": 65_536,
    "group_size": 4096,
    "micro_batch": 65_536,
    "minibatches": 65_536,
    "ppo_epochs": 1000,
    "ppo_mini_batch": 65_536,
    "lora_r": 4096,
    "cliff_window": 10_000,
    "eval_samples": 4096,
    "eval_every": 10**7,
    "save_every": 10**7,
    "eval_episodes": 1_000_000,
    "eval_ood_episodes": 1_000_000,
    "warmup_steps": 10**7,
    "lr_decay_steps": 10**7,
    "resample_rounds": 1000,
    "max_new_tokens": MAX_NEW_TOKENS,
    "threads": 4096,
}


def eval_temperature(eval_temp: float, temperature: float) -> float:
    """The temperature an evaluation samples at: ``eval_temp``, where -1 means the training
    ``temperature`` (also read from a run record's plain config by the report)."""
    return temperature if eval_temp < 0 else eval_temp


def _f(default: Any, help: str, choices: tuple[str, ...] | None = None) -> Any:
    meta = {"help": help, "choices": choices}
    if isinstance(default, dict):
        return field(default_factory=lambda: dict(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class TrainConfig:
    """One training run. Defaults suit a CPU run on a tiny model; ``preset="study"`` applies
    the study's settings (G=8, T=0.7, lr 2e-5 with 15 warmup steps and cosine decay, no KL,
    seq-mean-token-mean, clip 0.2/0.28, grad clip 1.0, groups by task x role, verl-style
    mini-batches of 4 problems, zero-variance groups and truncated turns dropped, LoRA
    r64/alpha32) to every field not given explicitly."""

    env: str = _f("voting-math", "environment id (`flowzoo envs` lists them)")
    env_options: dict[str, Any] = _f(
        {},
        "options passed to make_env (JSON), e.g. reward_mode; checked against the env's "
        "declared options (split, n_tasks and overlong_penalty are set by their own fields)",
    )
    model: str = _f("tiny-s", "tiny-s | tiny-m | tiny-l | a local Hugging Face checkpoint path")
    policy: str = _f("shared", "shared | isolated | role=name,role=name (a custom role map)")
    param: str = _f("full", "train all weights, or a LoRA adapter per policy", ("full", "lora"))
    lora_r: int = _f(64, "LoRA rank")
    lora_alpha: int = _f(32, "LoRA alpha")
    algo: str = _f("grpo", "policy-gradient algorithm", ALGOS)
    steps: int = _f(50, "rollout + update steps to run (a resumed run continues to this)")
    problems_per_step: int = _f(16, "distinct problems per step")
    group_size: int = _f(8, "episodes per problem (GRPO's G)")
    train_tasks: int = _f(
        0, "size of the training task pool (0: the task family's default, math 500, code 200)"
    )
    temperature: float = _f(0.7, "sampling temperature of rollouts")
    max_new_tokens: int = _f(
        0, "most tokens a turn may generate (0: each role's default from its workflow)"
    )
    max_new_tokens_per_role: dict[str, int] = _f(
        {}, 'role -> its own max_new_tokens (JSON), e.g. {"orchestrator": 160}'
    )
    mask_truncated: bool = _f(True, "truncated turns (cut at max_new_tokens) add no loss")
    overlong_penalty: float = _f(
        0.0, "subtracted by the training env from the reward of a turn cut at its token budget"
    )
    lr: float = _f(5e-5, "AdamW learning rate (the peak, under a schedule)")
    lr_schedule: str = _f("cosine", "learning-rate schedule after warmup", LR_SCHEDULES)
    lr_decay_steps: int = _f(
        0,
        "cosine: the step the lr reaches min_lr_ratio (the schedule's horizon; it shapes the "
        "run). 0: steps, fixed when the config is made, so extending a finished run keeps "
        "its schedule only when given explicitly",
    )
    warmup_steps: int = _f(5, "rollout steps of linear warmup from 0 to lr")
    min_lr_ratio: float = _f(0.0, "cosine: the final lr as a fraction of lr")
    weight_decay: float = _f(0.0, "AdamW weight decay")
    clip_low: float = _f(0.2, "PPO-style ratio clip below 1")
    clip_high: float = _f(0.28, "ratio clip above 1 (clip-higher)")
    kl_coef: float = _f(0.0, "weight of the k3 KL to the frozen base model (0: no reference)")
    kl_per_role: dict[str, float] = _f(
        {}, "role -> its own KL coefficient (the per-role KL anchor; JSON), overrides kl_coef"
    )
    role_settings: dict[str, Any] = _f(
        {},
        "role -> its own lr, temperature, max_new_tokens, kl_coef, clip_low, clip_high, stop "
        "(stop strings: served models only) (JSON), "
        'e.g. {"evaluator": {"lr": 1e-5, "temperature": 0.3}}; a shared policy steps at the '
        "lr its roles share (else lr) and scales each role's gradient by role lr / that lr",
    )
    role_models: dict[str, str] = _f(
        {},
        "role -> who plays it (JSON): a local checkpoint or tiny scale (its own policy, "
        "trained unless frozen), openai:<url>#<model> or openai-completions:<url>#<model> (a "
        "served model, frozen), scripted[:<error rate>] (the workflow's expert, frozen)",
    )
    frozen_roles: str = _f(
        "", "comma-separated roles played by a fixed model (their role_models entry, else the base)"
    )
    endpoint_concurrency: int = _f(8, "served models: requests in flight at once")
    endpoint_timeout_s: float = _f(60.0, "served models: seconds before a request is abandoned")
    endpoint_retries: int = _f(3, "served models: retries on 429/5xx/connection errors (backoff)")
    endpoint_on_error: str = _f(
        "raise",
        "served models: a request failing for good stops the run (raise) or becomes an empty, "
        "flagged turn (empty)",
        ENDPOINT_ON_ERROR,
    )
    loss_agg: str = _f("seq-mean-token-mean", "how token losses become one loss", LOSS_AGGS)
    std_norm: bool = _f(True, "divide group-centred rewards by the group's std")
    adv_norm: str = _f("group", "where advantages are normalised", ADV_NORMS)
    group_by: str = _f(
        "task_role",
        "what turns must share to form a GRPO group (task_role: the study's, pooling a role's "
        "turns and same-role agents)",
        GROUP_BY,
    )
    filter_groups: bool = _f(
        True, "drop zero-variance and one-member groups from the update (DAPO); counts logged"
    )
    resample_rounds: int = _f(
        0,
        "DAPO dynamic sampling: up to this many extra rollouts of fresh problems while fewer "
        "than problems_per_step problems have an informative group",
    )
    role_weighting: str = _f(
        "tokens", "how much each role's turns weigh in the loss", ROLE_WEIGHTING
    )
    damper_lambda: float = _f(0.0, "strength of the gradient-direction coherence damper (0: off)")
    damper_decay: float = _f(0.9, "EMA decay of the damper's gradient direction")
    grad_clip: float = _f(1.0, "global gradient-norm clip (0: off)")
    minibatches: int = _f(1, "optimizer steps per rollout batch (>1: later ones off-policy)")
    ppo_mini_batch: int = _f(
        4,
        "problems per optimizer step, as verl's ppo_mini_batch_size: a step takes this x "
        "group_size turns, so a policy with more turns makes more steps (0: use minibatches)",
    )
    ppo_epochs: int = _f(1, "passes over the rollout batch")
    micro_batch: int = _f(16, "turns per forward/backward pass (halved on out-of-memory)")
    gamma: float = _f(1.0, "PPO discount over an agent's turns")
    gae_lambda: float = _f(0.95, "PPO GAE lambda")
    vf_coef: float = _f(0.5, "PPO value-loss weight")
    value_clip: float = _f(0.2, "PPO value clip")
    rollout: str = _f(
        "independent",
        "independent: G whole episodes per problem; tree: G samples per turn from one state",
        ("independent", "tree"),
    )
    eval_every: int = _f(25, "steps between held-out evaluations (0: none)")
    eval_episodes: int = _f(0, "held-out problems per evaluation (0: the whole test split)")
    eval_dataset: str = _f(
        "",
        "a separate held-out dataset spec (e.g. jsonl:test.jsonl), read whole; empty: the "
        "training dataset's test side (a single file is split by what is solved, one in five "
        "held out). Its overlap with the training problems is measured and recorded",
    )
    eval_temperature: float = _f(
        -1.0, "sampling temperature of evaluation (-1: the training temperature; 0: greedy)"
    )
    eval_samples: int = _f(4, "samples per held-out problem (k); 1 when greedy")
    eval_greedy: bool = _f(True, "also report greedy accuracy (one sample) beside the sampled")
    eval_ood_episodes: int = _f(
        100,
        "out-of-distribution problems per evaluation (structure never trained: the ood split), "
        "sampled like the held-out ones; 0: none; skipped for datasets without an ood split",
    )
    save_every: int = _f(5, "steps between checkpoints (0: only at the end)")
    cliff_margin: float = _f(
        0.0, "a floor under the eval's 95% CI when reading rises and falls (0: the CI alone)"
    )
    cliff_window: int = _f(3, "evaluations averaged for the final accuracy")
    seed: int = _f(0, "seed of everything random (problems, sampling, minibatch order)")
    out_dir: str = _f(
        "", "run directory (empty: runs/<env>-<policy>-<param>-<algo>-<model>-s<seed>, see run_dir)"
    )
    device: str = _f("cpu", "cpu | cuda | cuda:N")
    threads: int = _f(
        0,
        "CPU threads torch may use (0: OMP_NUM_THREADS if set, else the cores this process "
        "may use: its CPU affinity capped by the cgroup CPU quota)",
    )
    policy_devices: dict[str, str] = _f(
        {}, 'policy -> device (JSON), e.g. {"solver": "cuda:0", "aggregator": "cuda:1"}'
    )
    fsdp: bool = _f(False, "under torchrun: shard weights, gradients and AdamW state (FSDP2)")
    precision: str = _f("fp32", "bf16: autocast forward passes (fp32 weights)", ("fp32", "bf16"))
    grad_checkpointing: bool = _f(False, "recompute activations in backward (less memory)")
    fast_forward: bool = _f(
        True,
        "sample and score Qwen3 models with flowzoo's own forward (shared prompts computed "
        "once, static KV cache); off, or an unsupported model: transformers' forward",
    )
    generation_backend: str = _f(
        "transformers",
        "rollout engine (vllm: weights, or LoRA adapters, synced after every update)",
        ("transformers", "vllm"),
    )
    vllm_memory: float = _f(0.2, "vLLM's gpu_memory_utilization (CPU build: RAM fraction)")
    vllm_max_model_len: int = _f(
        0,
        "vLLM engine's context in tokens (0: the run's budget, the env's max_prompt_chars plus "
        "the largest turn budget, capped at the model's own context)",
    )
    report_to: str = _f(
        "",
        "comma-separated experiment trackers beside metrics.jsonl: tensorboard, wandb "
        "(WANDB_MODE=offline works without network), mlflow (MLFLOW_TRACKING_URI, default "
        "out_dir/mlruns), trackio",
    )
    resume: bool = _f(True, "continue from out_dir's checkpoint (false: start the run over)")
    preset: str = _f("", "a preset filling every field not given (study)", ("", "study"))

    def __post_init__(self) -> None:
        if self.preset:
            apply_preset(self, self.preset, explicit=getattr(self, "_explicit", None))
        self.validate()

    def validate(self) -> None:
        """Every value checked here, with the bad value and the valid ones named, so nothing
        fails later deep inside a rollout (ZeroDivisionError, MemoryError, TypeError)."""
        for f in dataclasses.fields(self):
            choices = f.metadata.get("choices")
            v = getattr(self, f.name)
            if choices and v not in choices:
                raise ValueError(f"unknown {f.name} {v!r}; valid: {', '.join(map(repr, choices))}")
            want = _TYPES.get(f.type, None)
            if want is not None and not _is(v, want):
                raise ValueError(f"{f.name} must be {want[0].__name__}, got {v!r}")
        positive = (
            "problems_per_step",
            "group_size",
            "micro_batch",
            "minibatches",
            "ppo_epochs",
            "lora_r",
            "cliff_window",
            "eval_samples",
        )
        for k in positive:
            if getattr(self, k) < 1:
                raise ValueError(f"{k} must be >= 1, got {getattr(self, k)}")
        non_negative = (
            "steps",
            "eval_every",
            "save_every",
            "eval_episodes",
            "eval_ood_episodes",
            "temperature",
            "weight_decay",
            "clip_low",
            "clip_high",
            "kl_coef",
            "damper_lambda",
            "grad_clip",
            "vf_coef",
            "value_clip",
            "cliff_margin",
            "lora_alpha",
            "overlong_penalty",
            "warmup_steps",
            "lr_decay_steps",
            "resample_rounds",
            "ppo_mini_batch",
            "max_new_tokens",
        )
        for k in non_negative:
            v = getattr(self, k)
            if not math.isfinite(v) or v < 0:
                raise ValueError(f"{k} must be a finite number >= 0, got {v}")
        for k, top in UPPER_BOUNDS.items():  # a size fails here, not as an allocation deep inside
            v = getattr(self, k)
            if not 0 <= v <= top:
                raise ValueError(f"{k} must be in 0..{top:,}, got {v:,}")
        if self.problems_per_step * self.group_size > MAX_EPISODES_PER_STEP:
            raise ValueError(
                f"problems_per_step x group_size must be <= {MAX_EPISODES_PER_STEP:,} episodes "
                f"per step, got {self.problems_per_step} x {self.group_size}"
            )
        if not (math.isfinite(self.lr) and 0 < self.lr <= 1):
            raise ValueError(f"lr must be in (0, 1], got {self.lr}")
        if self.env not in list_envs():  # before any model is built or loaded
            raise ValueError(f"unknown env {self.env!r}; valid: {', '.join(list_envs())}")
        if self.resample_rounds > 0 and not self.filter_groups:
            raise ValueError("resample_rounds (dynamic sampling) needs filter_groups=True")
        t = self.eval_temperature
        if not math.isfinite(t) or (t < 0 and t != -1):
            raise ValueError(f"eval_temperature must be -1 or a finite number >= 0, got {t}")
        self._validate_options()
        for role, v in self.max_new_tokens_per_role.items():
            if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= MAX_NEW_TOKENS:
                raise ValueError(
                    f"max_new_tokens_per_role[{role!r}] must be an int in 1..{MAX_NEW_TOKENS:,}, "
                    f"got {v!r}"
                )
        for k in ("damper_decay", "gamma", "gae_lambda", "min_lr_ratio"):
            if not 0 <= getattr(self, k) <= 1:
                raise ValueError(f"{k} must be in [0, 1], got {getattr(self, k)}")
        if not 0 < self.vllm_memory <= 1:
            raise ValueError(f"vllm_memory must be in (0, 1], got {self.vllm_memory}")
        if not 0 <= self.train_tasks <= MAX_TASKS:  # 0: the task family's default pool
            raise ValueError(f"train_tasks must be in 0..{MAX_TASKS:,}, got {self.train_tasks:,}")
        for role, v in self.kl_per_role.items():
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not v >= 0:
                raise ValueError(f"kl_per_role[{role!r}] must be a number >= 0, got {v!r}")
        self._validate_roles()

    def _validate_options(self) -> None:
        """``env_options`` checked as ``make_env`` would check them (names, types, ranges,
        nothing coerced: "false" is not a bool), and the keys the trainer sets refused."""
        owned = {
            "overlong_penalty": "set overlong_penalty as its own field",
            "split": "the trainer sets split (train for rollouts, test for evaluation; a "
            "separate held-out set: eval_dataset)",
            "n_tasks": "set the training pool's size with train_tasks",
        }
        for k, why in owned.items():
            if k in self.env_options:
                raise ValueError(f"env_options may not set {k!r}: {why}")
        check_options(self.env, self.env_options, "env_options")
        if not isinstance(self.eval_dataset, str) or "\0" in self.eval_dataset:
            raise ValueError(
                f"eval_dataset must be a dataset spec string, got {self.eval_dataset!r}"
            )
        if self.lr_decay_steps == 0 and self.lr_schedule == "cosine":
            self.lr_decay_steps = self.steps  # the horizon recorded, so it cannot drift
        if self.lr_schedule == "cosine" and self.lr_decay_steps < 1:
            raise ValueError(f"lr_decay_steps must be >= 1, got {self.lr_decay_steps}")

    def _validate_roles(self) -> None:
        for role, d in self.role_settings.items():
            if not isinstance(d, dict):
                raise ValueError(f"role_settings[{role!r}] must be a table of settings, got {d!r}")
            bad = sorted(set(d) - set(ROLE_KEYS))
            if bad:
                raise ValueError(
                    f"role_settings[{role!r}] has unknown keys {bad}; valid: {', '.join(ROLE_KEYS)}"
                )
            for k, v in d.items():
                if k == "stop":
                    if not (isinstance(v, list) and all(isinstance(x, str) and x for x in v)):
                        raise ValueError(
                            f"role_settings[{role!r}]['stop'] must be a list of strings"
                        )
                    continue
                ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                if ROLE_KEYS[k] is int:
                    ok = ok and isinstance(v, int) and v >= 1
                if not ok or v < 0 or (k == "lr" and not 0 < v <= 1):
                    raise ValueError(f"role_settings[{role!r}][{k!r}] is out of range: {v!r}")
        for role, spec in self.role_models.items():
            if not isinstance(spec, str) or not spec:
                raise ValueError(f"role_models[{role!r}] must be a model spec string, got {spec!r}")
        for k in ("endpoint_concurrency",):
            if getattr(self, k) < 1:
                raise ValueError(f"{k} must be >= 1, got {getattr(self, k)}")
        if not self.endpoint_timeout_s > 0 or self.endpoint_retries < 0:
            raise ValueError("endpoint_timeout_s must be > 0 and endpoint_retries >= 0")
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
        """A setting as ``role`` sees it: ``role_settings[role][key]``, else the older per-role
        maps (``kl_per_role``, ``max_new_tokens_per_role``), else the run-wide value."""
        d = self.role_settings.get(role, {})
        if key in d:
            return d[key]
        if key == "kl_coef" and role in self.kl_per_role:
            return self.kl_per_role[role]
        if key == "max_new_tokens" and role in self.max_new_tokens_per_role:
            return self.max_new_tokens_per_role[role]
        return getattr(self, key)

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
        cfg._explicit = set(data)  # read by __post_init__ for the preset
        defaults = cls()
        for f in dataclasses.fields(cls):
            setattr(cfg, f.name, data.get(f.name, getattr(defaults, f.name)))
        try:
            cfg.__post_init__()
        finally:
            del cfg._explicit
        return cfg


def _record_explicit(init: Any) -> Any:
    """Wrap the dataclass ``__init__`` so the fields a caller names (positionally or by
    keyword) are known to the preset: an explicit value wins even when it equals the default."""
    names = [f.name for f in dataclasses.fields(TrainConfig)]

    @functools.wraps(init)
    def __init__(self: TrainConfig, *args: Any, **kwargs: Any) -> None:
        self._explicit = set(names[: len(args)]) | set(kwargs)
        try:
            init(self, *args, **kwargs)
        finally:
            del self._explicit

    return __init__


TrainConfig.__init__ = _record_explicit(TrainConfig.__init__)  # type: ignore[method-assign]


_TYPES: dict[Any, tuple[type, ...]] = {
    "int": (int,),
    "float": (float, int),
    "str": (str,),
    "bool": (bool,),
    "dict[str, Any]": (dict,),
    "dict[str, float]": (dict,),
    "dict[str, str]": (dict,),
    "dict[str, int]": (dict,),
}


def _is(v: Any, want: tuple[type, ...]) -> bool:
    if want[0] is not bool and isinstance(v, bool):
        return False
    return isinstance(v, want)


PRESETS: dict[str, dict[str, Any]] = {
    "study": dict(
        group_size=8,
        temperature=0.7,
        lr=2e-5,
        kl_coef=0.0,
        loss_agg="seq-mean-token-mean",
        clip_low=0.2,
        clip_high=0.28,
        grad_clip=1.0,
        group_by="task_role",
        ppo_mini_batch=4,
        lr_schedule="cosine",
        warmup_steps=15,
        filter_groups=True,
        mask_truncated=True,
        eval_samples=4,
        param="lora",
        lora_r=64,
        lora_alpha=32,
    ),
}


def apply_preset(cfg: TrainConfig, name: str, explicit: set[str] | None = None) -> None:
    """Fill ``cfg`` from preset ``name``, except the fields the user gave: those in
    ``explicit`` (a file's or the command line's keys) and any not at its default."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; valid: {', '.join(PRESETS)}")
    fields = {f.name: f for f in dataclasses.fields(TrainConfig)}
    for k, v in PRESETS[name].items():
        f = fields[k]
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default
        if k not in (explicit or ()) and getattr(cfg, k) == default:
            setattr(cfg, k, v)


def load_config_file(path: str | os.PathLike, **overrides: Any) -> TrainConfig:
    """A TrainConfig from a TOML or YAML file (keys are the dataclass fields); ``overrides``
    (e.g. command-line flags) win over the file, and both over a preset."""
    return TrainConfig.from_dict({**read_config_file(path), **overrides}, source=str(path))
