"""training.node.keptfiles on real files and a real writer process: a file still open for writing is never taken,
what is taken is the whole file, and a copy put back is the file as it was, mtime included, written whole."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from training.node.keptfiles import KeptFiles, nobody_writing, open_for_writing


@pytest.fixture(autouse=True)
def lease_breaks_ignored():
    """As the launched rank has it: a writer opening a file under a read lease must not end this process."""
    import signal

    before = signal.signal(signal.SIGIO, signal.SIG_IGN)
    yield
    signal.signal(signal.SIGIO, before)


def test_a_file_being_written_is_left_for_its_previous_version(tmp_path):
    work, kept_dir = tmp_path / "job", tmp_path / "kept"
    work.mkdir()
    kept_dir.mkdir()
    files = KeptFiles(work, ["snapshot.pt", "ckpt/*.bin"], kept_dir)
    (work / "snapshot.pt").write_bytes(b"epoch 1")
    (kept_dir / "state.json").write_text("{}")
    (work / "other.txt").write_text("not kept")
    first = files.changed(nobody_writing)
    assert sorted((c.key, bytes(c.data)) for c in first) == [
        ("checkpoint_dir/state.json", b"{}"),
        ("job/snapshot.pt", b"epoch 1"),
    ]
    files.took(first)
    assert files.changed(nobody_writing) == []  # nothing new

    # a writer in a session of its own (as a launched script is) holds the new version open mid-write
    writer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nf = open('snapshot.pt', 'wb')\n"
            "f.write(b'epoch 2, half'); f.flush(); print('open', flush=True); time.sleep(60)",
        ],
        cwd=work,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline() == "open\n"
        writing = open_for_writing(writer.pid)
        assert work / "snapshot.pt" in writing
        assert files.changed(lambda: writing) == []  # torn: not taken, the kept "epoch 1" stays what comes back
    finally:
        writer.kill()
        writer.wait()
    assert open_for_writing(writer.pid) == set()
    (work / "snapshot.pt").write_bytes(b"epoch 2")
    (second,) = files.changed(lambda: open_for_writing(writer.pid))
    assert (second.key, bytes(second.data)) == ("job/snapshot.pt", b"epoch 2")


def test_a_copy_is_put_back_whole_with_its_own_mtime_and_gone_files_are_found(tmp_path):
    source, target = (
        KeptFiles(tmp_path / "a", ["ckpt"], tmp_path / "ka"),
        KeptFiles(tmp_path / "b", ["ckpt"], tmp_path / "kb"),
    )
    (tmp_path / "a" / "ckpt" / "sub").mkdir(parents=True)
    (tmp_path / "a" / "ckpt" / "sub" / "model.bin").write_bytes(os.urandom(4096))
    os.utime(tmp_path / "a" / "ckpt" / "sub" / "model.bin", ns=(1_700_000_000 * 10**9,) * 2)
    copies = source.changed(nobody_writing)
    source.took(copies)
    target.put_back(copies)
    placed = tmp_path / "b" / "ckpt" / "sub" / "model.bin"
    assert placed.read_bytes() == (tmp_path / "a" / "ckpt" / "sub" / "model.bin").read_bytes()
    assert placed.stat().st_mtime_ns == 1_700_000_000 * 10**9
    assert not [p for p in placed.parent.iterdir() if p.name.endswith(".deepvm-tmp")]
    assert target.changed(nobody_writing) == []  # put back is kept: no echo of it

    (tmp_path / "a" / "ckpt" / "sub" / "model.bin").unlink()
    time.sleep(0.01)
    assert source.changed(nobody_writing) == [] and source.gone() == ["job/ckpt/sub/model.bin"]


def test_a_file_another_node_wrote_is_never_gone_here_and_a_put_back_leaves_only_the_kept(tmp_path):
    """Two trainers' nodes (two directories): what one node's script wrote was never on the other, so the other
    does not report it removed (it was dropped from the kept files and deleted on its writer); a relaunch's put
    back leaves what was kept, and removes a file of a later name the kill left half written."""
    writer, other = (KeptFiles(tmp_path / n / "job", ["output"], tmp_path / n / "kept") for n in ("a", "b"))
    for node in ("a", "b"):
        (tmp_path / node / "kept").mkdir(parents=True)
    (tmp_path / "a" / "job" / "output" / "checkpoint-5").mkdir(parents=True)
    (tmp_path / "a" / "job" / "output" / "checkpoint-5" / "model.bin").write_bytes(b"weights")
    copies = writer.changed(nobody_writing)
    writer.took(copies)
    other.changed(nobody_writing)
    other.took(copies)  # the trainers agreed: both keep what a wrote
    (tmp_path / "b" / "kept" / "rng-1.pth").write_bytes(b"rng")  # then b writes a file of its own
    assert [c.key for c in other.changed(nobody_writing)] == ["checkpoint_dir/rng-1.pth"] and other.gone() == []
    writer.changed(nobody_writing)
    assert writer.gone() == []

    (tmp_path / "a" / "job" / "output" / "checkpoint-6.tmp").write_bytes(b"half")  # torn by the kill, a later name
    writer.put_back(copies)
    assert sorted(p.name for p in (tmp_path / "a" / "job" / "output").rglob("*") if p.is_file()) == ["model.bin"]


REWRITER = """\
import sys, time
piece = 256 * 1024
version = 0
deadline = time.monotonic() + float(sys.argv[1])
while time.monotonic() < deadline:
    version = version % 250 + 1
    with open("snapshot.pt", "wb") as f:  # torch.save's way: open (emptying it), write in pieces, close
        for _ in range(16):
            f.write(bytes([version]) * piece)
    time.sleep(0.005)  # a step between two saves, as short as any
"""


def test_a_file_rewritten_all_the_time_is_never_taken_torn():
    """benchmarks/notice_to_training_bench.py's relaunch once put back an empty snapshot.pt: the look at its size
    came after the script emptied it on opening, before it wrote, and the open-for-writing check came before the
    open. Against a writer that rewrites 4 MiB in 256 KiB pieces every 5 ms, every copy taken is whole."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        files = KeptFiles(work, ["snapshot.pt"], work / "kept")
        (work / "kept").mkdir()
        writer = subprocess.Popen([sys.executable, "-c", REWRITER, "4"], cwd=work, start_new_session=True)
        taken = 0
        try:
            deadline = time.monotonic() + 3.5
            while time.monotonic() < deadline:
                for copy in files.changed(lambda: open_for_writing(writer.pid)):
                    data = bytes(copy.data)
                    assert len(data) == 16 * 256 * 1024 and data == data[:1] * len(data), "a torn copy"
                    files.took([copy])
                    taken += 1
                time.sleep(0.01)
        finally:
            writer.kill()
            writer.wait()
        assert taken > 0  # some whole version was there to take between two rewrites
