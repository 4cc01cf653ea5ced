"""Crashes, early exits and waits that can never end: whole jobs under mpiexec.

Each job must end by itself well inside its timeout, with a non-zero status and a
message that names the failing worker, instead of hanging.
"""

import os
import re
import time

import pytest

import spmdlab
from conftest import is_open_mpi, run_job

pytestmark = pytest.mark.mpi_skip  # these tests launch mpiexec themselves

PROLOGUE = "import sys, time\nimport numpy as np\nfrom spmdlab import *\n"
# For a job that kills a worker: wait until the host's watcher watches (it is a process
# of its own, and starts late on a loaded machine: a death before it watches goes
# unnamed, and its words may find the launcher gone)
WATCHED = """
def watched():
    import os
    from spmdlab import _ending
    deadline = time.monotonic() + 20
    while not os.path.exists(f"{_ending._goodbye_path}.watching"):
        assert time.monotonic() < deadline, "the watcher did not start"
        time.sleep(0.01)
"""


def test_uncaught_exception_ends_the_job():
    job = run_job(PROLOGUE + """
if spmd_index() == 2:
    time.sleep(0.5)
    raise KeyError("boom on two")
spmd_plus(1.0)   # workers 1 and 3 wait here for worker 2
print("never reached")
""", 3)
    assert job.returncode != 0
    assert "### spmdlab: worker 2 of 3" in job.stderr
    assert "KeyError: 'boom on two'" in job.stderr and "Traceback" in job.stderr
    assert "never reached" not in job.stdout
    assert job.seconds < 20


def test_exception_after_the_others_finished():
    job = run_job(PROLOGUE + """
if spmd_index() == 1:
    time.sleep(0.5)
    raise RuntimeError("late failure")
""", 2)
    assert job.returncode != 0 and "worker 1 of 2" in job.stderr
    assert "RuntimeError: late failure" in job.stderr and job.seconds < 20


def test_worker_that_leaves_early_ends_a_waiting_collective():
    job = run_job(PROLOGUE + """
if spmd_index() != 1:
    spmd_plus(np.ones(5))   # worker 1 never calls it
""", 3)
    assert job.returncode != 0
    assert "SpmdPeerError" in job.stderr
    assert "worker 1 finished the program without making the matching call" in job.stderr
    assert job.seconds < 20


def test_collectives_after_a_caught_peer_error_say_that_a_worker_has_left():
    # a program that catches the error and goes on: its next collectives raise
    # SpmdPeerError at once, whichever path they take (not MPI's error for a request
    # started twice); the job ends with worker 2's status
    job = run_job(PROLOGUE + """
x = np.ones(3000)
for i in range(5):
    spmd_plus(x), spmd_plus(1.0)
if spmd_index() == 2:
    sys.exit(3)
for value in (x, 1.0):
    try:
        spmd_plus(value)
    except SpmdPeerError as e:
        print("caught:", e, flush=True)
for call in (lambda: spmd_plus(x), lambda: spmd_plus(1.0), spmd_barrier,
             lambda: spmd_cat(np.ones(2))):
    try:
        call()
    except SpmdPeerError as e:
        print("again:", e, flush=True)
spmd_barrier()
""", 2)
    assert "caught: spmd_plus (worker 1 of 2): worker 2 finished the program (exit status " \
        "3)" in job.stdout, job.stdout + job.stderr
    again = [line for line in job.stdout.splitlines() if line.startswith("again:")]
    assert len(again) == 4, job.stdout + job.stderr
    assert all("(worker 1 of 2): worker 2 finished the program (exit status 3) without "
               "making the matching call, so no collective of these workers can complete "
               "any more (seen first in spmd_plus)" in line for line in again), again
    assert "MPI_Start" not in job.stderr and job.returncode == 3 and job.seconds < 30


def test_sys_exit_on_one_worker_ends_a_waiting_collective():
    job = run_job(PROLOGUE + """
if spmd_index() == 2:
    sys.exit(3)
spmd_barrier()
""", 2)
    assert job.returncode != 0 and "SpmdPeerError" in job.stderr and job.seconds < 20


def test_receive_from_a_finished_worker():
    job = run_job(PROLOGUE + """
if spmd_index() == 1:
    spmd_receive(2)
""", 2)
    assert job.returncode != 0
    assert "spmd_receive (worker 1 of 2): worker 2 finished the program" in job.stderr


def test_mismatch_uncaught_ends_the_job_with_the_same_message_everywhere():
    job = run_job(PROLOGUE + """
spmd_plus(np.ones(spmd_index()))
""", 3)
    assert job.returncode != 0
    assert "SpmdMismatchError: spmd_plus" in job.stderr
    assert "worker 3: spmd_plus(float64 (3,) numpy)" in job.stderr


def test_timeout_turns_a_deadlock_into_an_error():
    job = run_job(PROLOGUE + """
spmd_receive()   # every worker waits for a message nobody sends
""", 2, env={"SPMDLAB_TIMEOUT": "2"})
    assert job.returncode != 0
    assert "SpmdTimeoutError" in job.stderr and "SPMDLAB_TIMEOUT=2 s" in job.stderr
    assert job.seconds < 20


def test_messages_sent_at_the_end_are_delivered():
    job = run_job(PROLOGUE + """
if spmd_index() == 2:
    spmd_send(np.arange(2_000_000), 1)   # large: completes only once received
    spmd_send("last words", 1)
else:
    time.sleep(1.0)
    print("got", spmd_receive(2).sum(), spmd_receive(2))
""", 2)
    assert job.returncode == 0, job.stderr
    assert f"got {sum(range(2_000_000))} last words" in job.stdout


def test_unreceived_messages_are_reported_by_the_receiver():
    job = run_job(PROLOGUE + """
if spmd_index() == 1:
    spmd_send(np.arange(2_000_000), 2)   # large: the sender waits for it at exit
    spmd_send("small", 2, tag=5)
""", 2)
    assert job.returncode == 0, job.stderr
    # once each: a large message's first part and the bytes that follow are one message
    assert job.stderr.count("worker 2 of 2: a message from worker 1 (tag 0) sent with "
                            "spmd_send or spmd_send_receive was never received") == 1, \
        job.stderr
    assert job.stderr.count("a message from worker 1 (tag 5)") == 1 and job.seconds < 20


def test_receives_over_many_tags_and_a_withdrawn_one_end_cleanly():
    """Receives from a given worker start persistent receives (one per source and tag,
    64 kept at most): over 100 tags, and after a receive that gave up (withdrawn: the
    next receive with its tag starts it again), the job ends at once, nothing on
    stderr."""
    job = run_job(PROLOGUE + """
from spmdlab import _env
k, n = spmd_index(), spmd_size()
for tag in range(100):
    spmd_send(np.full(3, k), k % n + 1, tag=tag)
    assert (spmd_receive((k - 2) % n + 1, tag) == (k - 2) % n + 1).all()
    assert spmd_send_receive(k % n + 1, (k - 2) % n + 1, tag, tag=tag) == tag
if k == 1:
    _env.TIMEOUT = 0.3
    try:
        spmd_receive(2, 999)
    except SpmdTimeoutError:
        print("withdrawn")
    _env.TIMEOUT = None
spmd_barrier()
spmd_send("after", k % n + 1, tag=999)
print("got", spmd_receive((k - 2) % n + 1, 999))
""", 2)
    assert job.returncode == 0, job.stderr
    assert job.stdout.count("got after") == 2 and "withdrawn" in job.stdout
    assert not job.stderr.strip(), job.stderr
    assert job.seconds < 20


def test_clean_run_exits_zero_quickly():
    job = run_job(PROLOGUE + """
x = spmd_plus(np.ones(10))
assert (x == spmd_size()).all()
print(f"ok{spmd_index()}")
""", 4)
    assert job.returncode == 0, job.stderr
    assert sorted(re.findall(r"ok(\d)", job.stdout)) == ["1", "2", "3", "4"]


def test_a_clean_run_under_python_dev_mode_warns_nothing():
    # (the host's watcher process outlives the worker that started it: Popen's
    # finalizer said "ResourceWarning: subprocess N is still running" under -X dev,
    # and it was an "Exception ignored" under -W error)
    job = run_job(PROLOGUE + """
assert spmd_plus(1) == spmd_size()
""", 2, env={"PYTHONDEVMODE": "1", "PYTHONWARNINGS": "error"})
    assert job.returncode == 0, job.stderr
    assert "Warning" not in job.stderr and "Exception ignored" not in job.stderr, job.stderr


def test_plain_python_is_one_worker():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", "from spmdlab import *; "
                          "print(spmd_index(), spmd_size(), spmd_plus(3.0), spmd_cat(2))"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "1", "3.0", "[2]"]


BAD_INPUTS = {
    "shapes differ": ("spmd_plus(np.ones(spmd_index()))",
                      "SpmdMismatchError: spmd_plus", "worker 2: spmd_plus(float64 (2,) numpy)"),
    "dtypes differ": ("spmd_plus(np.ones(3, np.float32 if spmd_index() == 1 else np.int64))",
                      "SpmdMismatchError: spmd_plus", "int64 (3,) numpy"),
    "structures differ": ("spmd_cat({'a': 1} if spmd_index() == 1 else [1])",
                          "SpmdMismatchError: spmd_cat", "worker 1: spmd_cat(dict {a} of"),
    "destination out of range": ("spmd_plus(1.0, destination=spmd_index() + 2)",
                                 "SpmdValueError: spmd_plus",
                                 "'destination' must be a worker number from 1 to 3"),
    "source out of range": ("spmd_broadcast(4, 1)", "SpmdValueError: spmd_broadcast",
                            "'source' must be a worker number from 1 to 3 (got 4)"),
    "negative tag": ("spmd_send(1, 1, tag=-1)", "SpmdValueError: spmd_send",
                     "'tag' must be from 0"),
    "cannot be summed": ("spmd_plus('abc' if spmd_index() == 3 else 1.0)",
                         "SpmdTypeError: spmd_plus", "cannot sum a value of type str"),
    "unpicklable": ("spmd_cat(lambda: 0)", "SpmdTypeError: spmd_cat",
                    "cannot be pickled"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS), ids=lambda c: c.replace(" ", "-"))
def test_bad_input_uncaught_ends_the_job_with_its_message(case):
    line, error, detail = BAD_INPUTS[case]
    job = run_job(PROLOGUE + line + "\nspmd_barrier()\n", 3)
    assert job.returncode != 0, job.stdout
    assert error in job.stderr and detail in job.stderr, job.stderr
    assert "### spmdlab: worker" in job.stderr
    assert job.seconds < 20


def test_workers_leaving_right_after_the_last_collective_are_not_taken_for_deserters():
    # a worker's exit notice can overtake its part of the last collective: the others
    # must not conclude that it never made the call
    for _ in range(4):
        job = run_job(PROLOGUE + """
for i in range(20):
    spmd_plus(float(i))
total = spmd_plus(np.ones(3))
""", 4)
        assert job.returncode == 0, job.stderr


def test_collective_after_every_other_worker_left():
    # worker 1 has taken in every exit notice (a receive that gave up on them): a later
    # collective must raise, not wait forever
    job = run_job(PROLOGUE + """
if spmd_index() == 1:
    try:
        spmd_receive()
    except SpmdPeerError:
        print("receive gave up", flush=True)
    spmd_barrier()
""", 2)  # two workers on two cores: the wait that blocks inside MPI
    assert "receive gave up" in job.stdout
    assert job.returncode != 0 and "SpmdPeerError: spmd_barrier" in job.stderr, job.stderr
    assert job.seconds < 20


LOOP_WITH_EXIT = """
import os, sys, time
from spmdlab import spmd_index, spmd_plus
for i in range(200):
    if spmd_index() == 2 and i == 5:
        {exit}
    spmd_plus(1.0)
    time.sleep(0.01)
"""


@pytest.mark.parametrize("exit", ["sys.exit(3)", "exit(3)", "quit(3)"])
def test_sys_exit_status_of_one_worker_is_the_jobs(exit):
    # the builtins exit and quit raise SystemExit without sys.exit: noted all the same
    job = run_job(LOOP_WITH_EXIT.format(exit=exit), 3)
    assert job.returncode == 3, job.stderr
    assert "worker 2 finished the program (exit status 3)" in job.stderr


def test_workers_that_finished_with_different_statuses_are_each_named():
    job = run_job(PROLOGUE + """
spmd_barrier()
if spmd_index() == 1:
    spmd_receive()          # from any worker: none sends
elif spmd_index() == 2:
    time.sleep(0.3)
    sys.exit(3)
""", 3)
    assert job.returncode == 3, job.stderr
    assert "workers 2 (exit status 3), 3 finished the program without making the " \
        "matching call" in job.stderr, job.stderr


def test_a_caught_sys_exit_and_one_in_a_thread_leave_no_status_behind():
    # the program goes on after each: it finishes with status 0, and says so
    job = run_job(PROLOGUE + """
import threading
spmd_barrier()
if spmd_index() == 2:
    try:
        sys.exit(2)
    except SystemExit:
        pass
    thread = threading.Thread(target=lambda: sys.exit(5))
    thread.start()
    thread.join()
    time.sleep(0.3)
elif spmd_index() == 1:
    spmd_receive(2)
""", 2)
    assert job.returncode == 1, job.stderr
    assert "worker 2 finished the program without making the matching call" in job.stderr
    assert "exit status" not in job.stderr and "Exception in thread" not in job.stderr


def test_sys_exit_in_a_listener_ends_the_job_with_its_status():
    job = run_job(PROLOGUE + """
q = DataQueue()
q.after_each(lambda item: sys.exit(3))
spmd_barrier()  # an item already there is handed over by after_each, in the main thread
if spmd_index() == 2:
    q.send(1)
for i in range(500):
    spmd_plus(1.0)
    time.sleep(0.01)
""", 2)
    assert job.returncode == 3, job.stderr
    assert "worker 1 of 2" in job.stderr and "SystemExit: 3" in job.stderr
    assert job.seconds < 20


@pytest.mark.parametrize("name", ["SPMDLAB_GATHER_BYTES", "SPMDLAB_INLINE_BYTES",
                                  "SPMDLAB_SHM_MIN_BYTES", "SPMDLAB_TREE_ABOVE"])
def test_settings_that_differ_among_the_workers_stop_the_first_call(name):
    # unequal, they made workers take different paths through one call: a hang, or
    # (SPMDLAB_INLINE_BYTES) a wrong sum on one worker
    job = run_job(f"""
import os
rank = os.environ.get("PMI_RANK") or os.environ.get("OMPI_COMM_WORLD_RANK")
if rank == "0":
    os.environ[{name!r}] = "0"
import numpy as np
from spmdlab import *
for size in [10, 1000, 20000]:
    print(spmd_index(), size, spmd_plus(np.ones(size))[0])
""", 3)
    assert job.returncode == 1, job.stdout + job.stderr
    assert not job.stdout.strip(), job.stdout
    # (every worker raises it; the first to end the job may cut the others' words short)
    assert re.search(rf"SpmdValueError: spmd_index \(worker \d of 3, the first spmdlab "
                     rf"call\): {name} must be the same on every worker, for it decides "
                     rf"how collectives move data \(got worker 1: 0; workers 2, 3: \w+\)",
                     job.stderr), job.stderr


@pytest.mark.parametrize("inline", ["0", "4"])
def test_a_scalar_beside_a_0d_array_where_the_record_does_not_carry_it(inline):
    # (tester T3) the scalar fast path put its value in the record whatever
    # SPMDLAB_INLINE_BYTES said, the 0-d array beside it gathered its own: worker 1
    # returned its own 1.0 as the sum, the others hung in the gather; and a lone Python
    # int, summed exactly only in the record, wrapped as int64 outside it
    job = run_job(PROLOGUE + """
k = spmd_index()
print("sum", k, repr(spmd_plus(1.0 if k == 1 else np.array(1.0))))
print("max", k, repr(spmd_reduce(max, np.float64(k) if k == 1 else np.array(float(k)))))
print("f32", k, repr(spmd_plus(np.float32(k) if k == 2 else np.array(k, dtype=np.float32))))
print("int", k, spmd_plus(k))
print("big", k, spmd_plus(2 ** 62), spmd_plus(2 ** 62, destination=1))  # exact, alone
""", 3, env={"SPMDLAB_INLINE_BYTES": inline, "SPMDLAB_TIMEOUT": "20"})
    assert job.returncode == 0, job.stdout + job.stderr
    lines = set(job.stdout.split("\n"))
    assert {"sum 1 3.0", "sum 2 array(3.)", "sum 3 array(3.)", "max 1 np.float64(3.0)",
            "max 2 array(3.)", "max 3 array(3.)", "f32 1 array(6., dtype=float32)",
            "f32 2 np.float32(6.0)", "f32 3 array(6., dtype=float32)", "int 1 6",
            "int 2 6", "int 3 6", f"big 1 {3 * 2 ** 62} {3 * 2 ** 62}",
            f"big 2 {3 * 2 ** 62} None"} <= lines, job.stdout


def test_os_exit_on_one_worker_is_named():
    job = run_job(LOOP_WITH_EXIT.format(exit="os._exit(4)"), 3)
    assert job.returncode == 4, job.stderr
    assert "worker 2 of 3" in job.stderr and "called os._exit(4)" in job.stderr


def test_os_exit_in_a_forked_child_is_left_alone():
    job = run_job("""
import os
from spmdlab import spmd_plus
pid = os.fork()
if pid == 0:
    os._exit(7)  # a child process, not a worker: no MPI here
_, status = os.waitpid(pid, 0)
# one write: print's separate pieces from two workers can interleave (unbuffered in CI)
os.write(1, f"child status {os.waitstatus_to_exitcode(status)}\\n".encode())
spmd_plus(1.0)
""", 2)
    assert job.returncode == 0, job.stderr
    assert job.stdout.count("child status 7") == 2


def test_importing_spmdlab_on_some_workers_only_does_not_hang():
    job = run_job("""
from mpi4py import MPI
if MPI.COMM_WORLD.Get_rank() == 0:
    import spmdlab  # no MPI communication at import
    from spmdlab.matlab import labindex
print("done", flush=True)
""", 3, timeout=30)
    assert job.returncode == 0, job.stderr
    assert job.stdout.count("done") == 3


def test_a_first_call_the_others_never_make_is_reported():
    job = run_job("""
import time
from mpi4py import MPI
if MPI.COMM_WORLD.Get_rank() == 0:
    from spmdlab import spmd_plus
    spmd_plus(1.0)  # alone: the others never start spmdlab
else:
    time.sleep(20)
""", 3, timeout=40, env={"SPMDLAB_TIMEOUT": "2"})
    assert job.returncode != 0
    assert "waiting for every other worker's first spmdlab call" in job.stderr
    assert "no answer from workers 2, 3" in job.stderr


def test_a_collective_timeout_names_the_late_worker_and_where_the_others_wait():
    job = run_job("""
import time
from spmdlab import spmd_index, spmd_plus, spmd_barrier
spmd_plus(1.0)
if spmd_index() == 3:
    time.sleep(30)
spmd_barrier()
""", 4, timeout=40, env={"SPMDLAB_TIMEOUT": "2"})
    assert job.returncode != 0
    assert re.search(r"SpmdTimeoutError: spmd_barrier \(worker 1 of 4\): worker 3 is at "
                     r"\S+\.py:6 in <module>\(\), not in a spmdlab call \(its last "
                     r"collective: #1 spmd_plus\); workers 2, 4 wait here too; gave up "
                     r"after SPMDLAB_TIMEOUT=2 s", job.stderr), job.stderr
    assert job.seconds < 20


@pytest.mark.parametrize("layout", ["2", "4", "2x2"])
def test_a_slow_worker_is_named_with_the_line_it_is_on(layout):
    # the stall report: on by default (60 s), here after 2 s; the job goes on waiting
    job = run_job("""
import time
from spmdlab import spmd_index, spmd_plus, spmd_barrier, spmd_size
spmd_plus(1.0)
def load_batch():
    time.sleep(5)
if spmd_index() == spmd_size():
    load_batch()
spmd_barrier()
print("done", flush=True)
""", 2 if layout == "2" else 4, nodes=2 if layout == "2x2" else 1, timeout=60,
                  env={"SPMDLAB_STALL_WARNING": "2"})
    assert job.returncode == 0, job.stderr
    n = 2 if layout == "2" else 4
    assert job.stdout.count("done") == n
    reports = [line for line in job.stderr.splitlines() if "has waited" in line]
    assert len(reports) == n - 1, job.stderr  # once, by every waiting worker
    for line in reports:
        assert re.search(rf"spmdlab: spmd_barrier \(worker \d of {n}, collective #2 at "
                         rf"\S+\.py:9\) has waited \d+ s: worker {n} is at \S+\.py:6 in "
                         rf"load_batch\(\), not in a spmdlab call \(its last collective: #1 "
                         rf"spmd_plus\)", line), line


@pytest.mark.parametrize("path", ["shared memory", "MPI", "2x2"])
def test_a_local_failure_after_the_agreement_ends_the_job_named(path):
    # Between the agreement and the end of the data movement the other workers are
    # committed to the call. A fold that fails on worker 2 only (here: a MemoryError
    # that the program catches) used to leave worker 1 in a blocking shared-memory
    # barrier for ever; now worker 2 ends the job and says where.
    job = run_job(PROLOGUE + """
from spmdlab import _ops, _reduce, _shm
def failing_fold(*args):
    raise MemoryError("no room for the fold")
if spmd_index() == 2:
    _shm.fold = _reduce.fold = failing_fold
try:
    spmd_plus(np.ones(100_000))   # 800 kB: shared memory on one node, unless disabled
except MemoryError:
    print("caught on worker", spmd_index(), flush=True)
print("never reached", flush=True)
""", 4 if path == "2x2" else 2, nodes=2 if path == "2x2" else 1, timeout=40,
                  env=dict({"SPMDLAB_SHM_BYTES": "0"} if path == "MPI" else {},
                           SPMDLAB_TREE_ABOVE="4"))  # the folds patched above
    assert job.returncode != 0
    assert "spmd_plus (worker 2 of" in job.stderr
    assert "failed after every worker had agreed to it" in job.stderr
    assert "MemoryError: no room for the fold" in job.stderr
    assert "never reached" not in job.stdout and job.seconds < 20


@pytest.mark.parametrize("tree", ["0", "4"])  # SPMDLAB_TREE_ABOVE: tree, gathering
def test_a_worker_leaving_inside_a_shared_memory_reduction_is_named(tree):
    # the shared-memory fences are guarded waits: a worker that has gone is seen there
    # (it left after the agreement: every wait of the call watches its exit notice)
    job = run_job(PROLOGUE + """
from spmdlab import _shm
if spmd_index() == 2:
    def leave(*args):
        sys.exit(0)
    _shm.fold = _shm.tree_fold = leave  # (the tree's, among many workers)
spmd_plus(np.ones(100_000))
""", 2, timeout=40, env={"SPMDLAB_TREE_ABOVE": tree})
    assert job.returncode != 0
    assert "worker 2 finished the program" in job.stderr or "worker 2 of 2" in job.stderr
    assert job.seconds < 20


def test_a_mismatch_in_a_script_names_its_lines_wherever_it_runs_from():
    job = run_job(PROLOGUE + """
if spmd_index() == 1:
    spmd_plus(np.ones(3))
else:
    spmd_cat(np.ones(3))
""", 2)
    assert job.returncode != 0
    # the script lies outside the current folder: its absolute path, and the lines
    assert re.search(r"collective #1 does not match: workers made different calls "
                     r"\(they differ in: call\): worker 1: spmd_plus\(float64 \(3,\) "
                     r"numpy\) at /\S+\.py:6; worker 2: spmd_cat\(float64 \(3,\) numpy, "
                     r"axis=0\) at /\S+\.py:8", job.stderr), job.stderr


@pytest.mark.parametrize("how", ["SIGTERM", "SIGSEGV"])
def test_the_signal_that_ended_a_worker_is_named(how):
    # SIGTERM (kill, a batch system's time limit) and a crash in C code are named, with
    # where the worker was; a SIGTERM arrives here while the others wait inside MPI
    job = run_job(PROLOGUE + WATCHED + f"""
import ctypes, os, signal
spmd_plus(1.0)
def work():
    if spmd_index() == 2:
        watched()
        time.sleep(0.3)
        if {how!r} == "SIGTERM":
            os.kill(os.getpid(), signal.SIGTERM)
        ctypes.string_at(0)
    spmd_plus(1.0)
work()
""", 3, timeout=40)
    assert job.returncode != 0
    expected = {"SIGTERM": r"ended by SIGTERM \(sent by kill",
                "SIGSEGV": r"crashed: Segmentation fault \(SIGSEGV\)"}[how]
    named = re.search(rf"### spmdlab: worker 2 of 3 \(\S+, pid \d+\) {expected}",
                      job.stderr)
    # on a loaded machine the watcher may wake after the launcher's clean-up has ended
    # the others too, before worker 2's report is readable: then it names the group
    late = re.search(r"### spmdlab: one of workers [\d, ]*\b2\b[\d, ]* of 3", job.stderr)
    assert named or late, job.stderr
    if named:
        assert re.search(r"line \d+ in work", job.stderr), job.stderr  # the stack then
    assert job.stderr.count("### spmdlab:") == 1, job.stderr


def _watchdog():
    """The watcher's module, loaded as its script is (importing it through the package
    would start MPI)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "watchdog", os.path.join(os.path.dirname(spmdlab.__file__), "_watchdog.py"))
    watchdog = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(watchdog)
    return watchdog


@pytest.mark.parametrize("how", ["SIGTERM", "SIGSEGV", "SIGKILL"])
def test_the_watcher_reads_how_a_worker_ended(how, tmp_path):
    # the watcher's reading of a worker's faulthandler file, without the timing of a job
    watchdog = _watchdog()
    path = str(tmp_path / "bye")
    stack = 'Current thread 0x1 (most recent call first):\n  File "job.py", line 7 in work\n'
    text = {"SIGTERM": stack,
            "SIGSEGV": "Fatal Python error: Segmentation fault\n\n" + stack,
            "SIGKILL": ""}[how]
    with open(f"{path}.2", "w") as f:
        f.write(text)
    words, shown = watchdog._how_it_ended([2], {}, path)
    expected = {"SIGTERM": "ended by SIGTERM", "SIGSEGV": "crashed: Segmentation fault "
                "(SIGSEGV)", "SIGKILL": "ended without a word: killed by a signal"}[how]
    assert words.startswith(expected), words
    assert ("line 7 in work" in shown) == (how != "SIGKILL"), shown


def test_the_watcher_counts_a_worker_that_is_exiting_as_ended():
    # a SIGKILLed worker closes its sockets as it tears down, before its leader thread is
    # a zombie: the launcher's clean-up may end another worker before it, and the watcher
    # then named that one (worker 1 for the SIGKILLed worker 2, 1 run in 7)
    watchdog = _watchdog()
    line = "4242 (python (x)) {} 1 4242 1 0 -1 {} 127 0 0 0"
    assert not watchdog._exiting(line.format("S", 0x400000))  # asleep
    assert not watchdog._exiting(line.format("R", 0x400040))  # running
    assert watchdog._exiting(line.format("R", 0x400044))  # PF_EXITING: tearing down
    assert watchdog._exiting(line.format("D", 0x4))
    assert watchdog._exiting(line.format("Z", 0x400000))  # a zombie
    assert not watchdog._exiting("4242 (python")  # cut short: not known to be ending
    assert not watchdog._ending(-1)  # no such process
    assert not watchdog._ending(os.getpid())


def _ended_at_once(n):
    """``n`` processes ended (SIGKILL) and reaped before a watcher starts: as a watcher
    woken late finds the workers the launcher's clean-up ended along with the first."""
    import signal
    import subprocess
    import sys

    children = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
                for _ in range(n)]
    for child in children:
        child.send_signal(signal.SIGKILL)
        child.wait()
    return children


def test_a_watcher_that_wakes_late_names_the_worker_that_crashed(tmp_path):
    # woken after the launcher's clean-up had killed the others too (a loaded machine),
    # the watcher named "one of workers 1, 2, 3 ... ended without a word" although worker
    # 2's faulthandler file said it crashed (SIGSEGV): the clean-up leaves no such report
    import signal
    import subprocess
    import sys

    children = _ended_at_once(3)
    path = str(tmp_path / "bye")
    stack = 'Current thread 0x1 (most recent call first):\n  File "job.py", line 7 in work\n'
    with open(f"{path}.2", "w") as f:
        f.write("Fatal Python error: Segmentation fault\n\n" + stack)
    with open(f"{path}.3", "w") as f:
        f.write(stack)  # a SIGTERM of Open MPI's clean-up
    watcher = os.path.join(os.path.dirname(spmdlab.__file__), "_watchdog.py")
    pids = [f"{k}:{child.pid}" for k, child in enumerate(children, 1)]
    done = subprocess.run([sys.executable, watcher, "vm", "3", path] + pids,
                          capture_output=True, text=True, timeout=30)
    assert re.search(rf"### spmdlab: worker 2 of 3 \(vm, pid {children[1].pid}\) "
                     rf"crashed: Segmentation fault \(SIGSEGV\)", done.stderr), done.stderr
    assert "line 7 in work" in done.stderr and done.stderr.count("### spmdlab:") == 1
    # none crashed: every one of them, as before
    done = subprocess.run([sys.executable, watcher, "vm", "3", path] + pids,
                          capture_output=True, text=True, timeout=30)
    assert re.search(r"### spmdlab: one of workers 1, 2, 3 of 3 \(vm, pid [\d, ]+\) ended "
                     r"without a word", done.stderr), done.stderr


@pytest.mark.parametrize("layout", ["2", "3", "4", "2x2"])
def test_a_worker_sent_sigterm_by_kill_is_named_with_sigterm(layout):
    # kill -TERM of one worker at 3 or 4 workers: MPICH's launcher SIGKILLs the others at
    # once, the watcher woke after that and named "one of workers 1, 2, 3 ... ended
    # without a word" (worker 1's empty report) although worker 2's report said SIGTERM
    n = 2 if layout == "2" else 3 if layout == "3" else 4
    job = run_job(PROLOGUE + WATCHED + """
import os, subprocess
spmd_plus(1.0)
watched()
spmd_barrier()
def work():
    if spmd_index() == 2:
        time.sleep(0.3)
        subprocess.run(["kill", "-TERM", str(os.getpid())])
        time.sleep(10)
    spmd_plus(1.0)
work()
print("never reached", flush=True)
""", n, nodes=2 if layout == "2x2" else 1, timeout=40)
    assert job.returncode != 0 and "never reached" not in job.stdout
    named = re.search(rf"### spmdlab: worker 2 of {n} \(\S+, pid \d+\) ended by SIGTERM "
                      rf"\(sent by kill", job.stderr)
    if is_open_mpi() and not named:  # its clean-up sends SIGTERM: the group, if late
        named = re.search(rf"### spmdlab: one of workers [\d, ]*\b2\b[\d, ]* of {n} "
                          rf"\(\S+, pid [\d, ]+\) ended by SIGTERM", job.stderr)
    assert named, job.stderr
    assert re.search(r"line \d+ in work", job.stderr), job.stderr  # worker 2's stack
    assert job.stderr.count("### spmdlab:") == 1, job.stderr
    assert job.seconds < 20


def test_a_watcher_that_wakes_late_names_the_worker_sent_sigterm(tmp_path):
    # under MPICH's hydra the clean-up SIGKILLs the others (no report): a worker whose
    # report shows SIGTERM was the first, and is named alone; where the clean-up may send
    # SIGTERM itself (Open MPI), every one of them, with the earliest report's stack
    import signal
    import subprocess
    import sys

    children = _ended_at_once(3)
    path = str(tmp_path / "bye")
    stack = 'Current thread 0x1 (most recent call first):\n  File "job.py", line {} in work\n'
    for k in (1, 3):
        open(f"{path}.{k}", "w").close()  # SIGKILLed: the empty file of the start
    with open(f"{path}.2", "w") as f:
        f.write(stack.format(7))
    watcher = os.path.join(os.path.dirname(spmdlab.__file__), "_watchdog.py")
    pids = [f"{k}:{child.pid}" for k, child in enumerate(children, 1)]
    env = dict(os.environ, SPMDLAB_WATCHER_CLEANUP="SIGKILL")
    done = subprocess.run([sys.executable, watcher, "vm", "3", path] + pids, env=env,
                          capture_output=True, text=True, timeout=30)
    assert re.search(rf"### spmdlab: worker 2 of 3 \(vm, pid {children[1].pid}\) ended by "
                     rf"SIGTERM \(sent by kill", done.stderr), done.stderr
    assert "line 7 in work" in done.stderr and done.stderr.count("### spmdlab:") == 1
    # a clean-up that may send SIGTERM: the group, worker 3's earlier report shown (the
    # watcher has removed the files)
    for k, line in ((3, 5), (1, 9), (2, 7)):
        with open(f"{path}.{k}", "w") as f:
            f.write(stack.format(line))
        time.sleep(0.05)
    env.pop("SPMDLAB_WATCHER_CLEANUP")
    done = subprocess.run([sys.executable, watcher, "vm", "3", path] + pids, env=env,
                          capture_output=True, text=True, timeout=30)
    assert re.search(r"### spmdlab: one of workers 1, 2, 3 of 3 \(vm, pid [\d, ]+\) ended "
                     r"by SIGTERM", done.stderr), done.stderr
    assert "line 5 in work" in done.stderr, done.stderr


@pytest.mark.parametrize("nodes", [1, 2])
def test_a_killed_worker_is_named(nodes):
    # a SIGKILL (the OOM killer) leaves the worker no chance to speak, and MPICH's
    # launcher SIGKILLs the others at once: the host's watcher process names it
    job = run_job(PROLOGUE + WATCHED + """
import os, signal
spmd_plus(1.0)
if spmd_index() == 2:
    watched()
    time.sleep(0.3)
    os.kill(os.getpid(), signal.SIGKILL)
for i in range(100_000):
    spmd_plus(1.0)
    time.sleep(0.001)
""", 4 if nodes == 2 else 3, nodes=nodes, timeout=40)
    assert job.returncode != 0
    n = 4 if nodes == 2 else 3
    # on a loaded machine the watcher may wake after the clean-up began: then it names
    # the workers that were gone by then, worker 2 among them
    assert re.search(rf"### spmdlab: (worker 2|one of workers [\d, ]*\b2\b[\d, ]*) of "
                     rf"{n} \(\S+, pid [\d, ]+\) ended without a word: killed by a signal",
                     job.stderr), job.stderr
    assert job.stderr.count("ended without a word") == 1  # the clean-up is not reported
    assert job.seconds < 20


def test_the_watcher_is_silent_when_workers_end_on_purpose():
    job = run_job(PROLOGUE + """
spmd_plus(1.0)
if spmd_index() == 2:
    raise ValueError("named failure")
spmd_barrier()
""", 3)
    assert job.returncode != 0 and "ValueError: named failure" in job.stderr
    assert "ended without a word" not in job.stderr
    job = run_job(PROLOGUE + "spmd_plus(1.0)\n", 3)
    assert job.returncode == 0 and "ended without a word" not in job.stderr


@pytest.mark.parametrize("between", ["time.sleep(60)", "pass"])
def test_an_end_far_away_in_the_notices_tree_reaches_a_waiting_worker(between):
    # worker 4 is a neighbour of worker 2 alone in the tree the exit notices travel
    # (1 - 2 - 4, 1 - 3): worker 3's receive learns of its end through workers 2 and 1,
    # which compute meanwhile (their answering threads pass the notice on) or have
    # ended (and pass it on while they wait for the others)
    job = run_job(PROLOGUE + f"""
if spmd_index() == 3:
    spmd_receive(4)
elif spmd_index() == 4:
    sys.exit(3)
else:
    {between}
""", 4)
    assert job.returncode == 3, job.stderr
    assert "spmd_receive (worker 3 of 4): worker 4 finished the program (exit status 3)" \
        in job.stderr, job.stderr
    assert job.seconds < 30


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 7, 16, 100, 4096])
def test_the_exit_notices_tree_joins_every_worker_through_three_neighbours_at_most(size):
    from spmdlab._world import tree_neighbours

    near = [tree_neighbours(r, size) for r in range(size)]
    assert all(len(n) <= 3 and r not in n for r, n in enumerate(near))
    assert all(r in near[n] for r in range(size) for n in near[r])  # both ways
    hops, frontier = {0: 0}, [0]  # from worker 1, every worker within 2 log2 N hops
    while frontier:
        r = frontier.pop()
        for n in near[r]:
            if n not in hops:
                hops[n] = hops[r] + 1
                frontier.append(n)
    assert len(hops) == size and max(hops.values()) <= max(size - 1, 0).bit_length()


def test_collectives_after_a_caught_timeout_raise_spmdlabs_error():
    """(tester H) A collective that gave up (SpmdTimeoutError, caught) left its request
    started and waiting for the worker that did not come: every later collective of
    those workers raised MPI's "Persistent request ... is already active" (a bare
    mpi4py Exception), not an spmdlab error. They now raise SpmdPeerError at once,
    naming the wait that gave up, as after a worker that left."""
    job = run_job(PROLOGUE + """
from spmdlab import _env
k = spmd_index()
spmd_plus(1)
if k == 2:
    time.sleep(1.5)   # late: the others give up on it
    print("late")
else:
    _env.TIMEOUT = 0.3
    try:
        spmd_plus(1)
    except SpmdTimeoutError:
        print("timed out")
    _env.TIMEOUT = None
    for _ in range(2):
        try:
            spmd_plus(1)
        except SpmdPeerError as exc:
            print("lost", "no collective of these workers" in str(exc),
                  "SPMDLAB_TIMEOUT" in str(exc))
        except Exception as exc:
            print("other", type(exc).__name__, exc)
""", 3)
    assert job.stdout.count("timed out") == 2, job.stdout + job.stderr
    assert job.stdout.count("lost True True") == 4, job.stdout + job.stderr
    assert "other" not in job.stdout and "already active" not in job.stderr, job.stderr
    assert job.seconds < 30
