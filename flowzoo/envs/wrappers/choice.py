"""Discrete-choice views: a role's decision as a choice among candidates, with numeric
features, so any Gymnasium/SB3 algorithm can learn it inside the real workflow.

- :class:`AggregatorChoiceEnv`: the Voting aggregator picks one solver's answer
  (``Discrete(n_voters)``); the solvers are played by given policies.
- :class:`EvaluatorChoiceEnv`: the Eval-Opt evaluator answers ACCEPT (1) or REVISE (0)
  (``Discrete(2)``) on each draft; the optimizer is played by a given policy.

Constructor arguments are checked before any env is built: the policy (a callable, or for
the aggregator a dict by solver agent or role), an ``env_id`` of the view's workflow, and for
the aggregator no ``aggregator_mode`` but ``"select"`` (the view *is* the choice). Rewards are
the workflow's team reward at the end of the episode. An action outside the
declared ``Discrete`` space (a bool, a float, a string, out of range) is refused before the
episode moves. When ``max_cycles`` ends the episode before the choosing role acts, ``reset``
returns zero features and the role's final info, and the next ``step`` returns the end
(``truncated=True``), as :class:`SingleAgentEnv` does.
"""

from __future__ import annotations

import re
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from flowzoo.envs.core import WorkflowEnv
from flowzoo.envs.options import short_repr
from flowzoo.envs.registry import SPECS, WORKFLOW_CLASSES, env_spec, make_env
from flowzoo.envs.workflows.base import Episode, Turn, Workflow
from flowzoo.envs.workflows.eval_opt import EvalOpt, EvalOptOptions
from flowzoo.envs.workflows.voting import Voting
from flowzoo.envs.wrappers.single_agent import SingleAgentEnv

_EQ_RE = re.compile(r"(-?\d+)\s*([-+*])\s*(-?\d+)\s*=\s*(-?\d+)")


def check_choice(space: spaces.Discrete, action: Any, view: str) -> int:
    """``action`` as an int if it is in ``space`` (an int, a numpy integer, or an integer
    array of shape () or (1,), as SB3 passes it), else a TypeError/ValueError naming the
    space; any other shape is refused, never flattened."""
    a = action
    if isinstance(a, np.ndarray) and a.shape in ((), (1,)) and np.issubdtype(a.dtype, np.integer):
        a = a.reshape(()).item()
    if isinstance(a, (bool, np.bool_)) or not isinstance(a, (int, np.integer)):
        raise TypeError(
            f"{view}: action {action!r} has type {type(action).__name__}; it must be an int "
            f"in {space} (0..{space.n - 1})"
        )
    if not space.contains(int(a)):
        raise ValueError(f"{view}: action {action!r} is outside {space}; valid: 0..{space.n - 1}")
    return int(a)


def _check_workflow(view: str, env_id: Any, workflow: type[Workflow]) -> None:
    """A ValueError unless ``env_id`` names an env of ``workflow`` (checked before the env is
    built; an unknown id is make_env's own error)."""
    spec = env_spec(env_id)
    if not issubclass(WORKFLOW_CLASSES[spec.workflow], workflow):
        valid = [
            i for i, sp in SPECS.items() if issubclass(WORKFLOW_CLASSES[sp.workflow], workflow)
        ]
        raise ValueError(
            f"{view}: env_id={env_id!r} runs the {spec.workflow} workflow; this view needs "
            "one of "
            f"{', '.join(valid)}"
        )


def _episode(wf: WorkflowEnv) -> Episode:
    """``wf``'s running episode: the views read features only between ``reset`` and the end,
    so a missing one is a bug here, said as such rather than as an AttributeError."""
    if wf.episode is None:
        raise RuntimeError(f"{wf} has no episode to read features from; call reset() first")
    return wf.episode


def _last(ep: Episode, role: str) -> Turn:
    """The last turn ``role`` took; the views read a role only after it has acted."""
    turn = ep.last_of_role(role)
    if turn is None:
        raise RuntimeError(f"no {role} turn in the episode of task {ep.task.id!r} yet")
    return turn


def _check_policy(view: str, name: str, pol: Any, by_name: bool) -> None:
    """A TypeError unless ``pol`` is a policy (a callable, or with ``by_name`` a dict of
    them by agent or role, whose names the single-agent view checks) - before any env is
    built."""
    if callable(pol) or (by_name and isinstance(pol, dict)):
        return
    allowed = "a callable or a dict of callables by agent or role" if by_name else "a callable"
    raise TypeError(
        f"{view}: {name}={short_repr(pol)} has type {type(pol).__name__}; {name} must be "
        f"{allowed} (fn(prompt) -> str, or scripted(fn(env, agent)))"
    )


def step_consistency(text: str) -> tuple[float, int]:
    """Fraction of written ``a op b = c`` steps that are arithmetically right, and how many."""
    eqs = _EQ_RE.findall(text)
    if not eqs:
        return 0.0, 0
    ok = 0
    for a, op, b, c in eqs:
        a_, b_, c_ = int(a), int(b), int(c)
        ok += {"+": a_ + b_, "-": a_ - b_, "*": a_ * b_}[op] == c_
    return ok / len(eqs), len(eqs)


class AggregatorChoiceEnv(gym.Env):
    """Choose which solver's answer the Voting aggregator selects.

    Observation per candidate ``i`` (flattened, ``n_voters x 4``): has an answer, share of
    solvers whose answer is equivalent to it, fraction of its written steps that check out,
    and its position ``i / (n - 1)``."""

    metadata = {"render_modes": []}
    N_FEATURES = 4

    def __init__(self, solvers: Any, env_id: str = "voting-math", **env_options: Any) -> None:
        view = type(self).__name__
        _check_workflow(view, env_id, Voting)
        _check_policy(view, "solvers", solvers, by_name=True)
        mode = env_options.pop("aggregator_mode", "select")
        if not (isinstance(mode, str) and mode == "select"):
            raise ValueError(
                f"{view}: aggregator_mode={mode!r} is not allowed; this view is the aggregator "
                "choosing a candidate, so aggregator_mode must be 'select' (or not given)"
            )
        super().__init__()
        self.wf = make_env(env_id, aggregator_mode="select", **env_options)
        workflow = self.wf.workflow
        assert isinstance(workflow, Voting)  # _check_workflow made sure, before the build
        self.k = workflow.k
        self.inner = SingleAgentEnv(self.wf, "aggregator", solvers)
        self.action_space: spaces.Discrete = spaces.Discrete(self.k)
        self.observation_space = spaces.Box(
            0.0, 1.0, shape=(self.k * self.N_FEATURES,), dtype=np.float32
        )

    def _blank(self) -> np.ndarray:
        """The observation when there is nothing to choose (the episode ended): all zeros."""
        return np.zeros(self.k * self.N_FEATURES, dtype=np.float32)

    def _features(self) -> np.ndarray:
        ep = _episode(self.wf)
        fam = self.wf.family
        texts = [ep.turns_of(f"solver_{i}")[-1].action for i in range(self.k)]
        verdicts = fam.score_many(ep.task, texts)
        classes = [fam.answer_class(ep.task, v) for v in verdicts]
        feats = np.zeros((self.k, self.N_FEATURES), dtype=np.float32)
        for i, (t, c) in enumerate(zip(texts, classes, strict=True)):
            feats[i, 0] = c is not None
            feats[i, 1] = (
                (sum(1 for d in classes if d is not None and d == c) / self.k)
                if c is not None
                else 0.0
            )
            feats[i, 2] = step_consistency(t)[0]
            feats[i, 3] = i / max(1, self.k - 1)
        return feats.reshape(-1)

    def reset(
        self, *, seed: int | None = None, options: dict | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        seed = self.wf.check_reset(seed, options)
        super().reset(seed=seed)
        _, info = self.inner.reset(seed=seed, options=options)
        if info.get("ended_before_acting"):
            return self._blank(), info
        return self._features(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        a = check_choice(self.action_space, action, type(self).__name__)
        _, reward, term, trunc, info = self.inner.step(f"\\boxed{{{a + 1}}}")
        return self._blank(), float(reward), term, trunc, info


class EvaluatorChoiceEnv(gym.Env):
    """ACCEPT (1) or REVISE (0) each Eval-Opt draft.

    Observation: the draft has an answer, fraction of its written steps that check out,
    how many steps it wrote (/4), and the round (/max_rounds)."""

    metadata = {"render_modes": []}

    def __init__(self, optimizer: Any, env_id: str = "eval-opt-math", **env_options: Any) -> None:
        view = type(self).__name__
        _check_workflow(view, env_id, EvalOpt)
        _check_policy(view, "optimizer", optimizer, by_name=False)
        super().__init__()
        self.wf = make_env(env_id, **env_options)
        options = self.wf.workflow.options
        assert isinstance(options, EvalOptOptions)  # _check_workflow made sure, before the build
        self._options = options  # read per round, as the workflow reads it
        self.inner = SingleAgentEnv(self.wf, "evaluator", {"optimizer": optimizer})
        self.action_space: spaces.Discrete = spaces.Discrete(2)
        self.observation_space = spaces.Box(0.0, 1.0, shape=(4,), dtype=np.float32)

    def _features(self) -> np.ndarray:
        ep = _episode(self.wf)
        draft = _last(ep, "optimizer").action
        frac, n = step_consistency(draft)
        rounds = len(ep.turns_of("evaluator"))
        return np.array(
            [
                self.wf.family.extract(draft) is not None,
                frac,
                min(1.0, n / 4),
                rounds / self._options.max_rounds,
            ],
            dtype=np.float32,
        )

    def reset(
        self, *, seed: int | None = None, options: dict | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        seed = self.wf.check_reset(seed, options)
        super().reset(seed=seed)
        _, info = self.inner.reset(seed=seed, options=options)
        if info.get("ended_before_acting"):
            return np.zeros(4, dtype=np.float32), info
        return self._features(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        a = check_choice(self.action_space, action, type(self).__name__)
        verdict = "Verdict: ACCEPT" if a == 1 else "Verdict: REVISE\nFeedback: recheck each step."
        _, reward, term, trunc, info = self.inner.step(verdict)
        if term or trunc:
            return np.zeros(4, dtype=np.float32), float(reward), term, trunc, info
        return self._features(), float(reward), False, False, info
