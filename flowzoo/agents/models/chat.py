"""The tiny models' chat template, so a served tiny model answers chat requests
(``/v1/chat/completions``: ``flowzoo eval --model openai:...``, ``vf-eval``, SkyRL, the
rLLM-style runner) exactly as it answers the same prompt as a plain completion.

Why this shape: the tiny models were pretrained on ``<s>`` + a role's whole prompt, then its
completion; a flowzoo prompt carries everything the role needs, so a chat is rendered as BOS,
any system text, then the last user message — Qwen3's template with thinking off
(``enable_thinking`` is accepted and ignored: there is no thinking to turn on) minus the
special tokens these models never saw. Earlier turns of a chat are not repeated: the last
prompt already quotes what the role may see of them.
"""

from __future__ import annotations

import os
from pathlib import Path

CHAT_TEMPLATE = (
    "{{- bos_token -}}"
    "{%- for m in messages if m['role'] == 'system' -%}"
    "{{- m['content'] -}}{{- '\\n' -}}"
    "{%- endfor -%}"
    "{%- set users = messages | selectattr('role', 'equalto', 'user') | list -%}"
    "{%- if users -%}{{- users[-1]['content'] -}}{%- endif -%}"
)


def has_chat_template(path: str | os.PathLike) -> bool:
    """Whether the tokenizer saved at ``path`` has a chat template (read from its files)."""
    p = Path(path)
    if (p / "chat_template.jinja").exists():
        return True
    cfg = p / "tokenizer_config.json"
    return cfg.exists() and '"chat_template"' in cfg.read_text()


def add_chat_template(path: str | os.PathLike) -> bool:
    """Give the tokenizer saved at ``path`` the template if it has none (models built before
    the template existed): ``chat_template.jinja`` beside it, where ``transformers`` and vLLM
    read it. True when it wrote one."""
    if has_chat_template(path):
        return False
    (Path(path) / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    return True


__all__ = ["CHAT_TEMPLATE", "add_chat_template", "has_chat_template"]
