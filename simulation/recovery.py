"""What an interruption costs a deepvm job, and what every simulated policy is asked to do.

The defaults are the ones `deepvm plan --interruptions` uses (provisioning/planner/interruptions.py), so
that both commands count a reclaim alike, and they are deepvm's own figures where deepvm measures them:

- notice -> training again on the survivors: 6.3 s, measured with the controller on the head
  (benchmarks/train_recovery_bench.py, README "Benchmarks"; MEASURED_RELAUNCH_S says when and how). It
  includes DeepCheck's flush to L1 (benchmarks/deepcheck_bench.py: ~0.5 s for a 1 GiB state: 118 ms stall
  + 347 ms L1 stage), so the flush is not counted again. Folding a replacement in is the same planned
  relaunch (flush, relaunch).
- no notice -> training again: ~7 s (the same benchmark's no-notice scenario: mpirun aborts, the
  controller relaunches from the newest complete checkpoint), plus the work since that checkpoint.
- the checkpoint interval is the user's choice; 10 minutes is our default (DeepCheck's stall is a few
  per cent of a synchronous save, so frequent checkpoints are cheap); a loss without notice loses a
  uniform share of it.
- a replacement: 300 s from the loss (or from capacity coming back) to a node that can join, NOT
  measured (the sandbox's hosts boot in seconds): our estimate of AWS's Spot launch, a GPU image's boot,
  and deepvm's push and setup. The on-demand trainers the deadline fallback buys take as long.

A notice comes before every reclaim by default, as AWS gives one (`notice_share` 1.0); the shipped
traces do not record notices. Every figure can be overridden from the command line.
"""

from __future__ import annotations

from dataclasses import dataclass

from provisioning.planner.interruptions import MEASURED_RELAUNCH_S, REPLACEMENT_DELAY_S

SECONDS_PER_HOUR = 3600.0


@dataclass(frozen=True)
class RecoveryModel:
    """Times (seconds) and shares that decide what one interruption costs."""

    notice_share: float = 1.0  # share of reclaims that come with the two-minute notice
    relaunch_s: float = MEASURED_RELAUNCH_S  # notice (or fold-in): flush, relaunch, training again
    restart_s: float = 7.0  # no notice: node gone -> training again from the last checkpoint
    checkpoint_interval_s: float = 600.0  # periodic checkpoints; a loss without notice loses U(0, 1) of one
    replacement_delay_s: float = REPLACEMENT_DELAY_S  # node lost (or capacity back) -> a node ready to join
    # the end of a relaunch, once its nodes are chosen (mpirun and the ranks starting, the first step): what
    # happens before it joins the relaunch, what happens after it waits for it; None: the whole relaunch
    launch_s: float | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.notice_share <= 1.0:
            raise ValueError(f"notice_share must be in [0, 1], got {self.notice_share}")
        for name in ("relaunch_s", "restart_s", "checkpoint_interval_s", "replacement_delay_s"):
            value = getattr(self, name)
            if not 0.0 <= value < float("inf"):
                raise ValueError(f"{name} must be a finite non-negative number, got {value}")
        if self.launch_s is not None and not 0.0 <= self.launch_s < float("inf"):
            raise ValueError(f"launch_s must be a finite non-negative number, got {self.launch_s}")

    @property
    def notice_pause_h(self) -> float:
        """Training stops this long for a notice or a fold-in."""
        return self.relaunch_s / SECONDS_PER_HOUR

    @property
    def launch_h(self) -> float:
        """How long before a relaunch ends its nodes are fixed (see reference.py: one relaunch at a time)."""
        return (self.relaunch_s if self.launch_s is None else self.launch_s) / SECONDS_PER_HOUR

    @property
    def loss_pause_h(self) -> float:
        return self.restart_s / SECONDS_PER_HOUR

    @property
    def checkpoint_interval_h(self) -> float:
        return self.checkpoint_interval_s / SECONDS_PER_HOUR

    @property
    def replacement_delay_h(self) -> float:
        return self.replacement_delay_s / SECONDS_PER_HOUR

    @property
    def fallback_margin_h(self) -> float:
        """How early the deadline fallback acts: the time an on-demand trainer needs to start training
        (bought, booted, folded in), as Can't Be Late keeps the restart overhead in hand."""
        return self.replacement_delay_h + self.notice_pause_h


@dataclass(frozen=True)
class Workload:
    """What every policy is asked to do, on the same random numbers."""

    work_pflop: float  # total training work (1 PFLOP = 1e15 floating-point operations)
    runs: int
    seed: int  # non-negative: numpy's SeedSequence takes it as entropy
    deadline_h: float | None = None
    recovery: RecoveryModel = RecoveryModel()
    max_hours: float = 100_000.0  # a run still going after this much simulated time is an error, not a loop

    def __post_init__(self) -> None:
        if not 0 < self.work_pflop < float("inf"):
            raise ValueError(f"work_pflop must be positive and finite, got {self.work_pflop}")
        if self.runs < 1 or self.seed < 0:
            raise ValueError("runs must be at least 1 and seed non-negative")
        if self.deadline_h is not None and not 0 < self.deadline_h < float("inf"):
            raise ValueError(f"deadline_h must be positive and finite, got {self.deadline_h}")


def relaunch_end(t: float, pause: float, fails: bool, recovery: RecoveryModel) -> float | None:
    """When the relaunch that an event at `t` starts ends (a loss, `fails` when without notice; a node to
    fold in), or None when the coming launch takes the event in: one relaunch at a time, and one under way
    takes in what happens before it launches its nodes (simulation/reference.py's module docstring).
    `pause` is when the relaunch under way (if any) ends."""
    if t < pause - recovery.launch_h:
        return None
    start = t if fails else max(t, pause)
    return start + (recovery.loss_pause_h if fails else recovery.notice_pause_h)
