"""Waiting on other workers: every blocking wait of spmdlab goes through here.

A wait notices when a worker the call needs has already finished the program (its exit
notice, ``_world``), so a collective or receive that can never complete raises
SpmdPeerError instead of hanging; it honours SPMDLAB_TIMEOUT; while it waits, the
answering thread can say where (``_stall``), and a wait of SPMDLAB_STALL_WARNING seconds
is reported. In a pool worker a wait can also be interrupted: the block it runs in is
stopped (``interrupted``, set by the pool's worker loop).
"""

import os
import threading
import time
from typing import Any, Callable, Optional

from . import _count, _env, _stall, _world
from ._mpi import MPI
from .errors import SpmdDeadlockError, SpmdPeerError, SpmdTimeoutError

# Errors of the waits themselves (a worker left, SPMDLAB_TIMEOUT): every worker of the
# call raises its own, so they propagate as they are.
AGREED_ERRORS = (SpmdPeerError, SpmdTimeoutError)

PROFILE: Any = None  # the running spmdlab.profile (it adds the data waits to its record)
# In a pool worker: a function that raises when the running block is stopped (an error
# on another worker, or the client's interrupt). Waits then poll from Python, never
# blocking inside MPI, and call it as they poll.
interrupted: Optional[Callable[[], None]] = None
# In a pool worker: the world ranks that have ended the running block (the client says
# so): a wait for them can never complete, as a wait for a worker that finished the
# program cannot (MATLAB: "the other worker became idle").
finished_block: set = set()

# A worker's exit notice travels on its own communicator and can overtake that worker's
# last messages: before concluding that a call can never complete, keep testing this long.
_EXIT_GRACE = 2.0


# Requests whose wait was left before they completed (a caught Ctrl-C, SPMDLAB_TIMEOUT,
# a worker that left), each with the buffers MPI may still write into or read from, as
# (request, buffers): a request dropped with the caller's frame is freed while MPI may
# still use them, and a collective's request does not hold its buffers (a Ctrl-C caught
# in a gather: "malloc(): unsorted double linked list corrupted", SIGABRT). Kept until
# they complete (looked at whenever one is added).
LEFT_ACTIVE: list = []


def left(request, keep=None):
    """Keep ``request``, whose wait is being left before it completed, with ``keep`` (its
    buffers: a point-to-point request holds its own, a collective's does not); the
    send-side scratch buffers are let go (one may be this request's: the next call
    must not write into it)."""
    from . import _pack

    kept = []
    for entry in LEFT_ACTIVE:
        try:
            if not entry[0].Test():
                kept.append(entry)
        except Exception:  # (its communicator's trouble: keep it as it is)
            kept.append(entry)
    kept.append((request, keep))
    LEFT_ACTIVE[:] = kept
    _pack.scratch.clear()


def wait(request, scope, call, keep=None):
    """Wait for ``request`` of a collective over ``scope``; raise if it can never complete.
    ``keep``: its buffers, kept with it if the wait is left before it completes."""
    if PROFILE is not None:
        start = time.perf_counter()
        wait_body(request, scope, call, keep=keep)
        PROFILE.data(time.perf_counter() - start)
        return
    wait_body(request, scope, call, keep=keep)


def interrupted_fast(request, scope, call, exc):
    """A fast path's own test of a persistent collective ``request`` it started, left by
    ``exc`` (a Ctrl-C between the start and the wait): as a wait left so (the wait
    itself has seen to it already when it raised)."""
    if not LEFT_ACTIVE or LEFT_ACTIVE[-1][0] is not request:
        interrupted_wait(request, scope, call, exc, True)


def wait_body(request, scope, call, needed=None, collective=True, keep=None):
    """``wait`` itself (the agreement step calls it: its wait is not data). ``needed``:
    the world ranks whose exit would leave the request incomplete (default: the rest of
    the scope; a step of the tree needs its partner alone: a worker that left elsewhere
    is named by the worker whose partner it was, whose error ends the job). Whatever it
    needs, a wait watches its request and the exit notices of its neighbours in
    ``_world``'s tree, three at most. ``collective``: False for point-to-point data on
    its way (not a collective, for the deadlock check). ``keep``: as ``wait``'s."""
    test = request.Test
    try:
        for _ in range(16):  # most collectives finish within a few microseconds
            if test():
                return
        if needed is None:
            needed = scope.others
        if _count.ON:
            _count.waited()
        # A wait inside MPI holds MPI's lock, and comes back to Python seldom: beside the
        # queues' receiver thread, which needs both to hand an item over, poll from Python
        kind = _stall.COLLECTIVE if collective else None
        if _env.TIMEOUT is not None or _world.OVERSUBSCRIBED or interrupted is not None \
                or _world.LISTENER is not None:
            spin(test, scope, call, needed, collective=True, kind=kind)
            return
        _stall.waiting_in = (call, scope, time.monotonic(), kind)  # for the stall report
        try:
            _wait_in_mpi(request, scope, call, needed)
        finally:
            _stall.waiting_in = None
    except BaseException as exc:
        interrupted_wait(request, scope, call, exc, collective, keep)
        raise


def interrupted_wait(request, scope, call, exc, collective, keep=None):
    """A wait for ``request`` left by ``exc`` before it completed: the request is kept
    (``left``), and a collective's scope is lost where no later collective can
    complete. After a worker that left (SpmdPeerError) the request stays active. A
    program that catches a Ctrl-C or a timeout and goes on: the request stays active (a
    persistent one, the agreement's: MPI's bare "persistent request ... already active"
    came from the next collective to start it; after a timeout, any: it waits for the
    worker that did not come), and the others wait for the steps of the call that this
    worker never takes (a step of the tree's, a shared-memory fence: a Ctrl-C caught
    there hung the job, the others waiting in the call, this worker in its next). A
    pool's stopped block is its refresh's business."""
    left(request, keep)
    if not collective:
        return
    if isinstance(exc, SpmdPeerError):
        scope.lost(exc)
    elif isinstance(exc, (KeyboardInterrupt, SpmdTimeoutError)) and interrupted is None:
        timeout = isinstance(exc, SpmdTimeoutError)
        scope.lost(SpmdPeerError(
            f"{call} ({scope.who()}): this worker's wait in {call} was interrupted "
            f"({type(exc).__name__}{' after SPMDLAB_TIMEOUT' if timeout else ''}) "
            f"before the call completed, so this call can never complete"))


def _wait_in_mpi(request, scope, call, needed):
    # Let MPI wait (it spins and yields the core as it sees fit), waking on the request
    # or on a tree neighbour's exit notice (``_world``): the notice is taken and passed
    # on, and the wait goes on unless it says that a worker this call needs has left.
    exited = _world.exited
    lock = _world.notice_lock
    while not exited or not any(r in exited for r in needed):
        # (the answering thread holds the lock for microseconds; another thread that
        # waits in MPI, for as long as its wait lasts: then poll)
        if not lock.acquire(timeout=0.01):
            spin(request.Test, scope, call, needed, collective=True,
                 kind=_stall.COLLECTIVE)
            return
        try:
            notices = _world.notice_requests()
            index = MPI.Request.Waitany([request] + notices)
            if index == 0:
                return
            _world.take([index - 1])
        finally:
            lock.release()
    # A worker it needs has left (perhaps before this wait): the call completes now (it
    # sent just before leaving) or never.
    if not _settles(request.Test):
        _check(scope, call, needed, 0.0, False)


def spin(done, scope, call, needed=None, any_of=False, collective=False, kind=None,
         tag=None):
    """Call ``done()`` until it returns something true, checking on the other workers.

    Raises SpmdPeerError when a worker in ``needed`` (world ranks; default: the rest of
    the scope) has finished the program (with ``any_of``: when all of them have),
    SpmdTimeoutError after ``SPMDLAB_TIMEOUT`` seconds, and SpmdDeadlockError when the
    wait is a receive (``kind`` "recv": a message with ``tag``, None: any, from one of
    ``needed``) whose senders all wait for each other (``_stall.deadlock``). ``kind``
    ``_stall.COLLECTIVE``: a collective's wait. Waits poll, then yield the core (so that
    more workers than cores still progress), and sleep only after a second.
    """
    started = time.monotonic()
    if _count.ON and not collective:  # (a collective's wait was counted in wait_body)
        _count.waited()
    if kind == "recv":
        kind = ("recv", tuple(scope.others if needed is None else needed), tag)
    # for the stall report and the deadlock check (another thread, other workers)
    _stall.waiting_in = state = (call, scope, started, kind)
    # (a receive of the program thread: what the others are told is its wait)
    receive = kind is not None and kind[0] == "recv" and \
        threading.get_ident() == _stall.PROGRAM
    try:
        return _spin(done, scope, call, needed, any_of, collective, started,
                     state if receive else None)
    finally:
        _stall.waiting_in = None


# Without more workers than cores, a wait polls this long before it starts yielding its
# core at each poll: giving the core away costs a time slice whenever anything else can
# run (another program on the node), far more than a message takes to arrive.
_POLL_BEFORE_YIELDING = 0.002


def _spin(done, scope, call, needed, any_of, collective, started, receive):
    spins = 0
    # (beside the queues' receiver thread too: it may be polling for an item to answer)
    polling = not _world.OVERSUBSCRIBED and _world.LISTENER is None
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
            if interrupted is not None:
                interrupted()
            if needed is None:
                needed = scope.others
            try:
                _check(scope, call, needed, started, any_of, collective)
            except SpmdPeerError:
                result = _settles(done)  # sent (or joined) just before its worker left
                if result:
                    return result
                raise
            if receive and _env.DEADLOCK_CHECK:
                got: list = []
                text = _stall.deadlock(receive, _kept(done, got))
                if got:  # it came as the look waited for answers
                    return got[0]
                if text is not None:
                    result = done()  # (a last look)
                    if result:
                        return result
                    raise SpmdDeadlockError(
                        f"{call} ({scope.who()}): deadlock: this receive can never "
                        f"complete, every worker it waits for waits itself: {text} (seen "
                        f"twice, {time.monotonic() - started:.0f} s into the wait; "
                        f"SPMDLAB_DEADLOCK_CHECK=0 turns the check off)")
            if time.monotonic() - started > 1.0:
                time.sleep(0.0005)


def _kept(done, got):
    """``done`` for a look of the deadlock check, which calls it as it waits for answers:
    what it returns once true goes into ``got`` (a receive that completed)."""
    def look():
        if not got:
            result = done()
            if result:
                got.append(result)
        return bool(got)
    return look


def _settles(done):
    """Whether ``done()`` comes true within the grace period after a peer's exit.

    No grace after a failed exit (a non-zero status): the job ends with it anyway."""
    failed = any(_world.exit_status(r) for r in _world.exited)
    deadline = time.monotonic() + (0.0 if failed else _EXIT_GRACE)
    while True:
        result = done()
        if result:
            return result
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.0005)


def _check(scope, call, needed, started, any_of, collective=False):
    _world.poll_exits()
    gone = [r for r in needed if r in _world.exited or r in finished_block]
    if gone and (not any_of or len(gone) == len(needed)):
        plural = "s" if len(gone) > 1 else ""
        codes = {r: _world.exit_status(r) for r in gone}
        statuses = set(codes.values()) - {0}
        each = len(set(codes.values())) > 1  # ended differently: say which ended how
        workers = ", ".join(f"{scope.world_ranks.index(r) + 1}"
                            + (f" (exit status {code})" if each and code else "")
                            for r, code in codes.items())
        how = f" (exit status {min(statuses)})" if statuses and not each else ""
        ended = "the block" if all(r not in _world.exited for r in gone) else "the program"
        error = SpmdPeerError(
            f"{call} ({scope.who()}): worker{plural} {workers} finished {ended}{how} "
            f"without making the matching call, so this call can never complete; every "
            f"worker must make the same spmdlab calls in the same order")
        error.status = max(statuses) if statuses else None
        raise error
    if _env.TIMEOUT is not None and time.monotonic() - started > _env.TIMEOUT:
        if collective:
            text = _stall.where_everyone_is(scope)
        else:
            text = (f"no message from "
                    f"{_world.workers_text([scope.world_ranks.index(r) for r in needed])}")
        raise SpmdTimeoutError(
            f"{call} ({scope.who()}): {text}; gave up after "
            f"SPMDLAB_TIMEOUT={_env.TIMEOUT:g} s")
