"""The Spot watcher against the sandbox's real IMDSv2 endpoint, and the node preparation script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from imds import imds_endpoint, post_notice

from training.control.staging import prepare_command, setup_marker, stage_runtime
from training.node.watcher import Imds, MetadataUnavailable, Watcher
from training.shared.events import Notice

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


def test_watcher_without_metadata_turns_itself_off():
    reasons: list[str] = []
    dead = Imds("http://127.0.0.1:9/", timeout_s=0.5)  # discard port: nothing listens
    with pytest.raises(MetadataUnavailable):
        dead.notice()
    watcher = Watcher(lambda n: None, reasons.append, interval_s=0.1, imds=dead)
    watcher.start()
    watcher.join(timeout=5)
    assert not watcher.is_alive() and "no instance metadata" in reasons[0]


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

    first = run()
    assert f"@@deepvm home {home}" in first and "@@deepvm notice null" in first and "setting up" in first
    post_notice(host_dir)
    second = run()
    assert "setting up" not in second and '"kind": "instance-action"' in second
    assert (home / "setup-count").read_text() == "ran\n" and (home / setup_marker(setup)).exists()
    assert (home / "deepvm/jobs/job-1/out").is_dir() and (home / "deepvm/jobs/job-1/checkpoints").is_dir()
    authorized = (home / ".ssh" / "authorized_keys").read_text()
    assert authorized == f"ssh-ed25519 AAAA-the-login-key deepvm-c\n{INTERNAL}\n"  # once, however often prepared


def test_prepare_script_fails_on_a_python_without_the_packages(tmp_path):
    script = prepare_command("job-1", [], "/bin/false", check_notice=False, authorize=INTERNAL)
    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=dict(os.environ, HOME=str(tmp_path)))
    assert done.returncode != 0
