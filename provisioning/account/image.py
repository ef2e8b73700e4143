"""The image rows of `deepvm check`: the image `up` would boot in the region, whether EC2 has it there, and
what it carries for the job (PyTorch).

On AWS the image is the one `up` resolves (the Deep Learning AMI's public SSM parameter); EC2's record of
it says whether it exists in the region, is available and which architecture it boots. Which Python stack
it carries is only known for an image deepvm keeps a record of; for any other the row is ?. In the sandbox
every host runs this machine's system whatever the AMI, so what it carries is this machine's Python.
"""

from __future__ import annotations

import importlib.util
import sys

from provisioning.account.report import CheckRow, Mark, Section
from provisioning.cloud.aws.account import Refused, image_facts
from provisioning.cloud.aws.context import AwsContext
from provisioning.cloud.types import CloudKind
from provisioning.clusters.target import CloudTarget
from provisioning.core.errors import CloudError

ANY_AMI = "pass `deepvm up --ami AMI_ID` with an image of this region"


def image_rows(ctx: AwsContext, target: CloudTarget, explicit: str | None) -> tuple[list[CheckRow], str | None]:
    """The rows, and the image id `up` would boot (`explicit`, as `up --ami`; None when it cannot be found)."""
    try:
        image_id = target.image(ctx, explicit)
    except CloudError as exc:
        return [CheckRow(Section.IMAGE, "image", Mark.MISSING, str(exc), ANY_AMI)], None
    if target.kind is not CloudKind.SANDBOX:
        return [_record(ctx, image_id), _stack_on_aws(image_id)], image_id
    return [
        CheckRow(Section.IMAGE, image_id, Mark.OK, "the sandbox's hosts boot this machine's system whatever the AMI"),
        _stack_here(),
    ], image_id


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
        return CheckRow(Section.IMAGE, image_id, Mark.MISSING, f"{said}: deepvm's instance families are x86_64",
                        ANY_AMI)  # fmt: skip
    return CheckRow(Section.IMAGE, image_id, Mark.OK, said)


def _stack_on_aws(image_id: str) -> CheckRow:
    return CheckRow(Section.IMAGE, "PyTorch on the image", Mark.UNKNOWN,
                    f"deepvm keeps no record of what {image_id} carries; a job's `setup` may install it")  # fmt: skip


def _stack_here() -> CheckRow:
    python = sys.executable
    if importlib.util.find_spec("torch") is None:
        return CheckRow(Section.IMAGE, "PyTorch on the hosts", Mark.MISSING, f"{python} cannot import torch",
                        "install the project's dependencies: `make setup`")  # fmt: skip
    return CheckRow(Section.IMAGE, "PyTorch on the hosts", Mark.OK, f"{python} has torch")
