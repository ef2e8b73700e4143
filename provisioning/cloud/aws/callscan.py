"""The AWS API calls deepvm's own source makes, read from the source itself (no test run needed): for each
module, every method called in it whose name is an operation of a service deepvm builds boto3 clients for
(`client("ec2")`, `boto3.client("s3")`): `describe_instances(...)` is EC2's DescribeInstances; each
operation named as a string (`get_paginator("list_objects_v2")`); and boto3's S3 transfer helpers
(`upload_file` makes PutObject or a multipart upload).

Over-approximate on purpose: a client handed to a helper module counts there (any module may call any
service deepvm builds clients for anywhere), and a method of another object that happens to share an
operation's name counts as a call, so a real call is never missed; the rights table
(provisioning.cloud.aws.rights) must name each.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]  # the repository (or site-packages) directory holding the packages
PACKAGES = ("deepvm_cli", "provisioning", "training", "deepcheck", "simulation")

# boto3's S3 transfer helpers are not API operations; these are the operations each may make
TRANSFERS = {
    "upload_file": (
        "PutObject",
        "CreateMultipartUpload",
        "UploadPart",
        "CompleteMultipartUpload",
        "AbortMultipartUpload",
    ),
    "upload_fileobj": (
        "PutObject",
        "CreateMultipartUpload",
        "UploadPart",
        "CompleteMultipartUpload",
        "AbortMultipartUpload",
    ),
    "download_file": ("HeadObject", "GetObject"),
    "download_fileobj": ("HeadObject", "GetObject"),
}


@dataclass(frozen=True, order=True)
class ApiCall:
    """One AWS API operation made by one module."""

    module: str  # dotted module name, e.g. "provisioning.cloud.aws.fleet"
    service: str  # botocore's service name, e.g. "ec2", "service-quotas"
    operation: str  # the API operation, e.g. "CreateFleet"


@cache
def _operations(service: str) -> dict[str, str]:
    """snake_case method name -> API operation name, for one botocore service."""
    import botocore.session
    from botocore import xform_name

    model = botocore.session.get_session().get_service_model(service)
    return {xform_name(name): name for name in model.operation_names}


def _modules(root: Path = ROOT) -> Iterator[tuple[str, Path]]:
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            yield ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__"), path


def _services(tree: ast.AST) -> set[str]:
    """The services a module builds clients for: the literal first argument of every `client(...)` call."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _name(node.func) == "client" and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                found.add(first.value)
    return found


def _name(func: ast.expr) -> str:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def module_calls(module: str, source: str, services: frozenset[str]) -> set[ApiCall]:
    """The calls of `services` one module's source makes: a method called by an operation's name, or an
    operation's name given as a string (`get_paginator("list_objects_v2")`, `paginate(ec2, "describe_...")`),
    on a client built here or handed in."""
    found: set[ApiCall] = set()
    for node in ast.walk(ast.parse(source)):
        names = []
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            names.append(node.func.attr)
        if isinstance(node, ast.Call):
            names += [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        for name in names:
            for service in services:
                if name in _operations(service):
                    found.add(ApiCall(module, service, _operations(service)[name]))
                if service == "s3" and name in TRANSFERS:
                    found |= {ApiCall(module, service, op) for op in TRANSFERS[name]}
    return found


@cache
def source_calls(root: Path = ROOT) -> frozenset[ApiCall]:
    """Every AWS call deepvm's packages make, by module, for every service any of them builds a client for."""
    sources = {module: path.read_text() for module, path in _modules(root)}
    services = frozenset(s for source in sources.values() for s in _services(ast.parse(source)))
    return frozenset(call for module, source in sources.items() for call in module_calls(module, source, services))
