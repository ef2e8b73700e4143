"""The job spec: what `deepvm train FILE.yaml` runs, validated once on the user's machine.

Every model forbids unknown keys, so a typo fails before a cluster is rented rather than after. The schema is
the contract between the CLI, the launcher and the worker on each rank: the worker re-reads the same file.

A job either trains with deepvm's worker (model, dataset, optimizer, ...) or runs the user's own script
(`run:`, see training/job.py). The worker's fields are refused next to `run:` rather than ignored: a
`model:` that silently does nothing would mislead whoever reads the file. Such a job counts `steps`
(progress and cost are measured in them), and its script must lie in the job file's directory, the
only one pushed to the nodes.

The file is hostile until checked: it is read within limits (training/shared/yamlmarks.py: a regular file of at
most MAX_JOB_BYTES, nesting, aliases, duplicate keys), every number must be finite and within a bound that
still means something (a batch of 10^20 images would only fail later, on a rented cluster), names are
shaped as what they become (the job's name is a directory on every node, an `env` key an environment
variable), and no string may hold NUL (no command line or environment can carry it) or invisible format
characters such as a right-to-left override (a `setup` command must run as it reads). A file with several
mistakes is reported in full, one line each, with a suggestion for a misspelt field.
"""

from __future__ import annotations

import re
import unicodedata
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from provisioning.core.errors import InputError, InputErrors
from provisioning.core.inputfile import KIB
from training.shared.limits import MAX_HOURS, MAX_USD, MAX_USD_PER_HOUR, JobLimits
from training.shared.spec_errors import describe, dotted, place
from training.shared.stallspec import StallSpec
from training.shared.tracking import checked_env
from training.shared.yamlmarks import YamlDocument, locate, read_yaml

if TYPE_CHECKING:
    from training.shared.checkpointplan import CheckpointPlan

MAX_JOB_BYTES = 256 * KIB  # the shipped specs are about 2 KiB, comments included
MAX_STEPS = 10**9  # steps, epochs and intervals in steps: 30 years at a step a second
MAX_BATCH = 65_536  # images per trainer and step; CIFAR's whole training set is 50,000
MAX_SAMPLES = 10_000_000  # synthetic images per node (each is held in memory)
MAX_CLASSES = 100_000
MAX_SIDE = 4096  # pixels of a synthetic image's height or width
MAX_SECONDS = 10**7  # a time interval: 115 days

PositiveInt = Annotated[int, Field(gt=0, le=MAX_STEPS)]
NonNegInt = Annotated[int, Field(ge=0, le=MAX_STEPS)]
Classes = Annotated[int, Field(ge=2, le=MAX_CLASSES)]
Seed = Annotated[int, Field(ge=0, lt=2**32)]  # what every generator accepts, and room for the offsets added


def _text(value: str) -> str:
    """Any text: no NUL or control character (but tab and newline), no invisible format character."""
    for char in value:
        if char not in "\t\n" and unicodedata.category(char) in ("Cc", "Cf", "Cs"):
            raise ValueError(f"must not contain the character {char!r} (a control or invisible format character)")
    return value


_JOB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def _job_name(value: str) -> str:
    if not _JOB_NAME.fullmatch(value):
        raise ValueError(
            "must be 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit (it names the "
            f"job's directories), got {value!r}"
        )
    return value


def _env_name(value: str) -> str:
    if not _ENV_NAME.fullmatch(value):
        raise ValueError(
            f"{value!r} is not an environment variable name (letters, digits and '_', not starting with a digit)"
        )
    return value


Text = Annotated[str, AfterValidator(_text)]
JobName = Annotated[str, AfterValidator(_job_name)]
EnvName = Annotated[str, AfterValidator(_env_name)]


class _Strict(BaseModel):
    """Base of every spec model: unknown keys are errors, numbers are finite, instances are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ModelSpec(_Strict):
    """Which network to train."""

    name: Literal["resnet18", "resnet34", "resnet50"] = "resnet18"
    num_classes: Classes = 10
    width: Annotated[int, Field(ge=1, le=512)] = 64  # first stage's channels (He et al.'s 64); later stages double


_Side = Annotated[int, Field(gt=0, le=MAX_SIDE)]


class SyntheticData(_Strict):
    """Generated CIFAR-shaped images with learnable class patterns: rehearsals without a download."""

    kind: Literal["synthetic"]
    samples: Annotated[int, Field(gt=0, le=MAX_SAMPLES)] = 4096  # images in the (train) set
    image_shape: tuple[Literal[3], _Side, _Side] = (3, 32, 32)  # channels, height, width
    classes: Classes = 10
    seed: Seed = 0  # the same seed gives the same images on every node


class Cifar10Data(_Strict):
    """CIFAR-10 in its python (pickle) format, from a local path or an S3 prefix."""

    kind: Literal["cifar10"]
    path: Text | None = None  # cifar-10-batches-py/, its parent, or the .tar.gz; relative: to the job dir
    s3: Text | None = None  # s3://bucket/prefix holding the files above; downloaded into cache_dir
    cache_dir: Text = "~/.cache/deepvm/datasets"
    augment: bool = True  # random crop (padding 4) and horizontal flip on the train set

    @field_validator("s3")
    @classmethod
    def _s3_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("s3://"):
            raise ValueError(f"expected an s3://bucket/prefix URL, got {value!r}")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> Cifar10Data:
        if (self.path is None) == (self.s3 is None):
            raise ValueError("give exactly one of path or s3")
        return self


DatasetSpec = Annotated[SyntheticData | Cifar10Data, Field(discriminator="kind")]


class OptimizerSpec(_Strict):
    """The optimizer; for adam and adamw `momentum` is beta1."""

    name: Literal["sgd", "adam", "adamw"] = "sgd"
    lr: Annotated[float, Field(gt=0)] = 0.1
    momentum: Annotated[float, Field(ge=0, lt=1)] = 0.9
    weight_decay: Annotated[float, Field(ge=0)] = 5e-4


class ScheduleSpec(_Strict):
    """Learning-rate schedule over the whole run, after a linear warmup."""

    name: Literal["none", "step", "cosine", "onecycle"] = "cosine"
    warmup_steps: NonNegInt = 0  # linear ramp from 0 (onecycle: from lr/25) up to lr
    step_every: PositiveInt = 1000  # `step`: multiply by gamma every this many steps
    gamma: Annotated[float, Field(gt=0, le=1)] = 0.1  # `step`: the factor
    min_lr_ratio: Annotated[float, Field(ge=0, le=1)] = 0.0  # `cosine`: final lr as a fraction of lr


def _kept_path(value: str) -> str:
    """A kept path stays inside the script's working directory: nothing else is put back on a node."""
    if not value or value.startswith(("/", "~")) or ".." in Path(value).parts:
        raise ValueError(f"give a path relative to the job directory, inside it, got {value!r}")
    return value


KeptPath = Annotated[str, AfterValidator(_text), AfterValidator(_kept_path)]


class CheckpointSpec(_Strict):
    """When and where DeepCheck saves. `levels` are where checkpoints are kept, exactly (deepcheck.init's levels):
    l1 the holders' RAM ring, l2 their disks, l3 S3 (uploaded from l2's files, so it needs l2).

    With both every_steps and every_seconds set, a checkpoint is due at whichever comes first.
    """

    every_steps: PositiveInt | None = 50
    every_seconds: Annotated[float, Field(gt=0, le=MAX_SECONDS)] | None = None
    levels: list[Literal["l1", "l2", "l3"]] = Field(default_factory=lambda: ["l1", "l2"])
    buffer_slots: Annotated[int, Field(gt=0, le=64)] = 2  # checkpoints the remote tier's ring buffer holds
    s3_prefix: Text | None = None  # where l3 writes; required when l3 is listed
    # a launched script's own checkpoint files (run.calls_step: false): paths, directories or globs relative to
    # its working directory, kept through DeepCheck as they are closed and put back on every trainer before
    # every launch (training.node.keptfiles); $DEEPVM_CHECKPOINT_DIR is always kept besides
    files: list[KeptPath] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> CheckpointSpec:
        if self.every_steps is None and self.every_seconds is None:
            raise ValueError("give every_steps or every_seconds")
        if not self.levels:
            raise ValueError("levels: list at least one of l1, l2, l3")
        if len(set(self.levels)) != len(self.levels):
            raise ValueError("levels: each level may appear once")
        if "l3" in self.levels and not (self.s3_prefix and self.s3_prefix.startswith("s3://")):
            raise ValueError("level l3 needs s3_prefix: s3://bucket/prefix")
        if "l3" in self.levels and "l2" not in self.levels:
            raise ValueError("level l3 is uploaded from the holders' disks: list l2 with it ([l2, l3] or [l1, l2, l3])")
        return self


class ShrinkPolicy(_Strict):
    """How the global batch survives losing trainers.

    per_trainer_batch: survivors take larger per-trainer batches so the global batch stays the same.
    lr_scaling: per-trainer batch stays; the learning rate scales with the global batch (linear rule).
    """

    keep_global_batch_by: Literal["per_trainer_batch", "lr_scaling"] = "per_trainer_batch"


StopSignal = Literal["SIGTERM", "SIGINT", "SIGUSR1", "SIGUSR2", "SIGHUP", "SIGQUIT"]


class RunOverride(_Strict):
    """The user's own script replaces deepvm's worker on every trainer; deepvm still pushes, launches,
    checkpoints and recovers (the script's side of it: training/job.py)."""

    script: Text | None = None  # relative to the job file's directory, which is pushed to every node
    args: list[Text] = Field(default_factory=list)  # the script's sys.argv[1:]
    # or your own launch line (`torchrun ... train.py`), run by bash once per training node in the job directory,
    # with $DEEPVM_NUM_NODES, $DEEPVM_NODE_RANK, $MASTER_ADDR and $MASTER_PORT; it takes no steps (calls_step: false)
    command: Text | None = None
    # false: the script takes no steps (an evaluation, a data preparation): it gives no `steps`, and ends
    # completed without calling ctx.step(); true (the default): ending before its first step is a failure
    calls_step: bool = True
    # a launched script (calls_step: false) is told to stop (a Spot notice, a cancel, a limit) by this signal,
    # as torchelastic and SageMaker tell theirs, and killed after stop_grace seconds (None: what the notice
    # leaves after the kept files' flush; training.node.launched)
    stop_signal: StopSignal = "SIGTERM"
    stop_grace: Annotated[float, Field(gt=0, le=3600)] | None = None

    @field_validator("args", mode="before")
    @classmethod
    def _numbers_as_text(cls, value: Any) -> Any:
        """`args: [--lr, 0.1]` means the text "0.1", as on a command line; anything else must be a string."""
        if isinstance(value, list):
            return [str(v) if isinstance(v, int | float) and not isinstance(v, bool) else v for v in value]
        return value

    @model_validator(mode="before")
    @classmethod
    def _a_command_takes_no_steps(cls, data: Any) -> Any:
        """A launch line's processes are not deepvm's to step: `command:` means calls_step: false."""
        if isinstance(data, dict) and data.get("command") is not None and "calls_step" not in data:
            return {**data, "calls_step": False}
        return data

    @model_validator(mode="after")
    def _script_or_command(self) -> RunOverride:
        if (self.script is None) == (self.command is None):
            raise ValueError(
                "give exactly one of script (your script, started as torchrun starts it) or command "
                "(your own launch line, once per node)"
            )
        if self.command is not None and self.args:
            raise ValueError("args are a script's; write them into the command")
        if self.command is not None and self.calls_step:
            raise ValueError("a command's processes cannot call ctx.step(); remove calls_step: true")
        return self

    @property
    def label(self) -> str:
        """What the job runs, as reports name it: the script's path, or the command."""
        return self.script if self.script is not None else str(self.command)


class LimitsSpec(_Strict):
    """What the job may take (training/shared/limits.py); `deepvm train --deadline/--budget/--fallback-max-price`
    override each. Kept by the head's recovery ladder (provisioning/ladder)."""

    deadline: Annotated[float, Field(gt=0, le=MAX_HOURS)] | None = None  # hours from the job's start
    budget: Annotated[float, Field(gt=0, le=MAX_USD)] | None = None  # USD for the whole job, replacements included
    fallback_max_price: Annotated[float, Field(gt=0, le=MAX_USD_PER_HOUR)] | None = None  # USD/h with stand-ins

    def job_limits(self) -> JobLimits:
        return JobLimits(self.deadline, self.budget, self.fallback_max_price)


_WORKER_ONLY = ("model", "dataset", "epochs", "batch_size", "optimizer", "schedule", "shrink")


class JobSpec(_Strict):
    """One training job."""

    name: JobName = "job"
    seed: Seed = 0
    model: ModelSpec = Field(default_factory=ModelSpec)
    dataset: DatasetSpec | None = None  # required unless `run:` is given
    steps: PositiveInt | None = None
    epochs: PositiveInt | None = None
    batch_size: Annotated[int, Field(gt=0, le=MAX_BATCH)] = 32  # per trainer
    log_every: PositiveInt = 10  # steps between progress lines
    optimizer: OptimizerSpec = Field(default_factory=OptimizerSpec)
    schedule: ScheduleSpec = Field(default_factory=ScheduleSpec)
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec)
    shrink: ShrinkPolicy = Field(default_factory=ShrinkPolicy)
    setup: list[Text] = Field(default_factory=list)  # shell commands, once per node before launch
    env: Annotated[dict[EnvName, Text], AfterValidator(checked_env)] = Field(default_factory=dict)  # on every rank
    run: RunOverride | None = None  # your own script instead of deepvm's worker
    limits: LimitsSpec = Field(default_factory=LimitsSpec)  # deadline, budget, the fallback's hourly cap
    stall: StallSpec = Field(default_factory=StallSpec)  # when a running job counts as hung

    @field_validator("env", mode="before")
    @classmethod
    def _env_scalars_as_text(cls, value: Any) -> Any:
        """`OMP_NUM_THREADS: 1` means the text "1": environment values are strings anyway."""
        if isinstance(value, dict):
            return {key: _env_text(item) for key, item in value.items()}
        return value

    @model_validator(mode="before")
    @classmethod
    def _no_worker_fields_with_run(cls, data: Any) -> Any:
        """Checked on the raw mapping, so a `model:` beside `run:` is refused as such, whatever it holds."""
        if isinstance(data, dict) and data.get("run") is not None:
            if "epochs" in data:
                raise _field_error("epochs", "with `run:` give steps: deepvm cannot count your script's epochs")
            given = [name for name in _WORKER_ONLY if name in data]
            if given:
                raise _field_error(given[0], "deepvm's worker only: your `run:` script chooses its own; remove it")
        return data

    @model_validator(mode="after")
    def _consistent(self) -> JobSpec:
        if self.run is not None:
            if self.steps is None and self.run.calls_step:
                raise _field_error(
                    "run",
                    "needs steps: N, the steps your script trains (progress and cost count "
                    "them), or run.calls_step: false for a script that takes none",
                )
            if self.steps is not None and not self.run.calls_step:
                raise _field_error("steps", "a script with run.calls_step: false takes no steps; remove steps")
            if self.run.calls_step:
                _only_launched(self)
            return self
        if self.dataset is None:
            raise _field_error("dataset", None)
        if self.checkpoint.files:
            raise _field_error(
                "checkpoint",
                "files: kept for your own script (run: with calls_step: false); "
                "deepvm's worker checkpoints its model and optimizer itself",
            )
        if (self.steps is None) == (self.epochs is None):
            raise ValueError("give exactly one of steps or epochs")
        classes = self.dataset.classes if isinstance(self.dataset, SyntheticData) else 10
        if self.model.num_classes != classes:
            raise ValueError(f"model.num_classes is {self.model.num_classes} but the dataset has {classes} classes")
        return self

    @cached_property
    def checkpoint_plan(self) -> CheckpointPlan:
        """The checkpoint settings as every stage reads them (training.shared.checkpointplan), built once."""
        from training.shared.checkpointplan import CheckpointPlan

        return CheckpointPlan.of(self)

    @property
    def calls_step(self) -> bool:
        """Whether the job promises its steps through ctx.step (deepvm's worker does): the stall watch holds
        only such a job to step limits it did not ask for (training/control/stall.py)."""
        return self.run is None or self.run.calls_step

    @property
    def is_synthetic(self) -> bool:
        """True when the run trains on generated data; every report says so."""
        return isinstance(self.dataset, SyntheticData)


def _only_launched(spec: JobSpec) -> None:
    """What only a launched script (run.calls_step: false) uses is refused beside a ctx.step() script, which
    checkpoints its state tree and stops at ctx.step(): a setting that silently does nothing misleads."""
    assert spec.run is not None
    if spec.checkpoint.files:
        raise _field_error(
            "checkpoint",
            "files: kept for a script with run.calls_step: false; a script that calls "
            "ctx.step() checkpoints the tree it gives ctx.step()",
        )
    fields = spec.run.model_fields_set & {"stop_signal", "stop_grace"}
    if fields:
        raise _field_error(
            "run",
            f"{min(fields)}: for a script with run.calls_step: false; a script that calls "
            "ctx.step() stops when ctx.step() returns True",
        )


def _field_error(field: str, problem: str | None) -> ValidationError:
    """An error of one top-level field (so it is reported at that field's line); None: the field is missing."""
    kind = "missing" if problem is None else PydanticCustomError("job_spec", problem)
    return ValidationError.from_exception_data("JobSpec", [InitErrorDetails(type=kind, loc=(field,), input=None)])


def _env_text(value: Any) -> Any:
    """YAML scalars as the shell would see them; anything else is left for validation to reject."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int | float):
        return str(value)
    return value


def load_job_spec(path: str | Path) -> JobSpec:
    """Read and validate a job spec. One mistake is one InputError line, ``FILE:LINE: FIELD: PROBLEM``;
    several are an InputErrors with one such line each, in the file's order."""
    doc = read_yaml(Path(path), "job file", MAX_JOB_BYTES)
    if not isinstance(doc.data, dict):
        raise InputError(f"{doc.path}:1: expected a mapping of job fields at the top level")
    problems = {
        (d.line, dotted(d.names), f"duplicate key (first given at line {d.first_line})") for d in doc.duplicate_keys
    }
    spec: JobSpec | None = None
    try:
        spec = JobSpec.model_validate(doc.data)
    except ValidationError as exc:
        problems |= {(*place(doc, err), describe(err, JobSpec)) for err in exc.errors(include_url=False)}
    if problems:
        lines = [f"{doc.path}:{line}: {field}: {problem}" for line, field, problem in sorted(problems)]
        raise InputError(lines[0]) if len(lines) == 1 else InputErrors(lines)
    assert spec is not None
    if spec.run is not None and spec.run.script is not None:
        _check_script(doc, spec.run.script)
    return spec


def _check_script(doc: YamlDocument, script: str) -> None:
    """The script must be a file inside the job file's directory: that directory is what the nodes get."""
    where = f"{doc.path}:{locate(doc, ('run', 'script')).line}: run.script"
    job_dir = doc.path.resolve().parent
    if Path(script).is_absolute():
        raise InputError(f"{where}: give a path relative to {job_dir} (the job directory), got {script}")
    path = (job_dir / script).resolve()
    if not path.is_relative_to(job_dir):
        raise InputError(f"{where}: {script} is outside {job_dir}; only the job directory is pushed to the nodes")
    if not path.is_file():
        raise InputError(f"{where}: no such file: {job_dir / script}")
