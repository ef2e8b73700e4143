"""Instance-profile credentials for a sandbox host's metadata endpoint, as EC2 serves them.

On EC2 the instance metadata hands a node the temporary credentials of the role in its instance profile,
and botocore's default chain finds them there ('iam-role'), with nothing in the environment. The sandbox
does the same from its own moto server: which profile the instance holds
(DescribeIamInstanceProfileAssociations), the role in it (GetInstanceProfile), and temporary credentials
for that role (STS AssumeRole). It asks with the sandbox's control-plane credentials, never the user's.

Why a lookup per request rather than a profile fixed at boot: the profile is associated with the head
after its host booted (`up` waits for the instances to run first), and it may be replaced. The answer is
kept a few seconds, and credentials until shortly before they expire, so that the metadata endpoint answers
within botocore's one-second timeout.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from provisioning.cloud.aws.context import AwsContext
from provisioning.sandbox.shared import CREDENTIALS, iso_time

PROFILE_TTL_S = 5.0  # how long a profile found is reused (a lookup that found none is not reused)
REFRESH_BEFORE = timedelta(minutes=20)  # botocore refreshes credentials with less than 15 min left
_DURATION_S = 3600


@dataclass(frozen=True)
class InstanceProfile:
    """The instance profile an instance holds, and the role in it."""

    arn: str
    profile_id: str
    role_name: str
    role_arn: str


@dataclass(frozen=True)
class RoleCredentials:
    """Temporary credentials of the instance's role."""

    access_key_id: str
    secret_access_key: str
    token: str
    expiration: datetime
    last_updated: datetime

    def document(self) -> dict[str, str]:
        """What EC2 answers at iam/security-credentials/ROLE."""
        return {
            "Code": "Success",
            "LastUpdated": iso_time(self.last_updated),
            "Type": "AWS-HMAC",
            "AccessKeyId": self.access_key_id,
            "SecretAccessKey": self.secret_access_key,
            "Token": self.token,
            "Expiration": iso_time(self.expiration),
        }


class InstanceCredentials:
    """The instance's profile and role credentials, read from the sandbox's moto server; thread-safe."""

    def __init__(self, endpoint: str, region: str, instance_id: str) -> None:
        self.instance_id = instance_id
        self._ctx = AwsContext(region=region, endpoint_url=endpoint, credentials=CREDENTIALS)
        self._lock = threading.Lock()
        self._profile: tuple[float, InstanceProfile | None] = (0.0, None)
        self._credentials: dict[str, RoleCredentials] = {}  # role ARN -> credentials

    def profile(self) -> InstanceProfile | None:
        """The instance's profile now, or None without one (or when the control plane does not answer)."""
        with self._lock:
            at, found = self._profile
            if found is None or time.monotonic() - at > PROFILE_TTL_S:  # "none" is never kept: asked again
                found = self._lookup_profile()
                self._profile = (time.monotonic(), found)
            return found

    def credentials(self, role_name: str) -> RoleCredentials | None:
        """Credentials for the instance's role, if `role_name` is that role."""
        profile = self.profile()
        if profile is None or profile.role_name != role_name:
            return None
        with self._lock:
            cached = self._credentials.get(profile.role_arn)
            if cached is None or cached.expiration - datetime.now(timezone.utc) < REFRESH_BEFORE:
                cached = self._assume(profile.role_arn)
                if cached is None:
                    return None
                self._credentials[profile.role_arn] = cached
            return cached

    def _lookup_profile(self) -> InstanceProfile | None:
        try:
            associations = self._ctx.client("ec2").describe_iam_instance_profile_associations(
                Filters=[
                    {"Name": "instance-id", "Values": [self.instance_id]},
                    {"Name": "state", "Values": ["associating", "associated"]},
                ]
            )["IamInstanceProfileAssociations"]
            if not associations:
                return None
            arn = associations[0]["IamInstanceProfile"]["Arn"]
            profile = self._ctx.client("iam").get_instance_profile(InstanceProfileName=arn.rsplit("/", 1)[-1])
        except (BotoCoreError, ClientError):
            return None
        found: dict[str, Any] = profile["InstanceProfile"]
        if not found["Roles"]:
            return None
        role = found["Roles"][0]
        return InstanceProfile(arn, found["InstanceProfileId"], role["RoleName"], role["Arn"])

    def _assume(self, role_arn: str) -> RoleCredentials | None:
        try:
            answer = self._ctx.client("sts").assume_role(
                RoleArn=role_arn, RoleSessionName=self.instance_id, DurationSeconds=_DURATION_S
            )["Credentials"]
        except (BotoCoreError, ClientError):
            return None
        return RoleCredentials(
            access_key_id=answer["AccessKeyId"],
            secret_access_key=answer["SecretAccessKey"],
            token=answer["SessionToken"],
            expiration=answer["Expiration"].astimezone(timezone.utc),
            last_updated=datetime.now(timezone.utc),
        )
