"""A job's `setup:` on a node, the preparation script run for real with bash in a temporary home (this machine
as the node; pushes are copies): a failing line fails the node's preparation in one line naming the line, its
exit status and its last output, and nothing after it runs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from worker_jobs import end_warm_servers

import training.control.staging as staging
from provisioning.cloud.types import HostSpec
from provisioning.core.errors import InputError
from training.control.staging import JobToStage, prepare_nodes, setup_marker, stage_runtime
from training.shared.transport import OutputLine

INTERNAL = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHm0o1fVvPzSgHLkwZkt7Qv7rX5O4xJf7Kq6yq0E0Dq9 deepvm-internal-c"
HOST = HostSpec("trainer-1", "10.0.0.7", Path("key"), Path("known_hosts"))


@pytest.fixture
def node(tmp_path, monkeypatch) -> Path:
    """The node's home: staging's pushes copy into it and its commands run there, in bash, with it as HOME."""
    home = tmp_path / "node"
    home.mkdir()

    def push(hosts: Sequence[HostSpec], local: Path, remote: str, progress: object = None) -> list[object]:
        shutil.copytree(local, home / remote, dirs_exist_ok=True)
        return []

    def run(hosts: Sequence[HostSpec], command: str, on_line: Callable[[OutputLine], None],
            env: dict[str, str] | None = None) -> dict[str, int]:  # fmt: skip
        done = subprocess.run(["bash", "-c", command], cwd=home, env={**os.environ, **(env or {}), "HOME": str(home)},
                              capture_output=True, text=True)  # fmt: skip
        for stream, text in (("stdout", done.stdout), ("stderr", done.stderr)):
            for line in text.splitlines():
                on_line(OutputLine(hosts[0].name, stream, line))
        return {hosts[0].name: done.returncode}

    monkeypatch.setattr(staging, "push_tree", push)
    monkeypatch.setattr(staging, "run_on_hosts", run)
    yield home
    end_warm_servers(home / "deepvm" / "warm")  # the node's warm server, which preparing it starts


def prepare(node: Path, job_dir: Path, setup: Sequence[str]) -> list[str]:
    """Prepare the node for job-1 with `setup`; the node's output lines."""
    job_dir.mkdir(exist_ok=True)
    (job_dir / "job.yaml").write_text("steps: 1\n")
    job = JobToStage(stage_runtime(job_dir.parent / "runtime"), job_dir, "job-1", tuple(setup), {},
                     sys.executable, INTERNAL)  # fmt: skip
    lines: list[str] = []
    prepare_nodes([HOST], set(), job, lambda p: None, lambda line: lines.append(line.text))
    return lines


def test_a_failing_setup_line_fails_the_node_and_nothing_after_it_runs(node, tmp_path):
    setup = ["echo one", "echo about to look; ls /no/such/dir", "touch ran-after"]
    with pytest.raises(InputError) as info:
        prepare(node, tmp_path / "job", setup)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(
        f"preparing {HOST.where} failed: its setup line 2 (echo about to look; ls /no/such/dir) exited with status 2;"
    )
    assert "about to look | ls: cannot access '/no/such/dir': No such file or directory" in message
    assert not (node / "deepvm/jobs/job-1/job/ran-after").exists()  # nothing after the failing line ran
    assert not (node / setup_marker(setup)).exists()  # not marked done: a retry runs it again
    assert not list((node / "deepvm").glob("warm/*.lock"))  # nor what preparing does after setup

    fixed = ["echo one", "echo about to look; ls /", "touch ran-after"]
    assert "one" in prepare(node, tmp_path / "job", fixed)
    assert (node / "deepvm/jobs/job-1/job/ran-after").exists() and (node / setup_marker(fixed)).exists()


def test_a_line_that_fails_to_parse_is_named_too(node, tmp_path):
    with pytest.raises(InputError, match=r"its setup line 1 \(if then\) exited with status 2; its last output: .*syn"):
        prepare(node, tmp_path / "job", ["if then", "touch ran-after"])
    assert not (node / "deepvm/jobs/job-1/job/ran-after").exists()
