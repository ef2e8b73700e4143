"""Errors a user can cause or fix. The CLI prints each as one line on stderr and exits with its code."""

from __future__ import annotations


class DeepvmError(Exception):
    """Base of every error the CLI reports without a traceback."""

    exit_code = 1


class StoppedByUser(DeepvmError):
    """What the user asked for happened (Ctrl-C, `deepvm cancel`): said as a plain line, not as an error."""

    exit_code = 130


class InputError(DeepvmError):
    """Bad arguments, files or configuration."""

    exit_code = 2


class InfeasibleError(DeepvmError):
    """No cluster satisfies the constraints (price cap, quotas, deadline)."""

    exit_code = 3


class CloudError(DeepvmError):
    """The cloud refused or failed a request (credentials, capacity, quotas, API errors)."""

    exit_code = 4


class NotFoundError(DeepvmError):
    """A named thing (cluster, plan, node) does not exist."""

    exit_code = 5
