"""staging.prepare_head against a real sshd on 127.0.0.1: the internal key and the launch's files land on
the head, private; a head without mpirun is one clear error."""

from __future__ import annotations

import getpass
import stat

import pytest
from sshd import can_run_sshd, start_sshd, stop_sshd

import training.staging
from provisioning.errors import InputError
from training.staging import JobPaths, prepare_head
from training.transport import HostSpec

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
    checked = []
    monkeypatch.setattr(training.staging, "run_command", lambda host, command, on_line: checked.append(command) or 127)
    internal = tmp_path / "internal_ed25519"
    internal.write_text("key\n")
    with pytest.raises(InputError, match=r"^the head node holder-1 \(.*\) has no `mpirun` on its PATH") as info:
        prepare_head(head, JobPaths(str(tmp_path / "home"), "job-1"), internal, {})
    assert checked == ["command -v mpirun"] and "\n" not in str(info.value)
