# Everything a fresh Debian machine (as root) needs is installed by `scripts/setup.sh`, idempotently.
VENV := .venv
PY := $(VENV)/bin/python
DEEPVM := $(VENV)/bin/deepvm

.PHONY: setup demo test lint bench

setup:
	bash scripts/setup.sh

demo: setup
	bash scripts/demo.sh

test: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) -m pytest -q -n 3 --dist loadfile

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench: setup
	$(PY) benchmarks/plan_sweep.py
