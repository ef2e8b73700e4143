"""The traces shipped as package data (simulation/data/traces, README there), by name.

Each name selects one file, or one section of the GCE file: `gce-k80`, `gce-p100` and `gce-v100` are a
GPU type each and `gce` is all of them; the capacity series are one name per zone and request size.
They are read with importlib.resources, so an installed deepvm finds them wherever it is installed.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources

from simulation.trace import Trace, TraceKind
from simulation.traces.files import parse_trace_bytes

DATA = "data/traces"
GCE_SOURCE = "GCE preemptible GPU lifetimes, Feb 2019 (ICAC'19, cake-lab/transient-deep-learning; Apache-2.0)"
BAMBOO_SOURCE = "AWS Spot cluster events (Bamboo, NSDI'23, uclasystem/bamboo; MIT)"
CAPACITY_SOURCE = (
    "AWS p3.2xlarge Spot capacity of a standing request (Can't Be Late, NSDI'24, via "
    "andylizf/skynomad-artifact; Apache-2.0)"
)


@dataclass(frozen=True)
class ShippedTrace:
    """Where one shipped trace lies and how to read it."""

    name: str
    path: str  # under simulation/data/traces
    kind: TraceKind
    source: str
    sections: tuple[str, ...] | None = None  # lifetimes: the GCE sections it keeps (None: all)
    request: int | None = None  # capacity: the request size the series was measured for


def _catalog() -> tuple[ShippedTrace, ...]:
    gce = "gce-preemptible-gpu-lifetimes-icac19.csv"
    traces = [
        ShippedTrace("gce", gce, TraceKind.LIFETIMES, GCE_SOURCE),
        *(
            ShippedTrace(f"gce-{gpu.lower()}", gce, TraceKind.LIFETIMES, GCE_SOURCE, (gpu,))
            for gpu in ("K80", "P100", "V100")
        ),
        ShippedTrace("aws-g4dn-bamboo", "aws-g4dn-node-events-bamboo.csv", TraceKind.EVENTS, BAMBOO_SOURCE),
        ShippedTrace("aws-p3-bamboo", "aws-p3-node-events-bamboo.csv", TraceKind.EVENTS, BAMBOO_SOURCE),
    ]
    zones = {16: ("us-east-2b", "us-west-2a", "us-west-2c"), 4: ("us-east-1f", "us-east-2a", "us-west-2c")}
    for request, names in zones.items():
        traces.extend(
            ShippedTrace(
                f"aws-v100-{request}-{zone}",
                f"aws-v100-{request}node-capacity/{zone}.json",
                TraceKind.CAPACITY,
                CAPACITY_SOURCE,
                request=request,
            )
            for zone in names
        )
    return tuple(traces)


SHIPPED: dict[str, ShippedTrace] = {t.name: t for t in _catalog()}


@cache
def load_shipped(name: str) -> Trace:
    """The shipped trace `name` (a key of SHIPPED), parsed once per process (a Trace is immutable)."""
    entry = SHIPPED[name]
    raw = resources.files("simulation").joinpath(f"{DATA}/{entry.path}").read_bytes()
    return parse_trace_bytes(raw, name, entry.source, entry.kind, entry.sections, entry.request)
