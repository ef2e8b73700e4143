"""`python -m deepvm_cli` runs the same CLI as the `deepvm` console script."""

from deepvm_cli.main import run

run()
