"""The plan and quota rows of `deepvm check`: the plan `up` would launch, and whether the cloud lets it.

On AWS that is EC2's vCPU quotas, one per quota group and market, read from Service Quotas now (not the
day-old copy `plan` caches): the plan's vCPUs of each group and market against the quota. In the sandbox
every node is processes on this machine, so its limit is the machine (provisioning.sandbox.capacity).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from provisioning.account.report import CheckRow, Mark, Section
from provisioning.catalog.market.quotas import QUOTA_CODES, vcpu_quota
from provisioning.catalog.model import Catalog
from provisioning.cloud.aws.account import Refused, asking
from provisioning.cloud.aws.context import AwsContext
from provisioning.core.errors import InputError
from provisioning.core.home import saved_plan_path
from provisioning.planner.plan import Plan
from provisioning.planner.plan_check import vcpus_by_quota

PLAN_AGAIN = "plan again: `deepvm plan --max-price X` (or pass --plan FILE)"


@dataclass(frozen=True)
class PlanChoice:
    """The plan quotas are held against, and its row."""

    row: CheckRow
    plan: Plan | None = None
    catalog: Catalog | None = None  # the catalog it was checked against: its types' vCPUs and quota groups


def choose_plan(path: Path | None) -> PlanChoice:
    """The plan `up` would launch first: the file given (a bad one is the caller's InputError, exit 2), else
    the saved plan (one that no longer checks is a ✗ row), else none (a ? row)."""
    from provisioning.clusters.plan_choice import load_plans

    if path is None and not saved_plan_path().exists():
        return PlanChoice(CheckRow(Section.PLAN, "plan", Mark.UNKNOWN,
                                   f"no saved plan to hold the quotas against; {PLAN_AGAIN}"))  # fmt: skip
    where = str(path or saved_plan_path())
    try:
        loaded = load_plans(path)
    except InputError as exc:
        if path is not None:
            raise
        return PlanChoice(CheckRow(Section.PLAN, where, Mark.MISSING, str(exc), PLAN_AGAIN))
    plan = loaded.plans[0]
    nodes = ", ".join(f"{g.count} {g.market.value} {g.instance_type} ({g.role.value})" for g in plan.nodes)
    detail = "; ".join([f"{plan.architecture.value} in {plan.availability_zone}: {nodes}, ${plan.price_per_hour:.4f}/h",
                        *loaded.warnings])
    return PlanChoice(CheckRow(Section.PLAN, where, Mark.OK, detail), plan, loaded.catalogs[0])


def quota_rows(ctx: AwsContext, plan: Plan, catalog: Catalog) -> list[CheckRow]:
    """One row per quota group and market the plan uses: its vCPUs against the account's quota now."""
    client = ctx.client("service-quotas")
    rows = []
    for (group, market), needed in sorted(vcpus_by_quota(plan, catalog).items()):
        name = f"{market.value} vCPUs of {group}"
        code = QUOTA_CODES.get(group, {}).get(market)
        if code is None:
            rows.append(CheckRow(Section.QUOTAS, name, Mark.UNKNOWN, f"deepvm knows no quota code for {group}"))
            continue
        try:
            with asking("servicequotas:GetServiceQuota"):
                quota = vcpu_quota(client, code)
        except Refused as exc:
            rows.append(CheckRow(Section.QUOTAS, name, Mark.UNKNOWN, f"Service Quotas did not answer: {exc}"))
            continue
        said = f"the plan needs {needed}, the quota ({code}) in {plan.region} is {quota:g}"
        if needed <= quota:
            rows.append(CheckRow(Section.QUOTAS, name, Mark.OK, said))
            continue
        fix = (f"ask for {needed} or more: `aws service-quotas request-service-quota-increase --service-code ec2 "
               f"--quota-code {code} --desired-value {needed} --region {plan.region}`")
        rows.append(CheckRow(Section.QUOTAS, name, Mark.MISSING, said, fix))
    return rows


def machine_rows(plan: Plan) -> list[CheckRow]:
    """The sandbox's limit: whether this machine can host the plan's nodes now."""
    from provisioning.sandbox.capacity import check_fits, measure

    nodes = sum(g.count for g in plan.nodes)
    capacity = measure()
    name = f"{nodes} sandbox hosts"
    try:
        crowded = check_fits(nodes, capacity)
    except InputError as exc:
        return [CheckRow(Section.QUOTAS, name, Mark.MISSING, str(exc), "plan fewer nodes (--node-limit N)")]
    return [CheckRow(Section.QUOTAS, name, Mark.OK, crowded or f"this machine has {capacity.describe()}")]
