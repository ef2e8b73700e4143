"""A managed job's outputs, log and newest checkpoint, copied from the cluster to S3 at the job's end, so that
they outlive a cluster that goes down (autodown) and a job stopped at its time limit resumes on any cluster.

Where (training.shared.storage.job_key): under the job's S3 prefix when it names one with l3 (beside its log
mirror), else in the bucket deepvm made for the cluster (provisioning/cloud/aws/buckets.py):

    s3://BUCKET/[PREFIX/]deepvm-jobs/JOB_ID/log.jsonl, result.json, summary.json
                                            out/...                 trainer 0's out directory (model.pt,
                                                                    metrics.json, a script's own files)
                                            checkpoint/ckpt-STEP-RUN/shard-*.bin, manifest.json

The out directory is the head's copy of a completed job's (the controller fetched it), else the newest one
trainer 0 left on a node (training/control/leftovers.py). The checkpoint is the newest complete one on the
holders' disks (DeepCheck L2), its shards gathered from every holder that has a part of it and checked
against its manifest before anything is uploaded: an incomplete one is said and not copied. The head uploads
with its own role, which `train` granted exactly these areas (training/client/guard_setup.py).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from deepcheck.manifest import Manifest
from deepcheck.storage_disk import MANIFEST, shard_name
from provisioning.cloud.ssh import TransportError
from provisioning.clusters.handle import Cluster
from training.control.leftovers import Scan, scan
from training.shared.records import HeadJob
from training.shared.storage import CHECKPOINT_DIR, job_key
from training.shared.transport import fetch_tree

JOB_FILES = ("log.jsonl", "result.json", "summary.json")


@dataclass(frozen=True)
class Copied:
    """What reached S3."""

    url: str  # s3://bucket/key/ of the job's files
    checkpoint_url: str  # s3://bucket/key/ of its newest complete checkpoint ("": none copied)
    checkpoint_step: int  # its step (-1: none)
    files: int


def copy_job(root: Path, job: HeadJob, say: Callable[[str], None]) -> Copied:
    """Copy the job's files, out directory and newest complete checkpoint to its outputs URL."""
    import boto3  # the head's default chain: region and endpoint from the environment, keys from its role

    s3 = boto3.client("s3")
    url = job.guard.outputs_url
    bucket, base = job_key(url, job.job_id, "")
    found = _scan(job, say)
    out = root / "out"
    if found is not None and not (out / "metrics.json").exists():
        _newest_out(found, job.job_id, out, say)
    count = 0
    for path in [root / name for name in JOB_FILES] + sorted(p for p in out.rglob("*") if p.is_file()):
        if path.exists():
            s3.upload_file(str(path), bucket, f"{base}/{path.relative_to(root)}")
            count += 1
    step, checkpoint_url = -1, ""
    with tempfile.TemporaryDirectory(prefix="deepvm-checkpoint-") as work:
        gathered = _gather_checkpoint(found, Path(work), say) if found is not None else None
        if gathered is not None:
            manifest, directory = gathered
            prefix = f"{base}/{CHECKPOINT_DIR}/{directory.name}"
            for shard in manifest.shards:  # the shards first, the manifest last: as DeepCheck's own L3 commits
                s3.upload_file(str(directory / shard_name(shard.index)), bucket, f"{prefix}/{shard_name(shard.index)}")
            s3.upload_file(str(directory / MANIFEST), bucket, f"{prefix}/{MANIFEST}")
            step, checkpoint_url = manifest.ckpt.step, f"s3://{bucket}/{prefix}/"
            count += len(manifest.shards) + 1
    say(
        f"copied the job's outputs and log to s3://{bucket}/{base}/"
        + (f", and its checkpoint of step {step}" if step >= 0 else " (no complete checkpoint to copy)")
    )
    return Copied(f"s3://{bucket}/{base}/", checkpoint_url, step, count)


def _scan(job: HeadJob, say: Callable[[str], None]) -> Scan | None:
    """What the cluster's running nodes hold of the job (None when they cannot be asked)."""
    try:
        return scan(Cluster.open(job.cluster.name), job.job_id)
    except TransportError as exc:
        say(f"could not ask the nodes for the job's outputs and checkpoints: {exc}")
        return None


def _newest_out(found: Scan, job_id: str, out: Path, say: Callable[[str], None]) -> None:
    """Trainer 0's newest out directory (a job that did not complete: the controller fetched none)."""
    newest = max(found.metrics, key=lambda name: found.metrics[name], default=None)
    if newest is None:
        return
    try:
        fetch_tree(found.nodes[newest].host, f"deepvm/jobs/{job_id}/out", out)
    except TransportError as exc:
        say(f"could not fetch the job's out directory from {newest}: {exc}")


def _gather_checkpoint(found: Scan, work: Path, say: Callable[[str], None]) -> tuple[Manifest, Path] | None:
    """The newest complete checkpoint's files from every holder of a part of it, in one directory under
    `work`, checked against its manifest; None when there is none, or not all of it could be gathered."""
    best = found.newest()
    if best is None:
        return None
    directory = work / best.path.rsplit("/", 1)[-1]
    for node in found.holding(best):
        try:
            fetch_tree(node.host, best.path, directory)
        except TransportError as exc:
            say(f"could not fetch part of the checkpoint of step {best.step} from {node.instance_id}: {exc}")
    manifest = Manifest.from_bytes((directory / MANIFEST).read_bytes(), str(directory / MANIFEST))
    missing = [shard_name(s.index) for s in manifest.shards if not (directory / shard_name(s.index)).exists()]
    if missing:
        say(
            f"the checkpoint of step {best.step} is not whole on the running holders ({len(missing)} shard(s) "
            "missing): not copied"
        )
        return None
    return manifest, directory
