"""A user's trace file (`--trace FILE`): read bounded, its format told from its content, then parsed.

The extension says nothing (a capacity series saved as .txt is still one), so the content decides:
- it starts with `{` (or `[`) after blank space: a capacity-series JSON;
- its first row is `TIME,add|remove,NODE` (or a header starting with `time`): an events CSV;
- its first row is a section (`K80,,`), the header `VM name,...`, or `NAME,TIME,...` (M/D/YY H:MM or ISO 8601):
  a lifetimes CSV.
Anything else is refused with the three shapes deepvm reads. Only regular files up to MAX_TRACE_BYTES are
read (the shipped traces are at most 20 kB; /dev/zero or a FIFO would never end).
"""

from __future__ import annotations

import re
from pathlib import Path

from provisioning.core.errors import InputError
from provisioning.core.inputfile import MIB, read_user_bytes
from simulation.trace import Trace, TraceKind
from simulation.traces.capacity_json import parse_capacity_bytes
from simulation.traces.csv_rows import RowProgress, csv_rows
from simulation.traces.errors import TraceError
from simulation.traces.events_csv import parse_events
from simulation.traces.lifetimes_csv import ISO_TIME, parse_lifetimes

MAX_TRACE_BYTES = 50 * MIB
SHAPES = (
    "a lifetimes CSV (VM name,Start,Terminate), an events CSV (time_ms,add|remove,node) or a capacity "
    'JSON ({"metadata": {"gap_seconds": 300}, "data": [count, ...]})'
)
_EVENT_ROW = re.compile(r"\s*\d+\s*,\s*(add|remove)\s*,", re.IGNORECASE)
_TIME = re.compile(r"\d{1,2}/\d{1,2}/\d{2} \d{1,2}:\d{2}")


def read_trace_file(path: Path, progress: RowProgress | None = None) -> Trace:
    """The trace in `path`, in whichever of the three formats it is written; `progress` hears how far a CSV's
    parse got."""
    try:
        raw = read_user_bytes(path, "trace file", MAX_TRACE_BYTES)
    except InputError as exc:
        raise TraceError(str(exc)) from None
    return parse_trace_bytes(raw, str(path), f"file {path}", progress=progress)


def parse_trace_bytes(
    raw: bytes,
    where: str,
    source: str,
    kind: TraceKind | None = None,
    sections: tuple[str, ...] | None = None,
    request: int | None = None,
    progress: RowProgress | None = None,
) -> Trace:
    """Parse `raw` in format `kind` (detected from the content when None); `where` names it in errors.
    `sections` (lifetimes) and `request` (capacity) are what a shipped trace's catalog entry says."""
    text = "" if kind is TraceKind.CAPACITY else _text(raw, where)  # a capacity series is parsed as JSON bytes
    kind = kind or detect_format(text, where)
    if kind is TraceKind.CAPACITY:
        return parse_capacity_bytes(raw, where, source, request=request)
    if kind is TraceKind.EVENTS:
        return parse_events(text, where, source, progress)
    return parse_lifetimes(text, where, source, sections=sections, progress=progress)


def detect_format(text: str, where: str) -> TraceKind:
    """Which of the three formats `text` is written in, from its first non-blank character or row."""
    if not text.strip():
        raise TraceError(f"{where} is empty; expected {SHAPES}")
    if text.lstrip().startswith(("{", "[")):
        return TraceKind.CAPACITY
    first_line = next(line for line in text.splitlines() if line.strip())
    if _EVENT_ROW.match(first_line):
        return TraceKind.EVENTS
    _, fields = next(csv_rows(first_line, where), (0, [""]))
    if fields[0].lower().startswith("time") and len(fields) == 3:
        return TraceKind.EVENTS
    is_section = not any(fields[1:])
    timed = len(fields) == 3 and (_TIME.fullmatch(fields[1]) or ISO_TIME.match(fields[1]))
    if fields[0].lower() == "vm name" or is_section or timed:
        return TraceKind.LIFETIMES
    raise TraceError(f"{where}: not a trace deepvm reads (first row {first_line[:60]!r}); expected {SHAPES}")


def _text(raw: bytes, where: str) -> str:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise TraceError(f"{where} is not UTF-8 text; expected {SHAPES}") from None
