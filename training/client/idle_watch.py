"""`deepvm up --autodown N`: start the head's idle watch (training/head/idle_cluster.py), which takes the cluster
down once it has had no job for N minutes.

What it needs is made here first, with this machine's credentials: the cluster's outputs bucket (the head's
record of the end goes there, and the next deepvm command here finishes the teardown from it:
provisioning/clusters/ended.py), the head's right to write it, and the cluster's record saying that its head
may take it down. Then deepvm's runtime goes to the head, with the watch's record (records.IdleWatch), and the
watch is started detached from this SSH session; one started by an earlier `up --autodown` is stopped first,
so the newest N applies.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

from provisioning.cloud.aws.buckets import ensure_bucket
from provisioning.cloud.aws.iam import put_outputs_policy
from provisioning.clusters.handle import Cluster, started
from provisioning.clusters.store import Store
from training.client.managed import head_of, run_on_head
from training.control.head_start import idle_watch_script
from training.control.staging import RUNTIME_DIR, stage_runtime
from training.shared.layout import WATCH_DIR, WATCH_RECORD
from training.shared.progress import JobReporter
from training.shared.records import IdleWatch
from training.shared.transport import push_tree, write_files


def start_idle_watch(cluster: Cluster, minutes: float, report: JobReporter) -> None:
    """Start (or restart with these minutes) the cluster's idle watch on its head."""
    row = cluster.row
    ctx = started(cluster.target, row.region)
    bucket = ensure_bucket(ctx, row.identity)
    put_outputs_policy(ctx, row.resources.controller, bucket)
    Store().set_resources(row.name, replace(row.resources, outputs_bucket=bucket, head_takes_down=True))
    head = head_of(cluster, cluster.node_python)
    with tempfile.TemporaryDirectory(prefix="deepvm-watch-") as work:
        push_tree([head.host], stage_runtime(Path(work) / "runtime"), RUNTIME_DIR)
    record = IdleWatch(cluster.row, tuple(cluster.nodes()), minutes, bucket, cluster.controller_env())
    write_files(head.host, {f"{WATCH_DIR}/{WATCH_RECORD}": record.to_json().encode()})
    run_on_head(head, idle_watch_script(head.python, cluster.controller_env()), report.note)
    report.note(f"cluster {cluster.name} goes down after {minutes:g} minutes without a job (its head watches)")
