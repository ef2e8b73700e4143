"""A managed job's log and result, mirrored to S3 beside its L3 checkpoints, so that they outlive the
head node: `s3://BUCKET/PREFIX/deepvm-jobs/JOB_ID/{log.jsonl,result.json}` for a job whose checkpoint
levels include l3 with `s3_prefix: s3://BUCKET/PREFIX`.

The head's controller uploads with its own credentials (the head's instance profile, through the
instance metadata): `train` grants its role s3:PutObject there (training.shared.storage.job_storage). An
upload that fails is said once in the job's log and retried at the next round; the job never waits on
the mirror.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from training.shared.storage import job_key

_EVERY_S = 15.0


class LogMirror:
    """Uploads the job's files every _EVERY_S seconds while they change, and once more at the end."""

    def __init__(self, s3_prefix: str, job_id: str, root: Path, note: Callable[[str], None]) -> None:
        import boto3  # the head's default chain: region and endpoint from the environment, keys from IMDS

        self._s3 = boto3.client("s3")
        self._prefix, self._job_id, self._root, self._note = s3_prefix, job_id, root, note
        self._sizes: dict[str, int] = {}
        self._warned = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="log-mirror", daemon=True)

    def start(self) -> LogMirror:
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop the rounds and upload what changed since the last one."""
        self._stop.set()
        self._thread.join()
        self.upload()

    def _loop(self) -> None:
        while not self._stop.wait(_EVERY_S):
            self.upload()

    def upload(self) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        for name in ("log.jsonl", "result.json"):
            path = self._root / name
            if not path.exists() or path.stat().st_size == self._sizes.get(name):
                continue
            bucket, key = job_key(self._prefix, self._job_id, name)
            try:
                data = path.read_bytes()
                self._s3.put_object(Bucket=bucket, Key=key, Body=data)
            except (BotoCoreError, ClientError, OSError) as exc:
                if not self._warned:
                    self._warned = True
                    self._note(f"could not mirror the job's log to s3://{bucket}/{key} ({exc}); retrying")
                continue
            self._sizes[name] = len(data)
