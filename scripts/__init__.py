"""Scripts run from the repository root: `setup.sh` (the machine), `demo.sh` (the sandbox rehearsal) and
`python -m scripts.aws_smoke` (the real-account smoke test)."""
