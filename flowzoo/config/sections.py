"""The sections of ``flowzoo train --help`` and the docs' settings table: every field of
:class:`~flowzoo.config.train.TrainConfig` in exactly one (checked when this loads)."""

from __future__ import annotations

from flowzoo.config.fields import sections_of
from flowzoo.config.train import TrainConfig

#: the sections of ``flowzoo train --help`` and the docs, as TRL groups its arguments (the
#: CLI flags and config-file keys stay flat); every field is in exactly one, checked here
_SECTION_FIELDS = {
    "run": "preset steps seed",
    "model": "model param lora_r lora_alpha precision grad_checkpointing fast_forward device "
    "policy_devices fsdp threads",
    "roles": "policy role_settings role_models frozen_roles endpoint_concurrency "
    "endpoint_timeout_s endpoint_retries endpoint_on_error",
    "rollout": "env env_options train_tasks problems_per_step group_size rollout temperature "
    "max_new_tokens mask_truncated overlong_penalty resample_rounds generation_backend "
    "vllm_memory vllm_max_model_len",
    "algorithm": "algo loss_agg std_norm adv_norm group_by filter_groups role_weighting "
    "clip_low clip_high kl_coef damper_lambda damper_decay gamma gae_lambda vf_coef value_clip "
    "critic_input baseline_decay",
    "optimisation": "lr lr_schedule lr_decay_steps warmup_steps min_lr_ratio weight_decay "
    "grad_clip minibatches ppo_mini_batch update_matched ppo_epochs micro_batch",
    "evaluation": "eval_every eval_episodes eval_dataset eval_temperature eval_samples "
    "eval_greedy eval_ood_episodes cliff_margin cliff_window",
    "early warning": "monitor_response monitor_update_size monitor_update_window "
    "monitor_reward_drop monitor_reward_window monitor_rollback_lr",
    "logging and checkpoints": "out_dir resume save_every report_to",
    "deprecated": "kl_per_role max_new_tokens_per_role",
}
SECTIONS: dict[str, tuple[str, ...]] = {k: tuple(v.split()) for k, v in _SECTION_FIELDS.items()}
#: field name -> its section title
SECTION_OF = sections_of(TrainConfig, SECTIONS)
