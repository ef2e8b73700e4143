"""Where a managed job's outputs and log are now, in one place: `job_outputs` answers it, and `deepvm fetch`,
`deepvm logs`, `deepvm status JOB` and `train --resume` (and `deepvm watch`) ask it rather than guess.

- on its head, while its cluster is up: the head keeps the log, the outputs once the job completed, and what
  `deepvm jobs` shows (training/client/managed.py reads them there);
- in S3, once the cluster is gone (or going: a job whose end takes its cluster down is read from S3 as soon
  as it is over), where the head copied them at the job's end (training/head/outputs.py): the log, result and
  summary, trainer 0's out directory, the newest checkpoint;
- nowhere, when the cluster is gone and nothing was copied: they went with its nodes.

The S3 readers here use this machine's credentials (the rights table's user side); the sandbox's S3 is its
moto server, as long as the sandbox runs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError

from provisioning.cloud.aws.context import AwsContext, error_code
from provisioning.cloud.types import S3Area
from provisioning.clusters.handle import Cluster
from provisioning.core.errors import CloudError, InputError, NotFoundError
from training.shared.guard import ResumeFrom
from training.shared.jobstore import JobRow, JobStatus
from training.shared.progress import TrainResult
from training.shared.records import LogRecord
from training.shared.s3url import split_s3_url
from training.shared.storage import CHECKPOINT_DIR, job_key
from training.shared.summary import SUMMARY_FILE, RunSummary

if TYPE_CHECKING:
    from training.client.managed import Head


class Where(str, Enum):
    HEAD = "head"  # on the cluster's head node (deepvm/managed/jobs/JOB_ID)
    S3 = "s3"  # under the job's outputs URL (deepvm-jobs/JOB_ID/)
    NOWHERE = "nowhere"  # gone with the cluster

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class OutputsPlace:
    """Where one job's outputs and log are now."""

    where: Where
    row: JobRow  # this machine's record of the job
    url: str = ""  # with S3: s3://bucket/key/ of the job's files
    why: str = ""  # with NOWHERE: why they are gone

    @property
    def job_id(self) -> str:
        return self.row.job_id


def job_outputs(row: JobRow) -> OutputsPlace:
    """Where the job's outputs and log are now (see the module docstring)."""
    cluster = Cluster.find(row.cluster)
    up = cluster is not None and cluster.is_up
    if up and not (row.down_when_done and row.status.final):
        return OutputsPlace(Where.HEAD, row)
    if row.outputs_url:
        return in_s3(row)
    if up:
        return OutputsPlace(Where.HEAD, row)
    return OutputsPlace(
        Where.NOWHERE,
        row,
        why=f"cluster {row.cluster} is down and the job's outputs were not "
        "copied to S3 (`train --down-when-done` or `--max-duration` copies them)",
    )


def in_s3(row: JobRow) -> OutputsPlace:
    """Where the head copies the job's files at its end (its outputs URL: the row must have one), whether or not
    they are there yet."""
    return OutputsPlace(Where.S3, row, "s3://" + "/".join(job_key(row.outputs_url, row.job_id, "")) + "/")


def _context(place: OutputsPlace) -> AwsContext:
    """S3 clients where the job's cluster ran (its record stays after it is down)."""
    from provisioning.clusters.handle import target_for
    from provisioning.clusters.store import Store

    row = Store().cluster(place.row.cluster)
    if row is None:
        raise NotFoundError(f"no record of cluster {place.row.cluster}, where job {place.job_id} ran")
    ctx = target_for(row.cloud).context(row.region, start=False)
    if ctx is None:
        raise NotFoundError(f"job {place.job_id}'s outputs were in the sandbox's S3, which stopped with the sandbox")
    return ctx


def _get(place: OutputsPlace, name: str) -> bytes | None:
    bucket, prefix = split_s3_url(place.url)
    try:
        return _context(place).client("s3").get_object(Bucket=bucket, Key=f"{prefix}/{name}")["Body"].read()
    except ClientError as exc:
        if error_code(exc) in ("NoSuchKey", "404"):
            return None
        raise CloudError(f"reading {place.url}{name}: {error_code(exc)}") from exc
    except BotoCoreError as exc:
        raise CloudError(f"reading {place.url}{name}: {exc}") from exc


def s3_log(place: OutputsPlace) -> list[LogRecord]:
    """The job's log as the head copied it."""
    data = _get(place, "log.jsonl") or b""
    return [LogRecord.from_json(line) for line in data.decode().splitlines() if line.strip()]


def s3_summary(place: OutputsPlace) -> RunSummary | None:
    data = _get(place, SUMMARY_FILE)
    return None if data is None else RunSummary.from_json(data.decode())


def s3_fetch(place: OutputsPlace, out_dir: Path) -> list[Path]:
    """Download the job's out directory (model.pt, metrics.json, a script's files) into `out_dir`."""
    bucket, prefix = split_s3_url(place.url)
    s3 = _context(place).client("s3")
    fetched = []
    try:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/out/"):
            for item in page.get("Contents", []):
                target = out_dir / item["Key"].removeprefix(f"{prefix}/out/")
                target.parent.mkdir(parents=True, exist_ok=True)
                s3.download_file(bucket, item["Key"], str(target))
                fetched.append(target)
    except (ClientError, BotoCoreError) as exc:
        raise CloudError(f"fetching {place.url}out/: {exc}") from exc
    return fetched


def s3_checkpoint(place: OutputsPlace) -> tuple[str, int] | None:
    """(s3 URL, step) of the checkpoint the head copied at the job's end, or None."""
    bucket, prefix = split_s3_url(place.url)
    listed = _context(place).client("s3").list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/{CHECKPOINT_DIR}/")
    manifests = sorted(o["Key"] for o in listed.get("Contents", []) if o["Key"].endswith("/manifest.json"))
    if not manifests:
        return None
    directory = manifests[-1].removesuffix("manifest.json")  # ckpt-STEP-RUN/: the newest sorts last
    step = int(directory.rstrip("/").rsplit("/", 1)[-1].split("-")[1])
    return f"s3://{bucket}/{directory}", step


def resumable(rows: list[JobRow], name: str) -> JobRow | None:
    """The newest managed job named `name` (newest first in `rows`) whose outputs were to be copied to S3 and
    that did not complete or get cancelled, as far as this machine heard: what a managed `train --resume`
    looks at (its summary in S3 then says whether it stopped or failed, and its checkpoint where it is)."""
    over = (JobStatus.COMPLETED, JobStatus.CANCELLED)
    return next(
        (r for r in rows if r.name == name and r.status not in over and r.outputs_url and r.controller != "local"), None
    )


def remember(place: OutputsPlace, summary: RunSummary) -> JobRow:
    """This machine's row of the job brought up to date with the summary the head left in S3 (a job whose
    cluster went down while nobody here looked is otherwise "running" as last heard)."""
    from training.shared.jobstore import JobStore

    return JobStore().put(
        replace(place.row, status=summary.status, step=summary.step, message=summary.message, cost_usd=summary.cost_usd)
    )


@dataclass(frozen=True)
class Resumed:
    """A managed job to continue from its checkpoint in S3, and the S3 area its new head reads it from."""

    job_id: str
    start: ResumeFrom
    reads: tuple[S3Area, ...]


def find_resumed(name: str) -> Resumed:
    """The newest job named `name` that stopped (its time limit) or failed with its checkpoint copied to S3,
    as `deepvm train JOB.yaml --resume` continues it on any cluster; InputError (with why) when there is none."""
    from training.shared.jobstore import JobStore

    row = resumable(JobStore().all(), name)
    if row is None:
        raise InputError(
            f"nothing to resume: no job named {name!r} was submitted from this machine with its outputs "
            "copied to S3 (`--max-duration` or `--down-when-done`), or it completed or was cancelled; "
            "`--controller local --resume` continues a local run on its cluster"
        )
    place = in_s3(row)  # a job stopped at its time limit on a cluster still up has its checkpoint there too
    summary = s3_summary(place)
    if summary is None or summary.status not in (JobStatus.STOPPED, JobStatus.FAILED):
        state = "still running" if summary is None else str(summary.status)
        raise InputError(
            f"job {row.job_id} is {state}: only a job that stopped or failed is resumed from S3 "
            f"(`deepvm status {row.job_id}` says more)"
        )
    found = s3_checkpoint(place)
    if found is None:
        raise InputError(
            f"job {row.job_id} left no checkpoint in {place.url}: nothing to resume from; run it again without --resume"
        )
    url, step = found
    bucket, prefix = split_s3_url(url)
    start = ResumeFrom(
        url, step, row.restarts, row.lost_steps, summary.cost_usd, summary.on_demand_usd, summary.started_at
    )
    return Resumed(row.job_id, start, (S3Area(bucket, f"{prefix}/", writes=False),))


def completed_outputs(row: JobRow, head: Head) -> TrainResult | None:
    """A completed job's outputs in its out directory, from wherever they are now (job_outputs), and its
    result; None when they cannot be had."""
    from training.client.managed import fetch_outputs

    place = job_outputs(replace(row, status=JobStatus.COMPLETED))
    if place.where is Where.HEAD:
        return fetch_outputs(head, row.job_id, Path(row.out_dir))
    if place.where is Where.NOWHERE:
        return None
    s3_fetch(place, Path(row.out_dir))
    data = _get(place, "result.json")
    return None if data is None else replace(TrainResult.from_json(data.decode()), out_dir=row.out_dir)


def job_summary(row: JobRow) -> RunSummary | None:
    """The job's run summary from wherever it is now: its head (as of now, or as written at its end), S3 (once
    its cluster is gone: this machine's row is brought up to date with it), or None when it is gone."""
    from training.client.managed import find_head, summary_on

    place = job_outputs(row)
    if place.where is Where.HEAD:
        return summary_on(find_head(row.cluster, row.python), row.job_id)
    if place.where is Where.S3:
        summary = s3_summary(place)
        if summary is not None:
            remember(place, summary)
        return summary
    return None
