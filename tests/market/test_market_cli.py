"""`deepvm market` as a user runs it (in this process: the `cli` fixture): JSON on stdout, one error line on
stderr."""

import json
import socket

import pytest
from conftest import DATA, Cli, run_cli
from moto.server import ThreadedMotoServer

from provisioning.catalog.snapshot import load_snapshot, snapshot_age

SNAPSHOT_DATE = load_snapshot().as_of
AGE = snapshot_age(SNAPSHOT_DATE)


def _json(cli: Cli, *args, env=None):
    result = cli("market", *args, "--json", env=env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout), result.stderr


def test_offline_json_is_the_snapshot_with_flopp(cli):
    document, _ = _json(cli, "--offline", "--region", "us-east-1")
    assert (document["source"], document["as_of"]) == ("snapshot", SNAPSHOT_DATE)
    assert any("ESTIMATES" in note for note in document["notes"])
    rows = {row["instance_type"]: row for row in document["instance_types"]}
    g4dn = rows["g4dn.xlarge"]
    cheapest = min(g4dn["spot_usd_per_hour"].values())
    assert g4dn["cheapest_spot"]["usd_per_hour"] == cheapest
    assert g4dn["flopp_spot"] == pytest.approx(65.0 / cheapest * 3600)
    assert g4dn["flopp_on_demand"] == pytest.approx(65.0 / 0.526 * 3600)
    assert g4dn["quota_vcpus"] == {"on-demand": 256.0, "spot": 512.0}
    assert rows["c5.xlarge"]["flopp_spot"] is None  # holders are listed, without FLOPP
    gpu_rows = [r for r in document["instance_types"] if r["gpu_count"]]
    assert [r["flopp_spot"] for r in gpu_rows] == sorted((r["flopp_spot"] for r in gpu_rows), reverse=True)


def test_gpu_filter_and_alias(cli):
    document, _ = _json(cli, "--offline", "--region", "all", "--gpu", "a100")
    assert {(r["instance_type"], r["gpu_model"]) for r in document["instance_types"]} == {("p4d.24xlarge", "A100-40GB")}
    assert len(document["instance_types"]) == 4
    result = cli("catalog", "--offline", "--gpu", "T4", "--json")
    assert result.returncode == 0
    assert {r["gpu_model"] for r in json.loads(result.stdout)["instance_types"]} == {"T4"}


def test_deepvm_catalog_file(cli):
    document, _ = _json(cli, "--catalog", str(DATA / "deepvm_data.json"))
    rows = {row["instance_type"]: row for row in document["instance_types"]}
    assert len(rows) == 11 and document["source"].endswith("deepvm_data.json")
    g4dn = rows["g4dn.xlarge"]
    assert g4dn["region"] == "deepvm" and g4dn["spot_usd_per_hour"] == {"deepvm-a": 0.1578}
    assert g4dn["flopp_spot"] == pytest.approx(377 / 0.1578 * 3600)
    assert g4dn["quota_group"] == "G" and g4dn["quota_vcpus"] == {"on-demand": 32.0, "spot": 128.0}


def test_human_view_names_the_snapshot_and_its_date(cli):
    result = cli("market", "--offline", "--holders")
    assert result.returncode == 0, result.stderr
    title = f"GPU instance types in us-east-1 — the built-in price snapshot of {SNAPSHOT_DATE}"
    assert title in result.stdout
    assert "CPU checkpoint holders in us-east-1" in result.stdout
    assert "vCPU quotas on-demand/spot: G and VT 256/512, P 192/192, P5 spot 192, Standard 640/640" in result.stdout
    assert f"prices: the built-in price snapshot of {SNAPSHOT_DATE}" in result.stderr


def test_no_credentials_warns_on_stderr_and_uses_the_snapshot(tmp_path, cli):
    env = {
        "AWS_ACCESS_KEY_ID": "",
        "AWS_SECRET_ACCESS_KEY": "",
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
    }
    document, stderr = _json(cli, env=env)
    assert document["source"] == "snapshot"
    message = (
        f"no AWS credentials found; using the built-in price snapshot of {SNAPSHOT_DATE} ({AGE}); for live "
        "prices set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE (as for the AWS CLI)"
    )
    assert document["warnings"] == [message]
    assert f"warning: {message}" in " ".join(stderr.split())  # two lines at 120 columns


@pytest.fixture(scope="module")
def moto_server():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


def test_moto_server_without_a_pricing_api_falls_back_with_the_reason(moto_server):
    """EC2 answers over HTTP; the Pricing API does not exist on moto, which counts as AWS unavailable. (A process of
    its own: the moto server in this process prints to this process's stdout, where the JSON document goes.)"""
    result = run_cli("market", "--region", "us-east-1", "--json", env={"AWS_ENDPOINT_URL": moto_server})
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["source"] == "snapshot"
    assert document["warnings"] == [
        "AWS failed to return on-demand prices in us-east-1 (HTTP 500); "
        f"using the built-in price snapshot of {SNAPSHOT_DATE} ({AGE})"
    ]


@pytest.mark.parametrize(
    ("args", "line", "code"),
    [
        (
            ["--offline", "--region", "us-est-1"],
            f"deepvm: error: unknown region 'us-est-1' (did you mean us-east-1?); the built-in price snapshot of "
            f"{SNAPSHOT_DATE} has eu-west-1, us-east-1, us-east-2, us-west-2",
            2,
        ),
        (
            ["--offline", "--gpu", "T5"],
            "deepvm: error: no GPU model 'T5' in the catalog (did you mean T4?); its GPU models: A100-40GB, A10G, "
            "H100, L4, L40S, T4, V100",
            2,
        ),
        (["--catalog", "MISSING"], "deepvm: error: catalog file not found: MISSING", 2),
    ],
)
def test_bad_input_is_one_line(args, line, code, tmp_path, cli):
    args = [a.replace("MISSING", str(tmp_path / "missing.json")) for a in args]
    result = cli("market", *args)
    assert result.returncode == code
    assert result.stderr == line.replace("MISSING", str(tmp_path / "missing.json")) + "\n"
    assert result.stdout == ""


def test_bad_catalog_files_are_one_line(tmp_path, cli):
    malformed = tmp_path / "malformed.json"
    malformed.write_text('{"instances": [}')
    cpu_only = tmp_path / "cpu.json"
    data = json.loads((DATA / "deepvm_data.json").read_text())
    data["instances"] = [i for i in data["instances"] if i["type"] != "G"]
    cpu_only.write_text(json.dumps(data))
    for path, message in (
        (malformed, f"{malformed} is not valid JSON: Expecting value at line 1, column 16"),
        (cpu_only, f"{cpu_only} has no GPU instance types (DeepVM's format marks them with type G or P)"),
    ):
        result = cli("market", "--catalog", str(path))
        assert (result.returncode, result.stderr) == (2, f"deepvm: error: {message}\n")
        assert "Traceback" not in result.stderr


def test_save_snapshot_without_credentials_is_one_line(tmp_path, cli):
    env = {
        "AWS_ACCESS_KEY_ID": "",
        "AWS_SECRET_ACCESS_KEY": "",
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
    }
    result = cli("market", "--save-snapshot", str(tmp_path / "s.json"), env=env)
    assert (result.returncode, result.stderr) == (
        4,
        "deepvm: error: cannot save a snapshot without live AWS data: no AWS credentials found\n",
    )
    assert not (tmp_path / "s.json").exists()


@pytest.mark.parametrize("columns", ["80", "120"])
def test_human_view_cuts_no_price_or_type_name(columns, cli):
    env = {"COLUMNS": columns, "NO_COLOR": "1"}
    doc = json.loads(cli("market", "--offline", "--region", "all", "--json", env=env).stdout)
    result = cli("market", "--offline", "--region", "all", "--holders", env=env)
    assert result.returncode == 0, result.stderr
    assert "…" not in result.stdout
    assert max(len(line) for line in result.stdout.splitlines()) <= int(columns)
    section: dict[str, list[str]] = {}  # region -> the lines of its GPU table
    region = ""
    for line in result.stdout.splitlines():
        if line.startswith("GPU instance types in "):
            region = line.split()[4]
        elif line.startswith("CPU checkpoint holders"):
            region = ""
        elif region:
            section.setdefault(region, []).append(line)
    for row in doc["instance_types"]:  # the row of each GPU type in its region shows both prices whole
        if row["gpu_count"]:
            line = next(x for x in section[row["region"]] if x.split()[:1] == [row["instance_type"]])
            assert f"{row['on_demand_usd_per_hour']:.4f}" in line
            assert f"{row['cheapest_spot']['usd_per_hour']:.4f}" in line
