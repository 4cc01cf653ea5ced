"""Agreement and reductions through a fixed tree over worker numbers: O(log N).

Among a few workers (``SPMDLAB_TREE_ABOVE``, 4 by default) every collective's agreement
gathers one record from every worker (``_agree.Exchange``): one MPI call, and a small
reduction folds the N gathered values in worker order. Among more, that is O(N) bytes
received and records examined per call, for a scalar ``spmd_plus`` whose MPI
``Allreduce`` is O(log N). Here the records are combined instead, pairwise, by
recursive doubling over worker numbers:

- each worker's record (key, exact digest, size, flags, its payload) is merged with a
  partner's at each of ceil(log2 N) steps (two more when N is not a power of two: the
  first 2(N - P) workers, P the largest power of two up to N, pair up first and get the
  result back last); after the steps every worker holds the merged record;
- a merge keeps the lower worker range's key and notes in its flags any difference in
  keys or exact digests, any worker's error and whether every payload rode inline;
  mismatches and failures then reach every worker at once, and the readable
  descriptions are gathered only on that error path, as before (``_agree``);
- a reduction folds its payloads in the same merges, always ``lower op upper``: the
  bracketing is fixed by N alone (pairs of neighbours, then blocks of 2, 4, ...), so
  every worker gets the same bits at every node layout. For floats they may differ in
  the last bits from the left fold ``x1 op x2 op ... op xN`` a gathering exchange
  computes (a different order of the same additions);
- a larger value (64 KiB or more, across nodes) goes by halves along the same schedule
  (``scattered``), with the same bracketing; in shared memory on one node it is folded
  with that bracketing too (``_ops.tree_fold``), so the bits never depend on the layout;
- the calls that need every worker's record (``spmd_cat``'s lengths, a queue's counts)
  gather the 40-byte headers on demand, O(N) as their answers are.
"""

import struct
import time

import numpy as np

from . import _agree, _count, _pack, _wait, _world
from ._agree import FLAG_ERROR, FLAG_INLINE, HEADER, _HEAD, _raise_everywhere
from ._mpi import MPI
from ._ops import quiet
from ._stall import call_site

# merged-record flags (besides FLAG_ERROR and FLAG_INLINE, which keep their meaning: any
# worker failed; every worker's payload rode inline)
FLAG_MISMATCH = 4  # two workers' keys differ
FLAG_EXACT_DIFFERS = 8  # two workers' exact digests differ
FLAG_AUX_DIFFERS = 16  # two workers' aux words differ (the merged aux is the lowest's)
FLAG_OVERFLOW = 32  # a Python int result outgrew the record (see fold_scalar)
_OR_FLAGS = FLAG_ERROR | FLAG_MISMATCH | FLAG_EXACT_DIFFERS | FLAG_AUX_DIFFERS | \
    FLAG_OVERFLOW
_TAG = 0  # on the exchange's own communicator: nothing else travels there

ROOM = 1024  # payload bytes a merge can fold in the record


def schedule(size, rank):
    """This worker's part in a pass: ``(pre, partners, post)``.

    ``pre``: ("send", r) for a worker that hands its record to its neighbour r and waits
    for the result, ("recv", r) for one that folds its left neighbour's record in first,
    or None; ``partners``: the (worker, partner_is_lower) of each doubling step;
    ``post``: the neighbour the result goes back to, or None."""
    top = 1 << (size.bit_length() - 1)  # the largest power of two up to size
    rem = size - top
    if rank < 2 * rem:
        if rank % 2 == 0:
            return ("send", rank + 1), [], None
        pre, virtual = ("recv", rank - 1), rank // 2
    else:
        pre, virtual = None, rank - rem
    partners = []
    mask = 1
    while mask < top:
        other = virtual ^ mask
        partners.append((2 * other + 1 if other < rem else other + rem, other < virtual))
        mask <<= 1
    return pre, partners, (rank - 1 if pre is not None else None)


def merge_header(lo, hi, out):
    """Merge two records' headers (``lo`` from the lower workers) into ``out``; returns
    the merged flags."""
    k1, e1, b1, f1, a1 = _HEAD.unpack_from(lo, 0)
    k2, e2, b2, f2, a2 = _HEAD.unpack_from(hi, 0)
    flags = ((f1 | f2) & _OR_FLAGS) | (f1 & f2 & FLAG_INLINE)
    if k1 != k2:
        flags |= FLAG_MISMATCH
    if e1 != e2:
        flags |= FLAG_EXACT_DIFFERS
    if a1 != a2:
        flags |= FLAG_AUX_DIFFERS
    _HEAD.pack_into(out, 0, k1, e1, max(b1, b2), flags, a1)
    return flags


def tree_pass(scope, call, comm, acc, other, merge):
    """Collective over ``comm`` (the scope's workers): combine every worker's ``acc``
    (a writable buffer, the same size everywhere) pairwise along ``schedule``; each merge
    is ``merge(lo, hi, out)`` with ``out`` one of the two. ``other`` receives: it may be
    longer than ``acc`` (a worker whose call differs may send a record of another size:
    its key then differs too, and the merge notes it). Afterwards every worker's ``acc``
    holds the same bytes. Every wait goes through ``_wait``, so a worker that has
    left or SPMDLAB_TIMEOUT ends it with an error instead of a hang."""
    pre, partners, post = schedule(comm.Get_size(), comm.Get_rank())
    received = other[:len(acc)]
    if pre is not None:
        kind, peer = pre
        if kind == "send":
            _send(scope, call, comm, acc, peer)
            _recv(scope, call, comm, other, peer, len(acc))
            acc[:] = received
            return
        _recv(scope, call, comm, other, peer, len(acc))
        merge(received, acc, acc)
    for peer, lower in partners:
        _exchange(scope, call, comm, acc, other, peer)
        if lower:
            merge(received, acc, acc)
        else:
            merge(acc, received, acc)
    if post is not None:
        _send(scope, call, comm, acc, post)


def _exchange(scope, call, comm, acc, other, peer, received=None, records=1):
    """Send ``acc`` to ``peer`` and receive into ``other`` from it: ``received`` bytes,
    counted as the length of ``acc`` (a matching call's record) unless given."""
    receive = comm.Irecv(other, peer, _TAG)
    send = comm.Isend(acc, peer, _TAG)
    needed = [scope.world_ranks[peer]]  # a step waits on its partner alone
    try:
        _wait.wait_body(receive, scope, call, needed)
    except BaseException:  # (the send, too, may still read its buffer: kept with it)
        _wait.left(send)
        raise
    _wait.wait_body(send, scope, call, needed)
    if _count.ON:
        _count.add(sent_bytes=len(acc),
                   received_bytes=len(acc) if received is None else received,
                   sent_messages=1, received_messages=1, records_examined=records)


def _send(scope, call, comm, buf, peer):
    _wait.wait_body(comm.Isend(buf, peer, _TAG), scope, call, [scope.world_ranks[peer]])
    if _count.ON:
        _count.add(sent_bytes=len(buf), sent_messages=1)


def _recv(scope, call, comm, buf, peer, size):
    _wait.wait_body(comm.Irecv(buf, peer, _TAG), scope, call, [scope.world_ranks[peer]])
    if _count.ON:  # as many bytes as this worker's record (a matching call's)
        _count.add(received_bytes=size, received_messages=1, records_examined=1)


class TreeExchange:
    """The agreement of a scope of many workers: records merged along ``schedule``.

    Used as ``_agree.Exchange`` is (``run``, ``fast``, ``check``, ``field``, ``sizes``);
    nothing rides inline for the calls that read every worker's payload (``inline`` is
    0), and the reductions' fast paths fold their values in the merges (``fold_pass``)."""

    tree = True
    request = None  # the fast paths' flat code is for the gathering exchange
    inline = 0
    armed = 0  # (no room for a value after the record: see ``_agree.Exchange.arm``)

    def __init__(self, comm):
        self.size = comm.Get_size()
        self.rank = comm.Get_rank()
        self.comm = comm
        # the merges' messages: never matched by anything else. Made without blocking
        # (this runs on first use, perhaps when a worker has already finished the
        # program): the first pass waits for it as for any message, through ``_wait``
        self.own, self._dup = comm.Idup()
        self.record = HEADER + ROOM
        self.send = bytearray(self.record)
        self.acc = bytearray(self.record)
        self.other = bytearray(self.record)
        self.calls = 0
        self.last = "none"
        self.flags = 0  # the last merge's flags
        self._heads = None  # every worker's header, gathered on demand after a pass
        self._heads_pass = -1

    # -- a pass ------------------------------------------------------------------------

    def released(self):
        """For an exchange a pool's refresh retires: its merges' communicator freed
        (MPI frees it once any operation a stopped block left on it completes); False
        while its duplication has not completed (tested again at the next refresh)."""
        if self._dup is not None and not self._dup.Test():  # (None: waited for)
            return False
        if self.own != MPI.COMM_NULL:
            self.own.Free()
        return True

    def run(self, scope, call, fold=None, nbytes=0):
        """The agreement pass on this worker's ``send`` record (its header, and with
        ``fold`` its first ``nbytes`` payload bytes, folded as ``fold(lo, hi, out)``)."""
        self.calls += 1
        self.last = call
        if _world.listener_running:
            _world.refuse_in_listener(call)
        start = time.perf_counter() if _agree.PROFILE is not None else 0.0
        size = HEADER + (nbytes if fold is not None else 0)
        acc = memoryview(self.acc)[:size]
        acc[:] = memoryview(self.send)[:size]
        if self.size > 1:
            other = memoryview(self.other)  # the whole record: see tree_pass

            def merge(lo, hi, out):
                flags = merge_header(lo, hi, out)
                if fold is not None and flags & FLAG_INLINE and not flags & (
                        FLAG_ERROR | FLAG_MISMATCH | FLAG_OVERFLOW):
                    if not fold(lo[HEADER:], hi[HEADER:], out[HEADER:]):
                        _HEAD.pack_into(out, 24, flags | FLAG_OVERFLOW)

            if self._dup is not None:
                _wait.wait_body(self._dup, scope, call)
                self._dup = None
            tree_pass(scope, call, self.own, acc, other, merge)
        self.flags = _HEAD.unpack_from(self.acc, 0)[3]
        if _agree.PROFILE is not None:
            _agree.PROFILE.collective((getattr(scope, "path", ()), self.calls), call,
                                      call_site(), time.perf_counter() - start,
                                      int.from_bytes(self.send[16:24], "little",
                                                     signed=True))

    def fast(self, scope, call, header, describe, *args, fold=None, nbytes=0):
        """A fast path's pass (see ``_agree.Exchange.fast``); with ``fold``, the folded
        payload is then ``result()``."""
        self.send[:HEADER] = header
        if _agree.HOOKED:
            _world.refuse_in_parfor(call, scope)
            _world.refuse_in_uneven_loop(call, scope)
            error = _agree._inject(call) if _agree.FAULTS else None
            if error is not None:
                _HEAD.pack_into(self.send, 0, 0, 0, 0, FLAG_ERROR, 0)
                self.run(scope, call)
                self.check(scope, call, 0, FLAG_ERROR, error, lambda: describe(*args))
        self.run(scope, call, fold, nbytes)
        if self.flags & (FLAG_ERROR | FLAG_MISMATCH | FLAG_OVERFLOW):
            key, _, _, flags, _ = _HEAD.unpack_from(header, 0)
            self.check(scope, call, key, flags, None, lambda: describe(*args))
        if fold is not None and not self.flags & FLAG_INLINE:
            from .errors import SpmdError
            raise SpmdError(f"{call} ({scope.who()}): internal error: workers took "
                            f"different ways through the same reduction; please report")

    def result(self, nbytes):
        """The folded payload of the last ``fast`` pass."""
        return memoryview(self.acc)[HEADER:HEADER + nbytes]

    def check(self, scope, call, key, flags, error, describe):
        """Raise on every worker unless every key agreed and nobody failed (the merged
        flags say so, the same on every worker)."""
        merged = self.flags
        if merged & (FLAG_ERROR | FLAG_MISMATCH):
            _raise_everywhere(scope, call, error, describe)
        if merged & FLAG_OVERFLOW:
            from .errors import SpmdValueError
            raise SpmdValueError(
                f"{call} ({scope.who()}): the result does not fit in {ROOM} bytes as a "
                f"Python int; reduce numpy int64 values (which wrap) or floats")
        return self, not merged & FLAG_EXACT_DIFFERS, bool(merged & FLAG_INLINE)

    def largest_nbytes(self):
        """The largest payload size any worker declared in the last pass."""
        return _HEAD.unpack_from(self.acc, 0)[2]

    def common_aux(self):
        """Every worker's aux word when they all declared the same one, else None."""
        return None if self.flags & FLAG_AUX_DIFFERS else _HEAD.unpack_from(self.acc, 0)[4]

    # -- every worker's header, on demand ------------------------------------------------

    def _gather_heads(self):
        if self._heads_pass != self.calls:
            heads = np.empty(self.size * 5, dtype=np.int64)
            request = self.comm.Iallgather([memoryview(self.send)[:HEADER], MPI.BYTE],
                                           [heads, MPI.BYTE])
            _wait.wait_body(request, _world.current(), self.last, keep=heads)
            if _count.ON:
                _count.collective(HEADER * (self.size - 1), HEADER * (self.size - 1),
                                  _count.steps(self.size))
                _count.add(records_examined=self.size)
            self._heads, self._heads_pass = heads.reshape(self.size, 5), self.calls
        return self._heads

    def field(self, worker, index):
        """Header field ``index`` (0 key, 1 exact, 2 nbytes, 3 flags, 4 aux) of a worker:
        collective on the first read after a pass (every worker reads the same ones)."""
        return int(self._gather_heads()[worker, index])

    def sizes(self):
        return [int(n) for n in self._gather_heads()[:, 2]]


# -- folds for the reductions' fast paths ----------------------------------------------


def scalar_fold(fmt, pyfold, element):
    """``fold(lo, hi, out)`` of one scalar packed with ``fmt`` (``element``: the numpy
    scalar type it folds in, or None for Python numbers); False when the result does not
    fit (a Python int past 64 bits: see ``int_fold``)."""
    unpack, pack = fmt.unpack_from, fmt.pack_into
    if element is None:
        def fold(lo, hi, out):
            try:
                pack(out, 0, pyfold(unpack(lo, 0)[0], unpack(hi, 0)[0]))
            except struct.error:
                return False
            return True
    else:
        def fold(lo, hi, out):
            with quiet():  # (numpy scalars warn as arrays do: see ``_ops``)
                pack(out, 0, pyfold(element(unpack(lo, 0)[0]), element(unpack(hi, 0)[0])))
            return True
    return fold


INT_BYTES = 256  # a Python int's room in the record: exact up to 2047 bits


def int_fold(op):
    """``fold`` of one Python int held in ``INT_BYTES`` bytes (two's complement), exact
    as Python's arithmetic is; False when the result needs more."""
    pyfold = {"max": max, "min": min}.get(op.name, op.pyfold)

    def fold(lo, hi, out):
        a = int.from_bytes(lo[:INT_BYTES], "little", signed=True)
        b = int.from_bytes(hi[:INT_BYTES], "little", signed=True)
        try:
            out[:INT_BYTES] = pyfold(a, b).to_bytes(INT_BYTES, "little", signed=True)
        except OverflowError:
            return False
        return True
    return fold


def array_fold(ufunc, dtype, nbytes):
    """``fold`` of one small array of ``dtype`` (``nbytes`` bytes) with ``ufunc``."""
    def fold(lo, hi, out):
        with quiet():
            ufunc(np.frombuffer(lo[:nbytes], dtype), np.frombuffer(hi[:nbytes], dtype),
                  out=np.frombuffer(out[:nbytes], dtype))
        return True
    return fold


def ordered(scope, call, send, recv, op):
    """``_reduce.ordered`` along the tree: ``send`` (a 1-D host array) folded as the merges
    bracket it, the result in ``recv`` on every worker. Messages of the whole array at
    each step: for small values (``_reduce`` sends larger ones the scattered way)."""
    comm = scope.exchange.own
    acc = recv if recv is not None else np.empty_like(send)
    acc[...] = send
    other = np.empty_like(send)
    ufunc, dtype = op.ufunc, send.dtype

    def merge(lo, hi, out):
        with quiet():
            ufunc(np.frombuffer(lo, dtype), np.frombuffer(hi, dtype),
                  out=np.frombuffer(out, dtype))

    tree_pass(scope, call, comm, memoryview(acc.view(np.uint8)),
              memoryview(other.view(np.uint8)), merge)
    return recv


def scattered(scope, call, send, recv, op):
    """``_reduce.ordered`` along the tree for larger values: the merges' bracketing, but
    each doubling step exchanges half of what a worker still folds (recursive halving,
    distance doubling), so that every worker ends with one folded piece; the same steps
    in reverse then bring the pieces back to every worker. About 2(N - 1)/N of the data
    sent and received per worker in 2 log2 N messages, as MPI's own large ``Allreduce``
    (the first 2(N - P) workers, P the largest power of two up to N, also hand their
    whole value to a neighbour first and get the result back last). ``recv`` may be
    None (a reduction to another worker): every worker computes the result."""
    comm = scope.exchange.own
    count, dtype, ufunc = send.size, send.dtype, op.ufunc
    acc = recv if recv is not None else _pack.scratch.empty(dtype, count, use=2)
    acc[...] = send
    other = _pack.scratch.empty(dtype, count, use=1)
    pre, partners, post = schedule(comm.Get_size(), comm.Get_rank())

    def raw(array):
        return memoryview(array.view(np.uint8))

    if pre is not None:
        kind, peer = pre
        if kind == "send":  # my whole value to my neighbour, the result back from it
            _send(scope, call, comm, raw(acc), peer)
            _recv(scope, call, comm, raw(acc), peer, acc.nbytes)
            return recv
        _recv(scope, call, comm, raw(other), peer, acc.nbytes)
        with quiet():
            ufunc(other, acc, out=acc)  # my left neighbour's value is the lower
    steps = []
    a, b = 0, count
    for peer, lower in partners:  # keep one half of [a, b), fold the partner's copy in
        mid = a + (b - a) // 2
        keep, give = ((a, mid), (mid, b)) if not lower else ((mid, b), (a, mid))
        mine, part = acc[keep[0]:keep[1]], other[:keep[1] - keep[0]]
        _exchange(scope, call, comm, raw(acc[give[0]:give[1]]), raw(part), peer,
                  part.nbytes)
        with quiet():
            if lower:  # the partner's workers are the lower ones
                ufunc(part, mine, out=mine)
            else:
                ufunc(mine, part, out=mine)
        steps.append((peer, keep, give))
        a, b = keep
    for peer, keep, give in reversed(steps):  # every piece back, in the reverse order
        back = acc[give[0]:give[1]]
        _exchange(scope, call, comm, raw(acc[keep[0]:keep[1]]), raw(back), peer,
                  back.nbytes, records=0)
    if post is not None:
        _send(scope, call, comm, raw(acc), post)
    return recv
