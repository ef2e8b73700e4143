"""Cloud providers: turning a Plan into running instances and back into nothing.

The provider interface (in the style of SkyPilot's provisioner) is a handful of plain functions over the
small dataclasses of `provisioning.cloud.types`; `provisioning.cloud.aws.provider` implements it for EC2,
and the sandbox reuses that implementation against its moto server. The contract:

- `run_instances(ctx, spec, all_or_nothing, record) -> LaunchOutcome` creates the key pair, security
  group, launch template and EC2 Fleet(s), handing `record` every id as it exists (instance ids as
  CreateFleet returned them: AWS lists new instances late, and instant fleets never without their id).
  Idempotent through client tokens derived from `spec.launch_token`: a retried request (botocore
  retries, or a rerun after a crash) does not launch a second cluster. Shortage is data, not an
  exception: `LaunchOutcome.shortfalls` says what is missing and why.
- `wait_instances(ctx, ids, timeout) -> list[InstanceInfo]` polls until all run. EC2 is eventually
  consistent: ids that are not visible yet are retried within the time budget.
- `cluster` is a `ClusterIdentity` (provisioning.cloud.names): the user's name and the id `up` gave this
  cluster, which every cloud name and the sweep tag carry, so clusters of one name in one account (two
  users, both `deepvm`) never touch each other's resources.
- `query_instances(ctx, cluster) -> list[InstanceInfo]` finds a cluster's live instances by tag alone.
- `ensure_controller(ctx, cluster, user_profile, node_profile, with_holders) -> ControllerAccess` makes the
  IAM role and instance profile `deepvm-NAME-ID-REGION-controller` with the controller's tag-scoped policy
  (or takes the user's profile as given), and the holders' role; `attach_to_head(ctx, access, instance_id)`
  associates it with the head node only, once it runs, `attach_to_holders` the holders' with the other
  holders. A refusal by IAM says to pass `--controller-profile`.
- `terminate_instances(ctx, ids) -> {id: state}` terminates single instances while the rest of the cluster
  runs on (a node the job dropped, a chaos reclaim). Idempotent: terminating an instance twice, or one EC2
  no longer knows, is harmless and reports it terminated.
- `terminate_cluster(ctx, cluster, known) -> list[str]` deletes everything, by the recorded ids and by
  sweeping the cluster tag (and the controller role's fixed name), instances first; fleets by their
  recorded ids only (DescribeFleets never lists an instant fleet without its id); a failed step does not
  stop the others, a pass with failures is retried, and what is left is raised as TeardownIncomplete (one
  line per resource). Safe to call twice, or with no record at all.

Above it, `provisioning.clusters.lifecycle` runs `up`, `status`, `down` and `interrupt` with the state store.
"""
