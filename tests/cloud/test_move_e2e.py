"""Issue 24's hardest rung on a real sandbox cluster: the live zone MOVE, with the head handing control over.

A managed (detached) job with level-l3 checkpoints runs on a Tiering cluster of one Spot trainer and one
on-demand holder (the head). Every Spot pool of the plan's zone is emptied (`deepvm sandbox capacity`); the
other zones keep theirs. A notice takes the trainer: the head's ladder buys like the plan, meets EC2's
InsufficientInstanceCapacity, tries the other Spot types the cap allows there, and, once the zone has refused
for as long as the move costs (provisioning/ladder/moves.py), moves: it buys the plan again in another zone, in
the subnet `up` recorded there, switches over, and hands control to the holder it bought there
(training/control/handover.py): the state travels over SSH, the job's supervisor starts there, and the old head
terminates. The new head's controller relaunches from the checkpoint in S3 and finishes the job. The user's
side finds the new head from the cloud (`status`, `logs -f` across the hand-over, `fetch`).

The price cap (CAP_USD) is the plan's price with room for the repairs' three cheapest other GPU types in the
old zone and for the plan bought again in the new one with the old head billing beside it until it goes: the
ladder's move counts that head (Situation.head). Minutes of both cores: `-m soak`; in CI the same path runs
in-process (tests/training/test_controller_market.py's move, test_controller_handover.py).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import replace
from pathlib import Path

import pytest

from tests.cloud.managed_rig import (
    SANDBOX_ONLY,
    cli,
    detached,
    down_leaves_nothing_running,
    job_state,
    module_cluster,
    run_on_head,
    sandbox_client,
    spot_trainer,
    wait_for,
    write_job,
)
from tests.cloud.plans import make_tiering_plan

pytestmark = SANDBOX_ONLY

STEPS = 80  # at the pace of 0.5 s a step: the notice lands long before the end, the new zone trains the rest
BUCKET = "move-e2e"
CAP_USD = 0.52  # see the module docstring: 2 c5.xlarge ($0.17/h) + a g4dn.xlarge Spot in the new zone fit


cluster = module_cluster("move-e2e", replace(make_tiering_plan(spot=1), price_cap=CAP_USD))


def _running(env: dict[str, str]) -> dict[str, dict]:
    nodes = json.loads(cli(env, "status", "mg", "--json").stdout)["nodes"]
    return {n["instance_id"]: n for n in nodes if n["state"] == "running"}


@pytest.mark.soak
@pytest.mark.timeout(900)
def test_a_zone_out_of_spot_moves_the_job_and_its_head_to_another_zone_through_s3(cluster):
    env, jobs = cluster
    old_zone = make_tiering_plan().availability_zone
    sandbox_client(env, "s3").create_bucket(Bucket=BUCKET)
    job = write_job(jobs, STEPS, "move", paced=True)
    job.write_text(job.read_text().replace("levels: [l1, l2]", f"levels: [l1, l2, l3], s3_prefix: s3://{BUCKET}/run"))
    (old_head,) = [i for i, n in _running(env).items() if n["role"] == "holder"]
    cli(env, "sandbox", "capacity", "--zone", old_zone, "--market", "spot", "--available", "0")
    started = time.monotonic()
    try:
        with detached(env, job) as job_id:
            wait_for(env, job_id, 3)
            cli(env, "interrupt", spot_trainer(env), "--after", "10")
            followed = cli(env, "logs", job_id, "-f", "--tail", "1", timeout=720).stderr  # across the hand-over
    finally:
        cli(env, "sandbox", "capacity", "--clear")
    took_s = time.monotonic() - started
    log, state = cli(env, "logs", job_id).stdout, job_state(env, job_id)
    assert f"job {job_id} completed" in followed, (followed[-2000:], log[-4000:])
    assert state["status"] == "completed" and state["step"] == STEPS and state["lost_steps"] == 0, state
    assert "InsufficientInstanceCapacity" in log, log[-4000:]
    move = re.search(r"^ladder: move: (\S+) instead of " + re.escape(old_zone), log, re.MULTILINE)
    assert move, log[-4000:]
    new_zone = move[1]
    assert f"took control from the previous head {old_head}, which is terminated" in log, log[-4000:]

    running = _running(env)  # read from the cloud: the nodes the heads bought are adopted by their tags
    assert old_head not in running and running, running
    assert {n["availability_zone"] for n in running.values()} == {new_zone}, running
    (new_head,) = [i for i, n in running.items() if n["role"] == "holder" and n["market"] == "on-demand"]
    job_file = json.loads(run_on_head(env, f"cat deepvm/managed/jobs/{job_id}/job.json"))  # the user finds it
    assert (job_file["head"], job_file["handed_from"]) == (new_head, old_head), job_file
    last = [line for line in log.splitlines() if line.startswith("attempt ")][-1]
    launched = {m for m in re.findall(r"\b(?:trainer|holder|anchor)-([0-9a-f]{8})\b", last)}
    assert launched and launched <= {i[2:10] for i in running}, (last, running)  # the last attempt: the new zone

    out = Path(env["DEEPVM_HOME"]) / "fetched"
    cli(env, "fetch", job_id, "--out", str(out))
    assert json.loads((out / "metrics.json").read_text())["steps"] == STEPS
    listed = sandbox_client(env, "s3").list_objects_v2(Bucket=BUCKET, Prefix="run/")
    assert any(o["Key"].endswith("manifest.json") for o in listed.get("Contents", []))
    print(f"move e2e: notice to job end {took_s:.0f} s, moved {old_zone} -> {new_zone}")
    down_leaves_nothing_running(env)
