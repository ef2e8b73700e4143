"""Properties of every reader of user files: whatever document or text it is handed (random JSON, random
YAML, random edits of a valid file, random mutations of a valid plan, catalog or job spec), it either
accepts it as valid or refuses it with its domain error, each line of which is one clean line (no newline,
no NUL, nothing unprintable in a job spec's); never another exception.

The parsers run in this process, so a few hundred examples take seconds."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from provisioning.catalog.files import load_catalog_file
from provisioning.catalog.json_form import CatalogFormatError, catalog_from_dict
from provisioning.clusters.plan_choice import checked_plans, load_plans
from provisioning.core.errors import InputError
from tests.conftest import examples
from tests.documents import JOB, own_catalog, plan_document
from training.shared.jobspec import JobSpec, load_job_spec

_FAST = settings(max_examples=examples(100))

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30).filter(lambda s: s != "aws"),
)
_json = st.recursive(
    _scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=10), inner, max_size=3)),
    max_leaves=8,
)

# what makes YAML and JSON go wrong: structure, quoting, anchors, tags, odd characters
_SIGNIFICANT = st.sampled_from([*":-[]{},&*!|>'\"#%@`\\\n\t .0123456789eE+", "\x00", "\u202e", "\ufeff", "é"])
_edit_text = st.text(_SIGNIFICANT, min_size=1, max_size=6) | st.text(max_size=6)


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    """Every place in a document a value can be put: existing keys and items, and one new key per object."""
    found = [prefix]
    if isinstance(node, dict):
        found.append((*prefix, "new_key"))
        for key, child in node.items():
            found.extend(_paths(child, (*prefix, key)))
    elif isinstance(node, list):
        for index, child in enumerate(node):
            found.extend(_paths(child, (*prefix, index)))
    return found


def _mutated(data: st.DataObject, base: Any) -> Any:
    """`base` with one value replaced by a random one, or one key dropped."""
    doc = copy.deepcopy(base)
    path = data.draw(st.sampled_from(_paths(doc)))
    if not path:
        return data.draw(_json)
    node: Any = doc
    for key in path[:-1]:
        node = node[key]
    if data.draw(st.booleans()) and isinstance(node, dict) and path[-1] in node:
        del node[path[-1]]
    else:
        node[path[-1]] = data.draw(_json)
    return doc


def _edited(data: st.DataObject, text: str) -> str:
    """`text` after a few random insertions, deletions and repeated lines."""
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(text)))
        edit = data.draw(st.sampled_from(["insert", "delete", "repeat-line"]))
        if edit == "insert":
            text = text[:at] + data.draw(_edit_text) + text[at:]
        elif edit == "delete":
            text = text[:at] + text[at + data.draw(st.integers(1, 8)) :]
        else:
            lines = text.splitlines(keepends=True) or [""]
            index = min(at, len(lines) - 1)
            text = "".join(lines[: index + 1] + lines[index:])
    return text


def _clean(message: str) -> None:
    assert message and "\n" not in message and "\x00" not in message, repr(message)


# plans and catalogs, as documents


@_FAST
@given(st.data())
def test_a_mutated_plan_is_accepted_or_refused_in_one_clean_line(data):
    doc = _mutated(data, plan_document())
    try:
        loaded = checked_plans(doc, "plan.json")
    except InputError as exc:
        assert str(exc).startswith("plan.json: "), str(exc)
        _clean(str(exc))
        return
    assert loaded.plans and all(sum(g.count for g in p.nodes) >= 1 for p in loaded.plans)
    assert all(math.isfinite(p.price_per_hour) for p in loaded.plans)


@_FAST
@given(st.data())
def test_a_mutated_catalog_is_accepted_or_refused_in_one_clean_line(data):
    doc = _mutated(data, {**own_catalog(), "types": own_catalog()["types"][:4]})
    try:
        catalog = catalog_from_dict(doc)
    except CatalogFormatError as exc:
        _clean(str(exc))
        return
    assert all(math.isfinite(p.usd_per_hour) and p.usd_per_hour >= 0 for p in catalog.prices)


# plan and catalog files, as text


def _plan_text() -> str:
    return json.dumps(plan_document(), indent=1)


def _catalog_text() -> str:
    return json.dumps({**own_catalog(), "types": own_catalog()["types"][:4]}, indent=1)


@pytest.mark.parametrize(
    ("valid", "load"), [(_plan_text, load_plans), (_catalog_text, load_catalog_file)], ids=["plan-file", "catalog-file"]
)
@_FAST
@given(data=st.data())
def test_any_json_or_an_edited_valid_file_is_accepted_or_one_line(tmp_path, valid, load, data):
    text = data.draw(st.one_of(_json.map(json.dumps), st.just(valid()).map(lambda v: _edited(data, v))))
    path = tmp_path / "input.json"
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    try:
        assert load(path)
    except InputError as exc:
        _clean(str(exc))
        assert str(path) in str(exc)


# job specs


_FIELDS = sorted(set(JobSpec.model_fields) | {"lr", "kind", "samples", "script", "every_steps", "<<"})
_yaml_keys = st.one_of(st.sampled_from(_FIELDS), st.text(max_size=8), st.integers(-3, 3))
_yaml_data = st.recursive(
    _scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_yaml_keys, inner, max_size=4)),
    max_leaves=10,
)


def _job_outcome(path: Path) -> None:
    """Load the job file: a spec, or an InputError whose every line names the file and is printable."""
    try:
        spec = load_job_spec(path)
    except InputError as exc:
        for line in exc.lines:
            _clean(line)
            assert line.isprintable(), repr(line)
            assert str(path) in line, line
        return
    assert isinstance(spec, JobSpec)
    assert (spec.steps is not None) or (spec.epochs is not None)


def _write_job(path: Path, text: str) -> Path:
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    return path


@_FAST
@given(_yaml_data)
def test_any_yaml_document_as_a_job_file_is_a_spec_or_clean_lines(tmp_path, data):
    _job_outcome(_write_job(tmp_path / "job.yaml", yaml.safe_dump(data, allow_unicode=True)))


@_FAST
@given(st.data())
def test_a_mutated_job_spec_is_a_spec_or_clean_lines(tmp_path, data):
    doc = _mutated(data, yaml.safe_load(JOB))
    _job_outcome(_write_job(tmp_path / "job.yaml", yaml.safe_dump(doc, allow_unicode=True)))


@_FAST
@given(st.data())
def test_an_edited_job_file_is_a_spec_or_clean_lines(tmp_path, data):
    _job_outcome(_write_job(tmp_path / "job.yaml", _edited(data, JOB + "optimizer: {lr: 0.1}\nenv: {A: b}\n")))
