"""Real mpirun: L3 round trip through a moto S3 server over HTTP, and the training example."""

from __future__ import annotations

import json
import shutil
import uuid

import boto3
import pytest
from dc_mpi import ROOT, run_mpi

pytestmark = pytest.mark.mpi


def test_l3_upload_and_restore_without_local_disk(tmp_path, s3_endpoint):
    client = boto3.client("s3", endpoint_url=s3_endpoint)
    bucket = f"ckpts-{uuid.uuid4().hex[:12]}"  # its own: the process's S3 server serves other tests' buckets too
    client.create_bucket(Bucket=bucket)
    ckdir = tmp_path / "ck"
    run_mpi(3, "s3_worker.py", "save", str(ckdir), s3_endpoint, bucket)
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket)["Contents"]]
    manifests = sorted(k for k in keys if k.endswith("manifest.json"))
    assert len(manifests) == 2 and "ckpt-000000000003" in manifests[-1]  # keep=2 applies to S3 too
    shutil.rmtree(ckdir)  # the holder's disk is gone (e.g. a replaced node); S3 still has the checkpoints
    run_mpi(3, "s3_worker.py", "restore", str(ckdir), s3_endpoint, bucket)
    for r in (0, 1):
        got = json.loads((tmp_path / f"s3-{r}.json").read_text())
        assert got == {"step": 3, "levels": ["L3"], "ok": True}


def test_training_example_runs_resumes_and_flushes(tmp_path):
    script = str(ROOT / "deepcheck" / "examples" / "train_example.py")
    first = run_mpi(3, script, "--dir", str(tmp_path), "--steps", "12")
    assert "resumed from step" not in first.stdout and "step 12 is durable" in first.stdout
    second = run_mpi(3, script, "--dir", str(tmp_path), "--steps", "30", "--notice-at", "15")
    assert "resumed from step 12" in second.stdout
    assert "interruption: step 15 safe at L" in second.stdout and "step 15 is durable" in second.stdout


@pytest.mark.parametrize(
    ("levels", "flush", "restored"),
    [
        ("L1", "L1", ["L1"]),
        ("L2", "L2", ["L2"]),
        ("L1,L2", "L1", ["L1", "L2"]),
        ("L2,L3", "L2", ["L2", "L3"]),
    ],
)
def test_each_level_named_is_written_and_no_other(tmp_path, s3_endpoint, levels, flush, restored):
    """The job's checkpoint.levels, exactly: no disk without L2 (no checkpoint directory at all), no restore from
    RAM without L1 (the holder lets go of it once the shards are durable), S3 only with L3; a flush is safe at the
    lowest level named before it returns."""
    s3_args: list[str] = []
    client = boto3.client("s3", endpoint_url=s3_endpoint)
    bucket = f"levels-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    if "L3" in levels:
        s3_args = [s3_endpoint, bucket]
    ckdir = tmp_path / "ck"
    run_mpi(3, "levels_worker.py", levels, str(ckdir), str(tmp_path), *s3_args)
    for r in (0, 1):
        got = json.loads((tmp_path / f"levels-{r}.json").read_text())
        assert got == {"flush": flush, "step": 3, "levels": restored, "exact": True}
    on_disk = sorted(p.name for p in ckdir.glob("ckpt-*/manifest.json"))
    assert bool(on_disk) == ("L2" in levels)
    assert not list(ckdir.glob("ckpt-*")) or "L2" in levels  # not even an empty directory
    in_s3 = [o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert bool(in_s3) == ("L3" in levels)


def test_a_holder_whose_disk_refuses_the_shards_tells_every_trainer_the_checkpoint_is_not_on_disk(tmp_path):
    """Issue 40: a full checkpoint disk was said only in the holder's stderr. The lead now tells every trainer
    which checkpoint never reaches L2, and why; L1 still has it, L2 has nothing."""
    run_mpi(3, "diskfull_worker.py", str(tmp_path / "ck"), str(tmp_path))
    for rank in (0, 1):
        got = json.loads((tmp_path / f"diskfull-{rank}.json").read_text())
        assert (got["l1"], got["l2"]) == (2, None), got
        step, level, reason = got["failed"]
        assert (step, level) == (2, "L2") and reason.startswith("holder 0: ") and "File too large" in reason, got
