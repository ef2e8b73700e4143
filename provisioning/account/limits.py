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
    plan: Plan | None = None  # None: no plan, or one whose types its catalog does not know
    catalog: Catalog | None = None  # the catalog it names: its types' vCPUs and quota groups


def choose_plan(path: Path | None) -> PlanChoice:
    """The first plan of the file given, else of the saved plan, else none (a ? row).

    A file that is no plan document is bad input when given (InputError, exit 2) and a ✗ row when saved. A
    plan that reads but cannot be launched (a type its catalog lacks, more vCPUs than the catalog's quotas,
    prices that moved) is a ✗ row either way: that is what `check` is for; its quota rows are still made
    from Service Quotas when its types are known."""
    from provisioning.clusters.plan_choice import MAX_PLAN_BYTES, named_catalog
    from provisioning.core.jsonfile import read_json_file
    from provisioning.planner.plan_check import check_plan
    from provisioning.planner.plan_document import PlanDocumentError, read_plan_document

    if path is None and not saved_plan_path().exists():
        return PlanChoice(
            CheckRow(Section.PLAN, "plan", Mark.UNKNOWN, f"no saved plan to hold the quotas against; {PLAN_AGAIN}")
        )
    where = path or saved_plan_path()
    try:
        try:
            entry = read_plan_document(read_json_file(where, "plan file", MAX_PLAN_BYTES))[0]
        except PlanDocumentError as exc:
            raise InputError(f"{where}: {exc}") from None
        catalog, label = named_catalog(entry.plan)
    except InputError as exc:
        if path is not None:
            raise
        return PlanChoice(CheckRow(Section.PLAN, str(where), Mark.MISSING, str(exc), PLAN_AGAIN))
    plan = entry.plan
    known = plan if all(g.instance_type in catalog.types for g in plan.nodes) else None
    try:
        checked = check_plan(entry, catalog, label)
    except PlanDocumentError as exc:
        return PlanChoice(CheckRow(Section.PLAN, str(where), Mark.MISSING, str(exc), PLAN_AGAIN), known, catalog)
    plan = checked.plan
    nodes = ", ".join(f"{g.count} {g.market.value} {g.instance_type} ({g.role.value})" for g in plan.nodes)
    detail = "; ".join(
        [
            f"{plan.architecture.value} in {plan.availability_zone}: {nodes}, ${plan.price_per_hour:.4f}/h",
            *catalog.warnings,
            *checked.warnings,
        ]
    )
    return PlanChoice(CheckRow(Section.PLAN, str(where), Mark.OK, detail), plan, catalog)


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
        fix = (
            f"ask for {needed} or more: `aws service-quotas request-service-quota-increase --service-code ec2 "
            f"--quota-code {code} --desired-value {needed} --region {plan.region}`"
        )
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
