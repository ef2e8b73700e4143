"""The head node's cloud rights: the controller's tag-scoped policy, its role and instance profile made by
`up` against a moto server and attached to the head only, `--controller-profile`, refusals, and teardown
after a crash."""

from __future__ import annotations

import json
import shutil

import pytest
from botocore.exceptions import ClientError

from provisioning.cloud.aws.policies import controller_policy
from provisioning.cloud.aws.provider import attach_to_head
from provisioning.cloud.names import CLUSTER_ID_TAG, CLUSTER_TAG, ClusterIdentity, role_name
from provisioning.cloud.types import ControllerAccess
from provisioning.clusters import lifecycle
from provisioning.clusters.lifecycle import UpRequest
from provisioning.clusters.store import Store
from provisioning.clusters.target import AwsTarget
from provisioning.core.errors import CloudError
from tests.cloud.cloud_state import identity, left_of, named
from tests.cloud.plans import REGION, make_plan, write_plans
from tests.conftest import Cli, run_cli

C1 = ClusterIdentity("c1", "0a1b2c3d")
ROLE = f"deepvm-c1-0a1b2c3d-{REGION}-controller"  # the cluster's role when `up` gives c1 the id C1's


@pytest.fixture
def fixed_id(monkeypatch):
    """`up` in this process gives c1 the id 0a1b2c3d (ids are random: a test names the role it expects)."""
    monkeypatch.setattr(ClusterIdentity, "new", classmethod(lambda cls, name: ClusterIdentity(name, C1.cluster_id)))


def _role() -> str:
    """The controller role of c1 as recorded (by an `up` in another process: its id is random)."""
    return role_name(identity("c1"), REGION)


def _statements(policy: dict) -> list[dict]:
    return policy["Statement"]


def _actions(statement: dict) -> list[str]:
    action = statement["Action"]
    return [action] if isinstance(action, str) else action


# the policy, as a pure function


def test_the_policy_grants_no_wildcard_action_and_nothing_of_iam_or_s3():
    policy = controller_policy(C1, REGION)
    actions = [a for s in _statements(policy) for a in _actions(s)]
    assert all("*" not in a for a in actions)
    assert all(a.startswith("ec2:") for a in actions)
    assert all(s["Effect"] == "Allow" for s in _statements(policy))


def test_only_describe_is_unscoped_and_every_change_is_limited_to_the_cluster():
    policy = controller_policy(C1, REGION)
    for statement in _statements(policy):
        if statement["Resource"] == "*":
            assert all(a.startswith("ec2:Describe") for a in _actions(statement))
            assert "Condition" not in statement
        elif statement["Sid"] == "LaunchAsSpot":  # a spot request alone launches nothing (see the policy)
            assert statement["Resource"] == f"arn:aws:ec2:{REGION}:*:spot-instances-request/*"
        else:
            assert statement["Condition"], statement["Sid"]
            resources = statement["Resource"]
            resources = [resources] if isinstance(resources, str) else resources
            assert all(r.startswith(f"arn:aws:ec2:{REGION}:") for r in resources)


def test_terminating_and_reading_consoles_need_the_cluster_tag_on_the_resource():
    by_action = {a: s for s in _statements(controller_policy(C1, REGION)) for a in _actions(s)}
    assert "ec2:DeleteFleets" not in by_action  # the head deletes no fleet (`down` does, on the user's side)
    for action in ("ec2:TerminateInstances", "ec2:GetConsoleOutput"):
        assert by_action[action]["Condition"] == {"StringEquals": {f"ec2:ResourceTag/{CLUSTER_ID_TAG}": "0a1b2c3d"}}


def test_launching_needs_the_cluster_template_and_tags_what_it_creates():
    statements = {s["Sid"]: s for s in _statements(controller_policy(C1, REGION))}
    template = statements["LaunchFromTheClusterTemplate"]
    assert set(_actions(template)) == {"ec2:CreateFleet", "ec2:RunInstances"}
    assert template["Resource"] == f"arn:aws:ec2:{REGION}:*:launch-template/*"
    assert template["Condition"] == {"StringEquals": {f"ec2:ResourceTag/{CLUSTER_ID_TAG}": "0a1b2c3d"}}
    for sid, action, kinds in (
        ("CreateClusterTaggedFleets", "ec2:CreateFleet", {"fleet", "instance", "volume"}),
        ("LaunchClusterTaggedResources", "ec2:RunInstances", {"instance", "volume", "network-interface"}),
    ):
        created = statements[sid]
        assert created["Action"] == action and {r.rsplit(":", 1)[1] for r in created["Resource"]} == {
            f"{kind}/*" for kind in kinds
        }
        assert created["Condition"] == {"StringEquals": {f"aws:RequestTag/{CLUSTER_ID_TAG}": "0a1b2c3d"}}
    for sid in ("FleetsUseTheTemplatesParts", "LaunchWithTheTemplatesParts"):
        parts = statements[sid]
        assert parts["Condition"] == {"ArnLike": {"ec2:LaunchTemplate": f"arn:aws:ec2:{REGION}:*:launch-template/*"}}
    tags = statements["TagOnlyWhileLaunching"]["Condition"]["StringEquals"]
    # bare EC2 operation names, as AWS documents the key (the contract test checks them against botocore)
    assert tags == {f"aws:RequestTag/{CLUSTER_ID_TAG}": "0a1b2c3d", "ec2:CreateAction": ["CreateFleet", "RunInstances"]}


def test_the_controller_may_give_its_own_profile_to_an_instance_of_its_cluster_only():
    """A head handing control of a moved cluster over gives the new head its profile (training/control/handover.py):
    iam:PassRole on exactly its own role, to EC2, and the association rights only on the cluster's instances."""
    arn = "arn:aws:iam::123456789012:role/deepvm/deepvm-c1-0a1b2c3d-us-east-1-controller"
    statements = {s["Sid"]: s for s in _statements(controller_policy(C1, REGION, controller_role_arn=arn))}
    assert statements["PassTheControllerRoleToEc2"]["Resource"] == arn
    assert statements["PassTheControllerRoleToEc2"]["Condition"] == {
        "StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}
    }
    give = statements["GiveClusterNodesTheirProfile"]
    assert give["Condition"] == {"StringEquals": {f"ec2:ResourceTag/{CLUSTER_ID_TAG}": "0a1b2c3d"}}
    assert "PassTheControllerRoleToEc2" not in {s["Sid"] for s in _statements(controller_policy(C1, REGION))}


def test_the_nodes_role_may_be_passed_to_ec2_and_no_other():
    arn = "arn:aws:iam::123456789012:role/nodes"
    extra = [s for s in _statements(controller_policy(C1, REGION, arn)) if _actions(s) == ["iam:PassRole"]]
    assert extra == [
        {
            "Sid": "PassTheNodesRoleToEc2",
            "Effect": "Allow",
            "Action": "iam:PassRole",
            "Resource": arn,
            "Condition": {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}},
        }
    ]


def test_the_role_name_is_fixed_per_cluster_and_region_and_fits_iam():
    assert role_name(C1, REGION) == ROLE
    assert role_name(C1, "ap-southeast-2") != ROLE and role_name(ClusterIdentity("c1", "ffffffff"), REGION) != ROLE
    long_a, long_b = ClusterIdentity("a" * 63, "0a1b2c3d"), ClusterIdentity("a" * 62 + "b", "0a1b2c3e")
    assert len(role_name(long_a, "ap-southeast-2", "holders")) <= 64
    assert len(role_name(long_a, "ap-southeast-2")) <= 64 and role_name(long_a, REGION) != role_name(long_b, REGION)
    # a cluster recorded before ids keeps the name its role was made with
    assert role_name(ClusterIdentity("c1"), REGION) == "deepvm-c1-controller"
    old_a, old_b = ClusterIdentity("a" * 63), ClusterIdentity("a" * 62 + "b")
    assert len(role_name(old_a, REGION)) == 64 and role_name(old_a, REGION) != role_name(old_b, REGION)


# `up` and `down` against the moto server


def _up(cli: Cli, plan_file, ami, *extra):
    return cli(
        "up", "--yes", "--cloud", "aws", "--plan", str(plan_file), "--ami", ami, "--no-wait", "--name", "c1", *extra
    )


def _associations(ctx) -> dict[str, str]:
    """instance id -> instance profile ARN of every live association."""
    answer = ctx.client("ec2").describe_iam_instance_profile_associations()["IamInstanceProfileAssociations"]
    return {a["InstanceId"]: a["IamInstanceProfile"]["Arn"] for a in answer if a["State"] != "disassociated"}


def _exists(call) -> bool:
    try:
        call()
        return True
    except ClientError as exc:
        assert exc.response["Error"]["Code"] == "NoSuchEntity"
        return False


def _iam_gone(ctx, name: str = ROLE) -> bool:
    """Neither the role nor the instance profile `name` exists."""
    iam = ctx.client("iam")
    return not _exists(lambda: iam.get_role(RoleName=name)) and not _exists(
        lambda: iam.get_instance_profile(InstanceProfileName=name)
    )


def _head_id(nodes: list[dict]) -> str:
    (head,) = [n["instance_id"] for n in nodes if n["role"] == "anchor"]
    return head


def test_up_gives_the_head_alone_a_tag_scoped_role_and_down_deletes_it(ctx, ami, tmp_path, cli):
    plan = write_plans(tmp_path / "plan.json", make_plan(spot=2, on_demand=1))
    result = _up(cli, plan, ami, "--json")
    assert result.returncode == 0, result.stderr
    head = _head_id(json.loads(result.stdout)["nodes"])

    iam, role_id = ctx.client("iam"), _role()
    role = iam.get_role(RoleName=role_id)["Role"]
    assert {"Key": CLUSTER_TAG, "Value": "c1"} in role["Tags"] and role["Path"] == "/deepvm/"
    assert {"Key": CLUSTER_ID_TAG, "Value": identity().cluster_id} in role["Tags"]
    assert role["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {"Service": "ec2.amazonaws.com"}
    (policy_name,) = iam.list_role_policies(RoleName=role_id)["PolicyNames"]
    document = iam.get_role_policy(RoleName=role_id, PolicyName=policy_name)["PolicyDocument"]
    assert document == controller_policy(identity(), REGION, controller_role_arn=role["Arn"])
    profile = iam.get_instance_profile(InstanceProfileName=role_id)["InstanceProfile"]
    assert [r["RoleName"] for r in profile["Roles"]] == [role_id]
    assert {"Key": CLUSTER_TAG, "Value": "c1"} in profile["Tags"]

    assert _associations(ctx) == {head: profile["Arn"]}  # the head only: trainers get no EC2 rights
    data = ctx.client("ec2").describe_launch_template_versions(LaunchTemplateName=named())["LaunchTemplateVersions"][0][
        "LaunchTemplateData"
    ]
    assert "IamInstanceProfile" not in data
    row = Store().cluster("c1")
    assert row.resources.controller == ControllerAccess(profile=role_id, role=role_id, owned=True)

    down = cli("down", "c1", "--yes", "--json")
    assert down.returncode == 0, down.stderr
    assert {f"IAM role {role_id}", f"IAM instance profile {role_id}"} <= set(json.loads(down.stdout)["deleted"])
    assert _iam_gone(ctx, role_id) and _associations(ctx) == {} and left_of(ctx, "c1") == []


def test_controller_profile_is_used_as_given_and_kept_at_down(ctx, ami, tmp_path, cli):
    iam = ctx.client("iam")
    iam.create_role(RoleName="ops-controller", AssumeRolePolicyDocument="{}")
    arn = iam.create_instance_profile(InstanceProfileName="ops-controller")["InstanceProfile"]["Arn"]
    iam.add_role_to_instance_profile(InstanceProfileName="ops-controller", RoleName="ops-controller")
    plan = write_plans(tmp_path / "plan.json", make_plan(spot=1, on_demand=1))
    result = _up(cli, plan, ami, "--json", "--controller-profile", "ops-controller")
    assert result.returncode == 0, result.stderr
    assert _associations(ctx) == {_head_id(json.loads(result.stdout)["nodes"]): arn}
    assert iam.list_roles(PathPrefix="/deepvm/")["Roles"] == []  # deepvm made no role of its own
    assert Store().cluster("c1").resources.controller == ControllerAccess(profile="ops-controller")
    assert cli("down", "c1", "--yes").returncode == 0
    assert iam.get_instance_profile(InstanceProfileName="ops-controller")["InstanceProfile"]["Roles"]
    assert iam.get_role(RoleName="ops-controller")


def test_with_the_nodes_profile_the_head_has_it_replaced_and_may_pass_its_role(ctx, ami, tmp_path, cli):
    iam = ctx.client("iam")
    node_role = iam.create_role(RoleName="nodes", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    iam.create_instance_profile(InstanceProfileName="nodes")
    iam.add_role_to_instance_profile(InstanceProfileName="nodes", RoleName="nodes")
    plan = write_plans(tmp_path / "plan.json", make_plan(spot=1, on_demand=1))
    result = _up(cli, plan, ami, "--json", "--instance-profile", "nodes")
    assert result.returncode == 0, result.stderr
    document = iam.get_role_policy(RoleName=_role(), PolicyName="deepvm-controller")["PolicyDocument"]
    assert document == controller_policy(
        identity(), REGION, node_role, controller_role_arn=iam.get_role(RoleName=_role())["Role"]["Arn"]
    )
    head = _head_id(json.loads(result.stdout)["nodes"])
    assert _associations(ctx)[head].endswith(f"instance-profile/deepvm/{_role()}")
    assert cli("down", "c1", "--yes").returncode == 0


def test_attach_replaces_a_profile_the_head_already_holds(ctx, ami):
    ec2, iam = ctx.client("ec2"), ctx.client("iam")
    for name in ("nodes", "ops"):
        iam.create_instance_profile(InstanceProfileName=name)
    instance = ec2.run_instances(ImageId=ami, MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
    ec2.associate_iam_instance_profile(IamInstanceProfile={"Name": "nodes"}, InstanceId=instance)
    attach_to_head(ctx, ControllerAccess(profile="ops"), instance)
    assert _associations(ctx) == {instance: "arn:aws:iam::123456789012:instance-profile/ops"}


# refusals and crashes, in process so that a botocore event hook can inject them


class _Crash(BaseException):
    """The process dies here: nothing of `up`'s own clean-up runs."""


def _in_process_up(ctx, monkeypatch, ami) -> None:
    monkeypatch.setattr(AwsTarget, "context", lambda self, region, start=True: ctx)
    request = UpRequest(
        name="c1",
        plans=(make_plan(spot=2, on_demand=1),),
        ssh_cidr="198.51.100.7/32",
        image_id=ami,
        wait_ssh=False,
    )
    lifecycle.up(AwsTarget(), request)


def _fail(ctx, service: str, operation: str, error: BaseException) -> None:
    def hook(**kwargs):
        raise error

    ctx.client(service).meta.events.register(f"before-call.{service}.{operation}", hook)


def _denied(code: str, operation: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "not allowed"}}, operation)


@pytest.mark.parametrize(
    ("operation", "code"), [("CreateRole", "AccessDenied"), ("PutRolePolicy", "UnauthorizedOperation")]
)
def test_a_refused_iam_role_says_what_to_pass_and_leaves_nothing(ctx, ami, monkeypatch, fixed_id, operation, code):
    _fail(ctx, "iam", operation, _denied(code, operation))
    with pytest.raises(CloudError) as caught:
        _in_process_up(ctx, monkeypatch, ami)
    message = str(caught.value)
    assert message.startswith(f"cannot create the controller's IAM role ({code}); ask for an instance profile")
    assert message.endswith("and pass --controller-profile NAME") and "\n" not in message
    assert left_of(ctx, "c1") == [] and _iam_gone(ctx)
    assert ctx.client("ec2").describe_instances()["Reservations"] == []
    assert Store().cluster("c1").status == "failed"


@pytest.mark.parametrize(
    ("operation", "service", "state_lost"),
    [
        ("AddRoleToInstanceProfile", "iam", True),  # in the middle of making the role
        ("CreateFleet", "ec2", True),  # role made, no instance yet
        ("AssociateIamInstanceProfile", "ec2", False),  # instances run, the head has no profile yet
    ],
)
def test_a_crash_in_the_middle_of_up_leaves_nothing_down_does_not_sweep(
    ctx, ami, monkeypatch, isolated_env, fixed_id, operation, service, state_lost
):
    """`down` runs as a process of its own, as after a crash: none of this one's patches and hooks reach it."""
    monkeypatch.setattr(lifecycle, "_destroy", lambda *args, **kwargs: [])  # a dead process cleans nothing
    _fail(ctx, service, operation, _Crash())
    with pytest.raises(_Crash):
        _in_process_up(ctx, monkeypatch, ami)
    assert left_of(ctx, "c1")  # something was left behind...
    if state_lost:
        shutil.rmtree(isolated_env)
    result = run_cli("down", "c1", "--yes", "--cloud", "aws", "--region", REGION)
    assert result.returncode == 0, result.stderr
    assert left_of(ctx, "c1") == [] and _iam_gone(ctx) and _associations(ctx) == {}  # ...and swept
    live = ctx.client("ec2").describe_instances(
        Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}]
    )["Reservations"]
    assert live == []


@pytest.mark.parametrize("path", ["/", "/deepvm/"])
def test_the_sweep_leaves_a_role_of_that_name_deepvm_did_not_tag(ctx, path, cli):
    for name in ("deepvm-c1-controller", ROLE):  # as named before ids, and since
        ctx.client("iam").create_role(RoleName=name, Path=path, AssumeRolePolicyDocument="{}")
    assert left_of(ctx, "c1") == []
    assert cli("down", "c1", "--yes", "--cloud", "aws", "--region", REGION).returncode == 5
    assert ctx.client("iam").get_role(RoleName=ROLE) and ctx.client("iam").get_role(RoleName="deepvm-c1-controller")


def test_up_never_takes_over_a_role_of_that_name_deepvm_did_not_make(ctx, ami, monkeypatch, fixed_id):
    ctx.client("iam").create_role(RoleName=ROLE, AssumeRolePolicyDocument="{}")
    with pytest.raises(CloudError, match=f"an IAM role named {ROLE} exists that deepvm did not make"):
        _in_process_up(ctx, monkeypatch, ami)
    assert ctx.client("iam").list_role_policies(RoleName=ROLE)["PolicyNames"] == []
    assert ctx.client("ec2").describe_instances()["Reservations"] == []
