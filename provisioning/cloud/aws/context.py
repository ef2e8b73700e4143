"""Where the AWS provider talks to: region, endpoint and credentials, and the clients built from them.

One object instead of loose client arguments, so that the sandbox can point the very same provider code at
its moto server with throw-away credentials (it must never use the user's real keys), and tests can reach
the clients to register botocore event hooks or Stubbers.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import boto3
import botocore.session
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from botocore.loaders import Loader

from provisioning.core.errors import CloudError

T = TypeVar("T")
_RETRIES = Config(retries={"mode": "standard", "max_attempts": 4}, connect_timeout=5, read_timeout=60)


class _Clients:
    """Makes clients, each from a boto3 session of its own (a session is not thread-safe, and reads credentials
    and region when made), all on one botocore data loader per process. A loader per session parsed the
    service's JSON model and the endpoint rules anew for every client: 0.17 CPU-s an EC2 client, 0.03 on the
    shared loader, which keeps what it parsed (the models are files of the installed botocore)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # one client at a time: the loader is shared, and its search paths trimmed
        self._loader: Loader | None = None
        self._paths = 0  # how many search paths the loader has with boto3's own data folder

    def client(self, service: str, **kwargs: Any) -> Any:
        with self._lock:
            core = botocore.session.Session()
            if self._loader is not None:
                core.register_component("data_loader", self._loader)
            session = boto3.session.Session(botocore_session=core)  # appends boto3's data folder to the paths
            if self._loader is None:
                self._loader = core.get_component("data_loader")
                self._paths = len(self._loader.search_paths)
            del self._loader.search_paths[self._paths :]  # once is enough: not once more per client
            return session.client(service, **kwargs)


_CLIENTS = _Clients()


@dataclass
class AwsContext:
    """A region and an endpoint; `client(name)` returns one cached boto3 client per service."""

    region: str
    endpoint_url: str | None = None  # None: boto3's own resolution, which honours AWS_ENDPOINT_URL
    credentials: tuple[str, str] | None = None  # static keys (the sandbox's fake ones); None: default chain
    _clients: dict[str, Any] = field(default_factory=dict, repr=False)

    def client(self, service: str) -> Any:
        if service not in self._clients:
            kwargs: dict[str, Any] = {"region_name": self.region, "config": _RETRIES}
            if self.endpoint_url:
                kwargs["endpoint_url"] = self.endpoint_url
            if self.credentials:
                kwargs["aws_access_key_id"], kwargs["aws_secret_access_key"] = self.credentials
            self._clients[service] = _CLIENTS.client(service, **kwargs)
        return self._clients[service]

    @property
    def emulated(self) -> bool:
        """True when the endpoint is a local emulator (loopback), not AWS."""
        url = self.endpoint_url or os.environ.get("AWS_ENDPOINT_URL", "")
        host = url.split("://", 1)[-1].split(":", 1)[0].split("/", 1)[0]
        return host in ("localhost", "::1") or host.startswith("127.")


def has_aws_credentials() -> bool:
    """Whether boto3's default chain (env, profile, SSO, instance role) finds credentials."""
    try:
        return boto3.session.Session().get_credentials() is not None
    except BotoCoreError:
        return False


def default_region() -> str | None:
    return boto3.session.Session().region_name


@functools.cache
def partition_of(region: str) -> str:
    """The AWS partition of a region, with which every ARN in it begins: aws, aws-us-gov (GovCloud), aws-cn
    (China), ... from botocore's endpoint data. A region botocore does not know yet is taken for `aws`: an
    ARN of the wrong partition matches nothing, so a policy written with it grants nothing. Kept per region:
    the data is the installed botocore's, and reading it (a session of its own, its endpoint rules parsed)
    took 0.07 CPU-s a call, made by every policy deepvm writes."""
    try:
        return str(boto3.session.Session().get_partition_for_region(region))
    except BotoCoreError:
        return "aws"


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def until_known(call: Callable[[], T], codes: tuple[str, ...], budget_s: float) -> T:
    """`call()`, tried again with backoff while it fails with one of `codes`, for up to `budget_s`.

    For a call about something created a moment ago: EC2 is eventually consistent, and "does not exist"
    right after a create is one of its documented answers (InvalidGroup.NotFound after
    CreateSecurityGroup: https://docs.aws.amazon.com/ec2/latest/devguide/eventual-consistency.html), which
    AWS asks callers to retry with backoff."""
    deadline = time.monotonic() + budget_s
    delay = 0.5
    while True:
        try:
            return call()
        except ClientError as exc:
            if error_code(exc) not in codes or time.monotonic() + delay > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 8.0)


@contextmanager
def cloud_errors(what: str) -> Iterator[None]:
    """Turn botocore failures into one-line CloudErrors that say what deepvm was doing."""
    try:
        yield
    except ClientError as exc:
        err = exc.response.get("Error", {})
        raise CloudError(f"{what}: {err.get('Code', 'error')}: {err.get('Message', exc)}") from exc
    except BotoCoreError as exc:
        raise CloudError(f"{what}: {exc}") from exc
