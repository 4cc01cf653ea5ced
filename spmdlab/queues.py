"""DataQueue and PollableDataQueue: progress and stop channels that never lose an item.

MATLAB's ``parallel.pool.DataQueue``: data sent to a queue goes to the worker that owns
it (worker 1, the client, by default). Every worker creates a queue at the same point of
the program, as it would an MPI communicator. ``send`` never waits for the owner; per
sender, items arrive in the order sent; everything sent before the program ends is
delivered before the owner exits.

How: queue traffic travels on a private duplicate of the scope's communicator (one MPI
tag per queue), so user collectives and messages never see it. Items travel in spmdlab's
one message framing (``_pack.encode``: a pickle, arrays as raw bytes) and the sends are
kept in the one tracker of ``_ending.SENDS``, with point-to-point's. An item sent alone
leaves at once; items sent in a burst are held for at most a millisecond and leave
together as one message, so a flood costs the owner a few receives, not one per item.
A receiver thread, started with the first queue, takes messages off the wire and runs
the owner's listeners in arrival order, so a training loop needs to call nothing for its
progress listener to run; the thread polls MPI (without sleeping for 0.5 ms after an
item, since an answer often follows; then every 50 µs, and every 10 ms once idle), sends
held items and tests the sends in flight (MPI moves a message only inside an MPI call of
its sender), and holds the GIL only while it handles an item. A poll that waits takes
its own queue's messages itself for its first 0.5 ms (the hand-over from the thread
costs tens of microseconds), under the thread's lock, so each sender's order holds.
At the end of the program the workers find together when the queues are quiet: every
worker counts the messages it has sent to each worker and received from each (the
receiver thread counts between deliveries, after sending what its listeners sent), and
worker 1 gathers everyone's counts, round after round, until two rounds in a row give the
same counts and every message counted as sent was counted as received. A listener that
sends while its worker's program has ended (a relay from one queue to another) only adds
rounds: no worker stops receiving while an item may still be on its way to it.
"""

from __future__ import annotations

import collections
import itertools
import os
import sys
import threading
import time
import weakref
from typing import Any, Callable, Generic, Iterator, List, Optional, Type, TypeVar

import numpy as np
from ._mpi import MPI

from . import _count, _ending, _env, _pack, _stall, _wait, _world
from ._agree import agree
from ._pack import digest
from ._checks import check_worker
from .errors import (SpmdDeadlockError, SpmdError, SpmdPeerError, SpmdTimeoutError,
                     SpmdTypeError, SpmdValueError)

__all__ = ["DataQueue", "PollableDataQueue", "QueueSet"]

Q = TypeVar("Q", bound="_Queue")

_CTRL = 0  # tag of control messages: ("close", tag)
_COUNTED = "counted"  # (_Hub._hand_over: a message received and counted, not handed over)
_IDLE_SLEEP = 0.01  # an idle thread wakes 100 times a second (its cost: docs/guide/performance.md)
_BUSY_SLEEP = 0.00005  # while items keep coming or a poller waits for one
_BUSY_FOR = 0.05  # (for this long after the last item, or after a poller started to wait)
_SPIN = 0.0005  # for this long after an item the thread polls without sleeping
_BURST_GAP = 0.00002  # sends closer than this to the last are a burst: its items are held
_BATCH_WINDOW = 0.001  # and leave together at least this often
_BATCH_BYTES = 1 << 18  # held items leave at once when they reach this size


class _Channel:
    """The queue traffic of one scope: its communicator and queues."""

    def __init__(self, scope):
        self.scope = scope
        self.comm = scope.comm.Dup()
        # tag -> queue, weakly: a queue the program dropped is collected (a queue per
        # epoch for a million epochs must not pile up); one with listeners is pinned
        self.queues = weakref.WeakValueDictionary()
        self.pinned = {}  # tag -> queue with listeners (its items have somewhere to go)
        self.registered = 1  # every tag below this was registered here (alive or dropped)
        # Items (and close notices) can arrive before this worker has made the queue:
        # another worker may be past the creating agreement and sending while this one
        # is still on its way out of it. They wait here, in order, for the queue.
        self.early = {}  # tag -> [(source, items)]: for a queue not made here yet
        self.early_closed = set()
        self.lock = threading.Lock()  # delivery and registration, in order


class _Out:
    """The items of one queue sent by this worker: its last send, and the items held
    behind it (they leave together, as one message)."""

    __slots__ = ("comm", "dest", "world_rank", "tag", "last", "called", "seen", "since",
                 "items", "nbytes")

    def __init__(self, comm, dest, world_rank, tag):
        self.comm, self.dest, self.world_rank, self.tag = comm, dest, world_rank, tag
        self.last = None  # the request of the last send
        self.called = float("-inf")  # when send was last called
        self.seen = -1  # the hub's count of items handed over then
        self.since = 0.0  # when the first of the held items was sent
        self.items = []
        self.nbytes = 0


class _Hub:
    """Process-wide state: channels, the receiver thread, items held to be sent."""

    def __init__(self):
        self.channels = {}  # id(scope) -> _Channel
        self.lock = threading.Lock()
        self.out = {}  # (id(channel), destination, tag) -> _Out
        self.held = set()  # the _Outs with items held
        self.local = collections.deque()  # (channel, tag, message) this worker sent itself
        self.wake = threading.Event()  # set when items are held: the thread sends them
        self.expecting = float("-inf")  # when a poller last started to sleep for an item
        self.pollers = 0  # pollers taking their own messages now (see spinning)
        self.handed = 0  # deliveries to this worker's queues so far (see send)
        self.thread = None
        self.stop = False
        # Messages sent to and received from each world rank (queue items and notices),
        # for the end of the program (_finish). The receiver thread holds ``busy`` while
        # it takes messages and hands them to listeners, so counts read under it never
        # catch a message received but not yet handed over.
        self.busy = threading.Lock()
        self.sent = collections.Counter()
        self.received = collections.Counter()
        # A poll without end asks the other workers for their counts (see
        # PollableDataQueue._nothing_can_come): question number -> {world rank: counts},
        # set when an answer arrives. Questions and answers are not counted.
        self.answers = {}
        self.answered = threading.Event()
        self.questions = itertools.count(1)
        # world rank -> questions sent to it whose answers have not arrived (_finish)
        self.unanswered = collections.Counter()

    def channel(self, scope):
        chan = self.channels.get(id(scope))
        if chan is None:
            chan = self.channels[id(scope)] = _Channel(scope)
        return chan

    def start(self):
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, name="spmdlab-queues",
                                           daemon=True)
            self.thread.start()

    def send(self, chan, dest, tag, message):
        """Send ``message`` to scope rank ``dest``.

        An item goes at once (with the items held before it), unless it comes within
        _BURST_GAP of this queue's previous item: then it is held, and the held items
        leave together, as one message, at least every _BATCH_WINDOW (from a later send
        or from the receiver thread) once the last send has completed, or when they
        reach _BATCH_BYTES. A lone item pays nothing (MPI keeps the order of messages
        between two workers); a flood travels in a few large messages, so the owner
        receives a few messages instead of one per item. A send that follows a delivery
        here (an answer: a listener's, or after a poll) is never a burst, however soon:
        a ping-pong faster than _BURST_GAP would otherwise wait for the batch window at
        every other hop.
        """
        if dest == chan.scope.rank:  # the owner's own items skip MPI: the thread takes them
            with self.lock:
                self.sent[_world.RANK] += 1
                self.local.append((chan, tag, message))
            self.wake.set()
            return
        key = (id(chan), dest, tag)
        now = time.monotonic()
        with self.lock:
            out = self.out.get(key)
            if out is None:
                out = self.out[key] = _Out(chan.comm, dest, chan.scope.world_ranks[dest],
                                           tag)
            burst = now - out.called < _BURST_GAP and out.seen == self.handed
            out.called, out.seen = now, self.handed
            if not out.items:
                out.since = now
            out.items.append(message)
            out.nbytes += len(message)
            if out.nbytes >= _BATCH_BYTES or not burst or (
                    now - out.since >= _BATCH_WINDOW and self._done(out)):
                self._post(out)
            elif out not in self.held:
                self.held.add(out)
                self.wake.set()

    @staticmethod
    def _done(out):
        return out.last is None or _ending.SENDS.done(out.last)

    def _post(self, out):
        message = out.items[0] if len(out.items) == 1 else _pack.batch(out.items)
        posted: list = []
        try:  # (the request kept by the C call that posts it: a Ctrl-C raised as Isend
            # returned dropped it while active, MPI read the freed buffer, and the items,
            # still held, left again with the next send)
            posted.extend(map(out.comm.Isend, ([message, MPI.BYTE],), (out.dest,),
                              (out.tag,)))
            if _count.ON:
                _count.p2p(sent=len(message))
        finally:
            if posted:
                out.last = posted[0]
                _ending.SENDS.track(out.last, message, out.world_rank)
                self.sent[out.world_rank] += 1
                out.items = []
                out.nbytes = 0
                self.held.discard(out)

    def post_ready(self, everything=False):
        """Send the held items whose window has passed (``everything``: all of them);
        returns whether any was sent."""
        if not self.held:
            return False
        now = time.monotonic()
        with self.lock:
            ready = [o for o in self.held if everything or (
                now - o.since >= _BATCH_WINDOW and self._done(o))]
            for out in ready:
                self._post(out)
        return bool(ready)

    def _take(self, status):
        """Take every message that has arrived, hand its items over and send the held
        items that are due; returns whether anything happened. Under ``busy``."""
        got = False
        while self.local:
            chan, tag, message = self.local.popleft()
            self.received[_world.RANK] += 1
            self._deliver(chan, chan.scope.rank, tag, message)
            got = True
        for chan in list(self.channels.values()):
            got = self._receive(chan, MPI.ANY_TAG, status) or got
        return self.post_ready() or got

    def _receive(self, chan, tag, status, once=False):
        """Take the messages of ``chan`` with ``tag`` (MPI.ANY_TAG: all) that have
        arrived (``once``: the first of them) and hand their items over; returns whether
        there was any. Under ``busy``, so that each sender's messages are handed over in
        the order sent."""
        got = False
        # [the message matched, its buffer], kept by the C calls that make them: a
        # poller's Ctrl-C is raised as a call returns, before its value is kept (a
        # message matched or received then was lost: MPI gives it to nobody else)
        taking: list = [None]
        where, improbe = ((MPI.ANY_SOURCE,), (tag,), (status,)), chan.comm.Improbe
        try:
            while not (once and got):
                taking[:] = map(improbe, *where)
                if taking[0] is None:
                    return got
                self._hand_over(chan, taking, status)
                got = True
        except BaseException as exc:
            if taking[0] is not None and not isinstance(exc, Exception):
                self._hand_over(chan, taking, status)  # (a signal's: finish, then raise)
            raise
        return got

    def _hand_over(self, chan, taking, status):
        """Receive the message matched in ``taking`` (see ``_receive``) unless it has
        been, count it unless it has been (``_COUNTED``), and hand its items over;
        ``taking[0]`` is None once they are."""
        if taking[0] is not _COUNTED:
            if taking[0]:  # (not yet received: a received message's handle is null)
                taking[1:] = [bytearray(status.Get_count(MPI.BYTE))]
                taking[0].Recv([taking[1], MPI.BYTE])
            if _count.ON:
                _count.p2p(received=len(taking[1]))
            world = chan.scope.world_ranks[status.Get_source()]
            self.received[world] += 1
            taking[0] = _COUNTED  # (no call between the two: no Ctrl-C)
        self._deliver(chan, status.Get_source(), status.Get_tag(), taking[1])
        taking[0] = None  # (idem)

    def take_own(self, queue, status):
        """What a poller does while it waits: take its own queue's messages itself (no
        other queue's, whose listeners run in the receiver thread), unless the receiver
        thread is taking messages now. A plain look first: most looks find nothing, and
        they cost one probe, not the lock and the match that keep what they take."""
        chan = queue._chan
        if not chan.comm.Iprobe(MPI.ANY_SOURCE, queue._tag):
            return
        held: list = []  # (kept by the C call that takes the lock: see _Rendezvous.start)
        try:  # (the first message: an item is all a poller waits for)
            held.extend(map(self.busy.acquire, (False,)))
            if held[0]:
                self._receive(chan, queue._tag, status, once=True)
        finally:
            if held and held[0]:
                self.busy.release()

    def spinning(self, change):
        """A poller starts (+1) or stops (-1) taking its messages itself: meanwhile the
        receiver thread looks only every half millisecond (two threads polling in one
        process fight for its GIL and for the cores); the poller wakes it as it stops."""
        with self.lock:
            self.pollers += change

    def counts(self):
        """(sent, received) per world rank, read between two deliveries and after
        sending every held item: what a listener sent because of an item received is
        counted as sent with it."""
        with self.busy:
            self.post_ready(everything=True)
            with self.lock:
                return dict(self.sent), dict(self.received)

    def _run(self):
        _world.LISTENER = threading.get_ident()
        status = MPI.Status()
        sleep = _IDLE_SLEEP
        quiet_since = last_item = time.monotonic()
        in_flight = 0
        try:
            while not self.stop:
                with self.busy:
                    got = self._take(status)
                # keep the sends in flight moving; stay at the busy rate while they do
                was, in_flight = in_flight, _ending.SENDS.in_flight()
                now = time.monotonic()
                if got:
                    last_item = now
                if got or in_flight < was or now - self.expecting < _BUSY_FOR:
                    sleep, quiet_since = _BUSY_SLEEP, now
                elif now - quiet_since > _BUSY_FOR:
                    sleep = _IDLE_SLEEP
                if self.pollers:  # a poller takes its items itself: look seldom beside it
                    self.wake.wait(_BATCH_WINDOW / 2)
                    self.wake.clear()
                elif now - last_item < _SPIN:  # an answer often follows an item
                    self._glance(last_item + _SPIN)
                elif self.held:  # held items leave when their window has passed
                    self.wake.clear()
                    time.sleep(_BATCH_WINDOW / 2)
                else:
                    self.wake.wait(sleep)
                    self.wake.clear()
        except BaseException:  # a listener failed: end the job as an uncaught error would
            _ending.excepthook(*sys.exc_info())

    def _glance(self, until):
        """Look for a message without taking it, giving the GIL and the core away between
        looks, until one has come, ``until`` has passed, or there is other work (items
        held or sent to oneself, a poller, the end)."""
        comms = [chan.comm for chan in list(self.channels.values())]
        while True:
            os.sched_yield()
            for comm in comms:
                if comm.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG):
                    return
            if self.local or self.held or self.pollers or self.stop or \
                    time.monotonic() >= until:
                return

    def _deliver(self, chan, source, tag, buf):
        try:
            if type(buf) is bytearray and buf[0] != _pack.BATCH:
                # one item received (a loop's are of one kind: its header is known by its
                # first bytes)
                items = [_pack.decode_received(buf)]
            else:  # a batch, or a message this worker sent itself
                items = [_pack.decode(m) for m in _pack.messages(buf)]
        except Exception as exc:
            # an item that cannot be made again here (a class this worker cannot
            # import): the unpickler's bare error named neither the queue nor the sender
            queue = chan.queues.get(tag)
            kind = "DataQueue" if queue is None else queue._kind
            raise SpmdTypeError(
                f"{kind} ({chan.scope.who()}): an item sent by worker {source + 1} "
                f"cannot be unpickled here: {type(exc).__name__}: {exc}") from exc
        with chan.lock:
            if tag == _CTRL:
                for item in items:
                    if item[0] == "close":
                        queue = chan.queues.get(item[1])
                        if queue is not None:
                            queue._closed_by_owner = True
                        elif item[1] >= chan.registered:
                            chan.early_closed.add(item[1])
                    else:  # a question for this worker's counts, or an answer
                        self._counts_asked(chan, source, item)
                return
            queue = chan.queues.get(tag)
            if queue is None:
                if tag >= chan.registered:  # not made here yet: they wait for the queue
                    chan.early.setdefault(tag, []).append((source, items))
                # else the program dropped the queue: nobody can receive the items
            else:
                queue._arrive(items, own=source == chan.scope.rank, source=source)

    def _counts_asked(self, chan, source, item):
        """A question ("counts?", n) from scope rank ``source``: answer with this
        worker's counts, once what its listeners sent has left (an item delivered before
        the question, and what a listener relayed for it, is counted in them); an answer
        ("counts", n, sent, received): keep it. Neither is counted itself (so that the
        counts of two rounds of questions can be equal). In the receiver thread, under
        ``busy``."""
        world = chan.scope.world_ranks[source]
        with self.lock:
            self.received[world] -= 1
        if item[0] == "counts?":
            self.post_ready(everything=True)
            with self.lock:
                answer = ("counts", item[1], dict(self.sent), dict(self.received))
            _control(chan, source, answer, counted=False)
        else:
            with self.lock:
                self.unanswered[world] -= 1
            if item[1] in self.answers:  # (else a question given up: answer dropped)
                self.answers[item[1]][world] = item[2:]
            self.answered.set()


_hub = _Hub()


def thread_level():
    """The thread support the MPI library gave this process."""
    return MPI.Query_thread()




def _tag_error(call, scope, tag):
    """Each queue of a scope has an MPI tag of its own; the error when they run out."""
    if tag <= _world.TAG_UB:
        return None
    return SpmdValueError(
        f"{call} ({scope.who()}): this scope has made {tag - 1} queues, as many as MPI "
        f"has tags (MPI_TAG_UB = {_world.TAG_UB}); make queues once and reuse them")


def _thread_error(call, scope):
    """Queues need MPI_THREAD_MULTIPLE: their receiver thread calls MPI beside the
    program. The error to raise on every worker when the library gave less, or None."""
    level = thread_level()
    if level >= MPI.THREAD_MULTIPLE:
        return None
    names = {MPI.THREAD_SINGLE: "MPI_THREAD_SINGLE", MPI.THREAD_FUNNELED:
             "MPI_THREAD_FUNNELED", MPI.THREAD_SERIALIZED: "MPI_THREAD_SERIALIZED"}
    return SpmdError(
        f"{call} ({scope.who()}): queues need MPI_THREAD_MULTIPLE (their receiver thread "
        f"calls MPI while the program does), but the MPI library gave "
        f"{names.get(level, level)}; leave mpi4py.rc.thread_level at 'multiple' (its "
        f"default) and use an MPI built with thread support")


def _control(chan, rank, notice, counted=True):
    """Send a control notice (``("close", tag)``, or not ``counted``: a question for
    the counts or its answer, never to itself) to scope rank ``rank``."""
    buf = _pack.encode(notice, "DataQueue")
    if rank == chan.scope.rank:
        with _hub.lock:
            _hub.sent[_world.RANK] += 1
            _hub.local.append((chan, _CTRL, buf))
        _hub.wake.set()
    else:
        world_rank = chan.scope.world_ranks[rank]
        posted: list = []
        with _hub.lock:
            try:  # (see _Hub._post: counted if and only if sent)
                posted.extend(map(chan.comm.Isend, ([buf, MPI.BYTE],), (rank,), (_CTRL,)))
            finally:
                if posted:
                    _hub.sent[world_rank] += counted
                    _ending.SENDS.track(posted[0], buf, world_rank)


def _report():
    """This worker's counts as one int64 row: sent to each world rank, then received."""
    return _row(*_hub.counts())


def _row(sent, received):
    """Counts (world rank -> messages) as one int64 row: sent, then received."""
    row = np.zeros(2 * _world.SIZE, dtype=np.int64)
    for rank, n in sent.items():
        row[rank] = n
    for rank, n in received.items():
        row[_world.SIZE + rank] = n
    return row


def _quiet(rows, previous, ranks=None):
    """Whether the queues have ended: every message counted as sent was counted as
    received, and nobody sent or received anything since the previous round. ``rows``:
    those of the world ranks ``ranks`` (default: every one), in that order.

    Why that suffices: a worker whose program has ended sends only from a listener, for
    an item it has received. A message still on its way after these counts would have
    been sent after its sender's count (else it is counted as received); the sender sent
    it for an item received after its count, since nothing changed between its last two
    counts; that item was sent after its own sender's count, and so on back, without a
    first one."""
    n = _world.SIZE
    ranks = list(range(n)) if ranks is None else list(ranks)
    return np.array_equal(rows, previous) and np.array_equal(
        rows[:, ranks], rows[:, [n + r for r in ranks]].T)


def _finish():
    """At exit: wait until no queue item is on its way anywhere, then stop the thread.

    Rounds of counts (see ``_quiet``), gathered by worker 1, which sends each round's
    verdict back. Every worker takes part, with or without queues (a queue made in a
    region has no channel elsewhere; its counts are zeros)."""
    rank, size = _world.RANK, _world.SIZE
    previous = np.zeros((size, 2 * size), dtype=np.int64)  # before any message
    what = "DataQueue (at exit): waiting until no worker's items are still on their way"
    # meanwhile receive the messages the program never received: a worker may wait in
    # its first exit step until they are (see _ending._flush_sends)
    drain = _ending._drain_unreceived
    # the answers to a poll's last questions (it returned when an item came), which no
    # count covers, are received before the receiver thread stops
    _world.wait_for_workers("DataQueue (at exit): waiting for the answers to a poll's "
                            "questions", lambda: [r for r, n in _hub.unanswered.items()
                                                  if n], drain)
    while True:
        _hub.wake.set()  # the receiver thread takes what has arrived now
        row = _report()
        if size == 1:
            rows = row[None, :]
            done = _quiet(rows, previous)
        elif rank == 0:
            rows = np.empty((size, 2 * size), dtype=np.int64)
            rows[0] = row
            requests = {r: _world.CTL.Irecv([rows[r], MPI.INT64_T], r, _world.COUNTS_TAG)
                        for r in range(1, size)}
            _world.wait_for_workers(what, lambda: [r for r, q in requests.items()
                                                   if not q.Test()], drain)
            done = _quiet(rows, previous)
            verdict = bytearray([done])
            MPI.Request.Waitall([_world.CTL.Isend(verdict, r, _world.COUNTS_TAG)
                                 for r in range(1, size)])
        else:
            rows = None
            sending = _world.CTL.Isend([row, MPI.INT64_T], 0, _world.COUNTS_TAG)
            verdict = bytearray(1)
            receiving = _world.CTL.Irecv(verdict, 0, _world.COUNTS_TAG)
            _world.wait_for_workers(what, lambda: [] if receiving.Test() else _late(),
                                    drain)
            sending.Wait()
            done = bool(verdict[0])
        if done:
            break
        if rows is not None:
            previous = rows
        time.sleep(0.001)  # let the receiver threads take what is on its way
    _world.wait_for_workers("DataQueue (at exit): waiting until the other workers have "
                            "received this worker's last items", _ending.SENDS.awaited)
    _hub.stop = True
    if _hub.thread is not None and _hub.thread is not threading.current_thread():
        _hub.wake.set()
        _hub.thread.join()


def _late():
    """Who a worker waiting for worker 1's verdict waits for in truth: the workers whose
    programs have not ended (worker 1 waits for their counts), else worker 1."""
    return _world.still_running() or [0]


_ending.at_exit(_finish)


class _Queue:
    """What DataQueue and PollableDataQueue share: creation, send, length, close."""

    _kind = "DataQueue"

    def __new__(cls, owner: int = 1, **kwargs: Any) -> Any:
        client = _world.client()
        if client is not None and not kwargs:  # the client of a pool: its own queue
            return client.data_queue(cls._kind)
        return object.__new__(cls)

    def __init__(self, owner: int = 1, *, _scope: Any = None,
                 _tag: Optional[int] = None) -> None:
        scope = _world.current() if _scope is None else _scope
        self._scope = scope
        call = self._kind
        if _tag is None:  # a queue of its own: collective, every worker makes it here
            _tag = scope.next_queue_tag
            error = _thread_error(call, scope) or _tag_error(call, scope, _tag) or \
                check_worker(call, scope, "owner", owner, none_ok=False)
            agree(scope, call, digest((call, _tag, owner if error is None else None)),
                  error=error, describe=lambda: f"{call}(owner={owner!r})")
            scope.next_queue_tag += 1
        chan = _hub.channel(scope)  # its first use duplicates a communicator: collective
        self._chan = chan
        self._tag = _tag
        self.owner = int(owner)  # (a numpy int too: is_owner is a bool, the owner an int)
        self._items: collections.deque = collections.deque()
        self._cond = threading.Condition(threading.RLock())
        self._pollers = 0  # threads waiting in poll: only then is arrival notified
        self._own_sent = self._own_handled = 0  # items the owner sent to itself
        self._sent = 0  # items this worker sent to the queue (flush_all)
        self._sent_lock = threading.Lock()  # a listener may send beside the program
        # flush_all waits on this, not on _cond, which a slow listener holds: its reports
        # and SPMDLAB_TIMEOUT come on time whatever the listeners do
        self._progress = threading.Event()
        self._flushing = 0
        # on the owner: items arrived from each scope rank (flush_all)
        self._arrived: collections.Counter = collections.Counter()
        self._closed = False
        self._closed_by_owner = False
        with chan.lock:
            chan.queues[_tag] = self
            chan.registered = max(chan.registered, _tag + 1)
            self._closed_by_owner = _tag in chan.early_closed
            for source, items in chan.early.pop(_tag, ()):  # from other workers
                self._arrive(items, source=source)
        _hub.start()

    @property
    def is_owner(self) -> bool:
        """Whether this worker owns the queue (receives what is sent to it)."""
        return self._scope.index == self.owner

    @property
    def queue_length(self) -> int:
        """Items waiting on the owner (0 on every other worker), MATLAB ``QueueLength``."""
        return len(self._items) if self.is_owner else 0

    def __reduce__(self):
        """Inside a pool's worker, a queue travels to the client as a reference (its
        ``send`` comes back here); nowhere else can it be pickled."""
        reference = _world.QUEUE_REFERENCE
        if reference is None or self._scope is not _world.WORLD:
            raise SpmdTypeError(f"{self._who('pickle')}: a queue cannot be pickled or "
                                f"sent; make it on every worker that uses it")
        return reference, (self.owner, self._tag, type(self).__name__)

    def _who(self, call):
        return f"{self._kind}.{call} ({self._scope.who()})"

    def send(self, data: Any) -> None:
        """Send ``data`` (any picklable value, arrays as raw bytes) to the owner.

        Returns at once; never waits for the owner. Raises SpmdValueError after the queue
        was closed, SpmdTypeError for a value that cannot be pickled.
        """
        if self._closed or self._closed_by_owner:
            by = "this worker" if self._closed else f"its owner, worker {self.owner}"
            raise SpmdValueError(f"{self._who('send')}: the queue was closed by {by}; "
                                 f"items can no longer be sent to it")
        message = _pack.encode(data, lambda: self._who("send"))
        if self.is_owner:
            self._own_sent += 1
        _hub.send(self._chan, self.owner - 1, self._tag, message)
        with self._sent_lock:
            self._sent += 1

    def close(self) -> None:
        """Refuse further sends; items already sent can still be received.

        On the owner this closes the queue for every worker (they are told in the
        background, so a send racing with the close may still arrive and be kept).
        """
        self._closed = True
        if self.is_owner:
            for rank in range(self._scope.size):
                if rank != self._scope.rank:
                    _control(self._chan, rank, ("close", self._tag))

    @property
    def closed(self) -> bool:
        """Whether sends are refused (closed here, or by the owner)."""
        return self._closed or self._closed_by_owner

    def _arrive(self, items, own=False, source=None):
        _hub.handed += 1  # (a hint for send's burst rule: no lock needed)
        with self._cond:
            self._items.extend(items)
            self._dispatch()
            if own:
                self._own_handled += len(items)
            self._arrived[source] += len(items)  # counted once handed over (flush_all)
            if self._pollers:
                self._cond.notify_all()
            if self._flushing:
                self._progress.set()

    def flush(self, timeout: Optional[float] = None) -> bool:
        """On the owner: wait until the items it sent to its own queue have arrived (and
        been handed to the listeners); returns whether they all did. Elsewhere: True.

        For a client that reports to itself through the queue and wants the report shown
        before it prints its last line. Raises SpmdError when called from a listener (the
        thread it would wait for) and SpmdValueError, without a timeout, on a DataQueue
        with no listener (its items would never be handed over).
        """
        timeout = _seconds(self, "flush", timeout, none_ok=True)
        if not self.is_owner:
            return True
        if threading.get_ident() == _world.LISTENER:
            raise SpmdError(f"{self._who('flush')}: called from a listener, which runs in "
                            f"the thread that delivers the items it would wait for")
        if isinstance(self, DataQueue) and not self._listeners and timeout is None:
            raise SpmdValueError(f"{self._who('flush')}: the queue has no listener, so its "
                                 f"items are never handed over and flush would wait for "
                                 f"ever; register one with after_each first")
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._pollers += 1
            try:
                while self._own_handled < self._own_sent or self._waiting():
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return False
                    self._cond.wait(min(left, 0.05) if left is not None else 0.05)
            finally:
                self._pollers -= 1
        return True

    def flush_all(self, timeout: Optional[float] = None) -> bool:
        """Collective: on the owner, wait until every item that any worker sent to the
        queue before its call has arrived (and been handed to the listeners); returns
        whether they all did within ``timeout``. The other workers count what they sent
        and go on at once (True).

        For an owner that must use every item of a phase (a listener collecting results)
        before it goes on: what MATLAB's client gets when it waits for the end of an
        ``spmd`` block. Every worker of the queue's scope calls it; items sent after a
        worker's call are not waited for. Raises, on every worker, in another scope than
        the queue's, for a bad ``timeout``, and on a DataQueue without a listener and
        without a timeout. A wait that lasts says once, after SPMDLAB_STALL_WARNING
        seconds, whose items are missing, and raises SpmdTimeoutError naming them after
        SPMDLAB_TIMEOUT; SpmdError from a listener (the thread that delivers the items).
        """
        call = f"{self._kind}.flush_all"
        scope = _world.current()
        _world.refuse_in_listener(call)
        error = None
        if scope is not self._scope:
            error = SpmdValueError(f"{call} ({scope.who()}): the queue was made in another "
                                   f"spmd region; call it there")
        elif timeout is not None and (isinstance(timeout, bool) or not isinstance(
                timeout, (int, float, np.integer, np.floating)) or not timeout >= 0):
            error = SpmdValueError(f"{self._who('flush_all')}: 'timeout' must be None or "
                                   f"seconds, 0 or more (got {timeout!r})")
        elif self.is_owner and isinstance(self, DataQueue) and not self._listeners and \
                timeout is None:
            error = SpmdValueError(f"{self._who('flush_all')}: the queue has no listener, "
                                   f"so its items are never handed over and flush_all "
                                   f"would wait for ever; register one with after_each")
        _hub.post_ready(everything=True)  # this worker's held items leave now
        with self._sent_lock:
            sent = self._sent
        # one exchange: the agreement record carries each worker's count (its free word)
        ex, _, _ = agree(scope, call, digest((call, self._tag)), error=error, aux=sent,
                         describe=lambda: f"{call}() of the queue owned by worker "
                                          f"{self.owner}")
        # every worker reads the counts (among many workers, a collective of its own)
        needed = [ex.field(k, 4) for k in range(scope.size)] if scope.size > 1 else [sent]
        if not self.is_owner:
            return True
        return self._wait_for(needed, timeout)

    def _wait_for(self, needed, timeout):
        """On the owner: wait until ``needed[k]`` items of scope rank k have arrived (a
        worker's items arrive in the order sent: counts per worker suffice). Says once,
        after SPMDLAB_STALL_WARNING seconds, whose items it waits for, and raises
        SpmdTimeoutError naming them after SPMDLAB_TIMEOUT; a pool's stop ends it."""
        call = self._who("flush_all")
        started = time.monotonic()
        deadline = None if timeout is None else started + timeout
        warned = False
        arrived = self._arrived
        self._flushing += 1
        try:
            while True:
                self._progress.clear()  # then look: an arrival after this sets it again
                late = [k for k, n in enumerate(needed) if arrived[k] < n]
                if not late and not self._waiting():
                    return True
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    return False
                elapsed = now - started
                if late and not warned and _env.STALL_WARNING and \
                        elapsed > _env.STALL_WARNING:
                    warned = True
                    sys.stderr.write(f"spmdlab: {call}: still waiting for the items of "
                                     f"{_missing(late, arrived, needed)} after "
                                     f"{elapsed:.0f} s\n")
                    sys.stderr.flush()
                if late and _env.TIMEOUT is not None and elapsed > _env.TIMEOUT:
                    raise SpmdTimeoutError(
                        f"{call}: the items of {_missing(late, arrived, needed)} have not "
                        f"all arrived; gave up after SPMDLAB_TIMEOUT={_env.TIMEOUT:g} s")
                if _wait.interrupted is not None:  # a pool's block being stopped
                    _wait.interrupted()
                self._progress.wait(0.05 if deadline is None else
                                    min(0.05, deadline - now))
        finally:
            self._flushing -= 1

    def _dispatch(self):
        pass

    def _waiting(self):
        """Items arrived but not yet handed over (a DataQueue without a listener)."""
        return False

    @classmethod
    def per_worker(cls: Type[Q]) -> QueueSet[Q]:
        """Collective: one queue per worker, each owned by its worker (a ``QueueSet``).

        MATLAB: a queue created inside ``spmd``, one per worker, whose ``q{k}`` the
        client uses to send to worker k.
        """
        scope = _world.current()
        call = f"{cls._kind}.per_worker"
        first = scope.next_queue_tag
        error = _thread_error(call, scope) or _tag_error(call, scope, first + scope.size - 1)
        agree(scope, call, digest((call, first)), error=error, describe=lambda: f"{call}()")
        scope.next_queue_tag += scope.size
        queues = [cls(k, _scope=scope, _tag=first + k - 1) for k in range(1, scope.size + 1)]
        return QueueSet(queues, scope.index)


def _seconds(queue, call, timeout, none_ok):
    """``timeout`` checked (a number of seconds, not NaN; None where ``none_ok``, which
    is flush's, where it must be 0 or more as flush_all's must), else SpmdValueError
    naming ``call``; an infinite one (wait for ever) is None. (A negative one is poll's
    0: MATLAB's poll takes any number.)"""
    if timeout is None and none_ok:
        return None
    if isinstance(timeout, bool) or not isinstance(
            timeout, (int, float, np.integer, np.floating)) or timeout != timeout or (
            none_ok and timeout < 0):
        raise SpmdValueError(f"{queue._who(call)}: 'timeout' must be " + (
            "None or seconds, 0 or more" if none_ok else "seconds") + f" (got {timeout!r})")
    return None if timeout == float("inf") else float(timeout)


_WAIT_CHUNK = 1.0  # a wait without end still wakes this often (Condition.wait(inf) fails)
_ASK = "ask"  # (_no_sender_left: ask the other workers whether an item can still come)


def _missing(late, arrived, needed):
    """'worker 2 (3 of 5 items), worker 4 (0 of 1 items)' for flush_all's reports."""
    return ", ".join(f"worker {k + 1} ({arrived[k]} of {needed[k]} items)" for k in late)


class _Listener:
    """Handle returned by ``after_each``; ``remove()`` stops the calls."""

    def __init__(self, queue: DataQueue, fn: Callable[[Any], Any]) -> None:
        self.queue = queue
        self.fn = fn

    def remove(self) -> None:
        """Stop calling this listener (the queue keeps its other listeners)."""
        queue = self.queue
        with queue._cond:
            if self in queue._listeners:
                queue._listeners.remove(self)
            if not queue._listeners:
                queue._chan.pinned.pop(queue._tag, None)


class DataQueue(_Queue):
    """A queue whose owner handles items with listeners (MATLAB ``parallel.pool.DataQueue``).

    ``DataQueue()`` is collective: every worker creates it at the same point. It is owned
    by worker 1 unless ``owner=k``. Items sent before a listener exists wait
    (``queue_length``) and are handed to the first listener registered. A queue lives
    while the program holds it or it has a listener; items that reach a queue the owner
    has dropped are discarded.

    Parameters
    ----------
    owner
        The worker (1-based) that receives the items and runs the listeners (1, the client).

    Examples
    --------
    >>> progress = DataQueue()                  # every worker, at the same point
    >>> seen = []
    >>> handle = progress.after_each(seen.append)
    >>> progress.send({"epoch": 1, "loss": 0.25})
    >>> progress.flush()
    True
    >>> seen
    [{'epoch': 1, 'loss': 0.25}]

    MATLAB
    ------
    ``q = parallel.pool.DataQueue; afterEach(q, @fcn); send(q, data)``
    """

    _kind = "DataQueue"

    def __init__(self, owner: int = 1, **kwargs: Any) -> None:
        self._listeners: List[_Listener] = []
        super().__init__(owner, **kwargs)

    def after_each(self, fn: Callable[[Any], Any]) -> _Listener:
        """Call ``fn(item)`` on the owner for every item, in arrival order.

        Inert on other workers (returns a handle all the same), so client code needs no
        ``if`` around it. Items already waiting are handed over at once; several listeners
        all run, in the order registered. Listeners run in spmdlab's receiver thread: they
        may send to queues but must not call collectives. Returns a handle whose
        ``remove()`` stops the calls.
        """
        if not callable(fn):
            raise SpmdTypeError(f"{self._who('after_each')}: the listener must be callable "
                                f"(got {fn!r} that is a {type(fn).__name__})")
        listener = _Listener(self, fn)
        if self.is_owner:
            with self._cond:
                self._listeners.append(listener)
                self._chan.pinned[self._tag] = self
                self._dispatch()
        return listener

    afterEach = after_each

    def _waiting(self):
        return bool(self._items)

    def _dispatch(self):
        items, listeners = self._items, self._listeners
        if not (items and listeners):
            return
        running, me = _world.listener_running, threading.get_ident()
        outer = me not in running  # not already inside a listener (after_each in one)
        if outer:
            running.add(me)  # whichever thread hands the items over
        try:
            while items and listeners:
                item = items.popleft()
                if len(listeners) == 1:
                    listeners[0].fn(item)
                else:
                    for listener in list(listeners):  # a listener may remove itself
                        listener.fn(item)
        finally:
            if outer:
                running.discard(me)


def _take(items, taken):
    """The oldest of ``items``, also put in ``taken`` (to be given back if the poll is
    interrupted on its way out). Neither a subscript nor a ``del`` ends in a check for
    signals, as a call does: once the item is out of ``items`` it is in ``taken``."""
    item = items[0]
    del items[0]
    taken.append(item)
    return item


class PollableDataQueue(_Queue):
    """A queue its owner reads with ``poll`` (MATLAB ``parallel.pool.PollableDataQueue``).

    Parameters
    ----------
    owner
        The worker (1-based) that receives the items and polls them (1, the client).

    Examples
    --------
    >>> stops = PollableDataQueue.per_worker()   # one queue per worker
    >>> stops[1].send(True)                      # the client asks worker 1 to stop
    >>> stops.mine.poll(timeout=5.0)
    True
    >>> print(stops.mine.poll())
    None

    MATLAB
    ------
    ``q = parallel.pool.PollableDataQueue; send(q, data); [data, ok] = poll(q, timeout)``
    """

    _kind = "PollableDataQueue"

    def poll(self, timeout: float = 0.0, default: Any = None) -> Any:
        """The oldest waiting item, waiting up to ``timeout`` seconds; else ``default``.

        On workers other than the owner it returns ``default`` at once. ``timeout`` may
        be ``math.inf`` (wait until an item comes); SpmdValueError for one that is not a
        number of seconds (NaN, None, a bool). A wait without end that no worker can end
        raises: SpmdPeerError once every other worker has finished, SpmdDeadlockError
        while every worker that could send waits itself (as a receive's deadlock). A
        listener may poll without a timeout only (SpmdError otherwise): it runs in the
        thread that delivers the items.
        """
        timeout = _seconds(self, "poll", timeout, none_ok=False)
        if not self.is_owner:
            return default
        if threading.get_ident() == _world.LISTENER and (timeout is None or timeout > 0):
            # (it waited out its timeout, or for ever, blind to the items that came)
            raise SpmdError(f"{self._who('poll')}: called with a timeout "
                            f"({'math.inf' if timeout is None else f'{timeout:g} s'}) from "
                            f"a listener, which runs in the thread that delivers the items "
                            f"it would wait for, so none could come; a listener may only "
                            f"take what has arrived, with poll()")
        items = self._items
        # the item taken (see _take) is given back at the front if anything interrupts
        # the way out: a Ctrl-C is raised as a call returns, and one raised as the lock
        # was released lost the item popped before it
        taken: list = []
        try:
            if items or (timeout is not None and timeout <= 0):
                with self._cond:
                    return _take(items, taken) if items else default
            return self._wait_for_item(timeout, default, taken)
        except BaseException:
            if taken:
                items.appendleft(taken.pop())
            raise

    def _wait_for_item(self, timeout, default, taken):
        """``poll``'s wait: the item, put in ``taken`` too (see ``_take``)."""
        items = self._items
        # For _SPIN the poller takes its queue's messages itself, yielding the core
        # between looks (an answer often comes within microseconds, and the hand-over
        # from the receiver thread costs tens of them); then it sleeps until the
        # receiver thread hands an item over.
        now = time.monotonic()
        deadline = float("inf") if timeout is None else now + timeout
        spin_until = min(deadline, now + _SPIN)
        status = MPI.Status()
        _hub.spinning(1)
        try:
            while now < spin_until:
                _hub.take_own(self, status)
                if items:
                    with self._cond:
                        if items:
                            return _take(items, taken)
                os.sched_yield()
                now = time.monotonic()
        finally:
            _hub.spinning(-1)
        _hub.expecting = time.monotonic()  # the receiver thread looks often for a while
        _hub.wake.set()
        gone_since = None
        state = self._endless_wait() if timeout is None else None
        if state is not None:
            _stall.waiting_in = state
        try:
            while True:
                with self._cond:
                    self._pollers += 1
                    try:
                        while not items:
                            left = deadline - time.monotonic()
                            if left <= 0:
                                return default
                            self._cond.wait(min(left, _WAIT_CHUNK))
                            if timeout is None and not items:
                                gone_since = self._no_sender_left(gone_since)
                                if state is not None or gone_since is _ASK:
                                    break  # (the checks that follow: outside the lock)
                        if items:
                            return _take(items, taken)
                    finally:
                        self._pollers -= 1
                if gone_since is _ASK:
                    gone_since = None
                    if self._nothing_can_come():
                        raise self._no_sender_error()
                if state is not None:
                    self._check_deadlock(state)
        finally:
            if state is not None:
                _stall.waiting_in = None

    def _endless_wait(self):
        """For a ``poll`` without end in the program thread: its wait as the deadlock
        check and the stall report read it (``_stall.waiting_in``: an item from any
        other worker of the queue's scope); None where no check is made (another thread,
        a pool's worker, whose client may send; no other worker; the check turned off)."""
        others = tuple(r for r in self._scope.world_ranks if r != _world.RANK)
        if not (others and _env.DEADLOCK_CHECK) or _world.QUEUE_REFERENCE is not None or \
                threading.get_ident() != _stall.PROGRAM:
            return None
        return (f"{self._kind}.poll", self._scope, time.monotonic(),
                ("item", others, None))

    def _check_deadlock(self, state):
        """Raise SpmdDeadlockError when no item can ever come: every worker that could
        send one waits itself, for this worker or for each other (``_stall.deadlock``,
        which looks after SPMDLAB_DEADLOCK_CHECK seconds and concludes on two looks)."""
        items = self._items
        text = _stall.deadlock(state, lambda: bool(items))
        if text is not None and not items:
            raise SpmdDeadlockError(
                f"{self._who('poll')}: deadlock: no item can ever come, every worker that "
                f"could send one waits itself: {text} (seen twice, "
                f"{time.monotonic() - state[2]:.0f} s into the wait; "
                f"SPMDLAB_DEADLOCK_CHECK=0 turns the check off)")

    def _no_sender_left(self, since):
        """For a poll without end: _ASK once every other worker of the queue has finished
        its program (and _wait's grace for their last items has passed) while no thread
        of this worker's own program could still send (a ``poll(math.inf)`` that may
        wait for ever: ``_nothing_can_come`` asks the others); SpmdPeerError where no
        other worker of the queue's scope is left to ask; else when that began, or
        None."""
        _world.poll_exits()
        others = [r for r in self._scope.world_ranks if r != _world.RANK]
        # a queue of a one-worker scope (a job of one, an spmd(1) block) has no other
        # sender: only this worker's threads, or its listeners relaying what the workers
        # outside the scope send, could still send to it (or a pool's client)
        if others:
            could_send = any(r not in _world.exited for r in others)
        else:
            could_send = bool(_world.still_running()) or _world.QUEUE_REFERENCE is not None
        if could_send or self._may_still_come():
            return None
        if any(t.is_alive() and not t.daemon and t is not threading.current_thread()
               for t in threading.enumerate()):
            return None
        now = time.monotonic()
        if since is None or now - since < _wait._EXIT_GRACE:
            return now if since is None else since
        if others:
            return _ASK
        raise self._no_sender_error()

    def _nothing_can_come(self):
        """Whether no item can come any more, every other worker of the queue's scope
        having finished its program: only their listeners could still send, for an
        item they receive. Rounds of questions for each one's counts (their answers
        leave after what their listeners sent for the items before): once two rounds in
        a row give the same counts, and every message counted as sent between these
        workers was counted as received, none is on its way and no listener runs (the
        argument of the end of the program, ``_quiet``). False as soon as an item
        arrives; a listener that runs long delays the answers, never the verdict."""
        chan, items = self._chan, self._items
        others = [r for r in range(self._scope.size) if r != self._scope.rank]
        ranks = self._scope.world_ranks
        previous = None
        while not items:
            number = next(_hub.questions)
            _hub.answers[number] = answers = {}
            try:
                for rank in others:
                    with _hub.lock:
                        _hub.unanswered[ranks[rank]] += 1
                    _control(chan, rank, ("counts?", number), counted=False)
                _hub.expecting = time.monotonic()  # the receiver thread looks often
                _hub.wake.set()
                while len(answers) < len(others) and not items:
                    if _wait.interrupted is not None:  # a pool's block being stopped
                        _wait.interrupted()
                    _hub.answered.wait(0.05)
                    _hub.answered.clear()
                    _hub.expecting = time.monotonic()
                if items:
                    return False
            finally:
                _hub.answers.pop(number, None)
            answers[_world.RANK] = _hub.counts()
            rows = np.stack([_row(*answers[r]) for r in ranks])
            if _quiet(rows, previous, ranks) and not items:
                return True
            previous = rows
            time.sleep(0.001)
        return False

    def _no_sender_error(self):
        others = [r for r in self._scope.world_ranks if r != _world.RANK]
        workers = ", ".join(str(self._scope.world_ranks.index(r) + 1) for r in others)
        return SpmdPeerError(
            f"{self._who('poll')}: " + (
                f"every other worker ({workers}) has finished the program"
                if others else "no other worker can send to it (its scope has one "
                "worker" + (", and every other worker has finished the program)"
                            if _world.SIZE > 1 else ")")) +
            " and no item has come since, so none can: poll(math.inf) would wait "
            "for ever")

    def _may_still_come(self):
        """Whether an item of this queue is already here but not yet handed over, or a
        listener of this worker runs and may send one: a message of the queue waits in
        MPI (the receiver thread, busy with a slow listener of another queue, has not
        taken it yet), an item sent to itself waits for the thread, or a listener runs
        (it may relay an item to this queue)."""
        return bool(_world.listener_running) or bool(_hub.local) or \
            self._chan.comm.Iprobe(MPI.ANY_SOURCE, self._tag)


def _queue_set(queues):
    return QueueSet(queues, 0 if _world.client() is not None else _world.current().index)


class QueueSet(Generic[Q]):
    """One queue per worker: ``qs.mine`` is this worker's, ``qs[k]`` worker k's (1-based).

    Examples
    --------
    >>> queues = DataQueue.per_worker()
    >>> len(queues), queues.mine is queues[spmd_index()]
    (1, True)

    MATLAB
    ------
    ``spmd, q = parallel.pool.DataQueue; end; q1 = q{1};``
    """

    def __init__(self, queues: List[Q], index: int) -> None:
        self._queues = queues
        # this worker's queue (None on a pool's client, which owns none of them)
        self.mine: Q = queues[index - 1] if index else None  # type: ignore[assignment]

    def __reduce__(self):
        """A set sent between a pool's client and its workers: ``mine`` is the queue of
        the worker that receives it."""
        return _queue_set, (self._queues,)

    def __getitem__(self, k: int) -> Q:
        number = not isinstance(k, bool) and isinstance(k, (int, np.integer))
        if not number or not 1 <= k <= len(self._queues):
            scope = getattr(self._queues[0], "_scope", None) if self._queues else None
            who = "" if scope is None else f" ({scope.who()})"
            what = f"{k!r}" if number else f"{k!r} that is a {type(k).__name__}"
            raise (SpmdValueError if number else SpmdTypeError)(
                f"QueueSet[{k!r}]{who}: workers are numbered 1 to {len(self._queues)} "
                f"(got {what})")
        return self._queues[k - 1]

    def __len__(self) -> int:
        return len(self._queues)

    def __iter__(self) -> Iterator[Q]:
        return iter(self._queues)

