"""WorkflowEnv: the one turn-ordered PettingZoo AEC engine every workflow runs on.

One episode is one problem. Agents act in the order the workflow dictates; each sees a text
prompt and answers with a text completion. When the workflow ends, the task family's
verifier scores the final answer and every agent receives the team reward (plus a per-role
signal in ``reward_mode="role"``, less ``overlong_penalty`` for turns cut at their token
budget). This is the one place rewards are mixed: a trainer trains on what the env gives
(``infos[agent]["turn_rewards"]``, one per turn). Whatever *text* an agent emits, the engine
never raises on it: ``None`` and ``bytes`` are turned into text, surrogate code points (no
UTF-8 encoder or tokenizer takes them) repaired (a pair joined, a lone one U+FFFD), NUL
characters stripped, oversize text cut, and every fallback is flagged in ``infos``. Anything
else (an int, a list, an array) is not a completion: ``step`` raises TypeError before the
turn is recorded.

Copies: ``copy.copy``/``copy.deepcopy`` of an env is a branch of its state (tree rollouts,
TRL's per-completion resume): the episode, the AEC bookkeeping, the RNG and the spaces are
copied; the workflow, the task family (its sandbox) and the task set are shared. Pickling
carries the workflow, family and tasks by value and a shared sandbox by its recipe (backend
and options): unpickled, it is the process's shared sandbox for that recipe (the same object
in this process, a new one in another); a sandbox passed as an instance cannot be pickled.
"""

from __future__ import annotations

import copy
import io
import pickle
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium.spaces import Dict as DictSpace
from gymnasium.spaces import Discrete
from pettingzoo import AECEnv

from flowzoo.envs import options as opt
from flowzoo.envs.options import UnknownTaskError  # noqa: F401 (its home before)
from flowzoo.envs.options import short_repr as _short  # an action may be megabytes
from flowzoo.envs.spaces import UnicodeText, replace_surrogates
from flowzoo.envs.tools import Toolbox, ToolState, parse_call
from flowzoo.envs.workflows.base import Episode, Outcome, Turn, Workflow
from flowzoo.tasks.base import Task, TaskSet

REWARD_MODES = ("team", "role")
RENDER_MODES = ("ansi", "human")
#: what every agent's info holds once the episode ended, terminated or truncated
FINAL_INFO_KEYS = (
    "final_answer",
    "correct",
    "score",
    "team_reward",
    "role_reward",
    "turn_rewards",
    "flags",
    "flags_by_agent",
    "n_flags",
)


class Cut(str):
    """A completion its generator stopped at the token budget. Still a ``str`` (any text
    action space takes it); the env flags the turn ``cut_at_budget`` and, with
    ``overlong_penalty``, lowers that turn's reward. A generator that cannot tell passes a
    plain ``str``."""

    __slots__ = ()


@dataclass(frozen=True)
class TurnView:
    """One turn of :meth:`WorkflowEnv.turn_log`."""

    agent: str
    role: str
    prompt: str
    action: str
    flags: tuple[str, ...]
    #: the turn's tool calls (:class:`flowzoo.envs.tools.ToolCall`), in order; () without tools
    calls: tuple = ()


class WorkflowEnv(AECEnv):
    """A multi-agent LLM workflow as an AEC environment (see ``flowzoo.make_env``)."""

    metadata = {
        "render_modes": list(RENDER_MODES),
        "name": "flowzoo_workflow_v0",
        "is_parallelizable": False,
    }

    def __init__(
        self,
        workflow: Workflow,
        tasks: TaskSet,
        *,
        reward_mode: str = "team",
        role_weight: float = 0.5,
        max_cycles: int | None = None,
        max_prompt_chars: int = 16384,
        max_action_chars: int = 8192,
        overlong_penalty: float = 0.0,
        render_mode: str | None = None,
        env_id: str = "",
        **tool_options: Any,
    ) -> None:
        super().__init__()
        given = {
            "reward_mode": reward_mode,
            "role_weight": role_weight,
            "max_cycles": max_cycles,
            "max_prompt_chars": max_prompt_chars,
            "max_action_chars": max_action_chars,
            "overlong_penalty": overlong_penalty,
            "render_mode": render_mode,
        }
        # declared once, with help, in flowzoo.envs.options; values come back as plain Python
        v = {o.name: o.validate(given[o.name]) for o in opt.ENGINE}
        self.workflow = workflow
        self.family = workflow.family
        self.tasks = tasks
        self.reward_mode = v["reward_mode"]
        self.role_weight = float(v["role_weight"])
        self.overlong_penalty = float(v["overlong_penalty"])
        self.max_cycles = (
            v["max_cycles"] if v["max_cycles"] is not None else workflow.max_turns() + 1
        )
        self.max_prompt_chars = v["max_prompt_chars"]
        self.max_action_chars = v["max_action_chars"]
        self.render_mode = v["render_mode"]
        self.env_id = env_id
        self.metadata = {**self.metadata, "name": env_id or f"flowzoo_{workflow.name}"}
        #: the tools (``tools=`` and the other ``opt.TOOLS``; None without): docs/tools.md
        self.toolbox = Toolbox.build(workflow, f"{env_id}: " if env_id else "", **tool_options)
        if self.toolbox is not None and v["max_cycles"] is None:  # each call is a step
            self.max_cycles = workflow.max_turns() * (1 + self.toolbox.max_calls) + 1

        self.possible_agents = workflow.agents()
        self._roles = {a: workflow.role_of(a) for a in self.possible_agents}
        self.observation_spaces = {
            a: DictSpace(
                {
                    "prompt": UnicodeText(self.max_prompt_chars),
                    "turn": Discrete(self.max_cycles + 1),
                }
            )
            for a in self.possible_agents
        }
        self.action_spaces = {a: UnicodeText(self.max_action_chars) for a in self.possible_agents}
        self._rng = np.random.default_rng()
        self.episode: Episode | None = None
        self._prompt = ""
        self._step = 0
        self._closed = False

    # ------------------------------------------------------------------ PettingZoo API
    def observation_space(self, agent: str) -> DictSpace:
        return self.observation_spaces[self._known("observation_space", agent)]

    def action_space(self, agent: str) -> UnicodeText:
        return self.action_spaces[self._known("action_space", agent)]

    def role_of(self, agent: str) -> str:
        """The role an agent plays (``solver_1`` -> ``solver``)."""
        return self._roles[self._known("role_of", agent)]

    def _known(self, what: str, agent: Any) -> str:
        """``agent``, or a ValueError naming the valid ones (every per-agent entry point)."""
        if not (isinstance(agent, str) and agent in self._roles):
            raise ValueError(
                f"{what}({_short(agent)}): unknown agent {_short(agent)}; valid: "
                f"{', '.join(self.possible_agents)}"
            )
        return agent

    def last(self, observe: bool = True) -> tuple:
        """PettingZoo's ``last``; before ``reset`` or after ``close`` a RuntimeError."""
        self._check_open("last()")
        return super().last(observe)

    def agent_iter(self, max_iter: int = 2**63):
        """PettingZoo's ``agent_iter``; before ``reset`` or after ``close`` a RuntimeError."""
        self._check_open("agent_iter()")
        return super().agent_iter(max_iter)

    @property
    def roles(self) -> list[str]:
        return list(dict.fromkeys(self._roles.values()))

    def turn_tokens(self) -> dict[str, int]:
        """Each role's default token budget: enough for the formats this workflow's roles
        write, so training and evaluation do not cut them (``max_new_tokens=0``)."""
        return {r: self.workflow.token_budget(r) for r in self.roles}

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        # every input is checked, and an explicit task resolved, before any state changes
        opt.check_seed(seed)
        task = self._explicit_task(options)
        self._closed = False
        if seed is not None:
            seed = int(seed)
            self._rng = np.random.default_rng(seed)
            for i, a in enumerate(self.possible_agents):
                self.action_spaces[a].seed(seed + i)
        if task is None:
            task = self.tasks[int(self._rng.integers(len(self.tasks)))]
        self.episode = Episode(task=task, family=self.family)
        self.agents = list(self.possible_agents)
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos = {a: self._base_info(a) for a in self.agents}
        self._tools = ToolState() if self.toolbox is not None else None
        self._step = 0
        self.agent_selection = self.workflow.first(self.episode)
        self._prompt = self._build_prompt(self.agent_selection)

    def check_reset(self, seed: Any = None, options: Any = None) -> int | None:
        """Raise what ``reset(seed, options)`` would raise, changing nothing: views check
        first, then touch their own state. Returns the seed as a Python int (a NumPy integer
        is a valid seed here; Gymnasium's own reset takes only ``int``)."""
        opt.check_seed(seed)
        self._explicit_task(options)
        return None if seed is None else int(seed)

    def observe(self, agent: str) -> dict[str, Any]:
        self._known("observe", agent)
        self._check_open("observe()")
        live = agent in self.agents and agent == self.agent_selection and not self._done()
        prompt = self._prompt if live else ""  # a removed agent has no turn, so no prompt
        return {"prompt": prompt, "turn": np.int64(min(self._step, self.max_cycles))}

    def step(self, action: Any) -> None:
        self._check_open("step()")
        if not self.agents:
            raise RuntimeError(
                f"step({_short(action)}) after the episode of {self} ended (every agent has "
                "been removed); call reset() to start the next one"
            )
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            if action is not None:  # every agent ends at once: the episode has ended
                raise RuntimeError(
                    f"step({_short(action)}) for {agent!r} after the episode of {self} ended: "
                    "the only valid action of a terminated or truncated agent is None "
                    "(PettingZoo's dead step); call reset() to start the next one"
                )
            self._was_dead_step(action)
            return
        text, flags = self._coerce_action(action)  # raises before anything is recorded
        if self.toolbox is not None and self._tool_step(agent, text, flags):
            return  # a tool call: the same agent observes its result and acts again
        ep = self.episode
        turn = Turn(
            agent=agent, role=self._roles[agent], prompt=self._prompt, action=text, flags=flags
        )
        if self._tools is not None:  # the turn's calls and their flags go with its message
            turn.calls = list(self._tools.calls)
            turn.flags += [f for c in turn.calls for f in c.flags if f not in turn.flags]
        ep.turns.append(turn)
        try:
            nxt = self.workflow.act(agent, text, ep, turn)
        except Exception:  # a workflow's parser bug: the env stays as it was, and says so
            ep.turns.pop()
            raise
        if self._tools is not None:
            self._tools.calls, self._tools.base = [], ""
        self._cumulative_rewards[agent] = 0.0
        self._clear_rewards()
        self._step += 1
        info = self.infos[agent]
        info["turn"] = len(ep.turns_of(agent))
        info["step"] = self._step
        if turn.flags:
            info["flags"] = sorted(set(info.get("flags", [])) | set(turn.flags))
        if nxt is None:
            self._finish(self.workflow.outcome(ep))
        elif self._step >= self.max_cycles:
            self._truncate()
        else:
            if nxt not in self._roles:
                raise RuntimeError(f"workflow {self.workflow.name} named unknown agent {nxt!r}")
            self.agent_selection = nxt
            self._prompt = self._build_prompt(nxt)
        self._accumulate_rewards()
        if self.render_mode == "human":
            self.render()

    def render(self) -> str | None:
        text = self.transcript()
        if self.render_mode == "human":
            # never raises on what an agent wrote (a lone surrogate, a character the
            # terminal's encoding lacks): the turn is already recorded when this prints
            enc = getattr(sys.stdout, "encoding", None) or "utf-8"
            try:
                safe = text.encode(enc, "backslashreplace").decode(enc, "replace")
            except LookupError:
                safe = text.encode("ascii", "backslashreplace").decode("ascii")
            print(safe)
            return None
        return text

    def close(self) -> None:
        """End the episode; ``step``/``observe`` then raise until ``reset``."""
        self.episode = None
        self._closed = True

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise RuntimeError(f"{what} on {self} after close(); call reset() to reopen it")
        if self.episode is None:
            raise RuntimeError(f"{what} on {self} before reset(); call reset() first")

    # ------------------------------------------------------------------ helpers
    def transcript(self) -> str:
        """The episode so far as readable text."""
        if self.episode is None:
            return ""
        ep = self.episode
        lines = [
            f"=== {self.env_id or self.workflow.name} | task {ep.task.id}",
            f"Problem: {ep.task.question}",
        ]
        for i, t in enumerate(ep.turns):
            flag = f"  [flags: {', '.join(t.flags)}]" if t.flags else ""
            lines.append(f"--- turn {i} | {t.agent} ({t.role}){flag}")
            lines += [f"[tool {c.name or '?'}: {c.status}]" for c in t.calls]
            lines.append(t.action)
        out = ep.data.get("outcome")
        if out is not None:
            lines.append(
                f"=== final answer: {out.verdict.extracted!r} | correct: {out.verdict.correct}"
            )
        return "\n".join(lines)

    def episode_over(self) -> bool:
        """No agent is left to act: every remaining agent is terminated or truncated."""
        return all(self.terminations[a] or self.truncations[a] for a in self.agents)

    def turn_log(self) -> tuple[TurnView, ...]:
        """The episode so far, turn by turn, as read-only views (who acted, in which role,
        what they said, which fallbacks fired): what a trainer or analyst may read beyond
        ``infos`` without reaching into the engine."""
        if self.episode is None:
            return ()
        return tuple(
            TurnView(t.agent, t.role, t.prompt, t.action, tuple(t.flags), tuple(t.calls))
            for t in self.episode.turns
        )

    def behaviour_log(self) -> tuple[bool | None, ...]:
        """Per turn of :meth:`turn_log`: whether it shows its role's considered behaviour
        (True), the shortcut (False), or cannot tell (None) — the workflow's behaviour menu
        (docs/testbed.md), read by evaluations to measure each role's behaviour rate."""
        if self.episode is None:
            return ()
        return tuple(
            self.workflow.behaviour(self.episode, i) for i in range(len(self.episode.turns))
        )

    def _done(self) -> bool:
        return bool(self.agents) and self.episode_over()

    def _explicit_task(self, options: Any) -> Task | None:
        """The task ``reset``'s options name (None: draw one): :func:`opt.explicit_task`."""
        return opt.explicit_task(options, self.family.name, self.tasks, str(self))

    def _base_info(self, agent: str) -> dict[str, Any]:
        info = {
            "role": self._roles[agent],
            "turn": 0,
            "step": 0,
            "task_id": self.episode.task.id if self.episode else "",
        }
        return info if self.toolbox is None else {**info, **self.toolbox.new_info()}

    def pending(self) -> list[tuple[str, str]]:
        """``(agent, prompt)`` of the agent to act and of the agents after it whose turns do
        not depend on its action (``Workflow.independent_after``), prompts as they will be
        observed: a rollout samples them in one batch, then steps them in this order."""
        if self._done():
            return []
        agent = self.agent_selection
        out = [(agent, self._prompt)]
        for nxt in self.workflow.independent_after(agent, self.episode):
            if self._step + len(out) >= self.max_cycles:
                break
            out.append((nxt, self._render_prompt(nxt)[0]))
        return out

    def _render_prompt(self, agent: str) -> tuple[str, list[str]]:
        """``agent``'s prompt now and its flags: surrogate code points (a task's text may
        hold them) repaired, and its tail kept when too long."""
        p = self.workflow.prompt(agent, self.episode)
        if self.toolbox is not None:
            p += self.toolbox.instructions(self._roles[agent])
        p, fixed = replace_surrogates(p)
        flags = ["prompt_surrogate_replaced"] if fixed else []
        if len(p) > self.max_prompt_chars:
            return p[-self.max_prompt_chars :], [*flags, "prompt_truncated"]
        return p, flags

    def _tool_step(self, agent: str, text: str, flags: list[str]) -> bool:
        """Run the call ``text`` holds when this agent may make one now (True: it acts
        again on the exchange); False: ``text`` is its turn's message (a call in it by a role
        without tools, or past the budget, is flagged and not run)."""
        tb, st = self.toolbox, self._tools
        parsed = parse_call(text)
        if parsed is None:
            return False
        if not tb.allowed(self._roles[agent]) or len(st.calls) >= tb.max_calls:
            ok = tb.allowed(self._roles[agent])
            flags.append("tool_over_budget" if ok else "tool_not_allowed")
            return False
        st.base = st.base or self._prompt
        call = tb.call(parsed, text, self._prompt, self.episode.task, st, flags)
        st.calls.append(call)
        info = self.infos[agent]
        tb.count(info, call)
        info["flags"] = sorted(set(info.get("flags", [])) | set(call.flags))
        self._cumulative_rewards[agent] = 0.0
        self._clear_rewards()
        self._step += 1
        info["step"] = self._step
        if self._step >= self.max_cycles:
            self._truncate()
        else:
            self._prompt, cut = tb.compose(st, self.max_prompt_chars)
            if cut:
                info["flags"] = sorted(set(info["flags"]) | {"prompt_truncated"})
        self._accumulate_rewards()
        if self.render_mode == "human":
            self.render()
        return True

    def _build_prompt(self, agent: str) -> str:
        p, flags = self._render_prompt(agent)
        if flags:
            self.infos[agent]["flags"] = sorted(
                set(self.infos[agent].get("flags", [])) | set(flags)
            )
        return p

    def _coerce_action(self, action: Any) -> tuple[str, list[str]]:
        flags: list[str] = []
        if action is None:
            text, flags = "", ["none_action"]
        elif isinstance(action, str):
            text = str.__str__(action)  # a plain str, whatever the subclass overrides
            if isinstance(action, Cut):
                flags.append("cut_at_budget")
        elif isinstance(action, (bytes, bytearray)):
            text = bytes(action).decode("utf-8", errors="replace")
            flags.append("bytes_action")
        else:
            raise TypeError(
                f"action for {self.agent_selection!r} must be a str (the completion), got "
                f"{type(action).__name__}"
            )
        text, fixed = replace_surrogates(text)  # no UTF-8 encoder or tokenizer takes them
        if fixed:
            flags.append("surrogate_replaced")
        if "\x00" in text:
            text = text.replace("\x00", "")
            flags.append("nul_stripped")
        if len(text) > self.max_action_chars:
            text = text[: self.max_action_chars]
            flags.append("action_truncated")
        if not text.strip():
            flags.append("empty_action")
        return text, flags

    def _finish(self, out: Outcome) -> None:
        self.episode.data["outcome"] = out
        team = float(out.verdict.score)
        for t in self.episode.turns:  # e.g. a program caught tampering with its judge
            for f in self.family.flags(self.episode.task, t.action):
                if f not in t.flags:
                    t.flags.append(f)
        flags_by_agent = {
            a: sorted({f for t in self.episode.turns_of(a) for f in t.flags}) for a in self.agents
        }
        parse_failures = sum(len(v) for v in flags_by_agent.values())
        for a in self.agents:
            role_sig = float(out.role_signals.get(a, 0.0))
            if self.reward_mode == "team":
                r = team
            else:
                r = (1.0 - self.role_weight) * team + self.role_weight * role_sig
            # per turn: a turn cut at its budget pays the penalty (its end is not the model's)
            pen = self.overlong_penalty
            turn_r = [
                r - pen if "cut_at_budget" in t.flags else r for t in self.episode.turns_of(a)
            ]
            self.rewards[a] = sum(turn_r) / len(turn_r) if turn_r else r
            self.terminations[a] = True
            info = self.infos[a]
            info.update(out.info)
            info.update(
                final_answer=out.verdict.extracted,
                correct=bool(out.verdict.correct),
                score=team,
                verdict_reason=out.verdict.reason,
                team_reward=team,
                role_reward=role_sig,
                turn_rewards=turn_r,
                flags=sorted(set(info.get("flags", [])) | set(flags_by_agent[a])),
                flags_by_agent=flags_by_agent,
                n_flags=parse_failures,
            )
        self.agent_selection = self.agents[0]

    def _truncate(self) -> None:
        """``max_cycles`` ended the episode: no answer, reward 0, and the same final keys as
        a finished episode (``FINAL_INFO_KEYS``) so a reader needs no second code path."""
        flags_by_agent = {
            a: sorted({f for t in self.episode.turns_of(a) for f in t.flags}) for a in self.agents
        }
        for a in self.agents:
            self.truncations[a] = True
            self.rewards[a] = 0.0
            info = self.infos[a]
            info["flags"] = sorted(set(info.get("flags", [])) | {"max_cycles"})
            flags_by_agent[a] = sorted(set(flags_by_agent[a]) | {"max_cycles"})
        n_flags = sum(len(v) for v in flags_by_agent.values())
        for a in self.agents:
            self.infos[a].update(
                final_answer=None,
                correct=False,
                score=0.0,
                verdict_reason="truncated at max_cycles",
                team_reward=0.0,
                role_reward=0.0,
                turn_rewards=[0.0] * len(self.episode.turns_of(a)),
                flags_by_agent=flags_by_agent,
                n_flags=n_flags,
                truncated=True,
            )
        self.agent_selection = self.agents[0]

    def __str__(self) -> str:
        return self.metadata["name"]

    #: what every copy of an env shares with it (not episode state: read-only or a resource)
    _SHARED = ("workflow", "family", "tasks", "_roles", "possible_agents", "metadata", "toolbox")

    def __deepcopy__(self, memo: dict) -> WorkflowEnv:
        """A branch of this env's current state (tree rollouts, TRL's per-completion resume):
        the episode, AEC state, RNG and spaces are copied; the workflow, the task family (and
        its sandbox) and the task set are shared, also where the episode refers to them."""
        new = object.__new__(type(self))
        memo[id(self)] = new
        for k in self._SHARED:
            v = self.__dict__[k]
            memo[id(v)] = v
        memo[id(self.family)] = self.family  # the episode's reference, whatever the attr name
        if self.episode is not None:
            memo[id(self.episode.task)] = self.episode.task  # frozen; shared with the task set
        for k, v in self.__dict__.items():
            new.__dict__[k] = v if k in self._SHARED else copy.deepcopy(v, memo)
        return new

    def __copy__(self) -> WorkflowEnv:
        """Same as :meth:`__deepcopy__`: a shallow copy would share the episode, which no
        caller wants (stepping one would step both)."""
        return self.__deepcopy__({})

    def __reduce_ex__(self, protocol: Any) -> tuple:
        """Pickle by value, a shared sandbox by its recipe (see the module docstring)."""
        buf = io.BytesIO()
        try:
            _EnvPickler(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(self.__dict__)
        except (TypeError, AttributeError, pickle.PicklingError) as e:
            raise TypeError(
                f"cannot pickle {self}: {e}. A sandbox passed to make_env as an instance "
                "cannot be pickled; pass sandbox=<backend name> (re-created from its recipe "
                "on unpickle), or branch the env in-process with copy.deepcopy (shares it)"
            ) from None
        return (_unpickle_env, (type(self), buf.getvalue()))


class _EnvPickler(pickle.Pickler):
    """Pickles a sandbox made by ``shared_sandbox(backend, options)`` as that call."""

    def reducer_override(self, obj: Any) -> Any:
        code = sys.modules.get("flowzoo.tasks.code.family")
        if code is None or isinstance(obj, (str, bytes, int, float, tuple, list, dict)):
            return NotImplemented
        for (backend, items), sb in list(code._SANDBOXES.items()):
            if sb is obj:
                return (code.shared_sandbox, (backend, dict(items)))
        return NotImplemented


def _unpickle_env(cls: type, blob: bytes) -> WorkflowEnv:
    new = object.__new__(cls)
    new.__dict__.update(pickle.loads(blob))
    return new
