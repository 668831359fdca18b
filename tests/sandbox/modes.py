"""The sandbox modes the isolation tests run in, one list for every file: (mechanism,
fork-server) for the process backend, then Docker with and without its fork server."""

import pytest

PROCESS_MODES = [
    ("bwrap", True),
    ("bwrap", False),
    ("unshare", True),
    ("unshare", False),
]
DOCKER_MODES = [
    pytest.param(("docker", True), marks=pytest.mark.docker),
    pytest.param(("docker", False), marks=pytest.mark.docker),
]
