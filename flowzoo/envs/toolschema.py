"""The env's tools as other engines name them: the OpenAI function-calling schema (what a
served model is sent as ``tools``, and what the verifiers library and TRL read from a
function's signature), and a call made in that form turned into the env's own call text.

Why a translation and not a second syntax: the env parses one call syntax (a fenced block
naming the tool, docs/tools.md), so every engine's tool call becomes that text before the
env sees it, and a call is judged, refused and flagged the same way whoever made it. A call
whose arguments are not what the schema says (not JSON, no ``program``, a number where a list
is meant) becomes a call with an empty body, which the env refuses with ``tool_bad_args``:
a defined outcome, never an exception.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from flowzoo.envs.tools import MAX_PROGRAM_CHARS, TOOLS_BY_FAMILY, break_fences

#: what each tool does, as a served model reads it (the prompt's wording, docs/tools.md)
DESCRIPTIONS = {
    "run": "Run your Python program in a sandbox and check it on the problem's visible "
    "examples: shows exit status, stdout, stderr and which examples passed. Hidden tests "
    "are never run.",
    "python": "Run a short Python program in a sandbox (no network, no files kept) and "
    "show what it prints.",
}
_PROGRAM = {
    "type": "string",
    "description": f"the whole Python program (at most {MAX_PROGRAM_CHARS:,} characters)",
}
_EXAMPLES = {
    "type": "array",
    "items": {"type": "integer", "minimum": 1},
    "description": "which visible examples to check, 1-based (default: all of them)",
}
KNOWN = tuple(dict.fromkeys(t for ts in TOOLS_BY_FAMILY.values() for t in ts))


def openai_tools(names: tuple[str, ...] | list[str]) -> list[dict[str, Any]]:
    """The OpenAI ``tools`` list for the env's tools ``names`` (``["run"]``, ``["python"]``):
    one function each, its one required argument the program (``run`` also takes the
    examples to check), fresh dicts on every call. A ValueError for a name the env does not
    offer, or ``names`` that is not a list or tuple of them."""
    if not isinstance(names, (list, tuple)):
        raise ValueError(f"tools must be a list of tool names, got {type(names).__name__}")
    bad = [n for n in names if not isinstance(n, str) or n not in DESCRIPTIONS]
    if bad or not names:
        raise ValueError(f"no tool schema for {bad or list(names)}; valid: {', '.join(KNOWN)}")
    out = []
    for name in dict.fromkeys(names):
        props: dict[str, Any] = {"program": copy.deepcopy(_PROGRAM)}
        if name == "run":
            props["examples"] = copy.deepcopy(_EXAMPLES)
        out.append(
            {
                "type": "function",
                "function": {
                    "name": name,
                    "description": DESCRIPTIONS[name],
                    "parameters": {
                        "type": "object",
                        "properties": props,
                        "required": ["program"],
                        "additionalProperties": False,
                    },
                },
            }
        )
    return out


def call_text(name: Any, arguments: Any) -> str:
    """An OpenAI-style call (a function ``name`` and its ``arguments``, a JSON string or an
    already-parsed object) as the env's call text. Arguments that do not fit the schema give
    a call with an empty body (the env refuses it: ``tool_bad_args``); an unknown name is
    kept, and refused by the env as ``tool_unknown``."""
    fence = "`" * 3
    name = name if isinstance(name, str) and name.isidentifier() else "unnamed"
    args = arguments
    if isinstance(args, (str, bytes)):
        try:
            args = json.loads(args)
        except (ValueError, RecursionError):
            args = None
    program = args.get("program") if isinstance(args, dict) else None
    if not isinstance(program, str):
        program = ""
    head = f"{fence}tool {name}"
    examples = args.get("examples") if isinstance(args, dict) else None
    if name.lower() == "run" and examples is not None:
        ok = (
            isinstance(examples, list)
            and 0 < len(examples) <= 64
            and all(isinstance(k, int) and not isinstance(k, bool) for k in examples)
            and all(abs(k) < 10**6 for k in examples)
        )
        # a malformed selection is passed on as a word the env refuses (tool_bad_args)
        head += " " + (" ".join(str(k) for k in examples) if ok else "malformed")
    # a run of backticks inside the program could close the block early: broken, as in
    # tool output (the program then runs with its backticks broken)
    return f"{head}\n{break_fences(program)}\n{fence}"


__all__ = ["DESCRIPTIONS", "call_text", "openai_tools"]
