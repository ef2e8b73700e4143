"""What can go wrong in a simulation that the user can act on: one line each, as every deepvm error."""

from __future__ import annotations

from provisioning.core.errors import InfeasibleError


class SimulationError(InfeasibleError):
    """The plan cannot finish the work on the trace (its Spot capacity never comes back, or too rarely)."""


def check_time(t_next: float, max_hours: float, plan_summary: str) -> None:
    """A run that can never finish (or would take absurdly long) is an error, not an endless loop."""
    if t_next == float("inf"):
        raise SimulationError(
            f"{plan_summary} can never finish on this trace: no trainer can run again (its Spot capacity never returns)"
        )
    if t_next > max_hours:
        raise SimulationError(
            f"{plan_summary} had not finished after {max_hours:g} simulated hours on this "
            "trace (Spot capacity for it is too rare)"
        )


MAX_EVENTS = 200_000  # events per run; the shipped traces' worst (Bamboo p3) takes ~3,700
PACE_FROM = 1_000  # events a run makes before its pace is judged


def check_pace(events: int, least_done: float, plan_summary: str) -> None:
    """Refuse, within seconds, a simulation whose slowest run is on course for more than MAX_EVENTS events:
    `events` so far (each iteration is one event of every live run), `least_done` the smallest share of the
    work a live run has done. Nodes that live far shorter than their replacement takes (a trace of ~1 s
    lives) make every run a long string of events and a little work each; at that pace the time limit
    (check_time) comes after hours of computing and gigabytes of drawn lifetimes."""
    if events < PACE_FROM:
        return
    if events >= MAX_EVENTS or least_done * MAX_EVENTS < events:
        raise SimulationError(
            f"{plan_summary} would need more than {MAX_EVENTS:,} interruptions and replacements "
            f"per run on this trace (a run did {least_done:.2%} of the work in {events:,}): its "
            "Spot nodes are lost far faster than they are replaced"
        )
