"""flowzoo workflows as `verifiers` (v1) environments, for prime-rl and ``vf-eval``.

A taskset of flowzoo problems (:class:`FlowzooTaskset`) and an env (:class:`FlowzooEnv`)
whose ``run`` plays the flowzoo AEC env: every turn of the roles the model under evaluation
plays is one interaction of the ``policy`` seat (a one-step trace whose prompt is the role's
observation, as the study stores each turn), the other roles are played host-side by flowzoo
players (``others``: a served model, the scripted expert, a local model), and the episode's
outcome comes from flowzoo's verifier or judge, recorded on every trace as the ``team``
reward with flowzoo's ``infos`` (role, correctness, parse flags) as metrics and info.

Ids for ``vf-eval`` (a plugin must be a top-level module): ``flowzoo-vf``, e.g.

    vf-eval flowzoo-vf --env.taskset.env voting-math -m tiny \\
        --client.base-url http://127.0.0.1:8000/v1 -n 20 --no-push

Bad model output never crashes an episode: the env's own fallbacks score it (reward 0 and a
flag); a model call that fails (an endpoint that dies mid-episode) becomes an empty turn
flagged ``model_error``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import verifiers.v1 as vf

from flowzoo.envs.options import SANDBOX_CHOICE, row_env_options, user_sandbox_choice
from flowzoo.envs.registry import make_env
from flowzoo.envs.wrappers.single_agent import live_agent, partner_action, turn_flags


def _make(env_id: str, split: str, n_tasks: int, options: dict[str, Any]):
    """The flowzoo env a taskset row names (the taskset and the env build it alike)."""
    return make_env(env_id, split=split, **({"n_tasks": n_tasks} if n_tasks else {}), **options)


class FlowzooTasksetConfig(vf.TasksetConfig):
    env: str = "voting-math"
    """The flowzoo env id (``flowzoo envs`` lists them)."""
    split: str = "test"
    """Which split's problems: ``test`` (held out) or ``train``."""
    n_tasks: int = 0
    """How many problems (0: the env's default for the split)."""
    options: dict[str, Any] = {}
    """Options passed to ``make_env`` (e.g. ``{"dataset": "stdio"}`` for code)."""
    seed: int = 0
    """Problem j's episode resets with ``seed + j`` (as flowzoo's own evaluation)."""


class FlowzooData(vf.TaskData):
    info: dict
    """The flowzoo env id, problem id, split, options and seed an episode is played from."""


class FlowzooTask(vf.Task[FlowzooData, vf.State, vf.TaskConfig]):
    pass


class FlowzooTaskset(vf.Taskset[FlowzooTask, FlowzooTasksetConfig]):
    """One task per flowzoo problem of the split, in the env's order."""

    def load(self):
        c = self.config
        env = _make(c.env, c.split, c.n_tasks, c.options)
        for j, t in enumerate(env.tasks):
            # problem j resets with seed + j, as flowzoo's own evaluation does
            env.reset(seed=c.seed + j, options={"task_id": t.id})
            # the sandbox stays in the config: a task's info is data (it may come back from
            # a saved dataset), and data never chooses the sandbox
            row_opts = {k: v for k, v in c.options.items() if k not in SANDBOX_CHOICE}
            info = {"env": c.env, "task_id": t.id, "split": c.split, "n_tasks": c.n_tasks,
                    "options": row_opts, "seed": c.seed + j}  # fmt: skip
            prompt = env.observe(env.agent_selection)["prompt"]
            yield FlowzooTask(FlowzooData(name=t.id, prompt=prompt, info=info), self.config.task)


class FlowzooEnvConfig(vf.EnvConfig):
    policy: vf.AgentConfig = vf.AgentConfig(harness={"id": "null"}, runtime={"type": "subprocess"})
    """The model under evaluation or training (a tool-less chat turn per flowzoo turn)."""
    role: str = ""
    """Only this role is played by ``policy`` (empty: every role)."""
    others: dict[str, str] = {}
    """role -> flowzoo player spec for the roles ``policy`` does not play
    (``openai:<url>#<model>``, ``scripted[:<error rate>]``, a local checkpoint)."""


class FlowzooEnv(vf.Env[FlowzooEnvConfig]):
    """Plays one flowzoo episode per task (see the module doc)."""

    def _partners(self, env) -> dict[str, Any]:
        """role -> partner for the roles the policy seat does not play (fresh per episode: a
        scripted partner's random stream starts anew; local models are loaded once)."""
        cfg = self.config
        if cfg.role and cfg.role not in env.roles:
            raise ValueError(f"role {cfg.role!r} is not a role of this env; roles: {env.roles}")
        missing = [r for r in env.roles if cfg.role and r != cfg.role and r not in cfg.others]
        if missing:
            raise ValueError(
                f"roles {missing} need a player in `others` (policy plays {cfg.role!r})"
            )
        others = {r: s for r, s in cfg.others.items() if r != cfg.role}
        if not others:
            return {}
        from flowzoo.agents.models.players import partners  # torch only when partners are used

        return partners(others, env.turn_tokens())

    def env_for(self, info: dict[str, Any]):
        """The flowzoo env a task's ``info`` names, reset to its problem. The info is data (a
        saved dataset's row can carry it), so its options may not choose the sandbox; the
        sandbox comes from the taskset's config, the user's own."""
        where = f"verifiers task {info.get('task_id')!r} (info['options'])"
        opts = row_env_options(info.get("options"), where)
        from flowzoo.tasks.code.family import check_row_limits  # no timeout past a row's caps

        check_row_limits(opts, where)
        user = getattr(getattr(self, "taskset", None), "config", None)
        opts |= user_sandbox_choice(getattr(user, "options", None))
        env = _make(info["env"], info["split"], info.get("n_tasks", 0), opts)
        env.reset(seed=info["seed"], options={"task_id": info["task_id"]})
        return env

    async def run(self, task: FlowzooTask, agents: vf.Agents) -> None:
        info = task.data.info
        env = self.env_for(info)
        players = self._partners(env)
        # (agent, its turn index, the turn's trace, a model error)
        played: list[tuple[str, int, vf.Trace | None, str | None]] = []
        while (agent := live_agent(env)) is not None:
            role = env.role_of(agent)
            prompt = env.observe(agent)["prompt"]
            if role in players:
                text = await asyncio.to_thread(partner_action, env, agent, players[role])
            else:
                text, trace, error = await self._policy_turn(agents, task, agent, prompt)
                played.append((agent, sum(a == agent for a, *_ in played), trace, error))
            await asyncio.to_thread(env.step, text)
        rewards = {a: float(env.rewards[a]) for a in env.agents}
        infos = {a: dict(env.infos[a]) for a in env.agents}
        flags = turn_flags(env)
        for agent, k, trace, error in played:
            if trace is None:
                continue
            ainfo = infos.get(agent, {})
            trace.record_reward("team", rewards.get(agent, 0.0))
            mine = set(flags.get((agent, k), [])) | ({"model_error"} if error else set())
            trace.record_metrics(
                {
                    "correct": float(bool(ainfo.get("correct", False))),
                    "parse_failure": float(bool(mine & env.workflow.parse_flags)),
                    "reward_tamper": float("reward_tamper" in mine),
                    "model_error": float(error is not None),
                }
            )
            trace.info["flowzoo"] = {
                "agent": agent,
                "turn": k,
                "role": env.role_of(agent),
                "task_id": info["task_id"],
                "flags": sorted(mine),
                **({"model_error": error} if error else {}),
            }

    async def _policy_turn(self, agents, task, agent, prompt):
        """One turn of the policy seat: (its text, its trace, an error or None). A failed
        model call is an empty turn (the env scores it) with the error kept."""
        turn = FlowzooTask(
            task.data.model_copy(update={"prompt": prompt, "name": f"{task.data.name}/{agent}"}),
            task.config,
        )
        try:
            async with agents.policy.interaction(turn) as it:
                try:
                    segment = await it.turn()
                except Exception as e:  # a dead endpoint: a flagged empty turn on its trace
                    # (caught inside, so the interaction closes normally and its trace is
                    # the episode's: it gets the team reward like every other turn)
                    return "", it.trace, f"{type(e).__name__}: {e}"[:500]
        except Exception as e:  # the interaction could not even open: no trace to score
            return "", None, f"{type(e).__name__}: {e}"[:500]
        errors = it.trace.errors  # verifiers records a failed model call on the trace
        error = f"{errors[0].type}: {errors[0].message}"[:500] if errors else None
        return ("" if error else segment.last_reply or ""), it.trace, error


__all__ = ["FlowzooEnv", "FlowzooTaskset"]
