"""`deepvm watch` without a cluster: the head's side (`query watch`, a real process on a head's files), the view
at 80 x 24, and the finished run from this machine's copy. tests/cloud/test_managed_e2e.py drives it in a
pseudo-terminal against a sandbox job, a notice included."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from deepvm_cli.main import main
from deepvm_cli.render.watch_model import WatchModel
from deepvm_cli.render.watch_screen import plain_line, screen
from provisioning.catalog.model import Market
from provisioning.cloud.types import CloudKind, CloudResources, NodeRecord
from provisioning.clusters.store import ClusterRow, ClusterStatus, Store
from provisioning.planner.plan import Role
from tests.cloud.plans import make_plan
from tests.conftest import REPO
from training.client.watching import LOG_COPY
from training.shared.jobstore import JobRow, JobStatus, JobStore
from training.shared.progress import Progress
from training.shared.records import LogKind, LogRecord
from training.shared.scalars import MetricPoint
from training.shared.watch_records import Snapshot, watch_line

JOB = "lm-20261123T100000"
START = datetime.now(timezone.utc)  # set before each test: half an hour ago, so a job that ends now ran 30 min


@pytest.fixture(autouse=True)
def _started_half_an_hour_ago() -> None:
    """Half an hour before this test, not before the module's import: a whole suite runs for many minutes."""
    global START
    START = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(minutes=30)


def iso(at: datetime) -> str:
    return at.isoformat(timespec="seconds")


def seed_cluster(status: JobStatus, out: Path | None = None) -> None:
    """A cluster of one on-demand anchor and two spot trainers (one noticed and replaced) and a job on it,
    in DEEPVM_HOME's store, as a head (or, once the cluster is down, this machine) keeps them."""
    store = Store()
    store.put_cluster(
        ClusterRow("c1", CloudKind.AWS, ClusterStatus.UP, make_plan(), "tok", CloudResources(), "root", iso(START))
    )
    plan = {g.market: g.usd_per_hour for g in make_plan().nodes}
    nodes = [
        ("i-a", Market.ON_DEMAND, Role.ANCHOR),
        ("i-t1", Market.SPOT, Role.TRAINER),
        ("i-t2", Market.SPOT, Role.TRAINER),
    ]
    store.put_nodes(
        "c1",
        [
            NodeRecord(i, "g4dn.xlarge", m, r, "us-east-1a", "running", "10.0.0.1", None, plan[m], iso(START))
            for i, m, r in nodes
        ],
    )
    store.add_event("c1", "notice", f"{JOB}: Spot interruption notice on trainer-t1 (instance-action)")
    store.add_event("c1", "recovered", f"{JOB}: recovered (notice): 2 -> 1 trainers, resumed at step 40")
    JobStore().put(
        JobRow(
            JOB,
            "c1",
            "lm",
            "/x/lm.yaml",
            status,
            iso(START),
            "",
            60,
            100,
            2,
            0.5,
            1,
            0,
            60,
            0.0,
            0.012,
            str(out or "/tmp/out"),
            "python3",
            "",
            "i-a",
        )
    )
    # the row's updated_at is now: a job in a final state ended now


def records(steps: int = 60) -> list[LogRecord]:
    """A job's log: progress and metrics every 10 steps, 30 s apart, one redone step range after a relaunch."""
    found = []
    for n, step in enumerate([*range(10, 50, 10), *range(40, steps + 1, 10)]):
        at = START.timestamp() + 30 * n
        point = MetricPoint(step, {"loss": 2 - step / 100, "acc": step / 100})
        found.append(LogRecord(LogKind.METRICS, at, metrics=point))
        found.append(
            LogRecord(LogKind.PROGRESS, at, progress=Progress(step, 100, None, 2 - step / 100, 50.0, 2, 0.01, False))
        )
    return found


def test_the_view_fits_80_by_24_and_shows_every_part():
    model = WatchModel(JOB)
    for record in records():
        model.add(record)
    model.add(Snapshot.from_dict(json.loads(_snapshot_json())["snapshot"]))
    text = screen(model, 80, 24).plain
    lines = text.splitlines()
    assert len(lines) <= 24 and max(len(line) for line in lines) <= 80, text
    assert lines[0].startswith(f"{JOB} · running · step 60/100 · eta ")
    assert "loss 1.4000 at step 60" in text and "acc" in text  # the curve, and the other metric's sparkline
    assert any(ch in text for ch in "⠁⠂⠄⡀⢀⠈⠐⠠") and "▁" in text
    assert "$/h now" in text and "so far" in text and "projected" in text and "on-demand" in text
    assert " 2 x trainer  spot      g4dn.xlarge    us-east-1a   running" in text
    assert " 1 x anchor   on-demand g4dn.xlarge    us-east-1a   running" in text
    assert "notice      Spot interruption notice on trainer-t1 (instance-action)" in text  # its job, said once
    assert [s for s, _ in model.loss_curve] == [10, 20, 30, 40, 50, 60]  # steps 40.. redone: shown once
    assert model.loss_curve[3] == (40, 1.6)
    assert model.projected_usd is not None and model.projected_usd > model.snapshot.money.usd  # 40 steps to go
    line = plain_line(model)
    assert "\n" not in line and "loss 1.4000" in line and "3 running: 1 on-demand, 2 spot" in line


def _snapshot_json() -> str:
    seed_cluster(JobStatus.RUNNING)
    code = (
        "import sys; from provisioning.clusters.store import Store; from training.head.query import _summary; "
        "from training.shared.watch_records import snapshot_of; "
        "print(snapshot_of(_summary(sys.argv[1]), Store()).to_json())"
    )
    out = subprocess.run([sys.executable, "-c", code, JOB], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_the_snapshot_carries_the_nodes_money_and_timeline_since_the_job_started():
    snapshot = watch_line(_snapshot_json())
    assert isinstance(snapshot, Snapshot) and snapshot.job.job_id == JOB
    assert next((n.instance_id, n.market, n.role) for n in snapshot.nodes) == ("i-a", Market.ON_DEMAND, Role.ANCHOR)
    assert [e.kind for e in snapshot.timeline][-2:] == ["notice", "recovered"]
    spot = next(g.usd_per_hour for g in make_plan().nodes if g.market is Market.SPOT)
    on_demand = next(g.usd_per_hour for g in make_plan().nodes if g.market is Market.ON_DEMAND)
    assert snapshot.money.usd_per_hour == pytest.approx(on_demand + 2 * spot, abs=1e-5)
    assert snapshot.money.usd == pytest.approx(0.5 * (on_demand + 2 * spot), rel=0.02)  # 30 minutes so far
    assert snapshot.money.on_demand_usd == pytest.approx(0.5 * 3 * on_demand, rel=0.02)  # the same nodes, on demand


def head_watch(home: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "DEEPVM_HOME": str(home), "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-m", "training.head.query", "watch", JOB, "--every", "0.2", *args],
        cwd=REPO,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def write_log(home: Path, extra: list[LogRecord] = ()) -> None:
    root = home / "jobs" / JOB
    root.mkdir(parents=True)
    (root / "job.json").write_text("{}")
    (root / "log.jsonl").write_text("".join(r.to_json() + "\n" for r in [*records(), *extra]))


def test_the_head_streams_the_log_and_snapshots_and_ends_with_the_job(isolated_env):
    seed_cluster(JobStatus.COMPLETED)
    write_log(
        isolated_env,
        [
            LogRecord(
                LogKind.STATE, START.timestamp() + 1800, text="completed: step 100/100", status=JobStatus.COMPLETED
            )
        ],
    )
    process = head_watch(isolated_env)  # its stdin stays open, as the watcher's SSH session does
    assert process.stdout is not None
    out = process.stdout.read()  # to the end: the job is over
    process.wait(timeout=10)
    items = [watch_line(line) for line in out.splitlines()]
    assert process.returncode == 0 and None not in items
    assert [i.kind for i in items if isinstance(i, LogRecord)][-1] is LogKind.STATE
    (last,) = [i for i in items if isinstance(i, Snapshot)]  # the job is over: one snapshot, then the end
    assert last.job.status is JobStatus.COMPLETED and last.money.usd_per_hour > 0
    spot = next(g.usd_per_hour for g in make_plan().nodes if g.market is Market.SPOT)
    on_demand = next(g.usd_per_hour for g in make_plan().nodes if g.market is Market.ON_DEMAND)
    assert last.money.usd == pytest.approx(0.5 * (on_demand + 2 * spot), rel=0.02)  # its 30 minutes
    assert last.money.on_demand_usd == pytest.approx(0.5 * 3 * on_demand, rel=0.02)


def test_the_head_side_ends_when_the_watcher_goes(isolated_env):
    seed_cluster(JobStatus.RUNNING)
    write_log(isolated_env)
    process = head_watch(isolated_env)
    assert process.stdout is not None
    seen = [watch_line(process.stdout.readline()) for _ in range(len(records()) + 2)]
    assert sum(isinstance(i, Snapshot) for i in seen) >= 1  # following a running job, snapshots and all
    assert process.poll() is None
    process.stdin.close()  # what closing the SSH session does to it
    deadline = time.monotonic() + 10
    while process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process.returncode == 0


def test_a_finished_run_whose_cluster_is_gone_shows_from_its_fetched_log(isolated_env, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    seed_cluster(JobStatus.COMPLETED, out=out)
    Store().set_status("c1", ClusterStatus.TERMINATED)
    Store().close_costs("c1")
    (out / LOG_COPY).write_text("".join(r.to_json() + "\n" for r in records(100)))
    assert main(["watch", JOB]) == 0
    text = capsys.readouterr().out
    *timeline, last = text.splitlines()
    assert [line.split()[1] for line in timeline] == ["created", "notice", "recovered", "terminated"]
    assert "recovered (notice): 2 -> 1 trainers" in timeline[2]
    assert last.startswith(f"{JOB} · completed · step 100/100 · loss 1.0000 · acc 1 · $0.0000/h now · $0.")
    money = r" so far · projected \$0\.\d{4} · on-demand \$0\.\d{4} \(\d+% less\) · 0 running: none$"
    assert re.search(money, last), last


def test_a_finished_run_without_a_copy_of_its_log_says_how_to_get_one(isolated_env, capsys):
    seed_cluster(JobStatus.COMPLETED)
    Store().set_status("c1", ClusterStatus.TERMINATED)
    assert main(["watch", JOB]) == 5  # NotFoundError
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no copy of its log is here" in err and f"deepvm fetch {JOB}" in err


def test_a_finished_run_whose_head_copied_it_to_s3_shows_from_there(isolated_env, s3_endpoint, monkeypatch, capsys):
    """`train --down-when-done`: the head copied the log and summary to S3 and took the cluster down; this
    machine fetched nothing and last heard the job running at step 60. Moto's S3 over HTTP."""
    import boto3

    from training.shared.summary import RunSummary

    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="watch-outputs")
    seed_cluster(JobStatus.RUNNING)
    row = JobStore().get(JOB)
    JobStore().put(replace(row, outputs_url="s3://watch-outputs", down_when_done=True))
    Store().set_status("c1", ClusterStatus.TERMINATED)
    Store().close_costs("c1")
    summary = RunSummary(
        job_id=JOB,
        cluster="c1",
        status=JobStatus.COMPLETED,
        message="completed",
        step=100,
        total_steps=100,
        started_at=iso(START),
        ended_at=iso(START + timedelta(minutes=30)),
        cost_usd=0.02,
        on_demand_usd=0.05,
        interruptions=1,
        replacements=1,
    )
    files = f"deepvm-jobs/{JOB}"
    s3.put_object(Bucket="watch-outputs", Key=f"{files}/summary.json", Body=summary.to_json().encode())
    assert main(["watch", JOB]) == 5  # the summary is there, the log not yet: said, with where it looked
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"its log is not in s3://watch-outputs/{files}/ (yet)" in err, err
    s3.put_object(
        Bucket="watch-outputs",
        Key=f"{files}/log.jsonl",
        Body="".join(r.to_json() + "\n" for r in records(100)).encode(),
    )
    assert main(["watch", JOB]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith(f"{JOB} · completed · step 100/100 · loss 1.0000 · acc 1 · "), last
    assert JobStore().get(JOB).status is JobStatus.COMPLETED  # this machine's row caught up with the summary


@pytest.mark.parametrize("every", ["0", "-1", "nan", "1e9"])
def test_a_bad_refresh_interval_is_one_line_and_exit_2(every, capsys):
    assert main(["watch", JOB, "--every", every]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_plan_imports_nothing_of_the_watch_nor_the_metrics_writers():
    code = (
        "import runpy, sys\n"
        "sys.argv = ['deepvm', 'plan', '--offline', '--max-price', '3', '--json']\n"
        "try:\n    runpy.run_module('deepvm_cli', run_name='__main__')\n"
        "except SystemExit as exc:\n    assert exc.code == 0, exc.code\n"
        "watch = ('deepvm_cli.render.watch', 'deepvm_cli.render.chart',\n"
        "         'training.client.watching', 'training.shared.watch_records', 'training.shared.scalars',\n"
        "         'training.control.scalar_sink', 'tensorboardX', 'tensorboard', 'mlflow')\n"
        "sys.stderr.write(f'loaded={sorted(m for m in sys.modules if m.startswith(watch))}\\n')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "loaded=[]" in result.stderr, result.stderr[-500:]
