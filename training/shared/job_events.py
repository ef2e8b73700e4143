"""A job's entries in its cluster's event log.

Every job of a cluster writes to the cluster's one event log (`deepvm status CLUSTER` shows it whole), so
the controller names its job at the start of each message: "JOB_ID: message". The run summary counts the
job's own events (interruptions, replacements) by that name, and the job's watch screen, which says the
job's id once in its title, shows them without it. The convention lives here alone.
"""

from __future__ import annotations

_SEP = ": "


def job_message(job_id: str, message: str) -> str:
    """The event log's text for the job's `message`."""
    return f"{job_id}{_SEP}{message}"


def job_text(job_id: str, message: str) -> str | None:
    """The job's own text of an event log `message`, or None when the message is not the job's."""
    prefix = f"{job_id}{_SEP}"
    return message[len(prefix) :] if message.startswith(prefix) else None
