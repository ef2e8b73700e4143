"""Fixtures for the cloud tests: a moto server over HTTP that behaves like AWS where moto does not (the
realism layer, provisioning/sandbox/realism.py), and plans built by hand."""

from __future__ import annotations

import os
import socket
import urllib.request

import pytest
from moto.server import ThreadedMotoServer

from provisioning.cloud.aws.context import AwsContext
from provisioning.sandbox.realism import SANDBOX_IMAGE, RealismControl
from tests.cloud.plans import REGION


@pytest.fixture(scope="session")
def moto_endpoint():
    """One moto server for the session, over real HTTP on a loopback port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ["MOTO_EC2_LOAD_DEFAULT_AMIS"] = "false"  # read by moto when a region's backend starts
    from provisioning.sandbox.realism_moto import install  # moto's patches: only where a moto server runs

    install()  # the realism layer in this process, where the server's threads run
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()
    os.environ.pop("MOTO_EC2_LOAD_DEFAULT_AMIS", None)


@pytest.fixture
def moto(moto_endpoint, monkeypatch):
    """A reset moto server that boto3 (in this process and in CLI subprocesses) talks to, with the realism
    that costs no time on (instant fleets unlisted, no capacity limits, no lags: `realism` sets them)."""
    urllib.request.urlopen(urllib.request.Request(f"{moto_endpoint}/moto-api/reset", method="POST")).read()
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    return moto_endpoint


@pytest.fixture
def realism(moto) -> RealismControl:
    """The test's moto server's realism settings, to change (`realism.change(listing_lag_s=2)`)."""
    return RealismControl(moto)


@pytest.fixture
def ctx(moto) -> AwsContext:
    return AwsContext(region=REGION)


@pytest.fixture
def ami() -> str:
    return SANDBOX_IMAGE  # moto does not validate image ids
