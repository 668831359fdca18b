"""Training configuration: what a run is (:mod:`~flowzoo.config.train`, the sectioned
:class:`TrainConfig`), the one field/domain mechanism every setting and CLI flag is checked
by (:mod:`~flowzoo.config.fields`), the rules that tie fields together
(:mod:`~flowzoo.config.checks`), presets (:mod:`~flowzoo.config.presets`) and config files
with YAML 1.2 semantics (:mod:`~flowzoo.config.files`). No torch: the CLI, the analysis and
sweep files read it without the training extra."""

from flowzoo.config.files import read_config_file
from flowzoo.config.presets import PRESETS, apply_preset
from flowzoo.config.sections import SECTION_OF, SECTIONS
from flowzoo.config.train import (
    ADV_NORMS,
    ALGOS,
    CRITIC_INPUTS,
    ENDPOINT_ON_ERROR,
    FIELD_DOMAINS,
    GROUP_BY,
    LATER_FIELDS,
    LOSS_AGGS,
    LR_SCHEDULES,
    MAX_BATCH,
    MAX_EPISODES_PER_STEP,
    MAX_NEW_TOKENS,
    MAX_STEPS,
    MONITOR_RESPONSES,
    NOT_SHAPING,
    ROLE_SETTINGS,
    ROLE_TOKENS,
    ROLE_WEIGHTING,
    TRACKERS,
    TrainConfig,
    eval_temperature,
    load_config_file,
)

__all__ = [
    "ADV_NORMS",
    "ALGOS",
    "CRITIC_INPUTS",
    "ENDPOINT_ON_ERROR",
    "FIELD_DOMAINS",
    "GROUP_BY",
    "LATER_FIELDS",
    "LOSS_AGGS",
    "LR_SCHEDULES",
    "MAX_BATCH",
    "MAX_EPISODES_PER_STEP",
    "MAX_NEW_TOKENS",
    "MAX_STEPS",
    "MONITOR_RESPONSES",
    "NOT_SHAPING",
    "PRESETS",
    "ROLE_SETTINGS",
    "ROLE_TOKENS",
    "ROLE_WEIGHTING",
    "SECTIONS",
    "SECTION_OF",
    "TRACKERS",
    "TrainConfig",
    "apply_preset",
    "eval_temperature",
    "load_config_file",
    "read_config_file",
]
