"""The controller's decisions, as pure functions: what an attempt's end means and what comes next.

training.control.controller runs attempts (mpirun over SSH), watches them and acts; every rule it acts on is
here, where it can be read in one place and tested without SSH, mpirun or a cloud
(tests/training/test_attempts.py). The rules:

- An attempt ends COMPLETED (mpirun exit 0 and trainer 0 said "completed"), INTERRUPTED (the user or
  `deepvm cancel` stopped it; this wins over anything the ranks said), STOPPED (mpirun exit 0 after a
  clean stop: a notice or a fold-in asked the trainers to flush and leave) or FAILED (anything else: a
  node died, mpirun aborted, the stall watch killed it).
- COMPLETED finishes the job; INTERRUPTED stops it (resumable) or cancels it (final).
- Otherwise the job relaunches. An attempt that made no progress (no step past the one it started from)
  and was not a clean stop counts as a failure in a row (`Failures`); progress, or a clean stop, ends the
  row. The job gives up when a failure in the row is the same as the one before it (ScriptError.same_as:
  the same last lines of stderr and exit code, from whichever rank; training.control.scripterror), since a
  script that fails identically at once will fail so again and each try bills the whole cluster for a
  launch; a different failure (a node lost, a hang, another error) is retried, up to max_failures in a
  row (a job that crashes at start in ever new ways would loop forever). A FAILED attempt first probes
  the nodes and replaces the dead; a STOPPED one relaunches at once. A failure after which a node was
  found dead is no evidence against the script (a node that froze before the first step hangs the job as
  a script would): the next one is not compared with it (`Failures.nodes_lost`), only counted.
- A replacement node is folded in (the running attempt is asked to stop cleanly and relaunched with it)
  only once the attempt has trained a step and no recovery is in flight: stopping an attempt that is
  still starting wastes its start, and one recovery at a time keeps the accounting of lost steps exact.
- What is bought, where and when, is the recovery ladder's (provisioning/ladder, fed by
  training.control.market): asked after any trouble (a notice, a failed attempt, a notice found before a
  launch), at every node ready or refused, and at the times it names.
- A rebalance recommendation alone keeps its node training: its trainers flush a checkpoint at their next
  step and go on (training.node.checkpointing), the ladder is not asked for it; only an
  interruption notice takes a node out (`leaves_the_job`). Why not replace the node and retire it, as
  EC2 Auto Scaling's Capacity Rebalancing does: AWS says a recommendation means *elevated* risk, that it
  may come with the interruption notice or never be followed by one, and that the point of acting on it
  is moving to Spot capacity "not at an elevated risk of interruption"
  (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/rebalance-recommendations.html); Capacity
  Rebalancing wants a group of several instance types and zones, so that the replacement comes from
  capacity that is not at risk
  (https://docs.aws.amazon.com/autoscaling/ec2/userguide/ec2-auto-scaling-capacity-rebalancing.html), while
  the ladder buys a replacement like the plan first, in its type and zone: the very pool that is at risk.
  Replacing would cost a relaunch and a second node's bill for the hours the recommendation is a false
  alarm, to save what an interruption costs deepvm anyway (a flush, no step lost, a relaunch on the
  survivors). aws-node-termination-handler by default ignores recommendations (enableRebalanceMonitoring:
  false) and when asked only cordons the node, keeping what runs on it
  (https://github.com/aws/aws-node-termination-handler, config/helm/aws-node-termination-handler/README.md);
  keeping the node and checkpointing early is the same choice for a job that cannot move its ranks.
- With no holder left, the job can only continue from checkpoints in S3 (level l3).
- `deepvm cancel` stops the job as Ctrl-C does (a checkpoint, then leave) or, with --now, at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from training.shared.events import EndStatus, NoticeKind
from training.shared.progress import Outcome

if TYPE_CHECKING:
    from training.control.scripterror import ScriptError


class CancelMode(str, Enum):
    """How `deepvm cancel` asked a managed job to stop; the head's cancel file holds the value."""

    CHECKPOINT = "checkpoint"  # as Ctrl-C: the trainers flush a checkpoint of their current step, then leave
    NOW = "now"  # at once, without a last checkpoint: mpirun is killed

    @classmethod
    def requested(cls, text: str) -> CancelMode:
        """The mode the cancel file's `text` asks for: anything but "now" is a stop after a checkpoint."""
        return cls.NOW if text.strip() == cls.NOW.value else cls.CHECKPOINT

    def __str__(self) -> str:
        return self.value


class Action(str, Enum):
    FINISH = "finish"  # fetch the outputs; the job is done
    CANCEL = "cancel"  # `deepvm cancel`: final
    STOP = "stop"  # the user stopped it (Ctrl-C with --controller local): resumable
    GIVE_UP = "give-up"  # too many failures in a row without progress
    RECOVER = "recover"  # probe the nodes, drop and replace the dead, relaunch from the newest checkpoint
    RELAUNCH = "relaunch"  # relaunch at once (after a clean stop: notice, fold-in, restart)


@dataclass(frozen=True)
class Failures:
    """The attempts that failed in a row without progress: how many, and the last one's cause."""

    count: int = 0
    last: ScriptError | None = None  # None: none yet (or its cause was not read, or a node was found dead)

    def nodes_lost(self) -> Failures:
        """The row once the last failure's probe found a node dead: the relaunch runs on other nodes, so a
        failure alike is no repeat of the script's (it still counts towards max_failures)."""
        return Failures(self.count)


@dataclass(frozen=True)
class Decision:
    action: Action
    failures: Failures  # the row after this attempt (this one included when it failed without progress)
    repeated: bool = False  # GIVE_UP because this failure is the same as the one before it


def classify(returncode: int, end_status: EndStatus | None, user_stopped: bool) -> Outcome:
    """What an attempt's end means. `end_status` is what trainer 0 reported (None if nothing)."""
    if returncode == 0 and end_status is EndStatus.COMPLETED:
        return Outcome.COMPLETED
    if user_stopped:
        return Outcome.INTERRUPTED
    if returncode == 0 and end_status is EndStatus.STOPPED:
        return Outcome.STOPPED
    return Outcome.FAILED


def progressed(first_step: int, last_step: int) -> bool:
    """Whether the attempt trained at least one step past the one it started from."""
    return last_step > first_step >= 0


def decide(
    outcome: Outcome,
    made_progress: bool,
    failures: Failures,
    max_failures: int,
    cancelling: bool,
    error: ScriptError | None = None,
) -> Decision:
    """What to do after an attempt ended; `failures`: the row before it; `error`: its cause, when it failed."""
    if outcome is Outcome.COMPLETED:
        return Decision(Action.FINISH, Failures())
    if outcome is Outcome.INTERRUPTED:
        return Decision(Action.CANCEL if cancelling else Action.STOP, failures)
    if made_progress or outcome is Outcome.STOPPED:
        return Decision(Action.RECOVER if outcome is Outcome.FAILED else Action.RELAUNCH, Failures())
    repeated = error is not None and error.same_as(failures.last)
    row = Failures(failures.count + 1, error)
    if repeated or row.count >= max_failures:
        return Decision(Action.GIVE_UP, row, repeated)
    return Decision(Action.RECOVER, row)


def fold_in_now(first_step: int, last_step: int, recovery_in_flight: bool) -> bool:
    """Whether a ready replacement should stop the running attempt now (else: at its next step)."""
    return progressed(first_step, last_step) and not recovery_in_flight


def leaves_the_job(kind: NoticeKind) -> bool:
    """Whether a Spot notice of `kind` takes its node out of the job: an interruption notice does, a rebalance
    recommendation alone does not (see the rules above)."""
    return NoticeKind(kind) is NoticeKind.INTERRUPTION
