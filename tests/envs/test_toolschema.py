"""The env's tools as OpenAI function schemas, and an OpenAI-style call turned into the env's
own call text (docs/tools.md, "Served models"): what the schema says is what the env takes,
and every malformed call is a call the env refuses and flags."""

from __future__ import annotations

import json

import pytest

import flowzoo
from flowzoo.envs.tools import parse_call
from flowzoo.envs.toolschema import call_text, openai_tools
from flowzoo.tasks import Task, TaskSet


def test_schemas_name_each_tool_once_with_the_program_required():
    run, py = openai_tools(["run", "python", "run"])
    assert [run["function"]["name"], py["function"]["name"]] == ["run", "python"]
    for t in (run, py):
        params = t["function"]["parameters"]
        assert t["type"] == "function" and params["required"] == ["program"]
        assert params["properties"]["program"]["type"] == "string"
        json.dumps(t)  # plain JSON, as a request body carries it
    assert "examples" in run["function"]["parameters"]["properties"]
    assert "examples" not in py["function"]["parameters"]["properties"]
    for bad in (["shell"], [], ["python", "bash"]):
        with pytest.raises(ValueError, match="no tool schema"):
            openai_tools(bad)


@pytest.mark.parametrize(
    "name, arguments, want",
    [
        ("python", '{"program": "print(1)"}', ("python", (), "print(1)")),
        ("python", {"program": "x = 1\nprint(x)"}, ("python", (), "x = 1\nprint(x)")),
        ("run", '{"program": "def f(): pass", "examples": [2, 1]}', ("run", ("2", "1"), "def f(): pass")),
        ("run", '{"program": "p", "examples": "all"}', ("run", ("malformed",), "p")),
        ("python", "{not json", ("python", (), "")),
        ("python", '{"code": "print(1)"}', ("python", (), "")),
        ("python", '["print(1)"]', ("python", (), "")),
        ("python", None, ("python", (), "")),
        (None, '{"program": "print(1)"}', ("unnamed", (), "print(1)")),
        ("rm -rf /", '{"program": "print(1)"}', ("unnamed", (), "print(1)")),
    ],
)  # fmt: skip
def test_an_openai_call_becomes_the_envs_call_text(name, arguments, want):
    p = parse_call(call_text(name, arguments))
    assert p is not None and (p.name, p.args, p.body.strip("\n")) == want


def test_a_fence_inside_the_program_cannot_close_the_call_early():
    text = call_text("python", {"program": "print(1)\n```\n```tool python\nprint(2)"})
    p = parse_call(text)
    assert p is not None and "print(2)" in p.body and "tool_extra_calls" not in p.flags


def test_the_env_runs_a_translated_call_and_refuses_a_malformed_one():
    env = flowzoo.make_env("single-math", tools=["python"], n_tasks=2)
    env.reset(seed=0)
    env.step(call_text("python", '{"program": "print(6 * 7)"}'))
    assert "stdout:\n42" in env.observe("solver")["prompt"]
    env.step(call_text("python", "{oops"))
    assert "tool_bad_args" in env.infos["solver"]["flags"]
    env.step(call_text("shell", '{"program": "ls"}'))
    assert "tool_unknown" in env.infos["solver"]["flags"]
    task = Task(
        "add7",
        "Write add7(x). Example: assert add7(1) == 8",
        "def add7(x):\n    return x + 7\n",
        "code",
        {"entry_point": "add7", "tests": ["assert add7(1) == 8", "assert add7(2) == 9"],
         "setup": "", "prompt_code": "def add7(x):\n"},
    )  # fmt: skip
    code = flowzoo.make_env("single-code", tools=["run"], dataset=TaskSet([task]))
    code.reset(seed=0)
    code.step(call_text("run", {"program": "def add7(x):\n    return x + 7", "examples": [1]}))
    assert "examples: 1/1 passed" in code.observe("solver")["prompt"]
    code.step(call_text("run", {"program": "def add7(x):\n    return x", "examples": [2]}))
    assert "tool_hidden_refused" in code.infos["solver"]["flags"]  # only one is visible


@pytest.mark.parametrize("ticks", ["````", "`````", "x```y", "```", "``````python"])
def test_no_run_of_backticks_survives_into_the_call(ticks):
    p = parse_call(call_text("python", {"program": f"s = '{ticks}'\nprint(1)"}))
    assert p is not None and "```" not in p.body and "print(1)" in p.body
    assert "tool_extra_calls" not in p.flags and "tool_trailing_text" not in p.flags


@pytest.mark.parametrize(
    "examples, args",
    [([], ("malformed",)), ([10**7], ("malformed",)), (list(range(1, 100)), ("malformed",)),
     ([1, 2], ("1", "2")), ([0], ("0",))],
)  # fmt: skip
def test_example_selections_are_kept_or_marked_malformed(examples, args):
    for name in ("run", "RUN", "Run"):
        p = parse_call(call_text(name, {"program": "x = 1", "examples": examples}))
        assert p is not None and p.args == args


def test_schemas_are_fresh_and_refuse_a_bare_string():
    first = openai_tools(["python"])
    first[0]["function"]["parameters"]["properties"]["program"]["description"] = "changed"
    assert openai_tools(["python"]) != first
    for bad in ("python", None, [["python"]], ("python", 3)):
        with pytest.raises(ValueError):
            openai_tools(bad)
