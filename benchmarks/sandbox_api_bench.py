"""CPU of the sandbox's cloud API per call: moto with the realism layer as the sandbox runs it, with and without
provisioning/sandbox/moto_speed.py's two caches, in the same run.

Each side is a fresh process: a moto server on a loopback port with the realism layer installed (the baseline
has moto_speed's install turned into a no-op), a boto3 client that launches a few instances, then the calls
deepvm's polls make most (DescribeInstances, DescribeSecurityGroups, GetRole), CALLS times each. It prints
the process's CPU per call (server and client: both are in it) and the ratio. Run:
`python benchmarks/sandbox_api_bench.py [--calls 200]`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def side(calls: int, cached: bool) -> dict[str, float]:
    """One process's CPU-s per call, after a warm-up (the first call of each kind imports and loads)."""
    os.environ["MOTO_EC2_LOAD_DEFAULT_AMIS"] = "false"
    import boto3
    from moto.server import ThreadedMotoServer

    from provisioning.sandbox import moto_speed, realism_moto

    if not cached:
        moto_speed.install = lambda: None
    realism_moto.install()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    settings = {
        "endpoint_url": f"http://{host}:{port}",
        "region_name": "us-east-1",
        "aws_access_key_id": "bench",
        "aws_secret_access_key": "bench",
    }
    ec2, iam = boto3.client("ec2", **settings), boto3.client("iam", **settings)
    ec2.run_instances(ImageId="ami-12c6146b", MinCount=4, MaxCount=4, InstanceType="g4dn.xlarge")
    iam.create_role(RoleName="bench", AssumeRolePolicyDocument="{}")
    calls_made = (ec2.describe_instances, ec2.describe_security_groups, lambda: iam.get_role(RoleName="bench"))
    for call in calls_made:
        call()
    started = time.process_time()
    for _ in range(calls):
        for call in calls_made:
            call()
    cpu = time.process_time() - started
    server.stop()
    return {"cpu_ms_per_call": 1000 * cpu / (calls * len(calls_made))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="rounds of the three calls on each side")
    parser.add_argument("--side", choices=("baseline", "cached"), help=argparse.SUPPRESS)  # one side's process
    args = parser.parse_args()
    if args.side:
        print(json.dumps(side(args.calls, args.side == "cached")))
        return
    found = {}
    for name in ("baseline", "cached"):
        out = subprocess.run(
            [sys.executable, __file__, "--calls", str(args.calls), "--side", name],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            check=True,
        )
        found[name] = json.loads(out.stdout.splitlines()[-1])["cpu_ms_per_call"]
        print(f"{name:9s} {found[name]:6.2f} ms of CPU per call ({args.calls} x 3 calls)")
    print(f"cached / baseline: x{found['cached'] / found['baseline']:.2f}")


if __name__ == "__main__":
    main()
