"""Held-out evaluation of policies on workflow envs: accuracy and per-role parse failures."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from flowzoo.agents.policy import Policy
from flowzoo.agents.rollout import rollout

#: flags that mean "this role's output did not parse" (format failures, not wrong answers)
PARSE_FLAGS = {"choice_unparsed", "verdict_unparsed", "plan_unparsed", "empty_action"}


@dataclass
class EvalResult:
    env_id: str
    episodes: int
    accuracy: float
    #: role -> fraction of that role's turns with a parse failure
    parse_fail: dict[str, float] = field(default_factory=dict)
    #: role -> fraction of that role's turns whose answer could not be extracted (solving roles)
    no_answer: dict[str, float] = field(default_factory=dict)
    extra: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {
            "env": self.env_id,
            "episodes": self.episodes,
            "accuracy": self.accuracy,
            "parse_fail": self.parse_fail,
            "no_answer": self.no_answer,
            **self.extra,
        }


def evaluate_env(
    env_id: str,
    policy_for: Callable[[str], tuple[str, Policy]],
    n_episodes: int = 100,
    batch: int = 32,
    temperature: float = 0.0,
    max_new_tokens: int = 96,
    split: str = "test",
    seed: int = 0,
    env_options: dict | None = None,
) -> EvalResult:
    """Play ``n_episodes`` distinct test problems (greedy by default) and score them."""
    from flowzoo.envs import make_env

    opts = {"split": split, **(env_options or {})}
    envs = [make_env(env_id, **opts) for _ in range(min(batch, n_episodes))]
    tasks = envs[0].tasks
    n_episodes = min(n_episodes, len(tasks))
    correct = 0
    turns: dict[str, int] = defaultdict(int)
    fails: dict[str, int] = defaultdict(int)
    no_ans: dict[str, int] = defaultdict(int)
    answer_turns: dict[str, int] = defaultdict(int)
    extra: dict[str, float] = defaultdict(float)
    fam = envs[0].family
    solving = {"solver", "optimizer", "worker", "synthesizer"}
    for start in range(0, n_episodes, len(envs)):
        ids = [tasks[j].id for j in range(start, min(n_episodes, start + len(envs)))]
        recs = rollout(
            envs[: len(ids)],
            policy_for,
            reset_options=[{"task_id": t} for t in ids],
            seeds=[seed + start + k for k in range(len(ids))],
            max_new_tokens=max_new_tokens,
            temperature=temperature,
        )
        for env, rec in zip(envs, recs, strict=False):
            correct += rec.correct
            for k in ("majority_correct", "any_correct", "first_draft_correct"):
                if k in rec.info:
                    extra[k] += float(rec.info[k])
            for t in env.episode.turns:
                turns[t.role] += 1
                if PARSE_FLAGS & set(t.flags):
                    fails[t.role] += 1
                if t.role in solving:
                    answer_turns[t.role] += 1
                    if fam.extract(t.action) is None:
                        no_ans[t.role] += 1
    n = n_episodes
    return EvalResult(
        env_id,
        n,
        correct / n,
        {r: fails[r] / turns[r] for r in turns},
        {r: no_ans[r] / answer_turns[r] for r in answer_turns},
        {k: v / n for k, v in extra.items()},
    )


def single_policy(policy: Policy, name: str = "shared") -> Callable[[str], tuple[str, Policy]]:
    """Route every role to one policy."""
    return lambda role: (name, policy)
