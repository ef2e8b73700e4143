"""`deepvm chaos --trace` replaying a capacity series into a moto server's realism layer: at each sample the
schedule read back from the server holds one rule for the plan's zone's Spot market, what is free (the
capacity less the nodes held), CreateFleet is refused as AWS refuses an empty pool, the nodes above a drop
are reclaimed, and the rule is gone at the end with the user's own kept."""

from __future__ import annotations

import json

import pytest

from deepvm_cli.main import main
from provisioning.cloud.types import ShortageError, ShortagePolicy
from provisioning.clusters.lifecycle import UpRequest, up
from provisioning.clusters.target import AwsTarget
from provisioning.sandbox.capacity_feed import TraceCapacity
from provisioning.sandbox.realism import SANDBOX_IMAGE, CapacityRule, Realism
from simulation.chaos import LiveNode
from simulation.chaos_capacity import CapacityStep, Levels, replay_capacity
from tests.cloud.plans import AZ, make_plan
from tests.simulation.test_chaos_capacity import question


class _Fixed(AwsTarget):
    def __init__(self, ctx):
        self.ctx = ctx

    def context(self, region, start=True):
        return self.ctx


class _Cluster:
    """Three Spot nodes, and a head that buys back what it lacks whenever the server's schedule lets it."""

    def __init__(self, realism) -> None:
        self.realism, self.bought = realism, 3
        self.nodes = {f"i-{k}": f"2026-11-25T10:00:0{k}" for k in range(3)}
        self.reclaimed: list[tuple[str, bool]] = []

    def live_spot(self) -> list[LiveNode]:
        return [LiveNode(i, "g4dn.xlarge", at) for i, at in self.nodes.items()]

    def reclaim(self, instance_id: str, notice: bool) -> str:
        self.reclaimed.append((instance_id, notice))
        del self.nodes[instance_id]
        return f"{instance_id} reclaimed"

    def head_buys(self) -> None:
        rule = next((r for r in self.realism.settings().capacity if r.zone == AZ and r.market == "spot"), None)
        for _ in range(min(3 - len(self.nodes), 3 if rule is None else rule.available)):
            self.nodes[f"i-{self.bought}"] = f"2026-11-25T10:01:{self.bought:02d}"
            self.bought += 1


def test_the_sandbox_schedule_follows_the_series_and_is_cleared_at_the_end(ctx, realism):
    theirs = CapacityRule(instance_type="p3.2xlarge", market="on-demand", available=5)
    realism.set(Realism(capacity=(theirs,)))
    cluster, seen = _Cluster(realism), []
    steps = [
        CapacityStep(0.0, 0.0, 3),
        CapacityStep(30.0, 0.083, 1),
        CapacityStep(60.0, 0.167, 0),
        CapacityStep(90.0, 0.25, 2),
        CapacityStep(120.0, 0.333, 3),
    ]

    def wait_until(at_s: float) -> float:
        cluster.head_buys()
        return at_s

    def report(action, messages) -> None:
        seen.append((action.step.nodes, action.held, action.free, realism.settings().capacity))
        if action.free == 0:  # a purchase now gets EC2's answer for an empty pool
            with pytest.raises(ShortageError, match=r"got 0/1 spot g4dn.xlarge \(InsufficientInstanceCapacity"):
                up(
                    _Fixed(ctx),
                    UpRequest(
                        name=f"probe{len(seen)}",
                        plans=(make_plan(spot=1, on_demand=0),),
                        image_id=SANDBOX_IMAGE,
                        wait_ssh=False,
                        on_shortage=ShortagePolicy.ACCEPT,
                    ),
                )

    draws = question().market_case().draws()
    actions = replay_capacity(steps, Levels(3), draws, cluster, TraceCapacity(realism, AZ), wait_until, report)
    assert [(c, held, free) for c, held, free, _ in seen] == [(3, 3, 0), (1, 1, 0), (0, 0, 0), (2, 0, 2), (3, 2, 1)]
    for _, _, free, rules in seen:  # the replay's rule first (it decides), the user's kept
        assert rules == (CapacityRule(zone=AZ, instance_type="*", market="spot", available=free), theirs)
    assert [r.instance_id for a in actions for r in a.reclaimed] == ["i-2", "i-1", "i-0"]  # highest level first
    assert all(notice for _, notice in cluster.reclaimed)  # notice_share 1: every reclaim with its notice
    assert realism.settings().capacity == (theirs,)  # the replay's rule is gone
    assert json.dumps(actions[1].to_dict())  # --json's form


def test_a_replay_that_fails_halfway_still_takes_its_rule_away(realism):
    class Broken(_Cluster):
        def reclaim(self, instance_id, notice):
            raise RuntimeError("the cloud went away")

    with pytest.raises(RuntimeError):
        replay_capacity(
            [CapacityStep(0.0, 0.0, 3), CapacityStep(1.0, 0.1, 0)],
            Levels(3),
            question().market_case().draws(),
            Broken(realism),
            TraceCapacity(realism, AZ),
            lambda at_s: at_s,
            lambda action, messages: None,
        )
    assert realism.settings().capacity == ()


def test_a_capacity_trace_needs_a_sandbox_cluster(ctx, moto, capsys):
    up(
        _Fixed(ctx),
        UpRequest(name="c1", plans=(make_plan(spot=1, on_demand=0),), image_id=SANDBOX_IMAGE, wait_ssh=False),
    )
    code = main(["chaos", "--cluster", "c1", "--trace", "aws-v100-16-us-west-2a", "--steps", "10", "--step-time", "1"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(
        "deepvm: error: aws-v100-16-us-west-2a is a capacity series: chaos replays it into "
        "the sandbox's capacity schedule, and cluster 'c1' is not a running sandbox cluster"
    )
