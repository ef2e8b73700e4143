"""Valid documents of each kind a user hands deepvm (a plan, a catalog, a job spec) and ways to spoil them:
the bad-input table (tests/test_bad_inputs.py) and the property tests (tests/test_input_properties.py)
start from these."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from provisioning.catalog.json_form import catalog_to_dict
from provisioning.catalog.snapshot import load_snapshot
from tests.cloud.plans import make_plan, make_tiering_plan
from tests.conftest import DATA

Mutation = Callable[[Any], Any]


def plan_document() -> dict[str, Any]:
    """plans[0]: Single Anchor (nodes[0] the on-demand anchor, nodes[1] 3 spot trainers);
    plans[1]: Tiering (nodes[0] 3 spot trainers, nodes[1] an on-demand c5.xlarge holder)."""
    return {"plans": [make_plan(spot=3, on_demand=1).to_dict(), make_tiering_plan().to_dict()]}


def own_catalog() -> dict[str, Any]:
    """The built-in snapshot in deepvm's catalog format (types[0] is g4dn.xlarge, types[3] g4dn.8xlarge)."""
    return catalog_to_dict(load_snapshot())


def deepvm_catalog() -> dict[str, Any]:
    """DeepVM's own data.json (instances[1] is g4dn.xlarge)."""
    return json.loads((DATA / "deepvm_data.json").read_text())


JOB = """\
name: t
seed: 3
model:
  name: resnet34
  num_classes: 10
dataset:
  kind: synthetic
  samples: 64
steps: 5
batch_size: 8
"""  # ten lines: a line appended to it is line 11


def set_at(path: str | tuple[str | int, ...], value: Any) -> Mutation:
    """Set the value at a path of the document: a tuple of keys, or dotted ("plans.0.nodes.1.count")."""
    keys = _keys(path)

    def mutate(doc: Any) -> Any:
        _parent(doc, keys)[keys[-1]] = value
        return doc

    return mutate


def drop_at(path: str) -> Mutation:
    keys = _keys(path)

    def mutate(doc: Any) -> Any:
        del _parent(doc, keys)[keys[-1]]
        return doc

    return mutate


def _parent(doc: Any, path: tuple[str | int, ...]) -> Any:
    for key in path[:-1]:
        doc = doc[key]
    return doc


def _keys(path: str | tuple[str | int, ...]) -> tuple[str | int, ...]:
    if isinstance(path, tuple):
        return path
    return tuple(int(key) if key.isdigit() else key for key in path.split("."))
