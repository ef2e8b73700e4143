"""The one error every trace problem becomes: a line naming the trace (file or name), the line and field."""

from __future__ import annotations

from provisioning.core.errors import InputError


class TraceError(InputError):
    """A trace that cannot be used: unknown name or band, unreadable or malformed file, empty trace.

    An InputError, so the CLI prints it as one line and exits with 2.
    """
