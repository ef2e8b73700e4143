"""The first thing a command that looks at clusters does: finish the teardown of clusters whose head took them
down (or whose head died), and say so (provisioning/clusters/ended.py); the jobs whose end took them down
are brought up to date here from what their heads left in S3."""

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
        console.warning(f"could not finish the teardown of a cluster its head took down ({exc}); "
                        "`deepvm down NAME` does")  # fmt: skip
        return
    for done in finished:
        for line in done.lines():
            console.info(line)
        if done.end is not None and done.end.job_id:
            _remember_job(done.end.job_id)


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
