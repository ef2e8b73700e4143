"""Recovery accounting and launch planning: pure logic, no processes."""

from __future__ import annotations

import shlex
import time
from dataclasses import replace
from pathlib import Path

import pytest

from provisioning.catalog.model import Market
from provisioning.cloud.ssh import TransportError
from provisioning.cloud.types import HostSpec
from provisioning.core.errors import InputError
from training.control.launcher import (
    Launch,
    Node,
    arrange,
    guarded_mpirun_command,
    head_files,
    mpi_network,
    mpirun_command,
    split_batch,
)
from training.control.recovery import RecoveryLog
from training.control.staging import JobPaths
from training.shared.progress import RelaunchPhases


def test_a_launched_script_without_steps_recovers_when_it_runs_again_having_lost_the_time_since_its_files():
    """Issue 36 finding 7: a script that reports no steps never closed its recovery (it waited for a step) and lost
    "0 steps" whatever it redid. It closes when the script runs again, and loses the time from when the files put
    back were written to the stop; with none put back, from when the work it redoes began."""
    now, wall = time.monotonic(), time.time()
    fresh = RecoveryLog()
    fresh.launched(now - 100)
    fresh.started(now - 100)  # nothing put back: its work counts from its start
    fresh.trouble("notice", ("i-1",), attempt=1, world=3, at=now - 10)
    fresh.attempt_ended(1, last_step=0, at=now - 5)
    fresh.launched(now - 4)
    fresh.started(now - 3)
    assert fresh.script_running(attempt=1, world=2, at=now - 3) is None  # the attempt of the trouble
    lost = fresh.script_running(attempt=2, world=2, at=now - 3)
    assert lost is not None and lost.lost_s == pytest.approx(95.0, abs=0.05) and fresh.open is None

    log = RecoveryLog()
    log.launched(now - 100)
    log.put_back(at=now - 99, seconds=0.5, written_at=wall - 300)
    log.started(now - 99)
    log.trouble("notice", ("i-1",), attempt=1, world=3, at=now - 10)
    log.attempt_ended(1, last_step=0, at=now - 5)
    log.launched(now - 4)
    log.put_back(at=now - 3, seconds=0.5, written_at=wall - 45)  # the files it kept in attempt 1
    log.started(now - 2)
    recovery = log.script_running(attempt=2, world=2, at=now - 2)
    assert recovery is not None and recovery.lost_s == pytest.approx(40.0, abs=0.05)
    assert (recovery.from_step, recovery.resumed_step, recovery.lost_steps, recovery.lost_text) == (
        0,
        0,
        0,
        "0m40s of work lost",
    )
    assert recovery.phases is not None and recovery.phases.restore_s == 0.5

    log.trouble("node-lost", ("i-2",), attempt=2, world=2, at=now - 1)  # a loss before it kept anything new
    log.attempt_ended(2, last_step=0, at=now)
    log.launched(now)
    log.started(now)  # nothing put back this time: it redoes everything since its files of attempt 1
    again = log.script_running(attempt=3, world=2, at=now)
    assert again is not None and again.lost_s == pytest.approx(45.0, abs=0.05)


def test_a_launched_script_whose_adapter_reported_steps_recovers_at_a_step_in_steps():
    """A framework adapter's steps (Resumed, Step) count as ctx.step's: its recovery waits for a step."""
    now = time.monotonic()
    log = RecoveryLog()
    log.trouble("node-lost", ("i-1",), attempt=1, world=3, at=now - 10)
    log.attempt_ended(1, last_step=80, at=now - 5)
    assert log.script_running(attempt=2, world=3, at=now - 3) is None and log.open is not None
    recovery = log.stepped(attempt=2, first_step=50, step=51, world=3, at=now)
    assert recovery is not None and (recovery.lost_steps, recovery.lost_s, recovery.lost_text) == (
        30,
        None,
        "30 steps lost",
    )


def test_notice_flushed_at_the_stop_step_loses_nothing():
    log = RecoveryLog()
    log.trouble("notice", ("i-1",), attempt=1, world=3, at=100.0)
    log.checkpointed(at=100.4)
    assert log.stepped(attempt=1, first_step=0, step=19, world=3, at=100.5) is None  # same attempt
    log.attempt_ended(1, last_step=19)
    recovery = log.stepped(attempt=2, first_step=19, step=20, world=2, at=112.0)
    assert recovery is not None and log.open is None
    assert (recovery.from_step, recovery.resumed_step, recovery.lost_steps) == (19, 19, 0)
    assert (recovery.world_before, recovery.world_after) == (3, 2)
    assert (recovery.detect_to_checkpoint_s, recovery.detect_to_resumed_s) == (0.4, 12.0)


def test_the_phases_of_a_relaunch_add_up_to_the_time_from_the_notice_to_training():
    log = RecoveryLog()
    log.trouble("notice", ("i-1",), attempt=1, world=3, at=100.0)
    log.checkpointed(at=100.5)
    log.attempt_ended(1, last_step=19, at=101.5)
    log.launched(at=102.0)
    log.restored(at=105.5, seconds=0.5)
    log.started(at=105.6)
    recovery = log.stepped(attempt=2, first_step=19, step=20, world=2, at=106.0)
    assert recovery is not None and recovery.phases == RelaunchPhases(
        checkpoint_s=0.5, teardown_s=1.0, launch_s=0.5, imports_s=3.0, restore_s=0.5, first_step_s=0.5
    )
    assert recovery.phases.total_s == recovery.detect_to_resumed_s == 6.0


def test_phases_not_seen_take_no_time_and_a_later_launch_counts():
    log = RecoveryLog()
    log.trouble("node-lost", ("i-2",), attempt=1, world=3, at=50.0, from_step=17)
    log.attempt_ended(1, last_step=17, at=50.0)
    log.launched(at=51.0)
    log.started(at=52.0)  # this launch failed before a step: the next one is what resumed
    log.attempt_ended(2, last_step=10, at=53.0)
    log.launched(at=54.0)
    log.started(at=57.0)
    recovery = log.stepped(attempt=3, first_step=10, step=11, world=2, at=58.0)
    assert recovery is not None and recovery.phases == RelaunchPhases(0.0, 3.0, 1.0, 3.0, 0.0, 1.0)


def test_a_dead_node_costs_the_steps_since_the_newest_checkpoint():
    log = RecoveryLog()
    log.trouble("node-lost", ("i-2",), attempt=1, world=3, at=50.0, from_step=17)
    log.attempt_ended(1, last_step=17)
    assert log.stepped(attempt=2, first_step=10, step=10, world=2, at=55.0) is None  # not trained yet
    recovery = log.stepped(attempt=2, first_step=10, step=11, world=2, at=60.0)
    assert recovery is not None and recovery.lost_steps == 7 and recovery.detect_to_checkpoint_s is None
    assert log.closed == [recovery]


def test_trouble_before_the_relaunch_joins_the_open_incident():
    log = RecoveryLog()
    log.trouble("notice", ("i-1",), attempt=1, world=3, at=10.0)
    log.trouble("fold-in", ("i-9",), attempt=1, world=3, at=11.0)
    log.attempt_ended(1, last_step=8)
    recovery = log.stepped(attempt=2, first_step=8, step=9, world=3, at=20.0)
    assert recovery is not None and recovery.reason == "notice" and recovery.nodes == ("i-1", "i-9")


@pytest.mark.parametrize("chosen", ["fold-in", "ladder", "restart"])
@pytest.mark.parametrize("loss", ["notice", "node-lost", "stall"])
def test_a_loss_during_a_relaunch_deepvm_chose_names_the_incident(chosen, loss):
    """A notice arriving while a fold-in's relaunch is pending used to be recorded as a fold-in: `status`'s
    count of interruptions survived missed it (seen in the sandbox when a replacement was ready first)."""
    log = RecoveryLog()
    log.trouble(chosen, ("i-9",), attempt=1, world=2, at=10.0)
    log.trouble(loss, ("i-1",), attempt=1, world=2, at=12.0)
    log.trouble("fold-in", ("i-8",), attempt=1, world=2, at=13.0)  # and a later chosen one does not rename it
    log.attempt_ended(1, last_step=8)
    recovery = log.stepped(attempt=2, first_step=8, step=9, world=2, at=20.0)
    assert recovery is not None and recovery.reason == loss and recovery.nodes == ("i-9", "i-1", "i-8")
    assert recovery.detect_to_resumed_s == 10.0  # from the first trouble


def test_resumed_controller_counts_from_the_stored_step():
    log = RecoveryLog()
    log.trouble("controller-restart", (), attempt=0, world=3, at=0.0, from_step=13)
    recovery = log.stepped(attempt=1, first_step=10, step=11, world=3, at=30.0)
    assert recovery is not None and recovery.lost_steps == 3


@pytest.mark.parametrize(
    ("total", "speeds", "expected"),
    [(48, [1, 1, 1], (16, 16, 16)), (48, [65, 65, 130], (12, 12, 24)), (10, [1, 1, 1], (4, 3, 3))],
)
def test_split_batch_in_proportion_to_speed(total, speeds, expected):
    assert split_batch(total, speeds) == expected
    assert sum(split_batch(total, speeds)) == total


def test_split_batch_refuses_more_trainers_than_samples():
    with pytest.raises(InputError, match="cannot be split"):
        split_batch(2, [1, 1, 1])


def _node(i: int, role: str, private: str = "127.10.0.1", user: str = "root", port: int = 22, known: str = "/k/kh"):
    host = HostSpec(f"{role}-{i}", f"54.0.0.{i}", Path("/k/id"), Path(known), port, user)
    return Node(f"i-{i}", host, role, Market.ON_DEMAND if role != "trainer" else Market.SPOT, private)


def _launch(nodes: tuple[Node, ...]) -> Launch:
    return Launch(
        nodes=nodes,
        paths=JobPaths("/home/u", "job-1"),
        job_file="job.yaml",
        python="/usr/bin/python3",
        planned_trainers=3,
        master_port=29999,
        env={"OMP_NUM_THREADS": "1"},
    )


def test_rank_order_puts_the_anchor_first_and_holders_last():
    nodes = [_node(1, "trainer"), _node(2, "holder"), _node(3, "both"), _node(4, "trainer")]
    assert [n.instance_id for n in arrange(nodes)] == ["i-3", "i-1", "i-4", "i-2"]


def test_mpirun_runs_on_the_head_with_the_internal_key_and_reaches_nodes_at_private_addresses():
    nodes = arrange(
        [_node(1, "trainer", "127.10.0.1"), _node(2, "trainer", "127.10.0.2"), _node(3, "holder", "127.10.0.3")]
    )
    argv = mpirun_command(_launch(nodes))
    agent = shlex.split(argv[argv.index("plm_rsh_agent") + 1])
    assert agent[agent.index("-i") + 1] == "/home/u/deepvm/ssh/id_ed25519"  # on the head, never the user's key
    assert "UserKnownHostsFile=/home/u/deepvm/jobs/job-1/known_hosts" in agent
    assert "StrictHostKeyChecking=yes" in agent and "GlobalKnownHostsFile=/dev/null" in agent
    assert agent[agent.index("-l") + 1] == "root"
    assert not any("/k/" in arg for arg in argv)  # nothing of this machine's key material
    assert argv[argv.index("--hostfile") + 1] == "/home/u/deepvm/jobs/job-1/hostfile"
    assert argv[argv.index("plm_rsh_no_tree_spawn") + 1] == "1"  # only the head holds the key
    assert argv[argv.index("btl_tcp_if_include") + 1] == "lo"
    assert argv[argv.index("--roles") + 1] == "trainer,trainer,holder"
    assert argv[argv.index("--master-addr") + 1] == "127.10.0.1"  # trainer 0's private address
    assert "OMP_NUM_THREADS=1" in argv and "PYTHONPATH=/home/u/deepvm/runtime" in argv
    assert argv[argv.index("-wdir") + 1] == "/home/u/deepvm/jobs/job-1/job"
    assert argv[argv.index("--job-env") + 1] == "/home/u/deepvm/jobs/job-1/env"  # what the job's setup installed
    command = shlex.split(guarded_mpirun_command(_launch(nodes)))
    assert command[:7] == ["exec", "/usr/bin/python3", "-m", "training.head.mpirun_guard", "--lease", "60", "--"]
    assert command[7:] == argv


def test_mpirun_command_keeps_open_mpi_on_the_network_of_the_nodes():
    nodes = (_node(1, "both", "10.0.0.5"), _node(2, "trainer", "10.0.0.6"))
    argv = mpirun_command(_launch(nodes))
    assert argv[argv.index("btl_tcp_if_include") + 1] == "10.0.0.4/30"  # not docker0's 172.17.0.0/16
    assert argv[argv.index("oob_tcp_if_include") + 1] == "10.0.0.4/30"
    assert argv[argv.index("--roles") + 1] == "both,trainer"
    assert argv[argv.index("--master-addr") + 1] == "10.0.0.5"


def test_open_mpi_outside_the_path_is_run_with_its_prefix():
    nodes = (_node(1, "both", "10.0.0.5"), _node(2, "trainer", "10.0.0.6"))
    argv = mpirun_command(replace(_launch(nodes), open_mpi_home="/opt/amazon/openmpi"))
    assert argv[:3] == ["/opt/amazon/openmpi/bin/mpirun", "--prefix", "/opt/amazon/openmpi"]
    assert mpirun_command(_launch(nodes))[:2] == ["mpirun", "--hostfile"]


@pytest.mark.parametrize(
    ("addresses", "network"),
    [
        (["10.0.0.5"], "10.0.0.5/32"),
        (["10.0.1.200", "10.0.2.7", "10.0.1.9"], "10.0.0.0/22"),
        (["172.31.255.254", "172.31.0.1"], "172.31.0.0/16"),
        (["127.77.0.3", "127.77.0.4"], "lo"),
    ],
)
def test_mpi_network_is_the_smallest_that_holds_every_node(addresses, network):
    assert mpi_network(addresses) == network


def test_mpirun_command_needs_one_login_for_all_nodes():
    nodes = (_node(1, "both"), _node(2, "trainer", user="ubuntu"))
    with pytest.raises(InputError, match="one SSH user"):
        mpirun_command(_launch(nodes))


@pytest.mark.parametrize(
    ("roles", "head"),
    [
        (["trainer", "trainer", "holder", "holder"], "i-3"),  # Tiering: the first holder
        (["trainer", "both", "trainer"], "i-2"),  # Single Anchor: the anchor
    ],
)
def test_the_head_is_the_first_on_demand_node(roles, head):
    nodes = arrange([_node(i, role) for i, role in enumerate(roles, start=1)])
    assert _launch(nodes).head.instance_id == head


def test_without_an_on_demand_node_the_head_is_the_first_node():
    spot = [replace(_node(i, role), market=Market.SPOT) for i, role in enumerate(["trainer", "holder"], start=1)]
    assert _launch(arrange(spot)).head.instance_id == "i-1"


KEY_1 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHm0o1fVvPzSgHLkwZkt7Qv7rX5O4xJf7Kq6yq0E0Dq9"
KEY_2 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGnjyRcRdyrVw3VgUmmUqR+nQc4MKe3vRFAJ3GZ0ZtH3"


def test_head_files_pin_each_nodes_host_key_under_its_private_address(tmp_path):
    known = tmp_path / "known_hosts"
    known.write_text(f"[54.0.0.1]:2222 {KEY_1}\n[54.0.0.2]:2222 {KEY_2}\n")
    nodes = arrange(
        [
            _node(2, "holder", "10.0.0.2", port=2222, known=str(known)),
            _node(1, "trainer", "10.0.0.1", port=2222, known=str(known)),
        ]
    )
    files = head_files(_launch(nodes))
    assert files["/home/u/deepvm/jobs/job-1/hostfile"] == "10.0.0.1 slots=1\n10.0.0.2 slots=1\n"  # rank order
    assert files["/home/u/deepvm/jobs/job-1/known_hosts"] == f"[10.0.0.1]:2222 {KEY_1}\n[10.0.0.2]:2222 {KEY_2}\n"


def test_head_files_refuse_a_node_whose_host_key_is_not_pinned(tmp_path):
    known = tmp_path / "known_hosts"
    known.write_text(f"54.0.0.1 {KEY_1}\n")
    nodes = (_node(1, "both", known=str(known)), _node(2, "trainer", known=str(known)))
    with pytest.raises(TransportError, match=r"^trainer-2 .*no host key pinned"):
        head_files(_launch(nodes))


def test_a_multi_gpu_node_runs_one_rank_per_gpu_and_only_the_anchors_first_rank_holds(tmp_path):
    known = tmp_path / "known_hosts"
    known.write_text(f"54.0.0.1 {KEY_1}\n54.0.0.2 {KEY_2}\n54.0.0.3 {KEY_1}\n")
    anchor = replace(_node(1, "both", "10.0.0.5", known=str(known)), gpus=4)
    trainer = replace(_node(2, "trainer", "10.0.0.6", known=str(known)), gpus=1)
    launch = _launch(arrange([_node(3, "holder", "10.0.0.7", known=str(known)), trainer, anchor]))
    argv = mpirun_command(launch)
    assert argv[argv.index("--roles") + 1] == "both,trainer,trainer,trainer,trainer,holder"
    assert argv[argv.index("-np") + 1] == "6" and argv[argv.index("--map-by") + 1] == "slot"
    hostfile = head_files(launch)["/home/u/deepvm/jobs/job-1/hostfile"]
    assert hostfile == "10.0.0.5 slots=4\n10.0.0.6 slots=1\n10.0.0.7 slots=1\n"
    assert [n.instance_id for n in launch.rank_nodes] == ["i-1"] * 4 + ["i-2", "i-3"]
    assert launch.trainer_ranks == 5 and replace(_node(4, "holder"), gpus=8).ranks == 1
