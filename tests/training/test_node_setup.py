"""A job's `setup:` on a node, the preparation script run for real with bash in a temporary home (this machine
as the node; pushes are copies): a failing line fails the node's preparation in one line naming the line, its
exit status and its last output, and nothing after it runs; `$DEEPVM_PIP install` puts a package into the job's
environment over deepvm's, which the job's ranks then import."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from imds import imds_endpoint
from worker_jobs import end_warm_servers, launch_ranks

import training.control.staging as staging
from provisioning.cloud.types import HostSpec
from provisioning.core.errors import InputError
from training.control.staging import JobPaths, JobToStage, prepare_nodes, setup_marker, stage_runtime
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

    def run(
        hosts: Sequence[HostSpec],
        command: str,
        on_line: Callable[[OutputLine], None],
        env: dict[str, str] | None = None,
    ) -> dict[str, int]:
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=home,
            env={**os.environ, **(env or {}), "HOME": str(home)},
            capture_output=True,
            text=True,
        )
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
    job = JobToStage(
        stage_runtime(job_dir.parent / "runtime"), job_dir, "job-1", tuple(setup), {}, sys.executable, INTERNAL
    )
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
    assert not (node / setup_marker(setup, sys.executable)).exists()  # not marked done: a retry runs it again
    assert not list((node / "deepvm").glob("warm/*.lock"))  # nor what preparing does after setup

    fixed = ["echo one", "echo about to look; ls /", "touch ran-after"]
    assert "one" in prepare(node, tmp_path / "job", fixed)
    assert (node / "deepvm/jobs/job-1/job/ran-after").exists()
    assert (node / setup_marker(fixed, sys.executable)).exists()


def test_a_line_that_fails_to_parse_is_named_too(node, tmp_path):
    with pytest.raises(InputError, match=r"its setup line 1 \(if then\) exited with status 2; its last output: .*syn"):
        prepare(node, tmp_path / "job", ["if then", "touch ran-after"])
    assert not (node / "deepvm/jobs/job-1/job/ran-after").exists()


def tiny_wheel(folder: Path) -> Path:
    """A wheel of `tinypkg` (VALUE = 42) that requires torch and pyyaml: installed from this file with no index,
    it shows that what deepvm's environment has counts as installed (nothing is fetched, torch not reinstalled)."""
    info = "tinypkg-0.1.dist-info"
    files = {
        "tinypkg/__init__.py": "VALUE = 42\n",
        f"{info}/METADATA": "Metadata-Version: 2.1\nName: tinypkg\nVersion: 0.1\nRequires-Dist: torch\n"
        "Requires-Dist: pyyaml\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{info}/RECORD"] = "".join(f"{name},,\n" for name in [*files, f"{info}/RECORD"])
    wheel = folder / "tinypkg-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return wheel


@pytest.mark.mpi
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs Open MPI's mpirun")
def test_setup_pip_installs_into_the_job_environment_which_the_ranks_import(node, tmp_path, warm):
    wheel = tiny_wheel(tmp_path)
    job_dir = tmp_path / "job"
    import_it = "$DEEPVM_PYTHON -c 'import tinypkg, torch; print(tinypkg.VALUE)'"
    setup = [f"$DEEPVM_PIP install --no-index {wheel}", import_it]
    lines = prepare(node, job_dir, setup)
    assert "Installing collected packages: tinypkg" in lines and "42" in lines  # torch, pyyaml: already there

    # a rank (a fork of the node's warm server, deepvm's python) given the job's environment, as the launcher
    # names it on every rank's command line (test_recovery), imports what setup installed there
    env = JobPaths(str(node), "job-1").env
    (job_dir / "uses_tinypkg.py").write_text(
        "import json, os\nimport torch.distributed as dist\nimport tinypkg\nfrom training import job\n"
        "ctx = job.attach()\ndist.init_process_group(ctx.backend)\nctx.restore()\n"
        "print(json.dumps({'event': 'tinypkg', 'value': tinypkg.VALUE, 'python': os.environ['DEEPVM_PYTHON']}))\n"
        "ctx.step(1, dict, loss=0.0)\n"
    )
    spec = job_dir / "job.yaml"
    spec.write_text("steps: 1\nrun: {script: uses_tinypkg.py}\n")
    with imds_endpoint(tmp_path) as url:
        proc = launch_ranks(spec, "trainer,holder", url, planned_trainers=1, warm=warm, extra=["--job-env", env])
        stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 0, stderr[-3000:]
    said = [json.loads(line) for line in stdout.splitlines() if line.startswith('{"event": "tinypkg"')]
    assert said == [{"event": "tinypkg", "value": 42, "python": f"{Path(env).resolve()}/bin/python"}]
