"""Interruption-frequency bands as hazards, the dated band snapshot, and synthetic traces from them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from provisioning.catalog.snapshot import load_snapshot
from simulation.trace import TraceKind
from simulation.traces import TraceError, band_hazard, band_snapshot, band_trace, default_trace_for, rate_trace
from simulation.traces.bands import HOURS_PER_MONTH, parse_band_snapshot


@pytest.mark.parametrize(
    ("band", "per_hour"),
    [("<5%", 3.4682e-5), ("5-10%", 1.06797e-4), ("10-15%", 1.82920e-4), ("15-20%", 2.63523e-4), (">20%", 3.94087e-4)],
)
def test_band_midpoint_is_the_share_reclaimed_in_a_month(band, per_hour):
    hazard = band_hazard(band)
    assert hazard == pytest.approx(per_hour, rel=1e-4)
    reclaimed = 1 - math.exp(-hazard * HOURS_PER_MONTH)  # a node running all month
    midpoint = {"<5%": 0.025, "5-10%": 0.075, "10-15%": 0.125, "15-20%": 0.175, ">20%": 0.25}[band]
    assert reclaimed == pytest.approx(midpoint)


def test_band_and_rate_traces_sample_their_hazard():
    trace = band_trace("10 - 15")  # spaces and a missing % are the same band
    assert trace.kind is TraceKind.HAZARD and trace.name == "band:10-15%"
    assert trace.mean_lifetime_h() == pytest.approx(1 / band_hazard("10-15%"))
    lives = rate_trace(0.02).sample_lifetimes(np.random.default_rng(0), 20000)
    assert lives.mean() == pytest.approx(50, rel=0.03)
    assert band_trace("0.02").hazard_per_h == 0.02
    assert np.isinf(rate_trace(0).sample_lifetimes(np.random.default_rng(0), 3)).all()


@pytest.mark.parametrize("bad", ["7%", "20-25%", ">30%", "-0.1"])
def test_unknown_bands_and_negative_rates_are_refused(bad):
    with pytest.raises(TraceError):
        band_trace(bad)
    with pytest.raises(TraceError):
        rate_trace(float("nan"))


def test_snapshot_is_dated_marked_as_an_estimate_and_covers_the_catalogs_gpu_types():
    snapshot = band_snapshot()
    assert snapshot.source == "estimate" and snapshot.as_of == load_snapshot().as_of
    assert any("not downloaded" in n.lower() for n in snapshot.notes)
    assert any("spot-advisor-data.json" in n for n in snapshot.notes)
    catalog = load_snapshot()
    for region in catalog.regions:
        for itype in catalog.gpu_types():
            if catalog.spot_prices(itype.name, region):
                assert snapshot.band_for(itype.name, region) is not None, (itype.name, region)


def test_default_trace_uses_the_recorded_band_or_says_it_fell_back():
    known = default_trace_for("p3.2xlarge", "us-east-1")
    assert known.hazard_per_h == band_hazard(band_snapshot().band_for("p3.2xlarge", "us-east-1"))
    unknown = default_trace_for("x9.huge", "us-east-1")
    assert unknown.hazard_per_h == band_hazard(band_snapshot().fallback_band)
    assert "no recorded band" in unknown.notes[0]


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"as_of": "July"}, "as_of must be a date"),
        ({"source": "aws"}, "source must be"),
        ({"fallback_band": "30%"}, "fallback_band must be one of"),
        ({"bands": {"us-east-1": {"g4dn.xlarge": "7%"}}}, "bands.us-east-1.g4dn.xlarge must be one of"),
        ({"bands": {"mars": {}}}, "'mars' is not a region"),
        ({"bands": {"us-east-1": {"G4": "<5%"}}}, "'G4'"),
    ],
)
def test_snapshot_is_validated_on_load(change, needle):
    document = {
        "as_of": "2025-07-01",
        "source": "estimate",
        "fallback_band": ">20%",
        "bands": {"us-east-1": {"g4dn.xlarge": "5-10%"}},
        **change,
    }
    with pytest.raises(TraceError, match=needle):
        parse_band_snapshot(document, "bands.json")
