"""The money guard of one managed job: what ends it besides its own end, whether its end ends the cluster,
where its outputs go, and who is told. Checked on the user's machine (`deepvm train`), carried to the head
in job.json (records.HeadJob.guard), acted on there (training/control/jobclock.py: --idle, --max-duration;
training/head/job_end.py: outputs, autodown; training/head/notify.py: the hook).

The secret that signs the hook's posts is not here: it travels as a file of its own (0600, beside job.json),
never on a command line and never in a record that is logged or shown.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlsplit

from provisioning.core.errors import InputError

MAX_IDLE_MINUTES = 10_080.0  # --idle, up --autodown: a week; longer is no guard (the flags' callbacks check it)
SECRET_FILE = "notify.secret"  # beside job.json on the head


@dataclass(frozen=True)
class NotifyTarget:
    """Where the head says what happened: a URL it POSTs signed JSON to, or a command it runs (one of them)."""

    url: str = ""  # http(s); signed with the config file's notify_secret
    command: str = ""  # a shell command on the head; the JSON on its stdin

    @property
    def wanted(self) -> bool:
        return bool(self.url or self.command)


@dataclass(frozen=True)
class JobGuard:
    """What `deepvm train` asked the head to guard, beyond the job's deadline and budget (limits.py)."""

    down_when_done: bool = False  # the job's end (any end) takes the cluster down
    idle_minutes: float | None = None  # no step for this long ends the job (failed)
    max_duration_hours: float | None = None  # the job stops with a checkpoint after this long (resumable)
    notify: NotifyTarget = field(default_factory=NotifyTarget)
    outputs_url: str = ""  # s3://bucket[/prefix]: where the head copies outputs, log and checkpoint at the end
    cluster_bucket: str = ""  # the bucket deepvm made for the cluster: the head's end record goes there
    cluster_goes_down: bool = False  # the head may take the cluster down on its own later (`up --autodown`)

    @property
    def copies_outputs(self) -> bool:
        """Whether the job's end copies its outputs to S3 (they must outlive a cluster that goes down, its own
        end's or the idle watch's after it, and a job stopped at its time limit resumes from there on any
        cluster)."""
        return self.down_when_done or self.max_duration_hours is not None or self.cluster_goes_down

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> JobGuard:
        data = dict(data or {})
        return cls(**{**data, "notify": NotifyTarget(**data.get("notify", {}))})


@dataclass(frozen=True)
class ResumeFrom:
    """A job that stopped (its time limit, a failure) continued on any cluster from its checkpoint in S3: the
    head downloads the checkpoint onto its own disk, where DeepCheck's restore finds it (the head is always
    a checkpoint holder), and the job keeps its id and its counts."""

    checkpoint_url: str  # s3://bucket/key/ of one complete checkpoint: its shards and its manifest
    step: int  # the checkpoint's step
    restarts: int
    lost_steps: int
    cost_usd: float  # what the job cost before: its cost goes on from there
    on_demand_usd: float | None  # what on-demand would have cost before (None: not known)
    started_at: str  # when the job first started


def check_notify(url: str | None, command: str | None, secret: str | None) -> NotifyTarget:
    """The hook as given: a URL that is http(s) with a host, and then a secret to sign with; or a command."""
    if url and command:
        raise InputError("give --notify URL or --notify-cmd COMMAND, not both")
    if command is not None and not command.strip():
        raise InputError("--notify-cmd needs a command, got ''")
    if url is None:
        return NotifyTarget(command=command or "")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError(f"--notify must be an http:// or https:// URL with a host, got {url!r}")
    if not secret:
        raise InputError(
            "--notify signs what it posts with notify_secret from the config file, which sets none: "
            "`deepvm config set notify_secret SECRET` (at least 16 characters)"
        )
    return NotifyTarget(url=url)
