"""training.node.keptfiles on real files and a real writer process: a file still open for writing is never taken,
what is taken is the whole file, and a copy put back is the file as it was, mtime included, written whole."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from training.node.keptfiles import KeptFiles, open_for_writing


def test_a_file_being_written_is_left_for_its_previous_version(tmp_path):
    work, kept_dir = tmp_path / "job", tmp_path / "kept"
    work.mkdir()
    kept_dir.mkdir()
    files = KeptFiles(work, ["snapshot.pt", "ckpt/*.bin"], kept_dir)
    (work / "snapshot.pt").write_bytes(b"epoch 1")
    (kept_dir / "state.json").write_text("{}")
    (work / "other.txt").write_text("not kept")
    first = files.changed(set())
    assert sorted((c.key, bytes(c.data)) for c in first) == [("checkpoint_dir/state.json", b"{}"),
                                                              ("job/snapshot.pt", b"epoch 1")]  # fmt: skip
    files.took(first)
    assert files.changed(set()) == []  # nothing new

    # a writer in a session of its own (as a launched script is) holds the new version open mid-write
    writer = subprocess.Popen([sys.executable, "-c", "import sys, time\nf = open('snapshot.pt', 'wb')\n"
                               "f.write(b'epoch 2, half'); f.flush(); print('open', flush=True); time.sleep(60)"],
                              cwd=work, stdout=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    try:
        assert writer.stdout is not None and writer.stdout.readline() == "open\n"
        writing = open_for_writing(writer.pid)
        assert work / "snapshot.pt" in writing
        assert files.changed(writing) == []  # torn: not taken, the kept "epoch 1" stays what comes back
    finally:
        writer.kill()
        writer.wait()
    assert open_for_writing(writer.pid) == set()
    (work / "snapshot.pt").write_bytes(b"epoch 2")
    (second,) = files.changed(open_for_writing(writer.pid))
    assert (second.key, bytes(second.data)) == ("job/snapshot.pt", b"epoch 2")


def test_a_copy_is_put_back_whole_with_its_own_mtime_and_gone_files_are_found(tmp_path):
    source, target = KeptFiles(tmp_path / "a", ["ckpt"], tmp_path / "ka"), KeptFiles(tmp_path / "b", ["ckpt"],
                                                                                       tmp_path / "kb")  # fmt: skip
    (tmp_path / "a" / "ckpt" / "sub").mkdir(parents=True)
    (tmp_path / "a" / "ckpt" / "sub" / "model.bin").write_bytes(os.urandom(4096))
    os.utime(tmp_path / "a" / "ckpt" / "sub" / "model.bin", ns=(1_700_000_000 * 10**9,) * 2)
    copies = source.changed(set())
    source.took(copies)
    target.put_back(copies)
    placed = tmp_path / "b" / "ckpt" / "sub" / "model.bin"
    assert placed.read_bytes() == (tmp_path / "a" / "ckpt" / "sub" / "model.bin").read_bytes()
    assert placed.stat().st_mtime_ns == 1_700_000_000 * 10**9
    assert not [p for p in placed.parent.iterdir() if p.name.endswith(".deepvm-tmp")]
    assert target.changed(set()) == []  # put back is kept: no echo of it

    (tmp_path / "a" / "ckpt" / "sub" / "model.bin").unlink()
    time.sleep(0.01)
    assert source.changed(set()) == [] and source.gone() == ["job/ckpt/sub/model.bin"]


def test_a_file_another_node_wrote_is_never_gone_here_and_a_put_back_leaves_only_the_kept(tmp_path):
    """Two trainers' nodes (two directories): what one node's script wrote was never on the other, so the other
    does not report it removed (it was dropped from the kept files and deleted on its writer); a relaunch's put
    back leaves what was kept, and removes a file of a later name the kill left half written."""
    writer, other = (KeptFiles(tmp_path / n / "job", ["output"], tmp_path / n / "kept") for n in ("a", "b"))
    for node in ("a", "b"):
        (tmp_path / node / "kept").mkdir(parents=True)
    (tmp_path / "a" / "job" / "output" / "checkpoint-5").mkdir(parents=True)
    (tmp_path / "a" / "job" / "output" / "checkpoint-5" / "model.bin").write_bytes(b"weights")
    copies = writer.changed(set())
    writer.took(copies)
    other.changed(set())
    other.took(copies)  # the trainers agreed: both keep what a wrote
    (tmp_path / "b" / "kept" / "rng-1.pth").write_bytes(b"rng")  # then b writes a file of its own
    assert [c.key for c in other.changed(set())] == ["checkpoint_dir/rng-1.pth"] and other.gone() == []
    writer.changed(set())
    assert writer.gone() == []

    (tmp_path / "a" / "job" / "output" / "checkpoint-6.tmp").write_bytes(b"half")  # torn by the kill, a later name
    writer.put_back(copies)
    assert sorted(p.name for p in (tmp_path / "a" / "job" / "output").rglob("*") if p.is_file()) == ["model.bin"]
