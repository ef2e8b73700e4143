"""The job's checkpoint plan: `checkpoint:` read once, into what every stage asks (training.shared.checkpointplan)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from deepcheck import Level
from training.shared.checkpointplan import Kept
from training.shared.jobspec import JobSpec

ROOT = Path(__file__).resolve().parents[2]
WORKER = {"dataset": {"kind": "synthetic"}, "steps": 10}
SCRIPT = {"run": {"script": "train.py", "calls_step": False}}


def _spec(job: dict, **checkpoint) -> JobSpec:
    return JobSpec.model_validate({**job, "checkpoint": checkpoint})


@pytest.mark.parametrize(
    ("levels", "expected"),
    [
        (["l1"], {Level.L1}),
        (["l2"], {Level.L2}),
        (["l1", "l2"], {Level.L1, Level.L2}),
        (["l2", "l3"], {Level.L2, Level.L3}),
        (["l3", "l2", "l1"], {Level.L1, Level.L2, Level.L3}),
    ],
)
def test_the_levels_are_the_ones_named_and_only_l3_outlives_the_holders(levels, expected):
    plan = _spec(WORKER, levels=levels, s3_prefix="s3://ckpts/run").checkpoint_plan
    assert plan.levels == expected
    assert (plan.l3 is not None) is (Level.L3 in expected) is plan.outlives_holders
    assert (plan.s3_config() is not None) is plan.outlives_holders


def test_l3_writes_under_the_prefix_named_or_deepchecks_own_in_a_bare_bucket():
    plan = _spec(WORKER, levels=["l2", "l3"], s3_prefix="s3://ckpts/team/run-7/").checkpoint_plan
    assert plan.l3 is not None
    assert (plan.l3.url, plan.l3.bucket, plan.l3.prefix) == ("s3://ckpts/team/run-7/", "ckpts", "team/run-7")
    bare = _spec(WORKER, levels=["l2", "l3"], s3_prefix="s3://ckpts").checkpoint_plan.s3_config()
    assert bare is not None and (bare.bucket, bare.prefix) == ("ckpts", "deepcheck")


def test_what_a_checkpoint_keeps_follows_the_run():
    worker = _spec(WORKER, every_steps=5, buffer_slots=3).checkpoint_plan
    assert (worker.kept, worker.every_steps, worker.every_seconds, worker.ram_slots) == (Kept.STATE, 5, None, 3)
    assert worker.files == ()
    script = _spec(SCRIPT, every_seconds=30, files=["snapshot.pt", "ckpt/*"]).checkpoint_plan
    assert (script.kept, script.every_seconds, script.files) == (Kept.FILES, 30, ("snapshot.pt", "ckpt/*"))
    stepping = _spec({"run": {"script": "train.py"}, "steps": 100}).checkpoint_plan
    assert stepping.kept is Kept.STATE


def test_a_spec_builds_its_plan_once():
    spec = _spec(WORKER)
    assert spec.checkpoint_plan is spec.checkpoint_plan


def test_no_stage_reads_the_checkpoint_settings_but_the_plan():
    """One reading: a stage that asked the job file's checkpoint fields itself would be a second plan."""
    direct = re.compile(r"\.checkpoint\.(levels|every_steps|every_seconds|buffer_slots|s3_prefix|files)\b")
    allowed = {ROOT / "training/shared/jobspec.py", ROOT / "training/shared/checkpointplan.py"}
    readers = [
        f"{path.relative_to(ROOT)}:{number}"
        for room in ("training", "deepvm_cli", "provisioning", "deepcheck", "simulation")
        for path in sorted((ROOT / room).rglob("*.py"))
        if path not in allowed
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if direct.search(line.split("#")[0])
    ]
    assert readers == []
