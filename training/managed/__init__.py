"""Managed training: the job's controller runs on the cluster's on-demand head node, not on the user's machine.

Where each part runs:

- the user's machine (`client`): submit a job (stage it on the head, start its service), follow its log,
  cancel it, list jobs, fetch outputs. Nothing here has to keep running for the job to go on.
- the head node: `supervisor` keeps `service` running (restarts it after a crash); `service` runs the
  recovery controller (training.controller) for one job, with the head's own state store and the
  cloud rights of the head's instance profile; `headquery` answers the client's questions (jobs, log).

The records that cross between the two machines are in `records`; the head's file layout in `layout`.
"""
