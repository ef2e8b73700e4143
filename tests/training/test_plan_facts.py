"""GPUs and TFLOPS come from the plan, which takes them from the catalog it was made with: a
`--catalog FILE` type that the built-in snapshot lacks gets a rank per GPU (it used to get one rank)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from provisioning.catalog.json_form import catalog_to_dict
from provisioning.catalog.model import Catalog, InstanceType, Market, Price
from provisioning.catalog.snapshot import load_snapshot
from provisioning.clusters.plan_choice import load_plans
from provisioning.core.errors import InputError
from provisioning.planner.plan import NodeGroup, Role
from tests.cloud.plans import make_plan
from training.control.plan_facts import UNKNOWN, TypeFacts, planned_trainer_ranks, type_facts

GPU_TYPE = "g9x.4xlarge"  # a type of the user's own catalog: the built-in snapshot has never heard of it


@pytest.fixture
def planned(tmp_path, cli):
    """`deepvm plan --catalog FILE --json` on a catalog of a 4-GPU type and a CPU holder; the plan file."""
    assert GPU_TYPE not in load_snapshot().types
    catalog = Catalog(
        types={
            GPU_TYPE: InstanceType(GPU_TYPE, "G and VT", 16, 64.0, 25.0, "T4", 4, 260.0),
            "c5.xlarge": InstanceType("c5.xlarge", "Standard", 4, 8.0, 10.0),
        },
        prices=[
            Price(GPU_TYPE, "us-east-1", None, Market.ON_DEMAND, 2.0),
            Price(GPU_TYPE, "us-east-1", "us-east-1a", Market.SPOT, 0.6),
            Price("c5.xlarge", "us-east-1", None, Market.ON_DEMAND, 0.17),
        ],
        quotas=[],
        source="test",
        as_of="2026-11-01",
    )
    catalog_file = tmp_path / "catalog.json"
    catalog_file.write_text(json.dumps(catalog_to_dict(catalog)))
    result = cli("plan", "--catalog", str(catalog_file), "--max-price", "3", "--json")
    assert result.returncode == 0, result.stderr
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(result.stdout)
    return plan_file


def test_the_plan_states_the_gpus_of_a_type_the_snapshot_lacks_and_training_runs_a_rank_per_gpu(planned):
    document = json.loads(planned.read_text())
    groups = [g for g in document["plans"][0]["nodes"] if g["instance_type"] == GPU_TYPE]
    assert groups and all((g["gpus"], g["tflops"]) == (4, 260.0) for g in groups)
    plan = load_plans(planned).plans[0]  # as `deepvm up --plan` reads and checks it
    assert type_facts(plan)[GPU_TYPE] == TypeFacts(260.0, 4)
    trainers = sum(g.count for g in plan.nodes if g.role is not Role.HOLDER)
    assert trainers >= 1 and planned_trainer_ranks(plan) == 4 * trainers


def test_gpus_that_are_not_the_catalog_s_are_refused(planned):
    document = json.loads(planned.read_text())
    document["plans"][0]["nodes"][0]["gpus"] = 8
    planned.write_text(json.dumps(document))
    with pytest.raises(InputError, match=rf"plans\[0\]\.nodes\[0\]\.gpus: {GPU_TYPE} has 4 GPUs in catalog .*, not 8"):
        load_plans(planned)


@pytest.mark.parametrize("gpus", ["4", True, 2.5, -1, 65])
def test_gpus_are_a_small_json_integer(planned, gpus):
    document = json.loads(planned.read_text())
    document["plans"][0]["nodes"][0]["gpus"] = gpus
    planned.write_text(json.dumps(document))
    with pytest.raises(InputError, match=r"plans\[0\]\.nodes\[0\]\.gpus: must be an integer from 0 to 64"):
        load_plans(planned)


def test_a_plan_that_states_no_gpus_gets_the_catalog_s(planned):
    document = json.loads(planned.read_text())
    for group in document["plans"][0]["nodes"]:
        del group["gpus"], group["tflops"]
    planned.write_text(json.dumps(document))
    plan = load_plans(planned).plans[0]
    assert type_facts(plan)[GPU_TYPE] == TypeFacts(260.0, 4)


def test_a_plan_recorded_before_plans_stated_gpus_asks_the_built_in_snapshot():
    old = make_plan(spot=2, on_demand=1)  # its groups state no GPUs, as clusters recorded earlier
    assert all(g.gpus is None for g in old.nodes)
    known = load_snapshot().types["g4dn.xlarge"]
    assert type_facts(old)["g4dn.xlarge"] == TypeFacts(known.flops, known.gpu_count)
    assert planned_trainer_ranks(old) == 3 * known.gpu_count
    unknown = NodeGroup(GPU_TYPE, Market.SPOT, 2, Role.TRAINER, 0.6)
    assert type_facts(replace(old, nodes=(unknown,)))[GPU_TYPE] == UNKNOWN
