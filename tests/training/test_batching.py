"""Batch plans, the elastic distributed sampler, the LR schedule and the rank environment."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from provisioning.core.errors import InputError
from training.node.batchplan import plan_batches
from training.node.distenv import from_environment
from training.node.sampler import GlobalBatchSampler, SamplerPosition
from training.node.schedule import lr_factor
from training.shared.jobspec import ScheduleSpec


def test_per_trainer_batch_keeps_global_batch_when_shrinking():
    full = plan_batches(32, 3, 3, "per_trainer_batch")
    shrunk = plan_batches(32, 2, 3, "per_trainer_batch")
    assert full.per_rank == (32, 32, 32) and shrunk.per_rank == (48, 48)
    assert shrunk.global_batch == full.global_batch == 96 and shrunk.lr_scale == 1.0
    assert plan_batches(10, 3, 2, "per_trainer_batch").per_rank == (7, 7, 6)


def test_lr_scaling_keeps_trainer_batch_and_scales_lr():
    plan = plan_batches(32, 2, 3, "lr_scaling")
    assert plan.per_rank == (32, 32) and math.isclose(plan.lr_scale, 2 / 3)


def test_explicit_rank_batches_for_mixed_plans():
    plan = plan_batches(32, 3, 3, "per_trainer_batch", explicit=[48, 32, 16])
    assert plan.per_rank == (48, 32, 16) and plan.lr_scale == 1.0
    assert [plan.offset(r) for r in range(3)] == [0, 48, 80]
    # DDP averages over ranks; with each rank's mean loss weighted, that is the global-batch mean
    losses = torch.rand(96, dtype=torch.float64)
    parts = losses.split(list(plan.per_rank))
    ddp_average = sum(plan.loss_weight(r) * parts[r].mean() for r in range(3)) / 3
    assert math.isclose(float(ddp_average), float(losses.mean()))
    assert math.isclose(plan_batches(32, 2, 3, "lr_scaling", explicit=[40, 24]).lr_scale, 64 / 96)
    with pytest.raises(InputError, match="need 3 positive sizes"):
        plan_batches(32, 3, 3, "per_trainer_batch", explicit=[1, 2])


@given(
    size=st.integers(20, 200),
    batches=st.lists(st.integers(1, 9), min_size=1, max_size=4),
    seed=st.integers(0, 5),
)
def test_sampler_partitions_each_global_batch(size, batches, seed):
    plan = plan_batches(1, len(batches), len(batches), "per_trainer_batch", explicit=batches)
    if plan.global_batch > size:
        return
    samplers = [GlobalBatchSampler(size, plan, r, seed) for r in range(len(batches))]
    seen: list[int] = []
    for _ in range(samplers[0].steps_per_epoch):
        parts = [s.indices() for s in samplers]
        assert [len(p) for p in parts] == batches
        seen += torch.cat(parts).tolist()
        for s in samplers:
            s.advance()
    assert len(seen) == len(set(seen)) == samplers[0].steps_per_epoch * plan.global_batch
    assert samplers[0].epoch == 1  # the remainder is dropped: the next step starts epoch 1


def test_sampler_resumes_on_a_different_world_size():
    big = plan_batches(4, 2, 2, "per_trainer_batch")  # (4, 4)
    one = plan_batches(4, 1, 2, "per_trainer_batch")  # (8,)
    a = [GlobalBatchSampler(50, big, r, seed=3) for r in range(2)]
    for _ in range(3):
        for s in a:
            s.advance()
    expected = torch.cat([s.indices() for s in a])
    resumed = GlobalBatchSampler(50, one, 0, seed=3, position=a[0].position)
    assert torch.equal(resumed.indices(), expected)


def test_epochs_use_different_orders():
    plan = plan_batches(10, 1, 1, "per_trainer_batch")
    s = GlobalBatchSampler(10, plan, 0, seed=0)
    first = s.indices()
    s.advance()
    assert s.epoch == 1 and not torch.equal(s.indices(), first)
    assert sorted(s.indices().tolist()) == list(range(10))


def test_sampler_rejects_batch_larger_than_dataset():
    with pytest.raises(ValueError, match="larger than the dataset"):
        GlobalBatchSampler(5, plan_batches(4, 2, 2, "per_trainer_batch"), 0, 0, SamplerPosition())


def test_schedules():
    cos = ScheduleSpec(name="cosine", warmup_steps=4, min_lr_ratio=0.1)
    assert [lr_factor(cos, s, 20) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert lr_factor(cos, 4, 20) == 1.0
    assert math.isclose(lr_factor(cos, 12, 20), 0.55)
    assert lr_factor(cos, 19, 20) > 0.1
    step = ScheduleSpec(name="step", step_every=5, gamma=0.5)
    assert [lr_factor(step, s, 20) for s in (0, 4, 5, 10)] == [1.0, 1.0, 0.5, 0.25]
    one = ScheduleSpec(name="onecycle", warmup_steps=10)
    assert math.isclose(lr_factor(one, 0, 100), 1 / 25 + (24 / 25) / 10)
    assert lr_factor(one, 9, 100) == 1.0 and lr_factor(one, 99, 100) < 0.01
    assert lr_factor(ScheduleSpec(name="none"), 50, 100) == 1.0


def test_rank_environment_from_open_mpi():
    env = from_environment(
        {
            "OMPI_COMM_WORLD_RANK": "2",
            "OMPI_COMM_WORLD_SIZE": "4",
            "OMPI_COMM_WORLD_LOCAL_RANK": "0",
            "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
            "MASTER_ADDR": "127.0.0.5",
        }
    )
    assert (env.rank, env.world_size, env.local_rank, env.local_size) == (2, 4, 0, 2)
    assert (env.master_addr, env.master_port) == ("127.0.0.5", 29500)


def test_rank_environment_torchrun_and_overrides():
    env = from_environment({"RANK": "1", "WORLD_SIZE": "2", "MASTER_PORT": "1234"}, master_addr="10.0.0.1")
    assert (env.rank, env.world_size, env.master_addr, env.master_port) == (1, 2, "10.0.0.1", 1234)
    assert from_environment({}).world_size == 1
    with pytest.raises(InputError, match="outside a world of 2"):
        from_environment({"RANK": "2", "WORLD_SIZE": "2"})
