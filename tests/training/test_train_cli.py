"""`deepvm train` errors a user can cause (in this process): one line on stderr, a distinct exit code, nothing
started."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import REPO


def test_no_cluster_is_one_line_and_exit_5(cli):
    result = cli("train", str(REPO / "configs" / "resnet.yaml"))
    assert result.returncode == 5
    assert result.stderr == (
        "deepvm: error: no running cluster named 'deepvm' (the default name; --cluster NAME picks another); there "
        "are no clusters yet; start it with `deepvm up --name deepvm`\n"
    )


def test_unknown_cluster_is_one_line_and_exit_5(cli):
    result = cli("train", str(REPO / "configs" / "resnet.yaml"), "--cluster", "nope")
    assert result.returncode == 5 and result.stderr.startswith("deepvm: error: no running cluster named 'nope'")
    assert len(result.stderr.splitlines()) == 1


def test_bad_job_spec_names_file_line_and_field(tmp_path: Path, cli):
    job = tmp_path / "job.yaml"
    job.write_text("name: x\ndataset:\n  kind: synthetic\nsteps: 10\nbatch_sise: 8\n")
    result = cli("train", str(job), "--cluster", "nope")
    assert result.returncode == 2
    assert result.stderr == f"deepvm: error: {job}:5: batch_sise: unknown field; did you mean batch_size?\n"


def test_missing_job_file(tmp_path: Path, cli):
    result = cli("train", str(tmp_path / "absent.yaml"))
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1
    assert "absent.yaml" in result.stderr


def test_own_script_that_is_not_there_fails_before_anything_starts(tmp_path: Path, cli):
    job = tmp_path / "job.yaml"
    job.write_text("steps: 10\nrun: {script: mine.py}\n")
    result = cli("train", str(job))  # no cluster either: the job file is checked first
    assert result.returncode == 2
    assert result.stderr == f"deepvm: error: {job}:2: run.script: no such file: {tmp_path.resolve() / 'mine.py'}\n"


def test_worker_fields_beside_an_own_script_are_refused(tmp_path: Path, cli):
    (tmp_path / "mine.py").write_text("")
    job = tmp_path / "job.yaml"
    job.write_text("dataset: {kind: synthetic}\nsteps: 10\nrun: {script: mine.py}\n")
    result = cli("train", str(job))
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith(f"deepvm: error: {job}:1: dataset: deepvm's worker only")
