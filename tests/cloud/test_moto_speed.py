"""provisioning/sandbox/moto_speed.py: the answers it keeps are moto's own, and each caller still gets a list of
its own (the routing and dispatch of every sandbox call depend on them: the cloud tests run through them)."""

from __future__ import annotations

import inspect
import os

import moto
from moto import backends
from moto.core import responses
from moto.ec2.responses import EC2Response

from provisioning.sandbox import moto_speed


def test_the_kept_answers_are_motos_own_and_each_caller_gets_its_own_list():
    moto_speed.install()
    moto_speed.install()  # once per process: a second call changes nothing
    folder = os.path.dirname(moto.__file__)
    packages = [
        name
        for name in sorted(os.listdir(folder))
        if os.path.isdir(os.path.join(folder, name)) and not name.startswith("__")
    ]
    assert list(backends.list_of_moto_modules()) == packages and "ec2" in packages
    methods = [name for name, _ in inspect.getmembers(EC2Response, predicate=inspect.isfunction)]
    first = responses.method_names_from_class(EC2Response)
    assert first == methods and "describe_instances" in first
    first.append("not_an_action")
    assert responses.method_names_from_class(EC2Response) == methods
