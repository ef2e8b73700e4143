"""Where a managed job lives on the head node, relative to the login user's home (SSH commands start
there, and so does SFTP):

    deepvm/managed/                     DEEPVM_HOME of the head's controller: state.db (the cluster as the
                                        head knows it, jobs), clusters/NAME/ (the internal key, host key)
    deepvm/managed/jobs/JOB_ID/job.json     the HeadJob record the client wrote
    deepvm/managed/jobs/JOB_ID/job/         the job directory (the YAML and what sits beside it)
    deepvm/managed/jobs/JOB_ID/log.jsonl    the job's log: one LogRecord per line, appended and flushed
    deepvm/managed/jobs/JOB_ID/out/         outputs fetched from trainer 0 when the job completes
    deepvm/managed/jobs/JOB_ID/result.json  the TrainResult of a completed job
    deepvm/managed/jobs/JOB_ID/cancel       written by `deepvm cancel`: "checkpoint" or "now"
    deepvm/managed/jobs/JOB_ID/supervisor.pid, service.pid   the running processes
"""

from __future__ import annotations

from dataclasses import dataclass

MANAGED_HOME = "deepvm/managed"


@dataclass(frozen=True)
class JobFiles:
    """The paths of one managed job, relative to the head's home (or absolute, given `home`)."""

    job_id: str
    home: str = ""  # "" for paths relative to the home directory

    @property
    def managed_home(self) -> str:
        return f"{self.home}/{MANAGED_HOME}" if self.home else MANAGED_HOME

    @property
    def root(self) -> str:
        return f"{self.managed_home}/jobs/{self.job_id}"

    @property
    def record(self) -> str:
        return f"{self.root}/job.json"

    @property
    def job_dir(self) -> str:
        return f"{self.root}/job"

    @property
    def log(self) -> str:
        return f"{self.root}/log.jsonl"

    @property
    def out(self) -> str:
        return f"{self.root}/out"

    @property
    def result(self) -> str:
        return f"{self.root}/result.json"

    @property
    def cancel(self) -> str:
        return f"{self.root}/cancel"

    @property
    def supervisor_pid(self) -> str:
        return f"{self.root}/supervisor.pid"

    @property
    def service_pid(self) -> str:
        return f"{self.root}/service.pid"

    def cluster_dir(self, cluster: str) -> str:
        return f"{self.managed_home}/clusters/{cluster}"
