"""A job's own script run in-process by training.node.userscript, on a one-rank DeepCheck world (role "both" on
COMM_SELF) and a one-rank gloo group: the clean stop, the restore, and the contract's errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from mpi4py import MPI
from worker_jobs import free_port

import deepcheck
from training import job
from training.node.checkpointing import Checkpointer
from training.node.distenv import DistEnv
from training.node.trainercomm import TrainerComm
from training.node.userscript import NoStepTaken, ScriptExited, run_script
from training.shared.events import Notice
from training.shared.jobspec import load_job_spec

pytestmark = pytest.mark.filterwarnings("error:Converting a tensor with requires_grad")  # a loss tensor is read quietly

# counts to `steps` in a tensor; at the step given as its argument it gets SIGUSR1, as mpirun forwards the
# controller's clean stop to every rank
COUNTER = """\
import json, os, signal, sys
import torch, torch.distributed as dist
from training import job

ctx = job.attach()
dist.init_process_group(ctx.backend)
state = ctx.restore()
w = torch.zeros(3) if state is None else state["w"]
for step in range(ctx.start_step + 1, ctx.total_steps + 1):
    w += 1
    if step == int(sys.argv[1]):
        os.kill(os.getpid(), signal.SIGUSR1)
    if ctx.step(step, lambda: {"w": w}, loss=torch.tensor(float(step), requires_grad=True), samples=2):
        break
else:
    (ctx.out / "w.json").write_text(json.dumps(w.tolist()))
"""


class Rank:
    """One trainer-and-holder rank: DeepCheck, the trainer group, and the job directory."""

    def __init__(self, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.dir, self.out = tmp / "job", tmp / "out"
        self.dir.mkdir()
        port = free_port()
        for name, value in dict(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)).items():
            monkeypatch.setenv(name, value)
        self.env = DistEnv(0, 1, 0, 1, "127.0.0.1", port)
        self.ck = deepcheck.init(MPI.COMM_SELF, "both", directory=tmp / "ck", timeout=30)
        self.trainers = TrainerComm(MPI.COMM_SELF, [0])

    def run(self, script: str, args: str = "[]", steps: int | None = 6) -> None:
        """Run `script` under a spec of `steps` (None: `run.calls_step: false`, a script that takes none)."""
        (self.dir / "train.py").write_text(script)
        job_file = self.dir / "job.yaml"
        counted = f"steps: {steps}\n" if steps is not None else ""
        job_file.write_text(
            f"{counted}log_every: 2\ncheckpoint: {{every_steps: 4}}\n"
            f"run: {{script: train.py, args: {args}, calls_step: {str(steps is not None).lower()}}}\n"
        )
        spec = load_job_spec(job_file)
        checkpointer = Checkpointer(self.ck, spec.checkpoint_plan, self.trainers)
        run_script(spec, job_file, self.env, "cpu", 1, self.out, checkpointer, self.trainers)

    def close(self) -> None:
        if dist.is_initialized():  # a script that failed left its group
            dist.destroy_process_group()
        self.ck.close()
        self.trainers.free()


@pytest.fixture
def rank(tmp_path, monkeypatch):
    r = Rank(tmp_path, monkeypatch)
    yield r
    r.close()


def events(capsys: pytest.CaptureFixture[str], kind: str) -> list[dict]:
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    return [e for e in lines if e["event"] == kind or kind == "*"]


def test_clean_stop_flushes_that_step_and_the_next_run_continues_from_it(rank, capsys):
    rank.run(COUNTER, "[3]")
    seen = events(capsys, "*")
    assert [(e["event"], e.get("step")) for e in seen if e["event"] in ("flush", "saved")] == [("flush", 3)]
    assert next(e for e in seen if e["event"] == "flush")["reason"] == "stop"
    assert [e["step"] for e in seen if e["event"] == "step"] == [2, 3]  # every log_every steps, and the last
    assert [(e["status"], e["steps"]) for e in seen if e["event"] == "end"] == [("stopped", 3)]
    assert json.loads((rank.out / "metrics.json").read_text())["status"] == "stopped"

    rank.run(COUNTER, "[0]")
    seen = events(capsys, "*")
    (restored,) = [e for e in seen if e["event"] == "restored"]
    (start,) = [e for e in seen if e["event"] == "start"]
    assert restored["step"] == start["first_step"] == 3 and start["total_steps"] == 6
    assert [e["step"] for e in seen if e["event"] == "saved"] == [4]
    assert json.loads((rank.out / "w.json").read_text()) == [6.0, 6.0, 6.0]  # 3 restored + 3 more
    metrics = json.loads((rank.out / "metrics.json").read_text())
    assert (metrics["status"], metrics["first_step"], metrics["steps"]) == ("completed", 3, 6)
    assert metrics["loss_curve"] == [[4, 4.0], [6, 6.0]] and metrics["final_loss"] == 6.0


def test_a_rebalance_recommendation_flushes_at_the_next_step_and_training_goes_on(rank, capsys):
    """Issue 21 item 3, on the rank: the recommendation alone never ends the run; an interruption notice does."""
    checkpointer = Checkpointer(rank.ck, load_job_spec(_spec(rank.dir)).checkpoint_plan, rank.trainers)

    def tree() -> dict[str, torch.Tensor]:
        return {"w": torch.zeros(2)}

    checkpointer.noticed(Notice("rebalance", "{}", 1.0))
    assert [checkpointer.after_step(step, tree, None) for step in (1, 2, 3)] == [False, False, False]
    checkpointer.noticed(Notice("instance-action", "{}", 1.0))
    assert checkpointer.after_step(4, tree, None) is True
    flushes = [(e["step"], e["reason"]) for e in events(capsys, "flush")]
    assert flushes == [(1, "rebalance"), (4, "notice")]


def _spec(folder: Path) -> Path:
    job_file = folder / "job.yaml"
    job_file.write_text("steps: 6\ncheckpoint: {every_steps: 100}\nrun: {script: train.py}\n")
    (folder / "train.py").write_text("")
    return job_file


def test_without_restore_the_run_starts_at_its_first_step(rank, capsys):
    rank.run(COUNTER.replace("state = ctx.restore()", "state = None"), "[0]")
    (start,) = events(capsys, "start")
    assert start["first_step"] == 0
    assert json.loads((rank.out / "metrics.json").read_text())["steps"] == 6


def test_stepping_on_after_being_told_to_stop_is_an_error(rank):
    rank.ck.request_flush()  # a Spot notice: the first step flushes and says stop
    script = COUNTER.replace("        break\n", "        pass\n")
    with pytest.raises(RuntimeError, match=r"ctx.step\(\) returned True at step 1: the script must return then"):
        rank.run(script, "[0]")


def test_restore_after_the_first_step_is_an_error(rank):
    script = COUNTER.replace("    w += 1\n", "    w += 1\n    ctx.restore()\n")
    with pytest.raises(RuntimeError, match=r"ctx.restore\(\) is called once, before the first ctx.step\(\)"):
        rank.run(script, "[0]")


def test_exit_status_of_the_script(rank):
    rank.run("import sys\nsys.exit(0)\n", steps=None)  # a clean exit is a return
    with pytest.raises(ScriptExited, match=r"train\.py exited with 3"):
        rank.run("import sys\nsys.exit(3)\n")


NO_STEP = "from training import job\nctx = job.attach()\nctx.restore()\nprint('set up, then nothing')\n"


def test_a_script_that_never_calls_step_fails_the_job(rank):
    """Issue 23: it ended `completed: step 0/20`, exit 0. Now the rank fails before any End event calls the
    launch completed, and no metrics.json says it was."""
    with pytest.raises(
        NoStepTaken,
        match=r"^train\.py returned without calling ctx\.step\(\) \(at step 0 of 6\): "
        r".* or set run\.calls_step: false in the job spec",
    ):
        rank.run(NO_STEP)
    assert not (rank.out / "metrics.json").exists()


def test_a_script_whose_spec_says_it_takes_no_steps_completes(rank):
    rank.run(NO_STEP, steps=None)
    metrics = json.loads((rank.out / "metrics.json").read_text())
    assert (metrics["status"], metrics["steps"], metrics["total_steps"]) == ("completed", 0, 0)
    with pytest.raises(RuntimeError, match=r"run\.calls_step: false"):
        rank.run(NO_STEP + "ctx.step(1, dict, loss=0.0)\n", steps=None)


def test_the_script_runs_as_main_with_its_args_in_the_job_directory(rank):
    rank.run(
        "import json, os, sys\nfrom training import job\n"
        "out = job.attach().out\n(out / 'seen.json').write_text(json.dumps([__name__, sys.argv, os.getcwd()]))\n",
        "[--lr, 0.5]",
        steps=None,
    )
    name, argv, cwd = json.loads((rank.out / "seen.json").read_text())
    assert (name, argv, cwd) == ("__main__", [str(rank.dir / "train.py"), "--lr", "0.5"], str(rank.dir))


def test_attach_outside_deepvm_train():
    with pytest.raises(job.NotUnderDeepvm, match="not running under `deepvm train`"):
        job.attach()


def test_ctx_log_sends_trainer_0s_scalars_before_its_end(rank, capsys):
    logging = COUNTER.replace(
        "    if ctx.step(",
        "    ctx.log(step, loss=torch.tensor(step / 10, requires_grad=True), **{'eval/acc': 0.5})\n    if ctx.step(",
    )
    rank.run(logging, "[0]")
    seen = events(capsys, "*")
    points = [(e["step"], e["values"]) for e in seen if e["event"] == "metrics"]
    assert points == [(s, {"loss": pytest.approx(s / 10), "eval/acc": 0.5}) for s in range(1, 7)]
    assert seen[-1]["event"] == "end"  # every point left before it
