"""Cluster names, tags and the names of the cloud resources derived from them.

The cluster name becomes a tag value and part of key-pair, security-group and launch-template names, so it
is checked once, here, against the characters all of those accept.

A name is the user's; it is not unique in an AWS account. Two people (or two machines) of one account may
both call their cluster `deepvm`, the default. So every cluster `up` makes gets a random id (`ClusterIdentity`,
kept in the cluster's record), and everything deepvm makes in the cloud is named and tagged with it: the
key pair, security group and launch template `deepvm-NAME-ID`, the IAM roles `deepvm-NAME-ID-REGION-KIND`
(IAM is account-wide, so the region is in the name too), the tag `deepvm:cluster-id` that `down` sweeps by
and that the head's policy is limited to. The tag `deepvm:cluster` still carries the name, for people
and for `down NAME` when the local record is lost.

A cluster recorded before ids existed has the id "" and keeps its old names and scope (the name tag alone);
its sweeps leave out whatever carries an id tag, which belongs to a cluster made since.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from provisioning.core.errors import InputError

CLUSTER_TAG = "deepvm:cluster"  # the user's name for the cluster
CLUSTER_ID_TAG = "deepvm:cluster-id"  # the id of one cluster made by `up`: what deepvm's scope is
ROLE_TAG = "deepvm:role"  # a node bought after `up` (a replacement): the role it was bought for
PRICE_TAG = "deepvm:usd-per-hour"  # ... and the price it was bought at (a type or market the plan may lack)
DEFAULT_CLUSTER_NAME = "deepvm"
IAM_PATH = "/deepvm/"  # the path of deepvm's IAM roles and instance profiles: one cheap listing finds them
IAM_NAME_MAX = 64  # IAM role and instance profile names stop at 64 characters

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
_ID = re.compile(r"^[0-9a-f]{8}$")


def check_cluster_name(name: str) -> str:
    """The name unchanged, or an InputError saying which characters are allowed."""
    if not _NAME.match(name):
        raise InputError(
            f"cluster name {name!r} is not allowed: use 1-63 letters, digits, '.', '_' or '-', starting with "
            "a letter or digit (AWS tags and resource names refuse the rest)"
        )
    return name


def check_cluster_id(cluster_id: str) -> str:
    """The id unchanged, or an InputError saying what an id looks like."""
    if not _ID.match(cluster_id):
        raise InputError(f"cluster id {cluster_id!r} is not one: ids are 8 hexadecimal digits, e.g. 3fa9c1d2")
    return cluster_id


@dataclass(frozen=True)
class ClusterIdentity:
    """Which cluster, in the cloud: the user's name for it and the id `up` gave it."""

    name: str
    cluster_id: str = ""  # 8 hex digits; "" for a cluster recorded before ids existed

    @classmethod
    def new(cls, name: str) -> ClusterIdentity:
        """A new cluster called `name`, with a fresh random id (32 bits: two of one account never meet)."""
        return cls(name, secrets.token_hex(4))

    @property
    def scope_tag(self) -> tuple[str, str]:
        """The tag (key, value) that tells the cluster's resources from everyone else's: what the sweeps
        filter by and what the head's policy is limited to."""
        return (CLUSTER_ID_TAG, self.cluster_id) if self.cluster_id else (CLUSTER_TAG, self.name)

    def owns(self, tags: Iterable[dict[str, Any]] | None) -> bool:
        """Whether a resource carrying `tags` (as AWS lists them, Key/Value) is this cluster's."""
        found = {t["Key"]: t["Value"] for t in tags or ()}
        if self.cluster_id:
            return found.get(CLUSTER_ID_TAG) == self.cluster_id
        return found.get(CLUSTER_TAG) == self.name and CLUSTER_ID_TAG not in found

    def describe(self) -> str:
        """How messages name it: `c1`, or `c1 (id 3fa9c1d2)` where the id tells it from others."""
        return f"{self.name} (id {self.cluster_id})" if self.cluster_id else self.name


def resource_name(cluster: ClusterIdentity) -> str:
    """The name of the cluster's key pair, security group and launch template."""
    return f"deepvm-{cluster.name}-{cluster.cluster_id}" if cluster.cluster_id else f"deepvm-{cluster.name}"


def role_name(cluster: ClusterIdentity, region: str, kind: str = "controller") -> str:
    """The name of an IAM role (and its instance profile) `up` makes for the cluster: `kind` is
    "controller" (the head's) or "holders" (the other checkpoint holders').

    `deepvm-NAME-ID-REGION-KIND`, the name cut to fit IAM's 64 characters (the id keeps it unique). A cluster
    recorded before ids has its controller's old name, `deepvm-NAME-controller` (a hash replacing the end
    of a long name), so that `down` still finds it."""
    if not cluster.cluster_id:
        name = f"deepvm-{cluster.name}-{kind}"
        if len(name) <= IAM_NAME_MAX:
            return name
        digest = hashlib.sha256(cluster.name.encode()).hexdigest()[:8]
        return f"deepvm-{cluster.name[:37]}-{digest}-{kind}"
    tail = f"-{cluster.cluster_id}-{region}-{kind}"
    return f"deepvm-{cluster.name[: IAM_NAME_MAX - len('deepvm-') - len(tail)]}{tail}"


def cluster_tags(cluster: ClusterIdentity, **extra: str) -> list[dict[str, str]]:
    tags = {CLUSTER_TAG: cluster.name, "Name": resource_name(cluster), **extra}
    if cluster.cluster_id:
        tags[CLUSTER_ID_TAG] = cluster.cluster_id
    return [{"Key": k, "Value": v} for k, v in tags.items()]


def tag_spec(resource_type: str, cluster: ClusterIdentity, **extra: str) -> dict[str, object]:
    return {"ResourceType": resource_type, "Tags": cluster_tags(cluster, **extra)}


def cluster_filter(cluster: ClusterIdentity) -> list[dict[str, object]]:
    """The EC2 Describe filter for the cluster's resources. For a cluster without an id it also matches
    newer clusters of the same name: pass what it finds through `owned_by`."""
    key, value = cluster.scope_tag
    return [{"Name": f"tag:{key}", "Values": [value]}]


def owned_by(cluster: ClusterIdentity, items: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The described resources (each with its `Tags`) that are the cluster's."""
    return [item for item in items if cluster.owns(item.get("Tags"))]
