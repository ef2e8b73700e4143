"""ctx.log's path off the step: the call checks and queues, a thread reads the values and sends them."""

from __future__ import annotations

import json
import threading

import pytest
import torch

from training.node import metrics_log
from training.node.metrics_log import MetricsLog


class SlowTensor:
    """A one-element tensor whose reading waits until the test lets it (as a CUDA tensor waits for the GPU)."""

    dtype = torch.float32

    def __init__(self, value: float) -> None:
        self.value = value
        self.reading, self.release = threading.Event(), threading.Event()

    def numel(self) -> int:
        return 1

    def detach(self) -> SlowTensor:
        return self

    def __float__(self) -> float:
        self.reading.set()
        assert self.release.wait(10)
        return self.value


def sent(capfd: pytest.CaptureFixture[str]) -> list[dict]:
    return [json.loads(line) for line in capfd.readouterr().out.splitlines()]


def test_the_call_returns_while_the_value_is_still_being_read_and_close_sends_it(capfd):
    log = MetricsLog(rank=0)
    slow = SlowTensor(0.25)
    log.log(3, {"loss": slow, "lr": 0.1})  # returns although reading `slow` cannot finish yet
    assert slow.reading.wait(10) and sent(capfd) == []
    slow.release.set()
    log.close()
    assert sent(capfd) == [{"event": "metrics", "rank": 0, "step": 3, "values": {"loss": 0.25, "lr": 0.1}}]


def test_a_tensor_in_the_graph_is_sent_as_its_number(capfd):
    weight = torch.tensor(2.0, requires_grad=True)
    log = MetricsLog(rank=0)
    log.log(1, {"loss": weight * 3, "tokens": torch.tensor(7)})
    log.close()
    assert sent(capfd) == [{"event": "metrics", "rank": 0, "step": 1, "values": {"loss": 6.0, "tokens": 7.0}}]


def test_other_ranks_check_their_points_and_send_none(capfd):
    log = MetricsLog(rank=1)
    log.log(1, {"loss": 1.0})
    log.close()
    assert sent(capfd) == []
    with pytest.raises(ValueError, match="'bad name' is not a scalar name"):
        log.log(1, {"bad name": 1.0})


@pytest.mark.parametrize(
    ("step", "values", "message"),
    [
        (-1, {"loss": 1.0}, "the step must be a whole number >= 0"),
        (1.5, {"loss": 1.0}, "the step must be a whole number >= 0"),
        (1, {}, "name at least one scalar"),
        (1, {"loss": "low"}, "loss='low' is not a number"),
        (1, {"loss": True}, "loss=True is not a number"),
        (1, {"loss": torch.ones(3)}, "is not a number"),
        (1, {f"m{i}": 1.0 for i in range(65)}, "at most 64 scalars"),
    ],
)
def test_a_point_tensorboard_would_not_take_is_refused_at_the_call(step, values, message):
    with pytest.raises(ValueError, match=message):
        MetricsLog(rank=0).log(step, values)


def test_a_full_queue_drops_the_newest_points_and_says_so_once(capfd, monkeypatch):
    monkeypatch.setattr(metrics_log, "QUEUE_POINTS", 4)
    log = MetricsLog(rank=0)
    slow = SlowTensor(1.0)
    log.log(1, {"loss": slow})
    assert slow.reading.wait(10)  # the thread holds point 1: 4 more fit in the queue
    for step in range(2, 9):
        log.log(step, {"loss": float(step)})
    assert log.dropped == 3
    slow.release.set()
    log.close()
    out = capfd.readouterr()
    assert [json.loads(line)["step"] for line in out.out.splitlines()] == [1, 2, 3, 4, 5]
    assert out.err.count("ctx.log drops points") == 1
