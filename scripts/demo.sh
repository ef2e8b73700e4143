#!/usr/bin/env bash
# The main job on the embedded default: plan a cluster from the built-in price snapshot.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEEPVM_HOME=${DEEPVM_HOME:-$PWD/.demo-home}
.venv/bin/deepvm plan --max-price 12 --offline --region all
