"""Shared fixtures. The tiny model is built by flowzoo.models.tiny in fast mode (cached under
$FLOWZOO_CACHE or ~/.cache/flowzoo, keyed by its recipe) and loaded through from_pretrained."""

import pytest


@pytest.fixture(scope="session")
def tiny_model():
    pytest.importorskip("torch")
    from flowzoo.models.tiny import ensure_tiny, fast_config

    return ensure_tiny(fast_config("tiny-s"), progress=False)


@pytest.fixture(scope="session")
def tiny_policy(tiny_model):
    from flowzoo.models.policy import Policy

    return Policy(tiny_model)
