"""The sandbox metadata endpoint serves instance-profile credentials as EC2 does: looked up in the moto
server, found by botocore's default chain with nothing in the environment, and only where a profile is."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest

from provisioning.sandbox.credentials import InstanceCredentials
from provisioning.sandbox.metadata import NOTICES, MetadataServer, endpoint_url
from tests.cloud.plans import REGION


@contextmanager
def _imds(tmp_path, endpoint: str, instance_id: str) -> Iterator[str]:
    (tmp_path / NOTICES).mkdir()
    fd = os.open(tmp_path / NOTICES, os.O_RDONLY | os.O_DIRECTORY)
    ip = f"127.{random.randint(2, 250)}.{random.randint(1, 250)}.{random.randint(1, 250)}"
    credentials = InstanceCredentials(endpoint, REGION, instance_id)
    server = MetadataServer(ip, {"instance-id": instance_id}, "", fd, credentials)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield endpoint_url(ip)
    finally:
        server.shutdown()
        server.server_close()
        os.close(fd)


def _get(imds: str, path: str) -> tuple[int, str]:
    put = urllib.request.Request(
        f"{imds}latest/api/token", method="PUT", headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"}
    )
    token = urllib.request.urlopen(put).read().decode()
    get = urllib.request.Request(f"{imds}{path}", headers={"X-aws-ec2-metadata-token": token})
    try:
        with urllib.request.urlopen(get) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""


def _default_chain(imds: str, endpoint: str) -> list[str]:
    """What boto3 finds in a fresh process whose environment holds no credentials: its method, and the
    number of reservations DescribeInstances returns with them."""
    code = (
        "import boto3\n"
        "c = boto3.Session().get_credentials()\n"
        "print(c.method if c else 'none')\n"
        "print(len(boto3.client('ec2').describe_instances()['Reservations']) if c else '-')\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_EC2_METADATA_SERVICE_ENDPOINT=imds,
        AWS_ENDPOINT_URL=endpoint,
        AWS_DEFAULT_REGION=REGION,
        AWS_SHARED_CREDENTIALS_FILE="/nonexistent",
        AWS_CONFIG_FILE="/nonexistent",
    )
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


@pytest.fixture
def instance(ctx, ami) -> str:
    return ctx.client("ec2").run_instances(ImageId=ami, MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]


def _give_profile(ctx, instance: str, name: str = "deepvm-c1-controller") -> str:
    iam = ctx.client("iam")
    iam.create_role(RoleName=name, AssumeRolePolicyDocument="{}")
    arn = iam.create_instance_profile(InstanceProfileName=name)["InstanceProfile"]["Arn"]
    iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=name)
    ctx.client("ec2").associate_iam_instance_profile(IamInstanceProfile={"Name": name}, InstanceId=instance)
    return arn


def test_without_a_profile_there_are_no_credentials(tmp_path, moto, instance):
    with _imds(tmp_path, moto, instance) as imds:
        assert _get(imds, "latest/meta-data/iam/security-credentials/")[0] == 404
        assert _get(imds, "latest/meta-data/iam/info")[0] == 404
        assert "iam/" not in _get(imds, "latest/meta-data/")[1].split()
        assert _default_chain(imds, moto) == ["none", "-"]


def test_the_profile_s_role_credentials_are_served_and_found_by_boto3(tmp_path, ctx, moto, instance):
    with _imds(tmp_path, moto, instance) as imds:
        assert _get(imds, "latest/meta-data/iam/security-credentials/")[0] == 404
        arn = _give_profile(ctx, instance)  # after boot, as `up` does: served at once, not after an earlier "none"
        assert _get(imds, "latest/meta-data/iam/security-credentials/") == (200, "deepvm-c1-controller")
        assert "iam/" in _get(imds, "latest/meta-data/")[1].split()
        status, body = _get(imds, "latest/meta-data/iam/security-credentials/deepvm-c1-controller")
        document = json.loads(body)
        assert status == 200 and document["Code"] == "Success" and document["Type"] == "AWS-HMAC"
        assert {"AccessKeyId", "SecretAccessKey", "Token", "Expiration", "LastUpdated"} <= set(document)
        again = json.loads(_get(imds, "latest/meta-data/iam/security-credentials/deepvm-c1-controller")[1])
        assert again["AccessKeyId"] == document["AccessKeyId"]  # cached until shortly before expiry
        assert _get(imds, "latest/meta-data/iam/security-credentials/other-role")[0] == 404
        info = json.loads(_get(imds, "latest/meta-data/iam/info")[1])
        assert info["Code"] == "Success" and info["InstanceProfileArn"] == arn
        assert _default_chain(imds, moto) == ["iam-role", "1"]


def test_credentials_are_renewed_when_close_to_expiry(tmp_path, ctx, moto, instance, monkeypatch):
    _give_profile(ctx, instance)
    path = "latest/meta-data/iam/security-credentials/deepvm-c1-controller"
    with _imds(tmp_path, moto, instance) as imds:
        first = json.loads(_get(imds, path)[1])
        monkeypatch.setattr("provisioning.sandbox.credentials.REFRESH_BEFORE", timedelta(hours=2))
        assert json.loads(_get(imds, path)[1])["AccessKeyId"] != first["AccessKeyId"]
