"""Shared fixtures. The tiny model is built by flowzoo.tiny.build in fast mode (cached under
$FLOWZOO_CACHE or ~/.cache/flowzoo, keyed by its recipe) and loaded through from_pretrained.

Why the build happens when collection ends: a per-test timeout must time tests, not a model
build (on a loaded machine a build can take minutes, and one build timing out inside the
first test that needs it once turned into an error for every test after it). Fixtures are
outside the per-test timeout as well (``timeout_func_only`` in setup.cfg)."""

import contextlib
import os
import sys
import time

import pytest

if os.environ.get("PYTEST_XDIST_WORKER"):
    # one torch/BLAS thread per worker (setup.cfg runs two): two workers each taking every
    # core would oversubscribe them; set before any test module imports torch
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, "1")

_TINY: dict[str, object] = {}


def _build_tiny(progress: bool = False):
    from flowzoo.tiny.build import ensure_tiny, fast_config

    return ensure_tiny(fast_config("tiny-s"), progress=progress)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Under pytest-xdist (setup.cfg runs two workers) the controller builds the model before
    the workers start, where its progress reaches the terminal (a worker's output does not);
    the workers then find it cached. It cannot see which tests will be collected, so a first
    run of any test under xdist pays the one build."""
    cfg = session.config
    if hasattr(cfg, "workerinput") or not getattr(cfg.option, "numprocesses", 0):
        return
    if not cfg.option.collectonly:
        _prepare(session)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build the test model once, before any test runs, when a collected test needs it."""
    if session.config.option.collectonly:
        return
    if any("tiny_model" in getattr(i, "fixturenames", ()) for i in session.items):
        _prepare(session)


def _prepare(session: pytest.Session) -> None:
    if "path" in _TINY or "error" in _TINY:
        return
    try:
        import torch  # noqa: F401
    except ImportError:
        return
    t0 = time.monotonic()
    # straight to the terminal, past pytest's capture: a first build takes minutes (2-5 on
    # 2 idle cores, far longer on a busy machine) and its progress bar says how far it is
    capture = session.config.pluginmanager.getplugin("capturemanager")
    quiet = capture.global_and_fixture_disabled() if capture else contextlib.nullcontext()
    from flowzoo.tiny.build import fast_config

    with quiet:
        print(
            "\nflowzoo: preparing the tiny test model: a cached build is reused at once; a first "
            f"build (corpus, then {fast_config('tiny-s').steps} pretraining steps) takes 2-5 min "
            "on 2 idle cores and longer under load, with its progress below",
            file=sys.stderr,
            flush=True,
        )
        try:
            _TINY["path"] = _build_tiny(progress=True)
        except Exception as e:  # reported by every test that needs it, not a crash of the session
            _TINY["error"] = e
        print(f"flowzoo: tiny test model ready in {time.monotonic() - t0:.0f}s", file=sys.stderr)


@pytest.fixture(scope="session")
def tiny_model():
    pytest.importorskip("torch")
    if "error" in _TINY:
        pytest.fail(f"the tiny test model could not be built: {_TINY['error']!r}", pytrace=False)
    if "path" not in _TINY:  # a run that selected this test in some other way
        _TINY["path"] = _build_tiny()
    return _TINY["path"]


@pytest.fixture(scope="session")
def tiny_policy(tiny_model):
    from flowzoo.agents.models.policy import Policy

    return Policy(tiny_model)
