"""The real-account smoke test: deepvm's whole AWS path once, on the smallest cluster it launches, for a few
cents. Run it from the repository root:

    .venv/bin/python -m scripts.aws_smoke --cloud aws --region us-east-1 --yes

Steps, each timed, the first failure ending the run (after `down` and the sweep):
1. the tiny plan: one spot trainer of the cheapest GPU type and one on-demand holder of the cheapest CPU
   type (a Tiering plan: the cheapest shape `up` accepts), from the live catalog of the region;
2. `deepvm check --plan` on it: nothing may be ✗ (a ? is shown, not fatal);
3. a live `deepvm plan` (it must be planned on AWS's prices, not the snapshot);
4. `deepvm up` of the tiny plan;
5. a replacement's CreateFleet with DryRun=True, made on the head node with the head's own credentials: its
   instance profile, deepvm's controller role. Why from the head over SSH rather than sts:AssumeRole from
   here: the role trusts ec2.amazonaws.com alone (policies.trust_policy), and widening that trust for a
   test would be a right nobody needs; on the head the request is signed exactly as a real replacement's
   is, with the credentials the head reads from its instance metadata. The step also shows that those are
   the credentials it used (an instance role, never keys);
6. `deepvm down`, whatever happened before;
7. the sweep: everything still tagged with the cluster's name (instances, fleets, launch templates, security
   groups, key pairs, detached volumes, IAM roles and profiles), listed; anything left fails the run.

What it costs on AWS: the two nodes run for the minutes between `up` and `down` (about 5 to 10 with the Deep
Learning AMI's boot), billed per second with a minute's minimum: with a g4dn.xlarge spot (about $0.20/h) and
a t3.xlarge (about $0.17/h) that is 3 to 7 US cents. Everything else it calls (STS, IAM's simulator,
pricing, quotas, DryRun) is free. The run prints the plan's $/h before `up` and asks unless --yes is given.

`--cloud sandbox` runs the same steps against the sandbox (no charges; tests/cloud/test_check.py does, so
this script is run in CI). It works under its own DEEPVM_HOME (a new temporary one unless --home is
given, deleted after a run that passed), so the user's saved plan, clusters and keys are never touched.

Exit codes: 0 every step passed and nothing is left; 1 a step failed or something is left; 2 bad input;
77 skipped: --cloud aws and no AWS credentials (automake's code for a skipped test).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

SKIPPED = 77
_MINUTES = 10  # what a run keeps nodes up, at most, for the cost shown before `up`

# run on the head: the replacement's CreateFleet with DryRun, with whatever credentials boto3 finds there;
# prints the credentials' source and owner, then EC2's answer
_HEAD_SCRIPT = """
import json, sys
import boto3
from botocore.exceptions import ClientError
session = boto3.session.Session()
print(session.get_credentials().method)
print(session.client("sts").get_caller_identity()["Arn"])
try:
    session.client("ec2").create_fleet(DryRun=True, **json.loads(sys.argv[1]))
    print("NoDryRunAnswer")
except ClientError as exc:
    print(exc.response["Error"]["Code"], exc.response["Error"].get("Message", ""))
"""


class StepFailed(Exception):
    """One step of the smoke test did not do what it must."""


@dataclass
class Smoke:
    """One run: where, the cluster's name, and what has been done so far."""

    cloud: str  # aws | sandbox
    region: str
    name: str  # the cluster's, new for every run
    workdir: Path
    yes: bool
    launched: bool = False  # `up` was called: `down` must follow

    def deepvm(self, *args: str, stdout: io.StringIO | None = None) -> int:
        """`deepvm ARGS` in this process; its stdout into `stdout` when given."""
        from deepvm_cli.main import main

        with contextlib.redirect_stdout(stdout) if stdout is not None else contextlib.nullcontext():
            return main(list(args))

    def tiny_plan(self) -> str:
        plan = cheapest_plan(self.cloud, self.region)
        (self.workdir / "plan.json").write_text(json.dumps(plan.to_dict()))
        return f"{plan.summary()} in {plan.availability_zone}, ${plan.price_per_hour:.4f}/h"

    def check(self) -> str:
        code = self.deepvm(
            "check", "--cloud", self.cloud, "--region", self.region, "--plan", str(self.workdir / "plan.json")
        )
        if code != 0:
            raise StepFailed(f"deepvm check exited {code}: fix its ✗ rows first")
        return "nothing is ✗"

    def plan(self) -> str:
        out = io.StringIO()
        offline = ["--offline"] if self.cloud == "sandbox" else []
        code = self.deepvm(
            "plan", "--max-price", "2", "--region", self.region, "--top", "1", "--json", *offline, stdout=out
        )
        if code != 0:
            raise StepFailed(f"deepvm plan exited {code}")
        best = json.loads(out.getvalue())["plans"][0]
        wanted = "snapshot" if offline else "aws"
        if best["catalog_source"] != wanted:
            raise StepFailed(f"the plan was made on {best['catalog_source']!r} prices, not {wanted!r}")
        return f"best plan ${best['price_per_hour']:.4f}/h on {best['catalog_source']} prices"

    def up(self) -> str:
        self.launched = True
        code = self.deepvm(
            "up", "--plan", str(self.workdir / "plan.json"), "--name", self.name, "--cloud", self.cloud, "--yes"
        )
        if code != 0:
            raise StepFailed(f"deepvm up exited {code}")
        return f"cluster {self.name} is up"

    def head_dry_run(self) -> str:
        method, caller, answer = dry_run_on_head(self.name)
        if method != "iam-role":
            raise StepFailed(f"the head used {method} credentials, not its instance profile's (iam-role)")
        if not answer.startswith("DryRunOperation"):
            raise StepFailed(f"the head's replacement would be refused: {answer}")
        return f"DryRunOperation for {caller} ({method})"

    def down(self) -> str:
        out = io.StringIO()
        code = self.deepvm("down", self.name, "--yes", "--json", stdout=out)
        if code != 0:
            raise StepFailed(f"deepvm down exited {code}")
        cost = json.loads(out.getvalue()).get("cost_usd")
        free = " at AWS prices (the sandbox bills nothing)" if self.cloud == "sandbox" else ""
        return f"down; it cost ${cost or 0:.4f}{free}"

    def sweep(self) -> str:
        left = leftover_lines(self.cloud, self.region, self.name)
        if left:
            raise StepFailed(f"{len(left)} resource(s) of {self.name} are left: " + "; ".join(left))
        return f"nothing of {self.name} is left"


def cheapest_plan(cloud: str, region: str):  # -> provisioning.planner.plan.Plan
    """The cheapest Tiering plan there is: one spot trainer of the cheapest GPU type the default image drives,
    in its cheapest zone that also offers the cheapest on-demand CPU holder type, priced from the region's
    catalog (the live one on AWS, the snapshot in the sandbox)."""
    from provisioning.catalog.model import Market
    from provisioning.catalog.sources import resolve_catalog
    from provisioning.cloud.aws.images import PYTORCH_DLAMI
    from provisioning.cloud.aws.offerings import not_offered
    from provisioning.clusters.target import resolve_target
    from provisioning.planner.plan import Architecture, NodeGroup, Plan, Role

    catalog = resolve_catalog(regions=[region], offline=cloud == "sandbox", catalog_file=None)
    spot = sorted(
        (price, zone, t.name)
        for t in catalog.gpu_types()
        if PYTORCH_DLAMI.why_not(t.name, Role.TRAINER) is None
        for zone, price in catalog.spot_prices(t.name, region).items()
    )
    on_demand = sorted(
        (price, t.name) for t in catalog.cpu_types() if (price := catalog.on_demand_price(t.name, region)) is not None
    )
    if not spot or not on_demand:
        raise StepFailed(f"the catalog of {region} has no spot GPU type or no on-demand CPU type")
    holder_price, holder = on_demand[0]
    ctx = resolve_target(cloud).context(region)
    trainer_price, zone, trainer = next((s for s in spot[:20] if not not_offered(ctx, s[1], [s[2], holder])), spot[0])
    nodes = (
        NodeGroup.of(catalog.types[trainer], Market.SPOT, 1, Role.TRAINER, trainer_price),
        NodeGroup.of(catalog.types[holder], Market.ON_DEMAND, 1, Role.HOLDER, holder_price),
    )
    flops = catalog.types[trainer].flops
    return Plan(
        Architecture.TIERING,
        region,
        zone,
        nodes,
        trainer_price + holder_price,
        flops,
        flops,
        catalog_source=catalog.source,
        prices_as_of=catalog.as_of,
    )


def dry_run_on_head(name: str) -> tuple[str, str, str]:
    """On the cluster's head, with the head's credentials: the CreateFleet a replacement trainer is bought
    with (deepvm's own fleet_request, from the cluster's launch template), DryRun. Returns the credentials'
    source, their owner's ARN and EC2's answer (its code first)."""
    from provisioning.cloud.aws.fleet import LaunchSite, fleet_request
    from provisioning.clusters.handle import Cluster
    from provisioning.planner.plan import Role
    from training.client.managed import head_of
    from training.shared.transport import run_command

    cluster = Cluster.open_running(name)
    head, row = head_of(cluster, cluster.node_python), cluster.row
    trainer = next(g for g in row.plan.nodes if g.role is Role.TRAINER)
    site = LaunchSite(row.identity, row.resources.launch_template_id, row.resources.subnet_id, row.availability_zone)
    request = fleet_request(site, trainer.instance_type, [replace(trainer, count=1)], uuid.uuid4().hex, False)
    lines: list[str] = []
    command = f"{shlex.quote(head.python)} -c {shlex.quote(_HEAD_SCRIPT)} {shlex.quote(json.dumps(request))}"
    # botocore gives the instance metadata one second and one try by default; a sandbox host's endpoint asks
    # the sandbox's moto for the role's credentials first, which a loaded machine may take longer for
    env = {**cluster.controller_env(), "AWS_METADATA_SERVICE_TIMEOUT": "5", "AWS_METADATA_SERVICE_NUM_ATTEMPTS": "3"}
    code = run_command(head.host, command, lambda line: lines.append(line.text), env=env, timeout=120)
    if code != 0 or len(lines) < 3:
        raise StepFailed(f"the DryRun on the head {head.instance_id} failed (exit {code}): {' | '.join(lines[-3:])}")
    return lines[-3], lines[-2], lines[-1]


def leftover_lines(cloud: str, region: str, name: str) -> list[str]:
    """Everything still tagged with the cluster's name, one line each with the command that deletes it."""
    from provisioning.cloud.aws.teardown import leftovers_named
    from provisioning.clusters.target import resolve_target

    ctx = resolve_target(cloud).context(region, start=False)
    if ctx is None:  # a sandbox that is not running holds nothing
        return []
    return [f"{item} ({item.delete_command(region, ctx.endpoint_url)})" for item in leftovers_named(ctx, name)]


def run(smoke: Smoke, say: Callable[[str], None]) -> int:
    """Every step in turn; `down` and the sweep whatever happened. 0 when all passed."""
    steps: list[tuple[str, Callable[[], str]]] = [
        ("tiny plan", smoke.tiny_plan),
        ("check", smoke.check),
        ("live plan", smoke.plan),
        ("up", smoke.up),
        ("replacement DryRun from the head", smoke.head_dry_run),
    ]
    failed = False
    for title, step in steps:
        if title == "up" and not (smoke.yes or _confirmed(smoke, say)):
            say("smoke: stopped before `up`: nothing was launched")
            return 1
        failed = not _timed(title, step, say)
        if failed:
            break
    for title, step in ([("down", smoke.down)] if smoke.launched else []) + [("sweep", smoke.sweep)]:
        failed = not _timed(title, step, say) or failed
    return 1 if failed else 0


def _timed(title: str, step: Callable[[], str], say: Callable[[str], None]) -> bool:
    from provisioning.core.errors import DeepvmError

    started = time.monotonic()
    try:
        said, passed = step(), True
    except (StepFailed, DeepvmError) as exc:
        said, passed = str(exc), False
    say(f"smoke: {title}: {'ok' if passed else 'FAILED'} ({time.monotonic() - started:.1f} s): {said}")
    return passed


def _confirmed(smoke: Smoke, say: Callable[[str], None]) -> bool:
    """On AWS, ask before spending (the plan's $/h is in the tiny plan's line above)."""
    if smoke.cloud == "sandbox":
        return True
    question = f"smoke: launch the tiny plan for at most about {_MINUTES} minutes? [y/N] "
    if not sys.stdin.isatty():
        say("smoke: pass --yes to launch on AWS (no terminal to ask on)")
        return False
    sys.stderr.write(question)
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.aws_smoke", description=__doc__.split("\n\n")[0])
    parser.add_argument("--cloud", choices=("aws", "sandbox"), default="aws")
    parser.add_argument("--region", help="default: the configured region (sandbox: us-east-1)")
    parser.add_argument("--yes", action="store_true", help="launch on AWS without asking")
    parser.add_argument("--home", type=Path, help="DEEPVM_HOME to work in (default: a new temporary one)")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return 2 if exc.code else 0

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    from provisioning.cloud.aws.context import default_region, has_aws_credentials

    if args.cloud == "aws" and not has_aws_credentials():
        say("smoke: skipped: no AWS credentials found (configure them as for the AWS CLI)")
        return SKIPPED
    region = args.region or (default_region() if args.cloud == "aws" else None) or "us-east-1"
    before = os.environ.get("DEEPVM_HOME")
    home = args.home or Path(tempfile.mkdtemp(prefix="deepvm-smoke-"))
    os.environ["DEEPVM_HOME"] = str(home)
    from provisioning.sandbox.control import running_sandbox, stop_sandbox

    ours = args.cloud == "sandbox" and running_sandbox() is None  # a sandbox this run starts, it stops
    name, code = f"smoke-{uuid.uuid4().hex[:6]}", 1
    with tempfile.TemporaryDirectory(prefix="deepvm-smoke-plan-") as workdir:
        try:
            code = run(Smoke(args.cloud, region, name, Path(workdir), args.yes), say)
            return code
        finally:
            if ours:
                stop_sandbox()
            if args.home is None and code == 0:  # its keys and records are of no more use
                shutil.rmtree(home, ignore_errors=True)
            elif args.home is None:
                say(f"smoke: its state is kept for a retry: DEEPVM_HOME={home} deepvm down {name} --yes")
            if before is None:
                os.environ.pop("DEEPVM_HOME", None)
            else:
                os.environ["DEEPVM_HOME"] = before


if __name__ == "__main__":
    sys.exit(main())
