"""Each node's own SSH host key: made on the node, printed to its console, learnt through EC2's
GetConsoleOutput and pinned for that instance and its address alone.

The moto server answers GetConsoleOutput as the sandbox's control plane does (provisioning/sandbox/
controlplane.py): from the console file of the instance's host, which these tests write as a booting
node would. So the path under test is the real one: boto3 over HTTP, the EC2 answer, the console's text.
"""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from moto.ec2.responses.general import General

from provisioning.cloud.aws.console import wait_host_keys
from provisioning.cloud.keys import ensure_cluster_keys, pin_host_key, pinned_host_keys
from provisioning.cloud.serial_console import BEGIN, END, ed25519_host_key, host_key_block
from provisioning.cloud.userdata import NodeBoot, parse_user_data, render_user_data
from provisioning.clusters.handle import Cluster
from provisioning.clusters.lifecycle import UpRequest, up
from provisioning.clusters.store import Store
from provisioning.core.errors import CloudError
from provisioning.sandbox import controlplane
from provisioning.sandbox.hosts import CONSOLE, host_dir
from tests.cloud.plans import make_plan
from tests.cloud.test_shortage import FixedTarget


def _new_key() -> str:
    public = Ed25519PrivateKey.generate().public_key()
    return public.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()


@pytest.fixture
def consoles(moto, monkeypatch):
    """The moto server answers GetConsoleOutput from each instance's host console, as the sandbox's does;
    the returned function prints a node's host key block to its console."""
    monkeypatch.setattr(General, "get_console_output", controlplane.console_output)

    def boot(instance_id: str, text: str) -> None:
        host_dir(instance_id).mkdir(parents=True, exist_ok=True)
        with open(host_dir(instance_id) / CONSOLE, "a") as console:
            console.write(text)

    return boot


# the console's text, as EC2 hands it back


def test_the_key_is_read_across_the_console_s_wrapping_and_syslog_prefixes():
    key = _new_key()
    wrapped = "\r\n".join(key[i : i + 80] for i in range(0, len(key), 80))  # EC2's console wraps at 80
    console = (
        "<14>Jun  3 17:07:52 ec2: -----BEGIN SSH HOST KEY FINGERPRINTS-----\r\n"
        "<14>Jun  3 17:07:52 ec2: 256 SHA256:abc root@ip-10-0-0-1 (ED25519)\r\n"
        f"{BEGIN}\r\necdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTY= root@ip\r\n"
        f"{wrapped} root@ip-10-0-0-1\r\n{END}\r\n"
    )
    assert ed25519_host_key(console) == key


@pytest.mark.parametrize(
    "console",
    [
        "",  # nothing printed yet
        f"{BEGIN}\nssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI",  # the block is still being printed
        f"{BEGIN}\nssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC root@x\n{END}\n",  # no ed25519 key in it
        f"{BEGIN}\nssh-ed25519 AAAA!!notbase64 root@x\n{END}\n",
        f"{BEGIN}\nssh-ed25519 AAAAB3NzaC1yc2EAAAADAQABAAABAQCzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz\n{END}\n",
    ],
    ids=["empty", "unfinished", "no-ed25519", "garbage", "wrong-blob"],
)
def test_no_key_is_read_from_a_console_without_a_complete_valid_block(console):
    assert ed25519_host_key(console) is None


def test_only_the_first_block_counts():
    first, later = _new_key(), _new_key()
    assert ed25519_host_key(host_key_block([first]) + "login: \n" + host_key_block([later])) == first


def test_user_data_holds_public_keys_only_and_asks_the_node_for_its_own_host_key():
    boot = NodeBoot(authorized_keys=("ssh-ed25519 AAAA deepvm-c1",))
    assert parse_user_data(render_user_data(boot)) == boot
    from base64 import b64decode

    text = b64decode(render_user_data(boot)).decode()
    assert "PRIVATE" not in text and "ssh_keys" not in text
    assert "ssh_deletekeys: true" in text and "- ed25519" in text and "emit_keys_to_console: true" in text


def test_a_pin_is_never_replaced(isolated_env):
    keys = ensure_cluster_keys("c1")
    first = _new_key()
    pin_host_key(keys, "i-1", first)
    pin_host_key(keys, "i-1", first)  # learning the same key again is fine
    with pytest.raises(CloudError, match="i-1 now shows a host key other than the one pinned for it"):
        pin_host_key(keys, "i-1", _new_key())
    assert pinned_host_keys(keys) == {"i-1": first}


# learnt through the EC2 API, pinned per instance and address


def _up(ctx) -> list:
    request = UpRequest(
        name="c1",
        plans=(make_plan(spot=2, on_demand=1),),
        image_id="ami-0000000000de3b0a1",
        wait_ssh=False,
        timeout_s=30,
    )
    return up(FixedTarget(ctx), request).view.nodes


def test_each_node_is_pinned_to_its_own_key_at_its_own_address(ctx, consoles):
    nodes = _up(ctx)
    printed = {n.instance_id: _new_key() for n in nodes}
    for node in nodes[:2]:  # the third has not printed its key yet
        consoles(node.instance_id, "booting...\n" + host_key_block([f"{printed[node.instance_id]} root@x"]))

    endpoints = Cluster.open_running("c1").endpoints()  # takes what the consoles show now, waits for nothing
    keys = ensure_cluster_keys("c1")
    known = keys.known_hosts_path.read_text().splitlines()
    assert sorted(known) == sorted(f"{n.address} {printed[n.instance_id]}" for n in nodes[:2])
    assert {e.known_hosts_path for e in endpoints} == {str(keys.known_hosts_path)}

    late = nodes[2]
    consoles(late.instance_id, host_key_block([printed[late.instance_id]]))
    Cluster.open_running("c1").endpoints()
    known = keys.known_hosts_path.read_text().splitlines()
    assert sorted(known) == sorted(f"{n.address} {printed[n.instance_id]}" for n in nodes)
    assert len({line.split(maxsplit=1)[1] for line in known}) == 3  # three nodes, three keys

    # a key printed later (by anyone with root on the node), after the first or instead of it (the console
    # keeps only its latest 64 KiB), changes nothing: pins are learnt once
    consoles(nodes[0].instance_id, host_key_block([_new_key()]))
    Cluster.open_running("c1").endpoints()
    (host_dir(nodes[0].instance_id) / CONSOLE).write_text(host_key_block([_new_key()]))
    Cluster.open_running("c1").endpoints()
    assert pinned_host_keys(keys) == printed
    assert Store().cluster("c1").status == "up"


def test_waiting_for_a_key_that_is_never_printed_names_the_node(ctx, consoles):
    nodes = _up(ctx)
    consoles(nodes[0].instance_id, host_key_block([_new_key()]))
    silent = [n.instance_id for n in nodes[1:]]
    with pytest.raises(CloudError) as caught:
        wait_host_keys(ctx, [nodes[0].instance_id, *silent], timeout_s=0.5)
    message = str(caught.value)
    assert message.startswith(f"no SSH host key in the console output of {', '.join(silent)} after 0.5 s")
    assert nodes[0].instance_id not in message
