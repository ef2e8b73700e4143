"""Where the nodes live and who may reach them: the subnet of the plan's zone and the cluster's security
group (SSH from one address range, everything between members of the group)."""

from __future__ import annotations

import ipaddress
import urllib.request

from botocore.exceptions import ClientError

from provisioning.cloud.aws.context import AwsContext, cloud_errors, error_code, until_known
from provisioning.cloud.names import ClusterIdentity, cluster_filter, owned_by, resource_name, tag_spec
from provisioning.core.errors import CloudError, InputError

_CHECKIP_URL = "https://checkip.amazonaws.com"
# RFC 1918's ranges and IPv6's unique local addresses: the networks a VPC reaches privately (Python's
# is_private also counts documentation ranges such as 198.51.100.0/24, which are public addresses here)
_PRIVATE = tuple(ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7"))
GROUP_PROPAGATION_S = 60.0  # how long a new security group may stay unknown to EC2


def default_subnet(ctx: AwsContext, availability_zone: str) -> str:
    """The default VPC's subnet in the zone; AWS launches there when no subnet is named."""
    with cloud_errors(f"looking up the default subnet of {availability_zone}"):
        subnets = ctx.client("ec2").describe_subnets(
            Filters=[
                {"Name": "availability-zone", "Values": [availability_zone]},
                {"Name": "default-for-az", "Values": ["true"]},
            ]
        )["Subnets"]
    if not subnets:
        raise CloudError(f"no default subnet in {availability_zone}; pass --subnet SUBNET_ID")
    return subnets[0]["SubnetId"]


def check_subnet(ctx: AwsContext, subnet_id: str, availability_zone: str, ssh_cidr: str) -> str:
    """The user's --subnet, once it is known to be in the plan's zone and its nodes reachable over SSH.

    A subnet that gives instances no public IPv4 address (MapPublicIpOnLaunch false: every subnet but
    the default ones, unless changed) launches nodes that deepvm cannot reach from outside the VPC: `up`
    would pay for them through its whole SSH timeout and fail. It is refused before anything is made,
    unless --ssh-cidr names a private range (RFC 1918), which says that this machine reaches the VPC
    privately (from inside it, or by peering or VPN), where nodes are reached at their private
    addresses (https://docs.aws.amazon.com/vpc/latest/userguide/vpc-ip-addressing.html)."""
    with cloud_errors(f"describing subnet {subnet_id}"):
        subnet = ctx.client("ec2").describe_subnets(SubnetIds=[subnet_id])["Subnets"][0]
    if subnet.get("AvailabilityZone") != availability_zone:
        raise InputError(
            f"--subnet {subnet_id} is in {subnet.get('AvailabilityZone')}, but the plan launches in "
            f"{availability_zone}: pass a subnet of {availability_zone}"
        )
    source = ipaddress.ip_network(ssh_cidr, strict=False)
    private_source = any(source.version == p.version and source.subnet_of(p) for p in _PRIVATE)
    if not subnet.get("MapPublicIpOnLaunch") and not private_source:
        raise InputError(
            f"--subnet {subnet_id} gives instances no public address (MapPublicIpOnLaunch is false), so deepvm "
            f"could not reach its nodes over SSH from here; pass a public subnet, turn it on with `aws ec2 "
            f"modify-subnet-attribute --subnet-id {subnet_id} --map-public-ip-on-launch`, or, from a machine "
            "that reaches the VPC privately, pass that network's range as --ssh-cidr"
        )
    return subnet_id


def zone_subnets(ctx: AwsContext, vpc_id: str, own_subnet: str) -> tuple[str, ...]:
    """A subnet of the VPC in each zone it has one, as "zone=subnet-id": where a node of the cluster bought in
    another zone launches. In the cluster's own zone its own subnet; elsewhere the zone's default subnet
    when there is one (it gives public addresses, as `up` needs from a subnet it picks), else the first that
    maps public addresses, else the first (a VPC reached privately: `check_subnet`'s --ssh-cidr)."""
    with cloud_errors(f"listing the subnets of {vpc_id}"):
        pages = (
            ctx.client("ec2")
            .get_paginator("describe_subnets")
            .paginate(Filters=[{"Name": "vpc-id", "Values": [vpc_id]}])
        )
        subnets = [s for page in pages for s in page["Subnets"]]
    best: dict[str, tuple[tuple[bool, bool, bool, str], str]] = {}
    for s in subnets:
        key = (s["SubnetId"] != own_subnet, not s.get("DefaultForAz"), not s.get("MapPublicIpOnLaunch"), s["SubnetId"])
        zone = s["AvailabilityZone"]
        if zone not in best or key < best[zone][0]:
            best[zone] = (key, s["SubnetId"])
    return tuple(f"{zone}={subnet}" for zone, (_, subnet) in sorted(best.items()))


def subnet_vpc(ctx: AwsContext, subnet_id: str) -> str:
    with cloud_errors(f"describing subnet {subnet_id}"):
        return ctx.client("ec2").describe_subnets(SubnetIds=[subnet_id])["Subnets"][0]["VpcId"]


def caller_cidr(ctx: AwsContext) -> str:
    """The caller's address as a /32: the public one for AWS, loopback for a local emulator."""
    if ctx.emulated:
        return "127.0.0.1/32"
    try:
        with urllib.request.urlopen(_CHECKIP_URL, timeout=10) as resp:
            address = resp.read().decode().strip()
        return f"{ipaddress.ip_address(address)}/32"
    except (OSError, ValueError) as exc:
        raise CloudError(f"could not find this machine's public address ({exc}); pass --ssh-cidr") from exc


def check_cidr(cidr: str) -> str:
    try:
        return str(ipaddress.ip_network(cidr, strict=False))
    except ValueError as exc:
        raise InputError(f"--ssh-cidr {cidr!r} is not an address range like 203.0.113.7/32") from exc


def world_open_warning(cidr: str) -> str | None:
    """A warning when the range admits every address (0.0.0.0/0, ::/0): a scanner's SSH attempts then
    reach every node. Still allowed: some networks have no narrower range to name."""
    if ipaddress.ip_network(cidr, strict=False).prefixlen == 0:
        return f"--ssh-cidr {cidr} opens the nodes' SSH port to the whole internet (only deepvm's keys log in)"
    return None


def ensure_security_group(ctx: AwsContext, cluster: ClusterIdentity, vpc_id: str, ssh_cidr: str) -> str:
    """The cluster's group (created once, found again by name): SSH from ssh_cidr, all traffic within."""
    ec2 = ctx.client("ec2")
    name = resource_name(cluster)
    with cloud_errors("creating the security group"):
        found = ec2.describe_security_groups(
            Filters=[{"Name": "group-name", "Values": [name]}, {"Name": "vpc-id", "Values": [vpc_id]}]
        )["SecurityGroups"]
        if found:
            group_id = found[0]["GroupId"]
        else:
            group_id = ec2.create_security_group(
                GroupName=name,
                Description=f"deepvm cluster {cluster.describe()}: SSH from {ssh_cidr}, all traffic within the group",
                VpcId=vpc_id,
                TagSpecifications=[tag_spec("security-group", cluster)],
            )["GroupId"]
        ssh_from = (
            {"Ipv6Ranges": [{"CidrIpv6": ssh_cidr}]}
            if ipaddress.ip_network(ssh_cidr, strict=False).version == 6
            else {"IpRanges": [{"CidrIp": ssh_cidr}]}
        )
        rules = [
            {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, **ssh_from},
            {"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": group_id}]},
        ]
        for rule in rules:
            try:  # a group created a moment ago may be unknown to EC2 for a while
                until_known(
                    lambda r=rule: ec2.authorize_security_group_ingress(GroupId=group_id, IpPermissions=[r]),
                    ("InvalidGroup.NotFound",),
                    GROUP_PROPAGATION_S,
                )
            except ClientError as exc:
                if error_code(exc) != "InvalidPermission.Duplicate":
                    raise
    return group_id


def cluster_security_groups(ctx: AwsContext, cluster: ClusterIdentity) -> list[str]:
    with cloud_errors("listing the cluster's security groups"):
        groups = ctx.client("ec2").describe_security_groups(Filters=cluster_filter(cluster))["SecurityGroups"]
    return [g["GroupId"] for g in owned_by(cluster, groups)]
