"""SSH transport against a real sshd on 127.0.0.1: incremental parallel push, pinned keys, streamed output."""

from __future__ import annotations

import getpass
import json
import os
import stat
import subprocess
import time

import pytest
from sshd import can_run_sshd, start_sshd, stop_sshd

from provisioning.cloud.ssh import Answer, HostKeyRefused, TransportError, UnreadableKnownHosts, probe, probe_all
from provisioning.cloud.types import HostSpec
from provisioning.core.errors import InputError
from training.shared.transport import (
    MANIFEST,
    OutputLine,
    PushProgress,
    RemoteCommand,
    fetch_tree,
    push_tree,
    run_command,
    run_on_hosts,
    write_files,
)

pytestmark = pytest.mark.skipif(not can_run_sshd(), reason="needs /usr/sbin/sshd")


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    started = []
    try:
        for _ in range(3):
            started.append(start_sshd(tmp_path_factory.mktemp("sshd")))
        yield started
    finally:
        for server in started:
            stop_sshd(server)


@pytest.fixture
def server(servers):
    return servers[0]


def host(server, name="node-1", **changes) -> HostSpec:
    fields = dict(
        name=name,
        address="127.0.0.1",
        port=server.port,
        user=getpass.getuser(),
        key_path=server.client_key,
        known_hosts=server.known_hosts,
    )
    fields.update(changes)
    return HostSpec(**fields)


@pytest.fixture
def job(tmp_path):
    root = tmp_path / "job"
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / "train.py").write_text("print('hi')\n")
    (root / "pkg" / "a.py").write_text("A = 1\n")
    (root / "pkg" / "sub" / "b.bin").write_bytes(os.urandom(200_000))
    (root / "run.sh").write_text("#!/bin/sh\necho run\n")
    (root / "run.sh").chmod(0o755)
    (root / "pkg" / "__pycache__").mkdir()
    (root / "pkg" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"junk")
    return root


FILES = ["pkg/a.py", "pkg/sub/b.bin", "run.sh", "train.py"]


def test_push_to_several_hosts_then_only_changes(server, job, tmp_path):
    targets = [tmp_path / "remote-1" / "deep" / "dir", tmp_path / "remote-2"]
    events: list[PushProgress] = []
    hosts = [host(server, "node-1"), host(server, "node-2")]

    def push():
        results = []
        for h, target in zip(hosts, targets, strict=True):
            results += push_tree([h], job, str(target))
        return results

    first = push_tree(hosts[:1], job, str(targets[0]), progress=events.append)
    first += push_tree(hosts[1:], job, str(targets[1]), progress=events.append)
    assert [r.uploaded for r in first] == [tuple(FILES)] * 2
    for target in targets:
        for name in FILES:
            assert (target / name).read_bytes() == (job / name).read_bytes()
        assert not (target / "pkg" / "__pycache__").exists()
        assert stat.S_IMODE((target / "run.sh").stat().st_mode) == 0o755
        assert set(json.loads((target / MANIFEST).read_text())) == set(FILES)
    final = [e for e in events if e.files_done == e.files_total]
    assert {e.host for e in final} == {"node-1", "node-2"}
    assert all(e.bytes_done == e.bytes_total for e in final)
    assert any(0 < e.bytes_done < e.bytes_total for e in events if e.path == "pkg/sub/b.bin")

    (job / "pkg" / "a.py").write_text("A = 2\n")
    (job / "new.txt").write_text("new\n")
    (job / "train.py").unlink()
    (targets[1] / "user-file").write_text("not deepvm's")
    second = push()
    assert [(r.uploaded, r.deleted, r.unchanged) for r in second] == [(("new.txt", "pkg/a.py"), ("train.py",), 2)] * 2
    assert second[0].bytes_sent == len("A = 2\n") + len("new\n")
    for target in targets:
        assert (target / "pkg" / "a.py").read_text() == "A = 2\n"
        assert not (target / "train.py").exists()
        assert not list(target.rglob("*.deepvm-part"))
    assert (targets[1] / "user-file").exists()

    third = push()
    assert [(r.uploaded, r.deleted, r.bytes_sent) for r in third] == [((), (), 0)] * 2


def test_a_link_to_a_file_inside_goes_as_that_file_any_other_link_is_refused(server, job, tmp_path):
    """Issue 23 point 3: links were left out silently, so a linked run.script was missing on the nodes."""
    (job / "main.py").symlink_to("pkg/a.py")  # relative, inside: the common `train.py -> src/train.py`
    (job / "pkg" / "b-abs").symlink_to(job / "pkg" / "sub" / "b.bin")  # absolute, inside
    target = tmp_path / "remote"
    (result,) = push_tree([host(server)], job, str(target))
    assert "main.py" in result.uploaded and "pkg/b-abs" in result.uploaded
    assert not (target / "main.py").is_symlink() and (target / "main.py").read_text() == "A = 1\n"
    assert (target / "pkg" / "b-abs").read_bytes() == (job / "pkg" / "sub" / "b.bin").read_bytes()
    secret = tmp_path / "credentials"
    secret.write_text("aws_secret_access_key = canary\n")
    for name, to, leads_to in [
        ("creds", secret, f"{secret}, outside the job directory"),
        ("lib", job / "pkg", "a directory"),
        ("gone", job / "nowhere.py", "nothing (it is dangling or loops)"),
    ]:
        (job / name).symlink_to(to)
        with pytest.raises(InputError) as refused:
            push_tree([host(server)], job, str(tmp_path / "never"))
        assert str(refused.value) == (
            f"{job / name}: a symbolic link to {leads_to}; deepvm pushes {job} as regular "
            "files and follows a link only to a regular file inside it: copy or move what "
            "the job needs into it"
        )
        (job / name).unlink()
    assert not (tmp_path / "never").exists()


def test_parallel_push_to_many_hosts(servers, job):
    hosts = [host(server, f"node-{i}") for i, server in enumerate(servers)]
    results = push_tree(hosts, job, "jobs/current")  # relative: under each server's own home
    assert [(r.host, r.uploaded) for r in results] == [(h.name, tuple(FILES)) for h in hosts]
    for server in servers:
        got = server.home / "jobs" / "current" / "pkg" / "sub" / "b.bin"
        assert got.read_bytes() == (job / "pkg" / "sub" / "b.bin").read_bytes()


def test_one_bad_host_fails_the_push_by_name_others_complete(servers, job, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    hosts = [host(servers[0], "good"), host(servers[1], "bad", known_hosts=empty)]
    with pytest.raises(TransportError, match=r"^bad \(.*refusing an unknown host$"):
        push_tree(hosts, job, "jobs/partial")
    assert (servers[0].home / "jobs" / "partial" / "train.py").exists()
    assert not (servers[1].home / "jobs" / "partial").exists()


def test_wrong_host_key_is_refused(server, job, tmp_path):
    impostor = tmp_path / "known_hosts"
    other = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHm0o1fVvPzSgHLkwZkt7Qv7rX5O4xJf7Kq6yq0E0Dq9"
    impostor.write_text(f"[127.0.0.1]:{server.port} {other}\n")
    with pytest.raises(TransportError, match="host key differs from the one pinned") as info:
        push_tree([host(server, known_hosts=impostor)], job, str(tmp_path / "never"))
    assert "\n" not in str(info.value)
    assert not (tmp_path / "never").exists()


def test_unknown_host_is_refused_and_not_learned(server, job, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    with pytest.raises(TransportError, match=r"host key is not in .*refusing an unknown host"):
        run_command(host(server, known_hosts=empty), "true", lambda line: None)
    assert empty.read_text() == ""


def test_missing_known_hosts_file(server, tmp_path):
    with pytest.raises(TransportError, match=r"known_hosts file .* does not exist"):
        run_command(host(server, known_hosts=tmp_path / "nope"), "true", lambda line: None)


def test_wrong_client_key(server, tmp_path):
    import subprocess

    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "k")], check=True)
    with pytest.raises(TransportError, match="authentication failed"):
        run_command(host(server, key_path=tmp_path / "k"), "true", lambda line: None)


def test_unreachable(server):
    with pytest.raises(TransportError, match="unreachable"):
        run_command(host(server, port=1), "true", lambda line: None)


def test_command_output_streamed_with_prefixes(server, tmp_path):
    lines: list[OutputLine] = []
    status = run_command(
        host(server, "rank-0"),
        'echo "one $GREETING"; echo oops >&2; pwd; printf "no newline"; exit 3',
        lines.append,
        env={"GREETING": "hello world's"},
        cwd=str(tmp_path),
    )
    assert status == 3
    out = [line.prefixed() for line in lines if line.stream == "stdout"]
    assert out == ["[rank-0] one hello world's", f"[rank-0] {tmp_path}", "[rank-0] no newline"]
    assert [line.prefixed() for line in lines if line.stream == "stderr"] == ["[rank-0] oops"]


def test_large_interleaved_output_does_not_stall(server):
    lines: list[OutputLine] = []
    script = "for i in $(seq 1 3000); do echo out-$i; echo err-$i >&2; done"
    assert run_command(host(server), script, lines.append, timeout=60) == 0
    assert [line.text for line in lines if line.stream == "stdout"] == [f"out-{i}" for i in range(1, 3001)]
    assert len([line for line in lines if line.stream == "stderr"]) == 3000


def test_timeout(server):
    with pytest.raises(TransportError, match=r"timed out after 0\.5s"):
        run_command(host(server), "sleep 3", lambda line: None, timeout=0.5)


def test_run_on_hosts(server):
    lines: list[OutputLine] = []
    hosts = [host(server, "a"), host(server, "b")]
    assert run_on_hosts(hosts, "echo ready; exit 0", lines.append) == {"a": 0, "b": 0}
    # stdout only: a host's login shell may say something of its own on stderr (a pyenv rehash racing another)
    assert sorted(line.prefixed() for line in lines if line.stream == "stdout") == ["[a] ready", "[b] ready"]


def test_bad_env_name_is_rejected(server):
    with pytest.raises(TransportError, match="invalid environment variable name"):
        run_command(host(server), "true", lambda line: None, env={"A;rm": "x"})


def test_remote_command_reads_lines_from_its_stdin(server):
    lines: list[OutputLine] = []
    remote = RemoteCommand(host(server), 'read a; read b; echo "got $a and $b"; exit 4', lines.append)
    assert remote.wait(timeout=0.3) is None  # still waiting for its input
    assert remote.send_line("one") and remote.send_line("two")
    assert remote.wait(timeout=30) == 4
    remote.close()
    assert [line.text for line in lines] == ["got one and two"]
    assert not remote.send_line("three")  # the connection is gone


def test_closing_a_remote_command_ends_its_stdin(server, tmp_path):
    done = tmp_path / "stdin-ended"
    remote = RemoteCommand(host(server), f"cat >/dev/null; touch {done}", lambda line: None)
    remote.send_line("anything")
    remote.close()
    for _ in range(100):
        if done.exists():
            break
        time.sleep(0.05)
    assert done.exists()


def test_write_files_makes_directories_and_keeps_files_private(server, tmp_path):
    target = tmp_path / "remote" / "deep"
    write_files(host(server), {str(target / "key"): b"secret\n", str(target / "more" / "hostfile"): b"a slots=1\n"})
    assert (target / "key").read_bytes() == b"secret\n"
    assert (target / "more" / "hostfile").read_text() == "a slots=1\n"
    assert {stat.S_IMODE(p.stat().st_mode) for p in (target / "key", target / "more" / "hostfile")} == {0o600}
    assert not list(target.rglob("*.deepvm-part"))


def test_fetch_tree_copies_every_file_below(server, job, tmp_path):
    push_tree([host(server)], job, str(tmp_path / "remote"))
    got = fetch_tree(host(server), str(tmp_path / "remote"), tmp_path / "back")
    assert sorted(str(p.relative_to(tmp_path / "back")) for p in got) == sorted([*FILES, MANIFEST])
    for name in FILES:
        assert (tmp_path / "back" / name).read_bytes() == (job / name).read_bytes()
    with pytest.raises(TransportError, match=r"listing .*/nope failed"):
        fetch_tree(host(server), str(tmp_path / "nope"), tmp_path / "back")


# the one probe (provisioning/cloud/ssh.py): what `up` waits for and how the controller tells dead nodes


def test_probe_tells_a_live_node_a_silent_one_and_one_whose_key_is_not_pinned(server, tmp_path):
    forged = tmp_path / "forged_known_hosts"
    forged.write_text(
        f"[127.0.0.1]:{server.port} ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHm0o1fVvPzSgHLkwZkt7Qv7rX5O4xJf7Kq6yq0E0Dq9\n"
    )
    unknown = tmp_path / "empty_known_hosts"
    unknown.write_text("")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "k")], check=True)
    hosts = [
        host(server),
        host(server, port=1),  # nothing listens
        host(server, known_hosts=forged),
        host(server, known_hosts=unknown),
        host(server, key_path=tmp_path / "k"),  # not authorised (yet: a node still booting)
    ]
    assert probe_all(hosts, timeout_s=5) == [Answer.YES, Answer.NO, Answer.NOT_PINNED, Answer.NOT_PINNED, Answer.NO]
    assert probe(hosts[0]) is Answer.YES
    with pytest.raises(HostKeyRefused):
        run_command(hosts[2], "true", lambda line: None)


def test_probe_refuses_to_answer_without_a_known_hosts_file(server, tmp_path):
    with pytest.raises(UnreadableKnownHosts, match=r"known_hosts file .* does not exist"):
        probe_all([host(server), host(server, known_hosts=tmp_path / "nope")])
