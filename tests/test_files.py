"""Checkpoints and plots are written atomically, exclusively and durably (training.files)."""

import os
import socket
import subprocess
import sys

import pytest

from spmdlab.training.files import write_atomic

pytestmark = pytest.mark.mpi_skip  # single process: files of one worker


def test_write_replaces_the_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "net.pt"
    path.write_bytes(b"old")
    write_atomic(str(path), lambda f: f.write(b"new"))
    assert path.read_bytes() == b"new"
    assert os.listdir(tmp_path) == ["net.pt"]


def test_a_failing_write_changes_nothing(tmp_path):
    path = tmp_path / "net.pt"
    path.write_bytes(b"old")

    def crash(f):
        f.write(b"half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        write_atomic(str(path), crash)
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["net.pt"]


def test_a_planted_link_is_never_followed(tmp_path):
    """Old temporary names were predictable (name.tmp-PID); a link planted under such a
    name, or under any name, redirects nothing now."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    for name in (f".net_checkpoint.tmp-{os.getpid()}", f"plot.png.tmp-{os.getpid()}.png"):
        os.symlink(victim, tmp_path / name)
    write_atomic(str(tmp_path / "plot.png"), lambda f: f.write(b"png"))
    assert victim.read_bytes() == b"precious"
    assert (tmp_path / "plot.png").read_bytes() == b"png"


def test_temporaries_of_a_killed_writer_are_removed_on_the_next_write(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    host = socket.gethostname()
    stale = tmp_path / f".spmdlab-tmp-{host}-{dead}-0123456789abcdef"
    stale.write_bytes(b"half a checkpoint")
    live = tmp_path / f".spmdlab-tmp-{host}-1-0123456789abcdef"  # pid 1 is alive
    live.write_bytes(b"being written")
    other = tmp_path / ".spmdlab-tmp-otherhost-42-0123456789abcdef"  # not ours to judge
    other.write_bytes(b"another node's")
    write_atomic(str(tmp_path / "net.pt"), lambda f: f.write(b"x"))
    assert not stale.exists()
    assert live.exists() and other.exists()
