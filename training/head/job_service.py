"""The managed job's controller on the head node: `python -m training.head.job_service JOB_ROOT`.

It runs training.control.controller for one job, as `deepvm train --controller local` would on the user's
machine, with three differences that make it independent of that machine:

- its state store is the head's own (DEEPVM_HOME is deepvm/managed on the head), seeded from the
  cluster record in job.json the first time; replacements it buys are recorded there;
- its cloud client has no keys: boto3 finds the credentials of the head's instance profile in the
  instance metadata, as on any EC2 instance (the sandbox's metadata endpoint serves them too);
- it reaches the other nodes at their private addresses with the cluster-internal key.

Its exit code tells the supervisor what to do: 0 the job is over (completed, cancelled, or stopped at its
budget or time limit), FINAL the job cannot go on (it failed for good, or the request is wrong), HANDED_OVER
the job runs on under a new head (training/control/handover.py: this head terminated itself, or tried to),
anything else (a crash, a signal) restart it — a restarted service finds its job in the head's store and
resumes it from the newest checkpoint.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from provisioning.cloud.keys import ensure_cluster_keys, write_known_hosts
from provisioning.cloud.types import CloudKind, NodeRecord
from provisioning.clusters.handle import RUNNING, Cluster
from provisioning.clusters.noderecords import private_only
from provisioning.clusters.store import ClusterRow, ClusterStatus, Store
from provisioning.core.atomicfile import write_text_atomic
from provisioning.core.errors import DeepvmError, InputError
from provisioning.core.home import deepvm_home
from training.control.controller import train
from training.control.handover import HandedOver
from training.control.jobclock import JobLimited, JobTimers
from training.control.jobrecord import TrainRequest
from training.control.stops import StoppedAtLimit, TrainingCancelled, TrainingFailed
from training.head.handover_run import head_handover
from training.head.joblog import JobLog
from training.head.log_mirror import LogMirror
from training.head.notify import Notifier
from training.head.resume import download_checkpoint, seed_row
from training.shared.jobspec import load_job_spec
from training.shared.jobstore import ControllerBusy, JobStatus
from training.shared.layout import HANDED_OVER_MARK
from training.shared.records import HeadJob

FINAL = 3  # the job failed for good: the supervisor does not restart it
HANDED_OVER = 4  # control passed to a new head: nothing ends here, nothing restarts


def seed_cluster(cluster: ClusterRow, nodes: tuple[NodeRecord, ...]) -> Store:
    """The head's store, with the cluster recorded the first time (see seed_store)."""
    store = Store()
    if store.cluster(cluster.name) is None:
        store.put_cluster(replace(cluster, cloud=CloudKind.AWS, status=ClusterStatus.UP))
        store.put_nodes(cluster.name, [private_only(n) for n in nodes])
    return store


def seed_store(cluster: ClusterRow, nodes: tuple[NodeRecord, ...]) -> None:
    """Give the head's store the cluster the first time a job of it (or its idle watch) runs here; afterwards
    the head's own record (with the replacements it bought) is the newer one and is kept. The head talks to
    the cloud's API itself (real or the sandbox's), hence cloud "aws"."""
    store = seed_cluster(cluster, nodes)
    keys = ensure_cluster_keys(cluster.name)  # written by the client: the internal key, the pinned host keys
    running = [n for n in store.nodes(cluster.name) if n.state == RUNNING]
    write_known_hosts(keys, running)


def timers(job: HeadJob) -> JobTimers:
    """The job's --idle and --max-duration, in seconds, counted from when it was submitted (a restarted
    controller does not give a time limit its hours again)."""
    guard = job.guard
    return JobTimers(
        idle_s=None if guard.idle_minutes is None else guard.idle_minutes * 60,
        max_duration_s=None if guard.max_duration_hours is None else guard.max_duration_hours * 3600,
        started_wall=datetime.fromisoformat(job.submitted_at).timestamp(),
    )


def terminate_self(log: JobLog, cluster: Cluster, me: str, why: str) -> int:
    """This head handed its job to a new head (training/control/handover.py, step 5): it says so in its log and
    terminates itself, last; a failure is said, not fatal (the new head's controller terminates it too)."""
    log.note(f"{why}; this head ({me}) terminates")
    try:
        cluster.retire([me], why)
    except DeepvmError as exc:
        log.note(f"this head could not terminate itself ({exc}); its successor terminates it")
    return HANDED_OVER


def main(argv: list[str]) -> int:
    root = Path(argv[0]).resolve()
    job = HeadJob.from_json((root / "job.json").read_text())
    log = JobLog(root / "log.jsonl")
    (root / "service.pid").write_text(str(os.getpid()))
    notifier = Notifier.for_job(job.guard.notify, root, job.job_id, job.cluster.name, log.note)
    mirror = None
    try:
        if (root / HANDED_OVER_MARK).exists():  # restarted after it handed the job over: never beside the new head
            old, new = (root / HANDED_OVER_MARK).read_text().split()
            return terminate_self(log, Cluster.open_running(job.cluster.name), old, f"control passed to {new}")
        l3 = load_job_spec(root / "job" / job.job_file).checkpoint_plan.l3
        if l3 is not None:
            mirror = LogMirror(l3.url, job.job_id, root, log.note).start()
        seed_store(job.cluster, job.nodes)
        request = TrainRequest(
            job_path=root / "job" / job.job_file,
            cluster=job.cluster.name,
            python=job.python,
            out_dir=root / "out",
            replace_nodes=job.replace_nodes,
            max_failures=job.max_failures,
            stall_timeout_s=job.stall_timeout_s,
            startup_grace_s=job.startup_grace_s,
            job_id=job.job_id,
            node_env=job.node_env,
            cancel_file=root / "cancel",
            inside_cluster=True,
            limits=job.limits,
            market=job.market,
            timers=timers(job),
            resume=job.resume is not None,
            head=job.head,
            handed_from=job.handed_from,
        )
        if job.resume is not None:  # continued from its checkpoint in S3 (`train --resume` on another cluster)
            download_checkpoint(job.resume, job.job_id, Path.home())
            seed_row(job, request, load_job_spec(request.job_path).name)
        cluster = Cluster.open_running(request.cluster)  # NotFoundError (with what to run) unless it is up
        reporter = replace(log.reporter(), event=notifier.controller_event)
        result = train(cluster, request, reporter, head_handover(deepvm_home(), job, cluster))
        write_text_atomic(root / "result.json", result.to_json())
        log.state(JobStatus.COMPLETED, f"completed: step {result.steps}/{result.total_steps}")
        return 0
    except HandedOver as exc:  # the new head runs the job now: this one terminates itself, last
        return terminate_self(log, cluster, exc.successor.old, str(exc))
    except TrainingCancelled as exc:
        log.state(JobStatus.CANCELLED, str(exc))
        return 0
    except StoppedAtLimit as exc:  # stopped with a checkpoint at its budget or --max-duration: not restarted
        log.state(JobStatus.STOPPED, str(exc))
        return 0
    except JobLimited as exc:  # failed at --idle
        log.state(JobStatus.FAILED, str(exc))
        return FINAL
    except (TrainingFailed, InputError, ControllerBusy) as exc:
        log.state(JobStatus.FAILED, str(exc))
        return FINAL
    except BaseException as exc:  # a crash: the supervisor restarts the service, which resumes the job
        log.note(f"controller error: {type(exc).__name__}: {exc}")
        raise
    finally:
        notifier.close()  # the controller's events leave before the supervisor's end of the job
        if mirror is not None:
            mirror.close()
        log.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
