"""`deepvm chaos`: interrupt a live cluster's Spot nodes as one simulated run of a trace says.

The schedule is the simulator's own (simulation/chaos.py), so a `deepvm train` run under it can be set
against `deepvm simulate`'s prediction for the same run (benchmarks/simulate_vs_sandbox.py). A loss with
notice goes through `deepvm interrupt`'s code; one without is a termination through the EC2 API. The
cluster's nodes are read again before each step, so replacements that joined take their slots. numpy and
the simulator load only inside the command, so registering it costs `deepvm plan` nothing.

A capacity trace (a series of how many Spot nodes a zone holds) is replayed instead as the market the head's
ladder meets (simulation/chaos_capacity.py): at each sample the nodes above the zone's capacity are reclaimed,
and the sandbox's capacity schedule for the plan's zone's Spot market follows the series, so the head's
purchases are refused as AWS refuses them when the pool is empty. That needs the sandbox's EC2.
"""

from __future__ import annotations

import signal
import time
from typing import TYPE_CHECKING

import typer

from deepvm_cli.ui import console
from deepvm_cli.ui.cluster_choice import choose_cluster, open_chosen
from deepvm_cli.ui.flags import DAY_S, MAX_SEED, MAX_STEPS, at_least, positive
from provisioning.core.errors import CloudError, InputError

if TYPE_CHECKING:
    from provisioning.cloud.types import NodeRecord
    from provisioning.clusters.handle import Cluster
    from simulation.chaos import ChaosAction, ChaosQuestion, ChaosStep, LiveNode, SlotMap
    from simulation.chaos_capacity import CapacityAction

MAX_TIME_SCALE = 1_000_000.0  # a trace hour in 3.6 ms: beyond that the schedule is a burst, not a trace


def chaos(
    cluster: str | None = typer.Option(
        None, "--cluster", help="The running cluster to interrupt (default: the config file's, else the last one used)."
    ),
    trace: str = typer.Option(None, "--trace", help="A shipped trace's name, or a trace file."),
    steps: int = typer.Option(None, "--steps", callback=positive(MAX_STEPS), help="Training steps of the job."),
    step_time: float = typer.Option(
        None, "--step-time", callback=positive(DAY_S), help="Seconds per step here, on the whole plan."
    ),
    seed: int = typer.Option(0, "--seed", callback=at_least(0, MAX_SEED), help="Random seed (as `simulate`'s)."),
    time_scale: float = typer.Option(
        1.0,
        "--time-scale",
        callback=positive(MAX_TIME_SCALE),
        help="Trace time passes this many times faster here (180: a trace hour in 20 s).",
    ),
    notice_share: float = typer.Option(
        1.0, "--notice-share", callback=at_least(0, 1), help="Share of reclaims with a notice (0-1)."
    ),
    after: int = typer.Option(
        120, "--after", callback=at_least(0, DAY_S), help="Seconds between a notice and its interruption."
    ),
    replacement_delay: float = typer.Option(
        None,
        "--replacement-delay",
        callback=at_least(0, DAY_S),
        help="Seconds here until a replacement joins (default: the simulator's 300, compressed).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the executed schedule as one JSON object."),
) -> None:
    """Interrupt the cluster's Spot nodes on one simulated run's schedule, drawn from a trace."""
    for flag, value in (("--trace", trace), ("--steps", steps), ("--step-time", step_time)):
        if value is None:
            raise InputError(f"{flag} is required")
    from provisioning.clusters.plan_choice import catalog_of
    from simulation.chaos import ChaosQuestion, SlotMap, recovery_here
    from simulation.traces import resolve_trace

    chosen = resolve_trace(trace)
    handle = open_chosen(choose_cluster(cluster), "--cluster NAME", running=False)
    cluster = handle.name
    if not handle.is_up:
        raise CloudError(f"cluster {cluster!r} is {handle.row.status.value}, not up")
    plan = handle.plan
    catalog = catalog_of(plan)
    question = ChaosQuestion(
        plan,
        catalog,
        chosen,
        seed,
        steps,
        step_time,
        time_scale,
        recovery_here(time_scale, notice_share, replacement_delay),
    )
    if chosen.capacity is not None:
        done = _replay_capacity(question, handle, after)
        if as_json:
            console.print_json(
                {
                    "cluster": cluster,
                    "trace": chosen.name,
                    "seed": seed,
                    "time_scale": time_scale,
                    "capacity": [a.to_dict() for a in done],
                }
            )
        return
    schedule = question.schedule()
    console.info(
        f"chaos on {cluster}: {len(schedule)} Spot losses from {chosen.name} (seed {seed}), "
        f"a trace hour every {3600.0 / time_scale:g} s"
    )
    slots = SlotMap.for_plan(plan, catalog)
    actions, start = [], time.monotonic()
    for step in schedule:
        time.sleep(max(0.0, start + step.at_s - time.monotonic()))
        actions.append(_carry_out(step, slots, handle, after, time.monotonic() - start))
    if as_json:
        console.print_json(
            {
                "cluster": cluster,
                "trace": chosen.name,
                "seed": seed,
                "time_scale": time_scale,
                "actions": [a.to_dict() for a in actions],
            }
        )


def _carry_out(step: ChaosStep, slots: SlotMap, cluster: Cluster, after: int, elapsed_s: float) -> ChaosAction:
    from simulation.chaos import ChaosAction, LiveNode

    live = _running_spot(cluster)
    slots.update(LiveNode(n.instance_id, n.instance_type, n.launched_at) for n in live.values())
    instance_id = slots.take(step.slot)
    if instance_id is None:
        message = f"slot {step.slot} ({step.instance_type}) has no live node: its replacement has not joined"
    else:
        message = _take(cluster, live[instance_id], step.notice, after)
    console.info(f"[{elapsed_s:7.1f} s | trace {step.trace_at_h:8.3f} h] {message}")
    return ChaosAction(step, instance_id, elapsed_s, message)


def _running_spot(cluster: Cluster, zone: str | None = None) -> dict[str, NodeRecord]:
    """The cluster's running Spot nodes (of `zone`, when given; a node without one is of the plan's zone), read
    again from the cloud: nodes the head bought as replacements join."""
    from provisioning.catalog.model import Market
    from provisioning.clusters.handle import RUNNING

    cluster.refresh()
    home = cluster.row.plan.availability_zone
    return {
        n.instance_id: n
        for n in cluster.nodes()
        if n.market is Market.SPOT and n.state == RUNNING and (zone is None or (n.availability_zone or home) == zone)
    }


def _take(cluster: Cluster, node: NodeRecord, notice: bool, after: int) -> str:
    """A loss with notice (`deepvm interrupt`'s code) or without (terminated); what was done, in words."""
    try:
        return cluster.interrupt(node, after) if notice else cluster.terminate_without_notice(node)
    except CloudError as exc:  # the node went on its own meanwhile: the schedule goes on
        return f"{node.instance_id} could not be interrupted: {exc}"


def _replay_capacity(question: ChaosQuestion, cluster: Cluster, after: int) -> list[CapacityAction]:
    """The capacity series replayed into the sandbox's schedule for the plan's zone (module docstring)."""
    from provisioning.cloud.types import CloudKind
    from provisioning.sandbox.capacity_feed import TraceCapacity
    from provisioning.sandbox.control import running_sandbox
    from provisioning.sandbox.realism import RealismControl
    from simulation.chaos import LOOKAHEAD
    from simulation.chaos_capacity import Levels, capacity_steps, replay_capacity
    from simulation.market_run import run_market, run_offset_h

    info = running_sandbox()
    if cluster.row.cloud is not CloudKind.SANDBOX or info is None:
        raise InputError(
            f"{question.trace.name} is a capacity series: chaos replays it into the sandbox's capacity "
            f"schedule, and cluster {cluster.name!r} is not a running sandbox cluster"
        )
    case = question.market_case()
    draws = case.draws()
    offset_h = run_offset_h(case, draws)
    predicted = run_market(case, draws, 0)
    steps = capacity_steps(case, offset_h, question.time_scale, LOOKAHEAD * predicted.makespan_h)
    zone = question.plan.availability_zone
    console.info(
        f"chaos on {cluster.name}: the Spot capacity of {zone} from {question.trace.name} (seed "
        f"{question.seed}, {offset_h:.3f} h in), {len(steps)} samples, a trace hour every "
        f"{3600.0 / question.time_scale:g} s"
    )
    start = time.monotonic()

    def wait_until(at_s: float) -> float:
        time.sleep(max(0.0, start + at_s - time.monotonic()))
        return time.monotonic() - start

    def report(action: CapacityAction, messages: list[str]) -> None:
        for message in messages:
            console.info(f"[{action.done_at_s:7.1f} s | trace {action.step.trace_at_h:8.3f} h] {message}")
        console.info(
            f"[{action.done_at_s:7.1f} s | trace {action.step.trace_at_h:8.3f} h] capacity "
            f"{action.step.nodes}: {action.held} held, {action.free} free in {zone}"
        )

    # `kill` (SIGTERM) ends chaos as Ctrl-C does, so replay_capacity's `finally` takes its capacity rule away:
    # by Python's default a SIGTERM ends the process at once, and the sandbox would go on refusing Spot there
    before = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        return replay_capacity(
            steps,
            Levels(case.levels),
            draws,
            _LiveSpot(cluster, zone, after),
            TraceCapacity(RealismControl(info.endpoint), zone),
            wait_until,
            report,
        )
    finally:
        signal.signal(signal.SIGTERM, before)


class _LiveSpot:
    """The cluster's running Spot nodes of one zone, read again at each sample (chaos_capacity.SpotNodes)."""

    def __init__(self, cluster: Cluster, zone: str, after: int) -> None:
        self.cluster, self.zone, self.after = cluster, zone, after
        self.live: dict[str, NodeRecord] = {}

    def live_spot(self) -> list[LiveNode]:
        from simulation.chaos import LiveNode

        self.live = _running_spot(self.cluster, self.zone)
        return [LiveNode(n.instance_id, n.instance_type, n.launched_at) for n in self.live.values()]

    def reclaim(self, instance_id: str, notice: bool) -> str:
        return _take(self.cluster, self.live[instance_id], notice, self.after)


def register(app: typer.Typer) -> None:
    app.command("chaos")(chaos)
