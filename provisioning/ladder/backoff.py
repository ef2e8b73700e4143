"""How long a pool that refused capacity is left alone: exponential backoff, capped.

AWS's advice for InsufficientInstanceCapacity is to wait and try again, another type or another zone
meanwhile (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/troubleshooting-launch.html#troubleshooting-launch-capacity),
and its general rule for retries is exponential backoff
(https://docs.aws.amazon.com/general/latest/gr/api-retries.html). The n-th refusal in a row keeps the pool
cooling for min(first * 2^(n-1), cap): 15 s, 30 s, 1 min, 2 min, 4 min, then every 5 min (the capacity
traces' own resolution), so an empty pool is asked about a dozen times an hour, never in a tight loop.
No jitter: one controller asks for one job, so there is no herd to spread, and a decision must be a
function of its situation alone.
"""

from __future__ import annotations

from provisioning.ladder.situation import Pool, Refusals, Situation, Timing


def backoff_s(timing: Timing, in_row: int) -> float:
    """The wait after the `in_row`-th refusal in a row (1 for the first)."""
    if in_row < 1:
        return 0.0
    return min(timing.backoff_s * 2.0 ** min(in_row - 1, 62), timing.backoff_cap_s)


def cooling_until(timing: Timing, refusals: Refusals | None) -> float | None:
    """When the pool may be asked again (None: it has not refused)."""
    if refusals is None:
        return None
    return refusals.last_s + backoff_s(timing, refusals.in_row)


def cooling(s: Situation, pool: Pool) -> bool:
    """Whether the pool refused lately and its backoff has not run out."""
    until = cooling_until(s.timing, s.refusals_of.get(pool))
    return until is not None and s.now_s < until
