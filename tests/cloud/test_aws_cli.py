"""`deepvm up / status / down` with --cloud aws against a moto server over HTTP, the CLI in this process."""

from __future__ import annotations

import base64
import json
import shutil

import pytest

from provisioning.cloud.aws.network import check_cidr, ensure_security_group
from provisioning.cloud.keys import ensure_cluster_keys
from provisioning.cloud.names import CLUSTER_TAG, ClusterIdentity
from provisioning.clusters.store import Store
from tests.cloud.cloud_state import left_of, named
from tests.cloud.plans import make_plan, write_plans
from tests.conftest import Cli


def _up(cli: Cli, plan_file, ami, *extra):
    return cli("up", "--yes", "--cloud", "aws", "--plan", str(plan_file), "--ami", ami, "--no-wait", *extra)


def _live_instances(ctx, name="c1"):
    reservations = ctx.client("ec2").describe_instances(
        Filters=[
            {"Name": f"tag:{CLUSTER_TAG}", "Values": [name]},
            {"Name": "instance-state-name", "Values": ["pending", "running"]},
        ]
    )["Reservations"]
    return [i for r in reservations for i in r["Instances"]]


def _has_cluster_tag(tags, name="c1"):
    return {"Key": CLUSTER_TAG, "Value": name} in (tags or [])


def test_up_status_down(ctx, ami, tmp_path, isolated_env, cli):
    plan = write_plans(tmp_path / "plan.json", make_plan(spot=3, on_demand=1))
    result = _up(cli, plan, ami, "--name", "c1", "--json", "--ssh-cidr", "198.51.100.7/32")
    assert result.returncode == 0, result.stderr
    assert "warning:" not in result.stderr  # one address: nothing to warn about
    up = json.loads(result.stdout)
    assert up["status"] == "up" and len(up["nodes"]) == 4
    assert sorted(n["role"] for n in up["nodes"]) == ["anchor", "trainer", "trainer", "trainer"]
    assert sorted(n["market"] for n in up["nodes"]) == ["on-demand", "spot", "spot", "spot"]
    assert all(n["availability_zone"] == "us-east-1a" for n in up["nodes"])
    assert (isolated_env / "clusters" / "c1" / "id_ed25519").stat().st_mode & 0o777 == 0o600

    status = cli("status", "c1", "--json")
    assert status.returncode == 0, status.stderr
    view = json.loads(status.stdout)
    assert view["name"] == "c1" and view["refreshed"] is True
    assert abs(view["usd_per_hour"] - (0.526 + 3 * 0.1578)) < 1e-9  # the snapshot's prices in us-east-1a
    assert view["prices_as_of"] == "2026-11-01T00:00:00Z"
    assert {n["instance_id"] for n in view["nodes"]} == {n["instance_id"] for n in up["nodes"]}
    for columns in ("80", "120"):  # the human view cuts no id, address or price, even at 80 columns
        shown = cli("status", "c1", env={"COLUMNS": columns, "NO_COLOR": "1"})
        assert shown.returncode == 0, shown.stderr
        assert "…" not in shown.stdout
        for node in view["nodes"]:
            line = next(x for x in shown.stdout.splitlines() if node["instance_id"] in x)
            assert f"{node['usd_per_hour']:.4f}" in line and (node["public_ip"] or node["private_ip"] or "-") in line

    ec2 = ctx.client("ec2")
    # every resource carries the cluster tag
    assert len(_live_instances(ctx)) == 4 and all(_has_cluster_tag(i["Tags"]) for i in _live_instances(ctx))
    group = ec2.describe_security_groups(Filters=[{"Name": "group-name", "Values": [named()]}])["SecurityGroups"]
    assert len(group) == 1 and _has_cluster_tag(group[0]["Tags"])
    templates = ec2.describe_launch_templates(LaunchTemplateNames=[named()])["LaunchTemplates"]
    assert _has_cluster_tag(templates[0]["Tags"])
    keys = ec2.describe_key_pairs(KeyNames=[named()])["KeyPairs"]
    assert _has_cluster_tag(keys[0]["Tags"])
    assert ec2.describe_fleets()["Fleets"] == []  # as on AWS: an instant fleet is listed only by its id
    fleets = ec2.describe_fleets(FleetIds=list(Store().cluster("c1").resources.fleet_ids))["Fleets"]
    assert len(fleets) == 1 and fleets[0]["Type"] == "instant" and _has_cluster_tag(fleets[0].get("Tags"))
    assert fleets[0]["TargetCapacitySpecification"]["SpotTargetCapacity"] == 3
    assert fleets[0]["TargetCapacitySpecification"]["OnDemandTargetCapacity"] == 1

    # security group: SSH only from the given range, everything from members of the group
    rules = group[0]["IpPermissions"]
    ssh = [r for r in rules if r.get("FromPort") == 22]
    assert [ip["CidrIp"] for ip in ssh[0]["IpRanges"]] == ["198.51.100.7/32"]
    inner = [r for r in rules if r["IpProtocol"] == "-1"]
    assert [p["GroupId"] for p in inner[0]["UserIdGroupPairs"]] == [group[0]["GroupId"]]
    assert len(rules) == 2

    # launch template: IMDSv2 required and one hop away (no container reaches it), public keys only in the
    # user-data, each node asked to make its own host key
    data = ec2.describe_launch_template_versions(LaunchTemplateName=named())["LaunchTemplateVersions"][0][
        "LaunchTemplateData"
    ]
    assert data["MetadataOptions"]["HttpTokens"] == "required"
    assert data["MetadataOptions"]["HttpPutResponseHopLimit"] == 1
    from provisioning.cloud.userdata import parse_user_data

    boot = parse_user_data(data["UserData"])
    keys = ensure_cluster_keys("c1")
    assert boot.authorized_keys == (keys.login_public, keys.internal_public)  # the head reaches every node
    user_data = base64.b64decode(data["UserData"]).decode()
    assert "PRIVATE KEY" not in user_data and "ssh_keys" not in user_data
    assert "ssh_genkeytypes:\n- ed25519" in user_data and "ssh_deletekeys: true" in user_data
    internal_private = keys.internal_key_path.read_text().splitlines()[4]  # a line of its secret part
    assert internal_private not in user_data
    assert sorted(p.name for p in (isolated_env / "clusters" / "c1").iterdir()) == ["id_ed25519", "internal_ed25519"]

    down = cli("down", "c1", "--yes", "--json")
    assert down.returncode == 0, down.stderr
    assert len([d for d in json.loads(down.stdout)["deleted"] if d.startswith("instance ")]) == 4
    assert _live_instances(ctx) == [] and left_of(ctx, "c1") == []
    again = cli("down", "c1", "--yes", "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["deleted"] == []


def test_up_twice_is_one_cluster(ctx, ami, tmp_path, cli):
    plan = write_plans(tmp_path / "plan.json", make_plan(spot=2, on_demand=1))
    first = _up(cli, plan, ami, "--name", "c1", "--json")
    assert first.returncode == 0, first.stderr
    second = _up(cli, plan, ami, "--name", "c1", "--json")
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout)["nodes"] == json.loads(first.stdout)["nodes"]
    assert len(_live_instances(ctx)) == 3
    assert len(Store().cluster("c1").resources.fleet_ids) == 1


def test_down_after_local_state_was_lost_leaves_nothing(ctx, ami, tmp_path, isolated_env, cli):
    plan = write_plans(tmp_path / "plan.json", make_plan(spot=2, on_demand=1))
    assert _up(cli, plan, ami, "--name", "c1").returncode == 0
    shutil.rmtree(isolated_env)
    result = cli("down", "c1", "--yes", "--cloud", "aws", "--region", "us-east-1")
    assert result.returncode == 0, result.stderr
    assert "deleted instance" in result.stdout
    assert _live_instances(ctx) == [] and left_of(ctx, "c1") == []


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (
            ("up", "--yes", "--cloud", "aws", "--plan", "/nonexistent/plan.json"),
            2,
            "deepvm: error: plan file not found: /nonexistent/plan.json",
        ),
        (
            ("status", "ghost"),
            5,
            "deepvm: error: no cluster named 'ghost'; there are no clusters yet",
        ),
        (("down", "ghost", "--yes", "--cloud", "aws"), 5, "deepvm: error: no cluster named 'ghost'"),
        (("status", "bad name!"), 2, "deepvm: error: cluster name 'bad name!' is not allowed"),
        (("interrupt", "i-0123456789"), 5, "deepvm: error: no node 'i-0123456789' in any cluster"),
        (("up", "--yes", "--cloud", "moon"), 2, "deepvm: error: --cloud must be one of auto, aws, sandbox"),
        (("down", "c1"), 5, "deepvm: error: no cluster named 'c1': not in the local state, and nothing tagged"),
    ],
)
def test_bad_input_is_one_line_and_an_exit_code(moto, args, code, message, cli):
    result = cli(*args)
    assert result.returncode == code, result.stderr
    assert result.stderr.startswith(message)
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_bad_cluster_name_on_up_creates_nothing(ctx, ami, tmp_path, cli):
    plan = write_plans(tmp_path / "plan.json", make_plan())
    result = _up(cli, plan, ami, "--name", "my cluster/1")
    assert result.returncode == 2
    assert result.stderr.startswith("deepvm: error: cluster name 'my cluster/1' is not allowed")
    assert ctx.client("ec2").describe_instances()["Reservations"] == []


def test_missing_deep_learning_ami_says_to_pass_ami(realism, tmp_path, cli):
    realism.change(public_parameters={})  # a region where AWS publishes no such image
    plan = write_plans(tmp_path / "plan.json", make_plan())
    result = cli("up", "--yes", "--cloud", "aws", "--plan", str(plan), "--no-wait")
    assert result.returncode == 4
    assert (
        "could not find Deep Learning OSS Nvidia Driver AMI GPU PyTorch 2.9 (Ubuntu 24.04) in us-east-1 "
        "(ParameterNotFound for /aws/service/deeplearning/"
        in result.stderr
        and "pass --ami" in result.stderr
    )


def test_instance_profile_reaches_the_nodes_through_the_launch_template(ctx, ami, tmp_path, cli):
    iam = ctx.client("iam")
    iam.create_role(RoleName="deepvm-nodes", AssumeRolePolicyDocument="{}")
    iam.create_instance_profile(InstanceProfileName="deepvm-nodes")
    iam.add_role_to_instance_profile(InstanceProfileName="deepvm-nodes", RoleName="deepvm-nodes")
    plan = write_plans(tmp_path / "plan.json", make_plan(spot=1, on_demand=1))
    result = _up(cli, plan, ami, "--name", "c1", "--instance-profile", "deepvm-nodes")
    assert result.returncode == 0, result.stderr
    data = ctx.client("ec2").describe_launch_template_versions(LaunchTemplateName=named())["LaunchTemplateVersions"][0][
        "LaunchTemplateData"
    ]
    assert data["IamInstanceProfile"] == {"Name": "deepvm-nodes"}
    assert cli("down", "c1", "--yes").returncode == 0


def test_ssh_open_to_every_address_is_warned_about_and_still_launched(ctx, ami, tmp_path, cli):
    plan = write_plans(tmp_path / "plan.json", make_plan(spot=1, on_demand=1))
    result = _up(cli, plan, ami, "--name", "c1", "--ssh-cidr", "0.0.0.0/0")
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == [
        "warning: --ssh-cidr 0.0.0.0/0 opens the nodes' SSH port to the whole internet (only deepvm's keys log in)"
    ]
    group = ctx.client("ec2").describe_security_groups(GroupNames=[named()])["SecurityGroups"][0]
    ssh = next(r for r in group["IpPermissions"] if r.get("FromPort") == 22)
    assert [r["CidrIp"] for r in ssh["IpRanges"]] == ["0.0.0.0/0"]
    assert cli("down", "c1", "--yes").returncode == 0


def test_every_ipv6_address_is_warned_about_too_and_admitted_as_an_ipv6_range(ctx, ami, tmp_path, cli):
    cidr = "0::0/0"
    plan = write_plans(tmp_path / "plan.json", make_plan(spot=1, on_demand=1))
    result = _up(cli, plan, ami, "--name", "c1", "--ssh-cidr", cidr, "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "warning: --ssh-cidr ::/0 opens the nodes' SSH port to the whole internet" in result.stderr

    vpc = ctx.client("ec2").create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    group_id = ensure_security_group(ctx, ClusterIdentity("c1", "0a1b2c3d"), vpc, check_cidr(cidr))
    group = ctx.client("ec2").describe_security_groups(GroupIds=[group_id])["SecurityGroups"][0]
    ssh = next(r for r in group["IpPermissions"] if r.get("FromPort") == 22)
    assert [r["CidrIpv6"] for r in ssh["Ipv6Ranges"]] == ["::/0"] and ssh["IpRanges"] == []


def test_a_malformed_ssh_cidr_is_refused_before_anything_is_created(ctx, ami, tmp_path, cli):
    plan = write_plans(tmp_path / "plan.json", make_plan(spot=1, on_demand=1))
    result = _up(cli, plan, ami, "--name", "c1", "--ssh-cidr", "0.0.0.0/33")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "deepvm: error: --ssh-cidr '0.0.0.0/33' is not an address range like 203.0.113.7/32"
    )
    assert ctx.client("ec2").describe_instances()["Reservations"] == []
