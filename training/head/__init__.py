"""Code that only ever runs on a cluster's on-demand head node (training/__init__.py places it among the rooms).

- a managed job's life: `job_supervisor` keeps `job_service` (the job's controller) running, backing off
  between crashes; `joblog` writes its log and `log_mirror` mirrors it to S3; `query` and `watch_feed`
  answer the user's machine over SSH (`deepvm jobs`, `logs`, `status JOB`, `watch`); `resume` seeds a job
  continued from its checkpoint in S3;
- its end: `job_end` (the `summary`, the hook through `notify`, the `outputs` to S3), then, when the cluster
  is to go down with it or has idled too long (`idle_cluster`), `autodown`, whose last resort is `poweroff`;
- mpirun on the head: `mpirun_guard` runs one for a controller that may be far away, through `signal_relay`
  (its death becomes exactly one SIGTERM for mpirun), and `sweep` ends what an mpirun left behind;
- a moved cluster: `handover_run` passes control to a new head in the new zone.
"""
