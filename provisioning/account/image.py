"""The image rows of `deepvm check`: the image `up` would boot in the region, whether EC2 has it there, what it
carries for the job, and whether it serves each of the plan's instance types.

The image is `--ami` as given, else the latest build of AWS's PyTorch Deep Learning AMI in the region (its
public SSM parameter, as `up` finds it). What that image carries and which families it boots on and drives
the GPUs of is deepvm's record of it (provisioning.cloud.aws.images, from AWS's release notes); of an image
given with `--ami` deepvm knows nothing, so those rows are ?. In the sandbox every host runs this machine's
system whatever the AMI (the realism layer answers the DLAMI's parameter), so what it carries is this
machine's Python, and the plan is held to the same families as on AWS (`up` is).
"""

from __future__ import annotations

import importlib.util
import sys

from provisioning.account.report import CheckRow, Mark, Section
from provisioning.catalog.market.families import family_of
from provisioning.cloud.aws.account import Refused, asking, image_facts
from provisioning.cloud.aws.context import AwsContext
from provisioning.cloud.aws.images import PYTORCH_DLAMI, latest_build
from provisioning.cloud.types import CloudKind
from provisioning.core.errors import CloudError
from provisioning.planner.plan import Plan, Role

ANY_AMI = "pass `deepvm up --ami AMI_ID` (and --ssh-user) with an image of this region that can"


def image_rows(
    ctx: AwsContext,
    kind: CloudKind,
    explicit: str | None,
    plan: Plan | None,
) -> tuple[list[CheckRow], str | None]:
    """The rows, and the image id `up` would boot (None when it cannot be found)."""
    try:
        with asking("ssm:GetParameter"):  # no connection at all is a Refused too
            image_id = explicit or latest_build(ctx)
    except CloudError as exc:
        return [CheckRow(Section.IMAGE, PYTORCH_DLAMI.name, Mark.MISSING, str(exc), ANY_AMI)], None
    if kind is CloudKind.SANDBOX:
        rows = [
            CheckRow(
                Section.IMAGE, image_id, Mark.OK, "the sandbox's hosts boot this machine's system whatever the AMI"
            ),
            _python_here(),
        ]
    else:
        rows = [_record(ctx, image_id), _stack(explicit)]
    if plan is not None:
        rows += _families(plan, explicit)
    return rows, image_id


def _record(ctx: AwsContext, image_id: str) -> CheckRow:
    try:
        facts = image_facts(ctx, image_id)
    except Refused as exc:
        return CheckRow(Section.IMAGE, image_id, Mark.UNKNOWN, f"EC2's record of it could not be read: {exc}")
    if not facts.found:
        return CheckRow(Section.IMAGE, image_id, Mark.MISSING, f"EC2 has no image {image_id} in {ctx.region}", ANY_AMI)
    said = f"{facts.name}: {facts.state}, {facts.architecture}"
    if facts.state != "available":
        return CheckRow(Section.IMAGE, image_id, Mark.MISSING, said, ANY_AMI)
    if facts.architecture != "x86_64":  # every family deepvm plans on is x86_64 (catalog/market/families.py)
        return CheckRow(
            Section.IMAGE, image_id, Mark.MISSING, f"{said}: deepvm's instance families are x86_64", ANY_AMI
        )
    return CheckRow(Section.IMAGE, image_id, Mark.OK, said)


def _stack(explicit: str | None) -> CheckRow:
    if explicit:
        return CheckRow(
            Section.IMAGE,
            "PyTorch on the image",
            Mark.UNKNOWN,
            f"deepvm keeps no record of what {explicit} carries: jobs run the nodes' python3, which "
            "a job's `setup` can provide for",
        )
    return CheckRow(
        Section.IMAGE, "PyTorch on the image", Mark.OK, f"{PYTORCH_DLAMI.name} carries it in {PYTORCH_DLAMI.python}"
    )


def _python_here() -> CheckRow:
    python = sys.executable
    if importlib.util.find_spec("torch") is None:
        return CheckRow(
            Section.IMAGE,
            "PyTorch on the hosts",
            Mark.MISSING,
            f"{python} cannot import torch",
            "install the project's dependencies: `make setup`",
        )
    return CheckRow(Section.IMAGE, "PyTorch on the hosts", Mark.OK, f"{python} has torch")


def _families(plan: Plan, explicit: str | None) -> list[CheckRow]:
    """One row per instance type and role of the plan: whether the image boots it and drives its GPUs."""
    if explicit:
        types = ", ".join(dict.fromkeys(g.instance_type for g in plan.nodes))
        return [
            CheckRow(
                Section.IMAGE,
                "the plan's types",
                Mark.UNKNOWN,
                f"deepvm trusts {explicit} to boot {types} and drive their GPUs",
            )
        ]
    rows = []
    for instance_type, role in dict.fromkeys((g.instance_type, g.role) for g in plan.nodes):
        name = f"{instance_type} ({role.value})"
        why = PYTORCH_DLAMI.why_not(instance_type, role)
        if why is not None:
            fix = f"plan without {family_of(instance_type)} (`deepvm plan`), or {ANY_AMI}"
            rows.append(CheckRow(Section.IMAGE, name, Mark.MISSING, why, fix))
            continue
        support = PYTORCH_DLAMI.families[family_of(instance_type)]
        drives = role is not Role.HOLDER and support.gpu is not None
        what = f"boots it and drives its {support.gpu} GPUs" if drives else "boots it (no GPU to drive)"
        rows.append(CheckRow(Section.IMAGE, name, Mark.OK, f"{what} ({support.source}, {support.as_of})"))
    return rows
