"""Notice -> training again: a launched torchrun-style script (run.calls_step: false) against a ctx.step script
doing the same DDP work with the same state, in the same run (issue 36: goal, launched <= ctx.step + 2 s).

    python benchmarks/notice_to_training_bench.py [--runs 3] [--paths ctxstep launched] [--width 256]

Both paths run `python -m training.node.rank` under a local mpirun of trainer,trainer,holder, every rank a fork
of one warm server (training.node.warm), as on a node after its first launch (tests/training/worker_jobs.py),
watching a local IMDSv2 endpoint (tests/training/imds.py). Each script trains the same small MLP (WIDTH ->
4*WIDTH -> WIDTH, SGD with momentum: 4.2 MB of state at width 256) under DDP over gloo, STEP_S between steps:

- ctxstep: in the rank (training.node.userscript), `ctx.restore()` and `ctx.step(step, state)` with the model's
  and optimizer's state dicts as the tree, checkpointed every 10 steps; a notice flushes at the next step;
- launched: a child process with torchrun's environment (training.node.launched), which loads `snapshot.pt`
  when it exists and whose rank 0 torch.save's the same state there after every step (checkpoint.files), as
  pytorch/examples' ddp-tutorial-series scripts do; at a notice the rank sends SIGTERM (the script has no
  handler: it dies), flushes the snapshot, and the relaunch puts it back before the script starts. The
  snapshot is deleted between the launches: a replacement node has none, only the holders do.

A run: the first launch; at rank 0's step NOTICE_AT a notice is posted; then the relaunch, to the end of STEPS.
Measured (time.time(): one machine, one clock; events by their arrival on mpirun's stdout; the scripts print
their own phases):

(a) notice posted -> the first launch's mpirun exited (stopped, the checkpoint or files safe on the holder);
    its parts: posted -> a watcher saw it (the NoticeSeen's seen_at; training.node.watcher's POLL_S, both paths),
    seen -> the flush began (ctx.step: the next step; launched: the rank's tick, up to launched.TICK_S, and
    the SIGTERM'd script's exit), the flush (Flush / Kept "flushed" seconds), the flush -> mpirun exited;
(b) the relaunch's mpirun started -> training again (the first step of the relaunch done on every trainer);
    its parts: -> the script's first line (ctx.step: the rank's start-up; launched: that and DeepCheck's
    restore + putting the files back, then the child's start), its imports (torch: the warm server imported it
    for the ctx.step script, a launched script imports its own), init_process_group, building the model, DDP
    and the optimizer (DDP's first __init__ imports torch._dynamo: the warm server preloads it too), its restore
    (ctx.restore; torch.load) and load_state_dict, the first step.

--paths takes variants of the launched path too, for the suggestions' gains, without editing
training/node/launched.py: `launched+tick` (the ranks run with launched.TICK_S = 0.1: a rank set up by this
module, then training.node.rank's main), `launched+warm` (DEEPVM_PYTHON is a wrapper that starts the script as a
fork of the same warm server: torch imported before the script asks for it; caveat: the fork is not in the
ScriptProcess's session, so its open files are not seen by keptfiles.open_for_writing), `launched+tick+warm`.

A relaunch whose script cannot load the snapshot put back (a torn copy: the rank kept snapshot.pt while the script
was rewriting it) is reported with TORN and the run redone.

Runs on the CPUs of one machine (two cores here): one launch at a time, nothing left running. Open MPI as root
needs OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1, set here.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GOAL_S = 2.0
STEPS = 60
NOTICE_AT = 25  # rank 0's step of the first launch at which the notice is posted
STEP_S = 0.1  # each script's pause between two steps: a step's pace, the same for both
BATCH = 32
ROLES = "trainer,trainer,holder"
TRAINERS = 2
TICK_VARIANT_S = 0.1
TORN_RETRIES = 6
PATHS = ("ctxstep", "launched", "launched+tick", "launched+warm", "launched+tick+warm")

# the same model, data and step for both scripts; {mode}: "ctxstep" or "launched"
SCRIPT = """\
import json, os, sys, time
T_BEGIN = time.time()
import torch, torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
T_IMPORTED = time.time()
MODE = "{mode}"
steps, width, step_s, batch = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])


def say(**fields):  # one write a line
    sys.stdout.write("BENCH " + json.dumps(fields) + "\\n")
    sys.stdout.flush()


def main():
    if MODE == "ctxstep":
        from training import job

        ctx = job.attach()
        dist.init_process_group(ctx.backend)
    else:
        dist.init_process_group("gloo")
    rank = dist.get_rank()
    t_pg = time.time()
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(width, 4 * width), nn.ReLU(), nn.Linear(4 * width, width))
    model = DistributedDataParallel(net)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    t_built = time.time()

    def state():
        return {{"model": net.state_dict(), "optimizer": optimizer.state_dict()}}

    if MODE == "ctxstep":
        restored = ctx.restore()
        first = ctx.start_step + 1
    else:
        restored = torch.load("snapshot.pt") if os.path.exists("snapshot.pt") else None
        first = 1 if restored is None else restored["step"] + 1
    if restored is not None:
        net.load_state_dict(restored["model"])
        optimizer.load_state_dict(restored["optimizer"])
    say(rank=rank, what="phases", begin=T_BEGIN, imported=T_IMPORTED, pg=t_pg, built=t_built,
        restored=time.time(), first=first)
    for step in range(first, steps + 1):
        gen = torch.Generator().manual_seed(step * 1009 + rank)
        x = torch.randn(batch, width, generator=gen)
        loss = (model(x) - x).pow(2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if MODE == "ctxstep":
            leave = ctx.step(step, state, loss=loss, samples=batch)
        else:
            leave = False
            if rank == 0:
                torch.save({{**state(), "step": step}}, "snapshot.pt")
        if rank == 0 or step == first:
            say(rank=rank, what="step", step=step, t=time.time())
        if leave:
            return
        time.sleep(step_s)
    if MODE == "launched":
        dist.destroy_process_group()


main()
"""

JOBS = {
    "ctxstep": """\
name: notice-bench-ctxstep
seed: 0
steps: {steps}
log_every: 1
checkpoint: {{every_steps: 10, levels: [l1, l2]}}
run: {{script: train.py, args: {args}}}
""",
    "launched": """\
name: notice-bench-launched
run: {{script: train.py, calls_step: false, args: {args}}}
checkpoint: {{files: [snapshot.pt], levels: [l1, l2]}}
""",
}

# DEEPVM_PYTHON of `+warm`: the script as a fork of the node's warm server, through its own starter
WARM_PYTHON = """\
#!/bin/sh
exec {python} -m training.node.warm {warm} benchmarks.notice_to_training_bench --run-path "$@"
"""


class TornRestore(Exception):
    """The relaunched script could not load the snapshot the rank put back: a torn copy had been kept."""


@dataclass
class Launch:
    """One mpirun's output lines, each with its arrival time, and its start and exit times."""

    started: float
    exited: float = 0.0
    returncode: int = 0
    events: list[tuple[float, dict]] = field(default_factory=list)  # rank events (JSON lines)
    bench: list[tuple[float, dict]] = field(default_factory=list)  # the script's BENCH lines
    stderr: str = ""

    def of(self, kind: str) -> list[tuple[float, dict]]:
        return [(at, e) for at, e in self.events if e.get("event") == kind]

    def said(self, what: str) -> list[dict]:
        return [b for _, b in self.bench if b["what"] == what]


@dataclass(frozen=True)
class Run:
    """One notice and relaunch of one path; seconds."""

    stop_s: float  # (a) notice posted -> the first launch's mpirun exited
    start_s: float  # (b) relaunch's mpirun started -> its first step done on every trainer
    detect_s: float  # posted -> a watcher saw it
    to_flush_s: float  # seen -> the flush began
    flush_s: float  # the flush itself
    teardown_s: float  # flush done -> mpirun exited
    to_script_s: float  # relaunch -> the script's first line
    import_s: float  # the script's imports
    pg_s: float  # its init_process_group
    build_s: float  # the model, DDP (whose __init__ imports torch._dynamo the first time) and the optimizer
    restore_s: float  # its restore (ctx.restore; torch.load) and load_state_dict
    first_step_s: float  # restored -> first step done on every trainer
    rank_restore_s: float  # launched: the rank's DeepCheck restore + files put back (within to_script_s)
    lost_steps: int  # the last step before the stop - the step the relaunch resumed after

    @property
    def total_s(self) -> float:
        return self.stop_s + self.start_s


def mpi_env(extra: dict[str, str]) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        **extra,
    }


def launch(job: Path, url: str, warm: Path, path: str, on_line=None, timeout: float = 240.0) -> Launch:
    """One launch of the ranks (as tests/training/worker_jobs.launch_ranks, with the variant's module and
    environment), to its end; `on_line(at, bench)` is called with each of the script's BENCH lines."""
    from tests.training.worker_jobs import free_port, through

    module = (
        ["benchmarks.notice_to_training_bench", "--rank-tick", str(TICK_VARIANT_S), "--"]
        if "+tick" in path
        else ["training.node.rank"]
    )
    extra = {"AWS_EC2_METADATA_SERVICE_ENDPOINT": url}
    if "+warm" in path:
        extra["DEEPVM_PYTHON"] = str(job.parent / "warm-python")
    exported = [x for name in ("PYTHONPATH", *extra) for x in ("-x", name)]
    command = [
        "mpirun",
        "-np",
        str(len(ROLES.split(","))),
        "--oversubscribe",
        "--bind-to",
        "none",
        *exported,
        "-x",
        "OMP_NUM_THREADS=1",
        sys.executable,
        "-W",
        "ignore",
        "-m",
        *through(warm),
        *module,
        str(job),
        "--out",
        str(job.parent / "out"),
        "--checkpoint-dir",
        str(job.parent / "ckpt"),
        "--roles",
        ROLES,
        "--planned-trainers",
        str(TRAINERS),
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(free_port()),
    ]
    result = Launch(started=time.time())
    proc = subprocess.Popen(command, env=mpi_env(extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[tuple[float, str] | None] = queue.Queue()
    err: list[str] = []

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put((time.time(), line))
        lines.put(None)

    def waiter() -> None:
        proc.wait()
        result.exited = time.time()

    threads = [
        threading.Thread(target=pump, daemon=True),
        threading.Thread(target=waiter, daemon=True),
        threading.Thread(target=lambda: err.extend(proc.stderr or []), daemon=True),
    ]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    try:
        while (item := lines.get(timeout=max(0.1, deadline - time.monotonic()))) is not None:
            at, line = item
            if line.startswith("BENCH "):
                said = json.loads(line[6:])
                result.bench.append((at, said))
                if on_line is not None:
                    on_line(at, said)
            elif line.startswith("{"):
                with contextlib.suppress(json.JSONDecodeError):
                    result.events.append((at, json.loads(line)))
        threads[1].join(timeout=max(0.1, deadline - time.monotonic()))
    except queue.Empty:
        pass
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
            sys.exit(f"{path}: the launch did not end within {timeout:.0f} s: {''.join(err)[-3000:]}")
    threads[2].join(timeout=10)
    result.returncode, result.stderr = proc.returncode, "".join(err)
    if proc.returncode != 0 and "PytorchStreamReader failed" in result.stderr:
        raise TornRestore(result.stderr[-600:])
    if proc.returncode != 0:
        sys.exit(f"{path}: the launch failed ({proc.returncode}): {result.stderr[-3000:]}")
    return result


def run_once(path: str, work: Path, warm: Path, width: int) -> Run:
    """One notice and relaunch (see the module docstring)."""
    from tests.training.imds import clear_notices, imds_endpoint, post_notice

    mode = "ctxstep" if path == "ctxstep" else "launched"
    work.mkdir(parents=True)
    (work / "train.py").write_text(SCRIPT.format(mode=mode))
    args = json.dumps([str(STEPS), str(width), str(STEP_S), str(BATCH)])
    job = work / "job.yaml"
    job.write_text(JOBS[mode].format(steps=STEPS, args=args))
    if "+warm" in path:
        (work / "warm-python").write_text(WARM_PYTHON.format(python=sys.executable, warm=warm))
        (work / "warm-python").chmod(0o755)
    posted: list[float] = []
    with imds_endpoint(work) as url:

        def notice_at(at: float, said: dict) -> None:
            if said["what"] == "step" and said["rank"] == 0 and said["step"] == NOTICE_AT and not posted:
                posted.append(time.time())
                post_notice(work)

        first = launch(job, url, warm, path, notice_at)
        clear_notices(work)
        (work / "snapshot.pt").unlink(missing_ok=True)  # a replacement node has none: only the holders do
        time.sleep(0.1)
        second = launch(job, url, warm, path)
    if not posted:
        sys.exit(f"{path}: the first launch ended before step {NOTICE_AT}")
    return measure(path, first, second, posted[0])


def measure(path: str, first: Launch, second: Launch, posted: float) -> Run:
    ends = {e["status"] for _, e in first.of("end")}
    if ends != {"stopped"}:
        sys.exit(f"{path}: the first launch ended {ends}, not stopped")
    seen = min(e["seen_at"] for _, e in first.of("notice") if e.get("kind") == "instance-action")
    if path == "ctxstep":
        ((flush_at, flush),) = first.of("flush")
    else:
        ((flush_at, flush),) = [(at, e) for at, e in first.of("kept") if e["how"] == "flushed"]
    last_step = max(s["step"] for s in first.said("step") if s["rank"] == 0)
    phases = {p["rank"]: p for p in second.said("phases")}
    firsts = {s["rank"]: s for s in second.said("step") if s["step"] == phases[s["rank"]]["first"]}
    if sorted(phases) != list(range(TRAINERS)) or sorted(firsts) != sorted(phases):
        sys.exit(f"{path}: the relaunch's phases or first steps are missing: {second.bench[:6]}")
    trained = max(s["t"] for s in firsts.values())
    zero = phases[0]
    restored = [e for _, e in second.of("kept") if e["how"] == "restored"]
    return Run(
        stop_s=first.exited - posted,
        start_s=trained - second.started,
        detect_s=seen - posted,
        to_flush_s=flush_at - flush["seconds"] - seen,
        flush_s=flush["seconds"],
        teardown_s=first.exited - flush_at,
        to_script_s=zero["begin"] - second.started,
        import_s=zero["imported"] - zero["begin"],
        pg_s=zero["pg"] - zero["imported"],
        build_s=zero["built"] - zero["pg"],
        restore_s=zero["restored"] - zero["built"],
        first_step_s=trained - zero["restored"],
        rank_restore_s=restored[0]["seconds"] if restored else 0.0,
        lost_steps=last_step - (zero["first"] - 1),
    )


def line_of(path: str, i: int, r: Run) -> str:
    return (
        f"[{path}] run {i}: total {r.total_s:.2f} s = (a) {r.stop_s:.2f} [detect {r.detect_s:.2f}, "
        f"to flush {r.to_flush_s:.2f}, flush {r.flush_s:.2f}, teardown {r.teardown_s:.2f}] + (b) "
        f"{r.start_s:.2f} [to script {r.to_script_s:.2f} (rank restore {r.rank_restore_s:.2f}), import "
        f"{r.import_s:.2f}, init_process_group {r.pg_s:.2f}, model+DDP {r.build_s:.2f}, restore "
        f"{r.restore_s:.2f}, first step {r.first_step_s:.2f}]; steps lost {r.lost_steps}"
    )


def summary(path: str, runs: list[Run]) -> dict[str, tuple[float, float]]:
    out = {}
    for name in (
        "stop_s",
        "start_s",
        "total_s",
        "detect_s",
        "to_flush_s",
        "flush_s",
        "teardown_s",
        "to_script_s",
        "import_s",
        "pg_s",
        "build_s",
        "restore_s",
        "first_step_s",
    ):
        values = [getattr(r, name) for r in runs]
        out[name] = (min(values), statistics.median(values))
    shown = ", ".join(f"{k[:-2]} {lo:.2f}/{med:.2f}" for k, (lo, med) in out.items())
    print(f"[{path}] min/median s: {shown}")
    return out


def rank_with_tick(tick: float, argv: list[str]) -> int:
    """A trainer rank as training.node.rank's, with training.node.launched.TICK_S = tick (`launched+tick`)."""
    from training.node import launched, rank

    launched.TICK_S = tick
    return rank.main(argv)


def run_path(argv: list[str]) -> None:
    """`python SCRIPT ARGS` in a fork of the warm server (`launched+warm`'s DEEPVM_PYTHON)."""
    import runpy

    script = str(Path(argv[0]).resolve())
    sys.argv = [script, *argv[1:]]
    sys.path.insert(0, str(Path(script).parent))
    runpy.run_path(script, run_name="__main__")


def run_all(args: argparse.Namespace, results: dict[str, list[Run]], tmp: Path, warm: Path) -> dict[str, int]:
    """Every path's runs, interleaved (the machine's load drifts over a run); a run whose relaunch found a torn
    snapshot is counted and redone (at most TORN_RETRIES times in all); the counts by path."""
    torn = dict.fromkeys(args.paths, 0)
    for i in range(args.runs):
        for path in args.paths:
            while True:
                try:
                    r = run_once(path, tmp / f"{path}-{i}-{torn[path]}", warm, args.width)
                    break
                except TornRestore as exc:
                    torn[path] += 1
                    print(f"[{path}] run {i}: the relaunch found a torn snapshot.pt, redone: {exc}", flush=True)
                    if sum(torn.values()) > TORN_RETRIES:
                        sys.exit("too many torn snapshots")
            results[path].append(r)
            print(line_of(path, i, r), flush=True)
    return torn


def main() -> None:
    if sys.argv[1:2] == ["--rank-tick"]:
        sys.exit(rank_with_tick(float(sys.argv[2]), sys.argv[4:]))
    if sys.argv[1:2] == ["--run-path"]:
        run_path(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--paths", nargs="+", default=["ctxstep", "launched"], choices=PATHS)
    parser.add_argument("--width", type=int, default=256, help="the MLP's width (state: 2 x 8 x width^2 bytes)")
    args = parser.parse_args()
    if shutil.which("mpirun") is None:
        sys.exit("needs Open MPI's mpirun")
    sys.path.insert(0, str(REPO))
    from tests.training.worker_jobs import warm_server

    state_mb = 2 * 4 * (2 * 4 * args.width**2 + 5 * args.width) / 1e6
    print(
        f"roles {ROLES}, MLP width {args.width} (state {state_mb:.1f} MB), {STEPS} steps, notice at step "
        f"{NOTICE_AT}, {args.runs} runs a path, interleaved"
    )
    results: dict[str, list[Run]] = {p: [] for p in args.paths}
    with tempfile.TemporaryDirectory(prefix="notice-bench-") as tmp:
        (Path(tmp) / "warm").mkdir()
        with warm_server(Path(tmp) / "warm") as warm:
            torn = run_all(args, results, Path(tmp), warm)
    stats = {p: summary(p, runs) for p, runs in results.items()}
    for path, count in torn.items():
        if count:
            print(
                f"TORN [{path}] {count} relaunch(es) found a torn snapshot.pt put back (redone): a copy kept while "
                "the script was rewriting it (training.node.keptfiles)"
            )
    if "ctxstep" not in stats:
        return
    base = stats["ctxstep"]["total_s"]
    for path in (p for p in args.paths if p != "ctxstep"):
        lo, med = stats[path]["total_s"]
        verdict = "met" if med - base[1] <= GOAL_S else "NOT met"
        print(
            f"RESULT {path} - ctxstep: min {lo - base[0]:+.2f} s, median {med - base[1]:+.2f} s "
            f"(total median {med:.2f} vs {base[1]:.2f}; goal <= +{GOAL_S:.0f} s: {verdict})"
        )


if __name__ == "__main__":
    main()
