"""Errors a user can cause or fix. The CLI prints each as one line on stderr and exits with its code."""

from __future__ import annotations

from collections.abc import Sequence


class DeepvmError(Exception):
    """Base of every error the CLI reports without a traceback."""

    exit_code = 1

    @property
    def lines(self) -> tuple[str, ...]:
        """What the CLI prints, one `deepvm: error:` line each: the message, unless an error lists several."""
        return (str(self),)


class StoppedByUser(DeepvmError):
    """What the user asked for happened (Ctrl-C, `deepvm cancel`): said as a plain line, not as an error."""

    exit_code = 130


class JobFailed(DeepvmError):
    """Work deepvm ran could not finish (training, a profile's launches, fitting its measurements)."""

    exit_code = 6


class InputError(DeepvmError):
    """Bad arguments, files or configuration."""

    exit_code = 2


class InputErrors(InputError):
    """Several independent mistakes in one input, one line each: fixing a file one error per run is tedious."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = tuple(problems)

    @property
    def lines(self) -> tuple[str, ...]:
        return self.problems


class InfeasibleError(DeepvmError):
    """No cluster satisfies the constraints (price cap, quotas, deadline)."""

    exit_code = 3


class CloudError(DeepvmError):
    """The cloud refused or failed a request (credentials, capacity, quotas, API errors)."""

    exit_code = 4


class NotFoundError(DeepvmError):
    """A named thing (cluster, plan, node) does not exist."""

    exit_code = 5
