"""The workers: communicators, the current scope, waiting, and ending the job cleanly.

spmdlab never talks on a communicator the user can see: collectives and point-to-point
use a private duplicate of COMM_WORLD, and a second duplicate carries the notices that a
worker has reached the end of the program. Every blocking wait goes through ``wait``,
which notices when a worker the call needs has already left (so a collective that can
never complete raises instead of hanging) and honours ``SPMDLAB_TIMEOUT``.

An uncaught exception on any worker prints the worker's number and traceback and aborts
the whole MPI job, so the other workers never hang at a later collective or at exit.
"""

import atexit
import collections
import os
import socket
import subprocess
import sys
import tempfile
import threading
from typing import Any
import time
import traceback

from mpi4py import MPI

from . import _env
from .errors import SpmdError, SpmdPeerError, SpmdTimeoutError

_EXIT_TAG = 1
_ASK_TAG = 2  # "which call are you waiting in?", sent when a wait times out
_HERE_TAG = 3  # the answer: the call this worker waits in
CTS_TAG = 4  # "clear to send": a receiver is ready for a large array (see p2p)


class Scope:
    """The workers collectives run over: the world, or a region on its first n workers."""

    def __init__(self, comm, world_ranks):
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.index = self.rank + 1
        self.world_ranks = world_ranks  # scope rank -> world rank
        self.regions = {}  # n -> Scope on this scope's first n workers (None: not a member)
        self._exchange = None
        self._node = None
        self.arena = None  # shared-memory windows, made on first use (see _shm)
        self.next_queue_tag = 1  # MPI tag of the next DataQueue made in this scope
        self.self_sends = {}  # tag -> messages this worker sent itself, not yet received

    @property
    def exchange(self):
        if self._exchange is None:
            from ._agree import Exchange

            self._exchange = Exchange(self.comm)
        return self._exchange

    @property
    def node(self):
        """The workers of this scope on this worker's node (shared memory), in scope
        order. Collective on first use: made inside collective calls only."""
        if self._node is None:
            self._node = self.comm.Split_type(MPI.COMM_TYPE_SHARED, key=self.rank)
        return self._node

    def who(self):
        return f"worker {self.index} of {self.size}"


_world_comm = MPI.COMM_WORLD
RANK = _world_comm.Get_rank()
SIZE = _world_comm.Get_size()
# Made on first use by ``_start`` (importing spmdlab does no MPI communication, so a
# program that imports it on some workers only does not hang):
WORLD = None  # the world scope, on a private duplicate of COMM_WORLD
_ctl = None  # a second duplicate: the notices that a worker has finished the program
# With more workers than cores a waiting worker must give its core away at once, or the
# worker it waits for may not run until the scheduler's time slice ends (milliseconds).
OVERSUBSCRIBED = False
_stack: list = []  # the scopes entered: the world, then spmd(n) regions
SCOPES: list = []  # every scope made so far (regions add theirs)
_exited: set = set()  # world ranks known to have reached the end of the program
# The ids of the threads running a DataQueue listener now: the receiver thread, or the
# program's when after_each hands over items already waiting. Collectives look at the
# set only when it is not empty, so the check costs next to nothing; adding and removing
# an id are single operations under the GIL, so no lock is needed. LISTENER is the
# receiver thread's id.
listener_running: set = set()
LISTENER = None


def refuse_in_listener(call):
    """Raise if a DataQueue listener, in whatever thread it runs, calls a collective."""
    if threading.get_ident() in listener_running:
        raise SpmdError(f"{call}: collectives cannot be called from a DataQueue listener "
                        f"(it runs beside the program, not in step with it)")


def current():
    """The innermost scope (a ``spmd(n)`` region, else the world). The first call on a
    worker starts spmdlab there (collective: every worker's first spmdlab call)."""
    if not _stack:
        _start()
    return _stack[-1]


def started():
    return WORLD is not None


def _start():
    """Duplicate COMM_WORLD twice and post the exit-notice receives.

    Nonblocking duplicates, waited for with a report: a worker whose first spmdlab call
    the others never make says so after SPMDLAB_STALL_WARNING seconds (and raises after
    SPMDLAB_TIMEOUT) instead of hanging without a word.
    """
    global WORLD, _ctl, OVERSUBSCRIBED, _exit_reqs
    if SIZE == 1:
        comm, ctl = _world_comm.Dup(), _world_comm.Dup()
    else:
        comm, first = _world_comm.Idup()
        ctl, second = _world_comm.Idup()
        wait_for_workers("its first spmdlab call: waiting for every other worker's first "
                         "spmdlab call", lambda: [] if MPI.Request.Testall(
                             [first, second]) else [r for r in range(SIZE) if r != RANK])
    _ctl = ctl
    if SIZE > 1 and MPI.Query_thread() >= MPI.THREAD_MULTIPLE:
        _start_answering()
    if SIZE > 1:
        _exit_reqs = [MPI.REQUEST_NULL if r == RANK else
                      _ctl.Irecv([memoryview(_exit_bufs)[r:r + 1], MPI.BYTE], r, _EXIT_TAG)
                      for r in range(SIZE)]
    world = Scope(comm, list(range(SIZE)))
    if SIZE > 1:
        places = world.comm.allgather((socket.gethostname(), os.getpid()))
        OVERSUBSCRIBED = _oversubscribed(places)
        if _env.WATCHDOG is not False:
            _start_watchdog(places)
    WORLD = world
    _stack.append(world)
    SCOPES.append(world)


def _oversubscribed(places):
    """More workers on this host than cores this process may use.

    Counted by host name (``places``: every worker's (host, pid)), not by MPI's node-local
    communicator: nodes simulated on one machine (MPICH's MPIR_CVAR_NUM_CLIQUES) share
    its cores all the same.
    """
    host = socket.gethostname()
    workers = sum(1 for h, _ in places if h == host)
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return workers > cores


_goodbye_path = None  # this host's goodbye file, read by the watcher (see _watchdog)


def _start_watchdog(places):
    """The first worker of each host starts the watcher of the host's workers."""
    global _goodbye_path
    if not hasattr(os, "pidfd_open"):  # Linux 5.3 and Python 3.9 or later only
        return
    host = socket.gethostname()
    mine = [(k, pid) for k, (h, pid) in enumerate(places, 1) if h == host]
    folder = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    _goodbye_path = os.path.join(folder, f"spmdlab-{mine[0][1]}.bye")
    if mine[0][0] != RANK + 1:
        return
    try:
        os.close(os.open(_goodbye_path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_watchdog.py")
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("PMI_", "PMIX_", "OMPI_", "HYDRA_", "MPIR_"))}
        subprocess.Popen([sys.executable, "-S", script, host, str(SIZE), _goodbye_path] +
                         [f"{k}:{pid}" for k, pid in mine], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, start_new_session=True, env=env,
                         close_fds=True)
    except OSError:  # no watcher: a killed worker goes unnamed, nothing else changes
        _goodbye_path = None


def _say_goodbye(kind):
    """Tell this host's watcher that this worker ends on purpose (``exit``, ``abort``)."""
    if _goodbye_path is None or os.getpid() != _PID:
        return
    try:
        fd = os.open(_goodbye_path, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, f"{RANK + 1} {kind}\n".encode())
        finally:
            os.close(fd)
    except OSError:
        pass


def push(scope):
    _stack.append(scope)


def pop(scope):
    if _stack[-1] is not scope:  # pragma: no cover - guarded by region's try/finally
        raise RuntimeError("spmdlab: region scopes closed out of order")
    _stack.pop()


# One receive posted per other worker for its exit notice (from ``_start``), so that a
# blocked wait can wake on it. Never one receive from MPI.ANY_SOURCE: MPICH's ch4:ucx
# device loses messages when a wildcard nonblocking receive is matched both in shared
# memory and on the network (seen with workers on two nodes; tests/test_queue_jobs.py).
_exit_bufs = bytearray(max(SIZE, 1))
_exit_reqs: list = []


def _all_exited():
    return len(_exited) >= SIZE - 1


def _poll_exits():
    if not _all_exited():
        done = MPI.Request.Testsome(_exit_reqs)
        if done:
            _exited.update(done)


# A worker's exit notice travels on its own communicator and can overtake that worker's
# last messages: before concluding that a call can never complete, keep testing this long.
_EXIT_GRACE = 2.0


def _settles(done):
    """Whether ``done()`` comes true within the grace period after a peer's exit.

    No grace after a failed exit (a non-zero status): the job ends with it anyway."""
    failed = any(_exit_bufs[r] for r in _exited)
    deadline = time.monotonic() + (0.0 if failed else _EXIT_GRACE)
    while True:
        result = done()
        if result:
            return result
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.0005)


def _check(scope, call, needed, started, any_of, collective=False):
    _poll_exits()
    gone = [r for r in needed if r in _exited]
    if gone and (not any_of or len(gone) == len(needed)):
        workers = ", ".join(str(scope.world_ranks.index(r) + 1) for r in gone)
        plural = "s" if len(gone) > 1 else ""
        statuses = {_exit_bufs[r] for r in gone} - {0}
        how = f" (exit status {', '.join(map(str, sorted(statuses)))})" if statuses else ""
        error = SpmdPeerError(
            f"{call} ({scope.who()}): worker{plural} {workers} finished the program{how} "
            f"without making the matching call, so this call can never complete; every "
            f"worker must make the same spmdlab calls in the same order")
        error.status = max(statuses) if statuses else None
        raise error
    if _env.TIMEOUT is not None and time.monotonic() - started > _env.TIMEOUT:
        if collective:
            text = _where_everyone_is(scope)
        else:
            text = f"no message from {_workers_text([scope.world_ranks.index(r) for r in needed])}"
        raise SpmdTimeoutError(
            f"{call} ({scope.who()}): {text}; gave up after "
            f"SPMDLAB_TIMEOUT={_env.TIMEOUT:g} s")


# -- where every worker is now ------------------------------------------------------------
# A thread of spmdlab's on every worker answers "where are you?" from the others: the
# program thread's current line (or the spmdlab call it waits in) and its last collective.
# A collective that has waited SPMDLAB_STALL_WARNING seconds asks, and says who has not
# arrived and where each of them is; a SPMDLAB_TIMEOUT error carries the same report.

_PROGRAM = threading.get_ident()  # the program thread (the one that imported spmdlab)
waiting_in = None  # (call, scope) while the program thread waits in a spmdlab call
_answers: list = []  # answers in flight (kept alive until sent)
_answering = None  # the answering thread
_stop_answering = False


def _where():
    """This worker's answer: ``waits|call|n|site`` or ``runs|file:line in f()|n|last``."""
    from ._agree import call_site_of

    frame = sys._current_frames().get(_PROGRAM)
    scope = _stack[-1] if _stack else None
    ex = scope._exchange if scope is not None else None
    count, last = (ex.calls, ex.last) if ex is not None else (0, "none")
    state = waiting_in
    if state is not None:
        return f"waits|{state[0]}|{count}|{call_site_of(frame)}"
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame = frame.f_back  # inside spmdlab but not waiting: the user's line
    if frame is None:
        return f"runs|?|{count}|{last}"
    code = frame.f_code
    return f"runs|{_relative(code.co_filename)}:{frame.f_lineno} in {code.co_name}()|" \
        f"{count}|{last}"


_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _relative(path):
    try:
        relative = os.path.relpath(path)
    except ValueError:
        return path
    return path if relative.startswith(os.pardir) else relative


def _answer_questions():
    """Answer every worker that asked where this one is."""
    status = MPI.Status()
    while True:
        message = _ctl.Improbe(MPI.ANY_SOURCE, _ASK_TAG, status)
        if message is None:
            break
        message.Recv(bytearray(1))
        answer = _where().encode()[:400]
        with _answer_lock:  # the answering thread, or a wait that asks in turn
            _answers[:] = [(r, b) for r, b in _answers if not r.Test()]
            _answers.append((_ctl.Isend(answer, status.Get_source(), _HERE_TAG), answer))


_answer_lock = threading.Lock()


def _answer_forever():
    reported = None
    while not _stop_answering:
        try:
            _answer_questions()
            state = waiting_in
            if state is not None and state is not reported and _env.STALL_WARNING and \
                    time.monotonic() - state[2] > _env.STALL_WARNING:
                reported = state
                stall_report(state[1], state[0], time.monotonic() - state[2])
        except Exception:  # MPI is finalizing under it: nothing left to answer
            return
        _wake.wait(0.05)


def _start_answering():
    global _answering
    _answering = threading.Thread(target=_answer_forever, name="spmdlab-where", daemon=True)
    _answering.start()


_wake = threading.Event()


def _stop_answering_thread():
    global _stop_answering
    _stop_answering = True
    _wake.set()
    if _answering is not None and _answering is not threading.current_thread():
        _answering.join()


_asks: list = []  # questions in flight (kept alive until sent)


_asking = threading.Lock()  # one question round at a time (the answers share a tag)


def _who_is_where(scope, patience=2.0):
    """Ask the scope's other workers where they are; returns ``({world rank: answer},
    [world ranks that did not answer and have not finished])``."""
    with _asking:
        return _ask(scope, patience)


def _ask(scope, patience):
    others = [r for r in scope.world_ranks if r != RANK]
    _asks[:] = [r for r in _asks if not r.Test()]
    _asks.extend(_ctl.Isend(bytearray(1), r, _ASK_TAG) for r in others)
    answers = {}
    status = MPI.Status()
    deadline = time.monotonic() + patience
    while len(answers) < len(others) and time.monotonic() < deadline:
        _answer_questions()  # others may be asking at the same time
        message = _ctl.Improbe(MPI.ANY_SOURCE, _HERE_TAG, status)
        if message is None:
            time.sleep(0.001)
            continue
        buf = bytearray(status.Get_count(MPI.BYTE))
        message.Recv(buf)
        if status.Get_source() in others:
            answers[status.Get_source()] = buf.decode(errors="replace")
    late = [r for r in others if r not in answers and r not in _exited]
    return answers, late


def _where_everyone_is(scope):
    """The report of a stalled collective: who has not arrived, and where each is."""
    answers, late = _who_is_where(scope)
    mine = _where().split("|")
    arrived, away = [], []
    for rank, answer in sorted(answers.items()):
        k = scope.world_ranks.index(rank) + 1
        state, where, count, extra = (answer.split("|") + ["", "", ""])[:4]
        if state == "waits" and count == mine[2] and where == mine[1]:
            arrived.append(k)
        elif state == "waits":
            away.append(f"worker {k} waits in {where} (collective #{count}) at {extra}")
        else:
            away.append(f"worker {k} is at {where}, not in a spmdlab call (its last "
                        f"collective: #{count} {extra})")
    for rank in late:
        away.append(f"worker {scope.world_ranks.index(rank) + 1} does not answer (its "
                    f"Python is blocked, in C code that holds the GIL or in a system call)")
    parts = away or ["every worker has arrived (the data is still moving)"]
    if arrived:
        parts.append(f"{_workers_text([k - 1 for k in arrived])} "
                     f"{'waits' if len(arrived) == 1 else 'wait'} here too")
    return "; ".join(parts)


def stall_report(scope, call, elapsed):
    """Say, on stderr, that ``call`` has waited ``elapsed`` seconds, and why."""
    from ._agree import call_site_of

    text = _where_everyone_is(scope)
    count = scope._exchange.calls if scope._exchange is not None else 0
    site = call_site_of(sys._current_frames().get(_PROGRAM))
    sys.stderr.write(f"spmdlab: {call} ({scope.who()}, collective #{count} at "
                     f"{site}) has waited {elapsed:.0f} s: {text}; still waiting "
                     f"(SPMDLAB_STALL_WARNING={_env.STALL_WARNING:g} s; SPMDLAB_TIMEOUT "
                     f"turns the wait into an error)\n")
    sys.stderr.flush()


PROFILE: Any = None  # the running spmdlab.profile (it adds the data waits to its record)


def wait(request, scope, call):
    """Wait for ``request`` of a collective over ``scope``; raise if it can never complete."""
    if PROFILE is not None:
        start = time.perf_counter()
        wait_body(request, scope, call)
        PROFILE.data(time.perf_counter() - start)
        return
    wait_body(request, scope, call)


def wait_body(request, scope, call):
    """``wait`` itself (the agreement step calls it: its wait is not data)."""
    test = request.Test
    for _ in range(16):  # most collectives finish within a few microseconds
        if test():
            return
    if _env.TIMEOUT is not None or OVERSUBSCRIBED:
        spin(test, scope, call, collective=True)
        return
    global waiting_in
    waiting_in = (call, scope, time.monotonic())  # for the stall report (another thread)
    try:
        _wait_in_mpi(request, scope, call)
    finally:
        waiting_in = None


def _wait_in_mpi(request, scope, call):
    # Let MPI wait (it spins and yields the core as it sees fit), waking on an exit notice.
    needed = [r for r in scope.world_ranks if r != RANK]
    while not _all_exited():
        index = MPI.Request.Waitany([request] + _exit_reqs)
        if index == 0:
            return
        _exited.add(index - 1)
        if any(r in _exited for r in needed):
            if _settles(request.Test):
                return
            _check(scope, call, needed, 0.0, False)
    # Every other worker's exit notice has arrived (perhaps during an earlier wait): the
    # call completes now or never.
    if not _settles(request.Test):
        _check(scope, call, needed, 0.0, False)


def spin(done, scope, call, needed=None, any_of=False, collective=False):
    """Call ``done()`` until it returns something true, checking on the other workers.

    Raises SpmdPeerError when a worker in ``needed`` (world ranks; default: the rest of
    the scope) has finished the program (with ``any_of``: when all of them have), and
    SpmdTimeoutError after ``SPMDLAB_TIMEOUT`` seconds. Waits spin, then yield the core
    (so that more workers than cores still progress), and sleep only after a second.
    """
    global waiting_in
    started = time.monotonic()
    waiting_in = (call, scope, started)  # for the stall report (another thread)
    try:
        return _spin(done, scope, call, needed, any_of, collective, started)
    finally:
        waiting_in = None


# Without more workers than cores, a wait polls this long before it starts yielding its
# core at each poll: giving the core away costs a time slice whenever anything else can
# run (another program on the node), far more than a message takes to arrive.
_POLL_BEFORE_YIELDING = 0.002


def _spin(done, scope, call, needed, any_of, collective, started):
    spins = 0
    polling = not OVERSUBSCRIBED
    while True:
        result = done()
        if result:
            return result
        spins += 1
        if polling:
            if spins % 64 or time.monotonic() - started < _POLL_BEFORE_YIELDING:
                continue
            polling = False
        os.sched_yield()
        if spins % 256 == 0:
            if needed is None:
                needed = [r for r in scope.world_ranks if r != RANK]
            try:
                _check(scope, call, needed, started, any_of, collective)
            except SpmdPeerError:
                result = _settles(done)  # sent (or joined) just before its worker left
                if result:
                    return result
                raise
            if time.monotonic() - started > 1.0:
                time.sleep(0.0005)


# -- nonblocking sends still in flight (point-to-point and queues) ----------------------


class Sends:
    """Every nonblocking send of this worker still in flight, with the buffer it reads.

    One tracker for spmd_send and DataQueue items: a buffer is kept alive until its send
    completes, and calling ``in_flight`` (the queues' receiver thread does, often) gives
    MPI the sender-side progress that a message needs (MPI moves a message only inside
    an MPI call of its sender). Thread-safe: a DataQueue listener may send too.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._items = collections.deque()  # (request, buffer, world rank), oldest first

    def track(self, request, buf, world_rank):
        with self._lock:
            self._prune()
            if not request.Test():
                self._items.append((request, buf, world_rank))

    def done(self, request):
        """Whether ``request`` (a tracked send) has completed. MPI forbids two threads to
        test one request at once: every test of a tracked send goes through this lock."""
        with self._lock:
            return request.Test()

    def _prune(self):
        items = self._items
        while items and items[0][0].Test():  # sends complete about in order
            items.popleft()

    def in_flight(self):
        """How many sends have not completed (tests the oldest ones)."""
        with self._lock:
            self._prune()
            return len(self._items)

    def awaited(self):
        """The world ranks whose receive some send still waits for (tests them all)."""
        with self._lock:
            self._items = collections.deque(p for p in self._items if not p[0].Test())
            return {p[2] for p in self._items}


SENDS = Sends()


def _flush_sends():
    """Wait until every message this worker sent has been received.

    A receiver that finishes without receiving a message drains and reports it while it
    waits for the others at exit, so this wait ends unless a receiver never finishes.
    """
    wait_for_workers("spmd_send (at exit): waiting until every message is received",
                     SENDS.awaited, _drain_unreceived)  # two workers may wait on each other


def wait_for_workers(what, pending, between=None):
    """Wait until ``pending()`` (world ranks still awaited) is empty.

    For the waits at the end of the program. Calls ``between()`` while waiting. Says once
    on stderr, after ``SPMDLAB_STALL_WARNING`` seconds, which workers it waits for, and
    raises SpmdTimeoutError naming them after ``SPMDLAB_TIMEOUT``.
    """
    started = time.monotonic()
    warned = False
    while True:
        waiting = pending()
        if not waiting:
            return
        if between is not None:
            between()
        elapsed = time.monotonic() - started
        late = _workers_text(waiting)
        if not warned and _env.STALL_WARNING and elapsed > _env.STALL_WARNING:
            warned = True
            sys.stderr.write(f"spmdlab: worker {RANK + 1} of {SIZE}: {what}; still waiting "
                             f"for {late} after {elapsed:.0f} s\n")
            sys.stderr.flush()
        if _env.TIMEOUT is not None and elapsed > _env.TIMEOUT:
            raise SpmdTimeoutError(f"worker {RANK + 1} of {SIZE}: {what}; no answer from "
                                   f"{late} after SPMDLAB_TIMEOUT={_env.TIMEOUT:g} s")
        time.sleep(0.0005)


def _workers_text(ranks):
    ranks = sorted(r + 1 for r in ranks)
    return ("worker " if len(ranks) == 1 else "workers ") + ", ".join(map(str, ranks))


# -- ending the job -----------------------------------------------------------------------

_hooks_at_exit: list = []


def at_exit(fn):
    """Run ``fn()`` at the end of the program, before the exit handshake (LIFO)."""
    _hooks_at_exit.append(fn)
    return fn


def _at_exit():
    if not started():  # spmdlab was imported but never used on this worker
        return
    global waiting_in
    # what this worker answers while it waits for the others (no stall report: the
    # waits at the end have their own)
    waiting_in = ("the end of the program", WORLD, float("inf"))
    try:
        _end_of_program()
    except SpmdTimeoutError as exc:  # a worker that never finishes: end the job, say who
        sys.stderr.write(f"### spmdlab: {exc}; ending the job\n")
        sys.stderr.flush()
        time.sleep(0.2)  # let mpiexec forward the message before the job is aborted
        abort(1)
    _stop_answering_thread()
    _say_goodbye("exit")


def _end_of_program():
    _flush_sends()
    if SIZE > 1:
        # Tell everyone this worker is done: a worker blocked in a collective that this
        # worker will never join then raises instead of hanging.
        notice = bytearray([_exit_status_byte()])
        requests = [_ctl.Isend(notice, r, _EXIT_TAG) for r in range(SIZE) if r != RANK]
    for fn in reversed(_hooks_at_exit):  # DataQueue: deliver every item still in flight
        fn()
    if SIZE == 1:
        return

    def still_running():
        _poll_exits()
        return [r for r in range(SIZE) if r != RANK and r not in _exited]

    # Wait for the others' notices so that every message is matched before MPI finalizes;
    # meanwhile receive what nobody will, so that a sender waiting on it can finish.
    wait_for_workers("finished the program, waiting for the other workers to finish",
                     still_running, _drain_unreceived)
    _drain_unreceived()  # small messages sent last may land after their sender's notice
    MPI.Request.Waitall(requests)


def _drain_unreceived():
    """Receive and report messages sent to this worker that it never received."""
    for scope in SCOPES:
        status = MPI.Status()
        while True:
            message = scope.comm.Improbe(MPI.ANY_SOURCE, MPI.ANY_TAG, status)
            if message is None:
                break
            message.Recv(bytearray(status.Get_count(MPI.BYTE)))
            sys.stderr.write(
                f"spmdlab: worker {scope.index} of {scope.size}: a message from worker "
                f"{status.Get_source() + 1} (tag {status.Get_tag()}) sent with spmd_send "
                f"was never received\n")


# Errors of the waits themselves (a worker left, SPMDLAB_TIMEOUT): every worker of the call
# raises its own, so they propagate as they are.
AGREED_ERRORS = (SpmdPeerError, SpmdTimeoutError)


def end_committed(scope, call):
    """End the job for a local failure (in an ``except`` clause) between a collective's
    agreement and the end of its data movement.

    Once every worker has agreed to a call, the others are inside it and cannot learn of
    a failure here (an allocation, a device copy): raising would leave them waiting for
    ever, so the failing worker says who and where and ends the job.
    """
    etype, value, tb = sys.exc_info()
    _excepthook(etype, value, tb, f"### spmdlab: {call} ({scope.who()}) failed after every "
                f"worker had agreed to it, so the others cannot go on\n")


def abort(status):
    """End the whole job with ``status``. MPICH's MPI_Abort can return to its caller
    (the launcher kills the job a moment later): this never does."""
    _say_goodbye("abort")
    try:
        _world_comm.Abort(status)
    finally:
        _os_exit(status)


def _excepthook(etype, value, tb, header=""):
    header += (f"### spmdlab: worker {RANK + 1} of {SIZE} ({socket.gethostname()}, pid "
               f"{os.getpid()}) failed; ending the job\n")
    # the error itself first, in one line: a launcher that ends the job may cut the
    # forwarding of a long traceback short (seen under Open MPI on a loaded machine)
    summary = "".join(traceback.format_exception_only(etype, value)).strip()
    header += f"### {summary[:2000]}\n"
    try:
        text = "".join(traceback.format_exception(etype, value, tb))
        plugin = sys.modules.get("spmdlab.pytest_plugin")
        capture = getattr(plugin, "CAPTURE", None)
        if capture is not None:  # under pytest: write past its output capture
            with capture.global_and_fixture_disabled():
                sys.stderr.write(header + text)
                sys.stderr.flush()
        else:
            sys.stderr.write(header + text)
            sys.stderr.flush()
        sys.stdout.flush()
        # mpiexec forwards output asynchronously and stops forwarding once the job is
        # aborted: give it a moment, or this traceback may never reach the terminal
        time.sleep(0.2)
    finally:
        # a worker that ended with sys.exit(k) made this one fail: the job ends with k
        abort(getattr(value, "status", None) or 1)


# -- the exit status of a worker ------------------------------------------------------------
# Python keeps no record of sys.exit's argument that an atexit handler could read, so a
# worker's sys.exit is wrapped to note it (in the worker process only); the exit notice
# carries it, and workers that fail because of it end the job with the same status.

_PID = os.getpid()
_exit_code = None
_sys_exit = sys.exit
_os_exit = os._exit


def _noting_exit(status=None):
    global _exit_code
    _exit_code = status
    _sys_exit(status)


def _exit_status_byte():
    code = _exit_code
    if code is None or code is False:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    return 1  # sys.exit("message") exits with status 1


def _vanishing_exit(status):
    """``os._exit`` in a worker: skips every cleanup, so say who left before MPI notices."""
    if os.getpid() == _PID and SIZE > 1:
        sys.stderr.write(f"### spmdlab: worker {RANK + 1} of {SIZE} ({socket.gethostname()}, "
                         f"pid {os.getpid()}) called os._exit({status}); ending the job\n")
        sys.stderr.flush()
        time.sleep(0.2)  # let mpiexec forward the line
        abort(status & 0xFF or 1)
    _os_exit(status)


atexit.register(_at_exit)
if SIZE > 1:
    sys.exit = _noting_exit
    os._exit = _vanishing_exit
if SIZE > 1 and _env.ABORT_ON_ERROR is not False:
    sys.excepthook = _excepthook
