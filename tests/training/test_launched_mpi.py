"""Issue 36, a user's own torchrun script, unchanged, through training.node.rank under a real mpirun: it sees the
environment torchrun gives its workers and none of MPI's; rank 0's `snapshot.pt` is kept through DeepCheck, a
Spot notice stops the script with SIGTERM (which kills it: it has no handler) and flushes the snapshot; a
relaunch puts it back on every trainer, also where no rank had it, and every rank resumes at the same epoch."""

from __future__ import annotations

import json
import shutil
import time

import pytest
from framework_scripts import TORCHRUN_SCRIPT
from imds import clear_notices, imds_endpoint, post_notice
from worker_jobs import event_lines, launch_ranks, output_with_a_notice_at

from training.node.elastic_env import ScriptPlace, worker_environment

pytestmark = [
    pytest.mark.mpi,
    pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs Open MPI's mpirun"),
]


EPOCHS = 40
JOB = """\
name: torchrun-style
run: {script: multinode.py, calls_step: false}
checkpoint: {files: [snapshot.pt], levels: [l1, l2]}
env: {OMP_NUM_THREADS: "1"}
"""


def _tagged(stdout: str, tag: str) -> list[str]:
    return [line.split(" ", 1)[1] for line in stdout.splitlines() if line.startswith(tag + " ")]


def test_the_script_gets_torchruns_environment_and_none_of_mpis():
    place = ScriptPlace(
        rank=3,
        world_size=4,
        local_rank=1,
        local_world_size=2,
        group_rank=1,
        group_world_size=2,
        master_addr="10.0.0.5",
        master_port=29400,
        run_id="job-7",
        restart_count=2,
        max_restarts=3,
    )
    env = worker_environment(
        {"OMPI_COMM_WORLD_RANK": "3", "PMIX_RANK": "3", "PMI_SIZE": "4", "HOME": "/h", "OMP_NUM_THREADS": "2"},
        place,
        {"DEEPVM_CHECKPOINT_DIR": "/k"},
    )
    assert not [k for k in env if k.startswith(("OMPI_", "PMIX_", "PMI_"))]
    assert (env["HOME"], env["OMP_NUM_THREADS"], env["DEEPVM_CHECKPOINT_DIR"]) == ("/h", "2", "/k")
    assert {
        k: env[k]
        for k in (
            "RANK",
            "LOCAL_RANK",
            "GROUP_RANK",
            "GROUP_WORLD_SIZE",
            "ROLE_NAME",
            "MASTER_ADDR",
            "TORCHELASTIC_RESTART_COUNT",
            "TORCHELASTIC_USE_AGENT_STORE",
        )
    } == {
        "RANK": "3",
        "LOCAL_RANK": "1",
        "GROUP_RANK": "1",
        "GROUP_WORLD_SIZE": "2",
        "ROLE_NAME": "default",
        "MASTER_ADDR": "10.0.0.5",
        "TORCHELASTIC_RESTART_COUNT": "2",
        "TORCHELASTIC_USE_AGENT_STORE": "False",
    }


# the user's own launch line instead: torchrun itself (torch.distributed.run) on every node, its workers' place
# from torchrun
COMMAND_JOB = """\
name: own-torchrun
run: {command: "python -m torch.distributed.run --nnodes $DEEPVM_NUM_NODES --node-rank $DEEPVM_NODE_RANK \\
  --nproc-per-node 2 --master-addr $MASTER_ADDR --master-port $MASTER_PORT multinode.py"}
checkpoint: {files: [snapshot.pt], levels: [l1, l2]}
env: {OMP_NUM_THREADS: "1"}
"""


@pytest.mark.parametrize("job_text", [JOB, COMMAND_JOB], ids=["script", "command"])
def test_a_notice_stops_an_unchanged_torchrun_script_and_every_rank_resumes_from_rank_0s_snapshot(
    tmp_path, warm, job_text
):
    (tmp_path / "multinode.py").write_text(TORCHRUN_SCRIPT.format(epochs=EPOCHS, pause_s=0.1))
    job = tmp_path / "job.yaml"
    job.write_text(job_text)
    with imds_endpoint(tmp_path) as url:
        proc = launch_ranks(job, "trainer,trainer,holder", url, warm=warm)
        first, _ = output_with_a_notice_at(
            proc, lambda line: line.startswith("EPOCH 0 8"), lambda: post_notice(tmp_path), timeout=180
        )
        seen = [json.loads(e) for e in _tagged(first, "ENV")]
        assert sorted(s["env"]["RANK"] for s in seen) == ["0", "1"] and not any(s["mpi"] for s in seen)
        if job_text is JOB:  # started as a fork of the warm server, as `python multinode.py` would run
            assert all(s["warm"] and s["main"] == "__main__" for s in seen), seen
            assert {tuple(s["argv"]) for s in seen} == {(str((tmp_path / "multinode.py").resolve()),)}
        assert {
            (
                s["env"]["WORLD_SIZE"],
                s["env"]["LOCAL_WORLD_SIZE"],
                s["env"]["GROUP_WORLD_SIZE"],
                s["env"]["TORCHELASTIC_RESTART_COUNT"],
                s["env"]["MASTER_ADDR"],
            )
            for s in seen
        } == {("2", "2", "1", "0", "127.0.0.1")}  # one node, two trainers (the holder: none)
        assert {s["env"]["TORCHELASTIC_RUN_ID"] for s in seen} != {"torchrun-style"} or job_text is JOB
        events = event_lines(first)
        assert [(e["status"]) for e in events if e["event"] == "end"] == ["stopped"]
        (flushed,) = [e for e in events if e["event"] == "kept" and e["how"] == "flushed"]
        assert flushed["files"] == 1 and flushed["newest"] == "job/snapshot.pt" and flushed["level"] in ("L1", "L2")
        last_epoch = max(int(line.split()[1]) for line in _tagged(first, "EPOCH") if line.startswith("0 "))
        assert 8 <= last_epoch < EPOCHS - 1  # stopped by the notice, not at its end

        clear_notices(tmp_path)
        (tmp_path / "snapshot.pt").unlink()  # a new node has none: only the holders do
        time.sleep(0.1)
        second = launch_ranks(job, "trainer,trainer,holder", url, warm=warm)
        out, stderr = second.communicate(timeout=180)
    assert second.returncode == 0, stderr[-3000:]
    resumed = {line.split()[0]: int(line.split()[1]) for line in _tagged(out, "RESUMED")}
    assert set(resumed.values()) == {resumed["0"]} and len(resumed) == 2  # every rank at the same epoch
    assert last_epoch - 2 <= resumed["0"] - 1 <= last_epoch  # at most the epochs of the last tick or two
    events = event_lines(out)
    assert [e["how"] for e in events if e["event"] == "kept"][:1] == ["restored"]
    assert [e["status"] for e in events if e["event"] == "end"] == ["completed"]
    assert f"0 {EPOCHS - 1}" in _tagged(out, "EPOCH")


def test_a_script_that_fails_ends_the_launch(tmp_path, warm):
    (tmp_path / "multinode.py").write_text("import os, sys\nsys.exit(3 if os.environ['RANK'] == '1' else 0)\n")
    job = tmp_path / "job.yaml"
    job.write_text(JOB)
    with imds_endpoint(tmp_path) as url:
        proc = launch_ranks(job, "trainer,trainer,holder", url, warm=warm)
        _, stderr = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert "multinode.py exited with 3" in stderr


# a script that answers its stop signal itself: SIGINT (run.stop_signal) as KeyboardInterrupt, a last save into
# $DEEPVM_CHECKPOINT_DIR on the way out
GRACEFUL = """\
import os, sys, time
import torch
sys.stdout.write("UP\\n")
try:
    while True:
        time.sleep(0.05)
except KeyboardInterrupt:
    rank = os.environ["RANK"]
    torch.save({"rank": rank}, os.path.join(os.environ["DEEPVM_CHECKPOINT_DIR"], f"last-{rank}.pt"))
    sys.stdout.write("SAVED\\n")
"""


def test_a_clean_stop_sends_the_jobs_stop_signal_and_keeps_what_the_script_saves_on_its_way_out(tmp_path, warm):
    """`deepvm cancel`, --max-duration and autodown stop a job as the controller's clean stop does: SIGUSR1
    through mpirun to every rank, which tells its script with run.stop_signal; what the script then writes is
    flushed before the ranks leave, from every trainer."""
    import signal

    (tmp_path / "graceful.py").write_text(GRACEFUL)
    job = tmp_path / "job.yaml"
    job.write_text(
        "run: {script: graceful.py, calls_step: false, stop_signal: SIGINT, stop_grace: 30}\n"
        "env: {OMP_NUM_THREADS: '1'}\n"
    )
    with imds_endpoint(tmp_path) as url:
        proc = launch_ranks(job, "trainer,trainer,holder", url, warm=warm)
        assert proc.stdout is not None
        lines, up = [], 0
        for line in proc.stdout:
            lines.append(line)
            up += line == "UP\n"
            if up == 2:
                time.sleep(1.5)  # past a tick of the rank's loop: the script runs
                proc.send_signal(signal.SIGUSR1)  # mpirun forwards it to every rank
                up = -10
        _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr[-3000:]
    out = "".join(lines)
    assert out.count("SAVED\n") == 2
    events = event_lines(out)
    assert [e["status"] for e in events if e["event"] == "end"] == ["stopped"]
    (flushed,) = [e for e in events if e["event"] == "kept" and e["how"] == "flushed"]
    assert flushed["files"] == 2 and flushed["newest"].startswith("checkpoint_dir/last-")
