"""The Spot watcher against the sandbox's real IMDSv2 endpoint, and the node preparation script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from imds import imds_endpoint, loopback_ip, post_notice, post_rebalance_only
from worker_jobs import end_warm_servers

from provisioning.sandbox.metadata import endpoint_url
from training.control.staging import prepare_command, setup_marker, stage_runtime
from training.node.watcher import Imds, MetadataUnavailable, Watcher
from training.shared.events import Notice, NoticeKind

REPO = Path(__file__).resolve().parents[2]
INTERNAL = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHm0o1fVvPzSgHLkwZkt7Qv7rX5O4xJf7Kq6yq0E0Dq9 deepvm-internal-c"


@pytest.fixture
def imds(tmp_path):
    """(endpoint URL, host directory whose notices it serves)."""
    with imds_endpoint(tmp_path) as url:
        yield url, tmp_path


def test_no_notice_until_one_is_posted(imds):
    url, host_dir = imds
    client = Imds(url)
    assert client.notice() is None
    post_notice(host_dir)
    notice = client.notice()
    assert notice is not None and notice.kind == "instance-action"
    assert json.loads(notice.body)["action"] == "terminate"


def test_watcher_reports_a_notice_within_its_poll_interval(imds):
    url, host_dir = imds
    seen: list[tuple[Notice, float]] = []
    watcher = Watcher(lambda n: seen.append((n, time.monotonic())), interval_s=0.2, imds=Imds(url))
    watcher.start()
    time.sleep(0.5)
    assert not seen and watcher.is_alive()
    posted = time.monotonic()
    post_notice(host_dir)
    watcher.join(timeout=5)
    assert len(seen) == 1 and seen[0][1] - posted < 1.0
    assert not watcher.is_alive()  # one notice is all a node gets


def test_watcher_keeps_trying_an_endpoint_that_fails_at_first_and_sees_its_notice(tmp_path):
    # the endpoint does not answer at boot (nothing listens yet): the watcher says so once, keeps trying
    # with backoff, and watches as soon as the endpoint is up
    ip = loopback_ip()
    late = Imds(endpoint_url(ip), timeout_s=0.5)
    with pytest.raises(MetadataUnavailable):
        late.notice()
    seen: list[Notice] = []
    reasons: list[str] = []
    watcher = Watcher(seen.append, reasons.append, interval_s=0.1, imds=late, retry_s=(0.1, 0.4))
    watcher.start()
    time.sleep(1.5)
    assert watcher.is_alive() and len(reasons) == 1 and "still trying every 0.4 s" in reasons[0]
    with imds_endpoint(tmp_path, ip):
        post_notice(tmp_path)
        watcher.join(timeout=5)
    assert [n.kind for n in seen] == [NoticeKind.INTERRUPTION]  # both posted at once: the interruption says it
    assert not watcher.is_alive() and len(reasons) == 1


def test_a_rebalance_recommendation_alone_is_reported_as_one_and_watching_goes_on(imds):
    url, host_dir = imds
    seen: list[Notice] = []
    watcher = Watcher(seen.append, interval_s=0.1, imds=Imds(url))
    watcher.start()
    post_rebalance_only(host_dir)
    deadline = time.monotonic() + 5
    while not seen and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [n.kind for n in seen] == [NoticeKind.REBALANCE] and not seen[0].is_interruption
    assert json.loads(seen[0].body).keys() == {"noticeTime"}
    time.sleep(0.5)
    assert watcher.is_alive() and len(seen) == 1  # reported once, and still watching for an interruption
    post_notice(host_dir)
    watcher.join(timeout=5)
    assert [n.kind for n in seen] == [NoticeKind.REBALANCE, NoticeKind.INTERRUPTION] and seen[1].is_interruption
    assert not watcher.is_alive()
    assert Imds(url).notice().kind is NoticeKind.INTERRUPTION  # --once names the most urgent of the two


def test_watch_once_prints_the_notice(imds):
    url, host_dir = imds
    env = dict(os.environ, PYTHONPATH=str(REPO), AWS_EC2_METADATA_SERVICE_ENDPOINT=url)
    command = [sys.executable, "-m", "training.node.watcher", "--once"]
    assert subprocess.run(command, env=env, capture_output=True, text=True).stdout.strip() == "null"
    post_notice(host_dir)
    out = subprocess.run(command, env=env, capture_output=True, text=True).stdout
    assert json.loads(out)["kind"] == "instance-action"


def test_prepare_script_runs_setup_once_and_reports_home_and_notice(imds, tmp_path):
    url, host_dir = imds
    home = tmp_path / "home"
    (home / "deepvm" / "jobs" / "job-1" / "job").mkdir(parents=True)
    stage_runtime(home / "deepvm" / "runtime")
    (home / ".ssh").mkdir()
    (home / ".ssh" / "authorized_keys").write_text("ssh-ed25519 AAAA-the-login-key deepvm-c\n")
    setup = ["echo ran >> ../../../../setup-count", "echo setting up"]
    script = prepare_command("job-1", setup, sys.executable, check_notice=True, authorize=INTERNAL)
    env = dict(os.environ, HOME=str(home), AWS_EC2_METADATA_SERVICE_ENDPOINT=url)

    def run() -> str:
        done = subprocess.run(["bash", "-c", script], cwd=home, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done.stdout

    try:
        first = run()
        post_notice(host_dir)
        second = run()
    finally:
        end_warm_servers(home / "deepvm" / "warm")  # the node's warm server, which preparing it starts
    assert f"@@deepvm home {home}" in first and "@@deepvm notice null" in first and "setting up" in first
    assert "setting up" not in second and '"kind": "instance-action"' in second
    assert (home / "setup-count").read_text() == "ran\n" and (home / setup_marker(setup, sys.executable)).exists()
    assert (home / "deepvm/jobs/job-1/out").is_dir() and (home / "deepvm/jobs/job-1/checkpoints").is_dir()
    authorized = (home / ".ssh" / "authorized_keys").read_text()
    assert authorized == f"ssh-ed25519 AAAA-the-login-key deepvm-c\n{INTERNAL}\n"  # once, however often prepared


def test_prepare_script_fails_on_a_python_without_the_packages(tmp_path):
    script = prepare_command("job-1", [], "/bin/false", check_notice=False, authorize=INTERNAL)
    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=dict(os.environ, HOME=str(tmp_path)))
    assert done.returncode != 0
