"""Real mpirun: trainers whose save() calls disagree all get StateError from save() itself, and go on."""

from __future__ import annotations

import json

import pytest
from dc_mpi import run_mpi

pytestmark = pytest.mark.mpi


def test_disagreeing_trainers_all_raise_at_save(tmp_path):
    run_mpi(3, "agree_worker.py", str(tmp_path / "ck"), str(tmp_path), timeout=180)
    got = [json.loads((tmp_path / f"agree-{r}.json").read_text()) for r in (0, 1)]
    for name, detail in [
        ("extra_tensor", "trainer 0: step 1, 4000 bytes, layout dc84e3e7; trainer 1: step 1, 4072 bytes"),
        ("other_shape", "trainer 0: step 2, 3996 bytes"),
        ("other_step", "trainer 0: step 3, 4000 bytes, layout dc84e3e7; trainer 1: step 4, 4000 bytes"),
    ]:
        for g in got:
            kind, message = g[name]
            assert kind == "StateError" and "trainers called save() with different states" in message, g
            assert detail in message
    # the trainer holding the bad value names it; the other one learns that save() failed there
    assert got[1]["unsupported_value"][0] == "StateError" and "state['f']" in got[1]["unsupported_value"][1]
    assert got[0]["unsupported_value"][0] == "StateError"
    assert "trainer 1: its save() failed" in got[0]["unsupported_value"][1]
    assert [g["same"] for g in got] == [["ok", 6], ["ok", 6]]  # nothing was left half-sent
