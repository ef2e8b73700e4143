"""A scaling profile: how one job speeds up on 1..N nodes of one instance type, measured by
`deepvm profile`, and the curve fitted to it. `deepvm plan --profile` plans with it (and
`deepvm simulate` can: both call `load_profile` and `with_profiles`).

DeepVM's curves were fitted for ResNet-18 on CIFAR-10; another model scales differently (DeepVM's own
measurements give S(32) = 12.5, 5.25 and 2.88 on three types for the same model), and a plan made with
the wrong curve buys nodes that do not speed the job up. A profile replaces the type's curve in every
objective, but only as far as it was measured: a logistic curve fitted on few nodes extrapolates
badly (DeepVM's g3s data fitted on n <= 8 predict S(32) = 5.8 against a measured 12.5), so the planner
holds at most floor(NODE_BOUND_FACTOR x the most nodes measured) nodes of the type
(ScalingParams.max_nodes). Within that bound the planner counts n nodes as S(n) nodes' worth, the speed-up
measured, not through DeepVM's K(n), which is 1 below the inflection point whatever was measured there
(ScalingModel.SPEEDUP; provisioning/scaling/model.py).

The file is a strictly typed, versioned JSON document (provisioning/core/strictdoc.py): every number finite
and within its bounds (a and c positive: the planner's K(n) needs a rising curve), the sizes distinct and
in order, the fit's largest size the largest measured, unknown keys refused. Reading it also checks it
against the catalog in use: its instance type must be a GPU type there. Any problem is one InputError
line naming the file and the field.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from statistics import fmean
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, model_validator
from pydantic_core import PydanticCustomError

from provisioning.catalog.model import Catalog, ScalingModel, ScalingParams
from provisioning.core.atomicfile import write_text_atomic
from provisioning.core.errors import InputError
from provisioning.core.jsonfile import MIB, read_json_file
from provisioning.core.strictdoc import (
    Amount,
    DocumentError,
    Finite,
    Name,
    NodeCount,
    Positive,
    Strict,
    integer_in,
    text,
    validate,
)

FORMAT = "deepvm-profile"
VERSION = 1
NODE_BOUND_FACTOR = 1.5  # the planner follows a profile's curve up to this times the most nodes measured
MAX_PROFILE_BYTES = MIB
MAX_SIZES = 64
MAX_REPEATS = 100

Steps = Annotated[int, BeforeValidator(integer_in(1, 1_000_000))]
WarmupSteps = Annotated[int, BeforeValidator(integer_in(0, 1_000_000))]
Repeats = Annotated[int, BeforeValidator(integer_in(1, MAX_REPEATS))]
Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


def _timestamp(value: object) -> str:
    if not isinstance(value, str) or len(value) > 40:
        raise PydanticCustomError("timestamp", "must be an ISO 8601 time, e.g. 2026-11-24T10:00:00+00:00")
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise PydanticCustomError("timestamp", "must be an ISO 8601 time, e.g. 2026-11-24T10:00:00+00:00") from None
    return value


class JobIdentity(Strict):
    """Which job was measured: its name and a hash of its validated spec (the same job, however written)."""

    name: Annotated[str, text(200)]
    spec_sha256: Sha256
    file: Annotated[str, text(4096)]  # the job file as given to `deepvm profile`


class MeasuredSize(Strict):
    """One node count: global samples/s of each repeat after the warm-up, and the speed-up over one node."""

    nodes: NodeCount
    samples_per_s: Annotated[list[Positive], Field(min_length=1, max_length=MAX_REPEATS)]
    speedup: Positive  # mean samples/s here over the mean on one node


class Parameter(Strict):
    """A fitted parameter and one standard deviation (null: the points cannot tell, see scaling_fit.py)."""

    value: Finite
    sd: Amount | None


class PositiveParameter(Parameter):
    value: Positive


class FittedCurve(Strict):
    """S(n) = c / (1 + exp(-a (n - b))) by least squares (provisioning/scaling/fit.py)."""

    a: PositiveParameter
    b: Parameter
    c: PositiveParameter
    rmse: Amount  # of the curve on every repeat's speed-up
    max_nodes_measured: NodeCount


class Profile(Strict):
    """The profile document; see the module docstring."""

    format: Literal["deepvm-profile"]
    version: Literal[1]
    instance_type: Name
    job: JobIdentity
    measured_at: Annotated[str, BeforeValidator(_timestamp)]  # ISO 8601, UTC
    cluster: Name
    warmup_steps: WarmupSteps  # steps run and not measured, at each size
    steps: Steps  # steps in each measured repeat
    repeats: Repeats
    sizes: Annotated[list[MeasuredSize], Field(min_length=2, max_length=MAX_SIZES)]
    fit: FittedCurve
    warnings: Annotated[list[Annotated[str, text(500)]], Field(max_length=32, default_factory=list)]

    @model_validator(mode="after")
    def _consistent(self) -> Profile:
        counts = [s.nodes for s in self.sizes]
        if counts != sorted(set(counts)):
            raise PydanticCustomError("sizes", "sizes must list distinct node counts in increasing order")
        if counts[0] != 1:
            raise PydanticCustomError("sizes", "sizes must start at 1 node: speed-ups are over one node")
        if self.fit.max_nodes_measured != counts[-1]:
            raise PydanticCustomError(
                "fit", "fit.max_nodes_measured must be the largest size measured ({n})", {"n": counts[-1]}
            )
        return self

    @property
    def node_bound(self) -> int:
        """The most nodes of the type a plan may hold with this curve."""
        return math.floor(NODE_BOUND_FACTOR * self.fit.max_nodes_measured)

    def scaling(self) -> ScalingParams:
        """The curve, as the planner uses it."""
        fit = self.fit
        return ScalingParams(
            a=fit.a.value,
            b=fit.b.value,
            c=fit.c.value,
            measured=True,
            max_nodes=self.node_bound,
            model=ScalingModel.SPEEDUP,
        )


@dataclass(frozen=True)
class Measured:
    """What `deepvm profile` measured at one node count."""

    nodes: int
    samples_per_s: tuple[float, ...]  # global samples/s, one per repeat


@dataclass(frozen=True)
class ProfileSetup:
    """Where and how a profile was measured."""

    instance_type: str
    job: JobIdentity
    cluster: str
    warmup_steps: int
    steps: int
    repeats: int
    measured_at: str  # ISO 8601, UTC


def make_profile(setup: ProfileSetup, measured: Sequence[Measured]) -> Profile:
    """The profile of these measurements: speed-ups over the one-node mean, and the curve fitted to every
    repeat's speed-up (scipy is imported here, by scaling_fit)."""
    from provisioning.scaling.fit import fit_speedup

    one = [m for m in measured if m.nodes == 1]
    if not one:
        raise InputError("a profile needs a measurement on 1 node: speed-ups are over one node")
    base = fmean(one[0].samples_per_s)
    fit = fit_speedup([(m.nodes, rate / base) for m in measured for rate in m.samples_per_s])
    return Profile(
        format=FORMAT,
        version=VERSION,
        instance_type=setup.instance_type,
        job=setup.job,
        measured_at=setup.measured_at,
        cluster=setup.cluster,
        warmup_steps=setup.warmup_steps,
        steps=setup.steps,
        repeats=setup.repeats,
        sizes=[
            MeasuredSize(nodes=m.nodes, samples_per_s=list(m.samples_per_s), speedup=fmean(m.samples_per_s) / base)
            for m in measured
        ],
        fit=FittedCurve(
            a=PositiveParameter(value=fit.a.value, sd=fit.a.sd),
            b=Parameter(value=fit.b.value, sd=fit.b.sd),
            c=PositiveParameter(value=fit.c.value, sd=fit.c.sd),
            rmse=fit.rmse,
            max_nodes_measured=fit.max_nodes,
        ),
        warnings=list(fit.warnings),
    )


def save_profile(profile: Profile, path: Path) -> None:
    """Write the profile as JSON (a temporary file, then a rename: never half a profile)."""
    try:
        write_text_atomic(path, profile.model_dump_json(indent=2) + "\n")
    except OSError as exc:
        raise InputError(f"cannot write the profile to {path}: {exc.strerror or exc}") from None


def load_profile(path: Path, catalog: Catalog) -> Profile:
    """The profile in `path`, validated strictly and against `catalog`; InputError (one line) otherwise."""
    data = read_json_file(path, "profile", MAX_PROFILE_BYTES)
    try:
        profile = validate(Profile, data)
    except DocumentError as exc:
        raise InputError(f"{path}: {exc}") from None
    itype = catalog.types.get(profile.instance_type)
    if itype is None:
        close = difflib.get_close_matches(profile.instance_type, list(catalog.types), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise InputError(
            f"{path}: instance_type: unknown instance type {profile.instance_type!r} in {catalog.source}{hint}"
        )
    if not itype.is_gpu:
        raise InputError(
            f"{path}: instance_type: {itype.name} is not a GPU type in {catalog.source}; "
            "only trainers' scaling is planned"
        )
    return profile


def with_profiles(catalog: Catalog, profiles: Sequence[Profile]) -> Catalog:
    """`catalog` with each profile's curve (and node bound) as its instance type's scaling; one profile
    per type. The profiles must have been loaded against this catalog (load_profile)."""
    types = dict(catalog.types)
    seen: set[str] = set()
    for profile in profiles:
        name = profile.instance_type
        if name in seen:
            raise InputError(f"two profiles for {name}: plan with one profile per instance type")
        seen.add(name)
        if name not in types:
            raise InputError(f"the profile of {name} is for a type that catalog {catalog.source} does not have")
        types[name] = dataclasses.replace(types[name], scaling=profile.scaling())
    return dataclasses.replace(catalog, types=types, warnings=list(catalog.warnings))
