"""A worker's printed lines reach the terminal whole, whatever PYTHONUNBUFFERED says,
and labelled with the worker number on request (MATLAB's display)."""

import pytest

from conftest import run_job

pytestmark = pytest.mark.mpi_skip  # jobs of their own

SOURCE = """
import sys
from spmdlab import spmd_barrier, spmd_index
spmd_barrier()
k = spmd_index()
for i in range(300):
    print(f"worker {k} line {i} " + str(k) * 2000)
    print(f"err {k} {i} " + "e" * 500, file=sys.stderr)
print(f"worker {k} no newline yet", end="", flush=True)
print(" and now one")
"""


@pytest.mark.parametrize("unbuffered", ["1", ""])
def test_lines_are_never_split_between_workers(unbuffered):
    job = run_job(SOURCE, 4, env={"PYTHONUNBUFFERED": unbuffered}, timeout=120)
    assert job.returncode == 0, job.stderr
    lines = job.stdout.splitlines()
    assert len(lines) == 4 * 301, len(lines)
    for line in lines:
        words = line.split()
        k = words[1]
        if words[2] == "no":
            assert line == f"worker {k} no newline yet and now one"
        else:
            assert line == f"worker {k} line {words[3]} " + k * 2000, line[:80]
    errors = [line for line in job.stderr.splitlines() if line.startswith("err")]
    assert len(errors) == 4 * 300
    assert all(line.endswith(" " + "e" * 500) for line in errors)


def test_lines_can_be_labelled_with_the_worker_number():
    job = run_job("""
from spmdlab import spmd_index
print("hello", "from", spmd_index())
print("two\\nlines")
""", 3, env={"SPMDLAB_LABEL_OUTPUT": "1", "PYTHONUNBUFFERED": "1"})
    assert job.returncode == 0, job.stderr
    out = job.stdout.replace("\r\n", "\n")  # Open MPI may give workers a terminal
    # each line whole and labelled, each worker's lines in order (two workers' lines
    # may interleave: a line, not a print, is the unit)
    for k in (1, 2, 3):
        mine = [line for line in out.splitlines() if line.startswith(f"Worker {k}: ")]
        assert mine == [f"Worker {k}: hello from {k}", f"Worker {k}: two",
                        f"Worker {k}: lines"], out
    assert len(out.splitlines()) == 9, out


def _pipe_stream():
    import io
    import os

    from spmdlab._output import WholeLines
    r, w = os.pipe()
    os.set_blocking(r, False)
    stream = WholeLines(io.TextIOWrapper(io.FileIO(w, "w"), write_through=True))

    def read():
        try:
            return os.read(r, 1 << 16).decode()
        except BlockingIOError:
            return ""
    return stream, read


def test_a_flushed_partial_line_waits_a_moment_for_its_newline():
    import time
    stream, read = _pipe_stream()
    stream.write("a prompt> ")
    stream.flush()
    assert read() == ""  # another worker's line cannot splice in
    stream.write("finished\n")
    assert read() == "a prompt> finished\n"
    stream.write("no newline coming")
    stream.flush()
    time.sleep(stream.HOLD + 0.5)
    assert read() == "no newline coming"  # a prompt shows
    stream.write("\r 40% |####      |")
    stream.flush()
    assert read() == "\r 40% |####      |"  # a progress bar's redraw goes out at once
    stream.write("last words")
    stream.close()
    assert read() == "last words"


def test_a_last_partial_line_reaches_the_terminal_at_exit():
    job = run_job("""
from spmdlab import spmd_index
print(f"worker {spmd_index()} ends without a newline", end="")
""", 2)
    assert job.returncode == 0, job.stderr
    for k in (1, 2):
        assert f"worker {k} ends without a newline" in job.stdout, job.stdout
