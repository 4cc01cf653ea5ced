"""Reductions through MPI shared memory when every worker of a scope shares one node.

MPICH's and Open MPI's shared-memory Allreduce copy every byte through bounded cells on
its way between processes. Here each worker's input lies in an MPI shared-memory window
the others can read; after one barrier every worker folds its 1/N slice of all inputs
(in worker order, or among many workers with the tree's bracketing, as across nodes:
so every worker ends with the same bits at every layout) and writes it straight into
every worker's result slot; after a second barrier each worker holds the whole result.
A result slot is window memory handed to the user as the result array; it is offered
again only once no view of it is alive (``sys.getrefcount``, as in ``_pack.ResultPool``),
so results never change under the user. When the input of a call is itself a previous
result (``g = spmd_plus(g)``), nobody copies it in: the others read it where it lies.

Windows come in power-of-two capacities and live until the program ends (freeing one is
collective and would unmap memory that results may still use); ``SPMDLAB_SHM_BYTES``
caps what one worker maps, beyond which reductions go through MPI.

Every collective step here runs after the agreement record exchange has shown that all
workers are in the same call with the same sizes, so the decisions below (set up, use
shared memory, or fall back to MPI) are taken identically by every worker.
"""

import sys

import numpy as np
from ._mpi import MPI

from . import _env, _wait, _world
from ._ops import fold, tree_fold
from ._pack import RECYCLE

SLOTS = 3  # result slots per window: the previous result may still be alive, and one more
MIN_BYTES = _env.get("SHM_MIN_BYTES", 1 << 16, cast=int, valid=_env.at_least_zero,
                     meaning="a number of bytes, 0 or more")
MAX_BYTES = _env.get("SHM_BYTES", 1 << 31, cast=int, valid=_env.at_least_zero,
                     meaning="a number of bytes, 0 or more (0: no shared memory)")
_world.SAME_EVERYWHERE.update(SPMDLAB_SHM_MIN_BYTES=MIN_BYTES, SPMDLAB_SHM_BYTES=MAX_BYTES)

# The aux word of a worker's agreement record.
AUX_NO = 0  # this call does not go through shared memory on this worker
AUX_SETUP = 1  # shared memory possible, but the window of this size does not exist yet


def aux_code(in_loc, out_slot):
    return 2 + in_loc * 16 + out_slot


def decode(aux):
    return (aux - 2) // 16, (aux - 2) % 16


class Arena:
    """The shared-memory windows of one scope (None until first needed)."""

    def __init__(self, scope):
        node = scope.node
        self.usable = node.Get_size() == scope.size
        self.node = node if self.usable else None
        self.rank = scope.rank
        self.size = scope.size
        self.windows = {}  # capacity -> Window
        self.mapped = 0


class Window:
    """One shared window: per worker an input region and ``SLOTS`` result slots."""

    def __init__(self, node, capacity):
        self.capacity = capacity
        self.win = MPI.Win.Allocate_shared((1 + SLOTS) * capacity, 1, comm=node)
        self.regions = []
        for k in range(node.Get_size()):
            mem, _ = self.win.Shared_query(k)
            # one array per region, each made from the window's memory directly, so that
            # the views handed out keep *that* array alive and getrefcount can see them
            self.regions.append([np.frombuffer(mem, dtype=np.uint8, count=capacity,
                                               offset=j * capacity)
                                 for j in range(1 + SLOTS)])
        self.mine = self.regions[node.Get_rank()]
        self.address = [r.__array_interface__["data"][0] for r in self.mine]
        self.win.Lock_all()

    def free_slot(self):
        if not RECYCLE:  # no way to tell a slot nobody uses: MPI does these reductions
            return -1
        for j in range(1, 1 + SLOTS):
            region = self.mine[j]
            # references: self.mine's list, the local name, getrefcount's argument
            if sys.getrefcount(region) == 3:
                return j
        return -1

    def input_slot(self, arrays, offsets):
        """The result slot that already holds every array at its offset, else 0."""
        first = arrays[0].__array_interface__["data"][0]
        for j in range(1, 1 + SLOTS):
            if first == self.address[j] + offsets[0]:
                if all(a.flags.c_contiguous and
                       a.__array_interface__["data"][0] == self.address[j] + off
                       for a, off in zip(arrays, offsets)):
                    return j
        return 0


def capacity_for(nbytes):
    cap = 1 << 20
    while cap < nbytes:
        cap *= 2
    return cap


def offer(scope, leaves, arrays, layout, total):
    """This worker's aux word for a reduction of ``total`` bytes laid out as ``layout``
    (``arrays``: the leaves on the host)."""
    if total < MIN_BYTES or scope.size == 1 or any(l.on_gpu for l in leaves):
        return AUX_NO
    arena = scope.arena
    if arena is None:
        return AUX_SETUP
    if not arena.usable:
        return AUX_NO
    cap = capacity_for(total)
    window = arena.windows.get(cap)
    if window is None:
        if arena.mapped + (1 + SLOTS) * cap > MAX_BYTES:
            return AUX_NO
        return AUX_SETUP
    out = window.free_slot()
    if out < 0:
        return AUX_NO
    return aux_code(window.input_slot(arrays, [g[1] for g in layout]), out)


def plan(ex, size):
    """After the exchange: None (use MPI), 'setup', or every worker's (input, output)."""
    if ex.tree:  # the merged record says whether every worker offered the same
        aux = ex.common_aux()
        auxes = [aux] * size if aux is not None else [ex.field(k, 4) for k in range(size)]
    else:
        auxes = [ex.field(k, 4) for k in range(size)]
    if AUX_NO in auxes:
        return None
    if AUX_SETUP in auxes:
        return "setup"
    return [decode(a) for a in auxes]


def setup(scope, total):
    """Collective: create the scope's arena and the window for ``total`` bytes."""
    if scope.arena is None:
        scope.arena = Arena(scope)
    arena = scope.arena
    if not arena.usable:
        return None
    cap = capacity_for(total)
    if cap not in arena.windows:
        if arena.mapped + (1 + SLOTS) * cap > MAX_BYTES:
            return None
        arena.windows[cap] = Window(arena.node, cap)
        arena.mapped += (1 + SLOTS) * cap
    return arena.windows[cap]


def reduce(scope, call, window, locations, leaves, arrays, layout, op):
    """Collective: the reduction itself; returns this worker's result slot.

    ``layout`` lists each leaf's ``(index, byte offset)``; ``locations`` is every
    worker's (input region, output slot). A worker copies into its input region only
    what the others read (everything outside its own slices), and folds its own slices
    reading its own input from the caller's arrays.
    """
    arena = scope.arena
    me, n = arena.rank, arena.size
    in_loc, out_slot = locations[me]
    runs = _runs(leaves, layout, me, n)
    flat = [a.reshape(-1) for a in arrays] if in_loc == 0 else None
    if in_loc == 0:
        region = window.mine[0]
        for dtype, first, last, a, b in runs:
            for i in range(first, last):
                start, stop = layout[i][1], layout[i][1] + leaves[i].nbytes
                for lo, hi in ((start, min(stop, a)), (max(start, b), stop)):
                    if hi > lo:
                        dest = region[lo:hi].view(dtype)
                        k = (lo - start) // dtype.itemsize
                        dest[...] = flat[i][k:k + dest.size]
    win, node = window.win, arena.node
    win.Sync()
    _wait.wait(node.Ibarrier(), scope, call)  # a worker that left ends it, as everywhere
    win.Sync()
    mine = window.regions[me][out_slot]
    # among many workers, the tree's bracketing: the same bits as across nodes
    fold_all = tree_fold if scope.exchange.tree else fold
    for dtype, first, last, a, b in runs:
        if b == a:
            continue
        others = [window.regions[k][locations[k][0]] for k in range(n)]
        if in_loc != 0:  # my input is a previous result slot: one fold over the whole slice
            fold_all(op, [o[a:b].view(dtype) for o in others], mine[a:b].view(dtype))
        else:
            for i in range(first, last):
                start, stop = layout[i][1], layout[i][1] + leaves[i].nbytes
                lo, hi = max(start, a), min(stop, b)
                if hi <= lo:
                    continue
                k = (lo - start) // dtype.itemsize
                sources = [o[lo:hi].view(dtype) for o in others]
                sources[me] = flat[i][k:k + (hi - lo) // dtype.itemsize]
                fold_all(op, sources, mine[lo:hi].view(dtype))
        result = mine[a:b]
        for k in range(n):
            if k != me:
                window.regions[k][locations[k][1]][a:b] = result
    win.Sync()
    _wait.wait(node.Ibarrier(), scope, call)  # a worker that left ends it, as everywhere
    win.Sync()
    return mine


def _runs(leaves, layout, me, n):
    """Runs of consecutive same-dtype leaves: (dtype, first leaf, end leaf, a, b).

    ``[a, b)`` is the byte range of the run this worker folds (its 1/n of the elements).
    """
    runs = []
    for i, leaf in enumerate(leaves):
        off = layout[i][1]
        if runs and runs[-1][0] == leaf.dtype and runs[-1][4] == off:
            runs[-1][2] = i + 1
            runs[-1][4] = off + leaf.nbytes
        else:
            runs.append([leaf.dtype, i, i + 1, off, off + leaf.nbytes])
    out = []
    for dtype, first, last, start, stop in runs:
        count = (stop - start) // dtype.itemsize
        a = start + count * me // n * dtype.itemsize
        b = start + count * (me + 1) // n * dtype.itemsize
        out.append((dtype, first, last, a, b))
    return out
