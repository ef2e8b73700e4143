"""The job spec: the shipped configs load, and every user mistake is one line naming file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioning.errors import InputError
from training.jobspec import Cifar10Data, JobSpec, SyntheticData, load_job_spec

REPO = Path(__file__).resolve().parents[2]

GOOD = """\
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
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(text)
    return path


def error_of(path: Path) -> str:
    with pytest.raises(InputError) as info:
        load_job_spec(path)
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("name", ["resnet.yaml", "resnet-cifar10.yaml", "own-script.yaml"])
def test_shipped_configs_load(name):
    spec = load_job_spec(REPO / "configs" / name)
    assert isinstance(spec, JobSpec)


def test_default_rehearsal_is_synthetic_and_small():
    spec = load_job_spec(REPO / "configs" / "resnet.yaml")
    assert spec.is_synthetic and isinstance(spec.dataset, SyntheticData)
    assert spec.steps is not None and spec.steps <= 300
    assert spec.checkpoint.every_steps is not None


def test_good_spec_values_and_defaults(tmp_path):
    spec = load_job_spec(write(tmp_path, GOOD))
    assert spec.model.name == "resnet34"
    assert spec.dataset.samples == 64
    assert spec.dataset.image_shape == (3, 32, 32)
    assert spec.optimizer.name == "sgd"
    assert spec.shrink.keep_global_batch_by == "per_trainer_batch"
    assert spec.run is None


def test_unknown_nested_field_names_field_and_line(tmp_path):
    path = write(tmp_path, GOOD.replace("  num_classes: 10\n", "  num_classes: 10\n  depth: 18\n"))
    assert error_of(path) == f"{path}:6: model.depth: unknown field"


def test_unknown_top_level_field(tmp_path):
    path = write(tmp_path, GOOD + "epochz: 3\n")
    assert error_of(path) == f"{path}:11: epochz: unknown field"


def test_wrong_type_names_value(tmp_path):
    path = write(tmp_path, GOOD.replace("batch_size: 8", "batch_size: abc"))
    assert error_of(path) == f"{path}:10: batch_size: expected an integer, got 'abc'"


def test_wrong_type_inside_discriminated_union(tmp_path):
    path = write(tmp_path, GOOD.replace("samples: 64", "samples: many"))
    assert error_of(path) == f"{path}:8: dataset.samples: expected an integer, got 'many'"


def test_unknown_field_inside_union_member(tmp_path):
    path = write(tmp_path, GOOD.replace("  samples: 64\n", "  samples: 64\n  colour: red\n"))
    assert error_of(path) == f"{path}:9: dataset.colour: unknown field"


def test_bad_choice_lists_allowed_values(tmp_path):
    path = write(tmp_path, GOOD.replace("resnet34", "resnet101"))
    message = error_of(path)
    assert message.startswith(f"{path}:4: model.name: expected 'resnet18', 'resnet34' or 'resnet50'")
    assert "'resnet101'" in message


def test_unknown_dataset_kind(tmp_path):
    path = write(tmp_path, GOOD.replace("kind: synthetic", "kind: imagenet"))
    message = error_of(path)
    assert message.startswith(f"{path}:7: dataset.kind: unknown kind 'imagenet'")


def test_missing_required_section(tmp_path):
    text = "\n".join(
        line for line in GOOD.splitlines() if not line.startswith(("dataset", "  kind", "  samples"))
    )
    path = write(tmp_path, text + "\n")
    assert error_of(path) == f"{path}:1: dataset: required field missing"


def test_steps_and_epochs_are_exclusive(tmp_path):
    path = write(tmp_path, GOOD + "epochs: 2\n")
    assert "give exactly one of steps or epochs" in error_of(path)


def test_num_classes_must_match_dataset(tmp_path):
    path = write(tmp_path, GOOD.replace("num_classes: 10", "num_classes: 7"))
    assert "model.num_classes is 7 but the dataset has 10 classes" in error_of(path)


def test_cifar_needs_exactly_one_source(tmp_path):
    text = GOOD.replace("kind: synthetic\n  samples: 64", "kind: cifar10\n  path: /d\n  s3: s3://b/p")
    path = write(tmp_path, text)
    assert error_of(path) == f"{path}:6: dataset: give exactly one of path or s3"


def test_cifar_s3_must_be_url(tmp_path):
    path = write(tmp_path, GOOD.replace("kind: synthetic\n  samples: 64", "kind: cifar10\n  s3: bucket/p"))
    assert error_of(path) == f"{path}:8: dataset.s3: expected an s3://bucket/prefix URL, got 'bucket/p'"


def test_cifar_spec(tmp_path):
    spec = load_job_spec(
        write(tmp_path, GOOD.replace("kind: synthetic\n  samples: 64", "kind: cifar10\n  path: d"))
    )
    assert isinstance(spec.dataset, Cifar10Data) and not spec.is_synthetic


def test_l3_needs_s3_prefix(tmp_path):
    path = write(tmp_path, GOOD + "checkpoint:\n  levels: [l1, l3]\n")
    assert error_of(path) == f"{path}:11: checkpoint: level l3 needs s3_prefix: s3://bucket/prefix"


def test_bad_level_in_list_points_at_item(tmp_path):
    path = write(tmp_path, GOOD + "checkpoint:\n  levels:\n    - l1\n    - l9\n")
    message = error_of(path)
    assert message.startswith(f"{path}:14: checkpoint.levels.1: expected 'l1', 'l2' or 'l3'")


def test_env_scalars_become_text(tmp_path):
    spec = load_job_spec(write(tmp_path, GOOD + "env:\n  OMP_NUM_THREADS: 1\n  DEBUG: true\n  X: a\n"))
    assert spec.env == {"OMP_NUM_THREADS": "1", "DEBUG": "1", "X": "a"}


OWN = """\
name: mine
steps: 40
checkpoint: {every_steps: 10}
run:
  script: train.py
  args: [--fast, --lr, 0.1, --epochs, 3]
"""


def own_job(tmp_path: Path, text: str = OWN) -> Path:
    (tmp_path / "train.py").write_text("print('training')\n")
    return write(tmp_path, text)


def test_run_override_needs_no_model_or_data(tmp_path):
    spec = load_job_spec(own_job(tmp_path))
    assert spec.run is not None and spec.run.script == "train.py"
    assert spec.run.args == ["--fast", "--lr", "0.1", "--epochs", "3"]  # numbers are text, as on a command line
    assert spec.dataset is None and spec.steps == 40 and not spec.is_synthetic


def test_run_script_in_a_subdirectory(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "main.py").write_text("")
    assert load_job_spec(own_job(tmp_path, OWN.replace("train.py", "src/main.py"))).run.script == "src/main.py"


def test_run_script_must_exist_beside_the_job(tmp_path):
    path = own_job(tmp_path, OWN.replace("train.py", "trian.py"))
    assert error_of(path) == f"{path}:5: run.script: no such file: {tmp_path.resolve() / 'trian.py'}"


def test_run_script_outside_the_job_directory(tmp_path):
    (tmp_path / "job").mkdir()
    (tmp_path / "train.py").write_text("")
    path = write(tmp_path / "job", OWN.replace("train.py", "../train.py"))
    assert error_of(path).startswith(f"{path}:5: run.script: ../train.py is outside {(tmp_path / 'job').resolve()}")


def test_run_script_absolute_path(tmp_path):
    path = own_job(tmp_path, OWN.replace("train.py", str(tmp_path / "train.py")))
    assert error_of(path).startswith(f"{path}:5: run.script: give a path relative to {tmp_path.resolve()}")


def test_run_needs_a_script(tmp_path):
    path = own_job(tmp_path, OWN.replace("  script: train.py\n", ""))
    assert error_of(path) == f"{path}:4: run.script: required field missing"


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        ("args: [--fast, --lr, 0.1, --epochs, 3]", "args: --fast", "6: run.args: expected a list, got '--fast'"),
        ("args: [--fast, --lr, 0.1, --epochs, 3]", "args: [--fast, true]", "6: run.args.1: expected a string"),
        ("script: train.py", "script: [train.py]", "5: run.script: expected a string, got ['train.py']"),
        (
            "run:\n  script: train.py\n  args: [--fast, --lr, 0.1, --epochs, 3]",
            "run: train.py",
            "4: run: expected a mapping, got 'train.py'",
        ),
        ("  args:", "  argv:", "6: run.argv: unknown field"),
    ],
)
def test_run_bad_types(tmp_path, before, after, expected):
    path = own_job(tmp_path, OWN.replace(before, after))
    assert error_of(path).startswith(f"{path}:{expected}")


@pytest.mark.parametrize("field", ["model: {name: resnet99}", "dataset: {kind: synthetic}", "batch_size: 8",
                                   "optimizer: {lr: 0.1}", "schedule: {name: none}", "shrink: {}"])  # fmt: skip
def test_run_refuses_the_workers_fields(tmp_path, field):
    path = own_job(tmp_path, OWN + field + "\n")
    name = field.split(":")[0]
    assert error_of(path) == f"{path}:7: {name}: deepvm's worker only: your `run:` script chooses its own; remove it"


def test_run_counts_steps_not_epochs(tmp_path):
    path = own_job(tmp_path, OWN.replace("steps: 40", "epochs: 2"))
    assert error_of(path) == f"{path}:2: epochs: with `run:` give steps: deepvm cannot count your script's epochs"
    path = own_job(tmp_path, OWN.replace("steps: 40\n", ""))
    assert error_of(path).startswith(f"{path}:3: run: needs steps: N")


def test_several_errors_report_the_first_line_and_a_count(tmp_path):
    path = write(tmp_path, GOOD.replace("batch_size: 8", "batch_size: x") + "bogus: 1\n")
    assert error_of(path) == f"{path}:10: batch_size: expected an integer, got 'x' (and 1 more)"


def test_missing_file(tmp_path):
    path = tmp_path / "nope.yaml"
    assert error_of(path) == f"{path}: no such file"


def test_bad_yaml_names_line(tmp_path):
    path = write(tmp_path, "name: t\nmodel: [unclosed\nsteps: 3\n")
    message = error_of(path)
    assert message.startswith(f"{path}:")
    assert "invalid YAML" in message


def test_top_level_must_be_mapping(tmp_path):
    path = write(tmp_path, "- a\n- b\n")
    assert error_of(path) == f"{path}:1: expected a mapping of job fields at the top level"


def test_empty_file(tmp_path):
    path = write(tmp_path, "")
    assert error_of(path) == f"{path}:1: expected a mapping of job fields at the top level"
