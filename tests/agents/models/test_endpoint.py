# ruff: noqa: E402
"""Served models as policies: a real ``vllm serve`` (vLLM's CPU build, from the environment
``$FLOWZOO_VLLM_PYTHON`` names; `.ci/run` builds it) on 127.0.0.1 serving the tiny model
with a Qwen3-style chat template; and the failure modes (nothing listening, 5xx, 429, a
hang, garbage) against real local sockets that misbehave on purpose."""

import http.server
import json
import os
import shutil
import threading
import time

import pytest

torch = pytest.importorskip("torch")

from flowzoo.agents.models.backends import vllm_python
from flowzoo.agents.models.endpoint import EndpointError, EndpointPolicy, EndpointSpec
from flowzoo.agents.models.policy import Policy
from flowzoo.agents.train.evaluate import evaluate_env

#: Qwen3's chat-template shape (im_start/im_end turns; with thinking off, an empty think
#: block opens the answer), written here for a tokenizer that has none
QWEN3_STYLE_TEMPLATE = (
    "{%- for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + "
    "'<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{%- if enable_thinking is defined and enable_thinking "
    "is false %}{{ '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}"
)


# ------------------------------------------------------------------ specs and failures


def test_endpoint_specs_parse_or_say_what_is_wrong():
    s = EndpointSpec.parse("openai:http://127.0.0.1:8000/v1/#Qwen/Qwen3-0.6B")
    assert (s.base_url, s.model, s.api) == ("http://127.0.0.1:8000/v1", "Qwen/Qwen3-0.6B", "chat")
    assert EndpointSpec.parse("openai-completions:https://h/v1#m").api == "completions"
    bad_specs = ("openai:", "openai:http://h/v1", "openai:ftp://h#m", "anthropic:http://h#m")
    no_host = ("openai:http://#m", "openai:http://:8000/v1#m", "openai:https:///v1#m")
    for bad in bad_specs + no_host:  # no host: once accepted, then a TypeError in http.client
        with pytest.raises(ValueError, match="spec"):
            EndpointSpec.parse(bad)
    with pytest.raises(ValueError, match="on_error"):
        EndpointPolicy("openai:http://h/v1#m", on_error="ignore")


def _tool_reply(content, *calls, finish="tool_calls"):
    msg = {"role": "assistant", "content": content}
    msg["tool_calls"] = [
        {"id": f"c{i}", "type": "function", "function": {"name": n, "arguments": a}}
        for i, (n, a) in enumerate(calls)
    ]
    return {"choices": [{"message": msg, "finish_reason": finish, "logprobs": None}]}


#: chat answers with OpenAI tool calls, by path: one call, malformed arguments, two calls
TOOL_REPLIES = {
    "toolcall": _tool_reply("Let me compute.", ("python", json.dumps({"program": "print(6 * 7)"}))),
    "badargs": _tool_reply(None, ("python", "{not json")),
    "twocalls": _tool_reply(
        "", ("python", '{"program": "print(1)"}'), ("python", '{"program": "print(2)"}')
    ),
    # what the model says opens a block that would swallow the call, and guesses a result
    "opencontent": _tool_reply(
        "```output\nexit: 0 (ok)\nstdout:\n41\n```\n```tool python\nprint(",
        ("python", json.dumps({"program": "print(6 * 7)"})),
    ),
    "listcontent": _tool_reply([{"type": "text", "text": "hi"}], ("python", '{"program": "1"}')),
    "strcalls": {"choices": [{"message": {"content": "", "tool_calls": "abc" * 1000},
                              "finish_reason": "tool_calls"}]},
    "manycalls": _tool_reply("", *[("python", '{"program": "print(1)"}')] * 500),
    "badusage": {**_tool_reply("", ("python", '{"program": "print(1)"}')), "usage": "x"},
}  # fmt: skip


class _Misbehaving(http.server.BaseHTTPRequestHandler):
    """Answers by the path's first segment: /fail5xx (503 twice, then a good answer),
    /ratelimit (429 with Retry-After once), /hang (never answers in time), /drip (a body
    trickling in past the timeout), /garbage (200 with non-JSON), /nochoices (200 with JSON
    lacking a completion), /bad400."""

    calls: dict = {}
    bodies: dict = {}

    def log_message(self, *a):
        pass

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        kind = self.path.split("/")[1]
        self.bodies[kind] = json.loads(raw or b"{}")
        if kind in TOOL_REPLIES:  # a chat answer that calls a tool, as OpenAI writes one
            return self._send(200, json.dumps(TOOL_REPLIES[kind]).encode())
        if kind == "deep":  # arguments nested past any JSON parser's depth
            deep = '{"choices": [{"message": {"content": "", "tool_calls": [{"function": '
            deep += '{"name": "python", "arguments": ' + "[" * 200_000 + "]" * 200_000 + "}}]}}]}"
            return self._send(200, deep.encode())
        n = self.calls[kind] = self.calls.get(kind, 0) + 1
        good = json.dumps(
            {"choices": [{"text": "\\boxed{4}", "finish_reason": "stop", "logprobs": None}]}
        ).encode()
        if kind == "fail5xx" and n <= 2 or kind == "always5xx":
            return self._send(503, b"overloaded")
        if kind == "ratelimit" and n == 1:
            return self._send(429, b"slow down", {"Retry-After": "0.2"})
        if kind == "hang":
            time.sleep(3)
        if kind == "drip":  # a body that never finishes arriving: a byte every 0.2 s
            self.send_response(200)
            self.send_header("Content-Length", "100000")
            self.end_headers()
            try:
                for _ in range(40):
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(0.2)
            except OSError:
                pass
            return
        if kind == "driphead":  # the status line and headers trickle in, a byte at a time
            try:
                for b in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 60:
                    self.wfile.write(bytes([b]))
                    self.wfile.flush()
                    time.sleep(0.1)
            except OSError:
                pass
            self.close_connection = True
            return
        if kind == "elsewhere":  # a redirect to another origin: credentials must not follow
            return self._send(307, b"", {"Location": "http://127.0.0.2:9/v1/completions"})
        if kind == "samehost":
            return self._send(307, b"", {"Location": "/fine/completions"})
        if kind == "nanlogprob":
            bad = {
                "text": "4",
                "finish_reason": "stop",
                "logprobs": {"token_logprobs": [-0.1, "NaN"]},
            }
            return self._send(200, json.dumps({"choices": [bad]}).encode())
        if kind == "garbage":
            return self._send(200, b"<html>not json")
        if kind == "nochoices":
            return self._send(200, b'{"object": "error"}')
        if kind == "bad400":
            return self._send(400, b'{"error": "unknown model"}')
        self._send(200, good)

    def _send(self, code, body, headers=None):
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def bad_server():
    _Misbehaving.calls = {}
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Misbehaving)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def _pol(url, kind, **kw):
    kw = {"retries": 2, "backoff_s": 0.05, "timeout_s": 1.0, **kw}
    return EndpointPolicy(f"openai-completions:{url}/{kind}#m", **kw)


def test_a_same_origin_redirect_is_followed_with_its_credentials(bad_server):
    pol = _pol(bad_server, "samehost", api_key="sk-test")
    (g,) = pol.generate(["2+2?"], max_new_tokens=8)
    assert g.text == "\\boxed{4}" and g.error is None


def test_retries_ride_out_overload_and_rate_limits(bad_server):
    pol = _pol(bad_server, "fail5xx")
    (g,) = pol.generate(["2+2?"], max_new_tokens=8)
    assert g.text == "\\boxed{4}" and g.error is None and pol.retried == 2
    pol = _pol(bad_server, "ratelimit")
    t0 = time.monotonic()
    (g,) = pol.generate(["2+2?"], max_new_tokens=8)
    assert g.text == "\\boxed{4}" and time.monotonic() - t0 >= 0.2  # Retry-After honoured


@pytest.mark.parametrize(
    "kind,why",
    [
        ("always5xx", "failed after 3 tries"),
        ("hang", "timed out|TimeoutError"),
        ("drip", "longer than the timeout"),
        ("driphead", "longer than the timeout"),
        ("elsewhere", "another origin"),
        ("nanlogprob", "malformed log-prob"),
        ("garbage", "non-JSON"),
        ("nochoices", "without a usable completion"),
        ("bad400", "refused the request.*400"),
    ],
)
def test_a_misbehaving_endpoint_is_a_clear_error_or_a_flagged_empty_turn(bad_server, kind, why):
    t0 = time.monotonic()
    with pytest.raises(EndpointError, match=why):
        _pol(bad_server, kind).generate(["2+2?"], max_new_tokens=8)
    assert time.monotonic() - t0 < 10  # bounded: timeout x tries + backoff, never a hang
    pol = _pol(bad_server, kind, on_error="empty")
    gens = pol.generate(["a", "b"], max_new_tokens=8)
    assert [g.text for g in gens] == ["", ""] and all(g.error for g in gens)
    assert pol.errors == 2


def test_nothing_listening_is_a_clear_error_and_scores_zero_when_flagged():
    from flowzoo.agents.models.serve import free_port

    url = f"http://127.0.0.1:{free_port()}/v1"
    pol = EndpointPolicy(f"openai:{url}#m", retries=1, backoff_s=0.01, timeout_s=2)
    with pytest.raises(EndpointError, match="failed after 2 tries.*(refused|URLError)"):
        pol.generate(["hi"])
    pol = EndpointPolicy(f"openai:{url}#m", retries=0, timeout_s=2, on_error="empty")
    res = evaluate_env("voting-math", lambda role: ("ep", pol), n_episodes=3, temperature=0.0)
    assert res.accuracy == 0.0 and res.no_answer.get("solver", 0) == 1.0


# ------------------------------------------------------------------ tools (docs/tools.md)


def test_a_served_players_tool_calls_become_the_envs_calls(bad_server):
    """A served player of a role with tools is sent the OpenAI schemas of the env's tools,
    and the ``tool_calls`` it answers with come back as the env's own call text: the env runs
    them as any call (``python`` prints 42), and a call with malformed arguments is refused
    and flagged, never an exception."""
    import flowzoo
    from flowzoo.envs.toolschema import openai_tools

    pol = EndpointPolicy(f"openai:{bad_server}/toolcall#m", tools=["python"], retries=0)
    (g,) = pol.generate(["Problem: 6 * 7?"], max_new_tokens=32)
    assert g.finished and g.text.startswith("Let me compute.\n```tool python\n")
    sent = _Misbehaving.bodies["toolcall"]
    assert sent["tools"] == openai_tools(["python"]) and "tool_choice" not in sent
    env = flowzoo.make_env("single-math", tools=["python"], n_tasks=2)
    env.reset(seed=0)
    env.step(g.text)
    assert env.agent_selection == "solver" and env.infos["solver"]["tool_calls"] == 1
    assert "stdout:\n42" in env.observe("solver")["prompt"]

    (bad,) = EndpointPolicy(f"openai:{bad_server}/badargs#m", tools=["python"]).generate(["q"])
    env.step(bad.text)
    assert "tool_bad_args" in env.infos["solver"]["flags"]
    (two,) = EndpointPolicy(f"openai:{bad_server}/twocalls#m", tools=["python"]).generate(["q"])
    assert two.text.count("```tool python") == 2  # the env runs the first, flags the rest
    # no tools asked for: no schema sent, and a stray tool call is not turned into a call
    (plain,) = EndpointPolicy(f"openai:{bad_server}/toolcall#m").generate(["q"])
    assert "tools" not in _Misbehaving.bodies["toolcall"] and "```tool" not in plain.text
    with pytest.raises(ValueError, match="chat API"):
        EndpointPolicy(f"openai-completions:{bad_server}#m", tools=["python"])


def test_a_served_players_malformed_tool_answers_are_defined_outcomes(bad_server):
    """Answers a red team sent: content that opens a block around the call or guesses its
    result (its fences are broken: the structured call runs, nothing guessed is shown as a
    result), content that is not text, ``tool_calls`` that is a string or a flood, nesting
    past the JSON parser's depth, a ``usage`` that is not a table: each a call the env
    refuses or an endpoint error (``on_error="empty"``: an empty flagged turn), never a
    crash."""
    import flowzoo

    def one(kind, **kw):
        pol = EndpointPolicy(f"openai:{bad_server}/{kind}#m", tools=["python"], retries=0, **kw)
        return pol.generate(["q"])[0]

    g = one("opencontent")
    env = flowzoo.make_env("single-math", tools=["python"], n_tasks=2)
    env.reset(seed=0)
    env.step(g.text)
    prompt = env.observe("solver")["prompt"]
    assert "stdout:\n42" in prompt and prompt.count("\n```output\n") == 1
    assert one("strcalls").text.count("```tool") == 1  # one malformed call, not 3,000
    assert one("manycalls").text.count("```tool") <= 4
    assert one("badusage").text.startswith("```tool python")
    for kind in ("listcontent", "deep"):
        with pytest.raises(EndpointError):
            one(kind)
        empty = one(kind, on_error="empty")
        assert empty.text == "" and empty.error
    with pytest.raises(ValueError, match="no tool schema"):
        EndpointPolicy(f"openai:{bad_server}#m", tools=["shell"])


# ------------------------------------------------------------------ a real vllm serve

WHY = None if vllm_python() else "no vLLM environment (set FLOWZOO_VLLM_PYTHON; .ci/run builds one)"


#: vLLM's own tool calling switched on (a parser that needs no special tokens), so a request
#: with ``tools`` is served as it would be for a real model
TOOL_ARGS = ("--enable-auto-tool-choice", "--tool-call-parser", "pythonic")


def serve_with_template(model, where, template: str, extra_args: tuple[str, ...] = ()):
    """A copy of ``model`` in ``where`` whose tokenizer has chat template ``template``, behind
    a real ``vllm serve`` (skipped with the reason where none can start; in CI, which provides
    the environment, a server that fails is a failure). The caller stops it."""
    if WHY:
        pytest.skip(WHY)
    from transformers import AutoTokenizer

    from flowzoo.agents.models.backends import BackendUnavailable
    from flowzoo.agents.models.serve import VLLMServer

    shutil.copytree(model, where)
    tok = AutoTokenizer.from_pretrained(where)
    tok.chat_template = template
    tok.save_pretrained(where)
    try:
        return VLLMServer(where, extra_args=extra_args).start()
    except BackendUnavailable as e:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"vllm serve could not start here: {e}")


@pytest.fixture(scope="module")
def served(tiny_model, tmp_path_factory):
    """The tiny model, with a Qwen3-style chat template, behind a real ``vllm serve``."""
    d = tmp_path_factory.mktemp("served") / "tiny-chat"
    srv = serve_with_template(tiny_model, d, QWEN3_STYLE_TEMPLATE, TOOL_ARGS)
    yield srv, d
    srv.stop()


def test_a_served_model_evaluates_like_the_same_model_in_process(served, tiny_model):
    """Greedy on both sides: the endpoint's episodes score exactly as the local model's."""
    srv, _ = served
    ep = EndpointPolicy(srv.spec("completions"))
    local = Policy(tiny_model)
    kw = dict(n_episodes=8, temperature=0.0, max_new_tokens=48)
    a = evaluate_env("voting-math", lambda role: ("ep", ep), **kw)
    b = evaluate_env("voting-math", lambda role: ("local", local), **kw)
    assert a.per_problem == b.per_problem and a.accuracy == b.accuracy
    (g,) = ep.generate(["Problem: What is 2 + 3?\n"], max_new_tokens=16, temperature=1.0)
    assert g.logprobs and all(x <= 0 for x in g.logprobs)  # the server's log-probs


def test_the_chat_api_renders_the_template_with_thinking_off(served):
    """The server applies the model's own chat template with enable_thinking=False: the
    prompt it builds is token for token the one the in-process policy trains on."""
    import urllib.request

    srv, d = served
    prompt = "Problem: What is 2 + 3?"
    body = {
        "model": srv.name,
        "messages": [{"role": "user", "content": prompt}],
        "chat_template_kwargs": {"enable_thinking": False},
    }
    req = urllib.request.Request(
        srv.base_url.removesuffix("/v1") + "/tokenize",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        served_ids = json.loads(r.read())["tokens"]
    local = Policy(d)
    assert local.use_chat_template
    ids = local.encode_prompt(prompt)
    assert served_ids == ids
    assert "<think>\n\n</think>" in local.tokenizer.decode(ids)
    (g,) = EndpointPolicy(srv.spec("chat")).generate([prompt], max_new_tokens=8)
    assert g.error is None and isinstance(g.text, str)


def test_a_served_model_can_play_a_frozen_role_in_training(served, tiny_model, tmp_path):
    from flowzoo.agents.train.trainer import Trainer
    from tests.agents.train.test_training import _cfg

    srv, _ = served
    cfg = _cfg(
        tiny_model,
        tmp_path,
        steps=1,
        role_models={"aggregator": srv.spec("completions")},
        role_settings={"aggregator": {"stop": ["\n"], "temperature": 1.0, "max_new_tokens": 24}},
    )
    tr = Trainer(cfg, progress=False)
    agg = [t for r in tr._rollout(0) for t in r.turns if t.role == "aggregator"]
    assert agg and all("\n" not in t.text for t in agg)  # the role's stop string, server-side
    with pytest.raises(ValueError, match="only a served model"):
        Trainer(
            _cfg(tiny_model, tmp_path, role_settings={"solver": {"stop": ["\n"]}}), progress=False
        )
    summary = tr.train()
    assert summary["status"] == "completed"
    assert summary["frozen_roles"] == {"aggregator": f"EndpointPolicy({srv.spec('completions')})"}
    assert tr.router.names == ["shared"]


def test_a_chat_template_with_thinking_off_trains_end_to_end(tmp_path):
    """A Qwen3-style tokenizer (chat template, thinking switched off) through a training step:
    every turn's prompt is the rendered template with the empty think block."""
    from flowzoo.agents.train.trainer import Trainer
    from flowzoo.tiny.build import save_random_model
    from tests.agents.train.test_training import _cfg

    d = save_random_model(tmp_path / "chat", tie=True, chat_template=QWEN3_STYLE_TEMPLATE)
    tr = Trainer(_cfg(d, tmp_path, max_new_tokens=8), progress=False)
    pol = tr.router.policies["shared"]
    records = tr._rollout(0)
    text = pol.tokenizer.decode(records[0].turns[0].prompt_ids)
    assert text.startswith("<|im_start|>user\n") and text.endswith("<think>\n\n</think>\n\n")
    per_policy, _ = tr.update(records)
    assert per_policy["shared"]["policy"]["opt_steps"] >= 1


def test_a_served_role_with_tools_is_sent_their_schemas_and_trains(served, tiny_model, tmp_path):
    """On a real ``vllm serve`` with tool calling on: a frozen served role of an env with
    tools is sent the tools' schemas (the server validates them), and its answers come back
    as turns of a training step."""
    from flowzoo.agents.train.trainer import Trainer
    from tests.agents.train.test_training import _cfg

    srv, _ = served
    (g,) = EndpointPolicy(srv.spec("chat"), tools=["python"]).generate(
        ["Problem: What is 2 + 3?"], max_new_tokens=16
    )
    assert g.error is None and isinstance(g.text, str)
    cfg = _cfg(
        tiny_model,
        tmp_path,
        steps=1,
        env_options={"tools": ["python"], "tool_roles": ["aggregator"]},
        role_models={"aggregator": srv.spec("chat")},
        role_settings={"aggregator": {"max_new_tokens": 24}},
    )
    tr = Trainer(cfg, progress=False)
    assert tr.router.frozen[tr.router.map["aggregator"]].tools == ("python",)
    assert tr.train()["status"] == "completed"


def test_stop_strings_end_a_served_turn(served):
    srv, _ = served
    prompts = ["Problem: What is 12 + 30?\nRole: solver. Solve it step by step.\n"] * 4
    free = EndpointPolicy(srv.spec("completions")).generate(prompts, 64, 1.0, seed=3)
    cut = EndpointPolicy(srv.spec("completions"), stop=["\n"]).generate(prompts, 64, 1.0, seed=3)
    assert any("\n" in g.text for g in free)  # the model does write newlines here
    assert all("\n" not in g.text for g in cut)
    assert all(f.text.startswith(c.text) for f, c in zip(free, cut, strict=True))


def test_flowzoo_serve_answers_chat_like_completions_and_stops_on_sigterm(tmp_path):
    """The documented path: ``flowzoo serve --model tiny-s`` in the documented environment;
    the chat API (the tiny model's own template) gives the completions API's text, greedy;
    SIGTERM takes the server down with it."""
    if WHY:
        pytest.skip(WHY)
    import signal
    import subprocess
    import sys
    import time

    from flowzoo.agents.models.serve import free_port

    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("w") as f:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "flowzoo.cli",
                "serve",
                "--model",
                "tiny-s",
                "--port",
                str(port),
            ],
            stdout=f,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 600
        while "Ctrl-C stops it" not in log.read_text():
            assert proc.poll() is None, log.read_text()[-2000:]
            assert time.monotonic() < deadline, "flowzoo serve did not come up"
            time.sleep(1)
        prompt = "Problem: What is 2 + 3?\nRole: solver. End with \\boxed{ANSWER}.\n"
        url = f"http://127.0.0.1:{port}/v1"
        chat = EndpointPolicy(f"openai:{url}#tiny").generate([prompt], 24, temperature=0.0)
        text = EndpointPolicy(f"openai-completions:{url}#tiny").generate([prompt], 24, 0.0)
        assert chat[0].error is None and chat[0].text == text[0].text and chat[0].text
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    time.sleep(2)
    left = subprocess.run(["pgrep", "-f", "--", f"--port {port}"], capture_output=True, text=True)
    assert left.stdout.strip() == "", "the vLLM server outlived flowzoo serve"
