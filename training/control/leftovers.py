"""What a managed job that did not complete left on its cluster: for `deepvm fetch` on the user's machine, and for
the head, which copies it to S3 before it takes the cluster down (training/head/outputs.py).

A completed job's outputs wait on the head (its controller fetched them from trainer 0). A cancelled or
failed job's do not: whatever it left is on the nodes, where the ranks wrote it (staging.JobPaths, under
the login user's home):

    deepvm/jobs/JOB_ID/out/metrics.json         trainer 0's metrics (and a `run:` script's other files),
                                                written when a launch ends cleanly (a cancel after a
                                                checkpoint, a stop); the node of trainer 0 may have changed
                                                from launch to launch, so every node is asked and the newest
                                                file wins
    deepvm/jobs/JOB_ID/checkpoints/ckpt-STEP-RUN/manifest.json
                                                a complete DeepCheck L2 checkpoint on a holder's disk (the
                                                manifest is written last: storage_disk.py)

One SSH command per running node (in parallel) finds both (`scan`), and the newest out directory is copied to
the caller's folder. Every holder keeps the manifest of a complete checkpoint beside its own shards, so the
nodes that report a checkpoint hold all its shards between them (`Scan.holding`). The head's view (step,
loss, checkpoint step, cost, why it ended) comes from `deepvm jobs`'s summary. Nothing here changes the job
or its nodes.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from provisioning.cloud.types import SshEndpoint
from provisioning.clusters.handle import Cluster
from training.shared.records import JobSummary
from training.shared.transport import OutputLine, fetch_tree, run_on_hosts

_MARK = "@@deepvm-left "


@dataclass(frozen=True)
class Checkpoint:
    """The newest complete L2 checkpoint found on the nodes."""

    step: int
    node: str  # the holder's name (its instance id, shown by `deepvm status`)
    path: str  # its directory, relative to the node's login home


@dataclass(frozen=True)
class Leftovers:
    """What `deepvm fetch` found of a job that did not complete."""

    summary: JobSummary | None  # the head's view of the job (None: the head does not know it any more)
    out_from: str | None  # the node whose out directory (trainer 0's, with metrics.json) was copied
    fetched: tuple[Path, ...]  # the files copied into the caller's folder
    checkpoint: Checkpoint | None  # None: no complete checkpoint on any node's disk (l1 only, or none yet)


def job_root(job_id: str) -> str:
    """The job's directory on a node, relative to the login home (staging.JobPaths.root)."""
    return f"deepvm/jobs/{job_id}"


@dataclass(frozen=True)
class Scan:
    """What the nodes hold of a job: trainer 0's metrics.json by node (its mtime), complete checkpoints."""

    nodes: dict[str, SshEndpoint]  # host name -> endpoint
    metrics: dict[str, float]  # host name -> mtime of its out/metrics.json
    checkpoints: tuple[Checkpoint, ...]  # one per node and checkpoint

    def newest(self) -> Checkpoint | None:
        return max(self.checkpoints, key=lambda c: c.step, default=None)

    def holding(self, found: Checkpoint) -> list[SshEndpoint]:
        """The nodes that hold (their part of) the checkpoint `found`."""
        return [self.nodes[c.node] for c in self.checkpoints if c.path == found.path]


def scan(cluster: Cluster, job_id: str) -> Scan:
    """Ask every running node of `cluster` what the job left (one SSH command each, in parallel)."""
    nodes = {e.host.name: e for e in cluster.endpoints()}
    metrics: dict[str, float] = {}  # node -> mtime of its metrics.json
    checkpoints: list[Checkpoint] = []
    root = job_root(job_id)

    def line(item: OutputLine) -> None:
        if item.stream != "stdout" or not item.text.startswith(_MARK):
            return
        kind, _, value = item.text.removeprefix(_MARK).partition(" ")
        if kind == "metrics" and value.isdigit():
            metrics[item.host] = float(value)
        elif kind == "checkpoint":
            step, _, name = value.partition(" ")
            if step.isdigit():
                checkpoints.append(Checkpoint(int(step), item.host, f"{root}/checkpoints/{name}"))

    run_on_hosts([e.host for e in nodes.values()], scan_script(root), line)
    return Scan(nodes, metrics, tuple(checkpoints))


def collect(cluster: Cluster, summary: JobSummary | None, job_id: str, out_dir: Path) -> Leftovers:
    """Ask every running node of `cluster` what the job left, and copy the newest out directory (the one
    with the newest metrics.json) into `out_dir`."""
    found = scan(cluster, job_id)
    newest = max(found.metrics, key=lambda name: found.metrics[name], default=None)
    fetched: tuple[Path, ...] = ()
    if newest is not None:
        fetched = tuple(fetch_tree(found.nodes[newest].host, f"{job_root(job_id)}/out", out_dir))
    best = found.newest()
    return Leftovers(summary, _name(found.nodes, newest), fetched, best and _named(found.nodes, best))


def scan_script(root: str) -> str:
    """The shell script a node runs: one marked line for its metrics.json (its mtime), one per complete
    checkpoint (its step, its directory's name); nothing when it holds neither."""
    quoted = shlex.quote(root)
    return "\n".join(
        [
            f"cd {quoted} 2>/dev/null || exit 0",
            f'[ -f out/metrics.json ] && echo "{_MARK}metrics $(stat -c %Y out/metrics.json)"',
            "for m in checkpoints/ckpt-*/manifest.json; do",
            '  [ -f "$m" ] || continue',
            "  name=${m#checkpoints/}; name=${name%/manifest.json}",
            "  step=$(echo \"$name\" | sed -E 's/^ckpt-0*([0-9]+)-.*$/\\1/')",
            f'  echo "{_MARK}checkpoint $step $name"',
            "done",
            "exit 0",
        ]
    )


def _name(nodes: dict[str, SshEndpoint], host: str | None) -> str | None:
    return None if host is None else f"{host} ({nodes[host].instance_id})"


def _named(nodes: dict[str, SshEndpoint], found: Checkpoint) -> Checkpoint:
    return Checkpoint(found.step, _name(nodes, found.node) or found.node, found.path)
