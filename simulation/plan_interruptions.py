"""What `deepvm plan --interruptions SPEC` counts: a Spot pool per instance type, from a band, a rate, a trace
or (`auto`) each type's recorded band.

A trace or a band given on the command line applies to every spot type of the catalog (it says how often
*a* spot node is reclaimed); `auto` looks each type and region up in interruption_bands.json, with its
fallback band for a type it does not list. How a pool's numbers enter the plan: provisioning/planner/
interruptions.py.
"""

from __future__ import annotations

import math

from provisioning.planner.interruptions import Interruptions, RecoveryCosts, SpotPool
from simulation.trace import Trace
from simulation.traces.bands import band_snapshot, band_trace
from simulation.traces.resolve import interruptions_trace

AUTO = "auto"


def plan_interruptions(spec: str, recovery: RecoveryCosts) -> Interruptions:
    """The Interruptions a plan counts for `spec` (a band, a rate, a trace name or file, or "auto")."""
    if spec.strip().lower() == AUTO:
        return _recorded_bands(recovery)
    trace = interruptions_trace(spec)
    return Interruptions(label=_label(trace), spec=spec, default=spot_pool(trace, recovery), recovery=recovery)


def spot_pool(trace: Trace, recovery: RecoveryCosts) -> SpotPool:
    """m and a of a trace (interruptions.py): a capacity series is there its mean share of the time;
    otherwise a slot waits the replacement delay after each reclaim."""
    mttf = trace.mean_lifetime_h()
    if trace.capacity is not None:
        alive = float(sum(trace.capacity.shares) / len(trace.capacity.shares))
    else:
        alive = 1.0 if math.isinf(mttf) else mttf / (mttf + recovery.replacement_delay_h)
    return SpotPool(mttf_h=mttf, alive_share=alive, source=f"{trace.name}: {trace.source}")


def _recorded_bands(recovery: RecoveryCosts) -> Interruptions:
    snapshot = band_snapshot()
    pools = {
        band: spot_pool(band_trace(band), recovery)
        for band in {snapshot.fallback_band} | {b for types in snapshot.bands.values() for b in types.values()}
    }
    per_type = {
        (region, itype): pools[band] for region, types in snapshot.bands.items() for itype, band in types.items()
    }
    return Interruptions(
        label=f"at each type's recorded band ({snapshot.source} of {snapshot.as_of}; {snapshot.fallback_band} where "
        "none is recorded)",
        spec=AUTO,
        default=pools[snapshot.fallback_band],
        recovery=recovery,
        per_type=per_type,
    )


def _label(trace: Trace) -> str:
    """How to finish "counting interruptions ...": "at 10-15%/month", "as in trace gce-v100"."""
    if trace.name.startswith("band:"):
        return f"at {trace.name.removeprefix('band:')}/month"
    if trace.name.startswith("rate:"):
        return f"at {trace.name.removeprefix('rate:').removesuffix('/h')} per node-hour"
    return f"as in trace {trace.name}"
