"""What verifiers' null harness downloads at run time, and whether this machine can fetch it,
found without a network call (read from /proc, /etc/resolv.conf, the environment and a local
``uv --help``). Its own module, importable without torch, so that a test can ask it from a
network namespace of its own."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

#: a proxy uv and pip would use to reach the package index without a route of their own
PROXY_VARS = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")
#: what a fetch that could not reach its host looks like in the harness's own error
_UNREACHABLE = re.compile(
    r"Could not resolve host|dns error|name resolution|Failed to fetch|client error \(Connect\)|"
    r"Network is unreachable|Connection refused|Failed to connect|timed out",
    re.IGNORECASE,
)


def _default_route() -> bool:
    """Whether a network interface other than loopback has a default route (IPv4 or IPv6),
    read from /proc: no packet is sent."""
    try:
        v4 = open("/proc/net/route").read().splitlines()[1:]
    except OSError:
        v4 = []
    for line in v4:
        f = line.split()
        if len(f) > 7 and f[0] != "lo" and f[1] == "00000000" and f[7] == "00000000":
            if int(f[3], 16) & 0x1:  # RTF_UP
                return True
    try:
        v6 = open("/proc/net/ipv6_route").read().splitlines()
    except OSError:
        v6 = []
    for line in v6:
        f = line.split()
        if len(f) == 10 and f[9] != "lo" and set(f[0]) == {"0"} and f[1] == "00":
            flags = int(f[8], 16)
            if flags & 0x1 and not flags & 0x200:  # RTF_UP, not RTF_REJECT
                return True
    return False


def _resolver() -> bool:
    """Whether /etc/resolv.conf names a DNS server (read, not queried)."""
    try:
        text = open("/etc/resolv.conf").read()
    except OSError:
        return False
    return any(ln.split()[:1] == ["nameserver"] for ln in text.splitlines())


def _uv_with_scripts() -> bool:
    """Whether verifiers' null harness finds a uv that runs PEP 723 scripts (it looks in
    ~/.local/bin, then on PATH); a local ``uv --help``, no network."""
    path = os.pathsep.join([os.path.expanduser("~/.local/bin"), os.environ.get("PATH", "")])
    uv = shutil.which("uv", path=path)
    if uv is None:
        return False
    helps = [
        subprocess.run([uv, *cmd, "--help"], capture_output=True, text=True, timeout=60).stdout
        for cmd in (["sync"], ["python", "find"])
    ]
    return all("--script" in h for h in helps)


def vf_harness_offline_reason() -> str | None:
    """Why verifiers' null harness (the seat flowzoo's vf env plays the model through) cannot
    set up on this machine, found without a network call; None where it has a way out.

    What it downloads at run time: its chat program runs through ``uv sync --script``, which
    resolves the program's packages (openai, mcp, httpx, ...) against the package index on
    every run (verifiers sets ``UV_OFFLINE=false``; a cached copy does not spare the index),
    and where no uv is found it installs one first (``pip install --user uv``, else
    https://astral.sh/uv/install.sh). So it needs a way to the index: a default route and a DNS
    server, or a proxy, or ``UV_DEFAULT_INDEX``/``UV_INDEX_URL`` on a local ``file://`` index
    with uv already installed. Without the network this failed as a bare ``KeyError``."""
    uv = _uv_with_scripts()
    index = os.environ.get("UV_DEFAULT_INDEX") or os.environ.get("UV_INDEX_URL") or ""
    if uv and index.startswith("file:"):
        return None
    if any(os.environ.get(v) for v in PROXY_VARS) or (_default_route() and _resolver()):
        return None
    wants = ["its chat program's packages (uv sync --script, from the package index)"]
    if not uv:
        wants.insert(0, "uv (pip install --user uv, else astral.sh)")
    why = "no default network route" if not _default_route() else "no DNS server configured"
    return f"offline ({why}): verifiers' null harness downloads {' and '.join(wants)} at run time"


def harness_could_not_fetch(rows) -> str | None:
    """The harness's own report that what it downloads could not be fetched (a machine with
    a route but no way to the index), when every episode ended that way; else None."""
    traces = [t for row in rows for t in row.get("traces", [])]
    errors = [e for t in traces for e in t.get("errors", [])]
    if not traces or not all(t.get("errors") for t in traces):
        return None  # an episode that set up: the harness could fetch
    setup = [e for e in errors if "failed to prepare uv script" in e.get("message", "")]
    if len(setup) != len(errors) or not all(_UNREACHABLE.search(e["message"]) for e in setup):
        return None
    cause = [ln.strip() for ln in setup[0]["message"].splitlines() if ln.strip()]
    return f"verifiers' null harness could not fetch what it downloads at run time: {cause[-1]}"
