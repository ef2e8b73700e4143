"""The old head's side of a hand-over (training/head/handover_run.py): what travels to the new head and in which
order, with recording hands in place of SSH and EC2 (the sequence around it: test_controller_handover.py)."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from provisioning.catalog.model import Market
from provisioning.cloud.ssh import TransportError
from provisioning.cloud.types import CloudKind, CloudResources, HostSpec, NodeRecord
from provisioning.clusters.store import ClusterRow, ClusterStatus, Store
from provisioning.core.errors import CloudError
from provisioning.planner.plan import Role
from tests.cloud.plans import make_tiering_plan
from training.control.handover import HandOverFailed, Successor
from training.head import job_service
from training.head.handover_run import HandOverHands, HandOverRun
from training.head.joblog import JobLog
from training.shared.jobstore import JobRow, JobStatus, JobStore
from training.shared.layout import HANDED_OVER_MARK, MANAGED_HOME
from training.shared.records import HeadJob, LogRecord

NEW = NodeRecord(
    "i-h0000001",
    "c5.xlarge",
    Market.ON_DEMAND,
    Role.HOLDER,
    "us-east-1c",
    "running",
    "10.0.0.9",
    None,
    0.17,
    launched_at="2026-11-25T10:09:00+00:00",
)
TO = Successor("i-h0000000", NEW, "us-east-1c")
HOLDERS = "arn:aws:iam::123456789012:instance-profile/deepvm/deepvm-c1-holders"


class Hands:
    """Plays the new head: a directory for its home; every act recorded in `acts`, `fail` the one that fails."""

    def __init__(self, new_home: Path, fail: str = "") -> None:
        self.new_home, self.fail = new_home, fail
        self.acts: list[tuple[str, str]] = []
        self.profile: str | None = HOLDERS

    def hands(self) -> HandOverHands:
        return HandOverHands(self.push, self.run, self.profile_of, self.set_profile)

    def _act(self, what: str, detail: str = "") -> None:
        self.acts.append((what, detail))
        if what == self.fail:
            raise (CloudError if what == "set_profile" else TransportError)(f"{what} refused")

    def push(self, host: HostSpec, staged: Path, keys: dict[str, bytes]) -> None:
        self._act("push", host.address)
        for path, data in keys.items():
            (self.new_home / path).parent.mkdir(parents=True, exist_ok=True)
            (self.new_home / path).write_bytes(data)
        shutil.copytree(staged, self.new_home / MANAGED_HOME, dirs_exist_ok=True)

    def run(self, host: HostSpec, script: str) -> None:
        self._act("watch" if "training.head.idle_cluster" in script else "run", script)

    def profile_of(self, instance_id: str) -> str | None:
        self._act("profile_of", instance_id)
        return self.profile

    def set_profile(self, instance_id: str, profile: str) -> None:
        self._act("set_profile", profile)
        self.profile = profile


def _old_head(tmp_path: Path) -> tuple[Path, HeadJob]:
    """The old head's managed home: its state store with the job's row, the job's root, the cluster's keys."""
    home = tmp_path / "old" / MANAGED_HOME
    root = home / "jobs" / "job-1"
    (root / "job").mkdir(parents=True)
    (root / "job" / "job.yaml").write_text("name: fake\n")
    (root / "out" / "tensorboard").mkdir(parents=True)
    (root / "out" / "tensorboard" / "events.out.tfevents.1.00001").write_bytes(b"scalars")
    (root / "log.jsonl").write_text('{"kind": "note"}\n' * 3)
    for name in ("supervisor.pid", "service.pid", "service.out"):
        (root / name).write_text("1")
    keys = home / "clusters" / "c1"
    (keys / "host_keys").mkdir(parents=True)
    (keys / "id_ed25519").write_bytes(b"INTERNAL KEY")
    (keys / "host_keys" / "i-h0000001").write_bytes(b"ssh-ed25519 HOST")
    handing = f"control passes to the new head {TO.describe()}"
    JobStore(home / "state.db").put(
        JobRow(
            "job-1",
            "c1",
            "fake",
            "job.yaml",
            JobStatus.RUNNING,
            "now",
            "",
            47,
            480,
            3,
            0.5,
            1,
            0,
            47,
            0.0,
            0.1,
            "out",
            "python3",
            handing,
        )
    )
    cluster = ClusterRow(
        "c1",
        CloudKind.SANDBOX,
        ClusterStatus.UP,
        make_tiering_plan(),
        "tok",
        CloudResources("k"),
        "root",
        "2026-11-23T10:00:00+00:00",
    )
    job = HeadJob("job-1", cluster, (), "job.yaml", "python3", True, 3, None, {}, {"AWS_REGION": "us-east-1"}, "now")
    (root / "job.json").write_text(job.to_json())
    return home, job


def _run(tmp_path: Path, fail: str = "") -> tuple[Hands, list[str]]:
    """A hand-over from the old head's home to a new head played by Hands (a failure carries them: `.hands`)."""
    home, job = _old_head(tmp_path)
    hands, notes = Hands(tmp_path / "new", fail), []
    host = HostSpec("holder-h0000001", "10.0.0.9", home / "clusters/c1/id_ed25519", home / "known_hosts")
    try:
        HandOverRun(home, job, "deepvm-c1-controller", lambda _: host, hands.hands())(TO, notes.append)
    except HandOverFailed as exc:
        exc.hands = hands  # type: ignore[attr-defined]
        raise
    return hands, notes


def test_the_state_travels_then_the_profile_then_the_controller_starts_on_the_new_head(tmp_path):
    hands, notes = _run(tmp_path)
    assert [what for what, _ in hands.acts] == ["push", "profile_of", "set_profile", "run"]
    assert hands.profile == "deepvm-c1-controller"
    script = hands.acts[-1][1]
    assert 'training.head.job_supervisor "$HOME/deepvm/managed/jobs/job-1"' in script and "AWS_REGION" in script

    new = tmp_path / "new" / MANAGED_HOME
    with sqlite3.connect(new / "state.db") as db:  # the job's row, as the old controller left it
        (message,) = db.execute("SELECT message FROM jobs WHERE job_id = 'job-1'").fetchone()
    assert message == f"control passes to the new head {TO.describe()}"
    record = HeadJob.from_json((new / "jobs/job-1/job.json").read_text())
    assert (record.head, record.handed_from) == ("i-h0000001", "i-h0000000")
    root = new / "jobs/job-1"
    assert (root / "log.jsonl").read_text().count("\n") == 3  # whole: a follower's line numbers carry on
    assert (root / "out/tensorboard/events.out.tfevents.1.00001").read_bytes() == b"scalars"
    assert (root / "job/job.yaml").is_file()
    assert not {p.name for p in root.iterdir()} & {"supervisor.pid", "service.pid", "service.out"}
    assert (new / "clusters/c1/id_ed25519").read_bytes() == b"INTERNAL KEY"
    assert (new / "clusters/c1/host_keys/i-h0000001").is_file()
    assert notes == [f"control passed to {TO.describe()}: the job's controller runs there from now on"]


def test_a_controller_that_does_not_start_there_gives_the_profile_back_and_the_old_head_keeps_control(tmp_path):
    with pytest.raises(HandOverFailed, match=r"^starting the job's controller on i-h0000001: run refused$") as failed:
        _run(tmp_path, fail="run")
    hands = failed.value.hands  # type: ignore[attr-defined]
    assert [p for what, p in hands.acts if what == "set_profile"] == ["deepvm-c1-controller", HOLDERS]
    assert hands.profile == HOLDERS  # it keeps no right it was given for nothing


@pytest.mark.parametrize(
    ("fail", "said", "acts"),
    [
        ("push", "copying the job's state to i-h0000001: push refused", ["push"]),
        (
            "set_profile",
            "giving i-h0000001 the controller's instance profile: set_profile refused",
            ["push", "profile_of", "set_profile"],
        ),
    ],
)
def test_a_copy_or_a_profile_refused_starts_nothing_there(tmp_path, fail, said, acts):
    with pytest.raises(HandOverFailed, match=f"^{said}$") as failed:
        _run(tmp_path, fail=fail)
    assert [what for what, _ in failed.value.hands.acts] == acts  # type: ignore[attr-defined]


def test_the_old_head_marks_the_job_handed_over_once_the_new_controller_runs_and_not_before(tmp_path):
    _run(tmp_path)
    root = tmp_path / "old" / MANAGED_HOME / "jobs/job-1"
    assert (root / HANDED_OVER_MARK).read_text() == "i-h0000000 i-h0000001"
    with pytest.raises(HandOverFailed):
        _run(tmp_path / "again", fail="run")
    assert not (tmp_path / "again/old" / MANAGED_HOME / "jobs/job-1" / HANDED_OVER_MARK).exists()


def test_a_service_restarted_after_the_hand_over_never_runs_the_job_and_terminates_its_head(tmp_path):
    """The old head's supervisor restarts a service that crashed after handing over: it finds the mark, runs no
    controller (the job's YAML is not even read) and ends as handed over, so nothing restarts it."""
    home, job = _old_head(tmp_path)
    Store().put_cluster(job.cluster)  # a sandbox's record whose cloud is gone: terminating finds nothing to do
    root = home / "jobs/job-1"
    (root / "job/job.yaml").unlink()
    (root / HANDED_OVER_MARK).write_text("i-h0000000 i-h0000001")
    assert job_service.main([str(root)]) == job_service.HANDED_OVER
    notes = [LogRecord.from_json(line).text for line in (root / "log.jsonl").read_text().splitlines()[3:]]
    assert notes == ["control passed to i-h0000001; this head (i-h0000000) terminates"]


def test_a_head_that_cannot_terminate_itself_says_so_and_still_ends_as_handed_over(tmp_path):
    class Refusing:
        def retire(self, instance_ids: list[str], why: str) -> None:
            raise CloudError("UnauthorizedOperation")

    log = JobLog(tmp_path / "log.jsonl")
    assert job_service.terminate_self(log, Refusing(), "i-old", "control passed to i-new") == job_service.HANDED_OVER
    log.close()
    texts = [LogRecord.from_json(line).text for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert texts == [
        "control passed to i-new; this head (i-old) terminates",
        "this head could not terminate itself (UnauthorizedOperation); its successor terminates it",
    ]


@pytest.mark.parametrize("fail", ["", "watch"])
def test_the_idle_watch_moves_too_after_the_job_and_one_that_does_not_start_is_said(tmp_path, fail):
    """`up --autodown`'s watch record travels and the watch starts on the new head after the job's supervisor
    (alone there it would count no job and take the cluster down); a refusal is said, and the job stays handed
    over."""
    home, job = _old_head(tmp_path)
    (home / "cluster").mkdir()
    (home / "cluster" / "watch.json").write_text('{"minutes": 30}')
    hands, notes = Hands(tmp_path / "new", fail), []
    host = HostSpec("holder-h0000001", "10.0.0.9", home / "k", home / "kh")
    HandOverRun(home, job, "deepvm-c1-controller", lambda _: host, hands.hands())(TO, notes.append)
    assert [what for what, _ in hands.acts] == ["push", "profile_of", "set_profile", "run", "watch"]
    assert (tmp_path / "new" / MANAGED_HOME / "cluster/watch.json").read_text() == '{"minutes": 30}'
    assert 'training.head.idle_cluster "$HOME/deepvm/managed/cluster"' in hands.acts[-1][1]
    assert (home / "jobs/job-1" / HANDED_OVER_MARK).exists()  # handed over either way
    said = [n for n in notes if "idle watch" in n]
    assert said == (
        []
        if not fail
        else [
            "the cluster's idle watch did not start on i-h0000001 (watch refused); `deepvm up --autodown N` restarts it"
        ]
    )
