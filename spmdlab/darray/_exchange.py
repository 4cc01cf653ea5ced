"""Moving codistributed data: every redistribution is one all-to-all, with MPI derived
datatypes describing the blocks (no packing by hand); a gather is one Allgatherv,
straight into place when the blocks follow each other in the result, else end to end
and then one strided copy per block (faster than vector datatypes in MPICH).

A redistribution is planned from where each worker's block lies before and after
(intervals along an axis of the global array): the piece one worker sends another is
the intersection of two blocks, a subarray of each local array. Plans are kept (their
datatypes made and committed once) for the arrays of a program, a few at a time.

These functions move data only; the callers agree first (``_agree``), so a worker that
fails here ends the job (``_ending.end_committed``) rather than leave the others waiting.
"""

import collections

import numpy as np
from .._mpi import MPI

from .. import _ending, _wait, _world
from .._backends import LOCAL

_PLANS: "collections.OrderedDict" = collections.OrderedDict()
_MAX_PLANS = 16


def blocks(axis, ranges, shape):
    """Each worker's block of a global array of ``shape``: a list of per-axis intervals,
    ``ranges[k]`` along ``axis``, the whole extent along the others."""
    return [[r if d == axis else (0, n) for d, n in enumerate(shape)] for r in ranges]


def exchange(scope, call, local, shape, src, dst):
    """The local part of the same global array after moving from blocks ``src`` to
    blocks ``dst`` (each: one list of per-axis intervals per worker, see ``blocks``).

    ``local`` is this worker's source block (any family); the result is this worker's
    destination block in the same family, dtype and device. One Alltoallw."""
    family = LOCAL[_family(local)]
    host = np.ascontiguousarray(family.host(local))
    me = scope.rank
    out_shape = tuple(hi - lo for lo, hi in dst[me])
    try:
        out = np.empty(out_shape, dtype=host.dtype)
        if scope.size == 1 or host.dtype.itemsize == 0:
            _copy_overlap(host, src[me], out, dst[me])
        else:
            plan = _plan(scope.comm, host.dtype.itemsize, src, dst, me)
            request = scope.comm.Ialltoallw(
                [host, plan.send_counts, plan.zeros, plan.send_types],
                [out, plan.recv_counts, plan.zeros, plan.recv_types])
    except Exception:
        _ending.end_committed(scope, call)
    if scope.size > 1 and host.dtype.itemsize:
        _wait.wait(request, scope, call)
    return family.like(out, local)


def _family(local):
    from .._backends import local_family

    return local_family(local)


def _copy_overlap(src_array, src_block, out, dst_block):
    box = _intersect(src_block, dst_block)
    if box is None:
        return
    out[tuple(slice(lo - d0, hi - d0) for (lo, hi), (d0, _) in zip(box, dst_block))] = \
        src_array[tuple(slice(lo - s0, hi - s0) for (lo, hi), (s0, _) in zip(box, src_block))]


def _intersect(a, b):
    box = [(max(a0, b0), min(a1, b1)) for (a0, a1), (b0, b1) in zip(a, b)]
    return None if any(hi <= lo for lo, hi in box) else box


class _Plan:
    __slots__ = ("send_counts", "send_types", "recv_counts", "recv_types", "zeros",
                 "_owned")

    def __init__(self, itemsize, src, dst, me):
        n = len(src)
        element = MPI.BYTE.Create_contiguous(itemsize)
        self._owned = [element]
        self.zeros = [0] * n
        self.send_counts, self.send_types = self._pieces(element, src[me], dst, src[me])
        self.recv_counts, self.recv_types = self._pieces(element, dst[me], src, dst[me])

    def _pieces(self, element, mine, others, frame):
        """For each other worker: the part of block ``mine`` (a subarray of the local array
        whose block is ``frame``) that overlaps that worker's block in ``others``."""
        counts, types = [], []
        sizes = [hi - lo for lo, hi in frame]
        for theirs in others:
            box = _intersect(mine, theirs)
            if box is None:
                counts.append(0)
                types.append(MPI.BYTE)
                continue
            subsizes = [hi - lo for lo, hi in box]
            starts = [lo - f0 for (lo, _), (f0, _) in zip(box, frame)]
            sub = element.Create_subarray(sizes, subsizes, starts, order=MPI.ORDER_C)
            sub.Commit()
            self._owned.append(sub)
            counts.append(1)
            types.append(sub)
        return counts, types

    def free(self):
        for datatype in self._owned:
            datatype.Free()
        self._owned = []


def _plan(comm, itemsize, src, dst, me):
    key = (id(comm), itemsize, me, _frozen(src), _frozen(dst))
    plan = _PLANS.pop(key, None)
    if plan is None:
        plan = _Plan(itemsize, src, dst, me)
        while len(_PLANS) >= _MAX_PLANS:
            _PLANS.popitem(last=False)[1].free()
    _PLANS[key] = plan  # most recently used last
    return plan


def _frozen(block_list):
    return tuple(tuple(tuple(iv) for iv in block) for block in block_list)


def gather(scope, call, local, shape, axis, partition, destination=None):
    """The global array, on every worker (or on worker ``destination``, None elsewhere),
    in ``local``'s family: one Allgatherv (Gatherv) straight into the result's layout."""
    family = LOCAL[_family(local)]
    host = np.ascontiguousarray(family.host(local))
    wanted = destination is None or destination == scope.index
    try:
        out = np.empty(shape, dtype=host.dtype) if wanted else None
        if scope.size == 1:
            out[...] = host
            return family.like(out, local)
        request, finish = _start_gather(scope.comm, host, out, shape, axis, partition,
                                        destination)
    except Exception:
        _ending.end_committed(scope, call)
    if request is not None:
        _wait.wait(request, scope, call)
    if finish is not None and wanted:
        finish()
    return family.like(out, local) if wanted else None


def _start_gather(comm, host, out, shape, axis, partition, destination):
    itemsize = host.dtype.itemsize
    outer = int(np.prod(shape[:axis], dtype=np.int64))
    inner = int(np.prod(shape[axis + 1:], dtype=np.int64)) * itemsize
    if outer * inner * shape[axis] == 0:
        return None, None  # nothing to move: every worker knows it from the shape
    starts = [0]
    for count in partition[:-1]:
        starts.append(starts[-1] + count)
    root = None if destination is None else destination - 1
    send = host.reshape(-1).view(np.uint8)
    if outer == 1:  # blocks follow each other in the result: plain bytes
        counts = [count * inner for count in partition]
        displs = [s * inner for s in starts]
        recv = None if out is None else [out.reshape(-1).view(np.uint8), (counts, displs),
                                         MPI.BYTE]
        if root is None:
            return comm.Iallgatherv(send, recv), None
        return comm.Igatherv(send, recv, root=root), None
    # Blocks interleave in the result (a split along a later axis): gather them end to
    # end, then put each in place with one strided copy. MPI's vector datatypes would
    # write them in place, but MPICH moves them 9-17x slower than contiguous bytes.
    counts = [outer * count * inner for count in partition]
    displs = [outer * s * inner for s in starts]
    stage = None if out is None else np.empty(sum(counts), dtype=np.uint8)
    recv = None if out is None else [stage, (counts, displs), MPI.BYTE]
    if root is None:
        request = comm.Iallgatherv(send, recv)
    else:
        request = comm.Igatherv(send, recv, root=root)

    def finish():
        before, after = shape[:axis], shape[axis + 1:]
        for k, count in enumerate(partition):
            if count:
                block = stage[displs[k]:displs[k] + counts[k]].view(host.dtype)
                index = (slice(None),) * axis + (slice(starts[k], starts[k] + count),)
                out[index] = block.reshape(before + (count,) + after)
    return request, finish
