"""The provider interface's data: what to launch, what was launched, what a node is.

Every layer above the provider (the store, the CLI, the training launcher) speaks only these types, so a
test can build any of them by hand and no boto3 dict leaks upwards.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from enum import Enum
from pathlib import Path
from typing import Any

from provisioning.catalog.model import Market
from provisioning.cloud.names import ClusterIdentity
from provisioning.core.errors import CloudError
from provisioning.planner.plan import NodeGroup, Plan, Role


class CloudKind(str, Enum):
    """Which cloud a cluster runs on. Both speak EC2's API through the same provider; what else differs
    between them is the target's (provisioning/clusters/target.py)."""

    AWS = "aws"
    SANDBOX = "sandbox"  # a moto server and hosts on this machine

    def __str__(self) -> str:
        return self.value  # as a person and the JSON documents spell it

    @property
    def bills(self) -> bool:
        """Whether its nodes cost real money: the sandbox shows AWS's prices for the same plan and charges
        nothing."""
        return self is CloudKind.AWS


class ShortageError(CloudError):
    """The cloud delivered fewer instances than the plan needs."""


class Unlaunchable(ShortageError):
    """The plan cannot run where and as it says (a type not offered in its zone, GPUs the image does not
    drive); nothing was made, and the next plan may run."""


class LaunchRefused(CloudError):
    """The cloud refused the launch for a reason a retry does not change (a right, a quota, the image)."""


class ShortagePolicy(str, Enum):
    """What `up` does when the cloud delivers fewer instances than the plan asks for."""

    FAIL = "fail"  # clean up everything created and report
    ACCEPT = "accept"  # keep the smaller cluster
    NEXT_PLAN = "next-plan"  # clean up, then try the planner's next alternative


@dataclass(frozen=True)
class ClusterSpec:
    """Everything a provider needs to create one cluster; built from a Plan plus command-line options."""

    name: str  # the cluster name; tagged on every resource as deepvm:cluster
    plan: Plan  # node groups, region, availability zone, planned prices
    ssh_cidr: str  # the only source allowed to reach port 22 from outside the group
    subnet_id: str  # subnet in plan.availability_zone that the instances launch into
    image_id: str  # AMI
    ssh_user: str  # login user of the image ("ubuntu" on the Deep Learning AMI)
    ssh_public_key: str  # OpenSSH public key line authorised for ssh_user
    internal_public_key: str  # the cluster's internal key, also authorised: how the head logs in to nodes
    launch_token: str  # stable per cluster: client tokens derive from it, so a retried `up` is one cluster
    instance_profile: str | None = None  # IAM instance profile name or ARN: how nodes reach S3 without keys
    cluster_id: str = ""  # the id `up` gave this cluster (provisioning.cloud.names.ClusterIdentity)

    @property
    def identity(self) -> ClusterIdentity:
        return ClusterIdentity(self.name, self.cluster_id)

    @property
    def region(self) -> str:
        return self.plan.region

    @property
    def availability_zone(self) -> str:
        return self.plan.availability_zone


@dataclass(frozen=True)
class Shortfall:
    """Capacity the cloud did not deliver for one node group, with the cloud's reasons.

    A shortage (`refusal` empty) is a lack of capacity that another plan, zone or hour may not have; a
    refusal (a right, a quota, the image) fails the same way on every retry, so `up` stops at once."""

    instance_type: str
    market: Market
    wanted: int
    got: int
    reasons: tuple[str, ...]  # "ErrorCode: message" from CreateFleet's Errors[]
    refusal: str = ""  # "" when every reason is a lack of capacity; else the refusing code and its fix

    def describe(self) -> str:
        why = "; ".join(self.reasons) or "no reason given"
        return f"{self.got}/{self.wanted} {self.market.value} {self.instance_type} ({why})"


@dataclass(frozen=True)
class ControllerAccess:
    """The IAM instance profiles of the cluster's nodes that hold checkpoints. The head's gives it, and no
    other node, the controller's cloud rights: one deepvm made for the cluster (role and profile
    `deepvm-NAME-ID-REGION-controller`, deleted by `down`), or one the user named with
    `--controller-profile` (never deleted). With its own, deepvm also makes a role and profile for the other
    checkpoint holders (`...-holders`): no rights at `up`, a job's S3 area at `train` (iam.put_job_storage)."""

    profile: str = ""  # the head's instance profile name or ARN; "" when none was set up
    role: str = ""  # the role deepvm created for it; "" for a user's profile
    owned: bool = False  # deepvm created role and profile, so `down` deletes them
    holders: str = ""  # the holders' role and instance profile deepvm made (one name); "" when none


@dataclass(frozen=True)
class S3Area:
    """Objects under one key prefix of one S3 bucket, as a job uses them (provisioning.cloud.aws.policies)."""

    bucket: str
    prefix: str  # "" for the whole bucket, else a key prefix ending in "/"
    writes: bool  # True: also put, delete and abort uploads; False: list and read only


@dataclass(frozen=True)
class JobStorage:
    """The S3 areas one job uses, by the nodes that use them (training.shared.storage builds it)."""

    holders: tuple[S3Area, ...]  # every checkpoint holder (the head included): DeepCheck's L3 shards and manifests
    head: tuple[S3Area, ...] = ()  # the head besides: the job's log mirror, a dataset when the head trains

    @property
    def head_areas(self) -> tuple[S3Area, ...]:
        return tuple(dict.fromkeys((*self.holders, *self.head)))


@dataclass(frozen=True)
class CloudResources:
    """Ids of what a provider created (and the subnet it used) for one cluster, so `down` can delete
    exactly these first and a replacement node launches where the others did.

    The ids matter on AWS, where a listing cannot stand in for them: an instance CreateFleet just launched
    is missing from a tag-filtered DescribeInstances for a while (eventual consistency), and an instant
    fleet is never listed by DescribeFleets without its id."""

    key_name: str = ""
    security_group_id: str = ""
    launch_template_id: str = ""
    fleet_ids: tuple[str, ...] = ()
    subnet_id: str = ""
    instance_ids: tuple[str, ...] = ()  # every instance a fleet of the cluster returned, as it returned it
    # a subnet of the cluster's VPC in each zone of its region, "zone=subnet-id", as `up` found them: where a
    # node bought in another zone launches (provisioning/cloud/aws/network.py: zone_subnets)
    zone_subnets: tuple[str, ...] = ()
    # The head node's instance profile (ControllerAccess), in scalar fields so that every reader of these
    # records as flat JSON (the state store, the job handed to the head) keeps them without knowing them.
    controller_profile: str = ""
    controller_role: str = ""
    controller_owned: bool = False
    holders_role: str = ""
    # issue 25's money guard: the bucket deepvm made for the cluster's outputs ("" none), and whether its head
    # may take it down (autodown: the next command on the user's side then finishes the teardown)
    outputs_bucket: str = ""
    head_takes_down: bool = False

    def with_fleets(self, fleet_ids: list[str], instance_ids: tuple[str, ...] = ()) -> CloudResources:
        """These resources and more fleets, with the instances they launched."""
        return replace(
            self,
            fleet_ids=tuple(dict.fromkeys((*self.fleet_ids, *fleet_ids))),
            instance_ids=tuple(dict.fromkeys((*self.instance_ids, *instance_ids))),
        )

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> CloudResources:
        """The resources from their flat JSON form (the state store's, the job handed to the head): a field
        absent (a row of an older version) takes its default, one unknown is left out."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items() if k in known})

    def subnet_in(self, zone: str, own_zone: str) -> str:
        """The subnet a node of `zone` launches in (the cluster's own in its zone); CloudError when `up`
        recorded none there."""
        if zone == own_zone:
            return self.subnet_id
        found = dict(entry.split("=", 1) for entry in self.zone_subnets)
        if zone not in found:
            raise CloudError(
                f"the cluster's VPC has no subnet recorded in {zone} (`up` found them in "
                f"{', '.join(sorted(found)) or 'no other zone'})"
            )
        return found[zone]

    @property
    def controller(self) -> ControllerAccess:
        return ControllerAccess(self.controller_profile, self.controller_role, self.controller_owned, self.holders_role)

    def with_controller(self, access: ControllerAccess) -> CloudResources:
        return replace(
            self,
            controller_profile=access.profile,
            controller_role=access.role,
            controller_owned=access.owned,
            holders_role=access.holders,
        )


@dataclass(frozen=True)
class InstanceInfo:
    """One EC2 instance as the cloud describes it (no deepvm roles or prices yet)."""

    instance_id: str
    instance_type: str
    market: Market
    availability_zone: str
    state: str
    private_ip: str | None
    public_ip: str | None
    launched_at: str  # ISO-8601 UTC
    state_reason: str = ""  # EC2's StateReason code once it ended, e.g. Server.SpotInstanceTermination
    # a node bought after `up` (names.ROLE_TAG, PRICE_TAG): the role and price it was bought for, which a
    # stand-in or a repair of a type the plan lacks cannot take from the plan; None for `up`'s nodes
    bought_as: Role | None = None
    bought_at_usd: float | None = None


@dataclass(frozen=True)
class NodeRecord:
    """One instance of a cluster as deepvm knows it."""

    instance_id: str
    instance_type: str
    market: Market
    role: Role
    availability_zone: str
    state: str  # EC2 state name: pending, running, shutting-down, terminated, ...
    private_ip: str | None
    public_ip: str | None
    usd_per_hour: float  # the planned price of this node
    launched_at: str = ""  # ISO-8601 UTC
    ssh_user: str = "ubuntu"
    ssh_port: int = 22

    @property
    def address(self) -> str | None:
        """Where deepvm reaches it: the public address when there is one, else the private one."""
        return self.public_ip or self.private_ip

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NodeRecord:
        """As dataclasses.asdict wrote it (job.json, the head's record of a cluster's end)."""
        return cls(**{**data, "market": Market(data["market"]), "role": Role(data["role"])})


@dataclass(frozen=True)
class LaunchOutcome:
    """What one `run_instances` call produced: resources, instances by group, and what was missing."""

    resources: CloudResources
    instance_ids: tuple[str, ...]
    shortfalls: tuple[Shortfall, ...] = field(default_factory=tuple)

    @property
    def refusal(self) -> str:
        """Why the cloud refused the launch outright (a right, a quota, the image), or "" for none."""
        markets: dict[tuple[str, str], list[str]] = {}  # (type, refusal) -> the markets refused so
        for s in self.shortfalls:
            if s.refusal:
                markets.setdefault((s.instance_type, s.refusal), []).append(s.market.value)
        return "; ".join(f"{kind} {' and '.join(m)}: {why}" for (kind, why), m in markets.items())


@dataclass(frozen=True)
class HostSpec:
    """How to log in to one host over SSH (provisioning/cloud/ssh.py): all a connection needs."""

    name: str  # the host's name in log prefixes and results, e.g. "trainer-0a1b2c3d"
    address: str  # IP address or host name
    key_path: Path  # private key of the user deepvm logs in as
    known_hosts: Path  # the pinned host keys; the host's key must be in it
    port: int = 22
    user: str = "root"

    @property
    def where(self) -> str:
        return f"{self.name} ({self.user}@{self.address}:{self.port})"


@dataclass(frozen=True)
class SshEndpoint:
    """A running node of a cluster as the training launcher sees it: its role and market, and how to log
    in to it (`host`)."""

    instance_id: str
    address: str  # where deepvm reaches it (NodeRecord.address)
    private_address: str  # where the cluster's other nodes reach it: its address inside the VPC
    port: int
    user: str
    role: Role
    market: Market
    key_path: str  # private key, 0600
    known_hosts_path: str  # pinned host keys of the cluster's nodes

    @property
    def host(self) -> HostSpec:
        """The login, named by role and instance id (as log prefixes show the node)."""
        return HostSpec(
            name=f"{self.role.value}-{self.instance_id[2:10]}",
            address=self.address,
            key_path=Path(self.key_path),
            known_hosts=Path(self.known_hosts_path),
            port=self.port,
            user=self.user,
        )


def groups_by_type(groups: tuple[NodeGroup, ...]) -> dict[str, list[NodeGroup]]:
    """Node groups keyed by instance type, in plan order: one EC2 Fleet request per instance type."""
    by_type: dict[str, list[NodeGroup]] = {}
    for group in groups:
        by_type.setdefault(group.instance_type, []).append(group)
    return by_type
