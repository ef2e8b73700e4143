"""A run's summary, the one a person reads in the morning: what it cost, what on-demand would have cost,
what it survived, and why its cluster went down.

Made on the head (training/head/summary.py) from the head's own record of the cluster, so that it counts the
replacements the head bought; shown by `deepvm status JOB`, sent in the notify payload, kept with the job's
outputs (summary.json, on the head and in S3). The on-demand figure is provisioning.clusters.cost.run_cost's,
defined once in the README ("What on-demand would have cost").
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from training.shared.jobstore import JobStatus, reached

SUMMARY_FILE = "summary.json"


@dataclass(frozen=True)
class RunSummary:
    job_id: str
    cluster: str
    status: JobStatus
    message: str  # why it ended (or what it does now)
    step: int
    total_steps: int
    started_at: str  # ISO-8601 UTC
    ended_at: str | None  # None while it runs
    cost_usd: float  # the job's nodes at their planned prices, while it ran
    on_demand_usd: float | None  # the same nodes for the same wall time at on-demand prices (None: not known)
    interruptions: int  # Spot notices and nodes lost without one that the job went on through
    replacements: int  # nodes bought for the job (ready to train)
    cluster_down: str = ""  # why its cluster went down ("" while the cluster is up)
    billing_usd_per_hour: float = 0.0  # what the cluster bills after the job (0 once it is down)

    @property
    def saved_usd(self) -> float | None:
        return None if self.on_demand_usd is None else self.on_demand_usd - self.cost_usd

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> RunSummary:
        data = json.loads(text)
        return cls(**{**data, "status": JobStatus(data["status"])})

    def lines(self) -> list[str]:
        """The summary as `deepvm status JOB` says it."""
        steps = reached(self.step, self.total_steps)
        head = f"job {self.job_id} on {self.cluster}: {self.status}, {steps}" + (
            f" ({self.message})" if self.message else ""
        )
        if self.on_demand_usd is None:
            money = f"cost ${self.cost_usd:.4f}; on-demand would have cost: unknown (a type's price is not known)"
        else:
            share = f", {100 * (self.saved_usd or 0) / self.on_demand_usd:.0f}% less" if self.on_demand_usd else ""
            money = f"cost ${self.cost_usd:.4f}; on-demand would have cost ${self.on_demand_usd:.4f}{share}"
        survived = (
            f"survived {self.interruptions} interruption{'s' * (self.interruptions != 1)}, "
            f"bought {self.replacements} replacement{'s' * (self.replacements != 1)}"
        )
        if self.cluster_down:
            cluster = f"cluster {self.cluster} went down: {self.cluster_down}"
        elif self.billing_usd_per_hour:
            cluster = (
                f"cluster {self.cluster} is still up, billing ${self.billing_usd_per_hour:.4f}/h: "
                f"`deepvm down {self.cluster}` stops it"
            )
        else:
            cluster = f"cluster {self.cluster} is up"
        return [head, money, survived, cluster]
