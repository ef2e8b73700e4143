"""The rights rows of `deepvm check`: each IAM action that `plan`, `up`, `train` and `down` call with your
credentials (the rights table, provisioning.cloud.aws.rights, `Use.RUN`), and whether you hold it.

Who answers, in turn:
1. IAM's policy simulator on your user, or on your role for an assumed role's session, where you may call
   iam:SimulatePrincipalPolicy (provisioning.cloud.aws.simulator; a local emulator has none);
2. EC2's DryRun for an EC2 action the simulator did not call allowed (provisioning.cloud.aws.dryrun): the
   simulator reads "no statement allows it on every resource" for a grant limited to some resources, and
   DryRun asks the very authorisation EC2 makes;
3. nobody, for the rest: the row is ? with why, never ✓.
"""

from __future__ import annotations

from collections.abc import Callable

from provisioning.account.report import CheckRow, Mark, Section
from provisioning.cloud.aws.account import Principal, Refused
from provisioning.cloud.aws.context import AwsContext
from provisioning.cloud.aws.dryrun import ALLOWED, REFUSED, Answer, dry_run, probes
from provisioning.cloud.aws.rights import Side, Use, needs
from provisioning.cloud.aws.simulator import Simulated, Verdict, simulate

README = 'README "What deepvm needs from your AWS account"'


def wanted_rights() -> dict[str, str]:
    """IAM action -> what deepvm calls it for, for every right `deepvm check` probes."""
    return {action: "; ".join(sorted(why)) for action, why in sorted(needs(Side.USER, frozenset({Use.RUN})).items())}


def rights_rows(ctx: AwsContext, principal: Principal, image_id: str | None) -> list[CheckRow]:
    """One row per right, from the simulator where it answers, from DryRun where it does not say allowed."""
    wanted = wanted_rights()
    simulated, without = _simulated(ctx, principal, list(wanted))
    available = probes(image_id)
    asked = {a for a in wanted if a in available and _verdict(simulated, a) is not Verdict.ALLOWED}
    answers = dry_run(ctx, asked | {also for a in asked for also in available[a].also}, image_id)

    def held(action: str) -> bool:
        answer = answers.get(action)
        return (answer is not None and answer.code == ALLOWED) or _verdict(simulated, action) is Verdict.ALLOWED

    return [
        _row(action, why, simulated.get(action), answers.get(action), held, without) for action, why in wanted.items()
    ]


def _verdict(simulated: dict[str, Simulated], action: str) -> Verdict | None:
    found = simulated.get(action)
    return None if found is None else found.verdict


def _simulated(ctx: AwsContext, principal: Principal, actions: list[str]) -> tuple[dict[str, Simulated], str]:
    """The simulator's answers, or none and why."""
    if ctx.emulated:
        return {}, "no IAM policy simulator here (moto)"
    if not principal.arn:
        return {}, principal.why_none
    try:
        return simulate(ctx, principal.arn, actions), ""
    except Refused as exc:
        if exc.denied:
            return {}, f"you may not call iam:SimulatePrincipalPolicy ({exc.code})"
        guessed = " (your role's ARN was guessed without its path: iam:GetRole was refused)" * principal.guessed
        return {}, f"IAM's policy simulator did not answer: {exc.code}{guessed}"


def _row(
    action: str, why: str, simulated: Simulated | None, answer: Answer | None, held: Callable[[str], bool], without: str
) -> CheckRow:
    def row(mark: Mark, detail: str, fix: str = "") -> CheckRow:
        return CheckRow(Section.RIGHTS, action, mark, detail, fix, needed_for=why)

    add = f"add {action} to your IAM policy ({README})"
    if answer is not None and answer.code == ALLOWED:
        return row(Mark.OK, "EC2 DryRun: allowed")
    if simulated is not None and simulated.verdict is Verdict.ALLOWED:
        return row(Mark.OK, "IAM policy simulator: allowed")
    if answer is not None and answer.code == REFUSED:
        unproven = [a for a in answer.also if not held(a)]
        if not unproven:
            return row(Mark.MISSING, "EC2 DryRun: UnauthorizedOperation", add)
        return row(
            Mark.UNKNOWN, f"EC2 DryRun refused a request that also needs {', '.join(unproven)}, itself not shown held"
        )
    if simulated is not None and simulated.verdict is Verdict.DENIED:
        if simulated.decision == "explicitDeny":
            return row(
                Mark.MISSING,
                "IAM policy simulator: explicitDeny",
                f"remove the Deny of {action} (your policies, permissions boundary or an SCP)",
            )
        return row(Mark.MISSING, "IAM policy simulator: no statement allows it on every resource", add)
    if simulated is not None:  # conditional
        keys = ", ".join(simulated.missing_context)
        return row(Mark.UNKNOWN, f"IAM policy simulator: allowed only under conditions on {keys}")
    if answer is not None:
        return row(Mark.UNKNOWN, f"EC2 DryRun answered {answer.code}, not whether the right is held; {without}")
    only = "EC2 has no DryRun for it" if action.startswith("ec2:") else "only EC2 takes DryRun"
    return row(Mark.UNKNOWN, f"{without}; {only}" if without else only)
