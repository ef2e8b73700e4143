"""A managed job's log mirrored to S3 (a moto server over HTTP), beside its L3 checkpoints."""

from __future__ import annotations

import boto3

from training.head.log_mirror import LogMirror
from training.shared.storage import job_key


def test_log_key():
    assert job_key("s3://ckpts/runs/a", "j1", "log.jsonl") == ("ckpts", "runs/a/deepvm-jobs/j1/log.jsonl")
    assert job_key("s3://ckpts", "j1", "result.json") == ("ckpts", "deepvm-jobs/j1/result.json")


def test_log_and_result_reach_s3_and_failures_are_said_once(s3_endpoint, tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="ckpts")
    (tmp_path / "log.jsonl").write_text('{"kind":"note","at":1.0,"text":"attempt 1"}\n')
    notes: list[str] = []
    mirror = LogMirror("s3://ckpts/runs", "j1", tmp_path, notes.append)
    mirror.upload()
    with open(tmp_path / "log.jsonl", "a") as log:
        log.write('{"kind":"state","at":2.0,"status":"completed"}\n')
    (tmp_path / "result.json").write_text('{"steps": 3}')
    mirror.start().close()  # the final round uploads what changed
    body = s3.get_object(Bucket="ckpts", Key="runs/deepvm-jobs/j1/log.jsonl")["Body"].read().decode()
    assert body.count("\n") == 2 and '"completed"' in body
    assert s3.get_object(Bucket="ckpts", Key="runs/deepvm-jobs/j1/result.json")["Body"].read() == b'{"steps": 3}'
    assert notes == []
    broken = LogMirror("s3://no-such-bucket/x", "j1", tmp_path, notes.append)
    broken.upload()
    broken.upload()
    assert len(notes) == 1 and "could not mirror" in notes[0]
