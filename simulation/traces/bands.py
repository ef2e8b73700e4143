"""Synthetic traces from an interruption rate: AWS's interruption-frequency bands, or a rate per hour.

AWS Spot Advisor publishes, per instance type and region, a band of "frequency of interruption": the
share of Spot instances AWS reclaimed during the trailing month (<5%, 5-10%, 10-15%, 15-20%, >20%).

Our assumption, to turn a band into a hazard: a node is reclaimed with a constant hazard lambda (no
memory: a node that has run a week is as likely to go in the next hour as a fresh one), and the band's
share is the probability p that a node running for a whole month (HOURS_PER_MONTH = 730 h) is reclaimed
in it, so 1 - p = exp(-730 lambda), i.e.

    lambda = -ln(1 - p) / 730      with p the band's midpoint: 2.5%, 7.5%, 12.5%, 17.5%, and 25% for >20%

(>20% has no upper end; 25% is the midpoint of 20-30%). The resulting mean time to failure is long: a
node of a >20% type runs about 2,540 h between reclaims on average, one of a <5% type about 28,800 h.

`interruption_bands.json` (package data) records a band per GPU type and region of the catalog: a dated
snapshot of our estimates, not AWS's figures (its notes say so and where to refresh it from). It is
validated when read; a type it does not list gets its `fallback_band`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources
from typing import Any

from provisioning.core.errors import InputError
from provisioning.core.jsonfile import parse_json_bytes
from simulation.trace import Trace, TraceKind
from simulation.traces.errors import TraceError

HOURS_PER_MONTH = 730.0
BAND_MIDPOINTS: dict[str, float] = {"<5%": 0.025, "5-10%": 0.075, "10-15%": 0.125, "15-20%": 0.175, ">20%": 0.25}
SNAPSHOT_RESOURCE = "data/interruption_bands.json"
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_INSTANCE_TYPE = re.compile(r"[a-z][a-z0-9-]*\.[a-z0-9-]+")
_REGION = re.compile(r"[a-z]{2}(-[a-z]+)+-\d")


def band_hazard(band: str) -> float:
    """Reclaims per node-hour for a band label (see the module docstring); TraceError if unknown."""
    p = BAND_MIDPOINTS[_band_label(band)]
    return -math.log1p(-p) / HOURS_PER_MONTH


def band_trace(band: str) -> Trace:
    """The synthetic trace of a band ("<5%" ... ">20%"), or of a plain per-hour rate such as "0.02"."""
    rate = _per_hour(band)
    if rate is not None:
        return rate_trace(rate)
    label = _band_label(band)
    hazard = band_hazard(label)
    return Trace(
        name=f"band:{label}",
        kind=TraceKind.HAZARD,
        source=f"AWS interruption-frequency band {label}/month, read as {BAND_MIDPOINTS[label]:.1%} of nodes "
        f"reclaimed per month: {hazard:.3g}/h",
        hazard_per_h=hazard,
    )


def rate_trace(per_hour: float) -> Trace:
    """The synthetic trace of a constant hazard: `per_hour` reclaims per node-hour (0: never)."""
    if isinstance(per_hour, bool) or not math.isfinite(per_hour) or per_hour < 0:
        raise TraceError(
            f"an interruption rate must be a finite number of reclaims per node-hour >= 0, not {per_hour!r}"
        )
    return Trace(
        name=f"rate:{per_hour:g}/h",
        kind=TraceKind.HAZARD,
        source=f"a constant interruption rate of {per_hour:g} per node-hour",
        hazard_per_h=float(per_hour),
    )


def is_rate_or_band(text: str) -> bool:
    """Whether `text` is written as a band or a number (then it is never a trace name or a file)."""
    stripped = text.strip()
    band_like = stripped.endswith("%") or stripped.startswith(("<", ">")) or _normal_band(text) in BAND_MIDPOINTS
    return band_like or _per_hour_text(text)


@dataclass(frozen=True)
class BandSnapshot:
    """The recorded bands per region and instance type, validated."""

    as_of: str
    source: str  # "estimate" (ours) or "spot-advisor" (downloaded from AWS)
    fallback_band: str
    bands: dict[str, dict[str, str]]  # region -> instance type -> band label
    notes: tuple[str, ...]

    def band_for(self, instance_type: str, region: str) -> str | None:
        return self.bands.get(region, {}).get(instance_type)


def default_trace_for(instance_type: str, region: str) -> Trace:
    """The synthetic trace of a type's recorded band in a region, or of the fallback band if none."""
    snapshot = band_snapshot()
    band = snapshot.band_for(instance_type, region)
    recorded = band is not None
    trace = band_trace(band if band is not None else snapshot.fallback_band)
    where = f"{instance_type} in {region}"
    note = (
        f"{where}: band {band} from the {snapshot.source} snapshot of {snapshot.as_of}"
        if recorded
        else f"{where}: no recorded band; assumed {snapshot.fallback_band} (the fallback: a type we know nothing "
        "about is assumed to be reclaimed as often as the worst band)"
    )
    return replace(trace, notes=(note,))


@cache
def band_snapshot() -> BandSnapshot:
    """The shipped snapshot, parsed and checked once per process."""
    raw = resources.files("simulation").joinpath(SNAPSHOT_RESOURCE).read_bytes()
    try:
        document = parse_json_bytes(raw, "interruption_bands.json", "band snapshot")
    except InputError as exc:
        raise TraceError(str(exc)) from None
    return parse_band_snapshot(document, "interruption_bands.json")


def parse_band_snapshot(document: Any, where: str) -> BandSnapshot:
    """A BandSnapshot from its JSON form; TraceError naming the field that is wrong."""
    if not isinstance(document, dict):
        raise TraceError(f"{where}: must be a JSON object")
    as_of = document.get("as_of")
    if not isinstance(as_of, str) or not _DATE.fullmatch(as_of):
        raise TraceError(f"{where}: as_of must be a date YYYY-MM-DD, not {as_of!r}")
    source = document.get("source")
    if source not in ("estimate", "spot-advisor"):
        raise TraceError(f"{where}: source must be 'estimate' or 'spot-advisor', not {source!r}")
    fallback = _known_band(document.get("fallback_band"), f"{where}: fallback_band")
    raw_bands = document.get("bands")
    if not isinstance(raw_bands, dict) or not raw_bands:
        raise TraceError(f"{where}: bands must be an object of regions")
    bands: dict[str, dict[str, str]] = {}
    for region, types in raw_bands.items():
        if not _REGION.fullmatch(region):
            raise TraceError(f"{where}: bands: {region!r} is not a region name")
        if not isinstance(types, dict):
            raise TraceError(f"{where}: bands.{region} must be an object of instance types")
        for itype, band in types.items():
            if not _INSTANCE_TYPE.fullmatch(itype):
                raise TraceError(f"{where}: bands.{region}: {itype!r} is not an instance type name")
            bands.setdefault(region, {})[itype] = _known_band(band, f"{where}: bands.{region}.{itype}")
    notes = document.get("notes", [])
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        raise TraceError(f"{where}: notes must be a list of strings")
    return BandSnapshot(as_of, source, fallback, bands, tuple(notes))


def _known_band(value: Any, where: str) -> str:
    if not isinstance(value, str) or value not in BAND_MIDPOINTS:
        raise TraceError(f"{where} must be one of {', '.join(BAND_MIDPOINTS)}, not {value!r}")
    return value


def _normal_band(text: str) -> str:
    """ "5-10", " 5-10 % " and "5-10%" are the same band."""
    compact = text.replace(" ", "")
    return compact if compact.endswith("%") else compact + "%"


def _band_label(band: str) -> str:
    label = _normal_band(band)
    if label not in BAND_MIDPOINTS:
        raise TraceError(
            f"unknown interruption band {band!r}; known: {', '.join(BAND_MIDPOINTS)} "
            "(per month), or a rate per node-hour such as 0.02"
        )
    return label


def _per_hour_text(text: str) -> bool:
    return re.fullmatch(r"\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*", text) is not None


def _per_hour(text: str) -> float | None:
    """The number `text` is written as (a rate per node-hour), or None when it is not a number."""
    return float(text) if _per_hour_text(text) else None
