#!/usr/bin/env bash
# Idempotent set-up of a fresh Debian machine (as root) for deepvm: system packages, a virtual
# environment, torch's CPU wheel first (so nothing pulls the CUDA build), then deepvm with its dev extras.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v mpirun >/dev/null 2>&1 || need_apt+=(openmpi-bin)
[[ -e /usr/include/x86_64-linux-gnu/openmpi ]] || [[ -n $(ls /usr/lib/*/openmpi/include/mpi.h 2>/dev/null) ]] || need_apt+=(libopenmpi-dev)
command -v sshd >/dev/null 2>&1 || [[ -x /usr/sbin/sshd ]] || need_apt+=(openssh-server)
command -v ip >/dev/null 2>&1 || need_apt+=(iproute2)
command -v unshare >/dev/null 2>&1 || need_apt+=(util-linux)
if ((${#need_apt[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "deepvm setup: missing system packages (${need_apt[*]}); install them as root" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  "$PY" -m venv .venv
fi
VPY=.venv/bin/python
"$VPY" -m pip install -q --upgrade pip >/dev/null
"$VPY" -c 'import torch' 2>/dev/null || "$VPY" -m pip install -q torch==2.13.0
stamp=.venv/.deepvm-installed
if [[ ! -f $stamp || pyproject.toml -nt $stamp ]]; then
  "$VPY" -m pip install -q -e '.[dev]'
  touch "$stamp"
fi
