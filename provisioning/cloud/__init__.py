"""Cloud providers: turning a Plan into running instances and back into nothing.

The provider interface (in the style of SkyPilot's provisioner) is a handful of plain functions over the
small dataclasses of `provisioning.cloud.types`; `provisioning.cloud.aws.provider` implements it for EC2,
and the sandbox reuses that implementation against its moto server. The contract:

- `run_instances(ctx, spec, all_or_nothing) -> LaunchOutcome` creates the key pair, security group,
  launch template and EC2 Fleet(s). Idempotent through client tokens derived from `spec.launch_token`:
  a retried request (botocore retries, or a rerun after a crash) does not launch a second cluster.
  Shortage is data, not an exception: `LaunchOutcome.shortfalls` says what is missing and why.
- `wait_instances(ctx, ids, timeout) -> list[InstanceInfo]` polls until all run. EC2 is eventually
  consistent: ids that are not visible yet are retried within the time budget.
- `query_instances(ctx, cluster) -> list[InstanceInfo]` finds a cluster's live instances by tag alone.
- `ensure_controller(ctx, cluster, user_profile, node_profile) -> ControllerAccess` makes the IAM role
  and instance profile `deepvm-CLUSTER-controller` with the controller's tag-scoped policy (or takes the
  user's profile as given); `attach_to_head(ctx, access, instance_id)` associates it with the head node
  only, once it runs. A refusal by IAM says to pass `--controller-profile`.
- `terminate_instances(ctx, ids) -> {id: state}` terminates single instances while the rest of the cluster
  runs on (a node the job dropped, a chaos reclaim). Idempotent: terminating an instance twice, or one EC2
  no longer knows, is harmless and reports it terminated.
- `terminate_cluster(ctx, cluster, known) -> list[str]` deletes everything, by the recorded ids and by
  sweeping the cluster tag (and the controller role's fixed name), instances first; a failed step does not
  stop the others, a pass with failures is retried, and what is left is raised as TeardownIncomplete (one
  line per resource). Safe to call twice, or with no record at all.

Above it, `provisioning.clusters.lifecycle` runs `up`, `status`, `down` and `interrupt` with the state store.
"""
