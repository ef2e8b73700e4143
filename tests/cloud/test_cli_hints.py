"""Every "next" command that `up`, `down` and `status` print, run exactly as printed, does what it says; and
the cluster a command takes when none is named (the config file's, else the last one used) is always said,
and `down` never deletes one by default. Against the moto server over HTTP, in this process (a command
costs a fraction of a second, not a Python start); a question is answered through a stdin that is a
terminal (tests/cloud/test_up_confirm.py asks on a real pty)."""

from __future__ import annotations

import io
import json
import re
import shlex

import pytest

from deepvm_cli.main import main
from tests.cloud.cloud_state import left_of
from tests.cloud.plans import make_plan, write_plans
from tests.conftest import REPO

PRICE = "$0.9994/h"  # 1 on-demand + 3 spot g4dn.xlarge at the snapshot's us-east-1a prices
HINT = re.compile(r"`(deepvm [^`]+)`")


class Terminal(io.StringIO):
    """A stdin a person types `answer` into."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def deepvm(capsys, monkeypatch):
    """Run `deepvm ARGS` (answering `answer` on a terminal, if given): (exit code, stdout, stderr). The
    terminal is wide, so that no line is wrapped."""
    monkeypatch.setenv("COLUMNS", "500")

    def run(*args: str, answer: str | None = None) -> tuple[int, str, str]:
        if answer is not None:
            monkeypatch.setattr("sys.stdin", Terminal(answer))
        else:
            monkeypatch.setattr("sys.stdin", io.StringIO())
        capsys.readouterr()
        code = main(list(args))
        out, err = capsys.readouterr()
        return code, out, err

    return run


def _hints(text: str) -> list[list[str]]:
    """Every command quoted in `text`, as the argument lists after `deepvm`."""
    return [shlex.split(found)[1:] for found in HINT.findall(text)]


@pytest.fixture
def c1(ctx, ami, tmp_path, deepvm):
    """Cluster c1 (4 nodes) launched by `up`, twice: what each printed on stderr."""
    plan = write_plans(tmp_path / "plan.json", make_plan(spot=3, on_demand=1))
    args = ["up", "--yes", "--cloud", "aws", "--plan", str(plan), "--ami", ami, "--no-wait", "--name", "c1"]
    code, _, launched = deepvm(*args)
    assert code == 0, launched
    code, _, again = deepvm(*args)
    assert code == 0, again
    return launched, again


def test_up_and_down_print_commands_that_do_what_they_say_and_down_names_its_default(ctx, c1, deepvm):
    launched, again = c1
    assert launched.splitlines()[-1] == "next: `deepvm status c1`, and `deepvm down c1` when done"
    status, down = _hints(launched.splitlines()[-1])
    assert "cluster c1 is already up; nothing launched (`deepvm down c1` removes it)" in again
    assert _hints(again) == [down]

    code, shown, _ = deepvm(*status)
    assert code == 0 and shown.startswith("c1  up  aws  us-east-1a") and PRICE in shown

    code, _, refused = deepvm(*down)  # no terminal: it says how to confirm
    assert code == 2 and refused.splitlines() == [
        "deepvm: error: down would delete cluster c1; `deepvm down c1 --yes` confirms (no terminal to ask on)"
    ]
    (confirmed,) = _hints(refused)
    assert left_of(ctx, "c1"), "nothing may be deleted before a yes"

    # c1 is the last cluster used: `down` alone takes it, and says so in its question, naming what goes
    code, _, asked = deepvm("down", answer="n\n")
    assert code == 1, asked
    assert (
        f"Delete cluster c1 (the last one used; `deepvm down NAME` picks another): 4 nodes (3 spot + 1 on-demand), "
        f"{PRICE}, "
    ) in asked  # and its running jobs: moto's nodes have no SSH, so "unknown" here
    assert asked.rstrip().endswith("nothing deleted") and "error" not in asked
    code, _, refused = deepvm("down", "--yes")  # --yes asks nothing, so it never takes a default
    assert code == 2 and refused.splitlines() == [
        "deepvm: error: down --yes deletes without asking, so it needs the cluster's name: `deepvm down c1 --yes` "
        "deletes c1 (the last one used)"
    ]
    assert _hints(refused) == [confirmed] and left_of(ctx, "c1")

    code, _, deleted = deepvm(*confirmed)
    assert code == 0, deleted
    assert "cluster c1 is down" in deleted and left_of(ctx, "c1") == []
    code, _, after = deepvm("down")  # down forgot c1: the default is deepvm again, which does not exist
    assert code == 5 and "no cluster named 'deepvm'" in after


def test_down_checks_the_cluster_exists_before_asking_and_lists_those_that_do(ctx, c1, deepvm):
    code, _, err = deepvm("down", "ghost", answer="y\n")
    assert code == 5 and err.splitlines() == [
        "deepvm: error: no cluster named 'ghost': not in the local state, and nothing tagged with it in us-east-1; "
        "clusters: c1 (up)"
    ]
    assert left_of(ctx, "c1")


def test_status_without_clusters_says_how_to_start_one_and_up_does_it(moto, isolated_env, deepvm):
    _, _, bare = deepvm("status")
    assert bare.splitlines() == [
        "no clusters and no saved plan; `deepvm plan --max-price X` plans one for X USD/h, then `deepvm up`"
    ]
    plan, up = _hints(bare)
    code, _, err = deepvm(*[arg if arg != "X" else "0.7" for arg in plan], "--offline")  # X: the user's price
    assert code == 0, err
    _, _, saved = deepvm("status")
    assert saved.splitlines() == ["no clusters; `deepvm up` launches the saved plan (it shows it and asks first)"]
    assert _hints(saved) == [up]
    code, _, asked = deepvm(*up, "--cloud", "aws", answer="n\n")  # moto has no Deep Learning AMI: answer no
    assert code == 1, asked
    best = json.loads((isolated_env / "plan.json").read_text())["plans"][0]
    assert f"${best['price_per_hour']:.4f}/h in all" in asked and "? [y/N]" in asked


def test_the_config_file_cluster_comes_before_the_last_one_used(ctx, c1, isolated_env, deepvm):
    config = isolated_env / "config.yaml"
    config.write_text("cluster: c2\n")
    _, shown, _ = deepvm("status", "--json")
    assert [c["name"] for c in json.loads(shown)["clusters"]] == ["c1"]  # status lists every cluster
    code, _, err = deepvm("down", answer="y\n")
    assert code == 5 and err.splitlines() == [
        "deepvm: error: no cluster named 'c2': not in the local state, and nothing tagged with it in us-east-1; "
        "clusters: c1 (up)"
    ]
    code, _, err = deepvm("train", str(REPO / "configs" / "resnet.yaml"))
    assert code == 5 and err.splitlines() == [
        f"deepvm: error: no running cluster named 'c2' (from {config}; --cluster NAME picks another); clusters: "
        "c1 (up); start it with `deepvm up --name c2`"
    ]
    assert left_of(ctx, "c1")


def test_config_defaults_fill_flags_and_flags_win(isolated_env, deepvm):
    isolated_env.mkdir()
    (isolated_env / "config.yaml").write_text("max_price: 0.7\nregion: us-west-2\n")
    code, _, err = deepvm("plan", "--offline", "--node-limit", "3")
    assert code == 0 and f"max_price 0.7, region us-west-2 (from {isolated_env / 'config.yaml'})" in err
    saved = json.loads((isolated_env / "plan.json").read_text())
    assert saved["request"]["max_price"] == 0.7 and saved["plans"][0]["region"] == "us-west-2"
    code, _, err = deepvm("plan", "--offline", "--node-limit", "3", "--max-price", "3", "--region", "us-east-1")
    assert code == 0 and "config.yaml" not in err
    saved = json.loads((isolated_env / "plan.json").read_text())
    assert saved["request"]["max_price"] == 3 and saved["plans"][0]["region"] == "us-east-1"


def test_config_set_show_unset(isolated_env, deepvm):
    assert deepvm("config", "set", "max_price", "12")[0] == 0
    assert deepvm("config", "set", "cluster", "ux")[0] == 0
    assert (isolated_env / "config.yaml").read_text() == "max_price: 12.0\ncluster: ux\n"
    code, out, err = deepvm("config", "show")
    assert code == 0 and out.splitlines() == ["max_price: 12", "cluster: ux"]
    assert f"a command given no cluster takes ux (from {isolated_env / 'config.yaml'})" in err
    assert deepvm("config", "unset", "cluster")[0] == 0
    assert (isolated_env / "config.yaml").read_text() == "max_price: 12.0\n"


def test_up_names_a_new_cluster_not_the_last_one_used(ctx, c1, ami, tmp_path, deepvm):
    """c1 is up and the last one used; `up` without --name must not aim at it (it would launch nothing)."""
    plan = write_plans(tmp_path / "other.json", make_plan(spot=1, on_demand=1))
    code, _, err = deepvm("up", "--dry-run", "--cloud", "aws", "--plan", str(plan), "--ami", ami)
    assert code == 0, err
    assert "cluster deepvm (the default name; --name NAME picks another)" in err and "c1" not in err


def test_a_broken_config_file_never_stops_down_and_config_repairs_it(ctx, c1, isolated_env, deepvm):
    config = isolated_env / "config.yaml"
    config.write_text("regoin: us-west-2\n")
    code, _, err = deepvm("config", "show")
    assert code == 2 and "regoin: unknown key (did you mean region?)" in err
    code, _, err = deepvm("down", "ghost", "--yes")  # a teardown reads the file, warns, and goes on
    assert code == 5 and "the config file is ignored" in err and "no cluster named 'ghost'" in err
    assert deepvm("config", "unset", "regoin")[0] == 0 and config.read_text() == ""
    config.write_text("max_price: nope\n")
    code, _, err = deepvm("config", "set", "max_price", "3")
    assert code == 0, err
    assert config.read_text() == "max_price: 3.0\n"


def test_a_deadline_plan_is_not_capped_by_the_config_max_price(isolated_env, deepvm):
    isolated_env.mkdir()
    (isolated_env / "config.yaml").write_text("max_price: 0.7\n")
    code, _, err = deepvm("plan", "--offline", "--deadline", "10", "--work", "1000")
    assert code == 0, err
    assert "config.yaml" not in err
    assert json.loads((isolated_env / "plan.json").read_text())["plans"][0]["price_per_hour"] > 0.7
