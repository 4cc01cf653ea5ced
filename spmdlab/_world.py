"""The world and its scopes: communicators, the current scope, who is still running.

spmdlab never talks on a communicator the user can see: collectives and point-to-point
use a private duplicate of COMM_WORLD (the world scope; ``spmd(n)`` regions add scopes
on its first workers), and a second duplicate, ``CTL``, carries spmdlab's own notices:
that a worker has reached the end of the program, "where are you?" questions and their
answers (``_stall``), and large arrays' clear-to-send answers (``p2p``).

spmdlab starts on a worker at its first call (``current``): collective, every worker's
first spmdlab call. The other rooms of the machinery hang their own starting work on
it with ``at_start``: ``_stall`` its answering thread, ``_ending`` the hooks that end
the job cleanly and the watcher. Waiting on other workers is ``_wait``'s; ending the
job is ``_ending``'s.
"""

import os
from typing import Any, Optional
import socket
import sys
import threading
import time

import numpy as np

from . import _count, _env, _mpi
from ._mpi import MPI
from .errors import SpmdError, SpmdTimeoutError, SpmdValueError

EXIT_TAG = 1  # on CTL: "this worker has finished the program" (its exit status)
ASK_TAG = 2  # "which call are you waiting in?", sent when a wait times out
HERE_TAG = 3  # the answer: the call this worker waits in
CTS_TAG = 4  # "clear to send": a receiver is ready for a large array (see p2p)
COUNTS_TAG = 5  # the queues' end-of-program counts and verdicts (see queues)


class Scope:
    """The workers collectives run over: the world, or a region on its first n workers."""

    # the agreement exchange of a scope, made on first use (``_agree`` puts its class here)
    exchange_class: Any = None
    # its name on every worker: the sizes of the spmd(n) regions entered to reach it
    # (``()``: the world; set by ``region``)
    path: tuple = ()

    def __init__(self, comm, world_ranks):
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.index = self.rank + 1
        self.world_ranks = world_ranks  # scope rank -> world rank
        self.others = [r for r in world_ranks if r != RANK]  # world ranks but this one
        self.regions = {}  # n -> Scope on this scope's first n workers (None: not a member)
        self._exchange = None
        self._node = None
        self.arena = None  # shared-memory windows, made on first use (see _shm)
        self.next_queue_tag = 1  # MPI tag of the next DataQueue made in this scope
        self.self_sends = {}  # tag -> messages this worker sent itself, not yet received
        # where point-to-point receives land (p2p's _Inbox; None: not made yet, False:
        # in use by a receive)
        self.inbox = None
        self.early = []  # (rank, tag, message) that came as a receive gave up (see p2p)

    @property
    def exchange(self):
        if self._exchange is None:
            self._exchange = self.exchange_class(self.comm)
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

    def lost(self, error):
        """A collective of this scope raised ``error`` (SpmdPeerError: a worker has left
        the program; SpmdTimeoutError: one did not come within SPMDLAB_TIMEOUT): no
        later one can complete, and its requests are still active, so every later
        collective raises at once, saying so, instead of MPI's error for a request
        started twice."""
        if not isinstance(self._exchange, _Lost):
            self._exchange = _Lost(self, error, self._exchange)


class _Lost:
    """The agreement exchange of a scope a worker has left: its call count and last call
    as they were (the stall reports read them); anything else raises SpmdPeerError."""

    def __init__(self, scope, error, ex):
        self.calls = getattr(ex, "calls", 0)
        self.last = getattr(ex, "last", "none")
        self._scope = scope
        text = str(error)
        self._why = text.split("): ", 1)[1] if "): " in text else text
        self._first = self.last
        self._status = getattr(error, "status", None)  # (the job ends with it)
        # the exchange itself, kept: its request is still active, and MPI may write into
        # its buffers yet (freed with it, they made the process crash at exit)
        self._kept = ex

    def __getattr__(self, name):
        from ._stall import call_site
        from .errors import SpmdPeerError

        why = self._why.split(", so this call", 1)[0]
        error = SpmdPeerError(
            f"a collective at {call_site()} ({self._scope.who()}): {why}, so no collective "
            f"of these workers can complete any more (seen first in {self._first})")
        error.status = self._status
        raise error


def _rank_and_size():
    if not _mpi.loaded():
        return 0, 1  # not started: this process runs alone until it does
    world = _mpi.module().COMM_WORLD
    return world.Get_rank(), world.Get_size()


# This worker's rank and the number of workers: known at import in a process an MPI
# launcher started (MPI starts there at import, see _mpi), else 0 and 1 until start.
RANK, SIZE = _rank_and_size()
WORLD = None  # the world scope, on a private duplicate of COMM_WORLD (made at start)
TAG_UB = 32767  # the largest MPI tag: MPI's least guarantee until MPI says (at start)
CTL = None  # a second duplicate: spmdlab's own notices (see the module's text)
# With more workers than cores a waiting worker must give its core away at once, or the
# worker it waits for may not run until the scheduler's time slice ends (milliseconds).
OVERSUBSCRIBED = False
_stack: list = []  # the scopes entered: the world, then spmd(n) regions
SCOPES: list = []  # every scope made so far (regions add theirs)
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
        raise SpmdError(f"{call} (worker {RANK + 1} of {SIZE}): collectives cannot be "
                        f"called from a DataQueue listener (it runs beside the program, "
                        f"not in step with it)")


# While a parfor item runs on this worker: what it is (``parfor: f(items[3])``). Its
# items run independently, each on one worker (MATLAB's rule): a collective or a message
# between workers inside one could never be matched, and is refused where it is called.
PARFOR_ITEM: Optional[str] = None


# While a for-drange loop (``spmdlab.matlab.drange``) whose workers run different
# numbers of iterations runs on this worker: every worker's count. A collective inside
# it can never pair up (a worker with fewer iterations goes on to the next call, which
# meets another's iteration: the same call there is summed with it, silently), and is
# refused where it is called, in the first iteration, which every worker with any runs.
UNEVEN_LOOP: Optional[tuple] = None


def refuse_in_uneven_loop(call, scope):
    """Raise if a collective is called inside a for-drange loop of uneven counts."""
    if UNEVEN_LOOP is not None:
        groups: dict = {}
        for k, count in enumerate(UNEVEN_LOOP, 1):
            groups.setdefault(count, []).append(k)
        counts = "; ".join(f"{count} on worker{'s' if len(ks) > 1 else ''} "
                           f"{', '.join(map(str, ks))}" for count, ks in groups.items())
        raise SpmdError(f"{call} ({scope.who()}): called inside a for-drange loop whose "
                        f"workers run different numbers of iterations ({counts}): its "
                        f"collectives cannot pair up (a worker with fewer goes on to the "
                        f"next call while the others are still in the loop); make the "
                        f"collective outside the loop, or use getLocalPart in it")


def refuse_in_parfor(call, scope):
    if PARFOR_ITEM is not None:
        raise SpmdError(f"{call} ({scope.who()}): called inside {PARFOR_ITEM}: parfor "
                        f"items run independently, one worker each, so collectives and "
                        f"messages between workers cannot be used in them (MATLAB's "
                        f"rule); use spmd for code that communicates")


def _called():
    """The spmdlab function the user called (the outermost spmdlab frame), for a
    message raised deep inside it."""
    frame, name = sys._getframe(1), "spmdlab"
    while frame is not None and frame.f_globals.get("__name__", "").startswith("spmdlab"):
        name = frame.f_code.co_name
        if name in ("__init__", "__new__"):  # a class called: its name, as the user wrote
            # it (codistributor1d(2, [2, 2], [4, 4]) was "__init__ (the client)")
            owner = frame.f_locals.get("self", frame.f_locals.get("cls"))
            if owner is not None:
                name = (owner if isinstance(owner, type) else type(owner)).__name__
        frame = frame.f_back
    return name


def current():
    """The innermost scope (a ``spmd(n)`` region, else the world). The first call on a
    worker starts spmdlab there (collective: every worker's first spmdlab call). A
    pool's client never starts MPI: there it raises, for the work belongs to the pool's
    workers (starting a world of one would leave the client blind to its pool)."""
    if not _stack:
        if CLIENT is not None:
            raise SpmdError(f"{_called()} (the client): this process is a pool's client, "
                            f"which has no workers of its own: make codistributed arrays "
                            f"and call collectives inside a block (pool.spmd, %%spmd), or "
                            f"use distributed(X) here")
        _start()
    return _stack[-1]


def started():
    return WORLD is not None


# -- the client of a pool -----------------------------------------------------------------
# A process that drives a pool of workers (``spmdlab.start_pool``) is MATLAB's client: it
# never starts MPI. The pool's client side puts here the object that makes the client's
# own kinds of DataQueue, Composite and distributed array (the core never imports it).

CLIENT = None
# In a pool's worker: how one of its queues travels to the client (see pool._shared)
QUEUE_REFERENCE = None


class _ClientScope:
    """``here()`` in the client: MATLAB's client is worker 1 of 1 for its own objects."""

    index, size, rank = 1, 1, 0

    @staticmethod
    def who():
        return "the client"


def client():
    """The pool client's kinds of objects when this process is a pool's client (and
    not inside a region), else None."""
    return CLIENT if CLIENT is not None and not _stack else None


def here():
    """Where a client-side object (a progress monitor, a plot) acts: the current scope;
    in the client of a pool, where MPI never starts, the client itself (worker 1 of 1)."""
    if CLIENT is not None and not _stack:
        return _ClientScope
    return current()


def push(scope):
    _stack.append(scope)


def pop(scope):
    if _stack[-1] is not scope:  # pragma: no cover - guarded by region's try/finally
        raise RuntimeError("spmdlab: region scopes closed out of order")
    _stack.pop()


# -- starting ---------------------------------------------------------------------------------

_starters: list = []


def at_start(fn):
    """Run ``fn()`` when spmdlab starts on this worker, after the world is made (in the
    order registered). For the rooms that start threads and install hooks."""
    _starters.append(fn)
    return fn


def _start():
    """Duplicate COMM_WORLD twice, post the receives of the exit notices, make the world
    scope.

    Nonblocking duplicates, waited for with a report: a worker whose first spmdlab call
    the others never make says so after SPMDLAB_STALL_WARNING seconds (and raises after
    SPMDLAB_TIMEOUT) instead of hanging without a word.
    """
    global WORLD, CTL, OVERSUBSCRIBED, RANK, SIZE, TAG_UB
    world_comm = _mpi.module().COMM_WORLD
    RANK, SIZE = world_comm.Get_rank(), world_comm.Get_size()
    TAG_UB = world_comm.Get_attr(MPI.TAG_UB) or TAG_UB
    if SIZE == 1:
        comm, ctl = world_comm.Dup(), world_comm.Dup()
    else:
        comm, first = world_comm.Idup()
        ctl, second = world_comm.Idup()
        wait_for_workers("its first spmdlab call: waiting for every other worker's first "
                         "spmdlab call", lambda: [] if MPI.Request.Testall(
                             [first, second]) else [r for r in range(SIZE) if r != RANK])
    CTL = ctl
    _post_notices()
    world = Scope(comm, list(range(SIZE)))
    mine = (socket.gethostname(), os.getpid(), sorted(SAME_EVERYWHERE.items()))
    gathered = world.comm.allgather(mine) if SIZE > 1 else [mine]
    places = [(host, pid) for host, pid, _ in gathered]
    OVERSUBSCRIBED = SIZE > 1 and _oversubscribed(places)
    WORLD = world
    _stack.append(world)
    SCOPES.append(world)
    for fn in _starters:
        fn(places)
    _check_same_everywhere([dict(settings) for _, _, settings in gathered])


# Settings that choose how a collective moves its data, so every worker must have the
# same (SPMDLAB_INLINE_BYTES, ...): name -> this worker's value, registered by the
# modules that read them. Checked when spmdlab starts: unequal ones would make workers
# take different paths through one call (a wrong result, or a hang).
SAME_EVERYWHERE = {"SPMDLAB_INLINE_BYTES": _env.INLINE_BYTES,
                   "SPMDLAB_TREE_ABOVE": _env.TREE_ABOVE}


def settings_that_differ(settings):
    """``[(name, "worker 1: 0; workers 2, 3: unset"), ...]`` for the settings of
    ``SAME_EVERYWHERE`` that differ among the workers (``settings``: each worker's
    dict, in worker order)."""
    differ = []
    for name in sorted(settings[0]):
        groups: dict = {}
        for rank, mine in enumerate(settings):
            groups.setdefault(repr(mine.get(name)), []).append(rank)
        if len(groups) > 1:  # (in order of the first worker of each group)
            differ.append((name, "; ".join(
                f"{workers_text(ranks)}: {'unset' if value == 'None' else value}"
                for value, ranks in groups.items())))
    return differ


def _check_same_everywhere(settings):
    """Raise on every worker alike if a setting of ``SAME_EVERYWHERE`` differs among the
    workers (``settings``: each worker's, in worker order)."""
    for name, values in settings_that_differ(settings):
        raise SpmdValueError(
            f"{_called()} (worker {RANK + 1} of {SIZE}, the first spmdlab call): "
            f"{name} must be the same on every worker, for it decides how "
            f"collectives move data (got {values}); set it alike for every "
            f"worker, or for none")


_refreshers: list = []


def at_refresh(fn):
    """Run ``fn(world)`` when ``refresh`` has given the world new communicators."""
    _refreshers.append(fn)
    return fn


_retired: list = []  # the exchanges of the world scope before each refresh
_replaced: list = []  # the communicators the last refresh replaced (freed at the next)


def refresh():
    """New communicators for the world scope, on every worker at once (collective).

    For a pool's workers after a block was stopped half-way (an error on one worker, an
    interrupt): some may have left a collective the others had started, so the old
    communicators may hold operations that never complete. The world scope keeps its
    identity (arrays, Composites and DataQueues made earlier stay usable: a queue's
    traffic has a communicator of its own); its regions, exchange and shared-memory
    windows are made again on first use; exit notices are posted anew."""
    global CTL
    if WORLD is None:
        return
    world_comm = _mpi.module().COMM_WORLD
    comm, first = world_comm.Idup()
    ctl, second = world_comm.Idup()
    MPI.Request.Waitall([first, second])
    old = [WORLD.comm, CTL, WORLD._node]
    with notice_lock:  # (the answering thread must not take notices half-way through)
        _drop_notices()
        CTL = ctl
        _post_notices()
    WORLD.comm = comm
    # (an old exchange keeps its persistent requests and their buffers while one a
    # stopped block left active may still be written by MPI, which must not find the
    # memory freed; the others are freed, and the exchange with them)
    _retired.append(WORLD._exchange)
    _retired[:] = [ex for ex in _retired[-64:] if not _released(ex)]
    WORLD._exchange = WORLD._node = WORLD.arena = None
    # The communicators the refresh before this one replaced, freed: MPI frees each once
    # what a stopped block left on it completes (an MPI has a few thousand; a pool that
    # kept them all ran out after about a thousand stopped blocks, and had to be
    # restarted). Not this refresh's: a thread (the answering one) that read CTL a
    # moment ago may still be using it
    for old_comm in _replaced:
        if old_comm is not None and old_comm != MPI.COMM_NULL:
            try:
                old_comm.Free()
            except MPI.Exception:  # (never at the cost of the refresh)
                pass
    _replaced[:] = old
    WORLD.regions = {}
    WORLD.self_sends = {}
    _stack[:] = [WORLD]
    SCOPES[:] = [WORLD]
    for fn in _refreshers:
        fn(WORLD)


def _released(exchange):
    """Whether a retired exchange (``refresh``) has let go of everything MPI could still
    write (see ``released``; a lost scope's keeps nothing)."""
    released = getattr(type(exchange), "released", None)
    try:
        return released is None or released(exchange)
    except Exception:  # (never at the cost of the refresh: kept, as before)
        return False


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


# -- who is still running ------------------------------------------------------------------
# A worker that reaches the end of the program says so (``_ending``), and every other
# worker must come to know it: a wait that needs that worker then raises instead of
# hanging, and the end of the program waits until every worker has finished. The notices
# travel along a binary tree over the world ranks (parent (r - 1) // 2, children 2r + 1
# and 2r + 2), on CTL: a worker posts one receive per tree neighbour (three at most) and
# passes on to its other neighbours what it learns, so no worker talks to more than three
# others, a wait watches at most three notices besides its own request, and news crosses
# about 2 log2 N workers. A notice is the sender's whole table (two bytes per world rank:
# 0 while that worker runs, else 1 + its exit status), sent to a neighbour whenever the
# sender knows a worker's end that the neighbour may not (by a worker that has ended,
# at most once in ``_HOLD``). In a tree each end reaches a worker along one path, so
# every notice brings its receiver something new, and once a worker knows every end no
# notice is still on its way to it.
# Notices are passed on wherever spmdlab runs on a worker: its waits (they wake on a
# neighbour's notice, ``_wait``), the answering thread between questions (``_stall``,
# every 50 ms while the program computes), the waits at the start and the end of the
# program. Never a receive from MPI.ANY_SOURCE: MPICH's ch4:ucx device loses messages
# when a wildcard nonblocking receive is matched both in shared memory and on the
# network (seen with workers on two nodes; tests/test_queue_jobs.py).

exited: set = set()  # world ranks known to have reached the end of the program
_table = np.zeros(1, np.uint16)  # per world rank: 0 while it runs, else 1 + exit status
_neighbours: list = []  # this worker's neighbours in the tree (world ranks)
_inbox: list = []  # per neighbour: the buffer its next notice arrives in
_receives: list = []  # per neighbour: the posted receive (null once every end is known)
_told: list = []  # per neighbour: the ends it knows, as far as this worker knows
_sending: list = []  # notices in flight: (request, buffer)
_last_sent: list = []  # per neighbour: when this worker last sent it a notice
_holding = False  # news held back for a neighbour (see _HOLD)
# Only one thread takes notices at a time (MPI forbids two threads to test one request):
# the program thread in a wait, or the answering thread; a thread that finds the lock
# taken leaves the notices to the one that holds it.
notice_lock = threading.Lock()


def tree_neighbours(rank, size):
    """The world ranks next to ``rank`` in the notices' binary tree: parent, children."""
    return ([(rank - 1) // 2] if rank else []) + \
        [child for child in (2 * rank + 1, 2 * rank + 2) if child < size]


def _post_notices():
    global _table, _neighbours, _inbox, _receives, _told, _last_sent, _holding
    exited.clear()
    _holding = False
    _table = np.zeros(SIZE, np.uint16)
    _neighbours = tree_neighbours(RANK, SIZE)
    _inbox = [np.zeros(SIZE, np.uint16) for _ in _neighbours]
    _told = [np.zeros(SIZE, bool) for _ in _neighbours]
    _last_sent = [-_HOLD] * len(_neighbours)
    for known, neighbour in zip(_told, _neighbours):
        known[neighbour] = True  # a worker knows its own end
    _receives = [CTL.Irecv(buf, neighbour, EXIT_TAG)
                 for buf, neighbour in zip(_inbox, _neighbours)]
    if _count.ON:
        _count.NOTICES["posted"] += len(_receives)


def _drop_notices():
    """Cancel the posted receives (a pool's stopped block: new communicators follow;
    with ``notice_lock`` held)."""
    for request in _receives:
        if request != MPI.REQUEST_NULL:
            request.Cancel()
    # (a cancelled receive completes at once; completed, it holds its communicator no
    # more, which can then be freed)
    MPI.Request.Waitall(_receives)
    _abandoned.extend(_sending)  # (their buffers stay alive; nothing waits for them)
    _sending.clear()


_abandoned: list = []


def finished(status):
    """This worker has reached the end of the program (exit status ``status``): tell
    the others."""
    with notice_lock:
        _table[RANK] = 1 + status
        _pass_on()


def poll_exits():
    """Take the exit notices that have arrived, and pass on what they say."""
    if not _receives or not notice_lock.acquire(blocking=False):
        return
    try:
        done = MPI.Request.Testsome(_receives)
        if done:
            take(done)
        elif _holding:
            _pass_on()
    finally:
        notice_lock.release()


def notice_requests():
    """The posted receives of the neighbours' notices (with ``notice_lock`` held)."""
    return _receives


def take(indices):
    """Read the notices that arrived for the receives at ``indices`` of
    ``notice_requests()`` and pass on what is new (with ``notice_lock`` held)."""
    for i in indices:
        got = _inbox[i]
        ended = got != 0
        _told[i] |= ended
        new = ended & (_table == 0)
        if new.any():
            _table[new] = got[new]
            exited.update(int(r) for r in np.flatnonzero(new) if r != RANK)
    everyone = bool(_table.all())
    for i in indices:  # the next notice from that neighbour (none comes once all is known)
        _receives[i] = MPI.REQUEST_NULL if everyone else \
            CTL.Irecv(_inbox[i], _neighbours[i], EXIT_TAG)
    if _count.ON:
        _count.NOTICES["received"] += len(indices)
        _count.NOTICES["posted"] += 0 if everyone else len(indices)
    _pass_on()


# A worker that has ended sends each neighbour at most one notice in this long: ends
# that it learns of meanwhile wait and go together (it polls every half millisecond
# until the end, so they leave on time). One that runs passes news on at once: it may
# be blocked inside MPI, where nothing would send what waits.
_HOLD = 0.01


def _pass_on(force=False):
    global _holding
    known = _table != 0
    now = time.monotonic()
    hold = not force and bool(_table[RANK])
    _holding = False
    for i, neighbour in enumerate(_neighbours):
        if (known & ~_told[i]).any():
            if hold and now - _last_sent[i] < _HOLD:
                _holding = True
                continue
            buf = _table.copy()
            _sending.append((CTL.Isend(buf, neighbour, EXIT_TAG), buf))
            _told[i] |= known
            _last_sent[i] = now
            if _count.ON:
                _count.NOTICES["sent"] += 1
    _sending[:] = [(r, b) for r, b in _sending if not r.Test()]


def close_notices():
    """At the end of the program, once every end is known: no notice can still arrive
    (cancel the receives still posted); wait until the neighbours have this worker's."""
    with notice_lock:
        _pass_on(force=True)
        for request in _receives:
            if request != MPI.REQUEST_NULL:
                request.Cancel()
                request.Wait()
        MPI.Request.Waitall([r for r, _ in _sending])
        _sending.clear()


def all_exited():
    return len(exited) >= SIZE - 1


def still_running():
    """The other workers not known to have reached the end of the program (world
    ranks)."""
    if all_exited():
        return []
    return [r for r in range(SIZE) if r != RANK and r not in exited]


def exit_status(rank):
    """The exit status world rank ``rank`` reported (0 until its notice arrives)."""
    return max(int(_table[rank]) - 1, 0)


# -- waiting for workers at the start and the end of the program ---------------------------


def wait_for_workers(what, pending, between=None):
    """Wait until ``pending()`` (world ranks still awaited) is empty.

    For the waits at the start and the end of the program. Calls ``between()`` while
    waiting. Says once on stderr, after ``SPMDLAB_STALL_WARNING`` seconds, which workers
    it waits for, and raises SpmdTimeoutError naming them after ``SPMDLAB_TIMEOUT``.
    """
    started_at = time.monotonic()
    warned = False
    while True:
        poll_exits()  # (and pass on what the notices say: another worker may need it)
        waiting = pending()
        if not waiting:
            return
        if between is not None:
            between()
        elapsed = time.monotonic() - started_at
        late = workers_text(waiting)
        if not warned and _env.STALL_WARNING and elapsed > _env.STALL_WARNING:
            warned = True
            sys.stderr.write(f"spmdlab: worker {RANK + 1} of {SIZE}: {what}; still waiting "
                             f"for {late} after {elapsed:.0f} s\n")
            sys.stderr.flush()
        if _env.TIMEOUT is not None and elapsed > _env.TIMEOUT:
            raise SpmdTimeoutError(f"worker {RANK + 1} of {SIZE}: {what}; no answer from "
                                   f"{late} after SPMDLAB_TIMEOUT={_env.TIMEOUT:g} s")
        time.sleep(0.0005)


def workers_text(ranks):
    """'worker 3' or 'workers 2, 4' for 0-based world ranks."""
    ranks = sorted(r + 1 for r in ranks)
    return ("worker " if len(ranks) == 1 else "workers ") + ", ".join(map(str, ranks))
