"""From what a user typed (a trace name, a file, a band or a rate) to a `Trace`."""

from __future__ import annotations

import difflib
import os
from pathlib import Path

from simulation.trace import Trace
from simulation.traces.bands import band_trace, is_rate_or_band
from simulation.traces.csv_rows import RowProgress
from simulation.traces.errors import TraceError
from simulation.traces.files import read_trace_file
from simulation.traces.shipped import SHIPPED, load_shipped


def known_traces() -> list[str]:
    """The names of the shipped traces, sorted (for help texts and "unknown trace" errors)."""
    return sorted(SHIPPED)


def resolve_trace(spec: str, alternatives: str = "a file", progress: RowProgress | None = None) -> Trace:
    """A shipped trace by name, else the trace in the file `spec` (a shipped name wins over a file).

    `alternatives` completes the "unknown trace" error with what else the caller accepts; `progress` hears
    how far a file's parse got."""
    name = spec.strip()
    if name in SHIPPED:
        return load_shipped(name)
    path = Path(spec).expanduser()
    if os.path.lexists(path):
        return read_trace_file(path, progress)
    if os.sep in spec or "/" in spec or path.suffix.lower() in (".csv", ".json", ".txt"):
        raise TraceError(f"trace file not found: {spec}")
    hint = difflib.get_close_matches(name, known_traces(), n=1)
    suggestion = f"; did you mean {hint[0]}?" if hint else ""
    raise TraceError(f"unknown trace {spec!r}{suggestion} (known: {', '.join(known_traces())}; or {alternatives})")


def interruptions_trace(spec: str) -> Trace:
    """A band ("10-15%"), a rate per node-hour ("0.02"), a shipped trace name or a trace file."""
    if not spec.strip():
        raise TraceError("an interruption band, rate, trace name or trace file is needed, got ''")
    if is_rate_or_band(spec):
        return band_trace(spec)
    return resolve_trace(spec, "a file, a band <5%, 5-10%, 10-15%, 15-20%, >20% or a rate per node-hour")
