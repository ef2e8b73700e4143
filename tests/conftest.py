"""Shared fixtures: every test runs with its own DEEPVM_HOME, no colour, fixed width and fake AWS creds."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"

# Hypothesis profiles, picked by pytest's --hypothesis-profile (pyproject's addopts name `ci`): `ci` is what
# `make test` runs, each property test at the examples it names through examples(); `soak` draws ten times as
# many (`pytest --hypothesis-profile=soak tests/planner tests/simulation tests/test_input_properties.py`). No
# deadline: a solve or a simulation may take a second on a loaded machine without being wrong.
_CI_EXAMPLES = 100
settings.register_profile(
    "ci",
    max_examples=_CI_EXAMPLES,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.register_profile("soak", parent=settings.get_profile("ci"), max_examples=10 * _CI_EXAMPLES)


def examples(ci: int) -> int:
    """`ci` examples under the ci profile, as many more as the loaded profile draws (ten times under soak)."""
    return max(1, ci * settings.default.max_examples // _CI_EXAMPLES)


def pytest_collection_finish(session: pytest.Session) -> None:
    """torch computes on one thread in this process, as the MPI ranks and the sandbox jobs of the tests do: on
    two shared cores a second intra-op thread spins beside the first and doubled the CPU time of the same work
    (tests/training/test_models.py: 15.3 CPU-s with two threads, 7.2 with one). Only when a test module
    imported torch: a run without torch never pays its import for this."""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


@pytest.fixture(scope="session")
def warm(tmp_path_factory):
    """This machine as one node of the ranks a test starts under a local mpirun: the directory of its warm server
    (tests/training/worker_jobs.py's warm_server), one per test process, started by the first test that asks."""
    from tests.training.worker_jobs import warm_server

    with warm_server(tmp_path_factory.mktemp("warm")) as directory:
        yield directory


@pytest.fixture(autouse=True)
def isolated_env(tmp_path, monkeypatch):
    home = tmp_path / "deepvm-home"
    monkeypatch.setenv("DEEPVM_HOME", str(home))
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("DEEPVM_DEBUG", raising=False)
    return home


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """A moto S3 server over HTTP, the way boto3 talks to real S3 (tests use buckets of their own)."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run `deepvm ARGS` as a separate process, the way a script does: no terminal on stdin, as in CI
    (a developer's terminal must not make `up` stop to ask)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "deepvm_cli", *args],
        cwd=REPO,
        env=full_env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@dataclass(frozen=True)
class CliResult:
    """What a command line left: the fields of subprocess.CompletedProcess that tests read."""

    returncode: int
    stdout: str
    stderr: str


Cli = Callable[..., CliResult]


def main_in_process(*args: str, env: dict[str, str] | None = None) -> CliResult:
    """`deepvm ARGS` in this process (deepvm_cli.main.main), as run_cli runs it in a child: from the repository,
    stdin not a terminal, `env` on top of the test's own for that line only, a console made for that
    environment, stdout and stderr kept. A line costs what the command does instead of a Python start and
    deepvm's imports (0.6-0.85 CPU-s; 2 CPU-s for a command that opens a cluster and logs in to its head).
    run_cli stays for what only a process shows: what it imports, how it exits, a terminal or its absence."""
    from deepvm_cli.main import main
    from deepvm_cli.ui import console

    stdout, stderr = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as line, contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        for key, value in (env or {}).items():
            line.setenv(key, value)
        line.chdir(REPO)
        line.setattr(sys, "stdin", io.StringIO())
        out, err = console.new_consoles()  # rich writes to sys.stdout / sys.stderr as they are when it prints
        line.setattr(console, "out", out)
        line.setattr(console, "err", err)
        code = main(list(args))
    return CliResult(code, stdout.getvalue(), stderr.getvalue())


def deepvm_line(*args: str, env: dict[str, str], timeout: float | None = None) -> CliResult:
    """`deepvm ARGS` in this process (main_in_process), or, given a `timeout`, as a process that can be cut off
    (run_cli): for a line that follows a job for minutes, or starts what outlives it (`up`, `train`)."""
    if timeout is None:
        return main_in_process(*args, env=env)
    done = run_cli(*args, env=env, timeout=timeout)
    return CliResult(done.returncode, done.stdout, done.stderr)


@pytest.fixture
def cli() -> Cli:
    """`cli(*args, env=...)`: main_in_process, for a test that runs command lines."""
    return main_in_process
