"""Moving codistributed data: every redistribution is one all-to-all of bytes; a gather
is one Allgatherv, or, when the blocks interleave in the result (a split along a later
axis), one all-to-all whose vector datatypes put each block in place. A
redistribution's pieces move straight from and into place where they are contiguous in
the local arrays, else packed end to end and put in place with one strided copy each
(with subarray datatypes instead, MPICH 5.0 moved a 64 KiB matrix from rows to columns
slower at 1x2, 21.5 against 17.4 us, and a 16 MiB one faster, 0.92 against 1.35 ms, in
raw mpi4py; built into this module on 2026-11-26 for pieces of 1 MiB or more, the 16 MiB
matrix went 1.2-1.35x faster at 1x2 and 1.15-1.3x slower at 1x4 on 2 cores, so it was
left out: the choice must also be the same on every worker, Alltoallv and Alltoallw
being different collectives).

A redistribution is planned from where each worker's block lies before and after
(intervals along an axis of the global array): the piece one worker sends another is
the intersection of two blocks, a box of each local array. Plans are kept for the
arrays of a program, a few at a time.

These functions move data only; the callers agree first (``_agree``), so a worker that
fails here ends the job (``_ending.end_committed``) rather than leave the others waiting.
"""


import collections
import functools
import math

import numpy as np
from .._mpi import MPI

from .. import _ending, _pack, _wait, _world
from .._backends import LOCAL, local_family
from ._codistributor import offsets

_PLANS: "collections.OrderedDict" = collections.OrderedDict()
# Staging buffers are never handed to the user: kept from call to call (``_pack.scratch``),
# so that a call does not fault in fresh pages for them (a fresh 1 MiB buffer costs
# 256 page faults, several times the copy itself)
_BYTES, _SEND, _RECV = np.dtype(np.uint8), "darray-send", "darray-recv"
_MAX_PLANS = 16


def blocks(axis, ranges, shape):
    """Each worker's block of a global array of ``shape``: a tuple of per-axis intervals,
    ``ranges[k]`` along ``axis``, the whole extent along the others (tuples all the
    way down: a redistribution's plan is kept under them)."""
    return tuple(tuple(tuple(r) if d == axis else (0, n) for d, n in enumerate(shape))
                 for r in ranges)


@functools.lru_cache(maxsize=64)
def codist_blocks(codist):
    """``blocks`` of a complete codistributor (kept: a loop redistributes the same few)."""
    return blocks(codist.axis, [(o, o + c) for o, c in zip(offsets(codist.partition),
                                                           codist.partition)], codist.shape)


def exchange(scope, call, local, shape, src, dst, family=None):
    """The local part of the same global array after moving from blocks ``src`` to
    blocks ``dst`` (each: one tuple of per-axis intervals per worker, see ``blocks``).

    ``local`` is this worker's source block (any family; ``family``: its name, when the
    caller knows it); the result is this worker's destination block in the same
    family, dtype and device. One Alltoallv of bytes: the pieces sent where they lie
    when each is contiguous in the local array (a split along the first axis), else
    packed first; received in place when each is contiguous in the result, else put
    there with one strided copy each."""
    family = LOCAL[family or local_family(local)]
    me = scope.rank
    try:  # (the host copy too: a device's, or a strided part's, may fail to allocate)
        host = np.ascontiguousarray(family.host(local))
        plan = _plan(host.dtype.itemsize, src, dst, me)
        out = np.empty(plan.out_shape, dtype=host.dtype)
        if scope.size == 1 or host.dtype.itemsize == 0:
            plan.copy_own(host, out)
            return family.like(out, local)
        send = plan.pack(host)
        recv = out.reshape(-1).view(np.uint8) if plan.recv_in_place else \
            _pack.scratch.empty(_BYTES, plan.recv_total, use=_RECV)
        request = scope.comm.Ialltoallv(
            [send, (plan.send_counts, plan.send_displs), MPI.BYTE],
            [recv, (plan.recv_counts, plan.recv_displs), MPI.BYTE])
        # this worker's own piece does not go through MPI: one copy, in place
        plan.copy_own(host, out)
    except Exception:
        _ending.end_committed(scope, call)
    _wait.wait(request, scope, call, keep=(host, send, recv, out))
    if not plan.recv_in_place:
        try:
            plan.unpack(recv, out)
        except Exception:
            _ending.end_committed(scope, call)
    return family.like(out, local)


def _own_piece(src_block, dst_block):
    """Where this worker's own piece lies (its source and destination blocks overlap):
    (its box of the result, its box of the source block), or None."""
    box = _intersect(src_block, dst_block)
    if box is None:
        return None
    return (tuple(slice(lo - d0, hi - d0) for (lo, hi), (d0, _) in zip(box, dst_block)),
            tuple(slice(lo - s0, hi - s0) for (lo, hi), (s0, _) in zip(box, src_block)))


def _intersect(a, b):
    box = [(max(a0, b0), min(a1, b1)) for (a0, a1), (b0, b1) in zip(a, b)]
    return None if any(hi <= lo for lo, hi in box) else box


class _Plan:
    """Where each piece of a redistribution lies: the bytes this worker sends each other
    worker (a box of its source block) and receives from each (a box of its result),
    as ``Alltoallv`` counts and displacements over a send and a receive buffer."""

    __slots__ = ("send_counts", "send_displs", "send_boxes", "send_in_place",
                 "send_total", "recv_counts", "recv_displs", "recv_boxes",
                 "recv_in_place", "recv_total", "out_shape", "own")

    def __init__(self, itemsize, src, dst, me):
        (self.send_counts, self.send_displs, self.send_boxes, self.send_in_place,
         self.send_total) = _pieces(itemsize, src[me], dst, me)
        (self.recv_counts, self.recv_displs, self.recv_boxes, self.recv_in_place,
         self.recv_total) = _pieces(itemsize, dst[me], src, me)
        self.out_shape = tuple(hi - lo for lo, hi in dst[me])
        self.own = _own_piece(src[me], dst[me])

    def copy_own(self, host, out):
        """This worker's own piece, from its source block straight into the result."""
        if self.own is not None:
            out[self.own[0]] = host[self.own[1]]

    def pack(self, host):
        """The send buffer: ``host``'s own bytes, or its pieces end to end."""
        if self.send_in_place:
            return host.reshape(-1).view(np.uint8)
        send = _pack.scratch.empty(_BYTES, self.send_total, use=_SEND)
        for box, start, count in zip(self.send_boxes, self.send_displs, self.send_counts):
            if count:
                piece = host[box]
                send[start:start + count].view(host.dtype).reshape(piece.shape)[...] = piece
        return send

    def unpack(self, recv, out):
        """Each received piece into its box of ``out`` (one strided copy each)."""
        for box, start, count in zip(self.recv_boxes, self.recv_displs, self.recv_counts):
            if count:
                target = out[box]
                target[...] = recv[start:start + count].view(out.dtype).reshape(target.shape)


def _pieces(itemsize, mine, others, me):
    """For each block of ``others``: the part of block ``mine`` that overlaps it, as
    (byte counts, displacements, boxes of ``mine``'s local array, in place, total bytes).
    In place: every piece is one run of the local array's bytes (C order) and the runs
    follow each other in worker order, so the local array itself is the buffer; else
    the pieces are packed end to end. The piece of ``others[me]`` (this worker's own) is
    left out (count 0): it is copied straight from the source block to the result."""
    sizes = [hi - lo for lo, hi in mine]
    strides = [itemsize] * len(sizes)
    for d in range(len(sizes) - 2, -1, -1):
        strides[d] = strides[d + 1] * sizes[d + 1]
    counts, boxes, offsets = [], [], []
    for k, theirs in enumerate(others):
        box = None if k == me else _intersect(mine, theirs)
        if box is None:
            counts.append(0)
            boxes.append(None)
            offsets.append(None)
            continue
        sub = [hi - lo for lo, hi in box]
        starts = [lo - m0 for (lo, _), (m0, _) in zip(box, mine)]
        counts.append(math.prod(sub) * itemsize)
        boxes.append(tuple(slice(a, a + n) for a, n in zip(starts, sub)))
        # one run of bytes: whole along every axis after the last partial one, and one
        # index along every axis before it
        partial = [d for d in range(len(sub)) if sub[d] != sizes[d]]
        run = not partial or all(sub[d] == 1 for d in range(partial[-1]))
        offsets.append(sum(a * st for a, st in zip(starts, strides)) if run else None)
    in_place, end = True, 0
    for offset, count in zip(offsets, counts):
        if count:
            if offset is None or offset < end:
                in_place = False
                break
            end = offset + count
    if in_place:
        return counts, [o or 0 for o in offsets], boxes, True, sum(counts)
    displs, total = [], 0
    for count in counts:
        displs.append(total)
        total += count
    return counts, displs, boxes, False, total


def _plan(itemsize, src, dst, me):
    key = (itemsize, me, src, dst)
    plan = _PLANS.pop(key, None)
    if plan is None:
        plan = _Plan(itemsize, src, dst, me)
        while len(_PLANS) >= _MAX_PLANS:
            _PLANS.popitem(last=False)
    _PLANS[key] = plan  # most recently used last
    return plan


def gather(scope, call, local, shape, axis, partition, destination=None, family=None):
    """The global array, on every worker (or on worker ``destination``, None elsewhere),
    in ``local``'s family (``family``: its name, when the caller knows it): one
    Allgatherv (Gatherv) straight into the result's layout."""
    family = LOCAL[family or local_family(local)]
    wanted = destination is None or destination == scope.index
    try:  # (the host copy too: a device's, or a strided part's, may fail to allocate)
        host = np.ascontiguousarray(family.host(local))
        out = np.empty(shape, dtype=host.dtype) if wanted else None
        if scope.size == 1:
            out[...] = host
            return family.like(out, local)
        request = _start_gather(scope.comm, host, out, shape, axis, partition,
                                destination)
    except Exception:
        _ending.end_committed(scope, call)
    if request is not None:
        _wait.wait(request, scope, call, keep=(host, out))
    return family.like(out, local) if wanted else None


@functools.lru_cache(maxsize=64)
def _gather_plan(shape, axis, partition, itemsize):
    """Where each worker's block goes in a gather: (byte counts, displacements, whether
    the blocks follow each other in the result), or None when there is nothing to move
    (every worker knows it from the shape)."""
    outer = math.prod(shape[:axis])
    inner = math.prod(shape[axis + 1:]) * itemsize
    if outer * inner * shape[axis] == 0:
        return None
    # blocks follow each other in the result when nothing comes before the axis
    counts = [outer * count * inner for count in partition]
    displs = [outer * s * inner for s in offsets(partition)]
    return counts, displs, outer == 1


def _start_gather(comm, host, out, shape, axis, partition, destination):
    plan = _gather_plan(shape, axis, partition, host.dtype.itemsize)
    if plan is None:
        return None
    counts, displs, contiguous = plan
    root = None if destination is None else destination - 1
    send = host.reshape(-1).view(np.uint8)
    if contiguous:  # blocks follow each other in the result: plain bytes
        recv = None if out is None else [out.reshape(-1).view(np.uint8), (counts, displs),
                                         MPI.BYTE]
        if root is None:
            return comm.Iallgatherv(send, recv)
        return comm.Igatherv(send, recv, root=root)
    # Blocks interleave in the result (a split along a later axis): each worker's block
    # lands in place through a vector datatype of its own (one run of bytes per index
    # before the axis), in one all-to-all that takes a datatype per sender
    # (MPI_Alltoallw); the senders send their block as it is. (Gathered end to end and
    # put in place by strided copies, a 16 MiB matrix by columns took 4.4 ms at 1x2
    # against 2.0-2.2 ms so, and 1.4-1.8x as long at 4 workers.)
    size = len(partition)
    types, rdispls = _block_types(shape, axis, partition, host.dtype.itemsize)
    sendcounts = [send.nbytes if root is None or k == root else 0 for k in range(size)]
    if out is None:
        recv = [_NOTHING, [0] * size, [0] * size, [MPI.BYTE] * size]
    else:
        recv = [out.reshape(-1).view(np.uint8), [1 if n else 0 for n in partition],
                rdispls, types]
    return comm.Ialltoallw([send, sendcounts, [0] * size, [MPI.BYTE] * size], recv)


_NOTHING = np.zeros(0, np.uint8)
_TYPES: dict = {}  # (shape, axis, partition, itemsize) -> (datatypes, displacements)


def _block_types(shape, axis, partition, itemsize):
    """Where each worker's block lies in the bytes of a C-ordered result of ``shape``
    split along ``axis`` by ``partition``: a committed vector datatype per worker (a
    run of its bytes per index before the axis, a row of the result apart) and its
    byte displacement. Kept per distribution (freed when many are kept)."""
    key = (shape, axis, partition, itemsize)
    entry = _TYPES.get(key)
    if entry is None:
        if len(_TYPES) >= 32:
            for types, _ in _TYPES.values():
                for datatype in types:
                    if datatype != MPI.BYTE:
                        datatype.Free()  # (a pending call keeps what it needs)
            _TYPES.clear()
        outer = math.prod(shape[:axis])
        inner = math.prod(shape[axis + 1:]) * itemsize
        types = [MPI.BYTE.Create_vector(outer, n * inner, shape[axis] * inner).Commit()
                 if n else MPI.BYTE for n in partition]
        entry = _TYPES[key] = (types, [s * inner for s in offsets(partition)])
    return entry


# -- a reshape: the same elements in numpy's C order, another shape and split -----------------


def reshape(scope, call, local, src, dst, family=None):
    """This worker's part of the global array of complete codistributor ``src``, read in
    numpy's C order into the shape of complete codistributor ``dst`` (the same number of
    elements) and split by it: each element moves once, in one Alltoallv of bytes.

    Element ``g`` of the C order lies in the block of one worker before and one after;
    a worker's block, read in its own C order, visits its elements in increasing ``g``,
    so the elements a worker sends another leave in that order and land, in that
    order, in the places of the receiver's block that come from the sender."""
    family = LOCAL[family or local_family(local)]
    me = scope.rank
    try:  # (the host copy too: a device's, or a strided part's, may fail to allocate)
        host = np.ascontiguousarray(family.host(local)).reshape(-1)
        # (a plan holds two int64 indices per local element: kept for small parts only)
        plan = _reshape_plan(src, dst, me) if host.size <= _KEPT_PLAN_ELEMENTS else \
            _ReshapePlan(src, dst, me)
        size, item = host.dtype.itemsize, host.dtype
        out = np.empty(plan.out_size, dtype=item)
        values = host[plan.send_order]  # the elements in the order they leave
        got = np.empty(plan.out_size, dtype=item)
        own = slice(plan.send_displs[me], plan.send_displs[me] + plan.send_counts[me])
        got[plan.recv_displs[me]:plan.recv_displs[me] + plan.recv_counts[me]] = values[own]
        if scope.size > 1 and size:
            scounts = [0 if k == me else c * size for k, c in enumerate(plan.send_counts)]
            rcounts = [0 if k == me else c * size for k, c in enumerate(plan.recv_counts)]
            request = scope.comm.Ialltoallv(
                [values.view(np.uint8), (scounts, [d * size for d in plan.send_displs]),
                 MPI.BYTE],
                [got.view(np.uint8), (rcounts, [d * size for d in plan.recv_displs]),
                 MPI.BYTE])
        else:
            request = None
    except Exception:
        _ending.end_committed(scope, call)
    if request is not None:
        _wait.wait(request, scope, call, keep=(values, got))
    try:
        out[plan.recv_order] = got
    except Exception:
        _ending.end_committed(scope, call)
    return family.like(out.reshape(plan.out_shape), local)


class _ReshapePlan:
    """For one worker: the order its elements leave in (grouped by receiver), where the
    elements it receives go (grouped by sender), and the counts and displacements."""

    __slots__ = ("send_order", "send_counts", "send_displs", "recv_order", "recv_counts",
                 "recv_displs", "out_shape", "out_size")

    def __init__(self, src, dst, me):
        workers = len(src.partition)
        self.send_order, self.send_counts, self.send_displs = _grouped(
            _flat_indices(src, me), dst, workers)
        self.recv_order, self.recv_counts, self.recv_displs = _grouped(
            _flat_indices(dst, me), src, workers)
        self.out_shape = dst.local_shape(me + 1)
        self.out_size = math.prod(self.out_shape)


def _flat_indices(codist, rank):
    """The C-order indices in the global array of worker ``rank + 1``'s elements, in the
    C order of its block."""
    shape, axis = codist.shape, codist.axis
    start = offsets(codist.partition)[rank]
    local = codist.local_shape(rank + 1)
    flat = np.zeros(local, dtype=np.int64)
    stride = 1
    for d in range(len(shape) - 1, -1, -1):
        first = start if d == axis else 0
        along = (np.arange(local[d], dtype=np.int64) + first) * stride
        flat += along.reshape((-1,) + (1,) * (len(shape) - 1 - d))
        stride *= shape[d]
    return flat.reshape(-1)


def _grouped(flat, codist, workers):
    """Positions of the elements ``flat`` (C-order global indices), grouped by the worker
    whose block of ``codist`` holds them (in increasing index within each group), with
    counts and displacements per worker."""
    inner = math.prod(codist.shape[codist.axis + 1:])
    along = (flat // inner) % codist.shape[codist.axis] if flat.size else flat
    owner = np.searchsorted(np.cumsum(codist.partition), along, side="right")
    order = np.argsort(owner, kind="stable")
    counts = np.bincount(owner, minlength=workers).tolist()
    displs = list(offsets(counts))
    return order, counts, displs


_KEPT_PLAN_ELEMENTS = 1 << 20


@functools.lru_cache(maxsize=8)
def _reshape_plan(src, dst, me):
    return _ReshapePlan(src, dst, me)
