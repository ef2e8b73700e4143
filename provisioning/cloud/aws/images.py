"""The image every node boots, and which instance families it serves: AWS's Deep Learning AMI with PyTorch.

deepvm's nodes need an NVIDIA driver that runs their GPUs, a CUDA that supports them, and the job's Python
stack (PyTorch). AWS's "Deep Learning OSS Nvidia Driver AMI GPU PyTorch" carries all three, with PyTorch
in its own environment (/opt/pytorch/bin/python); a Base DLAMI carries no PyTorch. Each DLAMI's release
notes list the instance types it supports (`supported_ec2_instances`), and the table below is copied from
them, with the page and its date: a family missing there (p3: V100, a Volta GPU the image's CUDA no longer
supports) boots but has no usable GPU. CPU families (checkpoint holders) only need to boot: a DLAMI is an
x86_64 image whose software is the same on every instance type, GPU tools unused where there is no GPU
(https://docs.aws.amazon.com/dlami/latest/devguide/features.html).

The AMI id is read, per region, from the public SSM parameter AWS keeps for the image's latest build (the
release notes give its name). What the image lacks for deepvm
(mpi4py, built against the image's Open MPI) the shipped job specs install in their `setup`
(configs/resnet.yaml).

A plan whose families the image cannot serve is refused before anything is made, with the fix: pass
--ami with an image that can (deepvm then trusts it), or let `--on-shortage next-plan` launch the next one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from botocore.exceptions import ClientError

from provisioning.catalog.market.families import family_of
from provisioning.cloud.aws.context import AwsContext, error_code
from provisioning.cloud.types import Unlaunchable
from provisioning.core.errors import CloudError
from provisioning.planner.plan import Plan, Role

_NOTES = "https://docs.aws.amazon.com/dlami/latest/devguide/aws-deep-learning-ami-gpupt29oss-ul2404-2026-03-20.html"
_NOTES_DATE = "2026-03-20"
_FEATURES = "https://docs.aws.amazon.com/dlami/latest/devguide/features.html"


@dataclass(frozen=True)
class FamilySupport:
    """What one image does on one instance family, and where that is said."""

    boots: bool  # the image starts on the family (an x86_64 image on an x86_64 Nitro family)
    gpu: str | None  # the family's GPU, e.g. "V100"; None for a CPU family
    drives_gpu: bool  # the image's driver and CUDA run that GPU (False when there is none to run)
    source: str  # the page that says so
    as_of: str  # that page's date

    def serves(self, role: Role) -> bool:
        """Whether a node of `role` works on it: a trainer needs its GPU driven (a CPU trainer has none to
        drive), a holder only needs to boot."""
        return self.boots and (role is Role.HOLDER or self.gpu is None or self.drives_gpu)


def _gpu(name: str, driven: bool = True) -> FamilySupport:
    return FamilySupport(boots=True, gpu=name, drives_gpu=driven, source=_NOTES, as_of=_NOTES_DATE)


_CPU = FamilySupport(boots=True, gpu=None, drives_gpu=False, source=_FEATURES, as_of=_NOTES_DATE)


@dataclass(frozen=True)
class DeepLearningAmi:
    """One of AWS's Deep Learning AMIs, found by its public SSM parameter."""

    name: str  # as AWS names it
    ssm_parameter: str  # the parameter holding the id of its latest build, in every region
    ssh_user: str  # the login user
    python: str  # the Python with PyTorch
    families: dict[str, FamilySupport] = field(default_factory=dict)

    def unserved(self, plan: Plan) -> list[str]:
        """The plan's groups this image cannot serve, described with why ("trainers (p3.2xlarge): its V100
        GPUs are not driven"); [] when it serves them all."""
        roles: dict[str, list[str]] = {}  # instance type -> the roles of its groups it cannot serve
        whys: dict[str, str] = {}
        for group in plan.nodes:
            why = self.why_not(group.instance_type, group.role)
            if why is not None:
                roles.setdefault(group.instance_type, []).append(f"{group.role.value}s")
                whys[group.instance_type] = why
        return [
            f"{' and '.join(dict.fromkeys(unserved))} ({instance_type}): {whys[instance_type]}"
            for instance_type, unserved in roles.items()
        ]

    def why_not(self, instance_type: str, role: Role) -> str | None:
        """Why the image cannot serve a node of `role` on `instance_type`, with the source; None when it can."""
        family = family_of(instance_type)
        support = self.families.get(family)
        if support is None:
            return f"{family} is not among the families it is known to serve"
        if support.serves(role):
            return None
        return f"its {support.gpu} GPUs are not among the instances it supports ({support.source}, {support.as_of})"


PYTORCH_DLAMI = DeepLearningAmi(
    name="Deep Learning OSS Nvidia Driver AMI GPU PyTorch 2.9 (Ubuntu 24.04)",
    ssm_parameter="/aws/service/deeplearning/ami/x86_64/oss-nvidia-driver-gpu-pytorch-2.9-ubuntu-24.04/latest/ami-id",
    ssh_user="ubuntu",
    python="/opt/pytorch/bin/python",
    families={
        # supported_ec2_instances: G4dn, G5, G6, Gr6, G6e, P4, P4de, P5, P5e, P5en, P6-B200
        "g4dn": _gpu("T4"),
        "g5": _gpu("A10G"),
        "g6": _gpu("L4"),
        "g6e": _gpu("L40S"),
        "p4d": _gpu("A100"),
        "p5": _gpu("H100"),
        "p3": _gpu("V100", driven=False),  # not listed: Volta is beyond the image's CUDA
        **dict.fromkeys(("c5", "c5n", "c6i", "c6in", "m5", "m6i", "r6i", "t3", "d3"), _CPU),
    },
)


@dataclass(frozen=True)
class NodeImage:
    """The image a cluster's nodes boot and the Python on them that has the job's stack."""

    image_id: str
    python: str  # "" when deepvm does not know (a user's --ami): the nodes' python3 then


def default_image(ctx: AwsContext, plan: Plan, image: DeepLearningAmi = PYTORCH_DLAMI) -> NodeImage:
    """The DLAMI's current build in the plan's region, once it is known to serve every node of the plan.

    Raises Unlaunchable (a shortage: next-plan goes on) when it cannot, a CloudError when its parameter
    cannot be read."""
    problems = image.unserved(plan)
    if problems:
        raise Unlaunchable(
            f"the image deepvm boots ({image.name}) cannot serve the plan's {'; '.join(problems)}; pass --ami "
            "with an image that can (and --ssh-user), or --on-shortage next-plan to launch the next plan"
        )
    return NodeImage(latest_build(ctx, image), image.python)


def latest_build(ctx: AwsContext, image: DeepLearningAmi = PYTORCH_DLAMI) -> str:
    """The id of the image's latest build in the region, from its public SSM parameter (a CloudError with
    the fix when it cannot be read)."""
    try:
        return str(ctx.client("ssm").get_parameter(Name=image.ssm_parameter)["Parameter"]["Value"])
    except ClientError as exc:
        raise CloudError(
            f"could not find {image.name} in {ctx.region} ({error_code(exc)} for {image.ssm_parameter}); pass "
            "--ami AMI_ID (it needs ssm:GetParameter on that public parameter)"
        ) from exc
