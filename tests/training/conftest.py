"""Fixtures of the tests that run ranks on this machine under a real mpirun."""

from __future__ import annotations

import pytest
from worker_jobs import warm_server


@pytest.fixture(scope="session")
def warm(tmp_path_factory):
    """The warm server's directory of this machine as a node (worker_jobs.warm_server): one per test process,
    started by the first test that asks for it."""
    with warm_server(tmp_path_factory.mktemp("warm")) as directory:
        yield directory
