"""Capacity-series JSON, the format of Can't Be Late's AWS V100 measurements, as a `Trace`.

    {"metadata": {"gap_seconds": 300}, "data": [16, 16, 12, 0, ...]}

`data[i]` is how many instances of a standing Spot request were running at sample i, one sample every
`gap_seconds`; 0 means no capacity was available (not missing data). The simulator needs the share of
the request, so the request size is the share's denominator:
- the shipped files' requests are known (16 or 4 instances, from the folder they were published in);
- a user's file may say it as `metadata.request`; otherwise the most instances ever running is taken
  (the request was at least that; a series that never reached its request reads as fuller than it was).
"""

from __future__ import annotations

import math
from typing import Any

from provisioning.core.errors import InputError
from provisioning.core.jsonfile import parse_json_bytes
from simulation.trace import CapacitySeries, Trace, TraceKind
from simulation.traces.errors import TraceError


def parse_capacity_bytes(raw: bytes, where: str, source: str, request: int | None = None) -> Trace:
    """A capacity series from the bytes of a JSON file (not JSON: a TraceError too)."""
    try:
        document = parse_json_bytes(raw, where, "capacity trace")
    except InputError as exc:
        raise TraceError(str(exc)) from None
    return parse_capacity(document, where, source, request)


def parse_capacity(document: Any, where: str, source: str, request: int | None = None) -> Trace:
    """A capacity series from the parsed JSON; TraceError naming the field otherwise."""
    if not isinstance(document, dict):
        raise TraceError(f"{where}: a capacity trace must be a JSON object with 'metadata' and 'data'")
    metadata = document.get("metadata")
    if not isinstance(metadata, dict):
        raise TraceError(f"{where}: missing object 'metadata' (with gap_seconds, the sampling interval)")
    gap = metadata.get("gap_seconds")
    if isinstance(gap, bool) or not isinstance(gap, (int, float)) or not math.isfinite(gap) or gap <= 0:
        raise TraceError(f"{where}: metadata.gap_seconds must be a positive number of seconds, not {gap!r}")
    data = document.get("data")
    if not isinstance(data, list) or not data:
        raise TraceError(f"{where}: 'data' must be a non-empty list of instance counts")
    counts = [_count(value, f"{where}: data[{i}]") for i, value in enumerate(data)]
    if request is None:
        request = _request(metadata, where, counts)
    over = next((i for i, c in enumerate(counts) if c > request), None)
    if over is not None:
        raise TraceError(f"{where}: data[{over}] = {counts[over]} is more than the request of {request} instances")
    series = CapacitySeries(step_h=gap / 3600.0, shares=tuple(c / request for c in counts), request=request)
    never = sum(1 for c in counts if c == 0) / len(counts)
    return Trace(
        name=where,
        kind=TraceKind.CAPACITY,
        source=source,
        capacity=series,
        notes=(
            f"{len(counts)} samples every {gap:g} s ({series.horizon_h:.1f} h) of a request for {request} "
            f"instances; no capacity at all {never:.0%} of the time",
        ),
    )


def _count(value: Any, where: str) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value < 0
        or value != int(value)
    ):
        raise TraceError(f"{where} must be a whole number of instances >= 0, not {value!r}")
    return int(value)


def _request(metadata: dict[str, Any], where: str, counts: list[int]) -> int:
    if "request" in metadata:
        request = _count(metadata["request"], f"{where}: metadata.request")
        if request < 1:
            raise TraceError(f"{where}: metadata.request must be at least 1 instance, not {request}")
        return request
    most = max(counts)
    if most == 0:
        raise TraceError(
            f"{where}: every count in 'data' is 0 and metadata.request is not given: "
            "the request size is unknown (say it as metadata.request)"
        )
    return most
