"""Replacement buying (training/control/replacements.py) with a buyer and a stager of our own: what comes back on
the queue, in which order, and that purchases take turns. Real threads, no cloud. What to buy, where
(an order's pool: zone, type, market) is the recovery ladder's: tests/training/test_controller_market.py."""

from __future__ import annotations

import queue
import threading

from provisioning.catalog.model import Market
from provisioning.cloud.types import SshEndpoint
from provisioning.core.errors import CloudError
from provisioning.planner.plan import NodeGroup, Role
from training.control.replacements import (
    NodeOrder,
    ReplacementBought,
    ReplacementNote,
    ReplacementReady,
    Replacements,
)
from training.control.staging import NodeState
from training.shared.events import Notice


def _endpoint(instance_id: str, role: Role = Role.TRAINER) -> SshEndpoint:
    market = Market.SPOT if role is Role.TRAINER else Market.ON_DEMAND
    return SshEndpoint(instance_id, "127.0.0.1", "10.0.0.1", 22, "root", role, market, "/k", "/kh")


class _Cloud:
    """Buys numbered nodes on request; `gate` holds every purchase until the test opens it."""

    def __init__(self, fail: str | None = None) -> None:
        self.bought: list[tuple[Role, int]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.fail = fail

    def buy(self, order: NodeOrder, note) -> list[SshEndpoint]:
        self.gate.wait(timeout=10)
        role, count = order.role, order.count
        note(f"launching {order.describe()}")
        if self.fail:
            raise CloudError(self.fail)
        start = len(self.bought)
        self.bought.append((role, count))
        return [_endpoint(f"i-{role.value}-{start}-{n}", role) for n in range(count)]


def _order(role: Role, count: int) -> NodeOrder:
    market = Market.SPOT if role is Role.TRAINER else Market.ON_DEMAND
    return NodeOrder(NodeGroup("g4dn.xlarge", market, count, role, 0.2), "us-east-1b")


def _stage(nodes: list[SshEndpoint], note) -> dict[str, NodeState]:
    return {e.instance_id: NodeState("/root", None) for e in nodes}


def _replacements(cloud: _Cloud, stage=_stage):
    events: queue.Queue[object] = queue.Queue()
    return Replacements(cloud.buy, stage, events.put), events


def _ready(events: queue.Queue[object]) -> ReplacementReady:
    while True:
        item = events.get(timeout=10)
        if isinstance(item, ReplacementReady):
            return item


def test_buys_the_order_and_posts_the_bought_then_the_staged_nodes():
    cloud = _Cloud()
    replacements, events = _replacements(cloud)
    replacements.start(_order(Role.TRAINER, 2))
    notes = []
    while not isinstance(item := events.get(timeout=10), ReplacementReady):
        notes.append(item)
    ids = ["i-trainer-0-0", "i-trainer-0-1"]
    assert notes[0] == ReplacementNote("launching 2 spot g4dn.xlarge trainers in us-east-1b")
    assert notes[1:] == [ReplacementBought(_order(Role.TRAINER, 2), tuple(item.added))]  # before they are staged
    assert item.error is None and item.order == _order(Role.TRAINER, 2)
    assert [e.instance_id for e in item.added] == ids
    assert set(item.states) == set(ids)
    assert cloud.bought == [(Role.TRAINER, 2)]


def test_a_refused_purchase_comes_back_as_its_reason():
    cloud = _Cloud(fail="InsufficientInstanceCapacity in us-east-1a")
    replacements, events = _replacements(cloud)
    replacements.start(_order(Role.HOLDER, 1))
    done = _ready(events)
    assert done == ReplacementReady(_order(Role.HOLDER, 1), (), {}, "InsufficientInstanceCapacity in us-east-1a")


def test_a_node_that_cannot_be_staged_is_not_handed_over():
    def stage(nodes, note):
        raise CloudError("setup failed on trainer-i-1")

    replacements, events = _replacements(_Cloud(), stage=stage)
    replacements.start(_order(Role.TRAINER, 1))
    done = _ready(events)
    assert done.added == () and done.error == "setup failed on trainer-i-1"


def test_what_staging_found_travels_with_the_nodes():
    notice = Notice("instance-action", '{"action": "terminate", "time": "2026-11-23T10:00:00Z"}', 1.0)

    def stage(nodes, note):
        return {e.instance_id: NodeState("/home/ubuntu", notice) for e in nodes}

    replacements, events = _replacements(_Cloud(), stage=stage)
    replacements.start(_order(Role.TRAINER, 1))
    done = _ready(events)
    assert [s.notice for s in done.states.values()] == [notice]


def test_wait_returns_once_the_threads_are_done():
    cloud = _Cloud()
    cloud.gate.clear()
    replacements, events = _replacements(cloud)
    replacements.start(_order(Role.TRAINER, 3))
    threading.Timer(0.2, cloud.gate.set).start()
    replacements.wait(timeout_s=10)
    assert cloud.bought == [(Role.TRAINER, 3)]
    assert _ready(events).error is None


def test_nodes_bought_but_not_staged_come_back_stranded_and_any_failure_is_answered():
    """Whatever goes wrong after buying, the controller hears of it (it waits for the answer) and learns
    which nodes were bought for nothing, so that it retires them instead of letting them bill."""

    def stage(nodes, note):
        raise OSError("connection reset while copying the job")

    replacements, events = _replacements(_Cloud(), stage=stage)
    replacements.start(_order(Role.TRAINER, 2))
    done = _ready(events)
    assert done.added == () and done.error == "OSError: connection reset while copying the job"
    assert done.stranded == ("i-trainer-0-0", "i-trainer-0-1")


def test_purchases_take_turns_so_a_second_loss_is_replaced_too():
    """Buying holds the cluster's lock, which refuses a second purchase at once: a loss while a replacement
    is being bought must wait for it, not fail and leave the cluster a node short."""
    cloud = _Cloud()
    cloud.gate.clear()
    buying = threading.Lock()
    plain_buy = cloud.buy

    def locked_buy(order, note):
        if not buying.acquire(blocking=False):
            raise CloudError("another deepvm command is working on cluster c; wait for it to finish")
        try:
            return plain_buy(order, note)
        finally:
            buying.release()

    events: queue.Queue[object] = queue.Queue()
    replacements = Replacements(locked_buy, _stage, events.put)
    replacements.start(_order(Role.TRAINER, 1))
    replacements.start(_order(Role.TRAINER, 1))  # a second loss while the first is bought
    threading.Timer(0.3, cloud.gate.set).start()
    done = [_ready(events), _ready(events)]
    assert [d.error for d in done] == [None, None]
    assert cloud.bought == [(Role.TRAINER, 1), (Role.TRAINER, 1)]
