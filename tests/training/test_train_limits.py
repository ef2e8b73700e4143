"""`deepvm train --deadline H --budget USD --fallback-max-price USD` and the job file's `limits:`: checked on the
user's machine (one line, exit 2, before anything is staged) and handed to the head with the job."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from deepvm_cli.main import main
from provisioning.cloud.types import CloudKind, CloudResources
from provisioning.clusters.store import ClusterRow, ClusterStatus, Store
from provisioning.core.errors import InputError
from tests.cloud.plans import make_plan, make_tiering_plan
from training.shared.jobspec import load_job_spec
from training.shared.jobstore import JobRow, JobStatus, JobStore
from training.shared.limits import JobLimits, job_limits
from training.shared.records import HeadJob

JOB = "name: limited\ndataset: {kind: synthetic}\nsteps: 10\n"


@pytest.fixture
def job(tmp_path: Path) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(JOB + "limits: {deadline: 10, budget: 50}\n")
    return path


@pytest.fixture
def lab() -> None:
    """A stored Tiering cluster that is up (its c5.xlarge holder: 0.17 $/h on demand); no cloud behind it."""
    Store().put_cluster(
        ClusterRow("lab", CloudKind.SANDBOX, ClusterStatus.UP, make_tiering_plan(), "tok", CloudResources(), "root", "")
    )


def train_error(*args: str, capsys) -> str:
    assert main(["train", *args]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err.removeprefix("deepvm: error: ").rstrip("\n")


def test_the_file_gives_the_limits_and_each_flag_takes_its_place(job):
    in_file = load_job_spec(job).limits.job_limits()
    assert in_file == JobLimits(deadline_hours=10.0, budget_usd=50.0)
    assert job_limits(in_file, 6.0, None, 12.0) == JobLimits(6.0, 50.0, 12.0)
    with pytest.raises(InputError, match="give a deadline too"):
        job_limits(JobLimits(budget_usd=5.0), None, None, 12.0)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--deadline", "0"), "--deadline must be a positive number, got 0"),
        (("--budget", "nan"), "--budget must be a finite number, got nan"),
        (("--fallback-max-price", "-1"), "--fallback-max-price must be a positive number, got -1"),
    ],
)
def test_bad_flags_are_one_line(job, flags, message, capsys):
    assert train_error(str(job), *flags, capsys=capsys) == message


def test_bad_limits_in_the_file_name_line_and_field(tmp_path, capsys):
    path = tmp_path / "job.yaml"
    path.write_text(JOB + "limits:\n  deadline: -3\n")
    assert train_error(str(path), capsys=capsys) == f"{path}:5: limits.deadline: must be greater than 0, got -3"
    path.write_text(JOB + "limits: {fallback_max_price: 12}\n")  # no deadline, in the file or on the line
    assert "give a deadline too" in train_error(str(path), capsys=capsys)


def test_a_fallback_cap_that_buys_no_stand_in_is_refused(job, lab, capsys):
    err = train_error(str(job), "--cluster", "lab", "--fallback-max-price", "0.1", capsys=capsys)
    assert err == (
        "--fallback-max-price $0.1/h leaves nothing for on-demand stand-ins beside the plan's own "
        "on-demand nodes ($0.1700/h)"
    )


def test_a_budget_below_what_the_resumed_job_spent_is_refused(job, lab, capsys):
    at = "2026-11-25T10:00:00+00:00"
    JobStore().put(
        JobRow(
            "limited-1",
            "lab",
            "limited",
            str(job),
            JobStatus.STOPPED,
            at,
            at,
            4,
            10,
            3,
            1.5,
            0,
            0,
            3,
            0.0,
            62.5,
            "/tmp/out",
            "python3",
            "stopped",
        )
    )
    err = train_error(str(job), "--cluster", "lab", "--controller", "local", "--resume", capsys=capsys)
    assert err == "--budget $50 is not above the $62.50 job limited-1 has spent already; give more to resume it"


def test_the_head_job_carries_the_limits_and_reads_an_older_one_without():
    cluster = ClusterRow(
        "c1",
        CloudKind.SANDBOX,
        ClusterStatus.UP,
        make_plan(),
        "tok",
        CloudResources("k"),
        "root",
        "2026-11-23T10:00:00+00:00",
    )
    job = HeadJob(
        "j-1", cluster, (), "job.yaml", "python3", True, 3, None, {}, {}, "now", limits=JobLimits(6.0, 50.0, 12.0)
    )
    assert json.loads(job.to_json())["limits"] == {
        "deadline_hours": 6.0,
        "budget_usd": 50.0,
        "fallback_max_price": 12.0,
    }
    assert HeadJob.from_json(job.to_json()).limits == job.limits
    older = json.loads(job.to_json())
    del older["limits"]
    assert (
        HeadJob.from_json(json.dumps(older)).limits
        == JobLimits()
        == replace(job.limits, deadline_hours=None, budget_usd=None, fallback_max_price=None)
    )
