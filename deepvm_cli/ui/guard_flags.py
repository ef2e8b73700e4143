"""`deepvm train`'s money-guard flags, checked before anything is looked up or launched: --down-when-done (or the
config file's down_when_done), --idle, --max-duration, --notify / --notify-cmd (signed with the config file's
notify_secret). Each mistake is one InputError line (exit code 2). The head enforces them
(training/shared/guard.py says where); `--controller local` has no head controller, so asking it for any of
them is refused with why, and the config file's down_when_done does not apply to it.
"""

from __future__ import annotations

from dataclasses import dataclass

from deepvm_cli.ui import console
from deepvm_cli.ui.user_config import Defaults
from provisioning.core.errors import InputError
from training.shared.guard import JobGuard, check_notify


@dataclass(frozen=True)
class GuardFlags:
    """The flags as given (None: not given)."""

    down_when_done: bool | None = None
    idle_minutes: float | None = None
    max_duration_hours: float | None = None
    notify: str | None = None
    notify_cmd: str | None = None

    @property
    def asked(self) -> bool:
        """Whether any of them was given on the command line."""
        return any(v is not None and v is not False for v in vars(self).values())


def job_guard(flags: GuardFlags, controller: str, defaults: Defaults) -> tuple[JobGuard, str]:
    """The guard the head is to keep, and the secret its hook signs with ("" for none)."""
    if controller == "local":
        if flags.asked:
            raise InputError(
                "--down-when-done, --idle, --max-duration and --notify are kept by the job's controller "
                "on the cluster's head, which --controller local does not run (its controller is this "
                "process, and a laptop that sleeps cannot take a cluster down): train with "
                "--controller head"
            )
        return JobGuard(), ""
    secret = defaults.config.notify_secret if flags.notify else None
    notify = check_notify(flags.notify, flags.notify_cmd, secret)
    down = flags.down_when_done
    if down is None:
        down = bool(defaults.fill(None, "down_when_done"))
        if down:
            console.info(f"down_when_done (from {defaults.config.path}): the job's end takes the cluster down")
    guard = JobGuard(
        down_when_done=down, idle_minutes=flags.idle_minutes, max_duration_hours=flags.max_duration_hours, notify=notify
    )
    return guard, secret or ""
