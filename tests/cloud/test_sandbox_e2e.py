"""The sandbox end to end, through the CLI: real moto server, real namespaces, real sshd, real SSH."""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from provisioning.cloud.keys import ensure_cluster_keys
from provisioning.cloud.ssh import Answer, connect, probe
from provisioning.clusters.handle import Cluster
from provisioning.clusters.store import Store
from provisioning.planner.plan import Role
from provisioning.sandbox.control import load_info
from provisioning.sandbox.hosts import hosts_root
from provisioning.sandbox.metadata import METADATA_PORT
from provisioning.sandbox.procs import pid_alive
from tests.cloud.plans import make_plan, write_plans
from tests.conftest import REPO, main_in_process, run_cli

pytestmark = [
    pytest.mark.sandbox,
    pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox boots namespaced sshd hosts and needs root"),
]


@pytest.fixture
def sandbox():
    """Whatever happens in the test, stop the sandbox afterwards so nothing is left running."""
    yield
    result = run_cli("sandbox", "stop")
    assert result.returncode == 0, result.stderr


def _run(client, command: str, timeout: float = 20) -> tuple[int, str]:
    _, stdout, _ = client.exec_command(command, timeout=timeout)
    out = stdout.read().decode()
    return stdout.channel.recv_exit_status(), out


def _imds(client, path: str, token: bool = True) -> tuple[str, str]:
    """(HTTP status, body) of an IMDSv2 request made from inside the node."""
    get_token = (
        'T=$(curl -s -X PUT -H "X-aws-ec2-metadata-token-ttl-seconds: 60" '
        '"${AWS_EC2_METADATA_SERVICE_ENDPOINT}latest/api/token"); '
    )
    header = '-H "X-aws-ec2-metadata-token: $T" ' if token else ""
    command = (
        (get_token if token else "")
        + f'curl -s -o /tmp/imds.out -w "%{{http_code}}" {header}'
        + f'"${{AWS_EC2_METADATA_SERVICE_ENDPOINT}}{path}"; '
        "echo; cat /tmp/imds.out"
    )
    _, out = _run(client, command)
    code, _, body = out.partition("\n")
    return code, body


def _boto3_on(client, endpoint: str) -> list[str]:
    """What boto3 finds on the node with no credentials in its environment (how the head's controller
    runs): the credentials' method, and whether DescribeInstances works with them. botocore asks instance
    metadata once with a 1 s timeout: EC2's IMDS is the hypervisor's and answers at once, the sandbox's is a
    process on this machine's shared cores that mints the role's credentials through moto, and under the
    suite's load it once answered later (this check found 'none'): here it gets 5 s and 3 tries."""
    code = (
        "import boto3; c = boto3.Session().get_credentials(); print(c.method if c else 'none'); "
        "print('described' if c and boto3.client('ec2').describe_instances()['Reservations'] else '-')"
    )
    status, out = _run(
        client,
        f"env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY -u AWS_SESSION_TOKEN AWS_ENDPOINT_URL={endpoint} "
        f"AWS_METADATA_SERVICE_TIMEOUT=5 AWS_METADATA_SERVICE_NUM_ATTEMPTS=3 "
        f'AWS_DEFAULT_REGION=us-east-1 {sys.executable} -c "{code}"',
        timeout=60,
    )
    assert status == 0, out
    return out.split()


def _refused(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=1):
            return False
    except OSError:
        return True


def _pinned(endpoints: dict) -> dict[str, str]:
    """Instance id -> the host key known_hosts pins at its address (and nowhere else)."""
    known = {}
    for line in Path(next(iter(endpoints.values())).known_hosts_path).read_text().splitlines():
        address, key = line.split(maxsplit=1)
        assert address not in known, f"{address} is pinned twice"
        known[address] = key
    assert sorted(known) == sorted(e.address for e in endpoints.values())
    return {iid: known[e.address] for iid, e in endpoints.items()}


def _ended() -> list[str]:
    """The cluster's events of its instances' ends, each with its StateReason."""
    return [e.message for e in Store().events("e2e") if e.kind == "ended"]


def _status(name: str) -> dict:
    result = main_in_process("status", name, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_up_ssh_interrupt_down(tmp_path, sandbox):
    plan = write_plans(tmp_path / "plan.json", make_plan(spot=3, on_demand=1))
    result = run_cli("up", "--yes", "--cloud", "sandbox", "--plan", str(plan), "--name", "e2e", "--json", timeout=180)
    assert result.returncode == 0, result.stderr
    assert "sandbox: local emulation, no AWS charges" in result.stderr
    nodes = json.loads(result.stdout)["nodes"]
    assert len(nodes) == 4 and all(n["state"] == "running" for n in nodes)
    assert all(n["private_ip"].startswith("127.") for n in nodes)

    # every node answers over SSH, checked against its own pinned host key: made on the node at boot (the
    # node shows it), learnt from its console output through EC2, one key per node, each at its own address
    endpoints = {e.instance_id: e for e in Cluster.open_running("e2e").endpoints()}
    clients = {iid: connect(e.host) for iid, e in endpoints.items()}
    pinned = _pinned(endpoints)
    assert len(set(pinned.values())) == 4
    for iid, client in clients.items():
        code, out = _run(client, "tr '\\0' ' ' < /proc/1/cmdline")
        assert code == 0 and "provisioning.sandbox.hostinit" in out  # PID 1 is the host's own init
        code, out = _run(client, "cut -d' ' -f1,2 /etc/ssh/ssh_host_ed25519_key.pub")
        assert code == 0 and out.strip() == pinned[iid]

    # ...and another node's key at a node's address is refused: a pin says "this node", not "a node"
    forged = tmp_path / "forged_known_hosts"
    first, second = list(endpoints.values())[:2]
    forged.write_text(f"{first.address} {pinned[second.instance_id]}\n")
    assert probe(replace(first, known_hosts_path=str(forged)).host) is Answer.NOT_PINNED

    # a job on a node cannot change deepvm's code or the Python it runs on (read-only, and no remount)
    venv = Path(sys.prefix).resolve()
    for path in (REPO, REPO / "provisioning", venv, venv / "bin"):
        code, out = _run(clients[first.instance_id], f"touch {path}/written-by-a-job 2>&1")
        assert code != 0 and "Read-only file system" in out, (path, out)
    code, out = _run(clients[first.instance_id], f"mount -o remount,bind,rw {REPO} 2>&1")
    assert code != 0 and not (REPO / "written-by-a-job").exists(), out

    # each node has its own filesystem: home and /tmp
    ids = list(clients)
    assert _run(clients[ids[0]], "echo hello > ~/only-here && echo x > /tmp/only-here")[0] == 0
    assert _run(clients[ids[0]], "cat ~/only-here")[1] == "hello\n"
    for iid in ids[1:]:
        assert _run(clients[iid], "test ! -e ~/only-here && test ! -e /tmp/only-here")[0] == 0

    # the head alone holds the controller's instance profile: boto3 there finds its role's credentials in
    # the instance metadata and may describe the cluster; a trainer finds none. No user credential (this
    # test runs with AWS_ACCESS_KEY_ID=testing) reaches any node, in a session or in the host's init.
    head = next(n["instance_id"] for n in nodes if n["role"] == "anchor")
    trainer = next(n["instance_id"] for n in nodes if n["role"] == "trainer")
    endpoint = load_info().endpoint
    assert _boto3_on(clients[head], endpoint) == ["iam-role", "described"]
    assert _boto3_on(clients[trainer], endpoint) == ["none", "-"]
    for client in clients.values():
        code, out = _run(client, "env; tr '\\0' '\\n' < /proc/1/environ")
        assert code == 0 and "AWS_ACCESS_KEY_ID" not in out and "AWS_SECRET_ACCESS_KEY" not in out

    # instance metadata: IMDSv2 only, no notice yet
    spot = next(n["instance_id"] for n in nodes if n["market"] == "spot")
    assert _imds(clients[spot], "latest/meta-data/instance-id") == ("200", spot)
    assert _imds(clients[spot], "latest/meta-data/instance-life-cycle") == ("200", "spot")
    assert _imds(clients[spot], "latest/meta-data/instance-id", token=False)[0] == "401"
    assert _imds(clients[spot], "latest/meta-data/spot/instance-action")[0] == "404"

    on_demand = next(n["instance_id"] for n in nodes if n["market"] == "on-demand")
    refused = main_in_process("interrupt", on_demand)
    assert refused.returncode == 2 and "only spot nodes get interruption notices" in refused.stderr

    # a rebalance recommendation alone (sandbox only): the document appears, and nothing else happens
    calm = next(n["instance_id"] for n in nodes if n["market"] == "spot" and n["instance_id"] != spot)
    result = main_in_process("interrupt", calm, "--rebalance-only")
    assert result.returncode == 0 and "rebalance recommendation alone" in result.stdout + result.stderr
    code, body = _imds(clients[calm], "latest/meta-data/events/recommendations/rebalance")
    assert code == "200" and json.loads(body).keys() == {"noticeTime"}
    assert _imds(clients[calm], "latest/meta-data/spot/instance-action")[0] == "404"

    result = main_in_process("interrupt", spot, "--after", "4")
    assert result.returncode == 0, result.stderr
    code, body = _imds(clients[spot], "latest/meta-data/spot/instance-action")
    assert code == "200" and json.loads(body)["action"] == "terminate"
    assert _imds(clients[spot], "latest/meta-data/events/recommendations/rebalance")[0] == "200"
    assert _imds(clients[ids[0] if ids[0] != spot else ids[1]], "latest/meta-data/spot/instance-action")[0] == "404"

    # the node dies at the deadline, with every process of it, though no deepvm command is running
    spot_ip = endpoints[spot].address
    deadline = time.monotonic() + 30
    while not _refused(spot_ip, 22) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _refused(spot_ip, 22) and _refused(spot_ip, METADATA_PORT)
    states = {n["instance_id"]: n["state"] for n in _status("e2e")["nodes"]}
    assert states[spot] == "terminated" and states[calm] == "running"
    assert sorted(states.values()) == ["running", "running", "running", "terminated"]
    # ended by EC2 as a Spot interruption (the realism layer's reclaim), which the cluster's events say
    assert _ended() == [f"{spot} terminated: Server.SpotInstanceTermination"]
    for client in clients.values():
        client.close()

    # a replacement spot node joins, reachable with its own key, pinned at its own address
    cluster = Cluster.open_running("e2e")
    trainers = next(g for g in cluster.plan.nodes if g.role is Role.TRAINER)
    (added,) = cluster.add_nodes(replace(trainers, count=1))
    assert added.market.value == "spot" and added.role.value == "trainer"
    replacement = next(e for e in cluster.endpoints() if e.instance_id == added.instance_id)
    assert probe(replacement.host) is Answer.YES
    pinned_now = _pinned({e.instance_id: e for e in cluster.endpoints()})
    assert pinned_now[added.instance_id] not in pinned.values() and len(set(pinned_now.values())) == 4
    internal = str(ensure_cluster_keys("e2e").internal_key_path)  # the head's key to the other nodes
    with connect(replace(replacement, key_path=internal).host) as client:  # authorised at boot, no staging
        assert _run(client, "true")[0] == 0
    assert sorted(n["state"] for n in _status("e2e")["nodes"]) == ["running"] * 4 + ["terminated"]

    # a node's OS shut down (the head's last resort, training/head/poweroff.py) ends its instance, as EC2 ends one
    # launched with InstanceInitiatedShutdownBehavior=terminate; the sandbox's init, never this machine's, hears it
    with connect(endpoints[calm].host) as client:
        python = "from training.head.poweroff import power_off; power_off(True, print)"
        client.exec_command(f"cd {REPO} && {sys.executable} -c '{python}'")
        deadline = time.monotonic() + 30
        while not _refused(endpoints[calm].address, 22) and time.monotonic() < deadline:
            time.sleep(0.5)
    deadline = time.monotonic() + 30
    while _status("e2e") and f"{calm} terminated: Client.InstanceInitiatedShutdown" not in _ended():
        assert time.monotonic() < deadline, _ended()
        time.sleep(0.5)
    assert _ended()[-1] == f"{calm} terminated: Client.InstanceInitiatedShutdown"

    # down: no instance, no sshd, no namespace, no metadata endpoint left
    report = json.loads(main_in_process("sandbox", "status", "--json").stdout)
    host_pids = [pid for h in report["hosts"] for pid in h["pids"]]
    assert len(report["hosts"]) == 3 and len(host_pids) == 6  # unshare + namespace init per host
    result = run_cli("down", "e2e", "--yes")
    assert result.returncode == 0, result.stderr
    assert not any(pid_alive(pid) for pid in host_pids)
    for e in [*endpoints.values(), replacement]:
        assert _refused(e.address, 22) and _refused(e.address, METADATA_PORT)
    assert list(hosts_root().iterdir()) == []
    info = load_info()
    ec2 = info.context("us-east-1").client("ec2")
    live = ec2.describe_instances(Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}])
    assert live["Reservations"] == []
    iam = info.context("us-east-1").client("iam")  # the head's role and profile went with the cluster
    assert iam.list_roles()["Roles"] == [] and iam.list_instance_profiles()["InstanceProfiles"] == []
    assert _status("e2e")["status"] == "terminated"
