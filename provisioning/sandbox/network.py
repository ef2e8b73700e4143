"""The sandbox's VPCs: one per region with a loopback CIDR, so every instance's private IP is a 127.x
address that the host rig can bind sshd and the metadata endpoint to."""

from __future__ import annotations

from provisioning.sandbox.control import SandboxInfo, load_info, sandbox_lock, save_info

SANDBOX_TAG = "deepvm:sandbox"


def sandbox_subnet(info: SandboxInfo, region: str, availability_zone: str) -> str:
    """The subnet of the zone (127.X.N.0/24 in the region's 127.X.0.0/16 VPC). The region's VPC gets a subnet
    in every one of its zones on first use, as a default VPC has: a node bought in another zone of the
    cluster's region (training/control's ladder) launches in the subnet `up` recorded there."""
    with sandbox_lock():
        current = load_info() or info
        network = current.networks.setdefault(region, {})
        if availability_zone not in network:
            ec2 = current.context(region).client("ec2")
            tags = [
                {"ResourceType": kind, "Tags": [{"Key": SANDBOX_TAG, "Value": "true"}]} for kind in ("vpc", "subnet")
            ]
            if "vpc" not in network:
                network["vpc"] = ec2.create_vpc(
                    CidrBlock=f"127.{current.second_octet}.0.0/16", TagSpecifications=tags[:1]
                )["Vpc"]["VpcId"]
            zones = [z["ZoneName"] for z in ec2.describe_availability_zones()["AvailabilityZones"]]
            for zone in [availability_zone, *sorted(set(zones) - {availability_zone})]:
                if zone in network:
                    continue
                index = len(network)  # 1 for the first zone: 127.X.1.0/24
                network[zone] = ec2.create_subnet(
                    VpcId=network["vpc"],
                    CidrBlock=f"127.{current.second_octet}.{index}.0/24",
                    AvailabilityZone=zone,
                    TagSpecifications=tags[1:],
                )["Subnet"]["SubnetId"]
            save_info(current)
        info.networks = current.networks
        return network[availability_zone]


def in_sandbox_network(info: SandboxInfo, address: str | None) -> bool:
    return bool(address) and address.startswith(f"127.{info.second_octet}.")
