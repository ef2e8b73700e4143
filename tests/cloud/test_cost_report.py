"""What clusters cost, as `down`, `status`, `cost-report` and the end of `train` say it: clusters launched
on a moto server over HTTP, the CLI run in this process (seconds, not a process per command).

A cluster cannot be left to run for minutes in a test, so its nodes' cost segments are moved 12 minutes
back in the state file: everything after that (termination, totals, runtimes) is the code's own.
"""

from __future__ import annotations

import io
import json
import re
import shlex
import sqlite3
from contextlib import nullcontext
from datetime import datetime, timedelta, timezone

import pytest
from rich.console import Console

from deepvm_cli.commands.train import billing_reminder
from deepvm_cli.main import main
from deepvm_cli.ui import console
from provisioning.catalog.model import Market
from provisioning.clusters.cost import CostSegment, cluster_cost
from provisioning.clusters.handle import Cluster
from provisioning.clusters.store import Store
from provisioning.core.errors import InputError
from tests.cloud.plans import make_plan, write_plans
from training.control.stops import TrainingFailed, TrainingStopped
from training.shared.jobstore import JobRow, JobStatus, JobStore

T0 = datetime(2026, 11, 23, 14, 0, tzinfo=timezone.utc)
BACK = timedelta(minutes=12)
_DOWN = re.compile(r"^cluster (\S+) is down: ran (\d+)m(\d\d)s, cost \$(\d+\.\d{4})$")


def _cli(capsys, monkeypatch, *args: str, columns: int = 120, terminal_answer: str | None = None):
    """(exit code, stdout, stderr) of `deepvm ARGS` run in this process, `columns` wide; with
    `terminal_answer`, stdin is a terminal on which the user types it."""
    monkeypatch.setattr(console, "out", Console(highlight=False, soft_wrap=False, width=columns))
    monkeypatch.setattr(console, "err", Console(stderr=True, highlight=False, width=columns))
    if terminal_answer is not None:
        monkeypatch.setattr("sys.stdin", _Terminal(terminal_answer))
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _up(capsys, monkeypatch, tmp_path, ami, name: str) -> list[str]:
    """Launch `name` (1 on-demand anchor + 2 spot trainers), its nodes' segments 12 minutes back; the
    head is then lost (terminated in the cloud, seen by a refresh), so no command tries to reach it over
    SSH. The running nodes' instance ids."""
    plan = write_plans(tmp_path / f"{name}.json", make_plan(spot=2, on_demand=1))
    code, _, err = _cli(
        capsys,
        monkeypatch,
        "up",
        "--yes",
        "--cloud",
        "aws",
        "--plan",
        str(plan),
        "--ami",
        ami,
        "--no-wait",
        "--name",
        name,
        "--json",
    )
    assert code == 0, err
    start = (datetime.now(timezone.utc) - BACK).isoformat(timespec="seconds")
    with sqlite3.connect(Store().path) as db:
        db.execute("UPDATE costs SET started_at = ? WHERE cluster = ?", (start, name))
    nodes = Store().nodes(name)
    head = next(n for n in nodes if n.market is Market.ON_DEMAND)
    from provisioning.cloud.aws.context import AwsContext

    AwsContext(region="us-east-1").client("ec2").terminate_instances(InstanceIds=[head.instance_id])
    assert Cluster.open(name).refresh()
    return [n.instance_id for n in nodes if n is not head]


def _job(cluster: str, job_id: str, status: JobStatus, step: int) -> JobRow:
    return JobStore().put(
        JobRow(
            job_id=job_id,
            cluster=cluster,
            name="resnet",
            spec_path="/jobs/resnet.yaml",
            status=status,
            started_at=datetime.now(timezone.utc).isoformat(),
            updated_at="",
            step=step,
            total_steps=200,
            world_size=2,
            loss=0.5,
            restarts=0,
            lost_steps=0,
            checkpoint_step=step,
            cost_base_usd=0.0,
            cost_usd=0.01,
            out_dir="/tmp/out",
            python="python3",
            message="",
            controller="local",
        )
    )


# the arithmetic


def test_cost_is_each_segment_at_its_price_and_runtime_spans_first_launch_to_last_end():
    segments = [
        CostSegment(0.5, T0, T0 + timedelta(hours=1)),
        CostSegment(0.2, T0 + timedelta(minutes=30), T0 + timedelta(hours=2)),
    ]
    done = cluster_cost(segments, now=T0 + timedelta(hours=5))
    assert done.usd == pytest.approx(0.5 + 1.5 * 0.2)
    assert (done.runtime_s, done.usd_per_hour, done.billing) == (7200.0, 0.0, False)
    assert (done.launched, done.ended) == (T0, T0 + timedelta(hours=2))

    running = cluster_cost([*segments, CostSegment(0.1, T0 + timedelta(hours=3), None)], now=T0 + timedelta(hours=4))
    assert running.usd == pytest.approx(0.5 + 0.3 + 0.1)
    assert (running.runtime_s, running.usd_per_hour, running.billing, running.ended) == (4 * 3600.0, 0.1, True, None)

    never = cluster_cost([], now=T0)
    assert (never.usd, never.runtime_s, never.billing, never.launched) == (0.0, 0.0, False, None)


# down, status


def test_down_ends_with_runtime_and_cost_and_status_shows_the_cluster_and_its_jobs_as_they_ended(
    ctx, ami, tmp_path, capsys, monkeypatch
):
    _up(capsys, monkeypatch, tmp_path, ami, "c1")
    _job("c1", "resnet-1", JobStatus.COMPLETED, 200)
    _job("c1", "resnet-2", JobStatus.RUNNING, 40)  # its controller is gone with the cluster
    code, out, err = _cli(capsys, monkeypatch, "down", "c1", "--yes")
    assert code == 0, err
    summary = _DOWN.match(err.strip().splitlines()[-1])
    assert summary, err
    minutes, seconds, usd = int(summary[2]), int(summary[3]), float(summary[4])
    assert minutes == 12 and seconds < 50  # 12 minutes back, and a down of a few seconds
    # the head ran until the refresh saw it gone (seconds), the two trainers until down: about 12 min each
    assert usd == pytest.approx(12 / 60 * (0.526 + 2 * 0.1578), rel=0.05)

    again = _cli(capsys, monkeypatch, "down", "c1", "--yes", "--json")  # nothing left: the same final figures
    doc = json.loads(again[1])
    assert doc["deleted"] == [] and doc["cost_usd"] == pytest.approx(usd, abs=5e-5)
    assert doc["runtime_s"] == minutes * 60 + seconds and doc["ended_at"] > doc["launched_at"]

    for columns in (80, 120):
        code, out, err = _cli(capsys, monkeypatch, "status", "c1", columns=columns)
        assert code == 0, err
        assert "/h" not in out.splitlines()[1] and "up 0m00s" not in out and "…" not in out
        assert re.search(
            rf"^ran {minutes}m{seconds:02d}s to \d{{4}}-\d\d-\d\d \d\d:\d\d  cost \${usd:.4f} in all$", out, re.M
        ), out
    view = json.loads(_cli(capsys, monkeypatch, "status", "c1", "--json")[1])
    assert (view["status"], view["usd_per_hour"], view["runtime_s"]) == ("terminated", 0.0, doc["runtime_s"])
    assert [j["job_id"] for j in view["jobs"]] == ["resnet-2", "resnet-1"]

    # `status` of every cluster: none is up, and the jobs of the one that is down are still there
    code, out, err = _cli(capsys, monkeypatch, "status", columns=80)
    assert code == 0, err
    text = " ".join(out.split())  # a job's line wraps at 80 columns, between words
    assert text.startswith(
        "jobs of clusters that are down, as last recorded here (2, newest first): "
        "job resnet-2 on c1 (down) ended with its cluster (last heard running at step 40) "
        "step 40/200"
    )
    assert "job resnet-1 on c1 (down) completed step 200/200" in text
    assert "--resume" not in text  # no hint that could not work: the cluster is gone
    doc = json.loads(_cli(capsys, monkeypatch, "status", "--json")[1])
    assert doc["clusters"] == []
    assert [(j["job_id"], j["status"], j["cluster_up"]) for j in doc["jobs_of_clusters_down"]] == [
        ("resnet-2", "running", False),
        ("resnet-1", "completed", False),
    ]


# cost-report


ROUNDED = 0.00005  # the table shows 4 decimals: a later, larger figure may still print half a digit lower


def test_cost_report_lists_every_cluster_ever_recorded_with_totals(ctx, ami, tmp_path, capsys, monkeypatch):
    name = "a-long-cluster-name-that-has-to-wrap-at-80-columns"
    _up(capsys, monkeypatch, tmp_path, ami, name)
    assert _cli(capsys, monkeypatch, "down", name, "--yes")[0] == 0
    gone = Store().cost(name)
    _up(capsys, monkeypatch, tmp_path, ami, name)  # the name again: the old record goes to the history

    doc = json.loads(_cli(capsys, monkeypatch, "cost-report", "--json")[1])
    assert [(c["name"], c["status"]) for c in doc["clusters"]] == [(name, "terminated"), (name, "up")]
    old, new = doc["clusters"]
    assert old["cost_usd"] == pytest.approx(gone.usd, abs=1e-6) and old["usd_per_hour"] == 0.0
    assert old["runtime_s"] == pytest.approx(gone.runtime_s) and old["ended_at"] is not None
    trainers = 2 * 0.1578  # the running cluster's head was lost: its two spot trainers bill
    assert new["usd_per_hour"] == pytest.approx(trainers) and new["ended_at"] is None
    assert new["cost_usd"] == pytest.approx(12 / 60 * (0.526 + trainers), rel=0.05)  # all three, 12 minutes
    (aws,) = doc["totals"]
    assert aws["clusters"] == 2 and aws["cost_usd"] == pytest.approx(old["cost_usd"] + new["cost_usd"], abs=2e-6)
    assert aws["usd_per_hour"] == pytest.approx(trainers)

    for columns in (80, 120):
        code, out, err = _cli(capsys, monkeypatch, "cost-report", columns=columns)
        assert code == 0, err
        assert "…" not in out and max(map(len, out.splitlines())) <= columns
        lines = out.splitlines()
        for cluster in doc["clusters"]:  # every figure whole, on its cluster's first line
            launched = datetime.fromisoformat(cluster["launched_at"]).strftime("%Y-%m-%d %H:%M")
            row = next(line for line in lines if launched in line and cluster["status"] in line)
            runtime, rate, usd = row.split()[-3:]
            if cluster["status"] == "up":  # it runs on between the two reports: seconds more, a bit more cost
                assert rate == f"{cluster['usd_per_hour']:.4f}" and re.fullmatch(r"12m\d\ds", runtime)
                assert -ROUNDED <= float(usd) - cluster["cost_usd"] < 0.002
            else:
                assert (runtime, rate) == (console.duration(cluster["runtime_s"]), "-")
                assert usd == f"{cluster['cost_usd']:.4f}"
        total = re.fullmatch(rf"total aws: \$(\d+\.\d{{4}}) for 2 clusters, billing \${trainers:.4f}/h now", lines[-1])
        assert total and -ROUNDED <= float(total[1]) - aws["cost_usd"] < 0.002, lines[-1]
        assert name in "".join(line.split()[0] for line in lines[2:-1] if line.split())  # wrapped, never cut
        assert "the cloud's bill is the authority" in err


def test_cost_report_with_nothing_recorded_says_so(capsys, monkeypatch):
    code, out, err = _cli(capsys, monkeypatch, "cost-report")
    assert (code, out) == (0, "") and "no clusters recorded yet" in err
    assert json.loads(_cli(capsys, monkeypatch, "cost-report", "--json")[1]) == {"clusters": [], "totals": []}


# train's reminder


def test_the_end_of_train_says_the_cluster_still_bills_and_the_printed_command_stops_it(
    ctx, ami, tmp_path, capsys, monkeypatch
):
    trainers = _up(capsys, monkeypatch, tmp_path, ami, "c1")
    line = f"cluster c1 is still billing ${2 * 0.1578:.4f}/h: `deepvm down c1` stops it\n"
    for ending in (None, TrainingFailed("no holder left"), TrainingStopped("stopped at step 8"), KeyboardInterrupt()):
        with pytest.raises(type(ending)) if ending else nullcontext(), billing_reminder("c1"):
            if ending:
                raise ending
        assert capsys.readouterr().err == line, ending
    with pytest.raises(InputError), billing_reminder("c1"):  # a mistake in the input stays the only line
        raise InputError("--resume: nothing to resume")
    assert capsys.readouterr().err == ""

    command = shlex.split(re.search(r"`([^`]+)`", line)[1])
    code, _, down_err = _cli(capsys, monkeypatch, *command[1:], terminal_answer="y\n")  # as printed, answered yes
    assert code == 0, down_err
    live = ctx.client("ec2").describe_instances(InstanceIds=trainers)["Reservations"][0]["Instances"]
    assert {i["State"]["Name"] for i in live} == {"terminated"}
    with billing_reminder("c1"):  # down: nothing left to remind of
        pass
    assert capsys.readouterr().err == ""


def test_a_replaced_cluster_keeps_its_cost_in_the_history():
    from provisioning.cloud.types import CloudKind, CloudResources, NodeRecord
    from provisioning.clusters.store import ClusterRow, ClusterStatus
    from provisioning.planner.plan import Role

    store = Store()
    row = ClusterRow("c1", CloudKind.AWS, ClusterStatus.PROVISIONING, make_plan(), "tok", CloudResources(), "root", "")
    store.put_cluster(row)
    node = NodeRecord(
        "i-1",
        "g4dn.xlarge",
        Market.SPOT,
        Role.TRAINER,
        "us-east-1a",
        "running",
        "10.0.0.1",
        None,
        0.5,
        (T0 - timedelta(hours=2)).isoformat(),
        "root",
        22,
    )
    store.put_nodes("c1", [node])
    store.close_costs("c1")
    store.set_status("c1", ClusterStatus.TERMINATED)
    before = store.cost("c1")
    store.put_cluster(row)
    (past, current) = store.bills()
    assert (past.name, past.status, past.cost.usd, past.cost.runtime_s) == (
        "c1",
        ClusterStatus.TERMINATED,
        before.usd,
        before.runtime_s,
    )
    assert past.cost.ended == before.ended and past.cost.launched == before.launched
    assert (current.status, current.cost.usd) == (ClusterStatus.PROVISIONING, 0.0)


def test_a_state_file_from_before_the_history_is_brought_up_to_date():
    store = Store()
    with sqlite3.connect(store.path) as db:  # as deepvm wrote it before past_clusters existed
        db.execute("DROP TABLE past_clusters")
        db.execute("UPDATE schema_versions SET version = 1 WHERE name = 'clusters'")
    assert Store().bills() == []
    with sqlite3.connect(store.path) as db:
        assert db.execute("SELECT version FROM schema_versions WHERE name = 'clusters'").fetchone() == (4,)
