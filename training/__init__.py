"""deepvm's training layer, grouped by where the code runs.

- `client/`: only on the user's machine. `managed` submits a job to the cluster's head (stages it there
  and starts its supervised service), follows its log, cancels it, lists jobs and fetches outputs; none of
  it has to keep running for the job to go on. `outputs` answers where a job's outputs and log are now
  (the head, S3, or gone) for fetch, logs, status JOB and a resume from S3; `guard_setup` makes the
  cluster's outputs bucket and grants it before a guarded job is staged; `idle_watch` starts `up
  --autodown`'s watch on the head. `profiling` (`deepvm profile`) drives launches of its own from the
  user's machine through control's attempt session. `storage` grants a job's S3 areas to the cluster's
  roles, or refuses the job, before anything is staged.
- `control/`: the recovery controller and what it drives. On the cluster's on-demand head node for a
  managed job (the default); on the user's machine with `deepvm train --controller local`, so these
  modules run on either side. `controller` runs a job attempt by attempt and decides; `attempts` is its
  pure decision core; `session` runs one attempt (prepare, launch, watch), for the controller and for
  `deepvm profile`; `nodepool` holds each node's state and what to do about it, `nodes` does it;
  `jobrecord` chooses the job and keeps its row; `launcher` builds and runs one mpirun on the head over
  SSH; `staging` readies nodes (the client also pushes the runtime to the head with it); `replacements`
  buys lost nodes back, as `market` (the live job's side of provisioning/ladder) orders, `move`
  relocates the job to another zone and `handover` passes its control to a head there (`head_start`
  starts a job's supervisor on a head, for the client and for a hand-over); `recovery` and
  `stall` account for and notice trouble; `scripterror` finds a failed attempt's own cause in its output;
  `plan_facts` reads the plan's GPUs and TFLOPS; `jobclock` keeps --idle and --max-duration, `stops` ends a
  job short of completing (cancel, a limit, the budget, a decision) and names how, `winddown` terminates
  what was bought for a job that ended; `leftovers` finds what a job that did not complete left on the
  nodes (for `deepvm fetch`, and for the head's copy to S3).
- `head/`: only ever on the cluster's head node (its own docstring says each room): `job_supervisor` keeps
  `job_service` (one managed job's controller) running; `job_end` runs once a job is over, then `autodown`
  (whose last resort is `poweroff`) when the cluster goes with it; `mpirun_guard` runs one mpirun there for a
  controller that may be far away; `handover_run` hands a moved cluster's control to a new head.
- `node/`: on the cluster's nodes, started over SSH by the controller or by mpirun. `rank` is what
  mpirun starts on every node (`worker`, or the job's own script: through `userscript` when it calls
  ctx.step, as a child process with torchrun's environment through `launched` (`elastic_env`, its kept files
  through `keptfiles` and `kepttable`) when it does not; with `checkpointing` and `safety` (what trainer 0
  tells of its checkpoints' fate), `hooks`, `distenv`, `trainercomm`, `sampler`, `batchplan`, `schedule`,
  `data/`, `models/`), through `warm`, which makes each rank after a node's first a fork of an interpreter
  with torch imported; `watcher` polls instance metadata for Spot notices, in a rank and once per node
  before a launch.
- `shared/`: read or written on both sides, so both import it: the job spec (`jobspec`, `yamlmarks`:
  validated on the user's machine, re-read by the controller and every rank), the events ranks send the
  controller (`events`, with `Notice`), what a run reports (`progress`) and what trainer 0 writes at its
  end (`metrics`), the jobs table (`jobstore`: the user's machine and the head each keep one), the
  records that cross between the user's machine and the head (`records`) and the head's file layout
  they name (`layout`), the job's checkpoint plan every stage reads (`checkpointplan`), where a job's objects
  live in S3 (`storage`, with `s3url`), a job's money guard (`guard`) and its run
  summary (`summary`), SSH (`transport`, with `jobdir`:
  which files of a pushed directory go, and the rule for symbolic links), and Open MPI's own notes in a
  job's output (`mpinotes`).
- `job.py` stays at the top: it is what a user's own script imports (`from training import job`), so its
  path is part of the job-spec contract (configs/own_train.py, README); it runs on trainer ranks.

Imports go one way: client -> control -> shared, head -> control -> shared, node -> shared; nothing in
node or shared imports control, head or client.
"""
