"""Start and stop a local ``vllm serve`` (OpenAI-compatible) for a local model: what the
endpoint tests, the endpoint benchmark and the examples use. vLLM runs in its own
environment (``$FLOWZOO_VLLM_PYTHON``, see ``.ci/vllm-env.sh``); the server listens on
127.0.0.1 only and is stopped with its whole process group. Chunked prefill is off: on
vLLM 0.32's CPU build a seeded request whose prefill is split kills the engine.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from flowzoo.agents.models.backends import BackendUnavailable, vllm_python


def free_port() -> int:
    """A TCP port nothing listens on right now (127.0.0.1)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class VLLMServer:
    """``with VLLMServer(path) as srv:`` serves ``path`` as ``srv.name`` at ``srv.base_url``.
    ``memory`` is vLLM's ``--gpu-memory-utilization`` (its CPU build: the RAM fraction)."""

    def __init__(
        self,
        model: str | os.PathLike,
        name: str = "tiny",
        python: str | None = None,
        memory: float = 0.1,
        max_model_len: int | None = None,
        start_timeout_s: float = 300.0,
        extra_args: tuple[str, ...] = (),
        port: int | None = None,
    ) -> None:
        py = python or vllm_python()
        if py is None:
            raise BackendUnavailable("no vLLM environment: set FLOWZOO_VLLM_PYTHON")
        self.python: str = py
        self.model, self.name = str(model), name
        self.port = port or free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.memory, self.max_model_len = memory, max_model_len
        self.start_timeout_s, self.extra_args = start_timeout_s, tuple(extra_args)
        self.proc: subprocess.Popen | None = None
        self.log = Path(tempfile.mkstemp(prefix="flowzoo-vllm-serve-", suffix=".log")[1])

    def start(self) -> VLLMServer:
        cmd = [
            self.python, "-m", "vllm.entrypoints.openai.api_server",
            "--model", self.model, "--served-model-name", self.name,
            "--host", "127.0.0.1", "--port", str(self.port),
            "--dtype", "float32", "--enforce-eager",
            "--gpu-memory-utilization", str(self.memory),
            # vLLM 0.32's CPU build kills its engine when a seeded request's prefill is
            # chunked ("CPU Generator does not use offset"): seeded requests under load
            "--no-enable-chunked-prefill",
            *(["--max-model-len", str(self.max_model_len)] if self.max_model_len else []),
            *self.extra_args,
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.log.read_text(errors="replace")[-3000:]
                raise BackendUnavailable(f"vllm serve exited ({self.proc.returncode}):\n{tail}")
            try:
                with urllib.request.urlopen(self.base_url + "/models", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(1.0)
        self.stop()
        raise BackendUnavailable(
            f"vllm serve did not answer within {self.start_timeout_s:g} s (log: {self.log})"
        )

    def stop(self) -> None:
        """Terminate the server's process group (SIGKILL after 20 s)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(10)

    def __enter__(self) -> VLLMServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def spec(self, api: str = "chat") -> str:
        """This server as a model spec (``openai:`` chat, or ``openai-completions:``)."""
        scheme = "openai" if api == "chat" else "openai-completions"
        return f"{scheme}:{self.base_url}#{self.name}"


__all__ = ["VLLMServer", "free_port"]
