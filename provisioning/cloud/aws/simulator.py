"""IAM's policy simulator: which of a list of IAM actions a user's or role's policies allow, without making
any of the calls (https://docs.aws.amazon.com/IAM/latest/APIReference/API_SimulatePrincipalPolicy.html).

It evaluates the principal's identity policies, its groups' (for a user), its permissions boundary and the
organisation's service control policies, on every resource ("*": no resource is named). What that means
for a verdict, on the safe side (`Verdict`):
- "allowed": some statement allows the action on every resource;
- "explicitDeny": a statement denies it;
- "implicitDeny" with MissingContextValues: a statement would allow it under conditions the simulation had
  no values for (tags at launch, a role's path, ...): it cannot tell;
- "implicitDeny" without: nothing allows it on every resource. A grant limited to some resources (a role
  path, a tag) reads the same here, so a caller of `simulate` may ask EC2's DryRun before calling it
  missing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

from provisioning.cloud.aws.account import asking
from provisioning.cloud.aws.context import AwsContext


class Verdict(Enum):
    ALLOWED = "allowed"
    DENIED = "denied"  # explicitly, or nothing allows it on every resource
    CONDITIONAL = "conditional"  # allowed only under conditions the simulation cannot evaluate


@dataclass(frozen=True)
class Simulated:
    """The simulator's answer for one action."""

    action: str  # "ec2:CreateFleet"
    decision: str  # the simulator's EvalDecision: allowed, explicitDeny, implicitDeny
    missing_context: tuple[str, ...] = ()  # condition keys it had no value for

    @property
    def verdict(self) -> Verdict:
        if self.decision == "allowed":
            return Verdict.ALLOWED
        if self.decision == "implicitDeny" and self.missing_context:
            return Verdict.CONDITIONAL
        return Verdict.DENIED


def simulate(ctx: AwsContext, principal_arn: str, actions: Iterable[str]) -> dict[str, Simulated]:
    """The simulator's answer for each action; Refused when it cannot be asked (AccessDenied: the caller
    may not call iam:SimulatePrincipalPolicy, NoSuchEntity: no such principal)."""
    wanted = sorted(set(actions))
    spelled = {a.lower(): a for a in wanted}  # IAM's names are case-insensitive: keep the caller's spelling
    found: dict[str, Simulated] = {}
    with asking("iam:SimulatePrincipalPolicy"):
        pages = (
            ctx.client("iam")
            .get_paginator("simulate_principal_policy")
            .paginate(PolicySourceArn=principal_arn, ActionNames=wanted)
        )
        for page in pages:
            for result in page.get("EvaluationResults", []):
                name = spelled.get(result["EvalActionName"].lower(), result["EvalActionName"])
                found[name] = Simulated(name, result["EvalDecision"], tuple(result.get("MissingContextValues") or ()))
    return found
