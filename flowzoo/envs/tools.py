"""Tools a role may call inside its turn: ``run`` (code envs) and ``python`` (math envs).

A tool call is the agent's action; the env answers with a new observation for the same agent
(its prompt, then every call and result of this turn), and the agent acts again, until it
writes its turn's message (an action without a call) or has spent ``max_tool_calls``: then
the next action is its message whatever it holds (a call in it is not run, flagged
``tool_over_budget``). Why the engine owns this and not the workflows: a workflow only ever
sees a turn's message, so every workflow gets tools without a line of its own, and what a
tool may reach is decided here, once (docs/tools.md).

The call syntax is one fenced block, the form a small model already writes for code::

    ```tool run
    def add(x):
        return x + 3
    print(add(1))
    ```

What a tool reaches: the program it is given, run in the sandbox (code: the family's, the
one that scores; math: the process backend's shared one), with the sandbox's limits, and for
``run`` the task's *visible* examples (``task.meta["examples"]``: cases the problem statement
shows, filled by the loaders). Hidden tests and gold answers stay with the judge: a tool never
receives them, its runs share nothing with each other or with scoring (the sandbox's
guarantee), and example checks are judged by a family of their own (their own memo), never
by the one whose verdicts become rewards.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

from flowzoo.envs import options as opt
from flowzoo.envs.spaces import replace_surrogates
from flowzoo.tasks.base import Task

#: the tools each task family offers (a family not named here offers none)
TOOLS_BY_FAMILY: dict[str, tuple[str, ...]] = {"code": ("run",), "math": ("python",)}
#: option defaults, as :data:`flowzoo.envs.options.TOOLS` declares the options
DEFAULTS: dict[str, Any] = {
    "tools": None,
    "max_tool_calls": 4,
    "tool_output_chars": 1500,
    "tool_timeout_s": 5.0,
    "tool_time_budget_s": 60.0,
    "tool_roles": None,
}
#: the most characters of a program a call may carry (the code family's own cap)
MAX_PROGRAM_CHARS = 20_000
#: words in a call's arguments that ask for what a tool never gives (refused and flagged)
HIDDEN_WORDS = frozenset(
    {"hidden", "private", "secret", "test", "tests", "judge", "gold", "answer", "solution"}
)

#: the flag of a call whose run did not end cleanly, by the run's status
STATUS_FLAGS = {
    "error": "tool_failed",
    "memory": "tool_failed",
    "killed": "tool_failed",
    "timeout": "tool_timeout",
    "sandbox_error": "tool_sandbox_error",
}

_OPEN = re.compile(r"^[ \t]*`{3,}[ \t]*tools?\b[ \t]*[:=\-]?[ \t]*(?P<rest>[^\n]*)$", re.I | re.M)
_CLOSE = re.compile(r"^[ \t]*`{3,}[ \t\r]*$", re.M)
_PUNCT = "`'\"<>()[]{},;:"


@dataclass(frozen=True)
class Parsed:
    """A call as written: its tool name, the words after it, its body, where it ends."""

    name: str
    args: tuple[str, ...]
    body: str
    #: the action up to the call's closing fence (what the exchange keeps)
    shown: str
    flags: tuple[str, ...] = ()


@dataclass(frozen=True)
class ToolCall:
    """One tool step of a turn: what the agent saw and wrote, what ran, what it got back
    (``Turn.calls``, ``TurnView.calls``; a trainer keeps its own record of each call's tokens:
    :class:`flowzoo.agents.train.segments.Segment`)."""

    prompt: str
    action: str
    name: str
    args: tuple[str, ...]
    body: str
    #: the run's status (:data:`flowzoo.sandbox.STATUSES`), or ``refused`` (nothing ran)
    status: str
    result: str
    flags: tuple[str, ...]
    #: sandbox seconds charged to the episode's tool time budget
    wall_s: float
    shown: str = ""


@dataclass
class ToolState:
    """An episode's tool bookkeeping: sandbox seconds spent, the running turn's calls."""

    spent_s: float = 0.0
    base: str = ""
    calls: list[ToolCall] = field(default_factory=list)


def parse_call(text: str) -> Parsed | None:
    """The first call in ``text`` (a line opening ```` ```tool NAME ````, the body up to a
    line of ```` ``` ````), or None when it holds none. Tolerated and flagged: a missing
    closing fence (``tool_call_unclosed``: the body runs to the end), text after the call
    (``tool_trailing_text``: dropped, so a guessed result is never shown as real), more
    calls after the first (``tool_extra_calls``: only the first runs)."""
    m = _OPEN.search(text)
    if m is None:
        return None
    words = [w.strip(_PUNCT).lower() for w in m.group("rest").split()]
    words = [w for w in words if w]
    start = m.end() + 1
    close = _CLOSE.search(text, start)
    flags = []
    if close is None:
        body, shown, tail = text[start:], text.rstrip() + "\n```", ""
        flags.append("tool_call_unclosed")
    else:
        body, shown, tail = text[start : close.start()], text[: close.end()], text[close.end() :]
    if tail.strip():
        flags.append("tool_trailing_text")
    if _OPEN.search(tail):
        flags.append("tool_extra_calls")
    body = body.removesuffix("\n")
    return Parsed(words[0] if words else "", tuple(words[1:]), body, shown, tuple(flags))


def call_end(text: str) -> int | None:
    """Where the first call in ``text`` ends: the index just past its closing fence line's
    newline, or None while no call is complete (no opening line, or an opening or closing
    line not yet ended by a newline: ```` ``` ```` may still become ```` ```python ````).
    Why: a rollout cuts a sample that may call here, so text the model wrote after a call
    (a guessed result) is neither run, shown nor trained. Stable once found: a longer text
    with the same prefix ends its first call at the same place (the lines it reads are
    whole), so a generation can be cut at the first token where it is not None."""
    m = _OPEN.search(text)
    if m is None or m.end() >= len(text):
        return None
    close = _CLOSE.search(text, m.end() + 1)
    if close is None or close.end() >= len(text):
        return None
    return close.end() + 1


def toolbox_of(env: Any) -> Toolbox | None:
    """The env's :class:`Toolbox` (through any wrapper), or None without tools."""
    return getattr(getattr(env, "unwrapped", env), "toolbox", None)


def tool_roles(env: Any) -> dict[str, tuple[str, ...]]:
    """Role -> the tools it may call, as ``env``'s toolbox resolved its options (none
    without tools): what a served player of a role is sent as OpenAI tool schemas
    (:class:`~flowzoo.agents.models.endpoint.EndpointPolicy`), and the methods TRL's tool
    env offers (:mod:`flowzoo.integrations.trl_adapter`)."""
    tb = toolbox_of(env)
    return {} if tb is None else {r: tb.names for r in env.roles if tb.allowed(r)}


def calls_left(env: Any, agent: str) -> int:
    """How many tool calls ``agent`` may still make before its turn's message: 0 without
    tools, for a role without them, or once its running turn has spent ``max_tool_calls``
    (its next action is then its message, whatever it holds). An agent other than the one
    acting has not started its turn, so it has the whole budget."""
    env = getattr(env, "unwrapped", env)
    tb = toolbox_of(env)
    if tb is None or not tb.allowed(env.role_of(agent)):
        return 0
    st = getattr(env, "_tools", None)
    used = len(st.calls) if st is not None and agent == env.agent_selection else 0
    return max(0, tb.max_calls - used)


def running_calls(env: Any) -> tuple[ToolCall, ...]:
    """The tool calls the acting agent has made in its running turn, oldest first (() without
    tools, or before its first): what an engine that makes calls as function calls (TRL's
    tool methods) hands back as each call's result."""
    st = getattr(getattr(env, "unwrapped", env), "_tools", None)
    return tuple(st.calls) if st is not None else ()


def visible_examples(task: Task) -> tuple:
    """The task's visible examples, in its tests' format (statements, or (stdin, stdout)
    pairs): ``meta["examples"]`` where a loader declares them, else the test statements the
    problem text quotes whole (MBPP shows its first); none when malformed. Never a hidden
    test: a case is visible only when declared so or already shown to the agent."""
    stdio = task.meta.get("format") == "stdio"
    ex = task.meta.get("examples")
    if ex is None and not stdio:
        tests = task.meta.get("tests") or ()
        ex = [t for t in tests if isinstance(t, str) and t.strip() and t.strip() in task.question]
    if not isinstance(ex, (list, tuple)):
        return ()
    ok = all(
        (isinstance(e, (list, tuple)) and len(e) == 2 and all(isinstance(x, str) for x in e))
        if stdio
        else isinstance(e, str)
        for e in ex
    )
    return tuple(tuple(e) if stdio else e for e in ex) if ok else ()


def shorten(text: str, limit: int) -> tuple[str, bool]:
    """``text`` cut to ``limit`` characters keeping its head and tail, and whether it was."""
    if len(text) <= limit:
        return text, False
    mark = f"\n[... {len(text) - limit:,} characters cut ...]\n"
    keep = max(0, limit - len(mark))
    head = keep * 2 // 3
    return text[:head] + mark + text[len(text) - (keep - head) :], True


_TICKS_RE = re.compile(r"`{3,}")
#: characters of a program's output that rewrite what is shown rather than show text:
#: C0 controls but tab and newline (a bare carriage return, ESC of an ANSI sequence,
#: backspace), DEL, C1 controls, and the bidirectional overrides and isolates
_CONTROL_RE = re.compile("[\x01-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _by_lines(text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` characters between whole lines, head and tail kept:
    a call's own fence lines survive and no fragment of a line starts a new one."""
    if len(text) <= limit:
        return text
    head = text[: limit * 2 // 3].rpartition("\n")[0]
    tail = text[len(text) - limit // 3 :].partition("\n")[2]
    return f"{head}\n[... {len(text) - len(head) - len(tail):,} characters cut ...]\n{tail}"


def break_fences(text: str) -> str:
    """Untrusted text with every run of three or more backticks broken (a zero-width space
    after each backtick of the run), so no part of it, cut anywhere, can close or open a
    block of the exchange."""
    return _TICKS_RE.sub(lambda m: "`\u200b" * len(m.group(0)), text)


class Toolbox:
    """The tools of one env: which, for which roles, with which budgets; runs the calls."""

    def __init__(
        self,
        family: Any,
        names: tuple[str, ...],
        roles: frozenset[str],
        max_calls: int,
        output_chars: int,
        timeout_s: float,
        time_budget_s: float,
    ) -> None:
        self.family = family
        self.names = names
        self.roles = roles
        self.max_calls = max_calls
        self.output_chars = output_chars
        self.timeout_s = timeout_s
        self.time_budget_s = time_budget_s
        self._sandbox: Any = None

    @classmethod
    def build(cls, workflow: Any, where: str = "", **given: Any) -> Toolbox | None:
        """A toolbox from the tool options (:data:`flowzoo.envs.options.TOOLS`), each
        checked, or None without tools. An unknown tool or role is a ValueError naming the
        valid ones; a tool option given without tools is refused (it would do nothing)."""
        unknown = sorted(set(given) - set(DEFAULTS))
        if unknown:
            raise TypeError(f"{where}unexpected option(s) {unknown}; valid: {', '.join(DEFAULTS)}")
        v = {o.name: o.validate(given.get(o.name, DEFAULTS[o.name]), where) for o in opt.TOOLS}
        fam = workflow.family
        valid = TOOLS_BY_FAMILY.get(fam.name, ())
        names = tuple(dict.fromkeys(v["tools"] or ()))
        if not names:
            extra = sorted(k for k in v if k != "tools" and v[k] != DEFAULTS[k])
            if extra:
                raise ValueError(
                    f"{where}{extra} given without tools: they apply only to an env with "
                    f"tools (tools={list(valid)} on {fam.name} envs)"
                )
            return None
        unknown = [n for n in names if n not in valid]
        if unknown:
            raise ValueError(
                f"{where}tools={list(names)} names unknown tool(s) {unknown} for "
                f"{fam.name} envs; valid: {', '.join(valid) or '(none)'}"
            )
        all_roles = list(dict.fromkeys(workflow.role_of(a) for a in workflow.agents()))
        roles = v["tool_roles"]
        bad = [r for r in roles or () if r not in all_roles]
        if bad:
            raise ValueError(
                f"{where}tool_roles={list(roles)} names unknown role(s) {bad}; valid: "
                f"{', '.join(all_roles)}"
            )
        return cls(
            fam,
            names,
            frozenset(all_roles if roles is None else roles),
            v["max_tool_calls"],
            v["tool_output_chars"],
            v["tool_timeout_s"],
            v["tool_time_budget_s"],
        )

    @property
    def sandbox(self) -> Any:
        """Where calls run: the code family's own sandbox (the one that scores), else the
        process backend's shared one (created at the first call)."""
        own = getattr(self.family, "sandbox", None)
        if own is not None:
            return own
        if self._sandbox is None:
            from flowzoo.tasks.code.family import shared_sandbox

            self._sandbox = shared_sandbox("process", {})
        return self._sandbox

    def allowed(self, role: str) -> bool:
        return role in self.roles

    def instructions(self, role: str) -> str:
        """The lines a tool role's prompt gains: the tools, the syntax, the budget."""
        if role not in self.roles:
            return ""
        what = {
            "run": "run runs your program and checks it on the problem's visible examples",
            "python": "python runs a short Python program and shows what it prints",
        }
        name = self.names[0]
        return (
            f"Tools: {'; '.join(what[n] for n in self.names)}. To call one, write a line "
            f"```tool {name}, the program, then a line ```. Up to {self.max_calls} calls this "
            "turn; a reply without a call is your answer.\n"
        )

    def new_info(self) -> dict[str, Any]:
        """The per-agent counters ``infos`` carry with tools on."""
        return {"tool_calls": 0, "tool_failures": 0, "tool_truncations": 0, "tool_time_s": 0.0}

    def count(self, info: dict[str, Any], call: ToolCall) -> None:
        info["tool_calls"] += 1
        info["tool_failures"] += call.status != "ok"
        info["tool_truncations"] += "tool_output_truncated" in call.flags
        info["tool_time_s"] = round(info["tool_time_s"] + call.wall_s, 6)

    def compose(self, state: ToolState, limit: int) -> tuple[str, bool]:
        """The observation of a turn with calls: its prompt, each call and its result in an
        ```` ```output ```` block, and how many calls are left; when longer than ``limit``,
        the prompt is kept whole (it holds the problem) and the exchange keeps its tail."""
        parts = []
        for c in state.calls:
            parts.append(f"{c.shown.rstrip()}\n```output\n{c.result}\n```\n")
        left = self.max_calls - len(state.calls)
        parts.append(
            f"[{left} tool call{'s' if left != 1 else ''} left this turn]\n"
            if left > 0
            else "[no tool calls left: write your answer]\n"
        )
        base = state.base if state.base.endswith("\n") else state.base + "\n"
        exchange = "".join(parts)
        if len(base) + len(exchange) <= limit:
            return base + exchange, False
        mark = "[... earlier tool calls cut ...]\n"
        room = limit - len(base) - len(mark)
        kept: list[str] = []  # whole calls from the latest back: a cut never splits a block
        for part in reversed(parts):
            if sum(map(len, kept)) + len(part) > room:
                break
            kept.insert(0, part)
        if len(kept) > 1:
            return base + mark + "".join(kept), True
        # the latest call alone does not fit: its action and its result are each shortened
        # inside their own lines, so the fences stay whole and balanced; the prompt stays
        # whole even where nothing of the exchange fits (the model's fit then cuts it)
        head = mark if len(state.calls) > 1 else ""
        each = (limit - len(base) - len(head) - len(parts[-1]) - 16) // 2
        if each < 256:
            return base + head + parts[-1], True
        last = state.calls[-1]
        shown, result = _by_lines(last.shown.rstrip(), each), shorten(last.result, each)[0]
        return base + head + f"{shown}\n```output\n{result}\n```\n" + parts[-1], True

    # ------------------------------------------------------------------ running a call
    def call(
        self,
        parsed: Parsed,
        action: str,
        prompt: str,
        task: Task,
        state: ToolState,
        action_flags: list[str],
    ) -> ToolCall:
        """Run one call (or refuse it) and charge its sandbox time to the episode: a
        :class:`ToolCall` with its shown result and flags (``action_flags``: the engine's, on
        the action's text), never an exception."""
        t0 = time.monotonic()
        flags = [*action_flags, *parsed.flags]
        left = self.time_budget_s - state.spent_s
        cut_by = {"action_truncated", "cut_at_budget"} & set(flags)
        if cut_by and ("tool_call_unclosed" in flags or action.rstrip() == parsed.shown.rstrip()):
            # an action cut (at max_action_chars, or at the token budget) that ends in or at
            # its call: the call's end may be the cut's, and running it would run a prefix
            # of the program and report it as the program's result
            flags.append("tool_bad_args")
            status, text = (
                "refused",
                (
                    "the call was cut before it ended (max_action_chars or the turn's token "
                    "budget); write a shorter program"
                ),
            )
        else:
            status, text = self._dispatch(parsed, task, left, flags)
        wall = time.monotonic() - t0 if status != "refused" else 0.0
        state.spent_s += wall
        text, fixed = replace_surrogates(text)  # the program's output is untrusted text:
        if fixed:  # what the engine does to an action, and flagged the same way
            flags.append("tool_output_surrogate_replaced")
        if "\x00" in text:
            text = text.replace("\x00", "")
            flags.append("tool_output_nul_stripped")
        text, n = _CONTROL_RE.subn("\ufffd", text)
        if n:  # escapes, carriage returns, bidi overrides: they rewrite what a reader sees
            flags.append("tool_output_control_replaced")
        text, cut = shorten(break_fences(text), self.output_chars)
        if cut and "tool_output_truncated" not in flags:
            flags.append("tool_output_truncated")
        if status in STATUS_FLAGS:
            flags.append(STATUS_FLAGS[status])
        flags = list(dict.fromkeys(flags))
        return ToolCall(
            prompt, action, parsed.name, parsed.args, parsed.body, status, text, tuple(flags),
            wall, parsed.shown,
        )  # fmt: skip

    def _dispatch(self, p: Parsed, task: Task, left: float, flags: list[str]) -> tuple[str, str]:
        """(status, result text) of a call; every refusal appends its flag."""
        if p.name not in self.names:
            flags.append("tool_unknown")
            named = f"unknown tool {p.name!r}" if p.name else "the call names no tool"
            return "refused", f"{named}; valid: {', '.join(self.names)} (```tool {self.names[0]})"
        hidden = [a for a in p.args if a in HIDDEN_WORDS]
        if hidden:
            flags.append("tool_hidden_refused")
            return "refused", (
                "hidden tests and answers are never run or shown by a tool; "
                f"{p.name} sees only your program"
                + (" and the visible examples" * (p.name == "run"))
            )
        if not p.body.strip():
            flags.append("tool_bad_args")
            return "refused", f"{p.name} needs a program between ```tool {p.name} and ```"
        if len(p.body) > MAX_PROGRAM_CHARS:
            flags.append("tool_bad_args")
            return (
                "refused",
                f"the program is {len(p.body):,} characters; at most {MAX_PROGRAM_CHARS:,}",
            )
        if left <= 0.05:
            flags.append("tool_time_budget")
            return "refused", "the episode's tool time is spent; write your answer"
        try:
            if p.name == "run":
                return self._run(p, task, left, flags)
            if p.args:
                flags.append("tool_bad_args")
                return (
                    "refused",
                    f"python takes no arguments after its name, got {' '.join(p.args)!r}",
                )
            res = self.sandbox.run(p.body, timeout_s=min(self.timeout_s, left))
        except Exception as e:  # a sandbox that failed to start: the call fails, the env goes on
            return "sandbox_error", f"the sandbox could not run the program ({type(e).__name__})"
        if res.truncated:
            flags.append("tool_output_truncated")
        return res.status, _render(res)

    def _run(self, p: Parsed, task: Task, left: float, flags: list[str]) -> tuple[str, str]:
        """``run``: the program once (stdin: the first visible example's input), then judged
        on the visible examples the call selects (numbers after ``run``; default: all)."""
        examples = visible_examples(task)
        picked = _select(p.args, len(examples), flags)
        if isinstance(picked, str):
            return "refused", picked
        if re.search(r"`{3}|~{3}", p.body):
            # read back from a fenced block, such a program could hide another block inside
            # a string, and run that instead of itself
            flags.append("tool_bad_args")
            return "refused", "run takes a program without ``` or ~~~ in it"
        text = f"```python\n{p.body}\n```"
        program = self.family.program_of(task, text)
        if program is None:
            flags.append("tool_bad_args")
            return "refused", "no program found in the call"
        stdio = task.meta.get("format") == "stdio"
        stdin = (examples[0][0] if examples else "") if stdio else None
        # one call, one limit: the run and the examples' judge share tool_timeout_s (and
        # what is left of the episode's budget), so a call never takes twice its limit
        limit = min(self.timeout_s, left)
        deadline = time.monotonic() + limit
        res = self.sandbox.run(program, stdin=stdin, timeout_s=limit)
        if res.truncated:
            flags.append("tool_output_truncated")
        out = _render(res)
        chosen = [examples[i] for i in picked]
        if not examples:
            return res.status, out + "\nexamples: none visible for this problem"
        rest = deadline - time.monotonic()
        if rest <= 0.1:
            spent = "the episode's tool time" if left < self.timeout_s else "the call's time"
            flags.append("tool_time_budget" if left < self.timeout_s else "tool_timeout")
            return res.status, out + f"\nexamples: not checked ({spent} is spent)"
        checked = self._examples(task, text, chosen, rest)
        if time.monotonic() >= deadline - 0.05:  # the judge used the call's time up
            flags.append("tool_timeout")
            checked += (
                "\n(the call's time ran out while the examples were judged: an example "
                "not answered was cut, not necessarily failed)"
            )
        return res.status, out + "\n" + checked

    def _examples(self, task: Task, text: str, chosen: list, limit_s: float) -> str:
        """Which ``chosen`` examples the program passes, judged as scoring judges (in the
        same sandbox) by a family of its own: these verdicts never become rewards."""
        from flowzoo.tasks.code.family import CodeFamily, is_stdio

        fam = self.family
        judge = CodeFamily(
            fam.sandbox,
            partial_credit=True,
            test_timeout_s=limit_s,
            case_timeout_s=min(getattr(fam, "case_timeout_s", limit_s), limit_s),
            time_budget_s=limit_s,
            early_stop=False,
        )
        meta = {**task.meta, "tests": tuple(chosen)}
        meta.pop("examples", None)
        if meta.get("time_limit"):
            meta["time_limit"] = min(float(meta["time_limit"]), limit_s)
        v = judge.score(Task(task.id, task.question, "", task.family, meta), text)
        cases = v.details.get("cases")
        if not cases:
            return f"examples: not checked ({v.reason})"
        lines = [f"examples: {sum(c[0] for c in cases)}/{len(cases)} passed"]
        for i, ((ok, val, err), ex) in enumerate(zip(cases, chosen, strict=False)):
            what = f"input {ex[0][:60]!r} expected {ex[1][:60]!r}" if is_stdio(task) else ex[:100]
            got = "" if ok else f" -> {_got(val, err)}"
            lines.append(f"{i + 1}. {'passed' if ok else 'failed'}: {what}{got}")
        return "\n".join(lines)


def _select(args: tuple[str, ...], n: int, flags: list[str]) -> list[int] | str:
    """The 0-based visible examples a ``run`` call names (none named: all), or the refusal:
    a number past the visible ones asks for a hidden test."""
    if not args or args == ("all",):
        return list(range(n))
    out = []
    for a in args:
        if not (a.isascii() and a.isdigit()) or len(a) > 4:
            flags.append("tool_bad_args")
            return f"run takes visible example numbers (1-{n}) or nothing, got {a!r}"
        k = int(a)
        if k < 1:
            flags.append("tool_bad_args")
            return f"run takes visible example numbers from 1, got {a!r}"
        if k > n:
            flags.append("tool_hidden_refused")
            return (
                f"there {'is' if n == 1 else 'are'} {n} visible example{'s' * (n != 1)}; "
                "hidden tests are never run by a tool"
            )
        out.append(k - 1)
    return list(dict.fromkeys(out))


def _got(value: str | None, error: str | None) -> str:
    """What a failed example got, as the judge recorded it, in words."""
    if value is not None and error in (None, "AssertionError", "wrong_output"):
        return f"got {value[:80]}"
    if isinstance(value, str) and value.startswith("raise:"):
        return f"raised {value[6:60]}"
    words = {"CandidateTimeout": "timed out", "CandidateLost": "not answered (the run ended)"}
    return words.get(str(error), str(error)[:80])


def _render(res: Any) -> str:
    """A sandbox run as the agent reads it: exit status, then stdout and stderr if any."""
    code = "-" if res.exit_code is None else res.exit_code
    lines = [f"exit: {code} ({res.status})"]
    if res.stdout:  # a CRLF line end is a line end, not a carriage return
        lines += ["stdout:", res.stdout.replace("\r\n", "\n").rstrip("\n")]
    if res.stderr:
        lines += ["stderr:", res.stderr.replace("\r\n", "\n").rstrip("\n")]
    return "\n".join(lines)
