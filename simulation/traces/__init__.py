"""Every source of Spot interruptions, normalised into `simulation.trace.Trace`.

Public API (what `deepvm simulate` and `deepvm plan --interruptions` call):

    known_traces() -> list[str]              the shipped trace names (simulation/data/traces, README there)
    resolve_trace(spec) -> Trace             a shipped name, or a file in any of the three formats
    band_trace(band) -> Trace                "<5%", "5-10%", "10-15%", "15-20%", ">20%", or a rate "0.02"
    rate_trace(per_hour) -> Trace            a constant hazard per node-hour
    default_trace_for(type, region) -> Trace the type's recorded band (interruption_bands.json) or the fallback
    interruptions_trace(spec) -> Trace       a band, a rate, a shipped name or a file, whichever `spec` is
    band_hazard(band) -> float               the per-hour hazard of a band (bands.py says how)
    TraceError                               every problem, one line (an InputError: exit code 2)

One module per source format (lifetimes_csv, events_csv, capacity_json); `files` tells them apart by
content; `shipped` names the package data; `bands` turns interruption rates into traces.
"""

from simulation.traces.bands import band_hazard, band_snapshot, band_trace, default_trace_for, rate_trace
from simulation.traces.errors import TraceError
from simulation.traces.files import MAX_TRACE_BYTES, read_trace_file
from simulation.traces.resolve import interruptions_trace, known_traces, resolve_trace

__all__ = [
    "MAX_TRACE_BYTES",
    "TraceError",
    "band_hazard",
    "band_snapshot",
    "band_trace",
    "default_trace_for",
    "interruptions_trace",
    "known_traces",
    "rate_trace",
    "read_trace_file",
    "resolve_trace",
]
