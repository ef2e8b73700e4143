"""The realism layer itself (provisioning/sandbox/realism.py): each behaviour moto lacks, switched on over
the moto server's control endpoint and observed through boto3, as deepvm's code meets it."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request

import pytest
from botocore.exceptions import ClientError

from deepvm_cli.main import main
from provisioning.cloud.types import ShortagePolicy
from provisioning.clusters.handle import Cluster
from provisioning.clusters.lifecycle import UpRequest, up
from provisioning.clusters.store import Store
from provisioning.clusters.target import AwsTarget
from provisioning.sandbox.control import SandboxInfo, save_info
from provisioning.sandbox.realism import (
    CONTROL_PATH,
    SANDBOX,
    SANDBOX_IMAGE,
    SPOT_TERMINATION,
    CapacityRule,
    Realism,
    RealismControl,
)
from tests.cloud.plans import make_plan


def _launch(ctx, ami, count=1):
    return [
        i["InstanceId"]
        for i in ctx.client("ec2").run_instances(ImageId=ami, MinCount=count, MaxCount=count)["Instances"]
    ]


def _listed(ctx) -> list[str]:
    pages = (
        ctx.client("ec2")
        .get_paginator("describe_instances")
        .paginate(Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}])
    )
    return [i["InstanceId"] for page in pages for r in page["Reservations"] for i in r["Instances"]]


def test_new_instances_are_listed_only_after_the_lag_but_found_by_id_at_once(ctx, ami, realism):
    realism.change(listing_lag_s=1.0)
    (instance,) = _launch(ctx, ami)
    assert instance not in _listed(ctx)
    described = ctx.client("ec2").describe_instances(InstanceIds=[instance])["Reservations"]
    assert described[0]["Instances"][0]["InstanceId"] == instance
    time.sleep(1.2)
    assert instance in _listed(ctx)


def test_a_new_instance_is_unknown_by_id_for_the_lag_and_listed_meanwhile(ctx, ami, realism):
    realism.change(by_id_lag_s=1.0)
    (instance,) = _launch(ctx, ami)
    ec2 = ctx.client("ec2")
    for call in (ec2.describe_instances, ec2.terminate_instances):
        with pytest.raises(ClientError) as caught:
            call(InstanceIds=[instance])
        assert caught.value.response["Error"]["Code"] == "InvalidInstanceID.NotFound"
    assert instance in _listed(ctx)
    time.sleep(1.2)
    assert ec2.describe_instances(InstanceIds=[instance])["Reservations"][0]["Instances"][0]["InstanceId"] == instance


def test_the_inventory_has_a_new_instance_at_once_and_follows_its_end(ctx, ami, realism):
    """What the supervisor boots hosts by: the server's own instances, whatever the listing's lag."""
    realism.change(listing_lag_s=5.0)
    (instance,) = _launch(ctx, ami)
    assert instance not in _listed(ctx)
    rows = {row.instance_id: row for row in realism.inventory((ctx.region,))}
    row = rows[instance]
    assert (row.region, row.state, row.spot, row.image_id) == (ctx.region, "running", False, ami)
    assert row.private_ip and row.availability_zone.startswith(ctx.region) and row.instance_type
    ctx.client("ec2").terminate_instances(InstanceIds=[instance])
    assert {r.instance_id: r.state for r in realism.inventory((ctx.region,))}[instance] == "terminated"
    assert realism.inventory(("eu-west-3",)) == ()  # another region's instances are not listed


def test_the_capacity_schedule_holds_in_its_window_and_is_used_up(ctx, realism):
    now = time.time()
    rules = (
        CapacityRule(instance_type="g5.xlarge", market="spot", available=0, ends_at=now - 1),  # over
        CapacityRule(zone="us-east-1a", market="spot", available=2, error_code="UnfulfillableCapacity"),
    )
    realism.set(Realism(capacity=rules))
    assert realism.settings().capacity == rules  # what the server holds, read back over its endpoint
    up(
        _Fixed(ctx),
        UpRequest(
            name="c1",
            plans=(make_plan(spot=1, on_demand=0, instance_type="g5.xlarge"),),
            image_id="ami-0000000000de3b0a1",
            wait_ssh=False,
            on_shortage=ShortagePolicy.ACCEPT,
        ),
    )  # the expired rule no longer holds
    second = up(
        _Fixed(ctx),
        UpRequest(
            name="c2",
            plans=(make_plan(spot=3, on_demand=1),),
            image_id="ami-0000000000de3b0a1",
            wait_ssh=False,
            on_shortage=ShortagePolicy.ACCEPT,
        ),
    )
    (short,) = second.shortfalls  # one of the pool's two spot instances went to c1
    assert (short.got, short.wanted, short.reasons[0].split(":")[0]) == (1, 3, "UnfulfillableCapacity")


def test_a_reclaimed_instance_ends_with_ec2s_state_reason_and_the_cluster_says_so(ctx, realism):
    view = up(
        _Fixed(ctx),
        UpRequest(name="c1", plans=(make_plan(spot=1, on_demand=1),), image_id="ami-0000000000de3b0a1", wait_ssh=False),
    ).view
    spot = next(n for n in view.nodes if n.market.value == "spot")
    realism.reclaim("us-east-1", spot.instance_id, SPOT_TERMINATION)
    raw = ctx.client("ec2").describe_instances(InstanceIds=[spot.instance_id])["Reservations"][0]["Instances"][0]
    assert raw["State"]["Name"] == "terminated" and raw["StateReason"]["Code"] == "Server.SpotInstanceTermination"
    cluster = Cluster.open("c1")
    assert cluster.refresh()
    events = [e.message for e in Store().events("c1") if e.kind == "ended"]
    assert events == [f"{spot.instance_id} terminated: Server.SpotInstanceTermination"]


def test_a_terminated_instance_is_forgotten_after_its_time_and_kept_while_it_runs(ctx, ami, realism):
    """forget_terminated_after_s: as AWS, which shows a terminated instance for about an hour and then not at all."""
    realism.change(forget_terminated_after_s=0.5)
    ec2 = ctx.client("ec2")
    ended, running = _launch(ctx, ami, count=2)
    ec2.terminate_instances(InstanceIds=[ended])
    assert ec2.describe_instances(InstanceIds=[ended])["Reservations"]  # seen ended: its time starts
    time.sleep(0.6)
    with pytest.raises(ClientError) as caught:
        ec2.describe_instances(InstanceIds=[ended])
    assert caught.value.response["Error"]["Code"] == "InvalidInstanceID.NotFound"
    assert ended not in _all(ctx) and running in _listed(ctx)
    with pytest.raises(ClientError) as again:
        ec2.terminate_instances(InstanceIds=[ended])
    assert again.value.response["Error"]["Code"] == "InvalidInstanceID.NotFound"


def _all(ctx) -> list[str]:
    pages = ctx.client("ec2").get_paginator("describe_instances").paginate()
    return [i["InstanceId"] for page in pages for r in page["Reservations"] for i in r["Instances"]]


@pytest.mark.parametrize("value", [-1, True, "soon"])
def test_a_forget_time_is_null_or_seconds(value):
    with pytest.raises(ValueError, match="forget_fleets_after_s must be null"):
        Realism.from_json(json.dumps({"forget_fleets_after_s": value}))
    assert Realism.from_json('{"forget_fleets_after_s": null}').forget_fleets_after_s is None


def test_the_control_endpoint_refuses_a_bad_document_in_one_line(moto):
    request = urllib.request.Request(moto + CONTROL_PATH, data=b'{"listing_lag_s": 600}', method="PUT")
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request)
    assert caught.value.code == 400
    assert caught.value.read().decode() == "listing_lag_s must be a number of seconds from 0 to 60, not 600"


class _Fixed(AwsTarget):
    def __init__(self, ctx):
        self.ctx = ctx

    def context(self, region, start=True):
        return self.ctx


def test_the_cli_shows_and_changes_a_running_sandboxs_realism(moto, tmp_path, capsys):
    # a sandbox whose control plane is the test's moto server (this process keeps it alive)
    save_info(SandboxInfo(moto_pid=os.getpid(), moto_port=int(moto.rsplit(":", 1)[1])))
    settings = tmp_path / "realism.json"
    settings.write_text(json.dumps({"listing_lag_s": 3, "capacity": [{"market": "spot", "available": 1}]}))
    assert main(["sandbox", "realism", "--set", str(settings)]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["listing_lag_s"] == 3 and shown["capacity"][0]["available"] == 1
    assert RealismControl(moto).settings().capacity == (CapacityRule(market="spot", available=1),)
    settings.write_text('{"listing_lag_s": "soon"}')
    assert main(["sandbox", "realism", "--set", str(settings)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"deepvm: error: {settings}: listing_lag_s must be a number of seconds from 0 to 60, not 'soon'"
    )
    assert main(["sandbox", "realism", "--reset"]) == 0
    assert json.loads(capsys.readouterr().out)["listing_lag_s"] == SANDBOX.listing_lag_s


def test_sandbox_capacity_empties_a_pool_for_a_while_and_clear_gives_it_back(moto, ctx, tmp_path, capsys):
    """`deepvm sandbox capacity`: the newest rule decides, so that emptying g4dn.xlarge Spot in us-east-1a
    refuses `up` there as AWS does (InsufficientInstanceCapacity in Errors[]), while on-demand still launches;
    bad input is one line and exit 2; --clear restores capacity without end."""
    save_info(SandboxInfo(moto_pid=os.getpid(), moto_port=int(moto.rsplit(":", 1)[1])))
    assert main(["sandbox", "capacity", "--market", "spot", "--available", "5"]) == 0
    capsys.readouterr()
    assert (
        main(
            [
                "sandbox",
                "capacity",
                "--zone",
                "us-east-1a",
                "--type",
                "g4dn.xlarge",
                "--market",
                "spot",
                "--available",
                "0",
                "--for",
                "600",
            ]
        )
        == 0
    )
    shown = json.loads(capsys.readouterr().out)  # the schedule in force, newest rule first
    assert [(r["zone"], r["instance_type"], r["market"], r["available"]) for r in shown] == [
        ("us-east-1a", "g4dn.xlarge", "spot", 0),
        ("*", "*", "spot", 5),
    ]
    rules = RealismControl(moto).settings().capacity
    assert [r.zone for r in rules] == ["us-east-1a", "*"]
    assert rules[0].ends_at is not None and 590 < rules[0].ends_at - time.time() <= 600
    view = up(
        _Fixed(ctx),
        UpRequest(
            name="c1",
            plans=(make_plan(spot=2, on_demand=1),),
            image_id=SANDBOX_IMAGE,
            wait_ssh=False,
            on_shortage=ShortagePolicy.ACCEPT,
        ),
    )
    (short,) = view.shortfalls
    assert (short.got, short.wanted, short.reasons[0].split(":")[0]) == (0, 2, "InsufficientInstanceCapacity")
    for bad, says in (
        (["--market", "spott", "--available", "0"], "--market must be one of spot, on-demand, *"),
        (["--available", "-1"], "--available must be a non-negative number, got -1"),
        (["--type", "g5.xlarge"], "--available N says what the pool may launch"),
        (["--available", "0", "--for", "0"], "--for must be at least 1, got 0"),
        (["--clear", "--available", "1"], "--clear and --available are alternatives"),
    ):
        assert main(["sandbox", "capacity", *bad]) == 2, bad
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and says in err, err
    assert main(["sandbox", "capacity", "--clear"]) == 0
    assert json.loads(capsys.readouterr().out) == [] and RealismControl(moto).settings().capacity == ()
