"""Where a managed job lives on the head node, relative to the login user's home (SSH commands start
there, and so does SFTP):

    deepvm/managed/                     DEEPVM_HOME of the head's controller: state.db (the cluster as the
                                        head knows it, jobs), clusters/NAME/ (the internal key, the nodes'
                                        pinned host keys)
    deepvm/managed/jobs/JOB_ID/job.json     the HeadJob record the client wrote
    deepvm/managed/jobs/JOB_ID/job/         the job directory (the YAML and what sits beside it)
    deepvm/managed/jobs/JOB_ID/log.jsonl    the job's log: one LogRecord per line, appended and flushed
    deepvm/managed/jobs/JOB_ID/out/         outputs fetched from trainer 0 when the job completes
    deepvm/managed/jobs/JOB_ID/result.json  the TrainResult of a completed job
    deepvm/managed/jobs/JOB_ID/cancel       written by `deepvm cancel`: "checkpoint" or "now"
    deepvm/managed/jobs/JOB_ID/supervisor.pid, service.pid   the running processes
    deepvm/managed/jobs/JOB_ID/summary.json the run's summary (training/shared/summary.py), once it is over
    deepvm/managed/jobs/JOB_ID/notify.secret  what the hook's posts are signed with (0600; `train --notify`)
    deepvm/managed/jobs/JOB_ID/end.done     its end is done (training/head/job_end.py): a log's follower stops
    deepvm/managed/jobs/JOB_ID/handed_over  control passed to a new head ("OLD NEW": training/control/handover.py)

The head's programs (training/head: job_service, job_supervisor, query) run in a job's root and name these
files directly; the client reaches them through JobFiles.
"""

from __future__ import annotations

from dataclasses import dataclass

MANAGED_HOME = "deepvm/managed"
END_MARK = "end.done"
WATCH_DIR = f"{MANAGED_HOME}/cluster"  # `up --autodown`'s idle watch: WATCH_RECORD, watch.pid, watch.out
WATCH_RECORD = "watch.json"  # the idle watch's record (records.IdleWatch), in WATCH_DIR
HANDED_OVER_MARK = "handed_over"  # this head handed the job to a new head: it never runs it again


@dataclass(frozen=True)
class JobFiles:
    """The paths of one managed job on the head, relative to the login user's home."""

    job_id: str

    @property
    def root(self) -> str:
        return f"{MANAGED_HOME}/jobs/{self.job_id}"

    @property
    def record(self) -> str:
        return f"{self.root}/job.json"

    @property
    def job_dir(self) -> str:
        return f"{self.root}/job"

    @property
    def out(self) -> str:
        return f"{self.root}/out"

    def cluster_dir(self, cluster: str) -> str:
        return f"{MANAGED_HOME}/clusters/{cluster}"
