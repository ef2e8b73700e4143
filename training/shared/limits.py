"""What a job may take: its deadline, its budget, and what the deadline's on-demand fallback may bill per hour.

Given in the job file (`limits:`, training/shared/jobspec.py) or on `deepvm train`'s command line (the flags
win, one by one), checked on the user's machine, and handed to the head with the job (records.HeadJob), where
the recovery ladder keeps them (provisioning/ladder: Limits.deadline_s, budget_usd, fallback_usd_per_hour).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from provisioning.core.errors import InputError

MAX_HOURS = 100_000.0  # a deadline: eleven years (as `deepvm plan --deadline`)
MAX_USD = 1e9  # a budget
MAX_USD_PER_HOUR = 1_000_000.0  # an hourly cap: a thousand times the dearest instance (as --max-price)


@dataclass(frozen=True)
class JobLimits:
    deadline_hours: float | None = None  # from the job's start; None: no deadline
    budget_usd: float | None = None  # the whole job's, replacements included; None: no budget
    fallback_max_price: float | None = None  # USD per hour while on-demand stand-ins are held; None: the plan's cap

    def to_dict(self) -> dict[str, float | None]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> JobLimits:
        return cls(**(data or {}))


def job_limits(
    in_file: JobLimits, deadline_hours: float | None, budget_usd: float | None, fallback_max_price: float | None
) -> JobLimits:
    """The file's limits with the flags given on the command line in their place; InputError when the
    fallback's cap comes without a deadline (it is what the deadline's stand-ins may bill, nothing else)."""
    limits = JobLimits(
        deadline_hours=in_file.deadline_hours if deadline_hours is None else deadline_hours,
        budget_usd=in_file.budget_usd if budget_usd is None else budget_usd,
        fallback_max_price=in_file.fallback_max_price if fallback_max_price is None else fallback_max_price,
    )
    if limits.fallback_max_price is not None and limits.deadline_hours is None:
        raise InputError(
            "--fallback-max-price (limits.fallback_max_price) is what the deadline's on-demand stand-ins "
            "may bill per hour: give a deadline too (--deadline H)"
        )
    return limits


def check_fallback_cap(limits: JobLimits, on_demand_usd_per_hour: float) -> None:
    """The fallback's cap must leave room for a stand-in beside the plan's own on-demand nodes."""
    cap = limits.fallback_max_price
    if cap is not None and cap <= on_demand_usd_per_hour:
        raise InputError(
            f"--fallback-max-price ${cap:g}/h leaves nothing for on-demand stand-ins beside the plan's "
            f"own on-demand nodes (${on_demand_usd_per_hour:.4f}/h)"
        )


def check_budget(limits: JobLimits, spent_usd: float, job_id: str) -> None:
    """A resumed job's budget must be above what it has spent already (it would stop at once)."""
    budget = limits.budget_usd
    if budget is not None and budget <= spent_usd:
        raise InputError(
            f"--budget ${budget:g} is not above the ${spent_usd:.2f} job {job_id} has spent already; "
            "give more to resume it"
        )
