"""The job spec: the shipped configs load, and every user mistake is one line naming file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioning.core.errors import InputError, InputErrors
from tests.documents import JOB as GOOD
from training.shared.jobspec import Cifar10Data, JobSpec, SyntheticData, load_job_spec

REPO = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(text)
    return path


def errors_of(path: Path) -> tuple[str, ...]:
    """The lines a job file with several mistakes is refused with."""
    with pytest.raises(InputErrors) as info:
        load_job_spec(path)
    return info.value.lines


def error_of(path: Path) -> str:
    """The one line a bad job file is refused with."""
    with pytest.raises(InputError) as info:
        load_job_spec(path)
    assert not isinstance(info.value, InputErrors), info.value.lines
    message = str(info.value)
    assert message.isprintable(), message
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
    assert error_of(path) == f"{path}:6: model.depth: unknown field; did you mean width?"


def test_unknown_top_level_field(tmp_path):
    path = write(tmp_path, GOOD + "epochz: 3\n")
    assert error_of(path) == f"{path}:11: epochz: unknown field; did you mean epochs?"


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
    text = "\n".join(line for line in GOOD.splitlines() if not line.startswith(("dataset", "  kind", "  samples")))
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
    spec = load_job_spec(write(tmp_path, GOOD.replace("kind: synthetic\n  samples: 64", "kind: cifar10\n  path: d")))
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


def test_a_script_without_ctx_step_may_ask_for_an_output_silence_limit(tmp_path):
    spec = load_job_spec(own_job(tmp_path, "run: {script: train.py, calls_step: false}\nstall: {silence: 1800}\n"))
    assert not spec.calls_step and spec.stall.silence == 1800 and spec.stall.startup_grace is None
    assert load_job_spec(own_job(tmp_path)).calls_step and load_job_spec(write(tmp_path, GOOD)).calls_step


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
    assert error_of(path) == (
        f"{path}:4: run: give exactly one of script (your script, started as torchrun starts "
        "it) or command (your own launch line, once per node)"
    )


@pytest.mark.parametrize(
    ("run", "expected"),
    [
        ("{command: torchrun train.py, script: train.py}", "give exactly one of script"),
        ("{command: torchrun train.py, args: [--lr, 1]}", "args are a script's; write them into the command"),
        ("{command: torchrun train.py, calls_step: true}", "a command's processes cannot call ctx.step()"),
    ],
)
def test_a_command_is_a_launch_line_of_its_own(tmp_path, run, expected):
    (tmp_path / "train.py").write_text("")
    job = tmp_path / "job.yaml"
    job.write_text(f"run: {run}\n")
    assert expected in error_of(job)
    job.write_text("run: {command: torchrun train.py}\ncheckpoint: {files: [ckpt/]}\n")  # calls_step: false, implied
    spec = load_job_spec(job)
    assert spec.run is not None and (spec.run.calls_step, spec.run.label) == (False, "torchrun train.py")


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


@pytest.mark.parametrize(
    "field",
    [
        "model: {name: resnet99}",
        "dataset: {kind: synthetic}",
        "batch_size: 8",
        "optimizer: {lr: 0.1}",
        "schedule: {name: none}",
        "shrink: {}",
    ],
)
def test_run_refuses_the_workers_fields(tmp_path, field):
    path = own_job(tmp_path, OWN + field + "\n")
    name = field.split(":")[0]
    assert error_of(path) == f"{path}:7: {name}: deepvm's worker only: your `run:` script chooses its own; remove it"


def test_run_counts_steps_not_epochs(tmp_path):
    path = own_job(tmp_path, OWN.replace("steps: 40", "epochs: 2"))
    assert error_of(path) == f"{path}:2: epochs: with `run:` give steps: deepvm cannot count your script's epochs"
    path = own_job(tmp_path, OWN.replace("steps: 40\n", ""))
    assert error_of(path).startswith(f"{path}:3: run: needs steps: N")


def test_several_errors_are_all_reported_each_with_its_line_and_a_suggestion(tmp_path):
    text = GOOD.replace("steps: 5", "step: 5").replace("batch_size: 8", "batch_size: x") + "optimizer: {lr: .nan}\n"
    path = write(tmp_path, text.replace("  samples: 64", "  sample: 64"))
    assert errors_of(path) == (
        f"{path}:8: dataset.sample: unknown field; did you mean samples?",
        f"{path}:9: step: unknown field; did you mean steps?",
        f"{path}:10: batch_size: expected an integer, got 'x'",
        f"{path}:11: optimizer.lr: must be a finite number, got nan",
    )


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("optimizer: {lr: .inf}", "11: optimizer.lr: must be a finite number, got inf"),
        ("optimizer: {lr: .nan}", "11: optimizer.lr: must be a finite number, got nan"),
        ("optimizer: {lr: -1}", "11: optimizer.lr: must be greater than 0, got -1"),
        ("checkpoint: {every_seconds: .inf}", "11: checkpoint.every_seconds: must be a finite number, got inf"),
        ("schedule: {warmup_steps: -1}", "11: schedule.warmup_steps: must be at least 0, got -1"),
        ("log_every: 100000000000000000000", "11: log_every: must be at most 1000000000, got 100000000000000000000"),
        ("env: {A-B: x}", "11: env.A-B: 'A-B' is not an environment variable name"),
        ("env: {'': x}", "11: env.'': '' is not an environment variable name"),
        ('env: {X: "a\\0b"}', "11: env.X: must not contain the character '\\x00'"),
        ('setup: ["echo \\u202e hi"]', "11: setup.0: must not contain the character '\\u202e'"),
        ("batch_size: 9", "11: batch_size: duplicate key (first given at line 10)"),
        ("env: {A: x, A: y}", "11: env.A: duplicate key (first given at line 11)"),
        ('"new\\nline": 1', "11: 'new\\nline': unknown field"),
        ("stall: {silence: 0}", "11: stall.silence: must be at least 1, got 0"),
        ("stall: {silence: 86401}", "11: stall.silence: must be at most 86400, got 86401"),
        ("stall: {silence: .inf}", "11: stall.silence: must be a finite number, got inf"),
        ("stall: {silence: true}", "11: stall.silence: expected a number, got True"),  # not a limit of 1 s
        ("stall: {silence: '30'}", "11: stall.silence: expected a number, got '30'"),
        ("stall: {quiet: 30}", "11: stall.quiet: unknown field"),
    ],
)
def test_one_bad_value_is_one_line(tmp_path, line, expected):
    path = write(tmp_path, GOOD + line + "\n")
    message = error_of(path)
    assert message.startswith(f"{path}:{expected}"), message


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("resnet18-cifar10", True),
        ("a.b_c-9", True),
        ("x" * 64, True),
        ("x" * 65, False),
        ("../up", False),
        ("a/b", False),
        ("-x", False),
        ("", False),
        ("a\x00b", False),
        ("bad\u202ename", False),
        ("a b", False),
    ],
)
def test_the_job_name_is_a_directory_name(tmp_path, name, ok):
    path = write(tmp_path, GOOD.replace("name: t", f"name: {name!r}".replace("'", '"') if name else 'name: ""'))
    if ok:
        assert load_job_spec(path).name == name
    else:
        assert error_of(path).startswith(f"{path}:1: name: must be 1 to 64 letters, digits")


def test_a_duplicate_key_and_its_mistakes_are_all_reported(tmp_path):
    path = write(tmp_path, GOOD.replace("batch_size: 8", "batch_size: 8\nbatch_size: 100000000000000000000"))
    assert errors_of(path) == (
        f"{path}:11: batch_size: duplicate key (first given at line 10)",
        f"{path}:11: batch_size: must be at most 65536, got 100000000000000000000",
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: " + "[" * 3000 + "]" * 3000 + "\n", "1: YAML nested more than 32 levels deep"),
        ("a:\n" + "".join("  " * i + "- \n" for i in range(1, 60)), "33: YAML nested more than 32 levels deep"),
        ("a: &a [*a]\n", "1: an alias refers to a node that contains it"),
        (
            "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
            + "".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 9)),
            "expands to more than 100,000 values (aliases)",
        ),
        ("steps: 2024-13-45\n", "1: invalid YAML value '2024-13-45' (month must be in 1..12)"),
        ("steps: !!int x\n", "1: invalid YAML value 'x'"),
        ("steps: !!timestamp x\n", "1: invalid YAML value 'x'"),
        ("a: b\n---\nc: d\n", "2: invalid YAML: but found another document"),
    ],
)
def test_hostile_yaml_is_one_line(tmp_path, text, expected):
    path = write(tmp_path, text)
    message = error_of(path)
    assert message.startswith(f"{path}:") and expected in message, message


def test_a_file_that_is_not_a_job_file(tmp_path):
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    assert error_of(tmp_path / "loop") == f"cannot read job file {tmp_path / 'loop'}: its symbolic links form a loop"
    assert error_of(Path("/dev/zero")) == "job file is not a regular file: /dev/zero"
    assert error_of(tmp_path) == f"job file is a directory: {tmp_path}"
    big = tmp_path / "big.yaml"
    with open(big, "wb") as handle:
        handle.truncate(60 * 1024 * 1024)
    assert error_of(big) == f"job file {big} is larger than 256 KiB; refusing to read it"
    latin1 = tmp_path / "latin1.yaml"
    latin1.write_bytes(b"name: caf\xe9\n")
    assert error_of(latin1) == f"{latin1} is not UTF-8 text (byte 9); save the job file as UTF-8"


def test_a_missing_job_file_suggests_the_one_meant(tmp_path, monkeypatch):
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "resnet.yaml").write_text(GOOD)
    monkeypatch.chdir(tmp_path)
    assert error_of(Path("resnet.yaml")) == "job file not found: resnet.yaml; did you mean configs/resnet.yaml?"
    assert error_of(Path("configs/resnt.yaml")) == (
        "job file not found: configs/resnt.yaml; did you mean configs/resnet.yaml?"
    )
    assert error_of(Path("other.yaml")) == "job file not found: other.yaml"


def test_missing_file(tmp_path):
    path = tmp_path / "nope.yaml"
    assert error_of(path) == f"job file not found: {path}"


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


def test_a_models_width_is_read_and_a_width_of_zero_is_refused_with_its_line(tmp_path):
    assert load_job_spec(write(tmp_path, GOOD)).model.width == 64  # ResNet's own when not given
    narrow = GOOD.replace("model:\n", "model:\n  width: 16\n", 1)
    assert load_job_spec(write(tmp_path, narrow)).model.width == 16
    path = write(tmp_path, GOOD.replace("model:\n", "model:\n  width: 0\n", 1))
    assert error_of(path).startswith(f"{path}:")
    assert "width" in error_of(path)


def test_l3_without_l2_is_refused_as_it_uploads_from_the_disks(tmp_path):
    path = write(tmp_path, GOOD + "checkpoint:\n  levels: [l1, l3]\n  s3_prefix: s3://b/p\n")
    assert "level l3 is uploaded from the holders' disks: list l2 with it" in error_of(path)
