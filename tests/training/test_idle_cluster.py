"""The head's idle watch (`up --autodown N`, training/head/idle_cluster.py), in this process on a real state store
and a real process standing for a job's supervisor: the cluster goes down N minutes after its last job was seen
running, never while one runs, and the watch looks often enough for a short N. The clock is the test's (moved
at each look), so no test waits for the minutes to pass."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from provisioning.cloud.types import CloudKind, CloudResources
from provisioning.clusters.store import ClusterRow, ClusterStatus
from provisioning.core.home import deepvm_home
from tests.cloud.plans import make_plan
from training.head import idle_cluster
from training.head.autodown import Autodown
from training.shared.records import IdleWatch

pytestmark = pytest.mark.timeout(30)
LOOK_S = 5.0  # what the test's clock moves at each look of the watch


def test_the_cluster_goes_down_n_minutes_after_its_last_job_and_never_while_one_runs(tmp_path):
    root = tmp_path / "watch"
    root.mkdir()
    cluster = ClusterRow(
        "c1",
        CloudKind.AWS,
        ClusterStatus.UP,
        make_plan(),
        "tok",
        CloudResources("k"),
        "root",
        "2026-11-25T00:00:00+00:00",
    )
    (root / "watch.json").write_text(IdleWatch(cluster, (), 1.0, "bucket-1", {}).to_json())
    job = deepvm_home() / "jobs" / "job-1"
    job.mkdir(parents=True)
    supervisor = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "training.head.job_supervisor"])
    (job / "supervisor.pid").write_text(str(supervisor.pid))
    now, downs, pauses = 0.0, [], []

    def clock() -> float:  # the job's supervisor runs for the watch's first 90 s, then ends
        nonlocal now
        now += LOOK_S
        if now >= 90 and supervisor.poll() is None:
            supervisor.kill()
            supervisor.wait()
        return now

    def down(autodown: Autodown, say, notifier) -> None:
        downs.append((now, autodown))

    try:
        assert idle_cluster.watch(root, poll_s=15.0, clock=clock, down=down, sleep=pauses.append) == 0
    finally:
        supervisor.kill()
        supervisor.wait()
    ((at, autodown),) = downs
    assert 90 + 60 <= at <= 90 + 60 + 2 * LOOK_S  # a minute after the job was last seen running, not before
    assert autodown == Autodown("c1", "no job for 1 minutes (up --autodown)", "", "bucket-1")
    assert set(pauses) == {6.0}  # a tenth of the minute, not the 15 s poll: a short N is not stretched
    assert (root / "watch.pid").read_text() == str(os.getpid())
