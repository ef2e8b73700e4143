"""The head's controller reads checkpoints' files (deepcheck.manifest, deepcheck.storage_disk) but runs no MPI:
importing deepcheck's API loads libmpi and makes the importing process an MPI singleton (mpi4py initialises MPI
when mpi4py.MPI is imported), 0.3 s of CPU on every controller, supervisor and `deepvm train` start."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_heads_processes_and_the_cli_import_no_mpi_until_a_rank_asks_for_deepcheck_init():
    code = (
        "import sys; import deepcheck, training.head.job_service, training.head.job_supervisor, "
        "training.head.outputs, training.control.controller, deepvm_cli.main\n"
        "print('mpi4py.MPI' in sys.modules, end=' '); deepcheck.init; print('mpi4py.MPI' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert (out.returncode, out.stdout.strip()) == (0, "False True"), out.stderr
