"""What can go wrong in a simulation that the user can act on: one line each, as every deepvm error."""

from __future__ import annotations

from provisioning.core.errors import InfeasibleError


class SimulationError(InfeasibleError):
    """The plan cannot finish the work on the trace (its Spot capacity never comes back, or too rarely)."""


def check_time(t_next: float, max_hours: float, plan_summary: str) -> None:
    """A run that can never finish (or would take absurdly long) is an error, not an endless loop."""
    if t_next == float("inf"):
        raise SimulationError(f"{plan_summary} can never finish on this trace: no trainer can run again "
                              "(its Spot capacity never returns)")
    if t_next > max_hours:
        raise SimulationError(f"{plan_summary} had not finished after {max_hours:g} simulated hours on this "
                              "trace (Spot capacity for it is too rare)")
