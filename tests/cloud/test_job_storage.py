"""L3 on a managed cluster, against a moto server (S3 and IAM): at `up` the head gets the controller's
profile and the other holders deepvm's holders profile; at `train` both roles get exactly the job's S3
areas (and lose an earlier job's), and a job whose L3 cannot work is refused before anything is staged.

Moto enforces no policy, so what the policies allow is checked by the contract test
(tests/cloud/test_iam_contract.py, against the calls DeepCheck and the log mirror really make)."""

from __future__ import annotations

import fnmatch
import json
from dataclasses import replace

import boto3
import pytest
import yaml

from deepcheck import S3Config
from deepcheck.storage_s3 import S3Store
from provisioning.cloud.aws import rights
from provisioning.cloud.aws.policies import JOB_STORAGE_POLICY, job_storage_policy
from provisioning.cloud.aws.profiles import instance_profiles
from provisioning.cloud.types import S3Area
from provisioning.clusters import handle as cluster_module
from provisioning.clusters import lifecycle
from provisioning.clusters.handle import Cluster
from provisioning.clusters.head import head_node
from provisioning.clusters.lifecycle import UpRequest
from provisioning.clusters.target import AwsTarget
from provisioning.core.errors import InputError
from provisioning.planner.plan import Role
from tests.cloud.plans import make_plan, make_tiering_plan
from tests.deepcheck.dc_fixtures import make_checkpoint
from tests.documents import JOB
from training.client.storage import ready_job_storage
from training.head.log_mirror import LogMirror
from training.shared.jobspec import load_job_spec
from training.shared.storage import job_storage


@pytest.fixture
def aws(ctx, monkeypatch):
    monkeypatch.setattr(AwsTarget, "context", lambda self, region, start=True: ctx)
    return ctx


def _up(ami, plan, **extra) -> Cluster:
    request = UpRequest(name="c1", plans=(plan,), ssh_cidr="198.51.100.7/32", image_id=ami, wait_ssh=False, **extra)
    lifecycle.up(AwsTarget(), request)
    return Cluster.open_running("c1")


def _job(tmp_path, name: str = "job.yaml", **checkpoint):
    doc = yaml.safe_load(JOB)
    doc["checkpoint"] = {"every_steps": 2, **checkpoint}
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return load_job_spec(path)


def _policy(ctx, role: str) -> dict | None:
    iam = ctx.client("iam")
    if JOB_STORAGE_POLICY not in iam.list_role_policies(RoleName=role)["PolicyNames"]:
        return None
    return iam.get_role_policy(RoleName=role, PolicyName=JOB_STORAGE_POLICY)["PolicyDocument"]


def _by_role(cluster: Cluster) -> dict[Role, list[str]]:
    found: dict[Role, list[str]] = {}
    for node in cluster.nodes():
        found.setdefault(node.role, []).append(node.instance_id)
    return found


def test_the_head_and_the_other_holders_get_their_own_profiles_and_the_trainers_none(aws, ami):
    cluster = _up(ami, make_tiering_plan(spot=2, holders=3))
    access = cluster.row.resources.controller
    held = instance_profiles(aws, [n.instance_id for n in cluster.nodes()])
    head = head_node(cluster.nodes())
    holders = _by_role(cluster)[Role.HOLDER]
    assert held[head.instance_id].endswith(f"/{access.profile}")
    assert {held[i].rsplit("/", 1)[1] for i in holders if i != head.instance_id} == {access.holders}
    assert not any(i in held for i in _by_role(cluster)[Role.TRAINER])  # trainers: no rights from deepvm
    assert access.holders and access.holders != access.profile


def test_train_grants_exactly_the_jobs_areas_and_a_later_job_takes_them_away(aws, ami, tmp_path):
    cluster = _up(ami, make_tiering_plan(spot=1, holders=2))
    access = cluster.row.resources.controller
    spec = _job(tmp_path, levels=["l1", "l2", "l3"], s3_prefix="s3://ckpts/team/run-7/")
    with pytest.raises(InputError) as caught:  # no such bucket: refused, nothing granted
        ready_job_storage(cluster, spec)
    assert str(caught.value) == (
        "checkpoint.s3_prefix s3://ckpts/team/run-7/: the bucket ckpts does not exist; "
        "create it (`aws s3 mb s3://ckpts --region us-east-1`) or name another"
    )
    assert _policy(aws, access.role) is None and _policy(aws, access.holders) is None

    aws.client("s3").create_bucket(Bucket="ckpts")
    assert ready_job_storage(cluster, spec) == []
    l3 = (S3Area("ckpts", "team/run-7/", writes=True),)  # the managed job's log lies inside it
    assert _policy(aws, access.role) == job_storage_policy(l3)
    assert _policy(aws, access.holders) == job_storage_policy(l3)
    assert json.dumps(_policy(aws, access.role)).count("arn:aws:s3:::ckpts/team/run-7/*") == 1

    assert ready_job_storage(cluster, _job(tmp_path, "plain.yaml")) == []  # no l3: no S3 rights left
    assert _policy(aws, access.role) is None and _policy(aws, access.holders) is None


def test_a_bucket_wide_prefix_and_a_dataset_the_head_trains_on(aws, ami, tmp_path):
    cluster = _up(ami, make_plan(spot=1, on_demand=1))  # Single Anchor: the head trains, and holds
    access = cluster.row.resources.controller
    assert access.holders == ""  # no holder but the head: no holders' role
    aws.client("s3").create_bucket(Bucket="ckpts")
    doc = yaml.safe_load(JOB)
    doc["dataset"] = {"kind": "cifar10", "s3": "s3://data/cifar"}
    doc["checkpoint"] = {"every_steps": 2, "levels": ["l1", "l2", "l3"], "s3_prefix": "s3://ckpts"}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(doc))
    assert ready_job_storage(cluster, load_job_spec(tmp_path / "job.yaml")) == []
    assert _policy(aws, access.role) == job_storage_policy(
        (
            S3Area("ckpts", "deepcheck/", writes=True),  # L3 where DeepCheck writes it for a bare bucket
            S3Area("ckpts", "deepvm-jobs/", writes=True),  # the job's log mirror
            S3Area("data", "cifar/", writes=False),  # the anchor trains: it reads the dataset
        )
    )


def test_holders_with_no_profile_at_all_are_refused_before_anything_is_staged(aws, ami, tmp_path):
    iam = aws.client("iam")
    iam.create_role(RoleName="ops", AssumeRolePolicyDocument="{}")
    iam.create_instance_profile(InstanceProfileName="ops")
    iam.add_role_to_instance_profile(InstanceProfileName="ops", RoleName="ops")
    cluster = _up(ami, make_tiering_plan(spot=1, holders=2), controller_profile="ops")
    aws.client("s3").create_bucket(Bucket="ckpts")
    spec = _job(tmp_path, levels=["l1", "l2", "l3"], s3_prefix="s3://ckpts/run")
    with pytest.raises(InputError) as caught:
        ready_job_storage(cluster, spec)
    message = str(caught.value)
    assert "\n" not in message
    assert "have no instance profile, so they cannot write the job's L3 to s3://ckpts/run/" in message
    assert message.endswith("or with --instance-profile NAME for a role that may write there")
    assert iam.list_role_policies(RoleName="ops")["PolicyNames"] == []  # a user's role is never written


def test_a_holder_the_head_buys_gets_the_holders_profile(aws, ami, monkeypatch):
    cluster = _up(ami, make_tiering_plan(spot=1, holders=2))
    # moto's instances print no host key and run no sshd: pinning and SSH are not what is tested here
    monkeypatch.setattr(cluster_module, "pin_nodes", lambda *args, **kwargs: cluster.keys)
    monkeypatch.setattr(cluster_module, "wait_reachable", lambda *args, **kwargs: None)
    holders = next(g for g in cluster.plan.nodes if g.role is Role.HOLDER)
    (added,) = cluster.add_nodes(replace(holders, count=1), timeout_s=30)
    held = instance_profiles(aws, [added.instance_id])
    assert held[added.instance_id].endswith(f"/{cluster.row.resources.controller.holders}")


# What the granted policies allow, against the S3 calls DeepCheck and the log mirror really make (moto
# answers them; whether IAM would is evaluated here, by IAM's rules for the shapes deepvm writes: an Allow
# whose action, resource pattern and s3:prefix condition match)


def _allowed(policy: dict, action: str, arn: str, prefix: str | None) -> bool:
    for statement in policy["Statement"]:
        actions, resources = statement["Action"], statement["Resource"]
        if action not in ([actions] if isinstance(actions, str) else actions):
            continue
        if not any(fnmatch.fnmatchcase(arn, r) for r in ([resources] if isinstance(resources, str) else resources)):
            continue
        wanted = statement.get("Condition", {}).get("StringLike", {}).get("s3:prefix")
        if wanted is not None and (prefix is None or not any(fnmatch.fnmatchcase(prefix, w) for w in wanted)):
            continue
        return True
    return False


class _Recorder:
    """Every S3 request a client sends: (IAM action, resource ARN, s3:prefix), the actions from the table."""

    def __init__(self, client) -> None:
        self.seen: list[tuple[str, str, str | None]] = []
        client.meta.events.register("provide-client-params.s3", self._record)

    def _record(self, model, params, **kwargs) -> None:
        row = rights.call("s3", model.name)
        assert row is not None, f"{model.name} has no row in the rights table"
        key = params.get("Key")
        arn = f"arn:aws:s3:::{params['Bucket']}" + (f"/{key}" if key is not None else "")
        self.seen += [(action, arn, params.get("Prefix")) for action in row.actions]


@pytest.mark.parametrize("s3_prefix", ["s3://ckpts/team/run-7", "s3://ckpts"])
def test_the_granted_areas_allow_every_call_deepcheck_and_the_log_mirror_make(
    s3_endpoint, tmp_path, monkeypatch, s3_prefix
):
    spec = _job(tmp_path, levels=["l1", "l2", "l3"], s3_prefix=s3_prefix)
    storage = job_storage(spec, head_trains=False)
    l3 = spec.checkpoint_plan.l3
    assert l3 is not None
    bucket, prefix = l3.bucket, l3.prefix
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=bucket)
    store = S3Store(S3Config(bucket=bucket, prefix=prefix, endpoint_url=s3_endpoint, part_size=5 << 20))
    holder = _Recorder(store.client)
    for step in range(3):  # a holder's uploads (one multipart), the lead's commits, retention and restore
        manifest, data = make_checkpoint(step, size=(6 << 20) if step == 0 else 100)
        for info, shard in zip(manifest.shards, data, strict=True):
            (tmp_path / f"s{step}-{info.index}").write_bytes(shard)
            store.upload_shard(manifest.ckpt, info.index, tmp_path / f"s{step}-{info.index}")
        store.commit(manifest)
    store.retain(1)
    (newest,) = store.manifests()
    store.read_shard(newest.ckpt, newest.shards[0])
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    (tmp_path / "log.jsonl").write_text("{}\n")
    mirror = LogMirror(s3_prefix, "job-1", tmp_path, lambda text: pytest.fail(text))
    head = _Recorder(mirror._s3)
    mirror.upload()

    actions = {action for action, _, _ in holder.seen}
    assert {"s3:PutObject", "s3:GetObject", "s3:ListBucket", "s3:DeleteObject"} <= actions and head.seen
    holders_policy, head_policy = job_storage_policy(storage.holders), job_storage_policy(storage.head_areas)
    for seen in holder.seen:
        assert _allowed(holders_policy, *seen) and _allowed(head_policy, *seen), seen  # any holder may lead
    for seen in head.seen:
        assert _allowed(head_policy, *seen), seen
        assert not _allowed(holders_policy, *seen) or s3_prefix.endswith("run-7"), seen  # beside L3: head only
    assert not _allowed(head_policy, "s3:PutObject", f"arn:aws:s3:::{bucket}/elsewhere/x", None)
    assert not _allowed(head_policy, "s3:ListBucket", f"arn:aws:s3:::{bucket}", "elsewhere/")
