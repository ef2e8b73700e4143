"""What several of the sandbox's processes share, kept here so that none of its modules imports another
only for a constant: the fixed credentials of the local endpoint and EC2's time format."""

from __future__ import annotations

from datetime import datetime, timezone

CREDENTIALS = ("sandbox", "sandbox")  # never the user's real keys: the endpoint is local


def iso_time(ts: datetime) -> str:
    """A UTC timestamp as EC2's metadata writes it."""
    return ts.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
