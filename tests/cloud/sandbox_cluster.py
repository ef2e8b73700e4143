"""One sandbox cluster for every end-to-end scenario of a module that fits its shape.

Booting a cluster (moto, namespaced sshd hosts, host keys through the console, IAM) and tearing it down cost
seconds of their own; a scenario pays them only when no cluster of its shape exists yet. A module holds its
cluster in a module-scoped fixture built on sandbox_cluster(), and each test takes that fixture. A scenario
that shares a cluster leaves it as it found it: it ends its job (the cluster runs one at a time), and a node it
lost is replaced or gone before it returns.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from provisioning.planner.plan import Plan
from tests.cloud.plans import write_plans
from tests.conftest import run_cli


@contextmanager
def sandbox_cluster(root: Path, name: str, plan: Plan, env: dict[str, str] | None = None) -> Iterator[dict[str, str]]:
    """`deepvm up` of `plan` in the sandbox as `name`, DEEPVM_HOME in `root`: yields the environment to run the
    CLI with (DEEPVM_HOME, and `env` on top); afterwards `down` (cancelling a job still running) and `sandbox
    stop`, whatever happened, so that nothing of it is left running; and when the scenarios went well, `down`
    must have gone well too."""
    env = {"DEEPVM_HOME": str(root / "home"), **(env or {})}
    plan_file = write_plans(root / f"{name}-plan.json", plan)
    up = run_cli(
        "up", "--yes", "--cloud", "sandbox", "--plan", str(plan_file), "--name", name, "--json", env=env, timeout=180
    )
    assert up.returncode == 0, up.stderr
    try:
        yield env
    finally:
        down = run_cli("down", name, "--yes", "--cancel-jobs", env=env, timeout=300)
        run_cli("sandbox", "stop", env=env, timeout=120)
    assert down.returncode == 0, down.stderr
