"""`deepvm check` and the real-account smoke test (issue 21).

Without a cloud: the probes never act (every request carries DryRun=True and asks a right of the rights
table), the simulator's and DryRun's answers become the right marks, identities and bad input. Against a
moto server as "AWS" (the `moto` fixture): the AWS path with an emulator that has no policy simulator.
Against the sandbox (one for the module, started by the first check): the rows moto cannot tell read ?,
the sandbox refuses rights on request (provisioning/sandbox/refusals.py) and check shows them ✗ with their
fix, and scripts/aws_smoke.py runs whole (a two-node cluster up and down, about 15 s).
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import boto3
import botocore.session
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from deepvm_cli.main import main
from provisioning.account.access import _row, wanted_rights
from provisioning.account.report import CheckReport, CheckRow, Mark, Section
from provisioning.cloud.aws import rights
from provisioning.cloud.aws.account import CallerIdentity, simulated_principal
from provisioning.cloud.aws.context import AwsContext
from provisioning.cloud.aws.dryrun import Answer, probes
from provisioning.cloud.aws.rights import Side, Use, needs
from provisioning.cloud.aws.simulator import Simulated, Verdict, simulate
from provisioning.cloud.names import ClusterIdentity, resource_name, tag_spec
from provisioning.cloud.types import CloudKind
from provisioning.sandbox.realism import SANDBOX_IMAGE, RealismControl
from scripts import aws_smoke
from tests.cloud.plans import make_plan, make_tiering_plan, write_plans

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox's hosts and moto server need root")


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """`deepvm ARGS` in this process, its table as wide as its rows (each row one line, whatever ran before)."""
    from deepvm_cli.ui import console

    with pytest.MonkeyPatch.context() as line:
        line.setenv("COLUMNS", "200")
        out, err = console.new_consoles()
        line.setattr(console, "out", out)
        line.setattr(console, "err", err)
        code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def rows_of(out: str) -> dict[str, dict]:
    """`check --json`'s rows by name."""
    return {row["name"]: row for row in json.loads(out)["rows"]}


# --- the probes never act, and probe only the rights table's rights ---------------------------------------


class _Sent(Exception):
    """Raised by the hook below instead of sending: what would have gone out."""

    def __init__(self, operation: str, params: dict) -> None:
        self.operation, self.params = operation, params


def test_every_probe_sends_dry_run_and_asks_a_right_its_operation_needs():
    ec2 = boto3.client("ec2", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")

    def intercept(params: dict, model, **_: object) -> None:
        raise _Sent(model.name, params)

    ec2.meta.events.register("before-parameter-build.ec2.*", intercept)
    ec2_model = botocore.session.get_session().get_service_model("ec2")
    for action, probe in probes("ami-0123456789abcdef0").items():
        with pytest.raises(_Sent) as sent:
            probe.send(ec2)
        operation, params = sent.value.operation, sent.value.params
        assert params["DryRun"] is True, action
        assert "DryRun" in ec2_model.operation_model(operation).input_shape.members
        assert action in rights.call("ec2", operation).actions, f"{operation} is not authorised by {action}"
        for other in probe.also:
            assert other in wanted_rights()


def test_the_rights_probed_are_the_tables_for_plan_up_train_and_down():
    wanted = wanted_rights()
    assert set(wanted) == set(needs(Side.USER, frozenset({Use.RUN})))
    assert {"ec2:CreateFleet", "iam:PassRole", "iam:CreateRole", "pricing:GetProducts"} <= set(wanted)
    # an optional command's rights and check's own are listed in the README, never probed
    assert not {a for a in wanted if a.startswith("fis:")} and "iam:SimulatePrincipalPolicy" not in wanted
    assert set(probes("ami-0123456789abcdef0")) <= set(wanted)
    assert "ec2:CreateFleet" in wanted["ec2:CreateFleet"] or "EC2 Fleet" in wanted["ec2:CreateFleet"]


# --- what each answer means ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("decision", "missing", "verdict"),
    [
        ("allowed", (), Verdict.ALLOWED),
        ("explicitDeny", (), Verdict.DENIED),
        ("implicitDeny", (), Verdict.DENIED),
        ("implicitDeny", ("aws:RequestTag/deepvm:cluster",), Verdict.CONDITIONAL),
        ("explicitDeny", ("aws:RequestTag/deepvm:cluster",), Verdict.DENIED),
    ],
)
def test_the_simulators_decisions(decision, missing, verdict):
    assert Simulated("ec2:CreateFleet", decision, missing).verdict is verdict


def _rights_row(
    simulated: Simulated | None, answer: Answer | None, held: set[str] = frozenset(), without: str = "why"
) -> CheckRow:
    return _row("ec2:CreateFleet", "buying nodes", simulated, answer, held.__contains__, without)


def test_dry_run_allowed_wins_over_a_simulator_that_found_no_grant_on_every_resource():
    row = _rights_row(Simulated("ec2:CreateFleet", "implicitDeny"), Answer("ec2:CreateFleet", "DryRunOperation"))
    assert (row.mark, row.detail) == (Mark.OK, "EC2 DryRun: allowed")


def test_an_explicit_deny_says_to_remove_it_and_a_missing_grant_to_add_it():
    denied = _rights_row(Simulated("ec2:CreateFleet", "explicitDeny"), None)
    assert denied.mark is Mark.MISSING and denied.fix.startswith("remove the Deny of ec2:CreateFleet")
    lacking = _rights_row(
        Simulated("ec2:CreateFleet", "implicitDeny"), Answer("ec2:CreateFleet", "InvalidLaunchTemplateId.NotFound")
    )
    assert lacking.mark is Mark.MISSING and lacking.fix.startswith("add ec2:CreateFleet to your IAM policy")


def test_what_cannot_be_told_is_unknown_never_ok():
    conditional = _rights_row(Simulated("ec2:CreateFleet", "implicitDeny", ("ec2:CreateAction",)), None)
    assert conditional.mark is Mark.UNKNOWN and "ec2:CreateAction" in conditional.detail
    also = _rights_row(None, Answer("ec2:CreateFleet", "UnauthorizedOperation", also=("ec2:RunInstances",)))
    assert also.mark is Mark.UNKNOWN and "also needs ec2:RunInstances" in also.detail
    pinned = _rights_row(
        None, Answer("ec2:CreateFleet", "UnauthorizedOperation", also=("ec2:RunInstances",)), held={"ec2:RunInstances"}
    )
    assert pinned.mark is Mark.MISSING
    other = _rights_row(None, Answer("ec2:CreateFleet", "InvalidLaunchTemplateId.NotFound"), without="no simulator")
    assert other.mark is Mark.UNKNOWN and other.detail.endswith("not whether the right is held; no simulator")
    nothing = _rights_row(None, None, without="no simulator")
    assert (nothing.mark, nothing.detail) == (Mark.UNKNOWN, "no simulator; EC2 has no DryRun for it")


def test_a_missing_row_must_say_how_to_fix_it_and_the_exit_code_follows_the_marks():
    with pytest.raises(ValueError):
        CheckRow(Section.RIGHTS, "ec2:CreateFleet", Mark.MISSING, "refused")
    ok, unknown = CheckRow(Section.REGION, "r", Mark.OK, ""), CheckRow(Section.IMAGE, "i", Mark.UNKNOWN, "")
    missing = CheckRow(Section.QUOTAS, "q", Mark.MISSING, "", "raise it")
    report = CheckReport(CloudKind.AWS, "us-east-1", None, (ok, unknown))
    assert (report.exit_code(strict=False), report.exit_code(strict=True)) == (0, 3)
    report = CheckReport(CloudKind.AWS, "us-east-1", None, (ok, unknown, missing))
    assert (report.exit_code(strict=False), report.exit_code(strict=True)) == (1, 1)
    assert report.to_dict()["counts"] == {"ok": 1, "missing": 1, "unknown": 1}


# --- whose policies the simulator reads ------------------------------------------------------------------------


def test_callers_and_the_principal_simulated_for_each():
    ctx = AwsContext(region="us-east-1", credentials=("x", "x"))
    user = CallerIdentity("123456789012", "arn:aws-us-gov:iam::123456789012:user/ops/ana", "AIDA")
    assert (user.kind, user.partition, simulated_principal(ctx, user).arn) == ("user", "aws-us-gov", user.arn)
    root = CallerIdentity("123456789012", "arn:aws:iam::123456789012:root", "123456789012")
    assert root.kind == "root" and not simulated_principal(ctx, root).arn
    session = CallerIdentity("123456789012", "arn:aws:sts::123456789012:assumed-role/Admin/ana@example.com", "AROA")
    assert (session.kind, session.role_name) == ("assumed-role", "Admin")
    with Stubber(ctx.client("iam")) as iam:  # the role's ARN, with its path, from iam:GetRole
        arn = "arn:aws:iam::123456789012:role/aws-reserved/sso.amazonaws.com/Admin"
        iam.add_response(
            "get_role",
            {
                "Role": {
                    "Path": "/aws-reserved/sso.amazonaws.com/",
                    "RoleName": "Admin",
                    "RoleId": "AROAEXAMPLEEXAMPLE123",
                    "Arn": arn,
                    "CreateDate": "2026-01-01T00:00:00Z",
                }
            },
            {"RoleName": "Admin"},
        )
        assert simulated_principal(ctx, session).arn == arn
        iam.add_client_error("get_role", "AccessDenied")
        guessed = simulated_principal(ctx, session)
    assert (guessed.arn, guessed.guessed) == ("arn:aws:iam::123456789012:role/Admin", True)


def test_the_simulator_is_read_page_by_page_and_keeps_the_callers_spelling():
    ctx = AwsContext(region="us-east-1", credentials=("x", "x"))
    principal = "arn:aws:iam::123456789012:user/ana"
    with Stubber(ctx.client("iam")) as iam:
        iam.add_response(
            "simulate_principal_policy",
            {
                "EvaluationResults": [{"EvalActionName": "ec2:createfleet", "EvalDecision": "allowed"}],
                "IsTruncated": True,
                "Marker": "m1",
            },
            {"PolicySourceArn": principal, "ActionNames": ["ec2:CreateFleet", "iam:PassRole"]},
        )
        iam.add_response(
            "simulate_principal_policy",
            {
                "EvaluationResults": [
                    {
                        "EvalActionName": "iam:PassRole",
                        "EvalDecision": "implicitDeny",
                        "MissingContextValues": ["iam:PassedToService"],
                    }
                ],
                "IsTruncated": False,
            },
            {"PolicySourceArn": principal, "ActionNames": ["ec2:CreateFleet", "iam:PassRole"], "Marker": "m1"},
        )
        found = simulate(ctx, principal, ["iam:PassRole", "ec2:CreateFleet"])
    assert found["ec2:CreateFleet"].verdict is Verdict.ALLOWED
    assert found["iam:PassRole"].verdict is Verdict.CONDITIONAL


# --- bad input, and no credentials -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--cloud", "mars"], "--cloud must be one of auto, aws, sandbox, not 'mars'"),
        (["--region", "us-east-1,eu-west-1"], "--region takes one region for check, got 'us-east-1,eu-west-1'"),
        (["--region", "all"], "--region takes one region for check, got 'all'"),
        (["--region", "mars-1"], "--region 'mars-1' is no EC2 region botocore knows (e.g. us-east-1, eu-west-1)"),
        (["--region", ""], "--region needs a region name, a comma-separated list, or 'all'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, line, capsys):
    code, out, err = run(capsys, "check", "--cloud", "aws", *args)
    assert (code, out, err) == (2, "", f"deepvm: error: {line}\n")


def test_a_plan_for_another_region_is_refused(tmp_path, capsys):
    plan = write_plans(tmp_path / "plan.json", make_plan(spot=1))
    code, _, err = run(capsys, "check", "--cloud", "aws", "--plan", str(plan), "--region", "eu-west-1")
    assert (code, err) == (
        2,
        "deepvm: error: the plan is for us-east-1, not eu-west-1; plan again with --region eu-west-1\n",
    )


def test_no_credentials_is_a_missing_row_with_its_fix_and_nothing_else_asked(monkeypatch, tmp_path, capsys):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    code, out, _ = run(capsys, "check", "--cloud", "aws", "--json")
    assert code == 1
    rows = json.loads(out)["rows"]
    assert rows[0]["mark"] == "✗" and rows[0]["fix"].startswith("configure credentials as for the AWS CLI")
    assert [r["detail"] for r in rows if r["section"] != "plan"][1:] == ["not checked: no credentials"] * 4
    assert aws_smoke.main(["--cloud", "aws"]) == aws_smoke.SKIPPED


# --- a moto server as AWS: no policy simulator, DryRun as moto answers it ----------------------------------------


def test_on_an_emulator_rights_no_probe_can_tell_are_unknown_and_the_image_is_read(moto, capsys):
    ec2 = AwsContext(region="us-east-1").client("ec2")
    instance = ec2.run_instances(ImageId=SANDBOX_IMAGE, InstanceType="t3.micro", MinCount=1, MaxCount=1)
    image = ec2.create_image(InstanceId=instance["Instances"][0]["InstanceId"], Name="deepvm-test")["ImageId"]
    code, out, err = run(capsys, "check", "--cloud", "aws", "--region", "us-east-1", "--ami", image, "--json")
    assert code == 0, err
    rows = rows_of(out)
    assert rows["credentials"]["mark"] == "✓" and rows["us-east-1"]["mark"] == "✓"
    assert rows["ec2:DescribeInstances"]["detail"] == "EC2 DryRun: allowed"
    # moto alone carries GetConsoleOutput out whatever DryRun says; the realism layer answers as EC2 does
    assert rows["ec2:GetConsoleOutput"]["detail"] == "EC2 DryRun: allowed"
    assert rows["ec2:AssociateIamInstanceProfile"]["mark"] == "?"  # it takes no DryRun
    assert rows["iam:CreateRole"] == {
        **rows["iam:CreateRole"],
        "mark": "?",
        "detail": "no IAM policy simulator here (moto); only EC2 takes DryRun",
    }
    assert rows[image]["mark"] == "✓" and rows[image]["detail"] == "deepvm-test: available, x86_64"
    assert rows["PyTorch on the image"]["mark"] == "?"
    assert all(
        r["mark"] != "✓"
        for r in json.loads(out)["rows"]
        if r["section"] == "rights" and not r["name"].startswith("ec2:")
    )


def _code(call) -> tuple[str, str]:
    with pytest.raises(ClientError) as failed:
        call()
    error = failed.value.response["Error"]
    return error["Code"], error["Message"]


def test_the_realism_layer_answers_dry_run_as_ec2_and_refuses_as_iam(realism):
    ctx = AwsContext(region="us-east-1")
    ec2, iam, ssm = ctx.client("ec2"), ctx.client("iam"), ctx.client("ssm")
    # moto alone carries GetConsoleOutput out (InvalidInstanceID.NotFound); EC2 only says whether it may
    assert _code(lambda: ec2.get_console_output(DryRun=True, InstanceId="i-00000000000000000"))[0] == "DryRunOperation"
    realism.change(refused_actions=("ec2:CreateTags", "ec2:RunInstances", "iam:GetRole", "ssm:GetParameter"))
    ec2.create_security_group(GroupName="untagged", Description="needs no ec2:CreateTags")
    tags = [{"ResourceType": "security-group", "Tags": [{"Key": "k", "Value": "v"}]}]
    code, message = _code(lambda: ec2.create_security_group(GroupName="t", Description="t", TagSpecifications=tags))
    assert code == "UnauthorizedOperation" and "is not authorized to perform: ec2:CreateTags" in message
    fleet = {
        "Type": "instant",
        "TargetCapacitySpecification": {"TotalTargetCapacity": 1},
        "LaunchTemplateConfigs": [{"LaunchTemplateSpecification": {"LaunchTemplateId": "lt-0", "Version": "1"}}],
    }
    code, message = _code(lambda: ec2.create_fleet(DryRun=True, **fleet))  # an instant fleet runs instances
    assert code == "UnauthorizedOperation" and "ec2:RunInstances" in message
    assert _code(lambda: iam.get_role(RoleName="r"))[0] == "AccessDenied"
    assert _code(lambda: ssm.get_parameter(Name="p"))[0] == "AccessDeniedException"
    assert _code(lambda: ec2.describe_instances(DryRun=True))[0] == "DryRunOperation"


# --- the sandbox: one for the module ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sandbox_home(tmp_path_factory):
    """DEEPVM_HOME of one sandbox, started by the first check and stopped at the end."""
    home = tmp_path_factory.mktemp("check") / "home"
    yield home
    os.environ["DEEPVM_HOME"] = str(home)
    try:
        from provisioning.sandbox.control import stop_sandbox

        stop_sandbox()
    finally:
        os.environ.pop("DEEPVM_HOME")


@pytest.fixture
def sandbox(sandbox_home, monkeypatch):
    monkeypatch.setenv("DEEPVM_HOME", str(sandbox_home))
    return sandbox_home


def _realism() -> RealismControl:
    from provisioning.sandbox.control import running_sandbox

    info = running_sandbox()
    assert info is not None
    return RealismControl(info.endpoint)


@needs_root
def test_in_the_sandbox_only_what_something_answered_is_ok(sandbox, capsys):
    code, out, err = run(capsys, "check", "--cloud", "sandbox", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["cloud"] == "sandbox" and report["counts"]["missing"] == 0
    for row in report["rows"]:
        if row["section"] != "rights":
            continue
        if row["mark"] == "✓":
            assert row["detail"] == "EC2 DryRun: allowed", row
        else:
            assert row["mark"] == "?" and row["detail"].startswith("no IAM policy simulator here (moto)"), row
    rows = rows_of(out)
    assert rows["iam:PassRole"]["mark"] == rows["ec2:AssociateIamInstanceProfile"]["mark"] == "?"
    assert rows["plan"]["mark"] == "?" and "no saved plan" in rows["plan"]["detail"]
    assert run(capsys, "check", "--cloud", "sandbox", "--strict")[0] == 3


@needs_root
def test_a_right_the_sandbox_refuses_is_missing_with_the_action_to_add(sandbox, tmp_path, capsys):
    plan = write_plans(tmp_path / "plan.json", make_tiering_plan(spot=1, holders=1))
    run(capsys, "check", "--cloud", "sandbox", "--json")  # the sandbox runs
    realism = _realism()
    realism.change(refused_actions=("ec2:RunInstances", "ec2:DeleteVolume"))
    try:
        code, out, _ = run(capsys, "check", "--cloud", "sandbox", "--plan", str(plan))
    finally:
        realism.change(refused_actions=())
    assert code == 1
    lines = out.splitlines()
    assert any(
        line.startswith("✗") and "ec2:RunInstances" in line and "UnauthorizedOperation" in line for line in lines
    )
    assert (
        '  ✗ ec2:RunInstances: add ec2:RunInstances to your IAM policy (README "What deepvm needs from your AWS '
        'account")' in lines
    )
    assert (
        '  ✗ ec2:DeleteVolume: add ec2:DeleteVolume to your IAM policy (README "What deepvm needs from your AWS '
        'account")' in lines
    )
    fleet = next(line for line in lines if "ec2:CreateFleet" in line)  # refused, but for want of RunInstances
    assert fleet.startswith("?") and "also needs ec2:RunInstances" in fleet
    assert any(line.startswith("✓") and "2 sandbox hosts" in line for line in lines)
    assert any(line.startswith("✓  g4dn.xlarge (trainer)") and "drives its T4 GPUs" in line for line in lines)
    assert lines[-1].endswith(": not ready: fix the ✗ rows") and "2 ✗" in lines[-1]


@needs_root
def test_a_plan_that_cannot_be_launched_is_missing_not_bad_input(sandbox, tmp_path, capsys):
    plan = write_plans(tmp_path / "plan.json", replace(make_plan(spot=1), availability_zone="us-east-1z"))
    code, out, _ = run(capsys, "check", "--cloud", "sandbox", "--plan", str(plan), "--json")
    assert code == 1
    row = rows_of(out)[str(plan)]
    assert row["mark"] == "✗" and row["detail"].startswith("availability_zone: 'us-east-1z' is not a zone of us-east-1")
    assert row["fix"] == "plan again: `deepvm plan --max-price X` (or pass --plan FILE)"


@needs_root
def test_trainers_the_image_cannot_drive_are_missing_with_the_fix(sandbox, tmp_path, capsys):
    plan = write_plans(tmp_path / "plan.json", make_plan(spot=1, instance_type="p3.2xlarge"))
    code, out, _ = run(capsys, "check", "--cloud", "sandbox", "--plan", str(plan), "--json")
    assert code == 1
    rows = rows_of(out)
    for role in ("anchor", "trainer"):
        row = rows[f"p3.2xlarge ({role})"]
        assert row["mark"] == "✗" and row["detail"].startswith("its V100 GPUs are not among the instances it supports")
        assert row["fix"].startswith("plan without p3 (`deepvm plan`), or pass `deepvm up --ami AMI_ID`")


@needs_root
@pytest.mark.sandbox
def test_the_smoke_script_runs_whole_against_the_sandbox_and_its_sweep_finds_what_is_left(sandbox, capsys):
    from provisioning.sandbox.control import ensure_sandbox, running_sandbox

    ensure_sandbox()  # the module's: the script stops only a sandbox it started
    assert aws_smoke.main(["--cloud", "sandbox", "--home", str(sandbox)]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("smoke: ")]
    steps = [line.split(":")[1].strip() for line in said]
    assert steps == ["tiny plan", "check", "live plan", "up", "replacement DryRun from the head", "down", "sweep"]
    assert all(": ok (" in line for line in said), said
    dry_run = said[4]
    assert "DryRunOperation for arn:aws:sts::123456789012:assumed-role/deepvm-smoke-" in dry_run
    assert "-controller/i-" in dry_run and dry_run.endswith("(iam-role)")  # the head's role, from its metadata
    # something left tagged with a cluster's name is found and named, with the command that deletes it
    cluster = ClusterIdentity("smoke-left", "0a1b2c3d")
    ctx = running_sandbox().context("us-east-1")
    key = Ed25519PrivateKey.generate().public_key().public_bytes(Encoding.OpenSSH, PublicFormat.OpenSSH)
    ctx.client("ec2").import_key_pair(
        KeyName=resource_name(cluster), PublicKeyMaterial=key, TagSpecifications=[tag_spec("key-pair", cluster)]
    )
    left = aws_smoke.Smoke("sandbox", "us-east-1", "smoke-left", Path("."), yes=True)
    with pytest.raises(
        aws_smoke.StepFailed,
        match=r"1 resource\(s\) of smoke-left are left: key pair "
        r"deepvm-smoke-left-0a1b2c3d \(aws ec2 delete-key-pair",
    ):
        left.sweep()
