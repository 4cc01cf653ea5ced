"""DataQueue behaviour that shows only in whole jobs: exit-time delivery, misuse."""

import re

import pytest

from conftest import run_job

pytestmark = pytest.mark.mpi_skip  # these tests launch mpiexec themselves


@pytest.mark.parametrize("nodes", [1, 2])
def test_items_sent_in_the_last_lines_are_delivered(nodes):
    # at 2x2 this hung at exit once: MPICH's ch4:ucx lost exit notices received with a
    # wildcard-source receive (now one receive per worker)
    job = run_job("""
from spmdlab import *
q = DataQueue()
counts = {}
def count(item):
    sender, i = item
    counts[sender] = counts.get(sender, 0) + 1
    if i == 999:
        print(f"last from {sender} after {counts[sender]} items", flush=True)
q.after_each(count)
for i in range(1000):
    q.send((spmd_index(), i))
""", 4, nodes=nodes)
    assert job.returncode == 0, job.stderr
    for k in range(1, 5):
        assert f"last from {k} after 1000 items" in job.stdout


def test_collective_in_a_listener_ends_the_job_with_a_clear_error():
    job = run_job("""
import time
from spmdlab import *
q = DataQueue()
q.after_each(lambda item: spmd_plus(item))
q.send(1.0)
time.sleep(2)
""", 2)
    assert job.returncode != 0
    # the call and the worker named (the worker was not)
    assert "spmd_plus (worker 1 of 2): collectives cannot be called from a DataQueue " \
        "listener" in job.stderr, job.stderr


def test_collective_in_a_listener_handed_waiting_items_is_refused_too():
    # items already waiting are handed over by after_each itself, in the program's thread:
    # the listener's collective must be refused there too, not run as the program's
    # (seen under load: worker 2's item arrived before worker 1 registered its listener)
    job = run_job("""
import time
from spmdlab import *
q = DataQueue()
q.send(1.0)
if spmd_index() == 1:
    while q.queue_length < 2:
        time.sleep(0.01)
q.after_each(lambda item: spmd_plus(item))
time.sleep(2)
""", 2)
    assert job.returncode != 0
    assert "spmd_plus (worker 1 of 2): collectives cannot be called from a DataQueue " \
        "listener" in job.stderr, job.stderr


@pytest.mark.parametrize("queue", [False, True])
def test_waits_at_exit_name_the_late_worker(queue):
    """Exit notices and end markers: a slow worker is named once; with SPMDLAB_TIMEOUT
    the job ends with an error that names it instead of waiting for ever."""
    source = f"""
import time
from spmdlab import *
if {queue}:
    q = DataQueue()
if spmd_index() == 2:
    time.sleep(5)
"""
    job = run_job(source, 3, env={"SPMDLAB_STALL_WARNING": "1"})
    assert job.returncode == 0, job.stderr
    assert "still waiting for worker 2 after" in job.stderr
    job = run_job(source, 3, env={"SPMDLAB_TIMEOUT": "1.5"})
    assert job.returncode != 0
    assert "no answer from worker 2 after SPMDLAB_TIMEOUT=1.5 s" in job.stderr


def test_a_flood_from_every_worker_then_exit_is_delivered():
    """Every worker (the owner too) sends 10,000 items and the program ends at once.

    This took 93 s at 4 workers: a sender's MPI moves queued messages only inside its own
    MPI calls, and a finished worker waiting for end markers made none. The job timeout
    (well above the few seconds it takes now) is the hang guard."""
    job = run_job("""
from spmdlab import *
q = DataQueue()
counts = {}
def count(item):
    counts[item[0]] = counts.get(item[0], 0) + 1
    if sum(counts.values()) == 10_000 * spmd_size():
        print("delivered", sorted(counts.items()), flush=True)
q.after_each(count)
for i in range(10_000):
    q.send((spmd_index(), i))
""", 4, timeout=45)
    assert job.returncode == 0, job.stderr
    assert "delivered [(1, 10000), (2, 10000), (3, 10000), (4, 10000)]" in job.stdout


def test_flush_from_a_listener_ends_the_job_with_a_clear_error():
    job = run_job("""
import time
from spmdlab import *
q = DataQueue()
q.after_each(lambda item: q.flush())
q.send(1)
time.sleep(3)
""", 2, timeout=30)
    assert job.returncode != 0
    assert "called from a listener" in job.stderr


@pytest.mark.parametrize("n, nodes", [(3, 1), (4, 1), (4, 2)])
def test_a_listener_relaying_during_the_owners_exit_loses_nothing(n, nodes):
    """Worker 1's listener on queue A forwards every item to queue B owned by the last
    worker, while worker 1's program has already ended and the others keep sending to A.

    Items were lost (986-3,306 of 4,000 reached B) and the job often hung: worker 1's end
    markers went out before its listener's last relays, so the last worker stopped
    receiving while relays were still on their way. The end of the queues is now found by
    counting, over several rounds, what every worker has sent and received."""
    job = run_job("""
import time
from spmdlab import *
a = DataQueue()
b = DataQueue(owner=spmd_size())
got = []
def arrived(item):
    got.append(item)
    if len(got) == 2000 * (spmd_size() - 2):
        print("B received", len(got), flush=True)
b.after_each(arrived)
a.after_each(b.send)
if 1 < spmd_index() < spmd_size():
    time.sleep(0.2)  # worker 1's program has ended by now
    for i in range(2000):
        a.send((spmd_index(), i))
""", n, nodes=nodes, timeout=60)
    assert job.returncode == 0, job.stderr
    assert f"B received {2000 * (n - 2)}" in job.stdout, job.stdout + job.stderr


@pytest.mark.parametrize("nodes", [1, 2])
def test_flush_all_that_lasts_is_reported_and_ends_at_spmdlab_timeout(nodes):
    # the owner's listener holds every item until it is told to go on: flush_all says
    # once whose items it still waits for, then raises SpmdTimeoutError naming them (it
    # never waits in silence, and a listener that holds the queue does not delay that)
    job = run_job("""
import threading, time
from spmdlab import *
go = threading.Event()
q = DataQueue()
q.after_each(lambda item: go.wait(30))
spmd_barrier()  # no item comes before the listener (after_each would run it here)
q.send(spmd_index())
started = time.monotonic()
try:
    print("flushed", q.flush_all(), flush=True)
except SpmdTimeoutError as exc:
    print("TIMEOUT", exc, f"after {time.monotonic() - started:.1f} s", flush=True)
go.set()
# the owner raises after 1 s; the others reach the end of the program about then, so
# that its waits (SPMDLAB_TIMEOUT too) stay short
time.sleep(0.0 if spmd_index() == 1 else 1.2)
""", 4 if nodes == 2 else 2, nodes=nodes, timeout=120,
                  env={"SPMDLAB_TIMEOUT": "1", "SPMDLAB_STALL_WARNING": "0.5"})
    assert job.returncode == 0, job.stderr
    lines = job.stdout.splitlines()
    timeouts = [line for line in lines if line.startswith("TIMEOUT")]
    assert len(timeouts) == 1, job.stdout
    assert re.match(r"TIMEOUT DataQueue.flush_all \(worker 1 of \d\): the items of "
                    r"worker \d \(0 of 1 items\).* have not all arrived; gave up after "
                    r"SPMDLAB_TIMEOUT=1 s after (\d+\.\d) s$", timeouts[0]), timeouts[0]
    assert float(timeouts[0].split()[-2]) >= 1.0
    assert sum(line == "flushed True" for line in lines) == len(lines) - 1, job.stdout
    assert re.search(r"spmdlab: DataQueue.flush_all \(worker 1 of \d\): still waiting for "
                     r"the items of worker \d \(0 of 1 items\)", job.stderr), job.stderr


def test_a_poll_without_end_after_every_sender_finished_is_an_error():
    # worker 1 waits for an item that nobody is left to send: the others, at the end of
    # their programs, wait for worker 1 in turn; an error, not a hang. Items sent just
    # before a worker finished still arrive, and a thread of the owner's own that could
    # still send keeps the poll waiting.
    job = run_job("""
import math, threading, time
from spmdlab import *
q = PollableDataQueue()
if spmd_index() == 2:
    q.send("last words")
if spmd_index() == 1:
    assert q.poll(math.inf) == "last words"
    later = threading.Thread(target=lambda: (time.sleep(4), q.send("from a thread")))
    later.start()
    assert q.poll(math.inf) == "from a thread"
    later.join()
    try:
        q.poll(math.inf)
    except SpmdPeerError as exc:
        print("raised:", exc, flush=True)
""", 3)
    assert job.returncode == 0, job.stderr
    assert re.search(r"raised: PollableDataQueue.poll \(worker 1 of 3\): every other worker "
                     r"\(2, 3\) has finished the program", job.stdout), job.stdout


def test_a_poll_without_end_waits_for_an_item_behind_a_slow_listener():
    # worker 2 sends two items to a DataQueue whose listener takes 2.5 s each, then one
    # to the PollableDataQueue, and finishes: the item has arrived, but the receiver
    # thread runs the slow listener and takes it 5 s later. poll(math.inf) raised "no
    # item has come since, so none can" after 2 s; a listener of the owner's own that
    # relays to the queue kept it waiting in vain the same way
    job = run_job("""
import math, time
from spmdlab import *
slow, relay, q = DataQueue(), DataQueue(), PollableDataQueue()
slow.after_each(lambda item: time.sleep(2.5))
relay.after_each(lambda item: (time.sleep(3), q.send(("relayed", item))))
if spmd_index() == 2:
    slow.send(1)
    slow.send(2)
    time.sleep(0.1)
    q.send("behind the listener")
if spmd_index() == 1:
    print("got:", q.poll(math.inf), flush=True)
    relay.send("own")
    print("got:", q.poll(math.inf), flush=True)
""", 2, timeout=120)
    assert job.returncode == 0, job.stderr
    assert job.stdout.count("got:") == 2, job.stdout + job.stderr
    assert "got: behind the listener" in job.stdout
    assert "got: ('relayed', 'own')" in job.stdout


@pytest.mark.parametrize("nodes", [1, 2])
def test_a_poll_without_end_waits_for_relays_by_listeners_of_finished_workers(nodes):
    # worker 1 sends to worker 2's queue, whose listener relays to worker 3's, whose
    # listener relays to worker 1's PollableDataQueue, 2.5 s each: workers 2 to 4 have
    # finished their programs, so poll(math.inf) raised "no item has come since, so none
    # can" 2 s after it noticed, while the item was on its way through two listeners. It
    # asks the others for their counts now, and concludes only on two equal rounds; the
    # last poll, with nothing left anywhere, still raises
    job = run_job("""
import math, time
from spmdlab import *
to2, to3, q = DataQueue(owner=2), DataQueue(owner=3), PollableDataQueue()
to2.after_each(lambda item: (time.sleep(2.5), to3.send(item + " via 2")))
to3.after_each(lambda item: (time.sleep(2.5), q.send(item + " via 3")))
if spmd_index() == 1:
    to2.send("from 1")
    print("got:", q.poll(math.inf), flush=True)
    try:
        q.poll(math.inf)
    except SpmdPeerError as exc:
        print("raised:", exc, flush=True)
""", 4, nodes=nodes, timeout=120)
    assert job.returncode == 0, job.stderr
    assert "got: from 1 via 2 via 3" in job.stdout, job.stdout + job.stderr
    assert re.search(r"raised: PollableDataQueue.poll \(worker 1 of 4\): every other worker "
                     r"\(2, 3, 4\) has finished the program", job.stdout), job.stdout


@pytest.mark.parametrize("n", [1, 2])
def test_a_poll_without_end_on_a_queue_of_one_worker_is_an_error(n):
    # a job of one worker (or an spmd(1) block once the others have finished): nobody
    # else can send, so poll(math.inf) on an empty queue waited for ever
    job = run_job("""
import math
from spmdlab import *
for _ in spmd(1):
    q = PollableDataQueue()
    q.send("own")
    assert q.poll(math.inf) == "own"
    try:
        q.poll(math.inf)
    except SpmdPeerError as exc:
        print("raised:", exc, flush=True)
""", n, timeout=60)
    assert job.returncode == 0, job.stderr
    assert re.search(r"raised: PollableDataQueue.poll \(worker 1 of 1\): no other worker "
                     r"can send to it \(its scope has one worker", job.stdout), job.stdout
