"""What `deepvm check` found: one typed row per thing checked, and the report that holds them.

A row is ✓ only when something answered that it holds (STS, EC2's DryRun, IAM's policy simulator, Service
Quotas, the image's record); ✗ when something answered that it does not, always with the one line that
fixes it; ? when nothing could tell, with why. The exit code follows from the marks (`CheckReport.exit_code`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any

from provisioning.cloud.aws.account import CallerIdentity
from provisioning.cloud.types import CloudKind

READY, MISSING, UNKNOWN_UNDER_STRICT = 0, 1, 3  # exit codes; 2 is bad input, 4 a cloud deepvm could not start


class Mark(Enum):
    OK = "✓"
    MISSING = "✗"
    UNKNOWN = "?"

    @property
    def word(self) -> str:
        """The mark as `--json` spells it."""
        return self.name.lower()


class Section(Enum):
    """The parts of a check, in the order they are shown."""

    CREDENTIALS = "credentials"
    REGION = "region"
    RIGHTS = "rights"  # each IAM action `plan`, `up`, `train` and `down` call with your credentials
    PLAN = "plan"  # the plan quotas are held against
    QUOTAS = "quotas"  # vCPU quotas (AWS) or this machine's room for hosts (the sandbox)
    IMAGE = "image"


@dataclass(frozen=True)
class CheckRow:
    """One thing checked."""

    section: Section
    name: str  # what: "ec2:CreateFleet", "spot vCPUs of G and VT", the image id
    mark: Mark
    detail: str  # what was found, or why it cannot be told
    fix: str = ""  # for ✗: the one line that makes it ✓ (which action to add, which quota to raise, ...)
    needed_for: str = ""  # for a right: what deepvm calls it for

    def __post_init__(self) -> None:
        if self.mark is Mark.MISSING and not self.fix:
            raise ValueError(f"a ✗ row says how to fix it: {self.name}")

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "section": self.section.value, "mark": self.mark.value, "status": self.mark.word}


@dataclass(frozen=True)
class CheckReport:
    """Everything one `deepvm check` found, in section order."""

    cloud: CloudKind
    region: str
    identity: CallerIdentity | None  # None: the credentials did not answer
    rows: tuple[CheckRow, ...]

    def count(self, mark: Mark) -> int:
        return sum(1 for row in self.rows if row.mark is mark)

    def exit_code(self, strict: bool) -> int:
        """0 when nothing is ✗ (and, with `strict`, nothing is ?), 1 when something is ✗, 3 when only unknowns
        stand between `strict` and 0."""
        if self.count(Mark.MISSING):
            return MISSING
        return UNKNOWN_UNDER_STRICT if strict and self.count(Mark.UNKNOWN) else READY

    def to_dict(self) -> dict[str, Any]:
        return {
            "cloud": self.cloud.value,
            "region": self.region,
            "identity": None
            if self.identity is None
            else {**asdict(self.identity), "partition": self.identity.partition, "kind": self.identity.kind},
            "counts": {mark.word: self.count(mark) for mark in Mark},
            "rows": [row.to_dict() for row in self.rows],
        }
