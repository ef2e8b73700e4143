"""The job file's `stall:` section: how long a running job may be silent before it counts as hung.

`deepvm train --stall-timeout S` and `--startup-grace S` take their key's place, one by one; a script that
never calls ctx.step (`run.calls_step: false`) gets none of the step limits unless they are given, and
`silence` is the limit such a script may ask for instead (any job may: it is off unless given). The controller
applies the result by one rule wherever it runs, on the head or on the user's machine
(training/control/stall.py, which says what counts as progress and why).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_STARTUP_GRACE_S = 300.0  # from a launch to its first step: see training/control/stall.py
MIN_STALL_S, MAX_STALL_S = 1.0, 86_400.0  # a second to a day, as the flags allow

# strict: `silence: true` is no limit of 1 s, and a quoted "30" no number of seconds
StallSeconds = Annotated[float, Field(ge=MIN_STALL_S, le=MAX_STALL_S, strict=True)]


class StallSpec(BaseModel):
    """`stall: {timeout: 120, startup_grace: 600, silence: 1800}`; every key may be left out."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # as every job spec model

    # no progress after the first step; None: adaptive (10x the slowest recent gap), none for calls_step: false
    timeout: StallSeconds | None = None
    # from a launch to its first step; None: DEFAULT_STARTUP_GRACE_S, none for calls_step: false
    startup_grace: StallSeconds | None = None
    silence: StallSeconds | None = None  # since any rank's last output line; None: no limit
