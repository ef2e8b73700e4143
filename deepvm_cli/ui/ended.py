"""The first thing a command that looks at clusters does: finish the teardown of clusters whose head took them
down (or whose head died), and say so (provisioning/clusters/ended.py); the jobs whose end took them down
are brought up to date here from what their heads left in S3, and those a head that died was running are
said and recorded failed."""

from __future__ import annotations

from deepvm_cli.ui import console


def finish_ended_clusters() -> None:
    """Finish what heads left to this machine, one line per cluster; a failure is a warning, never the command's
    end (`deepvm down NAME` finishes it too)."""
    from provisioning.clusters.ended import finish_ended
    from provisioning.core.errors import DeepvmError, InputError

    try:
        finished = finish_ended()
    except InputError:  # deepvm's home or state file is unusable: the command meets it itself, and says it once
        return
    except DeepvmError as exc:
        console.warning(
            f"could not finish the teardown of a cluster its head took down ({exc}); `deepvm down NAME` does"
        )
        return
    for done in finished:
        for line in done.lines():
            console.info(line)
        if done.end is None:
            _lost_with_head(done.cluster)
        elif done.end.job_id:
            _remember_job(done.end.job_id)


def _lost_with_head(cluster: str) -> None:
    """The jobs this machine last heard running on a cluster whose head died: each said, with what went with it,
    and recorded failed (nothing will ever say otherwise: their controller and log were on the head)."""
    import time
    from dataclasses import replace

    from training.shared.jobstore import JobStatus, JobStore, reached

    jobs = JobStore()
    for row in jobs.for_cluster(cluster):
        if row.status.final:
            continue
        console.info(
            f"job {row.job_id} was running on it ({reached(row.step, row.total_steps)}, "
            f"{row.saved(time.time())}, when last heard): it failed with its head, and its checkpoints and "
            "outputs on the cluster's disks are gone"
        )
        jobs.put(replace(row, status=JobStatus.FAILED, message=f"its head died (cluster {cluster} torn down)"))


def _remember_job(job_id: str) -> None:
    """The job's row here, brought up to date with the summary its head copied to S3."""
    from provisioning.core.errors import DeepvmError
    from training.client.outputs import job_summary
    from training.shared.jobstore import JobStore

    row = JobStore().get(job_id)
    if row is not None:
        try:
            job_summary(row)
        except DeepvmError as exc:
            console.warning(f"job {job_id}: its summary in S3 could not be read ({exc})")
