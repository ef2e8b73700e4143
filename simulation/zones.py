"""Which trace drives each zone's Spot capacity: `deepvm simulate --trace [ZONE=]NAME|FILE`, once per zone.

A trace given without a zone is the plan's own zone's (as before zones could be named); one given as
`ZONE=...` is that zone's, and any series may stand for any zone of the plan's region. A policy's Spot
group follows its zone's trace, else the plan's own one, else its type's default (its interruption band).

One clock for all. The series are read as if recorded together from their first sample: sample i of each
is the same moment. They are cut to the shortest, so that they also wrap together (a run that starts near
the end carries on at the start of every series at once). Letting each wrap at its own length instead
would, after the first wrap, put side by side moments that never coexisted, and a policy moving between
zones would be judged on a market that never was; cutting loses the longer series' tails (the shipped
16-node series: 271 h kept of 395 h).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from provisioning.core.errors import InputError
from simulation.trace import CapacitySeries, Trace

TraceFor = Callable[[str, str], Trace]  # (instance type, region) -> the trace its Spot nodes follow
_ZONE = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]*")


@dataclass(frozen=True)
class TraceSpec:
    """One `--trace` as typed: the zone it names (None: the plan's own) and the trace's name or file."""

    zone: str | None
    spec: str


def parse_trace_flag(text: str) -> TraceSpec:
    """`us-east-1a=aws-v100-16-us-east-2b` or a bare name or file (a file whose name holds '=' is taken
    whole when it exists)."""
    zone, sep, rest = text.partition("=")
    if sep and _ZONE.fullmatch(zone.strip()) and not Path(text).expanduser().exists():
        if not rest.strip():
            raise InputError(f"--trace {text}: name a trace or a file after '{zone}='")
        return TraceSpec(zone.strip(), rest.strip())
    return TraceSpec(None, text)


@dataclass(frozen=True)
class ZoneTraces:
    """The traces of a simulation, by zone (module docstring)."""

    own_zone: str  # the plan's zone
    by_zone: tuple[tuple[str, Trace], ...]  # every zone given a trace, the plan's own first when it has one
    default: TraceFor  # a Spot group in a zone without one

    def trace_for(self, instance_type: str, region: str, zone: str) -> Trace:
        given = dict(self.by_zone)
        if zone in given:
            return given[zone]
        if self.own_zone in given:
            return given[self.own_zone]
        return self.default(instance_type, region)

    def zones(self) -> tuple[str, ...]:
        """The zones a policy that moves may use: the plan's own, then those given a trace."""
        return (self.own_zone, *[z for z, _ in self.by_zone if z != self.own_zone])


def zone_traces(
    given: Sequence[tuple[TraceSpec, Trace]], own_zone: str, region: str, region_zones: Sequence[str], default: TraceFor
) -> ZoneTraces:
    """Check the `--trace` flags against the plan's region and put them on one clock (module docstring).
    InputError: a zone not in the region, two traces for one zone."""
    chosen: dict[str, tuple[TraceSpec, Trace]] = {}
    for spec, trace in given:
        zone = own_zone if spec.zone is None else spec.zone
        if zone not in region_zones:
            raise InputError(
                f"--trace {spec.zone}=...: {spec.zone} is not a zone of the plan's region {region} "
                f"(its zones: {', '.join(region_zones)})"
            )
        if zone in chosen:
            first = chosen[zone][0]
            own = " (the plan's own zone)" if first.zone is None or spec.zone is None else ""
            raise InputError(f"two traces for {zone}{own}: {first.spec} and {spec.spec}; give one per zone")
        chosen[zone] = (spec, trace)
    ordered = sorted(chosen.items(), key=lambda item: (item[0] != own_zone, item[0]))
    traces = _one_clock([trace for _, (_, trace) in ordered])
    return ZoneTraces(own_zone, tuple((zone, t) for (zone, _), t in zip(ordered, traces)), default)


def _one_clock(traces: list[Trace]) -> list[Trace]:
    """The capacity series cut to the shortest one's horizon (lifetime traces have no clock)."""
    horizons = [t.capacity.horizon_h for t in traces if t.capacity is not None]
    if len(horizons) < 2:
        return traces
    shortest = min(horizons)
    return [t if t.capacity is None else _cut(t, shortest) for t in traces]


def _cut(trace: Trace, horizon_h: float) -> Trace:
    series = trace.capacity
    assert series is not None
    keep = max(1, round(horizon_h / series.step_h))
    if keep >= len(series.shares):
        return trace
    cut = CapacitySeries(series.step_h, series.shares[:keep], series.request)
    return replace(
        trace,
        capacity=cut,
        notes=(*trace.notes, f"cut to {cut.horizon_h:.1f} h: one clock with the other zones' series"),
    )
