#!/usr/bin/env bash
# The main job, rehearsed end to end in the sandbox (no AWS account, no charges):
#   deepvm plan -> deepvm up -> deepvm train configs/resnet.yaml --detach (the job's controller runs on
#   the cluster's on-demand head node) -> one spot trainer interrupted mid-run -> deepvm logs -f
#   reattaches and follows it to completion -> deepvm fetch -> deepvm status -> deepvm down.
# The plan is DeepVM's decision for a $0.70/h cap with at most 3 nodes per type: Tiering, 3 spot
# g4dn.xlarge trainers + 1 on-demand holder. In the sandbox every node is a local host (own PID and
# mount namespace, own sshd on a 127.x address, own instance metadata), so on a 2-core machine this
# takes a few minutes. Whatever happens, the cluster and the sandbox are torn down at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEEPVM_HOME=${DEEPVM_HOME:-$PWD/.demo-home}
DEEPVM=${DEEPVM:-.venv/bin/deepvm}
PY=${PY:-.venv/bin/python}
CLUSTER=rehearsal
INTERRUPT_AT_STEP=${INTERRUPT_AT_STEP:-20}

interrupter=""
cleanup() {
  [[ -n $interrupter ]] && kill "$interrupter" 2>/dev/null || true
  "$DEEPVM" down "$CLUSTER" --yes >/dev/null 2>&1 || true
  "$DEEPVM" sandbox stop >/dev/null 2>&1 || true
}
trap cleanup EXIT

# Once the job has passed INTERRUPT_AT_STEP, post a Spot interruption notice to one spot trainer;
# the sandbox terminates that instance 60 s later, as EC2 would after its two-minute notice.
interrupt_mid_run() {
  local node=""
  while [[ -z $node ]]; do
    sleep 2
    node=$("$DEEPVM" status "$CLUSTER" --json 2>/dev/null | "$PY" -c "
import json, sys
status = json.load(sys.stdin)
jobs = [j for j in status.get('jobs', []) if j['status'] == 'running']
spot = [n['instance_id'] for n in status['nodes'] if n['market'] == 'spot' and n['state'] == 'running']
print(spot[-1] if jobs and jobs[0]['step'] >= $INTERRUPT_AT_STEP and spot else '')
" 2>/dev/null || true)
  done
  echo "demo: interrupting spot trainer $node at step >= $INTERRUPT_AT_STEP" >&2
  "$DEEPVM" interrupt "$node" --after 60 >&2
}

started=$(date +%s)
"$DEEPVM" plan --offline --max-price 0.7 --node-limit 3 --region us-east-1
"$DEEPVM" up --yes --cloud sandbox --name "$CLUSTER"
interrupt_mid_run &
interrupter=$!
"$DEEPVM" train configs/resnet.yaml --cluster "$CLUSTER" --detach
job=$("$DEEPVM" jobs "$CLUSTER" --json | "$PY" -c "import json, sys; print(json.load(sys.stdin)[0]['job_id'])")
echo "demo: this machine runs nothing of job $job now; reattaching to it" >&2
"$DEEPVM" logs "$job" -f
"$DEEPVM" fetch "$job"
"$DEEPVM" status "$CLUSTER"
"$DEEPVM" down "$CLUSTER" --yes
"$DEEPVM" sandbox stop
echo "demo: rehearsal done in $(( $(date +%s) - started ))s" >&2
