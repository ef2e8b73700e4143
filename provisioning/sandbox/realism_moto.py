"""The moto side of `provisioning.sandbox.realism`: the settings in force in this process, the patches that
make moto behave as that module's docstring says, and its control endpoint. `install()` is called by the
process that runs a moto server (the sandbox's control plane, a test's ThreadedMotoServer); nothing else
imports this module, so nothing else pays for importing moto.

Each patch wraps one of moto's own methods and reads the settings in force at the time of the call, so a
test can change them between two calls of the same run.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs

from moto.core.responses import ActionResult
from moto.core.utils import utcnow
from moto.ec2.exceptions import EC2ClientError, InvalidInstanceIdError
from moto.ec2.models import ec2_backends
from moto.ec2.models.fleets import FleetsBackend
from moto.ec2.models.instances import InstanceBackend, Reservation, StateReason
from moto.ec2.responses.fleets import Fleets
from moto.ec2.responses.iam_instance_profiles import IamInstanceProfiles
from moto.ec2.responses.instances import InstanceResponse
from moto.ec2.responses.security_groups import SecurityGroups
from moto.iam.models import IAMBackend
from moto.moto_api._internal.models import MotoAPIBackend
from moto.moto_server.werkzeug_app import DomainDispatcherApplication
from moto.ssm.models import Parameter, SimpleSystemManagerBackend

from provisioning.sandbox import moto_speed
from provisioning.sandbox.realism import CONTROL_PATH, STATE_MESSAGES, CapacityRule, InventoryRow, Realism
from provisioning.sandbox.realism_iam import answer as iam_answer


@dataclass
class ServerState:
    """The server side: settings in force, what each capacity rule has launched, and when things were
    born (security groups by id, instance profiles by name), all guarded by one lock."""

    realism: Realism = field(default_factory=Realism)
    default: Realism = field(default_factory=Realism)  # what a reset of the server (/moto-api/reset) restores
    launched: dict[int, int] = field(default_factory=dict)  # rule index -> instances launched under it
    born: dict[str, float] = field(default_factory=dict)  # resource id or name -> time.monotonic()
    lock: threading.Lock = field(default_factory=threading.Lock)

    def configure(self, realism: Realism) -> None:
        with self.lock:
            self.realism, self.launched = realism, {}

    def reset(self) -> None:
        with self.lock:
            self.realism, self.launched, self.born = self.default, {}, {}

    def note_birth(self, key: str) -> None:
        with self.lock:
            self.born[key] = time.monotonic()

    def younger_than(self, key: str, seconds: float) -> bool:
        with self.lock:
            born = self.born.get(key)
        return born is not None and time.monotonic() - born < seconds

    def grant(
        self, zone: str, instance_type: str, market: str, wanted: int, minimum: int
    ) -> tuple[int, CapacityRule | None]:
        """How many of `wanted` instances the pool launches (0 below `minimum`), and the rule that
        limited it (None when none did)."""
        now = time.time()
        with self.lock:
            for index, rule in enumerate(self.realism.capacity):
                if not rule.matches(zone, instance_type, market, now):
                    continue
                left = max(0, rule.available - self.launched.get(index, 0))
                granted = min(wanted, left)
                if granted < minimum:
                    granted = 0
                self.launched[index] = self.launched.get(index, 0) + granted
                return granted, (rule if granted < wanted else None)
        return wanted, None


STATE = ServerState()
_installed = False


def install(realism: Realism = Realism()) -> None:
    """Patch moto in this process (once: the realism patches and moto_speed's two caches) and put `realism` in
    force, also after every reset of moto."""
    global _installed
    STATE.default = realism
    STATE.configure(realism)
    if not _installed:
        patch(STATE)
        moto_speed.install()
        _installed = True


_MARKET_KEYS = (("spot", "SpotTargetCapacity"), ("on-demand", "OnDemandTargetCapacity"))


def patch(state: ServerState) -> None:
    """Wrap moto's methods (once per process) so that they follow `state`."""
    _wrap(InstanceBackend, "describe_instances", lambda original: _listing_lags(original, state))
    _wrap(FleetsBackend, "describe_fleets", lambda original: _hidden_instant_fleets(original, state))
    _wrap(FleetsBackend, "describe_fleets", lambda original: _forgotten_fleets(original, state))
    _wrap(Fleets, "delete_fleets", lambda original: _forgotten_fleets_not_deleted(original, state))
    for name in ("describe_instances", "get_reservations_by_instance_ids", "terminate_instances"):
        _wrap(InstanceBackend, name, lambda original: _forgotten_instances(original, state))
    for name in ("describe_instances", "terminate_instances"):
        _wrap(InstanceResponse, name, lambda original: _by_id_lag(original, state))
    _wrap(FleetsBackend, "create_fleet", lambda original: _capacity_schedule(original, state))
    _wrap(Fleets, "create_fleet", _fleet_errors_answered)
    _wrap(SecurityGroups, "create_security_group", lambda original: _born(original, state, "GroupId"))
    _wrap(SecurityGroups, "authorize_security_group_ingress", lambda original: _group_lag(original, state))
    _wrap(IAMBackend, "create_instance_profile", lambda original: _profile_born(original, state))
    for name in ("associate_iam_instance_profile", "replace_iam_instance_profile_association"):
        _wrap(IamInstanceProfiles, name, lambda original: _profile_lag(original, state))
    _wrap(DomainDispatcherApplication, "__call__", lambda original: _control_endpoint(original, state))
    _wrap(MotoAPIBackend, "reset", lambda original: _resets_too(original, state))
    _wrap(SimpleSystemManagerBackend, "get_parameter", lambda original: _public_parameters(original, state))


def _wrap(cls: type, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    setattr(cls, name, make(getattr(cls, name)))


def _resets_too(original: Callable[..., Any], state: ServerState) -> Callable[..., Any]:
    def reset(self: Any) -> None:
        original(self)
        state.reset()

    return reset


# eventual consistency


def _listing_lags(original: Callable[..., Any], state: ServerState) -> Callable[..., Any]:
    """DescribeInstances without ids (moto's only caller of this method) leaves out young instances."""

    def describe_instances(self: Any, filters: Any = None) -> list[Reservation]:
        reservations = original(self, filters)
        lag = state.realism.listing_lag_s
        if not lag:
            return reservations
        born_before = utcnow() - timedelta(seconds=lag)
        shown = []
        for reservation in reservations:
            visible = [i for i in reservation.instances if i.launch_time <= born_before]
            if visible:
                trimmed = copy.copy(reservation)
                trimmed.instances = visible
                shown.append(trimmed)
        return shown

    return describe_instances


def _by_id_lag(original: Callable[..., Any], state: ServerState) -> Callable[..., Any]:
    """A request naming instances launched less than by_id_lag_s ago answers InvalidInstanceID.NotFound."""

    def call(self: Any) -> Any:
        lag = state.realism.by_id_lag_s
        if lag:
            born_after = utcnow() - timedelta(seconds=lag)
            for instance_id in self._get_param("InstanceIds", []):
                try:
                    young = self.ec2_backend.get_instance(instance_id).launch_time > born_after
                except EC2ClientError:
                    continue  # unknown anyway: moto answers it
                if young:
                    raise InvalidInstanceIdError(instance_id)
        return original(self)

    return call


def _hidden_instant_fleets(original: Callable[..., Any], state: ServerState) -> Callable[..., Any]:
    def describe_fleets(self: Any, fleet_ids: list[str] | None) -> list[Any]:
        fleets = original(self, fleet_ids)
        if fleet_ids or not state.realism.hide_instant_fleets:
            return fleets
        return [f for f in fleets if f.fleet_type != "instant"]

    return describe_fleets


# what AWS forgets


def _forget(state: ServerState, key: str, ended: bool, after_s: float | None) -> bool:
    """Whether what `key` names, ended or not, is to be forgotten now: `after_s` past the first time it was
    seen ended (an end is noted when seen: moto keeps no time of it)."""
    if after_s is None or not ended:
        return False
    with state.lock:
        first_seen = state.born.setdefault(f"ended:{key}", time.monotonic())
    return time.monotonic() - first_seen >= after_s


def _fleet_ended(fleet: Any) -> bool:
    instances = [r.instance for r in fleet.spot_requests] + [r["instance"] for r in fleet.on_demand_instances]
    return str(fleet.state).startswith("deleted") or all(i.state == "terminated" for i in instances)


def _forget_fleets(backend: Any, state: ServerState) -> None:
    after_s = state.realism.forget_fleets_after_s
    for fleet_id, fleet in list(backend.fleets.items()):
        if fleet.fleet_type == "instant" and _forget(state, fleet_id, _fleet_ended(fleet), after_s):
            del backend.fleets[fleet_id]


def _forgotten_fleets(original: Callable[..., Any], state: ServerState) -> Callable[..., Any]:
    def describe_fleets(self: Any, fleet_ids: list[str] | None) -> list[Any]:
        _forget_fleets(self, state)
        unknown = [f for f in fleet_ids or () if f not in self.fleets]
        if unknown:
            raise EC2ClientError("InvalidFleetId.NotFound", f"The fleet ID '{unknown[0]}' does not exist")
        return original(self, fleet_ids)

    return describe_fleets


def _forgotten_fleets_not_deleted(original: Callable[..., Any], state: ServerState) -> Callable[..., Any]:
    def delete_fleets(self: Any) -> Any:
        _forget_fleets(self.ec2_backend, state)
        asked = self._get_param("FleetIds", [])
        known = [f for f in asked if f in self.ec2_backend.fleets]
        fleets = self.ec2_backend.delete_fleets(known, self._get_bool_param("TerminateInstances"))
        missing = [f for f in asked if f not in known]
        return ActionResult(
            {
                "SuccessfulFleetDeletions": [
                    {"CurrentFleetState": f.state, "PreviousFleetState": "active", "FleetId": f.id} for f in fleets
                ],
                "UnsuccessfulFleetDeletions": [
                    {
                        "Error": {"Code": "fleetIdDoesNotExist", "Message": f"The fleet ID '{f}' does not exist"},
                        "FleetId": f,
                    }
                    for f in missing
                ],
            }
        )

    return delete_fleets


def _forgotten_instances(original: Callable[..., Any], state: ServerState) -> Callable[..., Any]:
    """Before moto reads its instances, those terminated long enough ago are gone from its reservations."""

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        after_s = state.realism.forget_terminated_after_s
        if after_s is not None:
            for reservation_id, reservation in list(self.reservations.items()):
                reservation.instances = [
                    i for i in reservation.instances if not _forget(state, i.id, i.state == "terminated", after_s)
                ]
                if not reservation.instances:
                    del self.reservations[reservation_id]
        return original(self, *args, **kwargs)

    return call


def _born(original: Callable[..., Any], state: ServerState, id_key: str) -> Callable[..., Any]:
    def create(self: Any) -> Any:
        answer = original(self)
        state.note_birth(answer.result[id_key])
        return answer

    return create


def _group_lag(original: Callable[..., Any], state: ServerState) -> Callable[..., Any]:
    def authorize_security_group_ingress(self: Any) -> Any:
        group_id = self._get_param("GroupId")
        if state.younger_than(group_id, state.realism.group_lag_s):
            raise EC2ClientError("InvalidGroup.NotFound", f"The security group '{group_id}' does not exist")
        return original(self)

    return authorize_security_group_ingress


def _profile_born(original: Callable[..., Any], state: ServerState) -> Callable[..., Any]:
    def create_instance_profile(self: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        profile = original(self, name, *args, **kwargs)
        state.note_birth(f"instance-profile/{name}")
        return profile

    return create_instance_profile


def _profile_lag(original: Callable[..., Any], state: ServerState) -> Callable[..., Any]:
    def associate(self: Any) -> Any:
        name = self._get_param("IamInstanceProfile.Name") or str(self._get_param("IamInstanceProfile.Arn", ""))
        name = name.rsplit("/", 1)[-1]
        if state.younger_than(f"instance-profile/{name}", state.realism.profile_lag_s):
            raise EC2ClientError(
                "InvalidParameterValue",
                f"Value ({name}) for parameter iamInstanceProfile.name is invalid. Invalid IAM Instance Profile name",
            )
        return original(self)

    return associate


def _public_parameters(original: Callable[..., Any], state: ServerState) -> Callable[..., Any]:
    """GetParameter knows AWS's public parameters that the settings list (moto has none of them)."""

    def get_parameter(self: Any, name: str) -> Any:
        found = original(self, name)
        value = state.realism.public_parameters.get(name)
        if found is not None or value is None:
            return found
        return Parameter(
            account_id=self.account_id,
            name=name,
            value=value,
            parameter_type="String",
            description=None,
            allowed_pattern=None,
            keyid=None,
            last_modified_date=utcnow(),
            version=1,
            data_type="aws:ec2:image",
        )

    return get_parameter


# capacity


def _capacity_schedule(original: Callable[..., Any], state: ServerState) -> Callable[..., Any]:
    """CreateFleet launches what the capacity schedule grants per market; what it refuses becomes Errors[]
    on the fleet (answered by `_fleet_errors_answered`). DescribeFleets still shows the target asked for."""

    def create_fleet(
        self: Any,
        on_demand_options: Any,
        spot_options: Any,
        target_capacity_specification: Any,
        launch_template_configs: Any,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        asked = dict(target_capacity_specification or {})
        config = (launch_template_configs or [{}])[0]
        override = dict((config.get("Overrides") or [{}])[0])
        zone = override.get("AvailabilityZone") or _subnet_zone(self, override.get("SubnetId"))
        instance_type = override.get("InstanceType", "")
        granted, errors = dict(asked), []
        for market, key in _MARKET_KEYS:
            wanted = int(asked.get(key) or 0)
            options = on_demand_options if market == "on-demand" else spot_options
            minimum = int((options or {}).get("MinTargetCapacity") or 0)
            got, rule = state.grant(zone, instance_type, market, wanted, minimum) if wanted else (0, None)
            granted[key] = got
            if rule is not None:
                errors.append(
                    {
                        "LaunchTemplateAndOverrides": {
                            "LaunchTemplateSpecification": config.get("LaunchTemplateSpecification", {}),
                            "Overrides": override,
                        },
                        "Lifecycle": market,
                        "ErrorCode": rule.error_code,
                        "ErrorMessage": rule.error_message(zone, instance_type),
                    }
                )
        granted["TotalTargetCapacity"] = int(granted.get("SpotTargetCapacity") or 0) + int(
            granted.get("OnDemandTargetCapacity") or 0
        )
        fleet = original(self, on_demand_options, spot_options, granted, launch_template_configs, *args, **kwargs)
        fleet.target_capacity_specification = asked
        fleet.realism_errors = errors
        return fleet

    return create_fleet


def _subnet_zone(backend: Any, subnet_id: str | None) -> str:
    try:
        return backend.get_subnet(subnet_id).availability_zone if subnet_id else ""
    except EC2ClientError:
        return ""


def _fleet_errors_answered(original: Callable[..., Any]) -> Callable[..., Any]:
    def create_fleet(self: Any) -> Any:
        answer = original(self)
        fleet = self.ec2_backend.get_fleet(answer.result["FleetId"])
        answer.result["Errors"] = getattr(fleet, "realism_errors", [])
        return answer

    return create_fleet


# the control endpoint


def _control_endpoint(original: Callable[..., Any], state: ServerState) -> Callable[..., Any]:
    """GET/PUT CONTROL_PATH: the settings; POST CONTROL_PATH/reclaim: end an instance as EC2 does; GET
    CONTROL_PATH/inventory?regions=A,B: the instances there (realism.InventoryRow). Every
    other request gets IAM's say first (realism_iam: DryRun, refused actions)."""

    def call(self: Any, environ: dict[str, Any], start_response: Any) -> Any:
        path = environ.get("PATH_INFO", "")
        if not path.startswith(CONTROL_PATH):
            iam = iam_answer(environ, state.realism)
            return iam(environ, start_response) if iam else original(self, environ, start_response)
        method = environ.get("REQUEST_METHOD", "GET")
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length).decode() if length else ""
        try:
            if path == CONTROL_PATH and method == "GET":
                answer = state.realism.to_json()
            elif path == CONTROL_PATH and method == "PUT":
                state.configure(Realism.from_json(body))
                answer = state.realism.to_json()
            elif path == f"{CONTROL_PATH}/reclaim" and method == "POST":
                answer = _reclaim(json.loads(body))
            elif path == f"{CONTROL_PATH}/inventory" and method == "GET":
                answer = _inventory(parse_qs(environ.get("QUERY_STRING", "")).get("regions", [""])[0].split(","))
            else:
                return _reply(start_response, "404 Not Found", f"no {method} {path}")
        except (ValueError, TypeError, KeyError) as exc:
            return _reply(start_response, "400 Bad Request", str(exc))
        return _reply(start_response, "200 OK", answer)

    return call


def _reclaim(request: dict[str, Any]) -> str:
    """Terminate the instance and give it the StateReason EC2 gives what it ends itself."""
    code = str(request["state_reason"])
    for account_id in list(ec2_backends.keys()):
        try:
            instance = ec2_backends[account_id][request["region"]].get_instance(request["instance_id"])
        except EC2ClientError:
            continue
        instance.terminate()
        instance.state_reason = StateReason(f"{code}: {STATE_MESSAGES.get(code, code)}", code)
        instance._reason = ""
        return json.dumps({"instance_id": instance.id, "state_reason": code})
    raise KeyError(f"no instance {request['instance_id']} in {request['region']}")


def _inventory(regions: list[str]) -> str:
    """Every instance of every account in `regions`, straight from moto's backends."""
    rows = []
    for account_id in list(ec2_backends.keys()):
        for region in filter(None, regions):
            for instance in ec2_backends[account_id][region].all_instances():
                row = InventoryRow(
                    instance_id=instance.id,
                    region=region,
                    state=instance._state.name,
                    private_ip=instance.private_ip,
                    instance_type=instance.instance_type,
                    availability_zone=instance.placement.zone or "",
                    spot=instance.lifecycle == "spot",
                    image_id=instance.image_id or "",
                )
                rows.append(asdict(row))
    return json.dumps(rows)


def _reply(start_response: Any, status: str, text: str) -> list[bytes]:
    data = text.encode()
    start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
    return [data]
