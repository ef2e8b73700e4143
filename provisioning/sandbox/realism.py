"""Realism over moto: the sandbox's EC2 behaves like AWS where moto does not, and every test can say how.

moto answers at once and consistently, lists everything, never runs out of capacity and ends every
instance as its user did. AWS does none of that, and deepvm's code must cope with what AWS does. Each
behaviour below is switched by one field of `Realism` and emulates a documented behaviour of AWS:

- `listing_lag_s`: a new instance is missing from DescribeInstances without InstanceIds (a listing, by
  tag or state) for that long after its launch. "The result of an API command ... might not be
  immediately visible to all subsequent commands" (https://docs.aws.amazon.com/ec2/latest/devguide/
  eventual-consistency.html). A lookup by id still finds it: deepvm keeps the ids EC2 returned.
- `by_id_lag_s`: a new instance is unknown by id for that long after its launch: DescribeInstances and
  TerminateInstances naming it answer InvalidInstanceID.NotFound, which "may occur because the ID of a
  recently created instance has not propagated through the system"
  (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html). Only requests that name
  ids: EC2's own ends (a fleet's deletion, a reclaim) still find it.
- `group_lag_s`: AuthorizeSecurityGroupIngress on a group created less than that long ago answers
  InvalidGroup.NotFound (the same page lists it among the eventual-consistency errors).
- `profile_lag_s`: AssociateIamInstanceProfile or ReplaceIamInstanceProfileAssociation with an instance
  profile created less than that long ago answers InvalidParameterValue ("Invalid IAM Instance Profile
  name"): IAM is eventually consistent and EC2 learns of a new profile late
  (https://docs.aws.amazon.com/IAM/latest/UserGuide/troubleshoot_general.html#troubleshoot_general_eventual-consistency).
- `hide_instant_fleets`: DescribeFleets without FleetIds leaves out fleets of type instant ("If a fleet
  is of type instant, you must specify the fleet ID in the request, otherwise the fleet does not appear
  in the response": https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeFleets.html).
- `capacity`: a schedule of what EC2 can launch per pool (zone, instance type, market). A CreateFleet
  asking a pool for more than it has gets what is left (nothing, below MinTargetCapacity) and an
  Errors[] entry with the rule's code, as an instant fleet reports it
  (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CreateFleetError.html; the codes:
  https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html). A rule can hold for a
  window of time only: the market emulation of later issues adds rules, it needs no other mechanism.
- `public_parameters`: SSM GetParameter answers the public parameters AWS publishes (the Deep Learning
  AMI's id under /aws/service/deeplearning/...), which moto neither has nor lets anyone write ("No access
  to reserved parameter name", as AWS answers a PutParameter there); the sandbox's points at
  SANDBOX_IMAGE, so that `up` finds its image the way it does on AWS.
- `answer_dry_run` and `refused_actions`: IAM's say. EC2 answers a DryRun request (DryRunOperation or
  UnauthorizedOperation) and never carries it out, which moto does for some operations only; the actions in
  `refused_actions` are refused to every caller as IAM refuses a policy that lacks them
  (provisioning/sandbox/realism_iam.py says how, with AWS's pages).
- `forget_terminated_after_s`: a terminated instance vanishes that long after it ended: by id it is
  InvalidInstanceID.NotFound, and no listing shows it. "Terminated instances remain visible after
  termination (for approximately one hour)" (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/
  API_TerminateInstances.html); moto keeps them for ever. Forgotten, an instance's address is free again.
- `forget_fleets_after_s`: an instant fleet that ended (deleted, or all its instances terminated) vanishes
  that long after: DescribeFleets by its id answers InvalidFleetId.NotFound, DeleteFleets lists it among
  UnsuccessfulFleetDeletions as fleetIdDoesNotExist (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/
  API_DeleteFleetError.html). AWS keeps ended instant fleets a while only (about two days, as seen);
  moto for ever. For both `forget_` fields null (the default) means never and 0 at once.
- `reclaim`: an instance ended by EC2 itself carries the StateReason EC2 gives it, e.g.
  Server.SpotInstanceTermination for a Spot interruption
  (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_StateReason.html), where moto would say
  Client.UserInitiatedShutdown. The sandbox's supervisor reclaims an interrupted instance this way.

How it is switched on: `realism_moto.install()` patches moto's EC2, IAM and SSM classes in the process that
runs the moto server (the sandbox's control plane, `provisioning.sandbox.controlplane`, or a test's
ThreadedMotoServer) and adds a small control endpoint to it, `/deepvm-realism` (GET and PUT the settings as JSON),
`/deepvm-realism/reclaim` (POST) and `/deepvm-realism/inventory` (GET: the instances as the server holds them,
for the sandbox's supervisor). `RealismControl(endpoint)` is its client: tests, the supervisor and the
CLI change the behaviour of a running server with it, over HTTP, without importing moto. The sandbox
starts with `SANDBOX` (everything on, delays of a few seconds at most); a test's moto starts with
`Realism()` (what costs no time on) and a test that needs a lag sets it.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from provisioning.cloud.aws.images import PYTORCH_DLAMI

CONTROL_PATH = "/deepvm-realism"
# the sandbox's AMI: moto does not validate image ids, and the hosts boot this machine whatever it says
SANDBOX_IMAGE = "ami-0000000000de3b0a1"
DLAMI_PARAMETERS = {PYTORCH_DLAMI.ssm_parameter: SANDBOX_IMAGE}
SPOT_TERMINATION = "Server.SpotInstanceTermination"  # EC2 reclaimed a Spot instance
INTERNAL_ERROR = "Server.InternalError"  # the instance's host failed
INSTANCE_SHUTDOWN = "Client.InstanceInitiatedShutdown"  # its OS shut down, with shutdown behavior terminate
STATE_MESSAGES = {
    SPOT_TERMINATION: "Spot instance termination",
    INTERNAL_ERROR: "Internal error on launch",
    INSTANCE_SHUTDOWN: "Instance initiated shutdown",
}
_ERROR_MESSAGES = {  # what EC2 says for each code, shortened from the error codes reference
    "InsufficientInstanceCapacity": "We currently do not have sufficient {type} capacity in the Availability "
    "Zone you requested ({zone}).",
    "UnfulfillableCapacity": "At this time there isn't enough spare capacity to fulfill your request for "
    "Spot Instances.",
    "MaxSpotInstanceCountExceeded": "Max spot instance count exceeded",
    "VcpuLimitExceeded": "You have requested more vCPU capacity than your current vCPU limit allows for the "
    "instance bucket that the specified instance type belongs to.",
    "UnauthorizedOperation": "You are not authorized to perform this operation.",
    "AuthFailure.ServiceLinkedRoleCreationNotPermitted": "The provided credentials do not have permission to "
    "create the service-linked role for EC2 Spot Instances.",
}
MARKETS = ("spot", "on-demand", "*")
CAPACITY_CODES = (
    "InsufficientInstanceCapacity",
    "UnfulfillableCapacity",
    "MaxSpotInstanceCountExceeded",
    "VcpuLimitExceeded",
)  # what EC2 answers a pool it cannot fill


@dataclass(frozen=True)
class CapacityRule:
    """One entry of the capacity schedule: how much one pool can still launch, and what EC2 says beyond.

    A pool is a zone, an instance type and a market; "*" matches any. The first rule that matches a
    request's pool and holds now decides for it; a pool no rule matches has capacity without end.
    """

    zone: str = "*"
    instance_type: str = "*"
    market: str = "*"  # "spot", "on-demand" or "*"
    available: int = 0  # instances the pool launches while the rule holds (each launch uses them up)
    error_code: str = "InsufficientInstanceCapacity"  # Errors[].ErrorCode for what it cannot launch
    message: str = ""  # Errors[].ErrorMessage; "" for EC2's usual text of the code
    starts_at: float | None = None  # UNIX time the rule begins to hold (None: already)
    ends_at: float | None = None  # UNIX time it stops holding (None: never)

    def matches(self, zone: str, instance_type: str, market: str, now: float) -> bool:
        return (
            self.zone in ("*", zone)
            and self.instance_type in ("*", instance_type)
            and self.market in ("*", market)
            and (self.starts_at is None or now >= self.starts_at)
            and (self.ends_at is None or now < self.ends_at)
        )

    def problem(self) -> str | None:
        """What is wrong with the rule as a user may write it (None: nothing)."""
        if self.market not in MARKETS:
            return f"market must be one of {', '.join(MARKETS)}, not {self.market!r}"
        if isinstance(self.available, bool) or not isinstance(self.available, int) or self.available < 0:
            return f"available must be a count >= 0, not {self.available!r}"
        return None

    def error_message(self, zone: str, instance_type: str) -> str:
        text = self.message or _ERROR_MESSAGES.get(self.error_code, self.error_code)
        return text.format(type=instance_type, zone=zone)


@dataclass(frozen=True)
class Realism:
    """How far the moto server behaves like AWS (the module docstring says what each field emulates)."""

    listing_lag_s: float = 0.0
    group_lag_s: float = 0.0
    profile_lag_s: float = 0.0
    hide_instant_fleets: bool = True
    capacity: tuple[CapacityRule, ...] = ()
    public_parameters: dict[str, str] = field(default_factory=lambda: dict(DLAMI_PARAMETERS))
    answer_dry_run: bool = True
    refused_actions: tuple[str, ...] = ()  # IAM actions ("ec2:CreateFleet") refused to every caller
    forget_terminated_after_s: float | None = None  # None: never; 0: at once
    by_id_lag_s: float = 0.0
    forget_fleets_after_s: float | None = None  # None: never; 0: at once

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Realism:
        """The settings from their JSON form; ValueError naming the field that is wrong."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("the realism settings must be a JSON object")
        _check_keys(data, cls, "realism")
        rules = []
        for index, raw in enumerate(data.pop("capacity", [])):
            if not isinstance(raw, dict):
                raise ValueError(f"capacity[{index}] must be an object")
            _check_keys(raw, CapacityRule, f"capacity[{index}]")
            rule = CapacityRule(**raw)
            if (problem := rule.problem()) is not None:
                raise ValueError(f"capacity[{index}]: {problem}")
            rules.append(rule)
        parameters = data.pop("public_parameters", dict(DLAMI_PARAMETERS))
        if not isinstance(parameters, dict) or not all(isinstance(v, str) for v in [*parameters, *parameters.values()]):
            raise ValueError("public_parameters must map parameter names to values")
        refused = data.pop("refused_actions", [])
        if not isinstance(refused, list) or not all(isinstance(a, str) and ":" in a for a in refused):
            raise ValueError("refused_actions must list IAM actions (service:Action)")
        realism = cls(**data, capacity=tuple(rules), public_parameters=parameters, refused_actions=tuple(refused))
        for name in ("listing_lag_s", "group_lag_s", "profile_lag_s", "by_id_lag_s"):
            value = getattr(realism, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 60:
                raise ValueError(f"{name} must be a number of seconds from 0 to 60, not {value!r}")
        for name in ("forget_terminated_after_s", "forget_fleets_after_s"):
            value = getattr(realism, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0):
                raise ValueError(f"{name} must be null (never) or a number of seconds from 0, not {value!r}")
        return realism


# The sandbox's default: what matters on, with delays short enough for a demo (a few seconds at most).
# AWS forgets a terminated instance after about an hour and an ended fleet after days; the sandbox after
# minutes, so that a long session meets what a real account does
SANDBOX = Realism(
    listing_lag_s=2.0,
    group_lag_s=1.0,
    profile_lag_s=2.0,
    by_id_lag_s=1.0,
    forget_terminated_after_s=300.0,
    forget_fleets_after_s=300.0,
)


def _check_keys(data: dict[str, Any], cls: type, where: str) -> None:
    unknown = sorted(set(data) - {f.name for f in fields(cls)})
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {', '.join(unknown)}")


@dataclass(frozen=True)
class InventoryRow:
    """One instance as the control plane itself holds it (GET CONTROL_PATH/inventory): what the sandbox's
    supervisor boots and ends hosts by. EC2's own machines follow its inventory, not its API's listing, which
    lags (`listing_lag_s`); and a DescribeInstances per pass, four a second, cost the control plane and the
    supervisor about 50 ms of CPU each time (XML made, signed, parsed) for the whole life of a sandbox."""

    instance_id: str
    region: str
    state: str  # pending | running | shutting-down | terminated | stopping | stopped
    private_ip: str | None
    instance_type: str
    availability_zone: str
    spot: bool
    image_id: str


class RealismControl:
    """The client of a moto server's realism endpoint (no moto import: the CLI and tests use it)."""

    def __init__(self, endpoint: str) -> None:
        self.url = endpoint.rstrip("/") + CONTROL_PATH

    def settings(self) -> Realism:
        with urllib.request.urlopen(self.url, timeout=10) as reply:
            return Realism.from_json(reply.read().decode())

    def set(self, realism: Realism) -> None:
        self._send(self.url, "PUT", realism.to_json())

    def change(self, **changes: Any) -> Realism:
        """Change some fields of the server's settings; the settings now in force."""
        new = replace(self.settings(), **changes)
        self.set(new)
        return new

    def inventory(self, regions: tuple[str, ...]) -> tuple[InventoryRow, ...]:
        """Every instance in `regions`, as the control plane holds them: no listing lag, no XML, no paging."""
        query = urllib.parse.urlencode({"regions": ",".join(regions)})
        with urllib.request.urlopen(f"{self.url}/inventory?{query}", timeout=10) as reply:
            return tuple(InventoryRow(**row) for row in json.loads(reply.read().decode()))

    def reclaim(self, region: str, instance_id: str, state_reason: str = SPOT_TERMINATION) -> None:
        """Terminate the instance as EC2 itself does, with `state_reason` as its StateReason code."""
        body = json.dumps({"region": region, "instance_id": instance_id, "state_reason": state_reason})
        self._send(f"{self.url}/reclaim", "POST", body)

    @staticmethod
    def _send(url: str, method: str, body: str) -> None:
        request = urllib.request.Request(
            url, data=body.encode(), method=method, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=10) as reply:
            reply.read()
