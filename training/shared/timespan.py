"""How long something ran, in the words a person reads: one rule for the CLI's screens and for the records and
notes the controller writes where deepvm's CLI is not imported (the head)."""

from __future__ import annotations


def duration(seconds: float) -> str:
    """ "1h02m" or "3m07s": how long something ran or has left, at the precision a reader uses."""
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"
