"""staging.prepare_head against a real sshd on 127.0.0.1: the internal key and the launch's files land on
the head, private; mpirun is found on the PATH or in a known Open MPI home; a head without it is one clear error."""

from __future__ import annotations

import getpass
import stat
from dataclasses import replace

import pytest
from sshd import can_run_sshd, start_sshd, stop_sshd

import training.control.staging
from provisioning.catalog.model import Market
from provisioning.cloud.types import HostSpec
from provisioning.core.errors import InputError
from training.control.launcher import Launch, Node
from training.control.session import SshNodes
from training.control.staging import JobPaths, prepare_head

pytestmark = pytest.mark.skipif(not can_run_sshd(), reason="needs /usr/sbin/sshd")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    started = start_sshd(tmp_path_factory.mktemp("sshd"))
    yield started
    stop_sshd(started)


@pytest.fixture
def head(server) -> HostSpec:
    return HostSpec("holder-1", "127.0.0.1", server.client_key, server.known_hosts, server.port, getpass.getuser())


def test_the_head_gets_the_internal_key_and_the_launch_files(server, head, tmp_path):
    internal = tmp_path / "internal_ed25519"
    internal.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\ninternal\n-----END OPENSSH PRIVATE KEY-----\n")
    paths = JobPaths(str(tmp_path / "home"), "job-1")
    prepare_head(head, paths, internal, {paths.hostfile: "10.0.0.1 slots=1\n", paths.known_hosts: "10.0.0.1 k\n"})
    key = tmp_path / "home" / "deepvm" / "ssh" / "id_ed25519"
    assert key.read_bytes() == internal.read_bytes() and stat.S_IMODE(key.stat().st_mode) == 0o600
    assert (tmp_path / "home" / "deepvm" / "jobs" / "job-1" / "hostfile").read_text() == "10.0.0.1 slots=1\n"
    assert (tmp_path / "home" / "deepvm" / "jobs" / "job-1" / "known_hosts").read_text() == "10.0.0.1 k\n"


def test_a_head_without_mpirun_is_one_clear_error(head, tmp_path, monkeypatch):
    monkeypatch.setattr(training.control.staging, "MPIRUN", "deepvm-test-no-such-mpirun")
    monkeypatch.setattr(training.control.staging, "OPEN_MPI_HOMES", (str(tmp_path / "nowhere"),))
    internal = tmp_path / "internal_ed25519"
    internal.write_text("key\n")
    with pytest.raises(InputError, match=r"^the head node holder-1 \(.*\) has no `mpirun` on its PATH or in ") as info:
        prepare_head(head, JobPaths(str(tmp_path / "home"), "job-1"), internal, {})
    assert "\n" not in str(info.value)


def test_mpirun_on_the_path_needs_no_prefix_and_one_outside_it_names_its_home(head, tmp_path, monkeypatch):
    internal = tmp_path / "internal_ed25519"
    internal.write_text("key\n")
    paths = JobPaths(str(tmp_path / "home"), "job-1")
    assert prepare_head(head, paths, internal, {}) is None  # Debian's /usr/bin/mpirun
    # As on AWS's Deep Learning AMIs: Open MPI in /opt/amazon/openmpi, on the PATH of login shells only.
    home = tmp_path / "opt amazon" / "openmpi"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "deepvm-test-mpirun").write_text("#!/bin/sh\n")
    (home / "bin" / "deepvm-test-mpirun").chmod(0o755)
    monkeypatch.setattr(training.control.staging, "MPIRUN", "deepvm-test-mpirun")
    monkeypatch.setattr(training.control.staging, "OPEN_MPI_HOMES", (str(tmp_path / "nowhere"), str(home)))
    assert prepare_head(head, paths, internal, {}) == str(home)


def test_a_head_is_asked_for_its_open_mpi_once_and_gets_every_launch_s_files(head, tmp_path, monkeypatch):
    """A relaunch on the same head writes the launch's files but does not look for mpirun again: it was there
    a launch ago (one SSH command less on the way from a notice to training again)."""
    internal = tmp_path / "internal_ed25519"
    internal.write_text("key\n")
    node = Node("i-1", head, "both", Market.ON_DEMAND, "127.0.0.1")
    launch = Launch.on([node], JobPaths(str(tmp_path / "home"), "job-1"), "job.yaml", "python3", 1, {})
    nodes = SshNodes()
    assert nodes.ready_head(launch, internal).open_mpi_home is None  # Debian's /usr/bin/mpirun
    monkeypatch.setattr(training.control.staging, "MPIRUN", "deepvm-test-no-such-mpirun")  # a look would fail now
    monkeypatch.setattr(training.control.staging, "OPEN_MPI_HOMES", (str(tmp_path / "nowhere"),))
    again = nodes.ready_head(replace(launch, paths=JobPaths(str(tmp_path / "home"), "job-2")), internal)
    assert again.open_mpi_home is None
    assert (tmp_path / "home" / "deepvm" / "jobs" / "job-2" / "hostfile").read_text() == "127.0.0.1 slots=1\n"
