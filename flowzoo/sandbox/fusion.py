"""SandboxFusion backend: the HTTP sandbox service verl uses, at a URL the user runs.

``POST {url}/run_code`` with ``{"code", "language": "python", "run_timeout", "memory_limit_MB",
"stdin", "files"}``; a semaphore bounds requests in flight, gateway timeouts (502/503/504)
and connection resets are retried with backoff, and the service's statuses are mapped to
:data:`flowzoo.sandbox.STATUSES`. Isolation is whatever that service provides.
"""

from __future__ import annotations

import base64
import json
import os
import threading
import time
import urllib.error
import urllib.request

from flowzoo.sandbox.base import ConcurrentRunMixin, ExecResult, SandboxUnavailable
from flowzoo.sandbox.forksafe import track

ENV_URL = "FLOWZOO_SANDBOX_FUSION_URL"
RETRY_HTTP = (502, 503, 504)


def map_fusion_status(body: dict) -> tuple[str, int | None, str, str, float]:
    """(status, exit code, stdout, stderr, seconds) from a ``/run_code`` response body."""
    run = body.get("run_result") or {}
    top = body.get("status")
    out, err = run.get("stdout") or "", run.get("stderr") or ""
    code = run.get("return_code")
    secs = float(run.get("execution_time") or 0.0)
    rstat = run.get("status")
    if top == "SandboxError":
        return "sandbox_error", code, out, err or str(body.get("message", "")), secs
    if rstat == "TimeLimitExceeded":
        return "timeout", code, out, err, secs
    if "MemoryError" in err[-2000:]:
        return "memory", code, out, err, secs
    if rstat == "Finished":
        return ("ok" if code == 0 else "error"), code, out, err, secs
    if rstat == "Error" or top == "Failed":
        return "error", code, out, err, secs
    return "sandbox_error", code, out, err or f"unexpected response: {json.dumps(body)[:300]}", secs


class SandboxFusion(ConcurrentRunMixin):
    """Client for a SandboxFusion server (``url=`` or ``$FLOWZOO_SANDBOX_FUSION_URL``)."""

    name = "sandbox-fusion"

    def __init__(
        self,
        url: str | None = None,
        timeout_s: float = 10.0,
        memory_mb: int = 512,
        max_concurrency: int = 8,
        retries: int = 3,
        request_slack_s: float = 30.0,
    ) -> None:
        url = url or os.environ.get(ENV_URL)
        if not url:
            raise SandboxUnavailable(f"sandbox-fusion needs url= or ${ENV_URL}")
        self.url = url.rstrip("/")
        self.timeout_s, self.memory_mb = timeout_s, memory_mb
        self.retries, self.request_slack_s = retries, request_slack_s
        self.default_workers = max_concurrency
        self._sem = threading.Semaphore(max_concurrency)
        track(self)

    def _forked(self) -> None:
        """In a forked child: requests the parent's threads had in flight never end here,
        so their slots would stay taken (``forksafe.py``)."""
        self._sem = threading.Semaphore(self.default_workers)

    @property
    def isolation(self) -> tuple[str, ...]:
        return ("sandbox-fusion-service",)

    def run(
        self, source: str, *, files=None, stdin=None, timeout_s=None, memory_mb=None
    ) -> ExecResult:
        """Run ``source`` on the service; transport failures become ``sandbox_error``."""
        t = float(timeout_s if timeout_s is not None else self.timeout_s)
        body = {
            "code": source,
            "language": "python",
            "run_timeout": t,
            "memory_limit_MB": int(memory_mb if memory_mb is not None else self.memory_mb),
            "stdin": stdin or "",
            "files": {k: base64.b64encode(v.encode()).decode() for k, v in (files or {}).items()},
        }
        data = json.dumps(body).encode()
        t0 = time.monotonic()
        last = ""
        for attempt in range(self.retries + 1):
            req = urllib.request.Request(
                f"{self.url}/run_code", data=data, headers={"Content-Type": "application/json"}
            )
            try:
                with (
                    self._sem,
                    urllib.request.urlopen(req, timeout=t + self.request_slack_s) as resp,
                ):
                    payload = json.loads(resp.read().decode("utf-8", errors="replace"))
                status, code, out, err, _ = map_fusion_status(payload)
                return ExecResult(
                    status, code, out, err, time.monotonic() - t0, backend="sandbox-fusion"
                )
            except urllib.error.HTTPError as e:
                last = f"HTTP {e.code}"
                if e.code not in RETRY_HTTP:
                    break
            except (
                urllib.error.URLError,
                ConnectionError,
                TimeoutError,
                json.JSONDecodeError,
            ) as e:
                last = repr(e)
            time.sleep(min(4.0, 0.25 * 2**attempt))
        return ExecResult(
            "sandbox_error",
            None,
            "",
            f"sandbox-fusion request failed: {last}",
            time.monotonic() - t0,
            backend="sandbox-fusion",
        )

    def close(self) -> None:
        """Nothing to release: the service is the user's."""
