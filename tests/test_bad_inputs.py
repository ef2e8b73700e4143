"""Bad input, one case per row: everything a careless or hostile user can hand deepvm's commands (flags,
plan files, catalogs, job specs, special files, an unusable home) is refused with an exit code >= 2 and
exactly one line on stderr that names the file, field or flag, never an internal error or a traceback;
and where the command is `up`, nothing exists in the (moto) cloud afterwards.

The CLI runs in this process (deepvm_cli.main.main), so a row costs milliseconds rather than a Python
start; only the read-only home, which needs a mount of its own, runs as a process. The numeric-flag rows
are generated from the app itself, so a flag added later without a rule fails here."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.core import TyperArgument, TyperGroup, TyperOption

from deepvm_cli.main import _register_commands, app, main
from provisioning.cloud.aws.context import AwsContext
from provisioning.sandbox.realism import SANDBOX_IMAGE
from tests.cloud.cloud_state import created_resources
from tests.cloud.conftest import moto_endpoint  # noqa: F401  (the session's moto server, for `up` rows)
from tests.cloud.plans import REGION
from tests.conftest import REPO
from tests.documents import JOB, deepvm_catalog, drop_at, own_catalog, plan_document, set_at

Command = Callable[[Path], list[str]]  # writes what the row needs under a directory; gives the command line


@dataclass(frozen=True)
class Row:
    id: str
    command: Command
    starts: str  # how the line goes on after "deepvm: error: "; {d} is the row's directory
    contains: str = ""  # more of the line, anywhere in it
    lacks: str = ""  # what the line must not say


# commands around a file


def _write(path: Path, content: str | bytes) -> Path:
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


def up_args(path: Path) -> list[str]:
    return ["up", "--yes", "--cloud", "aws", "--plan", str(path), "--ami", SANDBOX_IMAGE, "--no-wait", "--name", "c1"]


def check_args(path: Path) -> list[str]:
    return ["check", "--cloud", "aws", "--plan", str(path)]


def plan_args(path: Path) -> list[str]:
    return ["plan", "--catalog", str(path), "--max-price", "3"]


def train_args(path: Path) -> list[str]:
    return ["train", str(path)]


def profiled_plan_args(path: Path) -> list[str]:
    return ["plan", "--offline", "--max-price", "3", "--profile", str(path)]


def up_with(content: str | bytes) -> Command:
    return lambda d: up_args(_write(d / "plan.json", content))


def plan_with(content: str | bytes) -> Command:
    return lambda d: plan_args(_write(d / "catalog.json", content))


def train_with(content: str | bytes) -> Command:
    return lambda d: train_args(_write(d / "job.yaml", content))


def argv(*args: str) -> Command:
    return lambda d: list(args)


def _deep(levels: int, key: str = "plans") -> str:
    return '{"' + key + '": ' + "[" * levels + "]" * levels + "}"


# plan files (`up --plan`): every field of the document

NODE = "plans.0.nodes.1"  # the Single Anchor plan's spot trainers
COUNT = "plans[0].nodes[1].count"

PLAN_CASES = [
    # (id, mutation of tests.documents.plan_document(), field named, problem)
    ("count-float", set_at(f"{NODE}.count", 2.5), COUNT, "must be an integer from 1 to 512, got 2.5"),
    ("count-string", set_at(f"{NODE}.count", "3"), COUNT, 'must be an integer from 1 to 512, got "3"'),
    ("count-bool", set_at(f"{NODE}.count", True), COUNT, "must be an integer from 1 to 512, got true"),
    ("count-zero", set_at(f"{NODE}.count", 0), COUNT, "must be an integer from 1 to 512, got 0"),
    ("count-negative", set_at(f"{NODE}.count", -3), COUNT, "got -3"),
    ("count-billion", set_at(f"{NODE}.count", 10**9), COUNT, "got 1000000000"),
    ("count-missing", drop_at(f"{NODE}.count"), COUNT, "required field missing"),
    ("unknown-key", set_at(f"{NODE}.cout", 3), "plans[0].nodes[1].cout", "unknown field"),
    ("unknown-top-key", set_at("plan_v2", {}), "plan_v2", "unknown field"),
    (
        "type-nul",
        set_at(f"{NODE}.instance_type", "g4dn.xlarge\x00"),
        "plans[0].nodes[1].instance_type",
        "must be a name of at most 64 letters, digits",
    ),
    (
        "type-shell",
        set_at(f"{NODE}.instance_type", "g4dn.xlarge; rm -rf /"),
        "plans[0].nodes[1].instance_type",
        'got "g4dn.xlarge; rm -rf /"',
    ),
    (
        "type-unknown",
        set_at(f"{NODE}.instance_type", "zz9.mega"),
        "plans[0].nodes[1].instance_type",
        "unknown instance type 'zz9.mega'",
    ),
    ("market-unknown", set_at(f"{NODE}.market", "spott"), "plans[0].nodes[1].market", "must be one of"),
    ("role-unknown", set_at(f"{NODE}.role", "boss"), "plans[0].nodes[1].role", "must be one of"),
    (
        "price-negative",
        set_at(f"{NODE}.usd_per_hour", -0.5),
        "plans[0].nodes[1].usd_per_hour",
        "must be a finite number >= 0, got -0.5",
    ),
    ("price-nan", set_at(f"{NODE}.usd_per_hour", math.nan), "plans[0].nodes[1].usd_per_hour", "got NaN"),
    ("total-infinite", set_at("plans.0.price_per_hour", math.inf), "plans[0].price_per_hour", "got Infinity"),
    ("flops-string", set_at("plans.0.effective_flops", "many"), "plans[0].effective_flops", 'got "many"'),
    ("region-mars", set_at("plans.0.region", "mars-north-1"), "plans[0].region", "unknown region 'mars-north-1'"),
    (
        "zone-of-another-region",
        set_at("plans.0.availability_zone", "us-west-2a"),
        "plans[0].availability_zone",
        "'us-west-2a' is not a zone of us-east-1",
    ),
    (
        "zone-unknown",
        set_at("plans.0.availability_zone", "us-east-1z"),
        "plans[0].availability_zone",
        "'us-east-1z' is not a zone of us-east-1",
    ),
    (
        "tiering-without-holder",
        drop_at("plans.1.nodes.1"),
        "plans[1].architecture",
        "tiering is spot trainers and at least one on-demand holder",
    ),
    (
        "wrong-architecture-label",
        set_at("plans.0.architecture", "tiering"),
        "plans[0].architecture",
        "the nodes have 1 anchor(s), 0 holder(s) and 3 spot trainer(s)",
    ),
    (
        "two-anchors",
        set_at("plans.0.nodes.0.count", 2),
        "plans[0].architecture",
        "single-anchor is one on-demand anchor",
    ),
    (
        "gpu-holder",
        set_at("plans.1.nodes.1.instance_type", "g4dn.xlarge"),
        "plans[1].nodes[1].instance_type",
        "a holder is a CPU instance type, and g4dn.xlarge is not",
    ),
    (
        "on-demand-trainer",
        set_at(f"{NODE}.market", "on-demand"),
        "plans[0].nodes[1].market",
        "a trainer is bought spot, not on-demand",
    ),
    (
        "over-quota",
        set_at(f"{NODE}.count", 500),
        "plans[0].nodes",
        "needs 2000 spot vCPUs of quota group 'G and VT' in us-east-1; the quota is 512",
    ),
    (
        "over-node-limit",
        lambda d: set_at("plans.1.nodes.1.count", 300)(set_at("plans.1.nodes.0.count", 300)(d)),
        "plans[1].nodes",
        "600 nodes in all; deepvm launches at most 512",
    ),
    ("no-plans", set_at("plans", []), "plans", "must hold at least 1 entries"),
    ("no-nodes", set_at("plans.0.nodes", []), "plans[0].nodes", "must hold at least 1 entries"),
    ("nodes-not-a-list", set_at("plans.0.nodes", {}), "plans[0].nodes", "must be a list"),
    (
        "catalog-gone",
        set_at("plans.0.catalog_source", "/nonexistent/catalog.json"),
        "plans[0].catalog_source",
        "catalog file not found: /nonexistent/catalog.json",
    ),
    (
        "note-rtl-override",
        set_at("plans.0.notes", ["cheap\u202eevil"]),
        "plans[0].notes[0]",
        "must be a string of at most 500 printable characters",
    ),
    (
        "single-plan-bad-count",
        lambda d: set_at("nodes.1.count", 2.5)(d["plans"][0]),
        "nodes[1].count",
        "must be an integer from 1 to 512, got 2.5",
    ),
]


def _mutated_plan(mutation) -> Command:
    return lambda d: up_args(_write(d / "plan.json", json.dumps(mutation(plan_document()))))


ROWS: list[Row] = [
    Row(f"plan-{id_}", _mutated_plan(mutation), f"{{d}}/plan.json: {field}: ", problem)
    for id_, mutation, field, problem in PLAN_CASES
]
ROWS += [
    Row("plan-list-at-top", up_with("[1, 2]"), "{d}/plan.json: expected a JSON object"),
    Row("plan-nested-thousands-deep", up_with(_deep(5000)), "{d}/plan.json: JSON nested more than 32 levels deep"),
    Row("plan-nested-hundreds-deep", up_with(_deep(200)), "{d}/plan.json: JSON nested more than 32 levels deep"),
    Row("plan-not-json", up_with("{plans: 1}"), "{d}/plan.json is not valid JSON"),
    Row("plan-empty", up_with(""), "{d}/plan.json is not valid JSON"),
    Row(
        "plan-duplicate-key",
        lambda d: up_with(json.dumps(plan_document()).replace('"count": 3,', '"count": 3, "count": 300,', 1))(d),
        "{d}/plan.json: the key 'count' is given twice in one object",
    ),
    Row(
        "plan-count-1e9-as-float",
        _mutated_plan(set_at(f"{NODE}.count", 1e9)),
        f"{{d}}/plan.json: {COUNT}: ",
        "got 1000000000.0",
    ),
]

# catalogs (`plan --catalog`)

CATALOG_CASES = [
    # (id, base document, mutation, how the line goes on after "FILE: ")
    (
        "negative-on-demand",
        own_catalog,
        set_at(("prices", "us-east-1", "on-demand", "g4dn.xlarge"), -1),
        "prices.us-east-1.on-demand.g4dn.xlarge must be a price above 0 (USD per hour), not -1",
    ),
    (
        "nan-spot",
        own_catalog,
        set_at(("prices", "us-east-1", "spot", "us-east-1a", "g4dn.xlarge"), math.nan),
        "prices.us-east-1.spot.us-east-1a.g4dn.xlarge must be a price above 0 (USD per hour), not nan",
    ),
    (
        "zero-spot",
        own_catalog,
        set_at(("prices", "us-east-1", "spot", "us-east-1a", "g4dn.xlarge"), 0),
        "prices.us-east-1.spot.us-east-1a.g4dn.xlarge must be a price above 0 (USD per hour), not 0",
    ),
    (
        "zero-on-demand",
        own_catalog,
        set_at(("prices", "us-east-1", "on-demand", "c5.xlarge"), 0.0),
        "prices.us-east-1.on-demand.c5.xlarge must be a price above 0 (USD per hour), not 0.0",
    ),
    ("nan-flops", own_catalog, set_at("types.0.flops", math.nan), "types[0] (g4dn.xlarge).flops must be a finite"),
    ("negative-flops", own_catalog, set_at("types.0.flops", -65), "types[0] (g4dn.xlarge).flops must be a finite"),
    (
        "infinite-vcpus",
        own_catalog,
        set_at("types.3.vcpus", math.inf),
        "types[3] (g4dn.8xlarge).vcpus must be a whole number >= 0, not inf",
    ),
    ("fractional-vcpus", own_catalog, set_at("types.3.vcpus", 2.5), "types[3] (g4dn.8xlarge).vcpus must be a whole"),
    (
        "duplicate-type",
        own_catalog,
        lambda d: {**d, "types": [*d["types"], d["types"][0]]},
        "types[62] (g4dn.xlarge): listed twice (first as types[0])",
    ),
    ("missing-name", own_catalog, drop_at("types.3.name"), "types[3]: missing field 'name'"),
    ("nul-in-name", own_catalog, set_at("types.3.name", "p3\x00"), "types[3].name must be"),
    ("nan-quota", own_catalog, set_at("quotas.us-east-1.P.spot", math.nan), "quotas.us-east-1.P.spot must be a finite"),
    ("unknown-market", own_catalog, set_at("quotas.us-east-1.P.reserved", 4), "quotas.us-east-1.P: 'reserved' is not"),
    ("types-not-a-list", own_catalog, set_at("types", {}), "the catalog: 'types' must be a list"),
    (
        "deepvm-negative-price",
        deepvm_catalog,
        set_at("instances.0.ondemand_price", -0.1),
        "instances[0].ondemand_price must be a price above 0 (USD per hour), not -0.1",
    ),
    (
        "deepvm-zero-spot",
        deepvm_catalog,
        set_at("instances.1.spot_price", 0),
        "instances[1].spot_price must be a price above 0 (USD per hour), not 0",
    ),
    ("deepvm-nan-flops", deepvm_catalog, set_at("instances.1.flops", math.nan), "instances[1].flops must be a finite"),
    (
        "deepvm-infinite-vcpus",
        deepvm_catalog,
        set_at("instances.1.vCPU", math.inf),
        "instances[1].vCPU must be a whole number >= 0, not inf",
    ),
    (
        "deepvm-duplicate",
        deepvm_catalog,
        lambda d: {**d, "instances": [*d["instances"], d["instances"][1]]},
        "instances[11]: instance type 'g4dn.xlarge' is listed twice",
    ),
    ("deepvm-missing-name", deepvm_catalog, drop_at("instances.2.name"), "instances[2]: missing field 'name'"),
]


def _mutated_catalog(base, mutation) -> Command:
    return lambda d: plan_args(_write(d / "catalog.json", json.dumps(mutation(base()))))


ROWS += [
    Row(f"catalog-{id_}", _mutated_catalog(base, mutation), f"{{d}}/catalog.json: {expected}")
    for id_, base, mutation, expected in CATALOG_CASES
]
ROWS += [
    Row("catalog-list-at-top", plan_with("[]"), "{d}/catalog.json is not a catalog"),
    Row(
        "catalog-duplicate-key",
        plan_with('{"instances": [], "instances": []}'),
        "{d}/catalog.json: the key 'instances' is given twice in one object",
    ),
    Row(
        "catalog-nested-thousands-deep",
        plan_with(_deep(3000, "types")),
        "{d}/catalog.json: JSON nested more than 32 levels deep",
    ),
    Row(
        "catalog-vcpus-Infinity-literal",
        lambda d: plan_with(json.dumps(own_catalog()).replace('"vcpus": 32', '"vcpus": Infinity', 1))(d),
        "{d}/catalog.json: types[",
        "vcpus must be a whole number >= 0, not inf",
    ),
]

# job specs (`train`): each mistake one line, with its line number


def _job_with(line: str) -> Command:
    return train_with(JOB + line + "\n")


ROWS += [
    Row(
        "job-lr-inf",
        _job_with("optimizer: {lr: .inf}"),
        "{d}/job.yaml:11: optimizer.lr: must be a finite number, got inf",
    ),
    Row(
        "job-lr-nan",
        _job_with("optimizer: {lr: .nan}"),
        "{d}/job.yaml:11: optimizer.lr: must be a finite number, got nan",
        lacks="greater than",
    ),
    Row(
        "job-batch-1e20",
        train_with(JOB.replace("batch_size: 8", "batch_size: 100000000000000000000")),
        "{d}/job.yaml:10: batch_size: must be at most 65536, got 100000000000000000000",
    ),
    Row(
        "job-every-seconds-inf",
        _job_with("checkpoint: {every_seconds: .inf}"),
        "{d}/job.yaml:11: checkpoint.every_seconds: must be a finite number, got inf",
    ),
    Row(
        "job-startup-grace-zero",
        _job_with("stall: {startup_grace: 0}"),
        "{d}/job.yaml:11: stall.startup_grace: must be at least 1, got 0",
    ),
    Row(
        "job-stall-timeout-inf",
        _job_with("stall: {timeout: .inf}"),
        "{d}/job.yaml:11: stall.timeout: must be a finite number, got inf",
    ),
    Row(
        "job-stall-misspelt",
        _job_with("stall: {startup: 60}"),
        "{d}/job.yaml:11: stall.startup: unknown field; did you mean startup_grace?",
    ),
    Row("job-duplicate-key", _job_with("steps: 500"), "{d}/job.yaml:11: steps: duplicate key (first given at line 9)"),
    Row(
        "job-duplicate-nested-key",
        train_with(JOB.replace("  samples: 64", "  samples: 64\n  samples: 65")),
        "{d}/job.yaml:9: dataset.samples: duplicate key (first given at line 8)",
    ),
    Row(
        "job-env-name-not-a-name",
        _job_with("env: {MY-VAR: x}"),
        "{d}/job.yaml:11: env.MY-VAR: 'MY-VAR' is not an environment variable name",
    ),
    Row("job-env-name-starts-with-digit", _job_with("env:\n  1X: x"), "{d}/job.yaml:12: env.1X: '1X' is not an"),
    Row(
        "job-env-value-nul",
        _job_with('env: {X: "a\\0b"}'),
        "{d}/job.yaml:11: env.X: must not contain the character '\\x00'",
    ),
    Row(
        "job-mlflow-uri-not-a-uri",
        _job_with("env: {MLFLOW_TRACKING_URI: mlflow.example.com}"),
        "{d}/job.yaml:11: env: MLFLOW_TRACKING_URI must be an MLflow tracking URI: http[s]://HOST[:PORT], ",
    ),
    Row(
        "job-mlflow-uri-relative-file",
        _job_with("env: {MLFLOW_TRACKING_URI: 'file:mlruns'}"),
        "{d}/job.yaml:11: env: MLFLOW_TRACKING_URI must be an MLflow tracking URI",
    ),
    Row(
        "job-name-nul",
        train_with(JOB.replace("name: t", 'name: "t\\0"')),
        "{d}/job.yaml:1: name: must be 1 to 64",
        "got 't\\x00'",
    ),
    Row(
        "job-name-rtl-override",
        train_with(JOB.replace("name: t", 'name: "cheap\\u202eevil"')),
        "{d}/job.yaml:1: name: must be 1 to 64",
        "got 'cheap\\u202eevil'",
    ),
    Row(
        "job-name-path", train_with(JOB.replace("name: t", "name: ../../etc")), "{d}/job.yaml:1: name: must be 1 to 64"
    ),
    Row(
        "job-setup-rtl-override",
        _job_with('setup: ["echo \\u202e ok"]'),
        "{d}/job.yaml:11: setup.0: must not contain the character '\\u202e'",
    ),
    Row("job-key-with-newline", _job_with('"a\\nb": 1'), "{d}/job.yaml:11: 'a\\nb': unknown field"),
    Row(
        "job-misspelt-field",
        train_with(JOB.replace("steps: 5", "step: 5")),
        "{d}/job.yaml:9: step: unknown field; did you mean steps?",
    ),
    Row(
        "job-nested-thousands-deep",
        train_with("a: " + "[" * 5000 + "]" * 5000 + "\n"),
        "{d}/job.yaml:1: YAML nested more than 32 levels deep",
    ),
    Row("job-alias-cycle", train_with("a: &a [*a]\n"), "{d}/job.yaml:1: an alias refers to a node that contains it"),
    Row(
        "job-alias-bomb",
        train_with(
            "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
            + "".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 9))
        ),
        "{d}/job.yaml:",
        "YAML expands to more than 100,000 values (aliases)",
    ),
    Row("job-impossible-date", _job_with("seed: 2024-13-45"), "{d}/job.yaml:11: invalid YAML value '2024-13-45'"),
    Row("job-bad-yaml", train_with("name: t\nmodel: [unclosed\nsteps: 3\n"), "{d}/job.yaml:", "invalid YAML"),
    Row("job-list-at-top", train_with("- a\n"), "{d}/job.yaml:1: expected a mapping of job fields at the top level"),
    Row(
        "job-profiled-lr-inf",
        lambda d: ["profile", *_job_with("optimizer: {lr: .inf}")(d)[1:], "--cluster", "c1"],
        "{d}/job.yaml:11: optimizer.lr: must be a finite number, got inf",
    ),
    Row(
        "job-script-outside",
        train_with("steps: 4\nrun: {script: ../x.py}\n"),
        "{d}/job.yaml:2: run.script: ../x.py is outside",
    ),
]


def _in_configs(d: Path) -> list[str]:
    """Issue 12: `deepvm train resnet.yaml` where only configs/resnet.yaml exists."""
    (d / "configs").mkdir()
    _write(d / "configs" / "resnet.yaml", JOB)
    os.chdir(d)  # the test puts the working directory back
    return ["train", "resnet.yaml"]


ROWS += [Row("job-path-suggested", _in_configs, "job file not found: resnet.yaml; did you mean configs/resnet.yaml?")]

# special files, as each kind of file


def _fifo(d: Path) -> Path:
    os.mkfifo(d / "fifo")
    return d / "fifo"


def _sparse(d: Path) -> Path:
    """65 MiB of nothing: over every file's limit (a plan's 1 MiB, a job's 256 KiB, a catalog's 64 MiB)."""
    with open(d / "big", "wb") as handle:
        handle.truncate(65 * 1024 * 1024)
    return d / "big"


def _loop(d: Path) -> Path:
    (d / "loop").symlink_to(d / "loop")
    return d / "loop"


SPECIAL_FILES: list[tuple[str, Callable[[Path], Path], str]] = [
    # (id, the file, the line after "deepvm: error: ": {what} is the kind of file, {d} the row's directory)
    ("directory", lambda d: d, "{what} is a directory: {d}"),
    ("dev-zero", lambda d: Path("/dev/zero"), "{what} is not a regular file: /dev/zero"),
    ("fifo", _fifo, "{what} is not a regular file: {d}/fifo"),
    ("65-MiB", _sparse, "{what} {d}/big is larger than"),
    ("symlink-loop", _loop, "cannot read {what} {d}/loop: its symbolic links form a loop"),
    ("missing", lambda d: d / "nope", "{what} not found: {d}/nope"),
    ("not-utf8", lambda d: _write(d / "latin1", b'{"a": "caf\xe9"}\n'), "{d}/latin1 is not UTF-8 text"),
]
FILE_COMMANDS: list[tuple[str, str, Callable[[Path], list[str]]]] = [
    # (id, what the file is called in errors, the command that reads it)
    ("plan", "plan file", up_args),
    ("catalog", "catalog file", plan_args),
    ("job", "job file", train_args),
    ("profile", "profile", profiled_plan_args),
    ("check-plan", "plan file", check_args),
]


def _reading(make: Callable[[Path], Path], args: Callable[[Path], list[str]]) -> Command:
    return lambda d: args(make(d))


ROWS += [
    Row(f"{kind}-{id_}", _reading(make, args), expected.replace("{what}", what))
    for kind, what, args in FILE_COMMANDS
    for id_, make, expected in SPECIAL_FILES
]

# flags: the issue's cases by name, then every numeric flag of every command, from the app itself

ROWS += [
    Row(
        "flag-up-max-price-negative",
        argv("up", "--cloud", "aws", "--yes", "--max-price", "-3"),
        "--max-price must be a positive number, got -3",
        lacks="no cluster",
    ),
    Row(
        "flag-plan-max-price-negative",
        argv("plan", "--offline", "--max-price", "-3"),
        "--max-price must be a positive number, got -3",
    ),
    Row(
        "flag-up-max-price-nan",
        argv("up", "--cloud", "aws", "--yes", "--max-price", "nan"),
        "--max-price must be a finite number, got nan",
    ),
    Row(
        "flag-plan-max-price-1e308",
        argv("plan", "--offline", "--max-price", "1e308"),
        "--max-price must be at most 1,000,000, got 1e+308",
    ),
    Row(
        "flag-up-max-price-1e308",
        argv("up", "--cloud", "aws", "--yes", "--max-price", "1e308"),
        "--max-price must be at most 1,000,000, got 1e+308",
    ),
    Row(
        "flag-up-timeout-negative",
        argv("up", "--cloud", "aws", "--yes", "--timeout", "-1"),
        "--timeout must be a positive number, got -1",
    ),
    Row(
        "flag-up-timeout-nan",
        argv("up", "--cloud", "aws", "--yes", "--timeout", "nan"),
        "--timeout must be a finite number, got nan",
    ),
    Row(
        "flag-interrupt-after-1e20",
        argv("interrupt", "i-0123456789abcdef0", "--after", str(10**20)),
        "--after must be at most 86,400, got 1e+20",
    ),
    Row(
        "flag-interrupt-after-1e20-float",
        argv("interrupt", "i-0123456789abcdef0", "--after", "1e20"),
        "Invalid value for '--after': Input should be a valid integer",
    ),
    Row(
        "flag-market-region-empty",
        argv("market", "--offline", "--region", ""),
        "--region needs a region name, a comma-separated list, or 'all'",
    ),
    Row("flag-market-region-commas", argv("market", "--offline", "--region", " , "), "--region needs a region name"),
    Row(
        "flag-plan-region-empty",
        argv("plan", "--offline", "--max-price", "3", "--region", ""),
        "--region needs a region name",
    ),
    Row(
        "flag-up-region-empty",
        argv("up", "--cloud", "aws", "--yes", "--max-price", "3", "--region", ""),
        "--region needs a region name",
    ),
    Row("flag-up-name", argv("up", "--cloud", "aws", "--yes", "--max-price", "3", "--name", "a b"), "cluster name"),
    Row(
        "flag-up-plan-and-price",
        argv("up", "--cloud", "aws", "--yes", "--max-price", "3", "--plan", "p.json"),
        "give --plan or --max-price, not both",
    ),
]


def numeric_options() -> list[tuple[list[str], list[str], TyperOption]]:
    """Every int or float option of every command: (the command's words, placeholders for its required
    arguments, the option)."""
    _register_commands()
    found: list[tuple[list[str], list[str], TyperOption]] = []

    def walk(command: Any, words: list[str]) -> None:
        if isinstance(command, TyperGroup):
            for name, sub in sorted(command.commands.items()):
                walk(sub, [*words, name])
            return
        needed = [p.name for p in command.params if isinstance(p, TyperArgument) and p.required]
        for param in command.params:
            if isinstance(param, TyperOption) and param.bare_type() in ("int", "float"):
                found.append((words, needed, param))

    walk(typer.main.get_command(app), [])
    return found


_FLOAT_VALUES = {
    "nan": "{flag} must be a finite number, got nan",
    "inf": "{flag} must be a finite number, got inf",
    "-1": "{flag} must be ",
    "1e308": "{flag} must be at most ",
}
_INT_VALUES = {
    "-1": "{flag} must be ",
    str(10**20): "{flag} must be at most ",
    "nan": "Invalid value for '{flag}': Input should be a valid integer",
}
# an int option may bound itself with typer's min= and max= instead (a whole number cannot be NaN): its refusal
_INT_RANGE_VALUES = {
    "-1": "Invalid value for '{flag}': Input should be greater than or equal to ",
    str(10**20): "Invalid value for '{flag}': Input should be less than or equal to ",
    "nan": "Invalid value for '{flag}': Input should be a valid integer",
}


def _flag_rows() -> list[Row]:
    rows = []
    for words, needed, option in numeric_options():
        flag = max(option.opts, key=len)
        if option.bare_type() == "float":
            values = _FLOAT_VALUES
        else:
            values = _INT_VALUES if option.min is None and option.max is None else _INT_RANGE_VALUES
        extra = ["--cloud", "aws", "--yes"] if words == ["up"] else []
        rows += [
            Row(
                f"flag-{'-'.join(words)}{flag}={value}",
                argv(*words, *needed, *extra, flag, value),
                line.replace("{flag}", flag),
            )
            for value, line in values.items()
        ]
    return rows


ROWS += _flag_rows()

# the config file of defaults ($DEEPVM_HOME/config.yaml; the row's home is {d}/deepvm-home): read by every
# command that takes one of its keys, as strictly as a plan file


def config_then(content: str | None, *args: str) -> Command:
    """Write the config file (None: make it a directory), then run `deepvm ARGS`."""

    def command(d: Path) -> list[str]:
        path = d / "deepvm-home" / "config.yaml"
        path.parent.mkdir(exist_ok=True)
        if content is None:
            path.mkdir()
        else:
            path.write_text(content)
        return [*args]

    return command


CONFIG = "{d}/deepvm-home/config.yaml"
PLAN_OFFLINE = ("plan", "--offline")
ROWS += [
    Row(
        "config-unknown-key",
        config_then("regoin: us-east-1\n", *PLAN_OFFLINE, "--max-price", "3"),
        f"{CONFIG}: regoin: unknown key (did you mean region?); the keys are region, cloud, max_price, cluster",
    ),
    Row(
        "config-price-text",
        config_then("max_price: cheap\n", *PLAN_OFFLINE),
        f'{CONFIG}: max_price: must be a number above 0 and at most 1,000,000 (USD per hour), got "cheap"',
    ),
    Row(
        "config-price-negative",
        config_then("max_price: -3\n", *PLAN_OFFLINE),
        f"{CONFIG}: max_price: ",
        contains="got -3",
    ),
    Row(
        "config-price-nan",
        config_then("max_price: .nan\n", *PLAN_OFFLINE),
        f"{CONFIG}: max_price: ",
        contains="got NaN",
    ),
    Row(
        "config-price-bool",
        config_then("max_price: yes\n", *PLAN_OFFLINE),
        f"{CONFIG}: max_price: ",
        contains="got true",
    ),
    Row(
        "config-price-huge",
        config_then("max_price: 1.0e+308\n", *PLAN_OFFLINE),
        f"{CONFIG}: max_price: ",
        contains="got 1e+308",
    ),
    Row(
        "config-region",
        config_then('region: "us east"\n', "market", "--offline"),
        f"{CONFIG}: region: must be a name of at most 64 letters",
    ),
    Row(
        "config-cloud",
        config_then("cloud: gcp\n", "up", "--yes", "--max-price", "3"),
        f"{CONFIG}: cloud: must be 'auto', 'aws' or 'sandbox', got \"gcp\"",
    ),
    Row(
        "config-cluster",
        config_then("cluster: a b\n", "train", str(REPO / "configs" / "resnet.yaml")),
        f"{CONFIG}: cluster: cluster name 'a b' is not allowed",
    ),
    Row(
        "config-cluster-number",
        config_then("cluster: 7\n", "train", str(REPO / "configs" / "resnet.yaml")),
        f"{CONFIG}: cluster: must be a cluster name, got 7",
    ),
    Row(
        "config-list",
        config_then("- region\n", *PLAN_OFFLINE),
        f"{CONFIG}: must be a mapping of keys (region, cloud, max_price, cluster, down_when_done, notify_secret), "
        "not a list",
    ),
    Row(
        "config-twice",
        config_then("region: us-east-1\nregion: us-west-2\n", *PLAN_OFFLINE),
        f"{CONFIG}:2: region: given twice (first at line 1)",
    ),
    Row("config-yaml", config_then("max_price: [3\n", *PLAN_OFFLINE), f"{CONFIG}:2: invalid YAML"),
    Row("config-directory", config_then(None, *PLAN_OFFLINE), f"config file is a directory: {CONFIG}"),
    Row(
        "config-set-bad",
        argv("config", "set", "max_price", "0"),
        "{d}/deepvm-home/config.yaml: max_price: ",
        contains="got 0",
    ),
    Row("config-set-unknown", argv("config", "set", "price", "3"), "price: unknown key"),
]

# the money guard (issue 25): refused before any cluster is looked up
RESNET = str(REPO / "configs" / "resnet.yaml")
ROWS += [
    Row(
        "guard-notify-ftp",
        argv("train", RESNET, "--notify", "ftp://example.com/hook"),
        "--notify must be an http:// or https:// URL with a host, got 'ftp://example.com/hook'",
    ),
    Row("guard-notify-no-host", argv("train", RESNET, "--notify", "http:///hook"), "--notify must be an http://"),
    Row(
        "guard-notify-no-secret",
        argv("train", RESNET, "--notify", "https://example.com/hook"),
        "--notify signs what it posts with notify_secret from the config file, which sets none",
    ),
    Row(
        "guard-notify-both",
        argv("train", RESNET, "--notify", "https://example.com/h", "--notify-cmd", "true"),
        "give --notify URL or --notify-cmd COMMAND, not both",
    ),
    Row(
        "guard-local-controller",
        argv("train", RESNET, "--controller", "local", "--idle", "30"),
        "--down-when-done, --idle, --max-duration and --notify are kept by the job's controller on the cluster's "
        "head, which --controller local does not run",
    ),
    Row(
        "guard-config-secret-short",
        config_then("notify_secret: short\n", "train", RESNET),
        f"{CONFIG}: notify_secret: must be a string of 16 to 256 printable characters",
    ),
    Row(
        "guard-config-down-text", config_then("down_when_done: maybe\n", "train", RESNET), f"{CONFIG}: down_when_done: "
    ),
    Row(
        "guard-config-set-down",
        argv("config", "set", "down_when_done", "maybe"),
        "{d}/deepvm-home/config.yaml: down_when_done: must be true or false, got 'maybe'",
    ),
]

# an unusable home: every command that keeps state says which directory and what to do

HOME_COMMANDS: list[tuple[str, list[str]]] = [
    ("plan", ["plan", "--offline", "--max-price", "3"]),
    ("status", ["status"]),
    ("up", ["up", "--cloud", "aws", "--yes", "--max-price", "3"]),
    ("down", ["down", "c1", "--yes"]),
    ("sandbox", ["sandbox", "status"]),
    ("train", ["train", str(REPO / "configs" / "resnet.yaml")]),
]
HOME_FIX = "; set DEEPVM_HOME to a directory you can write"


@dataclass(frozen=True)
class HomeRow(Row):
    """A row whose DEEPVM_HOME is `{d}/file/home`, below a regular file: it can never be created."""


ROWS += [
    HomeRow(
        f"home-uncreatable-{id_}", argv(*args), "cannot create deepvm's home {d}/file/home: Not a directory", HOME_FIX
    )
    for id_, args in HOME_COMMANDS
]


def test_the_table_covers_the_issue():
    """Every row names a file, a field or a flag; the generated rows reach every command with numbers."""
    for row in ROWS:
        marks = ("{d}", "--", "/dev/zero", "resnet.yaml", "cluster name", ": unknown key")
        assert any(mark in row.starts for mark in marks), row.id
    assert {words[0] for words, _, _ in numeric_options()} >= {"plan", "up", "interrupt", "train", "logs"}
    assert len({row.id for row in ROWS}) == len(ROWS)


@pytest.fixture(scope="module")
def cloud(moto_endpoint) -> AwsContext:  # noqa: F811
    """The moto server, emptied once for the module: no row may create anything, so every `up` row checks
    that it is still empty (emptying it per row would rebuild moto's EC2 for each, a second apiece)."""
    urllib.request.urlopen(urllib.request.Request(f"{moto_endpoint}/moto-api/reset", method="POST")).read()
    ctx = AwsContext(region=REGION, endpoint_url=moto_endpoint, credentials=("testing", "testing"))
    assert created_resources(ctx) == {}
    return ctx


@pytest.mark.parametrize("row", ROWS, ids=[row.id for row in ROWS])
def test_bad_input_is_one_line_naming_it_and_creates_nothing(row, tmp_path, monkeypatch, capsys, request):
    monkeypatch.chdir(tmp_path)
    if isinstance(row, HomeRow):
        (tmp_path / "file").write_text("")
        monkeypatch.setenv("DEEPVM_HOME", str(tmp_path / "file" / "home"))
    args = row.command(tmp_path)
    ctx = request.getfixturevalue("cloud") if args[0] == "up" else None
    if ctx is not None:
        monkeypatch.setenv("AWS_ENDPOINT_URL", request.getfixturevalue("moto_endpoint"))
    code = main(args)
    line = _one_line(code, capsys.readouterr().err)
    assert line.startswith("deepvm: error: " + row.starts.replace("{d}", str(tmp_path))), line
    assert row.contains in line
    assert not row.lacks or row.lacks not in line
    if ctx is not None:
        assert created_resources(ctx) == {}


def _one_line(code: int, err: str) -> str:
    lines = err.splitlines()
    assert code >= 2, err
    assert len(lines) == 1, err
    assert "internal error" not in err and "Traceback" not in err
    return lines[0]


def test_a_job_spec_with_several_mistakes_shows_each_on_its_own_line(tmp_path, capsys):
    path = _write(
        tmp_path / "job.yaml",
        JOB.replace("steps: 5", "step: 5").replace("samples: 64", "samples: many")
        + "optimizer: {lr: .nan}\nenv: {A B: x}\n",
    )
    assert main(["train", str(path)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"deepvm: error: {path}:8: dataset.samples: expected an integer, got 'many'",
        f"deepvm: error: {path}:9: step: unknown field; did you mean steps?",
        f"deepvm: error: {path}:11: optimizer.lr: must be a finite number, got nan",
        f"deepvm: error: {path}:12: env.'A B': 'A B' is not an environment variable name (letters, digits and '_', "
        "not starting with a digit)",
    ]


# a read-only home needs a mount of its own: one process, in a mount namespace, runs every command of the
# table in turn and reports each one's exit code and stderr

_RUN_EACH = """
import contextlib, io, json, sys
from deepvm_cli.main import main
results = {}
for id_, args in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(args)
    results[id_] = [code, err.getvalue()]
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def read_only_home(tmp_path_factory, cloud, moto_endpoint) -> tuple[Path, dict[str, list]]:  # noqa: F811
    """DEEPVM_HOME on a read-only bind mount, and what each of HOME_COMMANDS answered there."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("a read-only bind mount needs root and unshare")
    home = tmp_path_factory.mktemp("read-only-home")
    mount_then_run = 'mount --bind -o ro "$0" "$0" && exec "$@"'
    result = subprocess.run(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            mount_then_run,
            str(home),
            sys.executable,
            "-c",
            _RUN_EACH,
            json.dumps(HOME_COMMANDS),
        ],
        cwd=REPO,
        env={**os.environ, "DEEPVM_HOME": str(home), "AWS_ENDPOINT_URL": moto_endpoint},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if result.returncode != 0 and "mount" in result.stderr:
        pytest.skip(f"no read-only mount here: {result.stderr.strip()}")
    assert result.returncode == 0, result.stderr
    return home, json.loads(result.stdout)


@pytest.mark.parametrize("id_", [id_ for id_, _ in HOME_COMMANDS])
def test_a_read_only_home_is_one_line_naming_it(id_, read_only_home, cloud):
    home, results = read_only_home
    code, err = results[id_]
    assert _one_line(code, err) == (
        f"deepvm: error: deepvm's home {home} is not writable (a read-only file system); make it writable, or "
        "set DEEPVM_HOME to a directory you can write"
    )
    assert created_resources(cloud) == {}
