"""Faults at the edges of the calls: a worker's allocation that fails while it packs its
value for a collective, a message that cannot be unpickled where it arrives, a collective
that fails in an atexit handler of the program's, a Ctrl-C of one worker at the end.

The MPI tests run with ``mpiexec -n N python -m pytest --with-mpi`` (N = 1, 2, 3, 4);
the job tests launch mpiexec themselves.
"""

import re

import numpy as np
import pytest

from spmdlab import (SpmdTypeError, spmd_broadcast, spmd_index, spmd_plus, spmd_receive,
                     spmd_reduce, spmd_send, spmd_send_receive, spmd_size)

from conftest import run_job


def _failing_allocation(monkeypatch, worker):
    """numpy.empty's next call raises MemoryError on ``worker`` (as an exhausted host
    would), the later ones allocate."""
    real = np.empty

    def empty(*args, **kwargs):
        monkeypatch.setattr(np, "empty", real)
        raise MemoryError("simulated: no memory left")

    if spmd_index() == worker:
        monkeypatch.setattr(np, "empty", empty)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("call", ["spmd_broadcast", "spmd_reduce"])
def test_an_allocation_that_fails_while_packing_raises_on_every_worker(call, monkeypatch):
    # spmd_broadcast's source and spmd_reduce's workers pack their array before the
    # agreement: a MemoryError there was raised on that worker alone, which went on to
    # its next collective while the others waited in this one (a mismatch, or a hang)
    n = spmd_size()
    # a size of its own: a message buffer recycled from an earlier call needs no np.empty
    size = {"spmd_broadcast": 300_001, "spmd_reduce": 300_007}[call]
    x = np.arange(size, dtype=np.float64) + spmd_index()
    with monkeypatch.context() as patched:
        _failing_allocation(patched, n)
        with pytest.raises(MemoryError) as caught:
            if call == "spmd_broadcast":
                spmd_broadcast(n, x)
            else:
                spmd_reduce(lambda a, b: a + b, x)
    text = str(caught.value)
    assert f"{call} (worker {spmd_index()} of {n})" in text, text
    assert "out of memory while packing the value to send" in text, text
    assert "simulated: no memory left" in text, text
    if spmd_index() != n:
        assert f"failed on another worker: worker {n}: " in text, text
    assert spmd_plus(1) == n  # in step: the next collective works


def _rebuild(value):
    if spmd_index() == 1:
        raise ValueError(f"cannot rebuild {value} on worker 1")
    return value


class Unrebuildable:
    """Pickled anywhere, made again anywhere but on worker 1 (a class worker 1 cannot
    import, a ``__setstate__`` that fails there)."""

    def __init__(self, value):
        self.value = value

    def __reduce__(self):
        return _rebuild, (self.value,)


@pytest.mark.mpi(min_size=2)
def test_a_message_that_cannot_be_unpickled_names_the_call_and_the_sender():
    # the receive raised the unpickler's bare ValueError, naming neither the call, nor
    # the worker, nor the one that sent it
    if spmd_index() == 2:
        spmd_send(Unrebuildable(5), 1, 3)
        spmd_send("next", 1, 3)
    if spmd_index() == 1:
        with pytest.raises(SpmdTypeError) as caught:
            spmd_receive(2, 3)
        assert str(caught.value).startswith(
            f"spmd_receive (worker 1 of {spmd_size()}): the message from worker 2 (tag 3) "
            "cannot be unpickled here: ValueError: cannot rebuild 5 on worker 1"), caught.value
        assert spmd_receive(2, 3) == "next"  # the next message is the next one
    assert spmd_plus(1) == spmd_size()


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("large", [False, True])
def test_a_message_that_cannot_be_unpickled_in_a_send_receive(large):
    # a ring: worker n sends worker 1 what cannot be made again there; a large array
    # leaves worker 1 by rendezvous while it receives, and still arrives
    n, k = spmd_size(), spmd_index()
    mine = np.full(300_000 if large else 3, float(k))
    x = Unrebuildable(k) if k == n else mine
    right, left = k % n + 1, (k - 2) % n + 1
    if k == 1:
        with pytest.raises(SpmdTypeError) as caught:
            spmd_send_receive(right, left, x, 4)
        assert str(caught.value).startswith(
            f"spmd_send_receive (worker 1 of {n}): the message from worker {left} (tag 4) "
            "cannot be unpickled here: ValueError"), caught.value
    else:
        got = spmd_send_receive(right, left, x, 4)
        np.testing.assert_array_equal(got, np.full(mine.shape, float(left)))
    assert spmd_plus(1) == n


@pytest.mark.mpi_skip
def test_a_collective_that_fails_in_an_atexit_handler_fails_the_job():
    # worker 2 calls a collective in an atexit handler the others never make: it raised
    # SpmdPeerError there, which Python only prints, and the job ended with status 0
    job = run_job("""
import atexit
from spmdlab import *
def at_end():
    if spmd_index() == 2:
        spmd_plus(1)
atexit.register(at_end)
spmd_plus(1)
print("body done", flush=True)
""", 2, timeout=60)
    assert job.returncode != 0, job.stderr
    assert job.stdout.count("body done") == 2, job.stdout
    assert "### spmdlab: raised in an atexit handler" in job.stderr, job.stderr
    assert "### spmdlab: worker 2 of 2" in job.stderr, job.stderr
    assert "SpmdPeerError: spmd_plus (worker 2 of 2): worker 1 finished" in job.stderr, \
        job.stderr
    assert job.seconds < 30


@pytest.mark.mpi_skip
def test_a_ctrl_c_of_one_worker_waiting_at_the_end_fails_the_job():
    # worker 2 has finished and waits for worker 1 at the end of the program when a
    # SIGINT reaches it alone: the KeyboardInterrupt stopped spmdlab's exit handshake
    # half-way, Python only printed it, the job ended with status 0 and the watcher said
    # worker 2 was killed without a word
    job = run_job("""
import os, signal, threading, time
from spmdlab import *
spmd_barrier()
if spmd_index() == 1:
    time.sleep(4)
else:
    def interrupt():
        time.sleep(1)
        os.kill(os.getpid(), signal.SIGINT)
    threading.Thread(target=interrupt, daemon=True).start()
print(f"body done {spmd_index()}", flush=True)
""", 2, timeout=60)
    assert job.returncode != 0, job.stderr
    assert "body done 2" in job.stdout, job.stdout  # (worker 1's job is ended: no line)
    assert "### spmdlab: the end of the program (waiting for the other workers to finish) " \
           "was interrupted" in job.stderr, job.stderr
    assert "### spmdlab: worker 2 of 2" in job.stderr and "KeyboardInterrupt" in job.stderr
    assert "ended without a word" not in job.stderr, job.stderr
    assert job.seconds < 30


@pytest.mark.mpi_skip
def test_a_queue_item_that_cannot_be_unpickled_names_the_queue_and_the_sender():
    # the receiver thread's failure ended the job with the unpickler's bare ValueError
    job = run_job("""
import time
from spmdlab import *
def rebuild(value):
    if spmd_index() == 1:
        raise ValueError(f"cannot rebuild {value}")
    return value
class Unrebuildable:
    def __reduce__(self):
        return rebuild, (5,)
q = DataQueue()
q.after_each(print)
if spmd_index() == 2:
    q.send(Unrebuildable())
for i in range(100):
    spmd_plus(1)
    time.sleep(0.05)
""", 2, timeout=60)
    assert job.returncode != 0, job.stderr
    assert "### spmdlab: worker 1 of 2" in job.stderr, job.stderr
    assert "### spmdlab.errors.SpmdTypeError: DataQueue (worker 1 of 2): an item sent by " \
           "worker 2 cannot be unpickled here: ValueError: cannot rebuild 5" in job.stderr, \
        job.stderr
    assert job.seconds < 30


@pytest.mark.mpi_skip
def test_a_collective_after_a_caught_timeout_raises_a_clear_error():
    # a program that catches SpmdTimeoutError (or a Ctrl-C) and goes on: the wait left
    # the agreement's persistent request active, and the next collective raised mpi4py's
    # bare "Invalid MPI_Request ... Persistent request ... is already active"
    job = run_job("""
import time
from spmdlab import *
spmd_barrier()
try:
    if spmd_index() == 2:
        time.sleep(3)
    spmd_plus(1)
except SpmdTimeoutError:
    print(f"worker {spmd_index()} timed out", flush=True)
try:
    spmd_plus(2)
except SpmdPeerError as exc:
    print(f"worker {spmd_index()} next: {exc}", flush=True)
""", 2, timeout=60, env={"SPMDLAB_TIMEOUT": "1"})
    out = job.stdout + job.stderr
    assert "worker 1 timed out" in job.stdout, out
    assert "worker 1 next: a collective at " in job.stdout, out
    assert "(worker 1 of 2): this worker's wait in spmd_plus was interrupted " \
           "(SpmdTimeoutError after SPMDLAB_TIMEOUT) before the call completed, so no " \
           "collective of these " \
           "workers can complete any more" in job.stdout, out
    assert "Invalid MPI_Request" not in out, out
    assert job.seconds < 30


@pytest.mark.mpi_skip
def test_a_mismatch_with_a_worker_that_has_left_does_not_hang():
    # worker 2's Ctrl-C, caught, leaves its agreement request started; worker 1's next
    # collective pairs with it, differs, and gathers the workers' reports to say how:
    # that gather waited inside MPI for worker 2, which had finished, for ever
    job = run_job("""
import os, signal, threading, time
import numpy as np
from spmdlab import *
spmd_barrier()
if spmd_index() == 2:
    threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
    try:
        spmd_plus(1.0)
    except KeyboardInterrupt:
        print("worker 2 interrupted", flush=True)
else:
    time.sleep(2)
    spmd_cat(np.ones(3))
""", 2, timeout=40)
    assert "worker 2 interrupted" in job.stdout, job.stdout + job.stderr
    assert job.returncode != 0, job.stderr
    assert "SpmdPeerError: spmd_cat (worker 1 of 2): worker 2 finished the program" in \
        job.stderr, job.stderr
    assert job.seconds < 30


@pytest.mark.mpi_skip
@pytest.mark.parametrize("call", ["gather", "redistribute", "reshape"])
def test_a_host_copy_that_fails_in_a_codistributed_exchange_ends_the_job(call):
    # the copy of a local part to contiguous host memory (a strided part's, a device's)
    # was made before the exchange's guard: a MemoryError there, caught by the program,
    # left worker 2 going on to spmd_plus while the others waited in the exchange for ever
    job = run_job(f"""
import numpy as np
import spmdlab.darray as da
from spmdlab import spmd_index, spmd_plus
from spmdlab.darray import _exchange
D = da.distribute(np.arange(48.0).reshape(8, 6))
if spmd_index() == 2:
    class NoRoom:
        def __getattr__(self, name):
            return getattr(np, name)
        def ascontiguousarray(self, *args, **kwargs):
            raise MemoryError("simulated: no room for the host copy")
    _exchange.np = NoRoom()
try:
    if {call!r} == "gather":
        D.gather()
    elif {call!r} == "redistribute":
        D.redistribute(axis=1)
    else:
        D.reshape(6, 8)
except MemoryError:
    print("caught on worker", spmd_index(), flush=True)
print("next", spmd_plus(1.0), flush=True)
""", 3, timeout=40)
    assert job.returncode != 0, job.stdout + job.stderr
    assert "(worker 2 of 3) failed after every worker had agreed to it" in job.stderr, \
        job.stderr
    assert "MemoryError: simulated: no room for the host copy" in job.stderr, job.stderr
    assert "next" not in job.stdout, job.stdout
    assert job.seconds < 30


@pytest.mark.mpi_skip
def test_a_scan_along_the_split_axis_that_fails_on_one_worker_ends_the_job():
    # np.cumsum along the split axis: the workers agree, then take turns (a broadcast
    # each); a MemoryError in worker 2's own scan, caught by the program, left it going
    # on to spmd_plus while the others waited in the turns' broadcast for ever
    job = run_job("""
import numpy as np
import spmdlab.darray as da
from spmdlab import spmd_index, spmd_plus
from spmdlab.darray import _numpy
D = da.distribute(np.arange(48.0).reshape(8, 6))
if spmd_index() == 2:
    class NoRoom:
        def __getattr__(self, name):
            return getattr(np, name)
        def cumsum(self, *args, **kwargs):
            raise MemoryError("simulated: no room for the scan")
    _numpy.np = NoRoom()
try:
    np.cumsum(D, axis=0)
except MemoryError:
    print("caught on worker", spmd_index(), flush=True)
print("next", spmd_plus(1.0), flush=True)
""", 3, timeout=40)
    assert job.returncode != 0, job.stdout + job.stderr
    assert "numpy.cumsum (worker 2 of 3) failed after every worker had agreed to it" in \
        job.stderr, job.stderr
    assert "MemoryError: simulated: no room for the scan" in job.stderr, job.stderr
    assert "next" not in job.stdout, job.stdout
    assert job.seconds < 30


@pytest.mark.mpi_skip
def test_the_buffers_of_a_wait_interrupted_in_a_gather_are_kept():
    # a Ctrl-C caught while a codistributed gather waited left its request active in MPI,
    # which holds no reference to the result's buffer: freed with the call's frame, it
    # took the others' blocks later ("malloc(): unsorted double linked list corrupted")
    job = run_job("""
import gc, weakref
import numpy as np
import spmdlab.darray as da
from spmdlab import _wait, spmd_index, spmd_plus
from spmdlab.darray import _exchange
D = da.distribute(np.arange(48.0).reshape(8, 6))
if spmd_index() == 2:
    made = []
    class Recording:
        def __getattr__(self, name):
            return getattr(np, name)
        def empty(self, *args, **kwargs):
            made.append(np.empty(*args, **kwargs))
            _wait.wait_body = interrupted  # the next wait: the gather's data
            return made[-1]
    def interrupted(request, scope, call, *args, keep=None, **kwargs):
        exc = KeyboardInterrupt()  # a Ctrl-C as the wait begins, as the wait takes it
        _wait.interrupted_wait(request, scope, call, exc, True, keep)
        raise exc
    _exchange.np = Recording()
result = None
try:
    D.gather()
except KeyboardInterrupt:
    result = weakref.ref(made.pop())
if result is not None:  # (the frames of the call are gone with the exception)
    gc.collect()
    print("the result's buffer is", "kept" if result() is not None else "freed", flush=True)
    try:
        spmd_plus(1.0)
    except Exception as exc:
        print(type(exc).__name__, str(exc).split(":")[0], flush=True)
""", 2, timeout=40)
    assert "the result's buffer is kept" in job.stdout, job.stdout + job.stderr
    # the interrupted wait lost the workers' collectives: the next one says so at once
    assert "SpmdPeerError a collective at" in job.stdout, job.stdout + job.stderr
    assert job.seconds < 30


@pytest.mark.mpi_skip
def test_a_ctrl_c_caught_at_a_shared_memory_fence_does_not_hang():
    # a Ctrl-C caught while worker 2 waited at the first fence of a shared-memory
    # reduction: its request was not the agreement's, so the scope went on as usable;
    # worker 1 waited at the second fence, which worker 2 never reached, and worker 2 in
    # its next collective: a hang. Now that next collective raises SpmdPeerError.
    job = run_job("""
import time
import numpy as np
from spmdlab import _shm, _wait, spmd_index, spmd_plus
x = np.ones(100_000)  # 800 kB: shared memory on one node
spmd_plus(x)
if spmd_index() == 1:
    runs = _shm._runs
    def late_runs(*args):
        time.sleep(1)  # worker 2 waits at the first fence meanwhile
        return runs(*args)
    _shm._runs = late_runs
else:
    armed = []
    class Fenced:
        def __getattr__(self, name):
            return getattr(_wait, name)
        def wait(self, *args, **kwargs):
            armed.append(True)
            return _wait.wait(*args, **kwargs)
    def interrupting(real):
        def waiting(*args, **kwargs):
            if armed:
                armed.clear()
                raise KeyboardInterrupt  # a Ctrl-C at the fence
            return real(*args, **kwargs)
        return waiting
    _shm._wait = Fenced()
    _wait.spin, _wait._wait_in_mpi = interrupting(_wait.spin), interrupting(_wait._wait_in_mpi)
try:
    spmd_plus(x)
except KeyboardInterrupt:
    print("worker 2 interrupted", flush=True)
spmd_plus(1.0)
""", 2, timeout=40, env={"SPMDLAB_TREE_ABOVE": "4"})
    assert "worker 2 interrupted" in job.stdout, job.stdout + job.stderr
    assert job.returncode != 0, job.stderr
    assert re.search(r"SpmdPeerError: a collective at \S+:\d+ \(worker 2 of 2\): this "
                     r"worker's wait in spmd_plus was interrupted \(KeyboardInterrupt\)",
                     job.stderr), job.stderr
    assert job.seconds < 30
