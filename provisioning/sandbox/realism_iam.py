"""The IAM part of the realism layer (provisioning/sandbox/realism.py): EC2's DryRun answered as EC2
answers it, and the rights a test tells the sandbox to refuse. moto checks no IAM policy, so without this
the sandbox can never show what a missing right does.

- `answer_dry_run`: EC2 authorises a request with DryRun=true and never carries it out, answering
  DryRunOperation (HTTP 412) or UnauthorizedOperation (403) (https://docs.aws.amazon.com/AWSEC2/latest/
  APIReference/CommonParameters.html). moto honours the flag for some operations only and carries out the
  others (GetConsoleOutput, DescribeFleets, DeleteFleets, AssociateIamInstanceProfile's kin, ...); the server
  answers every EC2 request that has it.
- `refused_actions`: these IAM actions are refused to every caller, as IAM refuses a caller whose policy lacks
  them: EC2 answers UnauthorizedOperation, a query API (IAM, STS) or a JSON API (SSM, Service Quotas)
  AccessDenied, in AWS's words "... is not authorized to perform: ACTION ...". A request needs the action of
  its own name; a tagged create also needs ec2:CreateTags (https://docs.aws.amazon.com/AWSEC2/latest/
  UserGuide/supported-iam-actions-tagging.html), CreateFleet also ec2:RunInstances
  (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-fleet-prerequisites.html). S3's REST requests are
  not refused.

`answer(environ, realism)` is called by realism_moto's wrapper of moto's WSGI application for every request;
it imports no moto. `deepvm check` shows its ✗ rows in tests/cloud/test_check.py through `refused_actions`.
"""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

from provisioning.sandbox.realism import Realism

_CALLER = "arn:aws:sts::123456789012:user/moto"  # who moto's STS says every caller is
_DRY_RUN = "Request would have succeeded, but DryRun flag is set."

Wsgi = Callable[[dict[str, Any], Callable[..., Any]], Any]


def _body(environ: dict[str, Any]) -> bytes:
    """The request's body, read once and put back for moto to read."""
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length) if length else b""
    environ["wsgi.input"] = io.BytesIO(body)
    return body


def answer(environ: dict[str, Any], realism: Realism) -> Wsgi | None:
    """The answer EC2 or IAM would give instead of moto's, or None to let moto answer."""
    service = _signing_name(environ.get("HTTP_AUTHORIZATION", ""))
    if not service or service == "s3" or not (realism.refused_actions or realism.answer_dry_run):
        return None
    target = environ.get("HTTP_X_AMZ_TARGET", "")  # a JSON API: "AmazonSSM.GetParameter"
    body = _body(environ)
    if target:
        operation, params = target.rsplit(".", 1)[-1], {}
    else:
        query = environ.get("QUERY_STRING", "") + "&" + body.decode("utf-8", "replace")
        params = {key: values[0] for key, values in parse_qs(query).items()}
        operation = params.get("Action", "")
    if not operation:
        return None
    refused = sorted(_needed(service, operation, params) & set(realism.refused_actions))
    if refused:
        return _refusal(service, bool(target), refused[0])
    if realism.answer_dry_run and service == "ec2" and params.get("DryRun", "").lower() == "true":
        return _ec2_error(412, "DryRunOperation", _DRY_RUN)
    return None


def _signing_name(authorization: str) -> str:
    """ "ec2" from SigV4's "Credential=KEY/20260101/us-east-1/ec2/aws4_request"."""
    scope = authorization.partition("Credential=")[2].split(",")[0].split("/")
    return scope[3] if len(scope) >= 5 else ""


def _needed(service: str, operation: str, params: dict[str, str]) -> set[str]:
    """The IAM actions AWS authorises the request with (the module docstring says which)."""
    needed = {f"{service}:{operation}"}  # the services deepvm calls sign with their IAM prefix
    if service == "ec2" and any(key.startswith("TagSpecification") for key in params):
        needed.add("ec2:CreateTags")
    if service == "ec2" and operation == "CreateFleet":
        needed.add("ec2:RunInstances")
    return needed


def _refusal(service: str, json_api: bool, action: str) -> Wsgi:
    message = (
        f"You are not authorized to perform this operation. User: {_CALLER} is not authorized to perform: "
        f"{action} because no identity-based policy allows the {action} action (refused by the sandbox)"
    )
    if service == "ec2":
        return _ec2_error(403, "UnauthorizedOperation", message)
    from werkzeug.wrappers import Response

    if json_api:
        body = json.dumps({"__type": "AccessDeniedException", "message": message})
        return Response(body, status=400, mimetype="application/x-amz-json-1.1")
    body = (
        f"<ErrorResponse><Error><Type>Sender</Type><Code>AccessDenied</Code><Message>{_xml(message)}</Message>"
        f"</Error><RequestId>{uuid.uuid4()}</RequestId></ErrorResponse>"
    )
    return Response(body, status=403, mimetype="text/xml")


def _ec2_error(status: int, code: str, message: str) -> Wsgi:
    from werkzeug.wrappers import Response

    body = (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>{code}</Code>'
        f"<Message>{_xml(message)}</Message></Error></Errors><RequestID>{uuid.uuid4()}</RequestID></Response>"
    )
    return Response(body, status=status, mimetype="text/xml")


def _xml(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
