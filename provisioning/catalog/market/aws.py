"""Shared helpers of the live AWS sources: client creation, pagination and what an AWS error means.

Clients use short timeouts and few retries because the caller has a good fallback (the built-in
snapshot): a user without network should get an answer in seconds, not after botocore's default minute
of retries. `AWS_ENDPOINT_URL` and profiles work as in the AWS CLI because boto3 reads them itself.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    NoRegionError,
    PartialCredentialsError,
    ProfileNotFound,
    ReadTimeoutError,
)

from provisioning.core.errors import CloudError, InputError

CLIENT_CONFIG = Config(connect_timeout=3, read_timeout=20, retries={"max_attempts": 2, "mode": "standard"})

# Error codes that mean "these credentials cannot be used here" rather than "this request is wrong".
AUTH_ERROR_CODES = frozenset(
    {
        "AuthFailure",
        "InvalidClientTokenId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "ExpiredTokenException",
        "RequestExpired",
        "UnrecognizedClientException",
        "InvalidAccessKeyId",
        "OptInRequired",
    }
)
# Codes that mean the credentials are good but lack the right to this one call (an IAM policy's doing):
# saying "AWS refused the credentials" then sends the user to fix what works.
DENIED_ERROR_CODES = frozenset({"AccessDenied", "AccessDeniedException", "UnauthorizedOperation"})


NO_CREDENTIALS = "no AWS credentials found"
REFUSED_CREDENTIALS = "AWS refused the credentials"
MISSING_RIGHT = "your AWS identity lacks the right"


class AwsUnavailable(Exception):
    """AWS cannot be used right now (no credentials, no connection, credentials refused).

    `reason` is a short phrase for the user, e.g. "no AWS credentials found".
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class AwsClients:
    """Makes (and reuses) boto3 clients of one session. Tests subclass it to attach botocore Stubbers."""

    def __init__(self, session: boto3.session.Session | None = None) -> None:
        try:
            self.session = session or boto3.session.Session()
        except ProfileNotFound as exc:
            # A misspelt profile is the user's to fix, not a reason to quietly use the snapshot.
            raise InputError(f"{exc}; set AWS_PROFILE to a profile in your AWS config, or unset it") from None
        self._clients: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()  # boto3 sessions are not safe to create clients from in parallel

    def require_credentials(self) -> None:
        """Fail fast, before any network call, when the session has no credentials at all."""
        if self.session.get_credentials() is None:
            raise AwsUnavailable(NO_CREDENTIALS)

    def default_region(self) -> str | None:
        return self.session.region_name

    def client(self, service: str, region: str) -> Any:
        with self._lock:
            key = (service, region)
            if key not in self._clients:
                self._clients[key] = self.session.client(service, region_name=region, config=CLIENT_CONFIG)
            return self._clients[key]


def paginate(client: Any, operation: str, result_key: str, **params: Any) -> Iterator[Any]:
    """Every item under `result_key` across all pages of `operation`."""
    for page in client.get_paginator(operation).paginate(**params):
        yield from page.get(result_key, [])


def unavailable_reason(exc: BaseException, right: str = "") -> str | None:
    """A user-facing reason when `exc` means AWS cannot be used (at all, or for this call, whose IAM
    action is `right`); None for any other error."""
    if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
        return NO_CREDENTIALS
    if isinstance(exc, (EndpointConnectionError, ConnectTimeoutError, ConnectionClosedError)):
        return f"AWS could not be reached ({exc})"
    if isinstance(exc, ReadTimeoutError):
        return "AWS did not answer in time"
    if isinstance(exc, NoRegionError):
        return "no AWS region configured"
    if isinstance(exc, ClientError):
        code = exc.response.get("Error", {}).get("Code", "")
        message = exc.response.get("Error", {}).get("Message", "")
        detail = f"{code}: {message}" if message else code
        if code in AUTH_ERROR_CODES:
            return f"{REFUSED_CREDENTIALS} ({detail})"
        if code in DENIED_ERROR_CODES:
            return f"{MISSING_RIGHT} {right or f'to call {exc.operation_name}'} ({detail})"
    return None


def translate(exc: BotoCoreError | ClientError, what: str, right: str = "") -> Exception:
    """The exception to raise for a failed AWS call (whose IAM action is `right`): AwsUnavailable, or a
    one-line CloudError.

    Server-side failures (HTTP 5xx after retries, also what an endpoint without the service answers,
    e.g. a moto server asked for prices) make AWS unavailable rather than the request wrong.
    """
    reason = unavailable_reason(exc, right)
    if reason is not None:
        return AwsUnavailable(reason)
    if isinstance(exc, ClientError):
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        if status >= 500:
            return AwsUnavailable(f"AWS failed to return {what} (HTTP {status})")
        error = exc.response.get("Error", {})
        return CloudError(f"AWS refused {what}: {error.get('Code', 'error')}: {error.get('Message', '')}")
    return CloudError(f"AWS call for {what} failed: {exc}")
