"""Cluster names, tags and the names of the cloud resources derived from them.

The cluster name becomes a tag value and part of key-pair, security-group and launch-template names, so it
is checked once, here, against the characters all of those accept.
"""

from __future__ import annotations

import hashlib
import re

from provisioning.core.errors import InputError

CLUSTER_TAG = "deepvm:cluster"
ROLE_TAG = "deepvm:role"
DEFAULT_CLUSTER_NAME = "deepvm"

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


def check_cluster_name(name: str) -> str:
    """The name unchanged, or an InputError saying which characters are allowed."""
    if not _NAME.match(name):
        raise InputError(
            f"cluster name {name!r} is not allowed: use 1-63 letters, digits, '.', '_' or '-', starting with "
            "a letter or digit (AWS tags and resource names refuse the rest)"
        )
    return name


def resource_name(cluster: str) -> str:
    """The name of the cluster's key pair, security group and launch template."""
    return f"deepvm-{cluster}"


def controller_name(cluster: str) -> str:
    """The name of the IAM role and instance profile `up` makes for the cluster's controller:
    `deepvm-CLUSTER-controller`. IAM role names stop at 64 characters, so a long cluster name is cut and
    a hash of it added: still one fixed name per cluster, which the sweep finds with no local state."""
    name = f"deepvm-{cluster}-controller"
    if len(name) <= 64:
        return name
    digest = hashlib.sha256(cluster.encode()).hexdigest()[:8]
    return f"deepvm-{cluster[:37]}-{digest}-controller"


CONTROLLER_POLICY = "deepvm-controller"  # the inline policy of the controller's role


def cluster_tags(cluster: str, **extra: str) -> list[dict[str, str]]:
    tags = {CLUSTER_TAG: cluster, "Name": resource_name(cluster), **extra}
    return [{"Key": k, "Value": v} for k, v in tags.items()]


def tag_spec(resource_type: str, cluster: str) -> dict[str, object]:
    return {"ResourceType": resource_type, "Tags": cluster_tags(cluster)}


def cluster_filter(cluster: str) -> list[dict[str, object]]:
    return [{"Name": f"tag:{CLUSTER_TAG}", "Values": [cluster]}]
