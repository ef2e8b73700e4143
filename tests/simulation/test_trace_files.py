"""The trace data layer: the shipped traces as the datasets' README counts them, a user's file in each of
the three formats told apart by its content, and every bad file refused with one line naming it."""

from __future__ import annotations

import json
import math
import os
from importlib import resources

import numpy as np
import pytest

from simulation.trace import TraceKind
from simulation.traces import (
    MAX_TRACE_BYTES,
    TraceError,
    interruptions_trace,
    known_traces,
    read_trace_file,
    resolve_trace,
)
from simulation.traces.lifetimes_csv import CENSOR_AT_H

GCE_COUNTS = {"gce-k80": 64, "gce-p100": 40, "gce-v100": 48}


@pytest.mark.parametrize(("name", "vms"), sorted(GCE_COUNTS.items()))
def test_gce_sections_hold_the_february_2019_vms(name, vms):
    trace = resolve_trace(name)
    assert trace.kind is TraceKind.LIFETIMES
    assert len(trace.lifetimes_h) == vms
    # censored exactly where GCE's 24 h cap ended the observation
    assert all(c == (h >= CENSOR_AT_H) for h, c in zip(trace.lifetimes_h, trace.censored))
    assert 0 < trace.censored.count(False) < vms  # both preemptions and capped VMs
    assert max(trace.lifetimes_h) < 25  # the 2018 clock-time rows below "Previous experiments" are not read


def test_gce_is_all_three_sections_and_its_mttf_counts_censored_time():
    whole = resolve_trace("gce")
    assert len(whole.lifetimes_h) == sum(GCE_COUNTS.values()) == 152
    preempted = whole.censored.count(False)
    assert preempted == 33
    assert whole.mean_lifetime_h() == pytest.approx(sum(whole.lifetimes_h) / preempted)


@pytest.mark.parametrize(("name", "events", "nodes"), [("aws-g4dn-bamboo", 153, 79), ("aws-p3-bamboo", 344, 177)])
def test_bamboo_events_become_one_lifetime_per_up_interval(name, events, nodes):
    """The shared README says 152 and 343 events; the files hold one row more each (counted here)."""
    trace = resolve_trace(name)
    assert trace.kind is TraceKind.EVENTS and trace.capacity is None
    removes = trace.censored.count(False)
    adds = len(trace.lifetimes_h)
    assert adds == nodes and adds + removes == events
    assert f"{events} events" in trace.notes[0]
    assert 1.0 < trace.mean_lifetime_h() < 3.0  # Spot nodes of those clusters lived hours, not days


@pytest.mark.parametrize(
    ("name", "request_size", "hours"),
    [
        ("aws-v100-16-us-east-2b", 16, 270.6),
        ("aws-v100-16-us-west-2a", 16, 394.7),
        ("aws-v100-16-us-west-2c", 16, 394.7),
        ("aws-v100-4-us-east-1f", 4, 305.3),
        ("aws-v100-4-us-east-2a", 4, 427.6),
        ("aws-v100-4-us-west-2c", 4, 427.6),
    ],
)
def test_capacity_series_are_shares_of_their_request(name, request_size, hours):
    trace = resolve_trace(name)
    series = trace.capacity
    assert trace.drives_by == "capacity" and series is not None
    assert series.request == request_size and series.step_h == pytest.approx(300 / 3600)
    assert series.horizon_h == pytest.approx(hours, abs=0.05)
    shares = series.as_array()
    assert shares.min() == 0.0 and shares.max() == 1.0  # 0 = no capacity at all, 1 = the whole request
    assert np.allclose(shares * request_size, np.round(shares * request_size))
    assert math.isfinite(trace.mean_lifetime_h())


def test_every_shipped_name_loads_from_the_package_data():
    names = known_traces()
    assert names == sorted(names) and len(names) == 12
    for name in names:
        assert resolve_trace(name).name == name
    licences = resources.files("simulation").joinpath("data/traces/licenses")
    assert {p.name for p in licences.iterdir()} >= {
        "bamboo-MIT.txt",
        "skynomad-NOTICE.txt",
        "transient-deep-learning-APACHE-2.0.txt",
    }
    assert "Apache-2.0" in resources.files("simulation").joinpath("data/traces/README.md").read_text()


LIFETIMES = "P100,,\nVM name,Start,Terminate\nvm-0,2/19/19 22:53,2/20/19 23:01\nvm-1,2/19/19 22:53,2/20/19 09:50\n"
EVENTS = "0,add,node1\r\n0,add,node2\r\n3600000,remove,node1\r\n7200000,add,node1\r\n"
CAPACITY = json.dumps({"metadata": {"gap_seconds": 600}, "data": [3, 3, 1, 0, 2]})


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        (LIFETIMES, TraceKind.LIFETIMES),
        ("vm-0,2/19/19 22:53,2/20/19 09:50\n", TraceKind.LIFETIMES),
        (EVENTS, TraceKind.EVENTS),
        ("time_ms,event,node\n" + EVENTS, TraceKind.EVENTS),
        ("\n  " + CAPACITY, TraceKind.CAPACITY),
    ],
)
def test_a_users_file_is_told_apart_by_content_not_by_extension(tmp_path, text, kind):
    path = tmp_path / "trace.dat"  # the extension says nothing
    path.write_text(text)
    assert read_trace_file(path).kind is kind
    assert resolve_trace(str(path)).kind is kind


def test_a_users_files_are_normalised(tmp_path):
    lifetimes = tmp_path / "l.csv"
    lifetimes.write_text(LIFETIMES)
    trace = read_trace_file(lifetimes)
    assert trace.lifetimes_h == pytest.approx((24 + 8 / 60, 10 + 57 / 60))
    assert trace.censored == (True, False)

    events = tmp_path / "e.csv"
    events.write_text(EVENTS)
    trace = read_trace_file(events)
    # node1: up 1 h then removed; node2: up to the last event (2 h), censored; node1 again: 0 h, censored
    assert sorted(zip(trace.lifetimes_h, trace.censored)) == [(0.0, True), (1.0, False), (2.0, True)]

    capacity = tmp_path / "c.json"
    capacity.write_text(CAPACITY)
    trace = read_trace_file(capacity)
    assert trace.capacity.request == 3  # no metadata.request: the most ever running
    assert trace.capacity.shares == pytest.approx((1, 1, 1 / 3, 0, 2 / 3))
    assert trace.capacity.step_h == pytest.approx(1 / 6)
    capacity.write_text(json.dumps({"metadata": {"gap_seconds": 600, "request": 4}, "data": [3, 0]}))
    assert read_trace_file(capacity).capacity.shares == (0.75, 0.0)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "is empty"),
        ("hello,world\n", "not a trace deepvm reads"),
        (LIFETIMES + "vm-2,2/19/19 25:00,2/20/19 09:50\n", ":5: Start '2/19/19 25:00' is not a time"),
        (LIFETIMES + "vm-2,2/20/19 09:50,2/19/19 09:50\n", ":5: Terminate '2/19/19 09:50' is before Start"),
        ("K80,,\nVM name,Start,Terminate\n", "no lifetimes"),
        (EVENTS + "7200000,leave,node2\n", ":5: event 'leave' is neither add nor remove"),
        (EVENTS + "-5,remove,node2\n", ":5: time_ms '-5' is not a whole number of milliseconds"),
        (EVENTS + "5,remove,node2\n", ":5: time_ms 5 is earlier than the previous event"),
        (EVENTS + "7200000,remove,node9\n", ":5: node 'node9' is removed but was never added"),
        (EVENTS + "7200000,add,node2\n", ":5: node 'node2' is added again"),
        ("0,add,node1,extra\n", ":1: expected 3 fields"),
        ('{"metadata": {"gap_seconds": 300}, "data": [1, -2]}', "data[1] must be a whole number of instances >= 0"),
        ('{"metadata": {"gap_seconds": 300}, "data": [1, 2.5]}', "data[1] must be a whole number"),
        ('{"metadata": {"gap_seconds": 0}, "data": [1]}', "metadata.gap_seconds must be a positive number"),
        ('{"data": [1]}', "missing object 'metadata'"),
        ('{"metadata": {"gap_seconds": 300}, "data": []}', "'data' must be a non-empty list"),
        ('{"metadata": {"gap_seconds": 300}, "data": [0, 0]}', "the request size is unknown"),
        ('{"metadata": {"gap_seconds": 300, "request": 2}, "data": [3]}', "more than the request of 2"),
        ('{"metadata": {"gap_seconds": 300}, "data": [1, 2', "is not valid JSON"),
        ("K80,,\n" + "x" * 200_000 + ",a,b\n", ":2: not CSV: field larger than field limit"),
    ],
)
def test_a_bad_file_is_one_line_naming_it(tmp_path, text, needle):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(TraceError) as caught:
        read_trace_file(path)
    message = str(caught.value)
    assert needle in message and "\n" not in message
    assert str(path) in message


def test_unreadable_things_are_refused_before_reading(tmp_path):
    big = tmp_path / "big.csv"
    with open(big, "wb") as handle:  # sparse: no 50 MB written
        handle.truncate(MAX_TRACE_BYTES + 1)
    for path, needle in (
        (big, "larger than 50 MiB"),
        (tmp_path, "is a directory"),
        ("/dev/zero", "not a regular file"),
        (tmp_path / "none.csv", "trace file not found"),
    ):
        with pytest.raises(TraceError, match=needle):
            resolve_trace(str(path))
    binary = tmp_path / "b.bin"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(TraceError, match="is not UTF-8 text"):
        read_trace_file(binary)


def test_unknown_names_suggest_the_closest(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TraceError, match=r"unknown trace 'gce-v10'; did you mean gce-v100\?.*aws-p3-bamboo"):
        resolve_trace("gce-v10")
    with pytest.raises(TraceError, match="or a file, a band"):
        interruptions_trace("nope")
    with pytest.raises(TraceError, match="trace file not found: traces/x"):
        resolve_trace("traces/x")
    os.mkdir("gce")  # a shipped name wins over a file of the same name
    assert resolve_trace("gce").kind is TraceKind.LIFETIMES


def test_lifetimes_take_iso_8601_times(tmp_path):
    """Issue 23 point 10: only M/D/YY H:MM was read; ISO 8601 is what most logs write."""
    path = tmp_path / "iso.csv"
    path.write_text(
        "vm-a,2019-02-18T23:39,2019-02-19T01:09:30\n"
        "vm-b,2019-02-18 23:39:00+01:00,2019-02-18T23:00:00Z\n"  # offsets: compared in UTC
        "vm-c,2/18/19 23:39,2019-02-19T23:44\n"
    )
    trace = read_trace_file(path)
    assert trace.kind is TraceKind.LIFETIMES
    assert trace.lifetimes_h == pytest.approx((1.5 + 0.5 / 60, 0.35, 24 + 5 / 60))
    assert trace.censored == (False, False, True)
    path.write_text("vm-a,2019-02-18T23:39,2019-02-19T25:00\n")
    with pytest.raises(
        TraceError,
        match=r":1: Terminate '2019-02-19T25:00' is not a time of the form M/D/YY H:MM "
        r"or ISO 8601",
    ):
        read_trace_file(path)


def test_a_long_trace_file_reports_its_parse(tmp_path):
    """Issue 23 point 6: a 10^6-row file was 11 s of silence."""
    path = tmp_path / "long.csv"
    path.write_text("".join(f"{i * 1000},add,n{i}\n{i * 1000 + 500},remove,n{i}\n" for i in range(60_000)))
    seen: list[tuple[int, int]] = []
    trace = read_trace_file(path, progress=lambda done, total: seen.append((done, total)))
    assert len(trace.lifetimes_h) == 60_000
    assert seen == [(50_000, 120_000), (100_000, 120_000)]
