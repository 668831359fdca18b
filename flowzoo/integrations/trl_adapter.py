"""Train one role of a workflow with TRL's ``GRPOTrainer`` while the other roles are played by
given policies.

TRL samples a group of completions per prompt and scores each one; a workflow role's reward
is only known once the *rest* of the workflow has run on that completion. ``RoleEpisodes``
bridges the two without touching TRL's loop:

- ``dataset()``: one row per problem, holding the controlled role's prompt at its first turn
  (the workflow played by ``others`` up to there) and a ``flowzoo_key``; the env state at that
  point is kept in memory.
- ``reward``: a TRL reward function. For every completion it resumes a copy of that row's
  state, plays the completion, lets ``others`` finish the workflow, and returns the real
  verifier's reward for the controlled agent (team reward by default).
- ``environment_factory``: for models whose chat template supports tool calling, a
  ``FlowzooToolEnv`` per rollout (``reset`` returns the prompt, the model answers by calling
  ``submit``, later turns of a multi-turn role come back as the tool's result, ``get_reward``
  scores the episode). An env made with ``tools=`` adds the controlled role's tools as
  methods (``run`` on code envs, ``python`` on math envs): each call is made as the env's
  own call text (judged, budgeted and flagged as any other) and returns the call's result,
  so the role can run its program before it submits. TRL 1.16 passes a completion to an
  environment only through tool calls and rejects tokenizers without a tool-calling
  template, so models without one (the project's tiny char-level models) use ``dataset()``
  + ``reward``.

Nothing here imports TRL or torch: it only produces what TRL consumes.
"""

from __future__ import annotations

import copy
import functools
import hashlib
from collections.abc import Callable, Sequence
from typing import Any

from flowzoo.envs.core import WorkflowEnv
from flowzoo.envs.tools import running_calls, tool_roles
from flowzoo.envs.toolschema import call_text
from flowzoo.envs.wrappers.single_agent import SingleAgentEnv


def completion_text(completion: Any) -> str:
    """A TRL completion as text: a string (standard format) or the last message's content
    (conversational format, a list of ``{"role", "content"}`` dicts)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Sequence) and completion:
        last = completion[-1]
        if isinstance(last, dict):
            content = last.get("content", "")
            if isinstance(content, list):  # multimodal-style content parts
                return "".join(p.get("text", "") for p in content if isinstance(p, dict))
            return str(content)
    if isinstance(completion, dict):
        return str(completion.get("content", ""))
    raise TypeError(f"cannot read a completion of type {type(completion).__name__}")


def _seed_of(*parts: Any) -> int:
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:4], "little")


class RoleEpisodes:
    """One role of one workflow as TRL GRPO inputs (see the module docstring).

    ``env_factory``: a zero-argument callable returning a fresh :class:`WorkflowEnv` (e.g.
    ``lambda: make_env("voting-math")``). ``role``: an agent name or a role (every agent of
    the role is controlled). ``others``: a policy or a dict by agent/role, as in
    :func:`single_agent`. ``later_turns``: who writes the controlled agents' turns after the
    first (multi-turn roles such as Eval-Opt's optimizer, or several controlled agents):
    ``None`` reuses the scored completion for every controlled turn, so one TRL sample is
    credited with the whole outcome; or a ``fn(prompt) -> str`` (e.g. the model being
    trained, wrapped as a policy).
    """

    def __init__(
        self,
        env_factory: Callable[[], WorkflowEnv],
        role: str,
        others: Any,
        n_prompts: int = 64,
        seed: int = 0,
        later_turns: Callable[[str], str] | None = None,
        conversational: bool = False,
    ) -> None:
        if n_prompts < 1:
            raise ValueError(f"n_prompts must be >= 1, got {n_prompts}")
        self.env_factory = env_factory
        self.role = role
        self.others = others
        self.seed = seed
        self.later_turns = later_turns
        self.conversational = conversational
        probe = SingleAgentEnv(env_factory(), role, others)  # validates role and others
        self.tasks = list(probe.env.tasks)
        roles = tool_roles(probe.env)
        mine = [roles.get(probe.env.role_of(a), ()) for a in probe.agents]
        #: the env's tools the controlled role may call (each a method of its tool env)
        self.tools: tuple[str, ...] = tuple(
            dict.fromkeys(n for names in mine for n in names if n in _TOOL_METHODS)
        )
        self.n_prompts = n_prompts
        self._states: dict[str, WorkflowEnv] = {}
        self._prompts: dict[str, str] = {}
        #: the final infos of the last batch of scored completions (for analysis and tests)
        self.last_infos: list[dict] = []

    # ------------------------------------------------------------------ prompts
    def _start(self, k: int) -> tuple[str, WorkflowEnv]:
        """Play problem ``k`` up to the controlled role's first turn; (prompt, env state)."""
        sa = SingleAgentEnv(self.env_factory(), self.role, self.others)
        task = self.tasks[k % len(self.tasks)]
        obs, _ = sa.reset(seed=self.seed * 1_000_003 + k, options={"task_id": task.id})
        if not sa.env.agents:
            raise RuntimeError(f"the episode of task {task.id!r} ended before {self.role!r} acted")
        return obs["prompt"], sa.env

    def key(self, k: int) -> str:
        return f"{self.seed}:{k}"

    def rows(self) -> list[dict[str, Any]]:
        """The dataset rows: ``prompt`` (text, or a one-message conversation) and
        ``flowzoo_key``; builds and stores each row's env state."""
        out = []
        for k in range(self.n_prompts):
            key = self.key(k)
            if key not in self._states:
                self._prompts[key], self._states[key] = self._start(k)
            prompt = self._prompts[key]
            out.append(
                {
                    "prompt": [{"role": "user", "content": prompt}]
                    if self.conversational
                    else prompt,
                    "flowzoo_key": key,
                }
            )
        return out

    def dataset(self):
        """A ``datasets.Dataset`` of :meth:`rows` (needs the ``datasets`` package)."""
        from datasets import Dataset

        return Dataset.from_list(self.rows())

    # ------------------------------------------------------------------ scoring
    def score(self, key: str, completion: str, sample: int = 0) -> tuple[float, dict]:
        """Resume ``key``'s state with ``completion`` and finish the workflow; (the controlled
        agent's reward, the final info). Unknown keys raise ``KeyError`` naming the problem."""
        if key not in self._states:
            raise KeyError(
                f"unknown flowzoo_key {key!r}: rows come from this RoleEpisodes' dataset()"
            )
        env = copy.deepcopy(self._states[key])
        sa = SingleAgentEnv(env, self.role, self.others)
        pols = self.others.values() if isinstance(self.others, dict) else [self.others]
        for j, pol in enumerate(pols):  # stateful others: same key and sample, same episode
            if hasattr(pol, "reseed"):
                pol.reseed(_seed_of(self.seed, key, sample, j))
        total = 0.0
        action = completion
        while True:
            _, reward, term, trunc, info = sa.step(action)
            total += reward
            if term or trunc:
                return total, info
            nxt = env.observe(env.agent_selection)["prompt"]
            action = completion if self.later_turns is None else self.later_turns(nxt)

    def reward(self, prompts=None, completions=None, flowzoo_key=None, **kwargs) -> list[float]:
        """TRL reward function: the verifier's reward of each completion's finished workflow."""
        if completions is None or flowzoo_key is None:
            raise ValueError(
                "the flowzoo reward needs TRL's `completions` and the dataset's `flowzoo_key` "
                "column; build the train_dataset with RoleEpisodes.dataset()"
            )
        out, infos = [], []
        seen: dict[str, int] = {}
        for key, comp in zip(flowzoo_key, completions, strict=True):
            i = seen[key] = seen.get(key, -1) + 1
            r, info = self.score(key, completion_text(comp), sample=i)
            out.append(float(r))
            infos.append(info)
        self.last_infos = infos
        return out

    # ------------------------------------------------------------------ tool env
    def environment_factory(self) -> FlowzooToolEnv:
        """A fresh :class:`FlowzooToolEnv` (pass ``episodes.environment_factory`` to TRL),
        with a method for each tool the env gives the controlled role (``run`` on code envs,
        ``python`` on math envs, made with ``tools=``): TRL offers a model every public
        method as a tool."""
        return tool_env_class(self.tools)(self)


class FlowzooToolEnv:
    """TRL ``environment_factory`` environment for tool-calling models: ``reset`` gives the
    controlled role's prompt, the model answers by calling ``submit``, ``get_reward`` gives
    the verifier's reward. A rollout that never calls ``submit`` scores 0 (``submitted`` is
    False)."""

    def __init__(self, episodes: RoleEpisodes) -> None:
        self._episodes = episodes
        self._next = 0
        self._env: SingleAgentEnv | None = None
        self._reward = 0.0
        self.submitted = False
        self.done = False

    def reset(self, **kwargs) -> str:
        ep = self._episodes
        if "flowzoo_key" in kwargs and kwargs["flowzoo_key"] in ep._states:
            key = kwargs["flowzoo_key"]
            env = copy.deepcopy(ep._states[key])
            prompt = ep._prompts[key]
        else:
            prompt, env = ep._start(self._next)
            self._next += 1
        self._env = SingleAgentEnv(env, ep.role, ep.others)
        self._reward, self.submitted, self.done = 0.0, False, False
        return prompt + "\nAnswer by calling submit with your full answer."

    def submit(self, answer: str) -> str:
        """Submit your answer for this turn of the workflow.

        Args:
            answer: Your complete answer, in the format the prompt asks for.

        Returns:
            The next prompt if the workflow asks you again, else the outcome of the episode.
        """
        if self._env is None or self.done:
            return "The episode is over; nothing more to submit."
        self.submitted = True
        return self._step(str(answer))

    def _step(self, text: str) -> str:
        """Play ``text`` as the controlled agent's action: the next prompt, or the outcome."""
        assert self._env is not None
        _, reward, term, trunc, info = self._env.step(text)
        self._reward += reward
        if term or trunc:
            self.done = True
            return f"Episode over. Correct: {bool(info.get('correct', False))}."
        env = self._env.env
        return env.observe(env.agent_selection)["prompt"]

    def get_reward(self) -> float:
        """The controlled agent's reward (0 while the episode is unfinished)."""
        return float(self._reward) if self.done else 0.0

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        """One tool call of the running turn, made as the env's own call text
        (:func:`~flowzoo.envs.toolschema.call_text`: judged, refused and flagged as any
        other call): the call's status and result. A call the env does not run as one (past
        the turn's budget) is the turn's message, as in the env, and answers like
        :meth:`submit`."""
        if self._env is None or self.done:
            return "The episode is over; no more tool calls."
        env = self._env.env
        before = len(running_calls(env))
        out = self._step(call_text(name, arguments))
        calls = running_calls(env)
        if len(calls) <= before:
            return out
        c = calls[-1]
        return f"status: {c.status}\n{c.result}"


class _RunTool:
    def run(self, program: str, examples: list[int] | None = None) -> str:
        """Run your Python program in a sandbox on the problem's visible examples (the hidden
        tests are never run).

        Args:
            program: The whole Python program.
            examples: Which visible examples to check, 1-based (default: all of them).

        Returns:
            The run's status, and its exit status, stdout, stderr and which examples passed.
        """
        args: dict[str, Any] = {"program": program}
        if examples is not None:
            args["examples"] = examples
        return self._call("run", args)  # type: ignore[attr-defined]


class _PythonTool:
    def python(self, program: str) -> str:
        """Run a short Python program in a sandbox (no network, no files kept).

        Args:
            program: The whole Python program.

        Returns:
            The run's status and what the program printed.
        """
        return self._call("python", {"program": program})  # type: ignore[attr-defined]


#: each tool the env may give a role, as the method a TRL tool env offers for it
_TOOL_METHODS: dict[str, type] = {"run": _RunTool, "python": _PythonTool}


@functools.cache
def tool_env_class(names: tuple[str, ...]) -> type[FlowzooToolEnv]:
    """The :class:`FlowzooToolEnv` with a method for each of the tools ``names`` (one class
    per set, so TRL sees the same class, and its tools, for every instance)."""
    if not names:
        return FlowzooToolEnv
    mixins = tuple(_TOOL_METHODS[n] for n in names)
    return type(f"FlowzooToolEnv_{'_'.join(names)}", (*mixins, FlowzooToolEnv), {})


__all__ = ["FlowzooToolEnv", "RoleEpisodes", "completion_text", "tool_env_class"]
