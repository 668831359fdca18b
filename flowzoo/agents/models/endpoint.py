"""A served model as a policy: any OpenAI-compatible endpoint (``vllm serve``, SGLang, a
hosted API), for evaluation and for frozen roles in training. It is never trained: the
server's weights are not ours to update, so its turns are played and scored, never learned.

Spec (``--model``, ``role_models``): ``openai:<base url>#<model>`` speaks the chat API (the
server applies the model's chat template; thinking is switched off with
``chat_template_kwargs``, as the study runs Qwen3), ``openai-completions:<base url>#<model>``
the completions API (the prompt is sent as text). Requests run on a bounded pool (at most
``concurrency`` in flight), each with a timeout; 429, 5xx and connection failures are retried
with exponential backoff (``Retry-After`` honoured); one deadline covers connect, headers and
body, redirects stay within the origin, and log-probs must be finite and non-positive. A request that still fails raises
:class:`EndpointError` naming the URL and the server's answer, or with ``on_error="empty"``
becomes an empty completion flagged ``error`` (the env then scores it as a parse failure).
Log-probs are the server's (vLLM: of the raw distribution) where it returns them. With
``tools`` (the env's tools a role may call, docs/tools.md) the chat API is sent their OpenAI
schemas and each ``tool_calls`` entry of an answer comes back as the env's own call text.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import math
import os
import random
import socket
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch

from flowzoo.agents.models.backends import request_seeds
from flowzoo.agents.models.policy import Generation
from flowzoo.envs.tools import break_fences
from flowzoo.envs.toolschema import call_text, openai_tools

SCHEMES = {"openai": "chat", "openai-chat": "chat", "openai-completions": "completions"}
ON_ERROR = ("raise", "empty")
#: HTTP statuses worth another try (rate limits, overload, a restarting server)
RETRY_STATUS = (408, 409, 425, 429, 500, 502, 503, 504)


#: the most bytes an answer may have (a completion is far smaller; more is not an answer)
MAX_REPLY_BYTES = 16 << 20


class EndpointError(RuntimeError):
    """An endpoint did not answer usefully after its retries (the message says how)."""


def _read_bounded(resp, deadline: float) -> bytes:
    """The body, read in chunks against a total deadline and a size cap: the socket timeout
    alone bounds each read, so a server dripping bytes could hold a turn for ever."""
    chunks: list[bytes] = []
    size = 0
    while True:
        if time.monotonic() > deadline:
            raise TimeoutError("the answer took longer than the timeout to arrive")
        chunk = resp.read1(65536) if hasattr(resp, "read1") else resp.read(65536)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_REPLY_BYTES:
            raise EndpointError(f"the answer is larger than {MAX_REPLY_BYTES >> 20} MiB")


#: redirects followed at most (same origin only)
MAX_REDIRECTS = 3


def _origin(url: str) -> tuple[str, str, int]:
    u = urllib.parse.urlsplit(url)
    return u.scheme, (u.hostname or "").lower(), u.port or (443 if u.scheme == "https" else 80)


def _shut(conn: http.client.HTTPConnection) -> None:
    """Wake whatever read or write the request is blocked in: its deadline has passed."""
    sock = conn.sock
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def http_post(url: str, data: bytes, headers: dict, timeout_s: float) -> tuple[int, dict, bytes]:
    """(status, headers, body) of one POST under one deadline over connect, headers and body:
    a watchdog shuts the socket when it passes, so a server that drips its status line or
    headers (each byte inside the socket timeout) cannot hold the caller. Redirects are
    followed within the same origin only: credentials never go to another host."""
    deadline = time.monotonic() + timeout_s
    for _ in range(MAX_REDIRECTS + 1):
        u = urllib.parse.urlsplit(url)
        cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the answer took longer than the timeout to arrive")
        if not u.hostname:  # http.client would fail deep inside with a TypeError
            raise ValueError(f"no host in endpoint URL {url!r}")
        conn = cls(u.hostname, u.port, timeout=left)
        watchdog = threading.Timer(left, _shut, args=(conn,))
        watchdog.daemon = True
        watchdog.start()
        try:
            path = (u.path or "/") + (f"?{u.query}" if u.query else "")
            conn.request("POST", path, body=data, headers=headers)
            resp = conn.getresponse()
            body = _read_bounded(resp, deadline)
            status, got = resp.status, {k.lower(): v for k, v in resp.getheaders()}
        except (OSError, http.client.HTTPException) as e:
            if time.monotonic() >= deadline:
                raise TimeoutError("the answer took longer than the timeout to arrive") from None
            raise ConnectionError(f"{type(e).__name__}: {e}") from None
        finally:
            watchdog.cancel()
            conn.close()
        if status in (301, 302, 303, 307, 308) and "location" in got:
            nxt = urllib.parse.urljoin(url, got["location"])
            if _origin(nxt) != _origin(url):
                raise EndpointError(
                    f"{url} redirected to another origin ({nxt}); not followed, so the "
                    "credentials stay with the endpoint named"
                )
            url = nxt
            continue
        return status, got, body
    raise EndpointError(f"{url}: more than {MAX_REDIRECTS} redirects")


def _logprob(x) -> float:
    """A server's log-prob as a float, or ValueError: NaN, infinities and positive values are
    not log-probabilities (Python's JSON reader accepts ``NaN`` and ``Infinity``)."""
    v = float(x)
    if not math.isfinite(v) or v > 1e-6:
        raise ValueError(f"malformed log-prob {x!r}")
    return v


#: the most ``tool_calls`` entries read from one answer (the env runs the first and flags
#: the rest; more would only grow the text)
MAX_TOOL_CALLS_READ = 4


def _with_calls(content: str, calls: Any) -> str:
    """A chat answer that calls tools as one action: what the model said, its fences broken
    (so it can neither open a block that swallows the call nor show a guessed result), then
    each call as the env's call text. A ``tool_calls`` that is not a list is one malformed
    call (the env refuses it)."""
    if not isinstance(content, str):
        raise TypeError(f"content is {type(content).__name__}")
    calls = calls[:MAX_TOOL_CALLS_READ] if isinstance(calls, list) else [None]
    said = break_fences(content).rstrip()
    return "\n".join([said, *map(_call_of, calls)]).lstrip("\n")


def _call_of(call: Any) -> str:
    """One OpenAI ``tool_calls`` entry as the env's call text (a malformed one: a call the
    env refuses and flags, :func:`flowzoo.envs.toolschema.call_text`)."""
    fn = call.get("function") if isinstance(call, dict) else None
    fn = fn if isinstance(fn, dict) else {}
    return call_text(fn.get("name"), fn.get("arguments"))


def is_endpoint_spec(spec: str) -> bool:
    """True for ``openai:...``-style model specs (``SCHEMES``)."""
    return isinstance(spec, str) and spec.split(":", 1)[0] in SCHEMES and ":" in spec


@dataclass
class EndpointSpec:
    """A parsed endpoint spec: where, which model, which API."""

    base_url: str
    model: str
    api: str = "chat"

    @classmethod
    def parse(cls, spec: str) -> EndpointSpec:
        scheme, _, rest = spec.partition(":")
        if scheme not in SCHEMES or not rest:
            raise ValueError(
                f"bad endpoint spec {spec!r}; expected one of "
                f"{', '.join(s + ':<base url>#<model>' for s in SCHEMES)}"
            )
        url, _, model = rest.partition("#")
        ok = url.startswith(("http://", "https://")) and urllib.parse.urlsplit(url).hostname
        if not ok or not model:
            raise ValueError(
                f"bad endpoint spec {spec!r}: need an http(s) base URL with a host and a model "
                f"name after '#', e.g. openai:http://127.0.0.1:8000/v1#Qwen3-0.6B"
            )
        return cls(url.rstrip("/"), model, SCHEMES[scheme])

    def __str__(self) -> str:
        scheme = "openai" if self.api == "chat" else "openai-completions"
        return f"{scheme}:{self.base_url}#{self.model}"


class EndpointPolicy:
    """A served model behind an OpenAI-compatible API, with :class:`Policy`'s ``generate``
    (see the module doc). ``frozen``: trainers route its roles but never update it."""

    frozen = True

    def __init__(
        self,
        spec: str | EndpointSpec,
        concurrency: int = 8,
        timeout_s: float = 60.0,
        retries: int = 3,
        backoff_s: float = 0.5,
        on_error: str = "raise",
        stop: list[str] | None = None,
        enable_thinking: bool | None = False,
        api_key: str | None = None,
        tools: list[str] | tuple[str, ...] | None = None,
    ) -> None:
        self.spec = spec if isinstance(spec, EndpointSpec) else EndpointSpec.parse(spec)
        #: the env's tools this player may call, sent as OpenAI function schemas (chat API)
        self.tools = tuple(tools or ())
        self._tool_schemas = openai_tools(self.tools) if self.tools else []
        if self.tools and self.spec.api != "chat":
            raise ValueError(
                f"tools={list(self.tools)} need the chat API (openai:...): the completions API "
                "sends text only, where a model writes the env's own call syntax (docs/tools.md)"
            )
        if on_error not in ON_ERROR:
            raise ValueError(f"unknown on_error {on_error!r}; valid: {', '.join(ON_ERROR)}")
        for k, v in (("concurrency", concurrency), ("timeout_s", timeout_s)):
            if not v > 0:
                raise ValueError(f"{k} must be > 0, got {v!r}")
        if retries < 0 or backoff_s < 0:
            raise ValueError(f"retries and backoff_s must be >= 0, got {retries}, {backoff_s}")
        self.concurrency, self.timeout_s = int(concurrency), float(timeout_s)
        self.retries, self.backoff_s, self.on_error = int(retries), float(backoff_s), on_error
        self.stop = list(stop or [])
        self.enable_thinking = enable_thinking
        self.api_key = api_key or os.environ.get("OPENAI_API_KEY")
        #: requests that failed for good (``on_error="empty"``), retries made, and the
        #: completion tokens the server reported (``usage``), so far
        self.errors = 0
        self.retried = 0
        self.completion_tokens = 0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"EndpointPolicy({self.spec})"

    # ------------------------------------------------------------------ requests
    def _body(self, prompt: str, max_new_tokens: int, temperature: float, seed: int) -> dict:
        body = {
            "model": self.spec.model,
            "max_tokens": int(max_new_tokens),
            "temperature": float(temperature),
            "seed": int(seed),
        }
        if self.stop:
            body["stop"] = self.stop
        if self.spec.api == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
            body["logprobs"] = True
            if self.enable_thinking is not None:  # vLLM / SGLang: the template's switch
                body["chat_template_kwargs"] = {"enable_thinking": self.enable_thinking}
            if self._tool_schemas:  # the server decides (tool_choice "auto", its default)
                body["tools"] = self._tool_schemas
        else:
            body["prompt"] = prompt
            body["logprobs"] = 1
        return body

    def _post(self, body: dict) -> dict:
        """One request with retries; the parsed JSON answer, or EndpointError."""
        path = "/chat/completions" if self.spec.api == "chat" else "/completions"
        url = self.spec.base_url + path
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        data = json.dumps(body).encode()
        last = ""
        for attempt in range(self.retries + 1):
            wait = self.backoff_s * 2**attempt * (0.5 + random.random())
            try:
                status, got, raw = http_post(url, data, headers, self.timeout_s)
            except (TimeoutError, ConnectionError, OSError) as e:
                last = f"{type(e).__name__}: {e}"
            else:
                if status < 300:
                    try:
                        return json.loads(raw)
                    except (ValueError, RecursionError):  # nested past the parser's depth
                        raise EndpointError(
                            f"{url} answered with non-JSON: {raw[:200]!r}"
                        ) from None
                last = f"HTTP {status}: {raw[:500].decode(errors='replace')}"
                if status not in RETRY_STATUS:
                    raise EndpointError(f"{url} refused the request ({last})")
                after = got.get("retry-after")
                if after and after.replace(".", "", 1).isdigit():
                    wait = min(float(after), 60.0)
            if attempt < self.retries:
                self.retried += 1
                time.sleep(wait)
        raise EndpointError(
            f"{url} failed after {self.retries + 1} tries (timeout {self.timeout_s:g} s): {last}"
        )

    def _parse(self, reply: dict) -> tuple[str, list[float], bool]:
        """(text, per-token log-probs or [], finished) from a reply, or EndpointError."""
        try:
            choice = reply["choices"][0]
            if self.spec.api == "chat":
                text = choice["message"]["content"] or ""
                calls = choice["message"].get("tool_calls") or []
                if calls and self.tools:
                    text = _with_calls(text, calls)
                content = (choice.get("logprobs") or {}).get("content") or []
                lps = [_logprob(t["logprob"]) for t in content]
            else:
                text = choice["text"]
                lps = [
                    _logprob(x) for x in (choice.get("logprobs") or {}).get("token_logprobs") or []
                ]
            if not isinstance(text, str):
                raise TypeError(f"text is {type(text).__name__}")
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
            raise EndpointError(
                f"{self.spec.base_url} answered without a usable completion ({e!r}): "
                f"{json.dumps(reply)[:300]}"
            ) from None
        stopped = choice.get("finish_reason") in ("stop", "tool_calls")
        return text, lps, stopped

    def _one(self, prompt: str, max_new_tokens: int, temperature: float, seed: int) -> Generation:
        try:
            reply = self._post(self._body(prompt, max_new_tokens, temperature, seed))
            text, lps, fin = self._parse(reply)
            usage = reply.get("usage")
            used = usage.get("completion_tokens") if isinstance(usage, dict) else None
            with self._lock:
                self.completion_tokens += int(used) if isinstance(used, int) else len(lps)
        except EndpointError as e:
            if self.on_error == "raise":
                raise
            with self._lock:
                self.errors += 1
            return Generation([], [], [], "", False, error=str(e))
        return Generation([], [], lps, text, fin)

    # ------------------------------------------------------------------ the Policy interface
    def generate(
        self,
        prompts: list[str],
        max_new_tokens: int = 64,
        temperature: float = 0.7,
        seed: int | None = None,
        generator: torch.Generator | None = None,
    ) -> list[Generation]:
        """One completion per prompt, ``concurrency`` requests at a time; per-request seeds
        come from ``generator``/``seed`` (servers that honour ``seed`` then repeat)."""
        if not prompts:
            return []
        if generator is None:
            generator = torch.Generator().manual_seed(0 if seed is None else int(seed))
        seeds = request_seeds(len(prompts), generator)  # on the generator's own device
        if len(prompts) == 1:
            return [self._one(prompts[0], max_new_tokens, temperature, seeds[0])]
        with ThreadPoolExecutor(min(self.concurrency, len(prompts))) as pool:
            futs = [
                pool.submit(self._one, p, max_new_tokens, temperature, s)
                for p, s in zip(prompts, seeds, strict=True)
            ]
            return [f.result() for f in futs]

    def sync_backend(self) -> None:
        """Nothing to push: a served model is never trained here."""


__all__ = ["EndpointError", "EndpointPolicy", "EndpointSpec", "is_endpoint_spec"]
