"""`deepvm profile` without a cluster: the measuring spec, the rates of repeats, the sizes, every input
refused before anything runs (one line, exit >= 2), and a size's launch through the controller's attempt
session on the scripted cluster (tests/training/scripted_cluster.py). The sandbox run is in
tests/cloud/test_train_e2e.py."""

from __future__ import annotations

import json

import pytest
import yaml
from conftest import REPO, Cli

from provisioning.catalog.model import Market
from provisioning.cloud.types import CloudKind, CloudResources, NodeRecord
from provisioning.clusters.handle import Cluster
from provisioning.clusters.store import ClusterRow, ClusterStatus, Store
from provisioning.core.errors import InputError, NotFoundError
from provisioning.planner.plan import Role
from tests.cloud.plans import make_tiering_plan
from tests.training.scripted_cluster import Call, FakeCluster, Hang, ScriptedNodes, World, tiering_plan
from training.client.profiling import (
    DERIVED_SPEC,
    ProfileFailed,
    ProfileRequest,
    _SizeRun,
    default_sizes,
    derived_spec,
    profile_target,
    repeat_rates,
    spec_hash,
)
from training.control.launcher import Launch, cluster_node
from training.control.plan_facts import TypeFacts
from training.control.session import AttemptSession
from training.control.staging import JobPaths, JobToStage
from training.control.stall import StallWatch
from training.shared.events import EndStatus, Step
from training.shared.jobspec import JobSpec, load_job_spec
from training.shared.progress import JobReporter, Progress


def test_default_sizes_double_up_to_the_trainer_count():
    assert default_sizes(2) == (1, 2)
    assert default_sizes(3) == (1, 2, 3)
    assert default_sizes(8) == (1, 2, 4, 8)
    assert default_sizes(12) == (1, 2, 4, 8, 12)


def test_measuring_spec_reports_every_step_and_never_checkpoints():
    derived = JobSpec.model_validate(yaml.safe_load(derived_spec(REPO / "configs" / "resnet.yaml", 16)))
    own = load_job_spec(REPO / "configs" / "resnet.yaml")
    assert (derived.steps, derived.epochs, derived.log_every) == (16, None, 1)
    assert derived.checkpoint.every_steps == 17 and derived.checkpoint.every_seconds is None
    assert derived.checkpoint.levels == ["l1"]
    assert (
        derived.model_copy(update={"steps": own.steps, "log_every": own.log_every, "checkpoint": own.checkpoint}) == own
    )


def test_measuring_spec_of_an_epochs_job_and_of_an_own_script(tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("dataset: {kind: synthetic}\nepochs: 3\ncheckpoint: {every_seconds: 30, levels: [l1, l2]}\n")
    derived = JobSpec.model_validate(yaml.safe_load(derived_spec(job, 20)))
    assert (derived.steps, derived.epochs, derived.checkpoint.every_seconds) == (20, None, None)
    script = JobSpec.model_validate(yaml.safe_load(derived_spec(REPO / "configs" / "own-script.yaml", 9)))
    assert script.run is not None and script.steps == 9  # no worker field added beside `run:`


def test_spec_hash_names_the_job_not_its_file(tmp_path):
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("# mine\ndataset: {kind: synthetic}\nsteps: 5\n")
    b.write_text("steps: 5\ndataset:\n  kind: synthetic\n  samples: 4096\n")  # the default, written out
    assert spec_hash(load_job_spec(a)) == spec_hash(load_job_spec(b))
    a.write_text("dataset: {kind: synthetic}\nsteps: 6\n")
    assert spec_hash(load_job_spec(a)) != spec_hash(load_job_spec(b))


def test_repeat_rates_sum_each_trainers_harmonic_rate():
    """Trainer 0 does 3 steps at 10, 20, 20 samples/s of a 10-sample batch: 3 s for 30 samples, 10/s; the
    arithmetic mean (16.7/s) would be wrong."""
    reported = {
        0: {1: 99.0, 2: 10.0, 3: 20.0, 4: 20.0, 5: 5.0, 6: 5.0, 7: 5.0},
        1: {1: 1.0, 2: 10.0, 3: 20.0, 4: 20.0, 5: 10.0, 6: 10.0, 7: 10.0},
    }
    assert repeat_rates(reported, trainers=2, warmup=1, steps=3, repeats=2) == (30.0, 15.0)


def test_repeat_rates_refuse_missing_steps_and_scripts_without_samples():
    with pytest.raises(ProfileFailed, match="trainer 1 reported no progress for step 2"):
        repeat_rates({0: {1: 1.0, 2: 1.0}, 1: {1: 1.0}}, trainers=2, warmup=0, steps=2, repeats=1)
    with pytest.raises(ProfileFailed, match=r"must pass samples= to ctx\.step"):
        repeat_rates({0: {1: 0.0}}, trainers=1, warmup=0, steps=1, repeats=1)


def _cluster(status: ClusterStatus = ClusterStatus.UP) -> None:
    """A stored 3-trainer Tiering cluster (no cloud behind it: every check below comes before the cloud)."""
    store = Store()
    store.put_cluster(
        ClusterRow("lab", CloudKind.SANDBOX, status, make_tiering_plan(), "tok", CloudResources(), "root", "")
    )
    nodes = [
        NodeRecord(
            f"i-{i:08x}",
            "g4dn.xlarge",
            Market.SPOT,
            Role.TRAINER,
            "us-east-1a",
            "running",
            f"127.1.1.{i + 4}",
            None,
            0.15,
        )
        for i in range(3)
    ]
    nodes.append(
        NodeRecord(
            "i-000000ff", "c5.xlarge", Market.ON_DEMAND, Role.HOLDER, "us-east-1a", "running", "127.1.1.9", None, 0.17
        )
    )
    store.put_nodes("lab", nodes)


def profile_error(cli: Cli, *args: str) -> tuple[int, str]:
    result = cli("profile", str(REPO / "configs" / "resnet.yaml"), *args)
    assert result.stdout == ""
    return result.returncode, result.stderr


def test_sizes_above_the_trainer_count_and_a_cluster_that_is_down_are_one_line(cli):
    _cluster()
    assert profile_error(cli, "--cluster", "lab", "--sizes", "1,2,4") == (
        2,
        "deepvm: error: --sizes 4: cluster lab has 3 trainer nodes; sizes go up to 3\n",
    )
    Store().set_status("lab", ClusterStatus.TERMINATED)
    assert profile_error(cli, "--cluster", "lab") == (
        5,
        "deepvm: error: cluster lab is terminated, not up; `deepvm up --name lab` starts one\n",
    )


@pytest.mark.parametrize(
    "cluster, sizes, error, message",
    [
        ("lab", (2, 3), InputError, "--sizes must include 1 (speed-ups are over one node) and one more size at least"),
        ("lab", (1,), InputError, "--sizes must include 1 (speed-ups are over one node) and one more size at least"),
        ("lab", (0, 1, 2), InputError, "--sizes 0: sizes are trainer node counts from 1"),
        ("nope", None, NotFoundError, "no cluster named 'nope'; clusters: lab (up)"),
        ("bad name!", None, InputError, "cluster name 'bad name!' is not allowed"),
    ],
)
def test_what_profile_refuses_before_anything_runs(cluster, sizes, error, message):
    _cluster()
    request = ProfileRequest(REPO / "configs" / "resnet.yaml", cluster, "python3", sizes)
    with pytest.raises(error) as raised:
        profile_target(request, Cluster.open(cluster))  # the name's refusals are opening's, as the command's
    assert str(raised.value).startswith(message) and raised.value.exit_code >= 2


def test_bad_sizes_text_and_step_counts_are_usage_errors(cli):
    assert profile_error(cli, "--sizes", "1,two") == (
        2,
        "deepvm: error: --sizes must be comma-separated trainer node counts, e.g. 1,2,4; got '1,two'\n",
    )
    assert profile_error(cli, "--steps", "0") == (
        2,
        "deepvm: error: Invalid value for '--steps': Input should be greater than or equal to 1\n",
    )


def test_a_bad_job_file_is_one_line_before_the_cluster_is_asked(tmp_path, cli):
    job = tmp_path / "job.yaml"
    job.write_text("dataset: {kind: synthetic}\nsteps: 10\nmodle: {name: resnet18}\n")
    result = cli("profile", str(job), "--cluster", "nope")
    assert (result.returncode, result.stderr) == (
        2,
        f"deepvm: error: {job}:3: modle: unknown field; did you mean model?\n",
    )


def test_json_output_holds_the_profile_as_written(tmp_path):
    from deepvm_cli.commands.profile import profile_json
    from provisioning.scaling.profile import JobIdentity, Measured, Profile, ProfileSetup, make_profile, save_profile

    setup = ProfileSetup(
        "g4dn.xlarge",
        JobIdentity(name="j", spec_sha256="0" * 64, file="j.yaml"),
        "lab",
        2,
        8,
        1,
        "2026-11-23T13:52:25+00:00",
    )
    profile = make_profile(setup, [Measured(1, (10.0,)), Measured(2, (18.0,)), Measured(3, (24.0,))])
    save_profile(profile, tmp_path / "p.json")
    doc = json.loads(json.dumps(profile_json(profile, tmp_path / "p.json", None, 131.94, 0.02358)))
    assert doc["profile"] == json.loads((tmp_path / "p.json").read_text())
    assert Profile.model_validate(doc["profile"]) == profile
    assert (doc["saved_to"], doc["plot"], doc["wall_s"], doc["cost_usd"]) == (
        str(tmp_path / "p.json"),
        None,
        131.9,
        0.02358,
    )


class _Measuring:
    """What a size's listener asks of its profiler: where progress goes."""

    def __init__(self, report: JobReporter) -> None:
        self.report = report

    def progress(self, step: Step, trainers: int) -> Progress:
        return Progress(step.step, 10, 0, step.global_loss, step.samples_per_s * trainers, trainers, 0.0, True)


def _size_launch(tmp_path, stall: StallWatch, report: JobReporter = JobReporter()):
    """A launch of 2 trainer nodes and the holder on the scripted cluster, through the attempt session
    the controller uses (training/control/session.py)."""
    cluster = FakeCluster(tmp_path, tiering_plan())
    nodes = ScriptedNodes(cluster, World(total_steps=10, every=100))
    job = JobToStage(tmp_path, tmp_path, "p-1", (), {}, "python3", "ssh-ed25519 K")
    session = AttemptSession(nodes, job, tmp_path / "k", report, stall, ctrl_c_stops=False, tick_s=0.01)
    endpoints = cluster.endpoints()
    used = endpoints[:2] + endpoints[3:]  # two trainers and the holder
    chosen = [cluster_node(e, TypeFacts(65.0, 1 if e.role is Role.TRAINER else 0)) for e in used]
    launch = Launch.on(chosen, JobPaths("/home/u", "p-1"), DERIVED_SPEC, "python3", 2, {})
    size = _SizeRun(_Measuring(report), 2, launch.trainer_ranks)  # type: ignore[arg-type]
    return session, launch, size, nodes


def test_a_size_runs_through_the_attempt_session_and_every_trainer_is_measured(tmp_path):
    seen: list[int] = []
    session, launch, size, _ = _size_launch(tmp_path, StallWatch(), JobReporter(progress=lambda p: seen.append(p.step)))
    end = session.run(2, launch, size)
    assert end.returncode == 0 and size.ended == {0: EndStatus.COMPLETED, 1: EndStatus.COMPLETED}
    assert repeat_rates(size.rates, 2, warmup=4, steps=3, repeats=2) == (200.0, 200.0)  # 2 trainers x 100 samples/s
    assert seen == list(range(1, 11))  # trainer 0's progress, once a step


def test_a_size_that_hangs_fails_the_profile_and_stops_its_launch(tmp_path):
    session, launch, size, nodes = _size_launch(tmp_path, StallWatch(fixed_s=0.1))
    nodes.world.faults = [Hang(2, 3, node="i-t0000001")]
    with pytest.raises(
        ProfileFailed,
        match=r"^no progress for 0s \(limit 0s\) on 2 trainer nodes: a node hangs; "
        r"nothing was written$",
    ):
        session.run(2, launch, size)
    assert nodes.attempts[0].returncode == 137


def test_ctrl_c_during_a_size_stops_its_launch_and_ends_the_profile(tmp_path):
    def ctrl_c(p: Progress) -> None:
        if p.step == 3:
            raise KeyboardInterrupt

    session, launch, size, nodes = _size_launch(tmp_path, StallWatch(), JobReporter(progress=ctrl_c))
    nodes.world.faults = [Call(2, 3, hold=True)]  # the launch waits to be killed, however loaded the machine
    with pytest.raises(KeyboardInterrupt):
        session.run(2, launch, size)
    assert nodes.attempts[0].returncode == 137 and not nodes.attempts[0].stop_asked.is_set()
