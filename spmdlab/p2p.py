"""Point-to-point messages between workers of the current scope.

Any value spmdlab knows (numbers, arrays, tensors, nested dicts / lists / tuples) or any
picklable object travels as one byte buffer: a small pickled layout followed by the
arrays' raw bytes. Worker numbers are 1-based; tags are non-negative ints.
"""

from __future__ import annotations

import collections
import itertools
import struct
import sys
import threading
import time
from typing import Any, Literal, Optional, Sequence, Tuple, Union, overload

import numpy as np
from ._mpi import MPI

from . import _count, _ending, _pack, _wait, _world
from ._checks import check_worker
from .errors import SpmdError, SpmdTypeError, SpmdValueError

__all__ = ["spmd_probe", "spmd_receive", "spmd_send", "spmd_send_receive"]



def _check_tag(call, scope, tag, *, none_ok):
    if tag is None and none_ok:
        return
    if isinstance(tag, bool) or not isinstance(tag, (int, np.integer)):
        raise SpmdTypeError(f"{call} ({scope.who()}): 'tag' must be an int from 0 to "
                            f"{_world.TAG_UB} (got {tag!r} that is a {type(tag).__name__})")
    if not 0 <= tag <= _world.TAG_UB:
        raise SpmdValueError(f"{call} ({scope.who()}): 'tag' must be from 0 to {_world.TAG_UB} "
                             f"(got {tag})")


def _check(call, scope, name, worker, *, none_ok):
    error = check_worker(call, scope, name, worker, none_ok=none_ok)
    if error is not None:
        raise error


def _destinations(call, scope, destination):
    if isinstance(destination, np.ndarray) and destination.ndim > 1:  # (its rows: arrays)
        raise SpmdTypeError(f"{call} ({scope.who()}): 'destination' must be a worker "
                            f"number or a 1-D list of them (got a {destination.ndim}-D "
                            f"array {destination.tolist()!r})")
    many = isinstance(destination, (list, tuple, range)) or \
        (isinstance(destination, np.ndarray) and destination.ndim > 0)  # (0-d: one number)
    targets = list(destination) if many else [destination]
    if not targets:
        raise SpmdValueError(f"{call} ({scope.who()}): 'destination' is an empty list")
    for d in targets:
        _check(call, scope, "destination", d, none_ok=False)
    return targets


def spmd_send(x: Any, destination: Union[int, Sequence[int]], tag: int = 0) -> None:
    """Send ``x`` to worker ``destination`` (or to each of a list of workers).

    Returns at once, without waiting for the receiver (MATLAB ``spmdSend``, ``labSend``);
    the message is kept until it is received, and delivered before the program ends.

    Parameters
    ----------
    x
        Any picklable value; arrays and tensors travel as raw bytes.
    destination
        A worker number (1-based), or a list of them (each gets a copy).
    tag
        A non-negative int; ``spmd_receive(tag=...)`` matches it.

    Examples
    --------
    A ring: every worker sends to the next and receives from the previous (at one worker
    it sends to itself).

    >>> n, k = spmd_size(), spmd_index()
    >>> spmd_send(k * 10, k % n + 1)
    >>> spmd_receive((k - 2) % n + 1)
    10

    MATLAB
    ------
    ``spmdSend(X, destination, tag)``, ``labSend(X, destination, tag)``
    """
    scope = _world.current()
    if _world.PARFOR_ITEM is not None:
        _world.refuse_in_parfor("spmd_send", scope)
    call = "spmd_send"
    if type(destination) is int and 0 < destination <= scope.size and type(tag) is int \
            and 0 <= tag <= _world.TAG_UB:  # the common case, checked cheaply
        if destination != scope.index:
            buf = _kept_message(x)
            if buf is not None:  # (small: neither to itself nor in two parts)
                # (a with, not acquire() then try: a Ctrl-C that came while this thread
                # waited for the lock is raised as acquire() returns, outside the try, and
                # the lock was held for ever: every other thread's send hung)
                with _SENDING:
                    _isend_one(scope, buf, destination, tag)
                return
        targets = [destination]
    else:
        targets = _destinations(call, scope, destination)
        _check_tag(call, scope, tag, none_ok=False)
    buf = None
    plain = _plain(x)
    for d in targets:
        if _by_rendezvous(plain, scope, d):
            array, family = plain
            sending = _Rendezvous(scope, array, family, d, tag)
            try:
                sending.start()
                sending.wait(call)
            except BaseException:
                sending.give_up()
                raise
            finally:
                sending.let_go()
            continue
        if buf is None:
            buf = _message_or_failure(x, plain, call, scope, targets, tag)
        _isend(scope, buf, d, tag)


def _message_or_failure(x, plain, call, scope, destinations, tag):
    """``_message``; where ``x`` cannot be sent (it cannot be pickled), a failure
    marker goes to each destination instead before the error is raised here, so that
    its receive raises too rather than take this worker's next message as this one
    (sends and receives would be paired one apart from then on, silently)."""
    try:
        return _message(x, plain, call, scope)
    except SpmdError as exc:
        marker = _pack.encode(_SendFailed(scope.index, f"{type(exc).__name__}: {exc}"),
                              lambda: call)
        for d in destinations:
            _isend(scope, marker, d, tag)
        raise


class _SendFailed:
    """What a send whose value could not be sent sends in its place (see
    ``_message_or_failure``): its receiver raises, naming the sender and its error."""

    __slots__ = ("sender", "text")

    def __init__(self, sender, text):
        self.sender, self.text = sender, text

    def __reduce__(self):
        return (_SendFailed, (self.sender, self.text))


def _refuse_failed(value, scope, call, tag):
    """Raise on the receiver of a failed send's marker (see ``_SendFailed``)."""
    raise SpmdError(
        f"{call} ({scope.who()}): worker {value.sender} could not send the value this "
        f"receive would have taken{'' if not tag else f' (tag {tag})'}, and raised "
        f"there: {value.text}")


def _kept_message(x):
    """The message of a small numpy array or plain CPU tensor whose header is kept (a
    loop's), built by joining bytes; None for anything else (the general way)."""
    kind = type(x)
    if kind is np.ndarray:
        return _pack.kept_array_message(x)
    if kind.__module__ == "torch":
        return _kept_tensor_message(x)
    return None


def _kept_tensor_message(t):
    """``_kept_message`` of a torch tensor. A tensor of the dtype and shape sent last the
    general way (a loop's), plain (on the CPU, dense, C-ordered, no grad, no negative or
    conjugate bit: what ``tensor_array`` takes), is read at its address: its numpy view
    costs torch 0.5 us, a third of a 4 KiB message's time."""
    global _last_tensor
    dtype, shape, prefix, nbytes, complex_, tensor, strided = _last_tensor
    try:  # (torch raises for a nested tensor, which has no shape, and for one without
        # storage of its own, inside torch.func: the general way, at no cost to the others)
        if t.dtype is dtype and t.shape == shape and type(t) is tensor and t.is_cpu and \
                t.layout is strided and not t.requires_grad and not t.is_neg() and \
                not (complex_ and t.is_conj()) and t.is_contiguous():
            return prefix + MPI.memory.fromaddress(t.data_ptr(), nbytes)
    except RuntimeError:
        return None
    array = _pack.tensor_array(t)
    if array is None:
        return None
    message = _pack.kept_array_message(array, "torch")
    if message is not None and array.nbytes:  # (an empty tensor may have no address)
        torch = sys.modules["torch"]
        # (one tuple: a thread reads all of it or none)
        _last_tensor = (t.dtype, t.shape, message[:len(message) - array.nbytes],
                        array.nbytes, t.is_complex(), torch.Tensor, torch.strided)
    return message


_last_tensor: Tuple[Any, ...] = (None, None, b"", 0, False, None, None)


# Held while a message leaves, and by a message in two parts (a head, then the bytes that
# follow it) from its head until its bytes are posted: the receiver takes the next
# message from this worker with that tag as those bytes, so no other thread's message may
# leave between them (it was taken as the bytes: "Message truncated", or wrong values).
# Reentrant: a callback run inside a rendezvous' wait may send.
_SENDING = threading.RLock()


def _isend(scope, buf, destination, tag):
    with _SENDING:  # (see spmd_send: not acquire() then try)
        if len(buf) > _INBOX:  # the receiver's inbox takes the head; the message follows
            _isend_apart(scope, _pack.head_follows(len(buf)), buf, destination, tag)
        else:
            _isend_one(scope, buf, destination, tag)
    if destination == scope.index:
        scope.self_sends[tag] = scope.self_sends.get(tag, 0) + 1


def _isend_apart(scope, head, buf, destination, tag):
    """Send ``head``, then ``buf``, as one step that a Ctrl-C cannot cut (see
    ``_ending.Sends.post``): the head left alone, the receiver took this worker's next
    message with ``tag`` for its bytes ("Message truncated" or wrong values)."""
    if _count.ON:
        _count.p2p(sent=len(head))
        _count.p2p(sent=len(buf))
    _ending.SENDS.post(scope.comm, (head, buf), destination - 1, tag,
                       scope.world_ranks[destination - 1])


def _isend_one(scope, buf, destination, tag):
    try:
        request = scope.comm.Isend(buf, destination - 1, tag)
        if _count.ON:
            _count.p2p(sent=len(buf))
        if not request.Test():  # a small message usually leaves at once: nothing to keep
            _ending.SENDS.track(request, buf, scope.world_ranks[destination - 1])
    except BaseException:
        # A Ctrl-C is raised as a call returns, before its value is kept: raised as Isend
        # returned, the request was dropped (freed, its send going on) and its buffer
        # freed while MPI read it (the receiver got other bytes). The buffer is kept for
        # good (one per such interrupt; keeping each request as it is posted, in one C
        # call, cost 0.2 us a message).
        _CUT_OFF.append(buf)
        raise


_CUT_OFF: list = []  # buffers of sends an exception may have parted from their requests


def _receive(scope, source, tag, status, call, out=None):
    """The value of the next message from ``source`` (None: any worker) with ``tag``
    (None: any), its source and tag into ``status``.

    From a given worker, the receive is posted into the scope's inbox, a buffer as large
    as any first message (larger ones follow their head, see ``_isend``), so that no
    probe is needed to learn its size; it is tested in a tight loop first (the message
    is often there by now), then waited for by ``_wait.spin``, which raises instead of
    waiting for ever when no worker that could send it is left, and after
    SPMDLAB_TIMEOUT. A message that arrives as such a wait gives up is kept for the next
    receive. From any worker, the message is probed for (``_probed``).

    ``out``: ``(message, destination)`` to send once the receive is posted (for
    ``spmd_send_receive``, from a given worker other than this one, none kept early)."""
    if scope.early:
        buf = _early(scope, source, tag, status)
        if buf is not None:
            return _value(scope, buf, status, call)
    if source == scope.index or (source is None and scope.size == 1):
        _check_self_sent(call, scope, tag)
    if source is None:
        return _value(scope, _probed(scope, tag, status, call), status, call)
    box, request, posted = scope.inbox, None, None
    try:
        scope.inbox = False  # in use (by this receive, until it ends)
        if box is None:  # (the scope's first receive from a given worker)
            box = _Inbox()
        if box:
            inbox, request = box.buf, box.started(scope.comm, source, tag)
        else:  # (in use by a receive that this one interrupts: a callback's)
            inbox, posted = bytearray(_INBOX), []  # (kept by the C call that posts it)
            posted.extend(map(scope.comm.Irecv, (inbox,), (source - 1,),
                              (MPI.ANY_TAG if tag is None else tag,)))
            request = posted[0]
        if out is not None:
            _isend(scope, out[0], out[1], tag)
        test = request.Test
        for _ in range(_QUICK_TESTS):
            if test(status):
                break
        else:
            _wait.spin(lambda: test(status), scope, call, [scope.world_ranks[source - 1]],
                       kind="recv", tag=tag)
        # (in the try: a Ctrl-C raised as Get_count returns keeps the message below)
        buf = inbox[:status.Get_count(MPI.BYTE)]
    except BaseException:
        # A signal's handler runs as a call returns, before its value is kept: a Ctrl-C
        # that came while the inbox's receive was started left ``request`` None with the
        # receive active (it took the next message, and the next receive's start failed)
        if request is None and box:
            request = box.active(scope.comm, source, tag)
        if request is None and posted:
            request = posted[0]
        if request is not None:
            if status.Get_source() == MPI.ANY_SOURCE:  # (else it completed: status filled)
                request.Cancel()
                request.Wait(status)
            if not status.Is_cancelled():  # it came after all: the next receive gets it
                scope.early.append((status.Get_source(), status.Get_tag(),
                                    inbox[:status.Get_count(MPI.BYTE)]))
        raise
    finally:
        if box:
            scope.inbox = box
    return _value(scope, buf, status, call)


class _Inbox:
    """A scope's inbox: the buffer its receives from a given worker land in, and a
    persistent receive into it for each (source, tag) met lately (starting one costs
    half what posting a new receive does: no buffer or request to make), on the
    scope's communicator (a pool's worker gets new ones after a stopped block)."""

    __slots__ = ("buf", "posted", "comm")

    def __init__(self):
        self.buf = bytearray(_INBOX)
        self.posted = {}  # (source, tag) -> an inactive persistent receive into buf
        self.comm = None  # the communicator they receive on

    def started(self, comm, source, tag):
        """The persistent receive from ``source`` (1-based) with ``tag`` (None: any) on
        ``comm``, started."""
        if comm is not self.comm:
            self.free()
            self.comm = comm
        request = self.posted.get((source, tag))
        if request is None:
            if len(self.posted) >= _POSTED:  # (a program that uses many tags)
                self.free()
            request = self.posted[(source, tag)] = comm.Recv_init(
                self.buf, source - 1, MPI.ANY_TAG if tag is None else tag)
        request.Start()
        return request

    def active(self, comm, source, tag):
        """The persistent receive from ``source`` with ``tag`` on ``comm`` if it is
        active, else None (an inactive one's status is empty)."""
        request = self.posted.get((source, tag)) if comm is self.comm else None
        status = MPI.Status()
        if request is None or (request.Get_status(status) and
                               status.Get_source() == MPI.ANY_SOURCE):
            return None
        return request

    def free(self):
        for request in self.posted.values():
            request.Free()
        self.posted.clear()


@_ending.at_exit
def _free_inboxes():
    """At the end of the program: free the persistent receives (MPI warns of those left
    at its end). None is active: every receive completes or withdraws its own."""
    for scope in _world.SCOPES:
        if scope.inbox:
            scope.inbox.free()


def _probed(scope, tag, status, call):
    """The next message from any worker with ``tag`` (None: any), matched by a probe.

    (MPICH 5.0 with two nodes or more never completes a receive from any source posted
    after a message from another node has arrived: such a receive must be probed.)"""
    comm, mpi_tag = scope.comm, MPI.ANY_TAG if tag is None else tag
    # The message is matched (Improbe) by a C call that keeps it: a Ctrl-C is raised as a
    # call returns, before its value is kept, and a message matched then was lost (MPI
    # gives it to nobody else: the next receive got the message after it). A deque of
    # one: the cheapest such call; made once a plain look has seen the message.
    iprobe, found = comm.Iprobe, collections.deque((None,), maxlen=1)
    where = ((MPI.ANY_SOURCE, mpi_tag, status),)
    buf = None
    try:
        while True:
            if not iprobe(MPI.ANY_SOURCE, mpi_tag):
                _wait.spin(lambda: iprobe(MPI.ANY_SOURCE, mpi_tag), scope, call,
                           scope.others, any_of=True, kind="recv", tag=tag)
            found.extend(itertools.starmap(comm.Improbe, where))
            message = found[0]
            if message is not None:  # (else another thread's receive took it)
                break
        # (a first message: at most an inbox's size, a larger one following its head)
        buf = bytearray(status.Get_count(MPI.BYTE))
        message.Recv(buf)
    except BaseException:
        message = found[0]
        if message is not None:  # matched: the next receive gets it
            if message:  # (not yet received: a received message's handle is null)
                buf = bytearray(status.Get_count(MPI.BYTE))
                message.Recv(buf)
            scope.early.append((status.Get_source(), status.Get_tag(), buf))
        raise
    return buf


def _early(scope, source, tag, status):
    """The first message kept from a receive that gave up (see ``_receive``) that
    matches; None if none does. Its source and tag go into ``status``."""
    i = _early_index(scope, source, tag)
    if i is None:
        return None
    src, tg, buf = scope.early.pop(i)
    status.Set_source(src)
    status.Set_tag(tg)
    return buf


def _early_index(scope, source, tag):
    """Where the first kept message from ``source`` with ``tag`` (None: any) is in
    ``scope.early``; None if none matches."""
    for i, (src, tg, _) in enumerate(scope.early):
        if (source is None or src == source - 1) and (tag is None or tg == tag):
            return i
    return None


def _took_own(scope, status):
    """Count off a received message that this worker sent itself (see ``_isend``)."""
    if status.Get_source() == scope.rank:
        tag = status.Get_tag()
        scope.self_sends[tag] -= 1
        if not scope.self_sends[tag]:
            del scope.self_sends[tag]


def _check_self_sent(call, scope, tag):
    """Only this worker can send what it waits for: with no such message sent, none
    ever will be."""
    sent = scope.self_sends
    if not (sent.get(tag, 0) if tag is not None else sum(sent.values())):
        raise SpmdValueError(
            f"{call} ({scope.who()}): receiving from this worker itself"
            f"{'' if tag is None else f' with tag {tag}'}, but no such message was "
            f"sent to it, so the receive would wait for ever; send first (spmd_send "
            f"returns at once)")


def _value(scope, buf, status, call):
    """The value of a received first message ``buf``, with the bytes that follow it
    apart received when it has them (see ``_Rendezvous``, ``_isend``); ``buf`` may also
    be a ``_Following`` kept from a receive that gave up waiting for those bytes."""
    if type(buf) is _Following:
        return buf.value(scope, call)
    try:  # (no cost unless it raises: this is every small message's way)
        if _count.ON:
            _count.p2p(received=len(buf))
        value = _pack.decode_received(buf)
    except Exception as exc:
        if scope.self_sends:
            _took_own(scope, status)
        raise _not_unpickled(exc, scope, call, status.Get_source(),
                             status.Get_tag()) from exc
    except BaseException:
        # a Ctrl-C before the value was made: the message was lost (its receive had
        # completed); the next receive from its source gets it
        scope.early.append((status.Get_source(), status.Get_tag(), buf))
        raise
    if scope.self_sends:
        _took_own(scope, status)
    if value is not _pack.FOLLOWS:
        if type(value) is _SendFailed:
            _refuse_failed(value, scope, call, status.Get_tag())
        return value
    return _accept(scope, buf, status.Get_source(), status.Get_tag()).value(scope, call)


class _Following:
    """A message whose first part has been received and whose bytes that follow apart
    are on their way into ``full`` (``request``). A receive that gives up waiting for
    them (SPMDLAB_TIMEOUT, an interrupt) keeps it in ``scope.early``, so that the next
    receive from its source gets it, rather than the source's next message (and the
    bytes do not land in a buffer recycled meanwhile)."""

    __slots__ = ("source", "tag", "full", "request")

    def __init__(self, source, tag, full, request):
        self.source, self.tag, self.full, self.request = source, tag, full, request

    def value(self, scope, call):
        """The message's value once its bytes are in; kept for the next receive if the
        wait for them raises."""
        request, needed = self.request, [scope.world_ranks[self.source]]
        decoding = False
        try:
            if len(self.full) >= _WAIT_IN_MPI:
                _wait.wait_body(request, scope, call, needed, collective=False)
            elif not request.Test():
                _wait.spin(request.Test, scope, call, needed)
            decoding = True
            return _pack.decode(self.full)
        except BaseException as exc:
            if decoding and isinstance(exc, Exception):  # (not a Ctrl-C: the value's)
                raise _not_unpickled(exc, scope, call, self.source, self.tag) from exc
            scope.early.append((self.source, self.tag, self))
            raise


def _not_unpickled(exc, scope, call, source, tag):
    """The error of a message from scope rank ``source`` whose decoding raised ``exc``: a
    value that cannot be made again here (a class this worker cannot import, a
    ``__setstate__`` that fails) raises SpmdTypeError naming the call, this worker and
    the sender, as a value that cannot be pickled does on its sender (it raised the
    unpickler's bare error, which named neither)."""
    return SpmdTypeError(
        f"{call} ({scope.who()}): the message from worker {source + 1} (tag {tag}) "
        f"cannot be unpickled here: {type(exc).__name__}: {exc}")


def _accept(scope, head, source, tag, keep=None):
    """For a first message whose bytes follow apart: the ``_Following`` of the whole
    message, with the receive of the rest posted, and, for an array sent from its own
    memory, the sender told so (clear to send).

    The head is taken: whatever interrupts this (a Ctrl-C, raised as a call returns,
    before its value is kept) keeps the message for the next receive from ``source``,
    its bytes' receive posted (``keep``: a function given its ``_Following`` instead).
    (The receive's request, dropped as Irecv returned, was freed while active: its bytes
    landed in a buffer recycled for the next result; raised before it was posted,
    nothing took them, and the next receive from ``source`` took them for its message:
    "Message truncated", or wrong values.)"""
    posted: list = []  # the bytes' receive, kept by the C call that posts it
    full = None
    try:
        total, start, seq = _pack.apart(head)
        full = _pack.results.empty(_pack._BYTE, total)  # (recycled once its values drop)
        _pack.begin_whole(full, head, start)
        posted.extend(map(scope.comm.Irecv, (full[start:],), (source,), (tag,)))
        if seq is not None:  # (format 3: the array is sent once it is asked for)
            note = _SEQ.pack(seq)
            _Rendezvous.notes.append(note)  # (MPI may read it after the request is gone)
            del _Rendezvous.notes[:-64]
            answer = _world.CTL.Isend(note, scope.world_ranks[source], _world.CTS_TAG)
            if not answer.Test():  # a tiny message: MPI sends it on its own
                answer.Free()
        return _Following(source, tag, full, posted[0])
    except BaseException:
        if not posted:
            total, start, _ = _pack.apart(head)
            full = _pack.results.empty(_pack._BYTE, total)
            _pack.begin_whole(full, head, start)
            posted.append(scope.comm.Irecv(full[start:], source, tag))
        # (unasked, the sender of an array sends a copy once its patience runs out)
        following = _Following(source, tag, full, posted[0])
        if keep is None:
            scope.early.append((source, tag, following))
        else:
            keep(following)
        raise


_SEQ = struct.Struct("<q")


class _Rendezvous:
    """A large numpy array (or a tensor's numpy view) sent from its own memory, no copy.

    The sender sends a small first message (the header and a number); the receiver
    posts the receive of the array into its final buffer and answers "clear to send"
    with that number; then the array leaves as it is. ``spmd_send`` must return without
    waiting for the receiver: it waits for the answer about as long as copying the array
    would take, then sends a copy instead and drops the answer when it comes. So a
    receiver that already waits gets the array at MPI's own speed, and a busy one costs
    the sender one copy, as it would have anyway."""

    _numbers = itertools.count(1)
    arrived: set = set()  # (world rank, number): answers not yet used
    notes: list = []  # the buffers of the last answers sent (MPI may still read them)
    copies = 0  # arrays that left as copies (the receiver was not ready in time)
    late: set = set()  # numbers whose array left as a copy: their answers are dropped
    lock = threading.Lock()

    def __init__(self, scope, x, family, destination, tag):
        # (sent as bytes: MPI's buffer interface refuses byte-swapped, datetime and some
        # structured dtypes, which the header describes anyway)
        self.scope, self.x, self.tag = scope, x.reshape(-1).view(np.uint8), tag
        self.dest = destination - 1
        self.world_rank = scope.world_ranks[self.dest]
        self.number = next(self._numbers)
        self.request = None
        self.copied = False
        # the requests of the head and of the array's bytes, each added as it is posted
        # (see _post)
        self.heads, self.bodies = [], []
        self.held: list = []  # [True] while this send holds _SENDING (see start)
        self.head = _pack.head_apart(x, self.number, family)
        # how long a copy of the array takes, about (memory moves ~4 GB/s at worst)
        self.patience = max(20e-6, x.nbytes / 4e9)
        self.started = 0.0

    def start(self):
        """Send the head (called inside the caller's ``try``, whose ``give_up`` and
        ``let_go`` see to a send left between the head and the array's bytes)."""
        # until the array's bytes are posted (see let_go); recorded by the C call that
        # takes it: a Ctrl-C that came while this thread waited for the lock is raised as
        # the lock is taken, and a flag set after it was never set (the lock held for
        # ever: every other thread's send hung)
        self.held.extend(map(_SENDING.acquire, (True,)))
        self.started = time.perf_counter()
        first = self._post(self.heads, self.head)
        if not first.Test():
            _ending.SENDS.track(first, self.head, self.world_rank)

    def step(self):
        """Advance; True once the array has left (or is on its way from a copy)."""
        if self.copied:
            return True
        if self.request is not None:
            return self.request.Test()
        if self._answered():
            self.request = self._post(self.bodies, self.x)
            self.let_go()
            return self.request.Test()
        if time.perf_counter() - self.started > self.patience:
            with self.lock:
                if not self._answered(poll=False):
                    self.late.add((self.world_rank, self.number))
                    self._send_copy()
                    self.let_go()
                    return True
            self.request = self._post(self.bodies, self.x)
            self.let_go()
            return self.request.Test()
        return False

    def let_go(self):
        """Release ``_SENDING`` (held from the head's send), once the array's bytes are
        posted or the send is given up; then other messages may leave. A send given up
        after its head left (a Ctrl-C, SPMDLAB_TIMEOUT, an error in its wait) posts a copy
        of the array first: the receiver takes the next message from this worker with
        this tag as the bytes that follow the head, so the next message sent took their
        place (wrong values, silently, and that message lost)."""
        if not self.held:
            return
        try:
            if self.heads and not self.bodies:
                with self.lock:
                    if not self._answered(poll=False):
                        self.late.add((self.world_rank, self.number))
                    self._send_copy()
        finally:
            if _SENDING._is_owned():
                _SENDING.release()
            self.held.clear()

    def give_up(self):
        """The send left by an exception (a Ctrl-C, SPMDLAB_TIMEOUT, a worker that left):
        ``let_go``, and the sends posted kept until they complete (a request dropped
        while active frees the buffer MPI still reads: the receiver got other bytes)."""
        try:
            self.let_go()
        finally:
            waited = [entry[0] for entry in _wait.LEFT_ACTIVE]  # (kept by the wait left)
            for request in self.heads + self.bodies:
                if not any(request is r for r in waited):
                    _ending.SENDS.track(request, None, self.world_rank)

    def _send_copy(self):
        """Post a copy of the array (with ``lock`` held, its answer marked late)."""
        copy = self.x.copy()
        request = self._post(self.bodies, copy)
        self.copied = True
        _Rendezvous.copies += 1
        if not request.Test():
            _ending.SENDS.track(request, copy, self.world_rank)

    def _post(self, into, buf):
        """Send ``buf`` to the destination, its request added to the list ``into`` by
        the same C call that posts it: a Ctrl-C (raised between two of Python's steps)
        cannot fall between the send and its record, so ``let_go`` knows whether the head
        or the bytes have left (a second copy after the bytes sent the array twice, the
        second taken as the next message). Returns the request."""
        into.extend(map(self.scope.comm.Isend, (buf,), (self.dest,), (self.tag,)))
        return into[-1]

    def wait(self, call):
        """Until the array has left: the answer is waited for by polling (it must be
        looked for), a large array's own send inside MPI (see ``_wait.wait_body``),
        where it moves faster than when each look at it is a Python loop's turn."""
        if self.x.nbytes < _WAIT_IN_MPI:  # (a short send: looking costs less than MPI's wait)
            if not self.step():
                _wait.spin(self.step, self.scope, call, [self.world_rank])
        elif _wait.spin(self.posted, self.scope, call, [self.world_rank]) is not _LEFT:
            _wait.wait_body(self.request, self.scope, call, [self.world_rank],
                            collective=False)

    def posted(self):
        """``_LEFT`` once the array has left, True once its send is posted, else False."""
        if self.step():
            return _LEFT
        return self.request is not None

    def _answered(self, poll=True):
        key = (self.world_rank, self.number)
        if poll:
            _take_answers(self.world_rank)
        if key in self.arrived:
            self.arrived.discard(key)
            return True
        return False


_LEFT = "left"  # (_Rendezvous.posted: the array has left)


def _take_answers(world_rank=None):
    """Receive the clear-to-send answers waiting (from ``world_rank``; None: any): kept
    for their sender, or dropped when that array has already left as a copy."""
    if world_rank is None:
        world_rank = MPI.ANY_SOURCE
    ctl, status, note = _world.CTL, MPI.Status(), bytearray(8)
    with _Rendezvous.lock:
        while True:
            message = ctl.Improbe(world_rank, _world.CTS_TAG, status)
            if message is None:
                return
            message.Recv(note)
            key = (status.Get_source(), _SEQ.unpack(note)[0])
            if key in _Rendezvous.late:
                _Rendezvous.late.discard(key)
            else:
                _Rendezvous.arrived.add(key)


def _plain(x):
    """``(array, family)`` for a value that travels as one array's bytes: a C-ordered
    numpy array of plain values, or a torch CPU tensor that is its own numpy view (its
    view; family "torch": received as a tensor); else None."""
    kind = type(x)
    if kind is np.ndarray:
        return (x, "numpy") if x.flags.c_contiguous and not x.dtype.hasobject else None
    if kind.__module__ == "torch":
        array = _pack.tensor_array(x)
        if array is not None:
            return array, "torch"
    return None


def _by_rendezvous(plain, scope, destination):
    """Whether a ``_plain`` value goes by rendezvous: one larger than 64 KiB (256 KiB
    with more workers than cores), to another worker (a message to oneself is a copy:
    nobody else can receive it). An array of 64 KiB fits the receiver's inbox with its
    header: one message, received where it is posted (at 1x2 a 64 KiB exchange took
    20-24 us so against 26-34 us by rendezvous). An array whose header the receiver's
    inbox cannot take (a structured dtype of thousands of fields) is sent whole, its
    head first (see ``_isend``): its first message would not fit the inbox."""
    return plain is not None and destination != scope.index and \
        plain[0].nbytes > (_OVERSUBSCRIBED_RENDEZVOUS if _world.OVERSUBSCRIBED
                           else _pack._SMALL) and \
        len(_pack._one_array(*plain).prefix) + _SEQ.size <= _INBOX


def _message(x, plain, call, scope):
    """The one message that holds ``x`` (``plain``: its ``_plain`` form, or None)."""
    if plain is not None:  # (a small one's header is looked up once, a large one's too)
        return plain[0].nbytes <= _pack._SMALL and _pack.kept_array_message(*plain) or \
            _pack.array_message(*plain)
    return _pack.encode(x, lambda: f"{call} ({scope.who()})")


# With more workers than cores, each message the rendezvous adds waits for a time slice:
# arrays below this size leave copied into one message instead (at 4 workers on 2 cores,
# a 64 KiB ping-pong took 37-47 us so against 67-91 us by rendezvous)
_OVERSUBSCRIBED_RENDEZVOUS = 1 << 18
# A point-to-point message larger than this goes as two: a head that an inbox of this
# size takes, then the message (arrays larger than 64 KiB leave by rendezvous instead,
# unless more workers than cores make one message cheaper; see _by_rendezvous)
_INBOX = _pack._SMALL + _pack.HEADROOM
# A transfer this large, once posted, is waited for inside MPI (``_wait.wait_body``): at
# 1x2 a 4 MiB ring exchange took 620-700 us so against 780-820 us when each look at it
# was a turn of a Python loop; a 64 KiB one was slower so (26-31 against 18-23 us)
_WAIT_IN_MPI = 1 << 19
# An inbox keeps the persistent receives of this many (source, tag) pairs at most
_POSTED = 64
# A receive first tests this many times in a tight loop before the wait that watches for
# workers that have left, timeouts and stall reports.
_QUICK_TESTS = 64


@overload
def spmd_receive(source: Optional[int] = None, tag: Optional[int] = None, *,
                 status: Literal[False] = False) -> Any: ...
@overload
def spmd_receive(source: Optional[int] = None, tag: Optional[int] = None, *,
                 status: Literal[True]) -> Tuple[Any, int, int]: ...
@overload
def spmd_receive(source: Optional[int] = None, tag: Optional[int] = None, *,
                 status: bool) -> Any: ...


def spmd_receive(source: Optional[int] = None, tag: Optional[int] = None, *,
                 status: bool = False) -> Any:
    """Wait for a message and return its value (MATLAB ``spmdReceive``, ``labReceive``).

    ``source`` and ``tag`` None match any worker and any tag. With ``status=True`` the
    result is ``(value, source, tag)``. Raises SpmdPeerError instead of waiting forever
    when the worker(s) that could send have finished the program.

    Parameters
    ----------
    source
        The sending worker (1-based); None: any worker.
    tag
        The tag to match; None: any tag.
    status
        True: return ``(value, source, tag)`` instead of the value.

    Examples
    --------
    >>> spmd_send({"step": 1}, spmd_index(), tag=7)
    >>> spmd_receive(tag=7)
    {'step': 1}
    >>> spmd_send("hello", spmd_index())
    >>> data, source, tag = spmd_receive(status=True)   # [data, src, tag] = spmdReceive
    >>> data, source, tag
    ('hello', 1, 0)

    MATLAB
    ------
    ``spmdReceive``, ``spmdReceive(source, tag)``, ``[X, source, tag] = spmdReceive(...)``,
    ``labReceive('any', tag)``
    """
    scope = _world.current()
    if _world.PARFOR_ITEM is not None:
        _world.refuse_in_parfor("spmd_receive", scope)
    if not (source is None or (type(source) is int and 0 < source <= scope.size)) or \
            not (tag is None or (type(tag) is int and 0 <= tag <= _world.TAG_UB)):
        call = "spmd_receive"
        _check(call, scope, "source", source, none_ok=True)
        _check_tag(call, scope, tag, none_ok=True)
    st = MPI.Status()
    value = _receive(scope, source, tag, st, "spmd_receive")
    if status:
        return value, st.Get_source() + 1, st.Get_tag()
    return value


@overload
def spmd_probe(source: Optional[int] = None, tag: Optional[int] = None, *,
               status: Literal[False] = False) -> bool: ...
@overload
def spmd_probe(source: Optional[int] = None, tag: Optional[int] = None, *,
               status: Literal[True]) -> Tuple[bool, Optional[int], Optional[int]]: ...
@overload
def spmd_probe(source: Optional[int] = None, tag: Optional[int] = None, *,
               status: bool) -> Any: ...


def spmd_probe(source: Optional[int] = None, tag: Optional[int] = None, *,
               status: bool = False) -> Any:
    """Whether a message from ``source`` with ``tag`` is waiting; consumes nothing.

    MATLAB ``spmdProbe`` / ``labProbe``. None matches any. With ``status=True`` the result
    is ``(found, source, tag)`` (source and tag None when nothing is waiting).

    Parameters
    ----------
    source
        The sending worker (1-based); None: any worker.
    tag
        The tag to match; None: any tag.
    status
        True: return ``(found, source, tag)``.

    Examples
    --------
    >>> spmd_probe()
    False
    >>> spmd_send(1, spmd_index(), tag=3)
    >>> spmd_probe(tag=3), spmd_probe(tag=3, status=True)
    (True, (True, 1, 3))
    >>> spmd_receive(tag=3)
    1

    MATLAB
    ------
    ``tf = spmdProbe(source, tag)``, ``[tf, source, tag] = spmdProbe(...)``, ``labProbe``
    """
    call = "spmd_probe"
    scope = _world.current()
    if _world.PARFOR_ITEM is not None:
        _world.refuse_in_parfor("spmd_probe", scope)
    _check(call, scope, "source", source, none_ok=True)
    _check_tag(call, scope, tag, none_ok=True)
    i = _early_index(scope, source, tag) if scope.early else None
    if i is not None:  # kept from a receive that gave up: it comes first
        src, tg, _ = scope.early[i]
        return (True, src + 1, tg) if status else True
    st = MPI.Status()
    src = MPI.ANY_SOURCE if source is None else source - 1
    found = scope.comm.Iprobe(src, MPI.ANY_TAG if tag is None else tag, st)
    if not found and scope.self_sends and source in (None, scope.index) and \
            (tag is None or tag in scope.self_sends):
        found = _own_probed(scope, tag, st)
    if status:
        return (True, st.Get_source() + 1, st.Get_tag()) if found else (False, None, None)
    return found


def _own_probed(scope, tag, st):
    """Whether a message this worker sent itself with ``tag`` (None: any) is waiting, as
    it is: sent, not yet received (``scope.self_sends``); MPI may need a few looks to
    show a send to oneself (spmd_send returns before it has moved)."""
    end = time.monotonic() + 1.0
    own = MPI.ANY_TAG if tag is None else tag
    while not scope.comm.Iprobe(scope.rank, own, st):
        if time.monotonic() > end:
            return False
    return True


def spmd_send_receive(destination: Optional[int], source: Optional[int], x: Any,
                      tag: int = 0) -> Any:
    """Send ``x`` to ``destination`` and receive from ``source`` in one deadlock-free step.

    MATLAB ``spmdSendReceive`` / ``labSendReceive``: every worker of a ring can call it at
    once. ``destination`` None sends nothing; ``source`` None receives nothing and
    returns None.

    Parameters
    ----------
    destination
        The worker to send ``x`` to; None: send nothing.
    source
        The worker to receive from; None: receive nothing (the result is None).
    x
        The value to send (any picklable value).
    tag
        The tag of both the message sent and the one received.

    Examples
    --------
    Shift a value one worker to the right around a ring, without deadlock:

    >>> n, k = spmd_size(), spmd_index()
    >>> spmd_send_receive(k % n + 1, (k - 2) % n + 1, k * 100)
    100

    MATLAB
    ------
    ``B = spmdSendReceive(destination, source, A, tag)``, ``labSendReceive``
    """
    call = "spmd_send_receive"
    scope = _world.current()
    if _world.PARFOR_ITEM is not None:
        _world.refuse_in_parfor("spmd_send_receive", scope)
    n = scope.size
    if not ((destination is None or (type(destination) is int and 0 < destination <= n))
            and (source is None or (type(source) is int and 0 < source <= n))
            and type(tag) is int and 0 <= tag <= _world.TAG_UB):
        _check(call, scope, "destination", destination, none_ok=True)
        _check(call, scope, "source", source, none_ok=True)
        _check_tag(call, scope, tag, none_ok=False)
    if source == scope.index and destination != scope.index:
        # before anything is sent (a large array's exchange would wait for ever)
        _check_self_sent(call, scope, tag)
    if destination is not None:
        buf = _kept_message(x) if destination != scope.index else None
        if buf is None:
            plain = _plain(x)
            if _by_rendezvous(plain, scope, destination):
                return _exchange_in_place(call, scope, destination, source, plain, tag)
            try:
                buf = _message_or_failure(x, plain, call, scope, [destination], tag)
            except SpmdError:
                if source is not None:  # the message from source is still taken (and
                    try:               # dropped): the next exchange gets the next one
                        _receive(scope, source, tag, MPI.Status(), call)
                    except SpmdError:
                        pass
                raise
        if source is not None and source != scope.index and not scope.early:
            # the receive is posted first, so that the message from source lands
            # straight in it, and sends on its way
            return _receive(scope, source, tag, MPI.Status(), call, (buf, destination))
        _isend(scope, buf, destination, tag)
    if source is None:
        return None
    return _receive(scope, source, tag, MPI.Status(), call)


def _exchange_in_place(call, scope, destination, source, apart, tag):
    """``spmd_send_receive`` of a large array or tensor (``apart``: its numpy array and
    family, see ``_plain``): it leaves by rendezvous while this worker receives, both
    advanced in one loop, so a ring of them never waits on itself and the array is sent
    from its own memory when the receiver is ready."""
    array, family = apart
    # "taken": the message received (its first message, or its _Following) until its
    # value is returned: whatever interrupts the exchange keeps it for the next receive
    state = {"value": None, "pending": source is not None, "following": None,
             "error": None, "taken": None}
    status, src = MPI.Status(), None if source is None else source - 1
    # [the message matched, its buffer]: kept by the C calls that make them (see _probed)
    found: list = [None]
    where, improbe = ((src,), (tag,), (status,)), scope.comm.Improbe

    def taken(following):
        state["taken"] = following

    def received(buf):
        state["taken"] = buf
        state["pending"] = False
        if type(buf) is _Following:  # (kept from a receive that gave up waiting for it)
            state["following"] = buf
            return
        _took_own(scope, status)
        try:
            value = _pack.decode(buf)
        except Exception as exc:  # raised once this worker's send has completed too
            state["error"] = _not_unpickled(exc, scope, call, status.Get_source(),
                                            status.Get_tag())
            state["error"].__cause__ = exc
            return
        if value is _pack.FOLLOWS:  # the rest follows
            state["taken"] = state["following"] = _accept(scope, buf, src, tag, taken)
        else:
            state["value"] = value

    if state["pending"] and scope.early:
        buf = _early(scope, source, tag, status)
        if buf is not None:
            received(buf)

    def step():
        sent = sending.step()
        if state["pending"]:
            found[:] = map(improbe, *where)
            if found[0] is not None:
                found.append(bytearray(status.Get_count(MPI.BYTE)))
                found[0].Recv(found[1])
                received(found[1])
        following = state["following"]
        if following is not None and following.request.Test():
            state["following"] = None
            try:
                state["value"] = _pack.decode(following.full)
            except Exception as exc:
                state["error"] = _not_unpickled(exc, scope, call, following.source,
                                                following.tag)
                state["error"].__cause__ = exc
        done = sent and not state["pending"] and state["following"] is None
        # once both sends of large arrays are posted, nothing is left to look for: the
        # rest is waited for inside MPI
        return done or (in_mpi and not state["pending"] and
                        (sent or sending.request is not None))

    in_mpi = array.nbytes >= _WAIT_IN_MPI

    needed = sorted({scope.world_ranks[destination - 1]} | (
        set() if source is None else {scope.world_ranks[source - 1]}))
    # (made last: from its start() on it holds _SENDING, released below in any case)
    sending = _Rendezvous(scope, array, family, destination, tag)
    try:
        sending.start()
        if not step():
            _wait.spin(step, scope, call, needed)
        if not sending.copied and sending.request:
            _wait.wait_body(sending.request, scope, call, [sending.world_rank],
                            collective=False)
    except BaseException:
        try:
            kept = state["taken"]
            if kept is None and found[0] is not None:  # matched, not yet handed over
                if found[0]:  # (not yet received: a received message's handle is null)
                    found[1:] = [bytearray(status.Get_count(MPI.BYTE))]
                    found[0].Recv(found[1])
                kept = found[1]
            if kept is not None:  # the next receive from source gets it
                scope.early.append((src, tag, kept))
        finally:
            sending.give_up()
        raise
    finally:
        sending.let_go()
    if state["error"] is not None:
        raise state["error"]
    if state["following"] is not None:
        state["value"] = state["following"].value(scope, call)
    if type(state["value"]) is _SendFailed:
        _refuse_failed(state["value"], scope, call, tag)
    return state["value"]


@_ending.at_exit
def _drop_late_answers():
    """At the end of the program: receive the clear-to-send answers still on their way
    (for arrays that left as copies), so that none is left unreceived."""
    if _Rendezvous.late:
        _take_answers()
