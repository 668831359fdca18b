"""Code tasks: programs extracted from completions, scored by unit tests in a sandbox.

Untrusted code only ever runs inside the sandbox backend chosen by ``sandbox=``
(``process`` by default, ``docker``, ``sandbox-fusion``, or a ready Sandbox instance).
"""

from __future__ import annotations

from flowzoo.tasks.code.data import (
    function_tasks,
    humaneval_task,
    humaneval_tasks,
    load_code_dataset,
    load_code_file,
    mbpp_task,
    split_check_function,
)
from flowzoo.tasks.code.family import CodeFamily
from flowzoo.tasks.code.harness import extract_program

__all__ = [
    "CodeFamily",
    "extract_program",
    "function_tasks",
    "humaneval_task",
    "humaneval_tasks",
    "load_code_dataset",
    "load_code_file",
    "mbpp_task",
    "split_check_function",
]
