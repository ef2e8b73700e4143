"""Lifetimes CSV, the format of ICAC'19's GCE preemptible GPU measurements, as a `Trace`.

    K80,,                               a section: one GPU type (optional in a user's file)
    VM name,Start,Terminate             a header (optional; ICAC'19's V100 section has none)
    a-us-east1-c-0,2/18/19 23:39,2/19/19 23:44
    Previous experiments,,              everything from here on is ignored

Times are ICAC'19's `M/D/YY H:MM` (2/18/19 23:39) or ISO 8601 (2019-02-18T23:39, 2019-02-18 23:39:05,
2019-02-18T23:39:05+01:00; seconds and an offset optional): a time with an offset is taken in UTC, one
without as written, so give both times of a row alike. A lifetime of CENSOR_AT_H or more is censored,
not a preemption: GCE stops every preemptible VM after 24 hours, so those VMs were still alive when the
cap ended the observation (the recorded end comes a few minutes after the 24 h, or before it when the VM
was started late). The format is GCE's, so the cap applies to every file read as lifetimes.

Below `Previous experiments` ICAC'19 has 2018 runs whose times are clock times of one day, some corrupt:
only the February 2019 sections above it are used.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone

from simulation.trace import Trace, TraceKind
from simulation.traces.csv_rows import RowProgress, csv_rows
from simulation.traces.errors import TraceError

CENSOR_AT_H = 23.9  # GCE's 24 h cap on preemptible VMs, less the minute resolution of the records
TIME_FORMAT = "%m/%d/%y %H:%M"
ISO_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}")  # a date and a time at least: no bare date
STOP_MARKER = "previous experiments"
HEADER = "vm name"


def parse_lifetimes(
    text: str, where: str, source: str, sections: tuple[str, ...] | None = None, progress: RowProgress | None = None
) -> Trace:
    """Every VM of the file (or of `sections` only) as a lifetime; TraceError naming the line otherwise."""
    lifetimes: list[float] = []
    censored: list[bool] = []
    section: str | None = None
    seen_sections: list[str] = []
    for number, fields in csv_rows(text, where, progress):
        first = fields[0]
        if first.lower() == STOP_MARKER:
            break
        if first.lower() == HEADER:
            continue
        if not any(fields[1:]):  # "K80,,": the start of a section
            section = first
            seen_sections.append(first)
            continue
        if sections is not None and section not in sections:
            continue
        hours = _lifetime_h(fields, where, number)
        lifetimes.append(hours)
        censored.append(hours >= CENSOR_AT_H)
    missing = [s for s in sections or () if s not in seen_sections]
    if missing:
        raise TraceError(f"{where}: no section {missing[0]!r} (sections: {', '.join(seen_sections) or 'none'})")
    if not lifetimes:
        raise TraceError(f"{where}: no lifetimes in the file (expected rows of VM name,Start,Terminate)")
    preempted = censored.count(False)
    return Trace(
        name=where,
        kind=TraceKind.LIFETIMES,
        source=source,
        lifetimes_h=tuple(lifetimes),
        censored=tuple(censored),
        notes=(
            f"{len(lifetimes)} VMs, {preempted} preempted; lifetimes of {CENSOR_AT_H:g} h or more are "
            "censored (GCE stops preemptible VMs after 24 h)",
        ),
    )


def _lifetime_h(fields: list[str], where: str, number: int) -> float:
    if len(fields) != 3:
        raise TraceError(f"{where}:{number}: expected 3 fields (VM name,Start,Terminate), got {len(fields)}")
    start = _time(fields[1], "Start", where, number)
    end = _time(fields[2], "Terminate", where, number)
    if end < start:
        raise TraceError(f"{where}:{number}: Terminate {fields[2]!r} is before Start {fields[1]!r}")
    return (end - start).total_seconds() / 3600.0


def _time(value: str, field: str, where: str, number: int) -> datetime:
    try:
        return datetime.strptime(value, TIME_FORMAT)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(value) if ISO_TIME.match(value) else None
    except ValueError:
        moment = None
    if moment is None:
        raise TraceError(
            f"{where}:{number}: {field} {value!r} is not a time of the form M/D/YY H:MM or ISO 8601 "
            "(YYYY-MM-DDTHH:MM[:SS][+HH:MM])"
        )
    return moment if moment.tzinfo is None else moment.astimezone(timezone.utc).replace(tzinfo=None)
