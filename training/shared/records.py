"""The records that cross between the user's machine and the head node, each with one way to write it
and one way to read it back (JSON), so that neither side indexes free-form dicts by string keys.

- HeadJob: what the client hands the head to run one job (written once, as job.json).
- LogRecord: one line of a job's log (log.jsonl), written by the head's service and supervisor and read
  by `deepvm train` / `deepvm logs`. A log line stays a LogRecord from the head to the renderer, its
  kind a LogKind. Strict JSON (training.shared.strict_json): a NaN loss or scalar is null there.
- JobSummary: a job as `deepvm jobs` lists it.

A completed job's result (training.shared.progress.TrainResult, result.json on the head) and a run's
metrics.json (training.shared.metrics.RunMetrics) are records of their own beside these.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from provisioning.cloud.types import CloudKind, CloudResources, NodeRecord
from provisioning.clusters.store import ClusterRow, ClusterStatus
from provisioning.ladder.offers import MarketOffers
from training.shared.guard import JobGuard, ResumeFrom
from training.shared.jobstore import JobRow, JobStatus
from training.shared.limits import JobLimits
from training.shared.progress import Progress
from training.shared.strict_json import dumps

if TYPE_CHECKING:  # read in from_json: `deepvm plan` imports this module, and nothing of the metrics
    from training.shared.scalars import MetricPoint


@dataclass(frozen=True)
class HeadJob:
    """One job handed to the head: the request, and the cluster as the user's machine knows it (the head
    seeds its own state store from it the first time, then keeps it up to date itself)."""

    job_id: str
    cluster: ClusterRow
    nodes: tuple[NodeRecord, ...]
    job_file: str  # the YAML's name inside the job directory
    python: str  # the interpreter on the nodes (and of the controller on the head)
    replace_nodes: bool
    max_failures: int
    stall_timeout_s: float | None
    node_env: dict[str, str]  # what the ranks' AWS clients need (never the user's credentials)
    service_env: dict[str, str]  # what the controller's AWS clients need: region, endpoint; never keys
    submitted_at: str
    limits: JobLimits = field(default_factory=JobLimits)  # the file's, with the flags in their place
    startup_grace_s: float | None = None  # `train --startup-grace` (None: the job file's, or the default)
    guard: JobGuard = field(default_factory=JobGuard)  # autodown, --idle, --max-duration, the hook
    on_demand_prices: dict[str, float] = field(default_factory=dict)  # USD/h by instance type: the run's summary
    resume: ResumeFrom | None = None  # a job continued from its checkpoint in S3 (`train --resume JOB`)
    # the pools the recovery ladder may buy from, priced from the plan's catalog on the user's machine (the
    # head may not have that catalog); None: a job of an earlier client, priced from the head's snapshot
    market: MarketOffers | None = None
    # written by a hand-over of control to a new head (training/control/handover.py): the node this record is
    # on now, and the head that handed the job over (None: the head `deepvm train` submitted it to)
    head: str | None = None
    handed_from: str | None = None

    def to_json(self) -> str:
        return _json_with_plan(self, {"market": None if self.market is None else self.market.to_dict()})

    @classmethod
    def from_json(cls, text: str) -> HeadJob:
        data = json.loads(text)
        cluster, nodes = _cluster_from(data)
        resume, market = data.get("resume"), data.get("market")
        return cls(
            **{
                **data,
                "cluster": cluster,
                "nodes": nodes,
                "limits": JobLimits.from_dict(data.get("limits")),
                "guard": JobGuard.from_dict(data.get("guard")),
                "resume": ResumeFrom(**resume) if resume else None,
                "market": None if market is None else MarketOffers.from_dict(market),
            }
        )


@dataclass(frozen=True)
class IdleWatch:
    """`deepvm up --autodown N`: what the head's idle watch needs (written once as watch.json): the cluster, and
    the minutes without a job after which it goes down (training/head/idle_cluster.py)."""

    cluster: ClusterRow
    nodes: tuple[NodeRecord, ...]
    minutes: float
    bucket: str  # the cluster's outputs bucket: the head's record of the end goes there
    service_env: dict[str, str]  # what its AWS clients need: region, endpoint; never keys

    def to_json(self) -> str:
        return _json_with_plan(self)

    @classmethod
    def from_json(cls, text: str) -> IdleWatch:
        data = json.loads(text)
        cluster, nodes = _cluster_from(data)
        return cls(**{**data, "cluster": cluster, "nodes": nodes})


def _json_with_plan(record: HeadJob | IdleWatch, written: dict[str, Any] | None = None) -> str:
    """A record holding a cluster as JSON (asdict keeps the plan's enums and tuples as they are: the plan writes
    itself), with `written`: fields that write themselves too (a job's market offers)."""
    data = {**asdict(record), **(written or {})}
    data["cluster"]["plan"] = record.cluster.plan.to_dict()
    return json.dumps(data, indent=1)


def _cluster_from(data: dict[str, Any]) -> tuple[ClusterRow, tuple[NodeRecord, ...]]:
    """The cluster and its nodes of a record written by asdict (HeadJob, IdleWatch)."""
    # here, not at the top: the plan's document is pydantic's (0.3 CPU-s of imports), and the head's queries
    # (`deepvm jobs`, `logs`, `watch`: a process each, every second or two) import this module for its log
    # records, never a cluster's
    from provisioning.planner.plan_document import plan_from_dict

    c = data["cluster"]
    cluster = ClusterRow(
        **{
            **c,
            "cloud": CloudKind(c["cloud"]),
            "status": ClusterStatus(c["status"]),
            "plan": plan_from_dict(c["plan"]),
            "resources": CloudResources.from_dict(c["resources"]),
        }
    )
    return cluster, tuple(NodeRecord.from_dict(n) for n in data["nodes"])


class LogKind(str, Enum):
    """What one line of a managed job's log says, and which of LogRecord's fields it sets."""

    NOTE = "note"  # a controller event (`text`)
    LOG = "log"  # a rank's or node's own output (`text`; `source` names it, `rank` is the MPI rank when known)
    PROGRESS = "progress"  # trainer 0's progress (`progress`)
    PUSH = "push"  # bytes pushed to `source` (`done` of `total`)
    STATE = "state"  # the job's state changed (`status`, with `text` saying why)
    METRICS = "metrics"  # trainer 0's scalars of a step (`metrics`: ctx.log, deepvm's worker)

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class LogRecord:
    """One line of a managed job's log; `kind` says which fields it sets. `at` is the head's wall clock."""

    kind: LogKind
    at: float
    text: str = ""
    source: str = ""
    rank: int | None = None
    progress: Progress | None = None
    done: int = 0
    total: int = 0
    status: JobStatus | None = None  # set in state records
    metrics: MetricPoint | None = None  # set in metrics records

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", LogKind(self.kind))  # a kind none of ours is a ValueError

    def to_json(self) -> str:
        data = {k: v for k, v in asdict(self).items() if v not in ("", None, 0) or k in ("kind", "at")}
        data["kind"] = self.kind.value
        return dumps(data, separators=(",", ":"))

    @classmethod
    def from_json(cls, line: str) -> LogRecord:
        data = json.loads(line)
        if not isinstance(data, dict) or "kind" not in data:
            raise ValueError(f"not a log record: {line[:80]!r}")
        progress = data.pop("progress", None)
        status = data.pop("status", None)
        metrics = data.pop("metrics", None)
        from training.shared.scalars import MetricPoint

        return cls(
            **data,
            progress=Progress.from_dict(progress) if progress else None,
            status=JobStatus(status) if status else None,
            metrics=MetricPoint.from_dict(metrics) if metrics else None,
        )


@dataclass(frozen=True)
class JobSummary:
    """A job as `deepvm jobs` lists it: the head's job row and whether its controller runs now."""

    job_id: str
    cluster: str
    name: str
    status: JobStatus
    step: int
    total_steps: int
    loss: float | None  # at the newest step
    world_size: int  # trainers in the current (or last) attempt
    checkpoint_step: int  # newest step checkpointed (-1: none yet)
    restarts: int
    lost_steps: int
    cost_usd: float
    started_at: str
    updated_at: str
    message: str
    controller_alive: bool  # the head's supervisor process runs (a running job without one is orphaned)
    ladder: str = ""  # the recovery ladder's newest decision and why (JobRow.ladder)
    lost_s: float = 0.0  # a launched script without steps: work done twice, in seconds (JobRow.lost_s)

    @classmethod
    def from_row(cls, row: JobRow, controller_alive: bool) -> JobSummary:
        return cls(
            job_id=row.job_id,
            cluster=row.cluster,
            name=row.name,
            status=row.status,
            step=row.step,
            total_steps=row.total_steps,
            loss=row.loss,
            world_size=row.world_size,
            checkpoint_step=row.checkpoint_step,
            restarts=row.restarts,
            lost_steps=row.lost_steps,
            cost_usd=round(row.cost_usd, 6),
            started_at=row.started_at,
            updated_at=row.updated_at,
            message=row.message,
            controller_alive=controller_alive,
            ladder=row.ladder,
            lost_s=row.lost_s,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))

    @classmethod
    def from_json(cls, line: str) -> JobSummary:
        data = json.loads(line)
        return cls(**{**data, "status": JobStatus(data["status"])})
