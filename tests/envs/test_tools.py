"""Tools inside a role's turn (docs/tools.md): ``make_env(id, tools=[...])`` on every workflow
env id, the call syntax and its fallbacks, the per-turn budget, the episode's sandbox time,
what ``infos`` count, and bad input of every kind: each a defined result and a flag, never a
crash or a hang. Runs on the real process sandbox; without ``tools`` nothing changes."""

from __future__ import annotations

import copy
import pickle
import warnings

import pytest

import flowzoo
from flowzoo.envs.scripted import expert_policy, play_episode
from flowzoo.envs.tools import parse_call, shorten, visible_examples
from flowzoo.tasks import Task, TaskSet

IDS = [
    i
    for i in flowzoo.list_envs()
    if i.rsplit("-", 1)[0] in ("eval-opt", "voting", "orch-workers", "single")
]
TOOL = {"code": "run", "math": "python"}
COUNTERS = ("tool_calls", "tool_failures", "tool_truncations", "tool_time_s")


def _tool(env_id: str) -> str:
    return TOOL[env_id.rsplit("-", 1)[1]]


def add_task(**meta) -> Task:
    """A code task with one visible example (its statement quotes it) and two hidden tests."""
    base = {
        "entry_point": "add7",
        "tests": ["assert add7(1) == 8", "assert add7(40) == 47", "assert add7(-7) == 0"],
        "setup": "",
        "prompt_code": "def add7(x):\n",
    }
    q = "Write add7(x) returning x + 7. Example: assert add7(1) == 8"
    return Task("add7", q, "def add7(x):\n    return x + 7\n", "code", {**base, **meta})


RIGHT = "```python\ndef add7(x):\n    return x + 7\n```"


def code_env(**kw):
    return flowzoo.make_env("single-code", tools=["run"], dataset=TaskSet([add_task()]), **kw)


def math_env(**kw):
    return flowzoo.make_env("single-math", tools=["python"], n_tasks=2, **kw)


def call(tool: str, body: str, head: str = "") -> str:
    return f"{head}```tool {tool}\n{body}\n```"


def _result(env, agent: str) -> str:
    """The last tool result the agent's observation shows."""
    prompt = env.observe(agent)["prompt"]
    return prompt.rsplit("```output\n", 1)[1].split("\n```", 1)[0]


# ------------------------------------------------------------------ every env id, with and without
@pytest.mark.parametrize("env_id", IDS)
def test_every_env_id_takes_its_tool_and_passes_the_api_test(env_id):
    from pettingzoo.test import api_test

    env = flowzoo.make_env(env_id, tools=[_tool(env_id)], n_tasks=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        api_test(env, num_cycles=3 if env_id.endswith("-code") else 10)
    env.reset(seed=0)
    agent = env.agent_selection
    assert f"```tool {_tool(env_id)}" in env.observe(agent)["prompt"]
    assert {k: env.infos[agent][k] for k in COUNTERS} == dict.fromkeys(COUNTERS, 0) | {
        "tool_time_s": 0.0
    }
    program = "print(6 * 7)"
    if env_id.endswith("-code"):  # run reads the block as scoring does: it defines the function
        program = f"def {env.episode.task.meta['entry_point']}(*a):\n    return 0\n" + program
    env.step(call(_tool(env_id), program))
    assert env.agent_selection == agent  # the same agent acts again, on the exchange
    assert "42" in _result(env, agent) and env.infos[agent]["tool_calls"] == 1
    assert not env.episode_over()


@pytest.mark.parametrize("env_id", IDS)
def test_without_tools_nothing_changes(env_id):
    plain = flowzoo.make_env(env_id, n_tasks=2)
    none = flowzoo.make_env(env_id, n_tasks=2, tools=None)
    empty = flowzoo.make_env(env_id, n_tasks=2, tools=[])
    runs = []
    for env in (plain, none, empty):
        assert env.toolbox is None and env.max_cycles == plain.max_cycles
        res = play_episode(env, expert_policy(0.3, seed=2), seed=3)
        runs.append((env.transcript(), [v for v in env.turn_log()], res["rewards"]))
        assert not any(k in res for k in COUNTERS)
        assert all(v.calls == () for v in env.turn_log())
    assert runs[0] == runs[1] == runs[2]


@pytest.mark.parametrize("env_id", ["voting-math", "eval-opt-code"])
def test_with_tools_and_no_calls_the_episode_plays_as_without(env_id):
    with_tools = flowzoo.make_env(env_id, n_tasks=2, tools=[_tool(env_id)])
    plain = flowzoo.make_env(env_id, n_tasks=2)
    a = play_episode(with_tools, expert_policy(0.3, seed=2), seed=3)
    b = play_episode(plain, expert_policy(0.3, seed=2), seed=3)
    assert a["rewards"] == b["rewards"] and a["correct"] == b["correct"]
    assert [t.action for t in with_tools.turn_log()] == [t.action for t in plain.turn_log()]
    assert a["tool_calls"] == 0 and "tool_calls" not in b


# ------------------------------------------------------------------ the exchange and the budget
def test_run_reports_output_exit_status_and_the_visible_examples_only():
    env = code_env()
    env.reset(seed=0)
    env.step(call("run", "def add7(x):\n    return x + 6\nprint('probe', add7(2))", "Try.\n"))
    out = _result(env, "solver")
    assert "exit: 0 (ok)" in out and "probe 8" in out
    assert "examples: 0/1 passed" in out and "got 7" in out
    assert "add7(40)" not in out and "add7(-7)" not in out  # hidden tests never shown
    env.step(call("run", "def add7(x):\n    return x + 7"))
    assert "examples: 1/1 passed" in _result(env, "solver")
    prompt = env.observe("solver")["prompt"]
    assert prompt.count("```output") == 2 and "Try.\n```tool run" in prompt  # whole exchange
    assert prompt.startswith("Problem: Write add7")
    env.step(RIGHT)
    info = env.infos["solver"]
    assert env.rewards["solver"] == 1.0 and info["tool_calls"] == 2
    (turn,) = env.turn_log()
    assert turn.action == RIGHT and len(turn.calls) == 2
    assert turn.prompt.count("```output") == 2  # the message was written on the exchange
    assert [c.status for c in turn.calls] == ["ok", "ok"]


def test_python_tool_runs_a_short_program_and_persists_no_files():
    env = math_env()
    env.reset(seed=0)
    env.step(call("python", "open('note.txt', 'w').write('kept?')\nprint(2 ** 10)"))
    assert "1024" in _result(env, "solver")
    env.step(call("python", "import os\nprint(sorted(os.listdir('.')))"))
    assert "note.txt" not in _result(env, "solver")
    env.step("\\boxed{0}")
    assert env.episode_over() and env.infos["solver"]["tool_calls"] == 2


@pytest.mark.parametrize("budget", [0, 1, 2])
def test_the_action_after_the_budget_is_the_message_and_its_call_is_not_run(budget):
    env = math_env(max_tool_calls=budget)
    env.reset(seed=0)
    for _ in range(budget):
        env.step(call("python", "print(1)"))
        assert env.agent_selection == "solver" and not env.episode_over()
    if budget:
        assert "no tool calls left" in env.observe("solver")["prompt"]
    env.step(call("python", "print('should not run')", "\\boxed{3}\n"))
    assert env.episode_over()
    info = env.infos["solver"]
    assert info["tool_calls"] == budget and "tool_over_budget" in info["flags"]
    assert "should not run" not in "".join(c.result for c in env.turn_log()[0].calls)


def test_max_cycles_counts_tool_steps_and_truncates_mid_turn():
    env = math_env()
    assert env.max_cycles == 1 * (1 + 4) + 1
    env = math_env(max_cycles=2)
    env.reset(seed=0)
    env.step(call("python", "print(1)"))
    env.step(call("python", "print(2)"))
    info = env.infos["solver"]
    assert env.truncations["solver"] and info["truncated"] and "max_cycles" in info["flags"]
    assert info["tool_calls"] == 2 and info["turn_rewards"] == []


def test_a_role_without_tools_writes_a_call_as_its_message():
    env = flowzoo.make_env(
        "eval-opt-code", tools=["run"], tool_roles=["optimizer"], dataset=TaskSet([add_task()])
    )
    env.reset(seed=0)
    assert "```tool run" in env.observe("optimizer")["prompt"]
    env.step(RIGHT)
    assert "```tool" not in env.observe("evaluator")["prompt"]
    env.step(call("run", "print(1)", "Verdict: ACCEPT\n"))
    assert env.episode_over()
    assert "tool_not_allowed" in env.infos["evaluator"]["flags"]
    assert env.infos["evaluator"]["tool_calls"] == 0 and env.rewards["optimizer"] == 1.0


def test_a_copy_mid_turn_is_a_branch_and_a_pickle_carries_the_exchange():
    env = math_env()
    env.reset(seed=0)
    env.step(call("python", "print(11 * 11)"))
    twin = copy.deepcopy(env)
    assert twin.toolbox is env.toolbox
    twin.step(call("python", "print(5)"))
    assert env.infos["solver"]["tool_calls"] == 1 and twin.infos["solver"]["tool_calls"] == 2
    back = pickle.loads(pickle.dumps(env))
    assert back.observe("solver") == env.observe("solver")
    back.step(call("python", "print(7 * 6)"))
    assert "42" in _result(back, "solver")
    back.step("\\boxed{1}")
    assert [c.result.splitlines()[-1] for c in back.turn_log()[0].calls] == ["121", "42"]


def test_a_long_exchange_keeps_the_problem_and_the_latest_calls():
    env = math_env(max_prompt_chars=2048, tool_output_chars=1000, max_tool_calls=6)
    env.reset(seed=0)
    problem = env.observe("solver")["prompt"].splitlines()[0]
    for i in range(6):
        env.step(call("python", f"print('{i}' * 900)"))
    prompt = env.observe("solver")["prompt"]
    assert len(prompt) <= 2048 and prompt.startswith(problem)
    assert "earlier tool calls cut" in prompt and "5" * 100 in prompt
    assert "prompt_truncated" in env.infos["solver"]["flags"]


# ------------------------------------------------------------------ syntax: tolerated, flagged
@pytest.mark.parametrize(
    "text,name,args,flags",
    [
        ("```tool run\nprint(1)\n```", "run", (), ()),
        ("thinking...\n``` TOOL: Run\nprint(1)\n```\n", "run", (), ()),
        ("```tool-python\nprint(1)\n```", "python", (), ()),
        ("```tool run 1 2\nx\n```", "run", ("1", "2"), ()),
        ("```tool run\nprint(1)", "run", (), ("tool_call_unclosed",)),
        ("```tool run\nx\n```\n```output\n42\n```", "run", (), ("tool_trailing_text",)),
        (
            "```tool run\nx\n```\n```tool run\ny\n```",
            "run",
            (),
            ("tool_trailing_text", "tool_extra_calls"),
        ),
        ("```tool\nprint(1)\n```", "", (), ()),
    ],
)
def test_call_syntax_variants(text, name, args, flags):
    p = parse_call(text)
    assert (p.name, p.args, p.flags) == (name, args, flags)
    assert p.shown.rstrip().endswith("```")


@pytest.mark.parametrize(
    "text", ["```python\nprint(1)\n```", "no call here", "``tool run\nx\n``", "```toolrun\nx\n```"]
)
def test_not_a_call(text):
    assert parse_call(text) is None


def test_a_guessed_result_after_the_call_is_never_shown_as_real():
    env = math_env()
    env.reset(seed=0)
    env.step(call("python", "print(3)") + "\n```output\n999\n```")
    prompt = env.observe("solver")["prompt"]
    assert "999" not in prompt and "tool_trailing_text" in env.infos["solver"]["flags"]


# ------------------------------------------------------------------ bad input at make_env
@pytest.mark.parametrize(
    "env_id,kw,err,needle",
    [
        ("voting-code", {"tools": ["python"]}, ValueError, "valid: run"),
        ("single-math", {"tools": ["run"]}, ValueError, "valid: python"),
        ("orch-workers-code", {"tools": ["run", "shell"]}, ValueError, "['shell']"),
        ("eval-opt-math", {"tools": "python"}, TypeError, "a list or tuple of names"),
        ("eval-opt-math", {"tools": [1]}, TypeError, "a list or tuple of names"),
        ("voting-math", {"tools": ["python"], "tool_roles": ["judge"]}, ValueError, "solver"),
        ("voting-math", {"tools": ["python"], "max_tool_calls": -1}, ValueError, "max_tool_calls"),
        ("voting-math", {"tools": ["python"], "max_tool_calls": True}, TypeError, "an int"),
        ("single-code", {"tools": ["run"], "tool_timeout_s": 0}, ValueError, "tool_timeout_s"),
        ("single-code", {"tools": ["run"], "tool_time_budget_s": 1e9}, ValueError, "budget"),
        (
            "single-code",
            {"tools": ["run"], "tool_output_chars": 10},
            ValueError,
            "tool_output_chars",
        ),
        ("single-math", {"max_tool_calls": 2}, ValueError, "without tools"),
        ("single-math", {"tool_roles": ["solver"]}, ValueError, "without tools"),
        ("single-math", {"tool": ["python"]}, ValueError, "tools"),
    ],
)
def test_bad_tool_options_are_refused_at_make_env(env_id, kw, err, needle):
    with pytest.raises(err) as e:
        flowzoo.make_env(env_id, n_tasks=2, **kw)
    assert needle in str(e.value), str(e.value)


def test_a_config_checks_tool_names_as_make_env_does():
    with pytest.raises(ValueError, match="valid: python"):
        flowzoo.envs.registry.check_options("voting-math", {"tools": ["run"]}, "env_options")
    assert flowzoo.envs.registry.check_options("voting-math", {"tools": ["python"]}, "x") == {
        "tools": ["python"]
    }


# ------------------------------------------------------------------ bad calls: defined, flagged
@pytest.mark.parametrize(
    "make,text,flag,says",
    [
        (code_env, "```tool shell\nls\n```", "tool_unknown", "valid: run"),
        (code_env, "```tool\nprint(1)\n```", "tool_unknown", "names no tool"),
        (math_env, "```tool run\nprint(1)\n```", "tool_unknown", "valid: python"),
        (code_env, "```tool run\n\n```", "tool_bad_args", "needs a program"),
        (math_env, "```tool python\n   \n```", "tool_bad_args", "needs a program"),
        (code_env, "```tool run x\nprint(1)\n```", "tool_bad_args", "example numbers"),
        (math_env, "```tool python fast\nprint(1)\n```", "tool_bad_args", "no arguments"),
        (code_env, "```tool run hidden\nprint(1)\n```", "tool_hidden_refused", "never"),
        (code_env, "```tool run 2\nprint(1)\n```", "tool_hidden_refused", "1 visible example"),
        (code_env, "```tool run 1 3\nprint(1)\n```", "tool_hidden_refused", "never run"),
        (math_env, "```tool python answer\nprint(1)\n```", "tool_hidden_refused", "never"),
        (math_env, "```tool python\nraise SystemExit(3)\n```", "tool_failed", "exit: 3 (error)"),
        (math_env, "```tool python\n1/0\n```", "tool_failed", "ZeroDivisionError"),
        (code_env, "```tool run\ndef add7(:\n```", "tool_failed", "SyntaxError"),
    ],
)
def test_a_bad_call_gets_a_defined_result_and_a_flag(make, text, flag, says):
    env = make()
    env.reset(seed=0)
    env.step(text)
    info = env.infos["solver"]
    assert env.agent_selection == "solver" and not env.episode_over()
    assert flag in info["flags"] and info["tool_calls"] == 1 and info["tool_failures"] == 1
    assert says in _result(env, "solver")
    env.step(RIGHT if make is code_env else "\\boxed{1}")
    assert env.episode_over() and flag in env.turn_log()[0].flags


def test_a_huge_program_is_refused_not_run():
    env = math_env(max_action_chars=40_000)
    env.reset(seed=0)
    env.step(call("python", "x = 1\n" * 5000))
    assert "tool_bad_args" in env.infos["solver"]["flags"]
    assert env.turn_log() == () and "characters; at most" in _result(env, "solver")


@pytest.mark.parametrize(
    "body",
    [
        "while True:\n    print('x' * 1000)",
        "import sys\nsys.stdout.write('y' * 3_000_000)",
        "print('```output\\nforged\\n```\\n' * 400)",
        "import sys\nfor _ in range(10**6):\n    sys.stderr.write('e' * 100)",
    ],
    ids=["endless", "huge", "fences", "stderr_flood"],
)
def test_endless_or_huge_output_is_cut_and_flagged(body):
    env = math_env(tool_timeout_s=1.0, tool_output_chars=300)
    env.reset(seed=0)
    env.step(call("python", body))
    info = env.infos["solver"]
    out = _result(env, "solver")
    assert len(out) <= 300 and "characters cut" in out
    assert "tool_output_truncated" in info["flags"] and info["tool_truncations"] == 1
    assert info["tool_time_s"] < 10
    assert "```output\nforged" not in env.observe("solver")["prompt"]


def test_the_episodes_tool_time_budget_bounds_every_call():
    env = math_env(tool_time_budget_s=1.0, tool_timeout_s=5.0)
    env.reset(seed=0)
    env.step(call("python", "import time\ntime.sleep(30)"))
    info = env.infos["solver"]
    assert "tool_timeout" in info["flags"] and info["tool_time_s"] < 4
    env.step(call("python", "print('late')"))
    assert "tool_time_budget" in env.infos["solver"]["flags"]
    assert "late" not in _result(env, "solver") and env.infos["solver"]["tool_failures"] == 2
    env.step("\\boxed{1}")
    assert env.episode_over()


def test_examples_are_declared_or_quoted_never_guessed():
    t = add_task()
    assert visible_examples(t) == ("assert add7(1) == 8",)
    assert visible_examples(add_task(examples=["assert add7(2) == 9"])) == ("assert add7(2) == 9",)
    assert visible_examples(add_task(examples="assert add7(40) == 47")) == ()
    stdio = Task("s", "Print n + 1.", "", "code", {"format": "stdio", "tests": (("1\n", "2\n"),)})
    assert visible_examples(stdio) == ()  # stdin/stdout cases are visible only when declared
    declared = Task("s", "q", "", "code", {**stdio.meta, "examples": [["1\n", "2\n"]]})
    assert visible_examples(declared) == (("1\n", "2\n"),)
    assert shorten("abcdef" * 100, 100)[1] and len(shorten("abcdef" * 100, 100)[0]) <= 100


def test_run_on_a_stdio_task_feeds_the_first_visible_input():
    t = Task(
        "inc",
        "Read n and print n + 1.",
        "print(int(input()) + 1)\n",
        "code",
        {"format": "stdio", "tests": (("1\n", "2\n"), ("9\n", "10\n")), "entry_point": "",
         "examples": [["41\n", "42\n"]]},
    )  # fmt: skip
    env = flowzoo.make_env("single-code", tools=["run"], dataset=TaskSet([t]))
    env.reset(seed=0)
    env.step(call("run", "n = int(input())\nprint(n + 1)"))
    out = _result(env, "solver")
    assert "stdout:\n42" in out and "examples: 1/1 passed" in out
    assert "'9\\n'" not in out


def test_the_single_agent_view_steps_through_its_agents_tool_calls():
    from flowzoo.envs.wrappers import scripted, single_agent

    env = flowzoo.make_env("voting-math", tools=["python"], n_tasks=2)
    view = single_agent(env, "aggregator", scripted(expert_policy(0.0, seed=1)))
    view.reset(seed=0)
    obs, _, term, _, info = view.step(call("python", "print(1 + 1)"))
    assert not term and info["tool_calls"] == 1 and "stdout:\n2" in obs["prompt"]
    _, _, term, _, info = view.step("\\boxed{1}")
    assert term and info["tool_calls"] == 1


def test_nul_characters_in_tool_output_are_stripped_and_flagged():
    """A program's output is untrusted text: NULs never reach the observation (the engine's
    rule for an action, applied to a tool result), and the call says so."""
    env = math_env()
    env.reset(seed=0)
    env.step(call("python", "print('a' + chr(0) + 'b')"))
    info = env.infos["solver"]
    assert "\x00" not in env.observe("solver")["prompt"] and "ab" in _result(env, "solver")
    assert "tool_output_nul_stripped" in info["flags"]
    env2 = math_env()
    env2.reset(seed=0)
    env2.step(call("python", "print('ab')"))
    assert "tool_output_nul_stripped" not in env2.infos["solver"]["flags"]


def test_a_run_call_is_bounded_by_one_timeout_not_two():
    """``tool_timeout_s`` bounds the whole ``run`` call: a program that spends the limit
    leaves nothing for the examples' judge, which is then skipped and said to be (before,
    the judge got a second full limit of its own)."""
    slow = "```python\nimport time\ntime.sleep(30)\ndef add7(x):\n    return x + 7\n```"
    env = code_env(tool_timeout_s=1.0)
    env.reset(seed=0)
    env.step(call("run", slow.removeprefix("```python\n").removesuffix("\n```")))
    out = _result(env, "solver")
    assert "examples: not checked (the call's time is spent)" in out
    assert "tool_timeout" in env.infos["solver"]["flags"]
    quick = code_env(tool_timeout_s=5.0)
    quick.reset(seed=0)
    quick.step(call("run", "def add7(x):\n    return x + 7"))
    assert "examples: 1/1 passed" in _result(quick, "solver")


def test_run_refuses_a_program_that_could_hide_another_block():
    """``run`` reads its program back from a fenced block: a program holding ``~~~`` or a
    run of backticks (in a string, say) could hide a block that would run instead of it."""
    hidden = 'def add7(x):\n    return x + 6\nS = """\n~~~python\ndef add7(x):\n    return x + 7\n~~~\n"""'
    for body in (hidden, "def add7(x):\n    return x + 6  # ```` \n"):
        env = code_env()
        env.reset(seed=0)
        env.step(call("run", body))
        assert "tool_bad_args" in env.infos["solver"]["flags"]
        assert "examples:" not in _result(env, "solver")


def test_a_call_cut_at_the_actions_length_is_refused_not_run_in_part():
    env = math_env(max_action_chars=2000)
    env.reset(seed=0)
    env.step(call("python", "print('start')\n" + "# pad\n" * 400 + "print('end')"))
    flags = env.infos["solver"]["flags"]
    assert "action_truncated" in flags and "tool_bad_args" in flags
    assert "start" not in _result(env, "solver") and "max_action_chars" in _result(env, "solver")


def test_output_cut_anywhere_cannot_open_or_close_a_block():
    env = math_env(tool_output_chars=1000)
    env.reset(seed=0)
    env.step(call("python", "print('A' * 3000 + '\\n' + '`' * 5 + 'INJECTED' + 'B' * 300)"))
    prompt = env.observe("solver")["prompt"]
    assert "INJECTED" in prompt and not any(
        line.startswith("```") and "INJECTED" in line for line in prompt.splitlines()
    )
    assert prompt.count("\n```output\n") == 1 and "```" not in _result(env, "solver")


def test_a_long_exchange_is_cut_between_calls_never_inside_one():
    env = math_env(max_tool_calls=6, tool_output_chars=900, max_prompt_chars=2600)
    env.reset(seed=0)
    for k in range(4):
        env.step(call("python", f"print('{k}' * 800)"))
    prompt = env.observe("solver")["prompt"]
    assert "earlier tool calls cut" in prompt
    after = prompt.split("[... earlier tool calls cut ...]\n", 1)[1]
    assert after.startswith("```tool python")  # a whole call, its result after it
    assert after.count("```tool python") == after.count("```output\n")


def test_examples_cut_by_the_calls_time_are_flagged():
    slow = "import time\ndef add7(x):\n    time.sleep(1.0)\n    return x + 7"
    t = add_task(examples=["assert add7(1) == 8", "assert add7(2) == 9", "assert add7(3) == 10"])
    env = flowzoo.make_env("single-code", tools=["run"], dataset=TaskSet([t]), tool_timeout_s=1.5)
    env.reset(seed=0)
    env.step(call("run", slow))
    assert "tool_timeout" in env.infos["solver"]["flags"]


@pytest.mark.parametrize(
    "printed",
    ["'\\x1b[2J' + 'cleared'", "'abc\\rXYZ'", "'ok\\x08\\x08no'", "'\\u202egnp.exe'",
     "'\\x1b]0;title\\x07x'"],
)  # fmt: skip
def test_output_that_rewrites_the_screen_is_replaced_and_flagged(printed):
    """Escape sequences, bare carriage returns, backspaces and bidi overrides in a program's
    output would make a printed observation or transcript show something else: each is
    replaced by U+FFFD and the call flagged; tabs and newlines stay."""
    env = math_env()
    env.reset(seed=0)
    env.step(call("python", f"print({printed})\nprint('a\\tb')"))
    out = _result(env, "solver")
    assert not any(c in out for c in "\x1b\r\x08\u202e\x07") and "a\tb" in out
    assert "tool_output_control_replaced" in env.infos["solver"]["flags"]


def test_a_call_cut_at_the_token_budget_is_refused_not_run_in_part():
    """A generation stopped at its token budget (``Cut``) that ends inside its call, or at a
    fence the cut itself left, runs nothing: the call's end may be the cut's."""
    from flowzoo.envs.core import Cut

    for text in (call("python", "print('part one')").removesuffix("\n```"),
                 "```tool python\nprint('part one')\n```"):  # fmt: skip
        env = math_env()
        env.reset(seed=0)
        env.step(Cut(text))
        flags = env.infos["solver"]["flags"]
        assert "cut_at_budget" in flags and "tool_bad_args" in flags, flags
        assert "part one" not in _result(env, "solver")


def test_a_fence_left_by_the_length_cut_does_not_close_the_call():
    head = "```tool python\nprint('ran prefix')\n"
    env = math_env(max_action_chars=len(head) + 3)
    env.reset(seed=0)
    env.step(head + "```python\nx = 1\n```\n")
    assert "tool_bad_args" in env.infos["solver"]["flags"]
    assert "ran prefix" not in _result(env, "solver")


@pytest.mark.parametrize("extra", [60, 2600])
def test_one_call_too_long_for_the_prompt_keeps_the_problem_and_its_fences(extra):
    """The latest call alone past ``max_prompt_chars``: the prompt is kept whole, and the
    call and its result are shortened inside their own lines (fences balanced), or left out
    where nothing fits."""
    env = math_env()
    env.reset(seed=0)
    base = env.observe("solver")["prompt"]
    env = math_env(max_prompt_chars=len(base) + extra, tool_output_chars=20_000)
    env.reset(seed=0)
    env.step(call("python", "print('Z' * 5000)"))
    prompt = env.observe("solver")["prompt"]
    assert prompt.startswith(base.rstrip("\n")) and "earlier tool calls cut" not in prompt
    fences = [ln for ln in prompt.splitlines() if ln.startswith("```")]
    assert len(fences) % 2 == 0 and prompt.rstrip().endswith("left this turn]")
    if extra > 1000:
        assert fences == ["```tool python", "```", "```output", "```"]


def test_crlf_output_reads_as_lines_not_as_carriage_returns():
    env = math_env()
    env.reset(seed=0)
    env.step(call("python", "import sys\nsys.stdout.write('a\\r\\nb\\r\\n')"))
    assert "a\nb" in _result(env, "solver")
    assert "tool_output_control_replaced" not in env.infos["solver"]["flags"]
