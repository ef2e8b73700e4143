"""Events CSV, the format of Bamboo's AWS Spot cluster logs, as a `Trace` of node lifetimes.

    480000,add,node1          time in ms since the start, what happened, which node
    38520000,remove,node77

An `add` is a node that became available and a `remove` a preemption, so each node's up interval (add
to remove) is one lifetime; a node still up at the last event is censored there (the log ends, the node
does not). A node may come back later under the same name: that is a new interval. An optional first
row naming the columns (`time_ms,event,node`) is skipped.

The trace keeps lifetimes only, no capacity series: the size the cluster asked for is not in the log,
so a share of it would rest on a guess (the most nodes ever alive), and a log of a few hours replayed
around a long job would repeat the same bursts. What this loses is which removals happened together.
"""

from __future__ import annotations

from simulation.trace import Trace, TraceKind
from simulation.traces.csv_rows import RowProgress, csv_rows
from simulation.traces.errors import TraceError

MS_PER_HOUR = 3_600_000
EVENTS = ("add", "remove")
_TIME_DIGITS = 18  # ASCII digits, short enough to be a time


def parse_events(text: str, where: str, source: str, progress: RowProgress | None = None) -> Trace:
    """Up intervals per node from an add/remove log; TraceError naming the line otherwise."""
    up_since: dict[str, int] = {}  # node -> time it was added, while it is up
    lifetimes: list[float] = []
    last = 0
    events = 0
    for number, fields in csv_rows(text, where, progress):
        if events == 0 and fields[0].lower().startswith("time"):
            continue  # the column names
        time_ms, event, node = _event(fields, where, number)
        if time_ms < last:
            raise TraceError(f"{where}:{number}: time_ms {time_ms} is earlier than the previous event ({last})")
        last = time_ms
        events += 1
        if event == "add":
            if node in up_since:
                raise TraceError(f"{where}:{number}: node {node!r} is added again without a remove")
            up_since[node] = time_ms
        else:
            added = up_since.pop(node, None)
            if added is None:
                raise TraceError(f"{where}:{number}: node {node!r} is removed but was never added")
            lifetimes.append((time_ms - added) / MS_PER_HOUR)
    censored = [False] * len(lifetimes)
    if events == 0:
        raise TraceError(f"{where}: no events in the file (expected rows of time_ms,add|remove,node)")
    for added in up_since.values():
        lifetimes.append((last - added) / MS_PER_HOUR)
        censored.append(True)
    return Trace(
        name=where,
        kind=TraceKind.EVENTS,
        source=source,
        lifetimes_h=tuple(lifetimes),
        censored=tuple(censored),
        notes=(
            f"{events} events over {last / MS_PER_HOUR:.1f} h: {len(lifetimes)} node lifetimes, "
            f"{censored.count(False)} ended by a remove, {len(up_since)} still up at the end (censored)",
        ),
    )


def _event(fields: list[str], where: str, number: int) -> tuple[int, str, str]:
    if len(fields) != 3:
        raise TraceError(f"{where}:{number}: expected 3 fields (time_ms,add|remove,node), got {len(fields)}")
    raw_time, event, node = fields
    if not (raw_time.isascii() and raw_time.isdigit() and len(raw_time) <= _TIME_DIGITS):
        raise TraceError(f"{where}:{number}: time_ms {raw_time!r} is not a whole number of milliseconds >= 0")
    if event not in EVENTS:
        event = event.lower()
        if event not in EVENTS:
            raise TraceError(f"{where}:{number}: event {fields[1]!r} is neither add nor remove")
    if not node:
        raise TraceError(f"{where}:{number}: the node name is empty")
    return int(raw_time), event, node
