"""Reductions: ``spmd_plus`` and ``spmd_reduce`` with a known operation, end to end.

Among a few workers (``SPMDLAB_TREE_ABOVE``, 4 by default) every reduction folds the
workers' values in worker order, ``x1 op x2 op ... op xN`` (``_ops.fold``). Among more,
every value folds with the bracketing of the agreement's fixed tree instead (``_tree``:
O(log N) messages): neighbours first, then blocks of 2, 4, ..., always lower op upper,
so a float sum may differ in its last bits from the left fold, yet is the same at every
node layout: a value under 64 KiB in the tree's own steps, a larger one in shared
memory on a node (``_ops.tree_fold``) or by halves across nodes (``_tree.scattered``).
Either way every worker gets the same bits, whatever the node layout. After the
agreement record exchange (``_agree``) the data moves by one of four strategies (or
the tree's merges):

- inline: every value (up to 1 KiB among a few workers, ``_agree.capacity_for``) rode
  in the record; each
  worker folds them all itself. A scalar ``spmd_plus`` is one MPI call in all.
- gathered: up to 128 KiB in all (``SPMDLAB_GATHER_BYTES``): one Allgather of every
  worker's bytes (a persistent one, kept per size: ``_agree.Exchange.gathering``); each
  worker folds all. The next record exchange then has room for such a value
  (``_agree.Exchange.arm``): in a loop, the record and the value go in one MPI call.
- shared: every worker on one node and 64 KiB or more, when not gathered: MPI
  shared-memory windows, each worker folding its slice of every input (``_shm``).
- scattered: larger values: each worker receives its 1/N slice of every worker's input
  (Alltoallv), folds it, and the folded slices are gathered back into the result
  (Allgatherv in place): 2(N-1)/N of the data, as MPI's own large Allreduce moves.
  Among many workers, by halves along the tree instead (``_tree.scattered``): the same
  bytes in O(log N) messages.

MPI's own reductions are never used: their algorithms (recursive doubling, node-aware
trees) combine partial results in an order that depends on the node layout, so a float
sum would change in its last bits from one layout to another, and, in some layouts,
from one worker to another. The strategy depends only on values every worker agreed on,
so every worker takes the same one.
"""

import math
import struct
import sys

import numpy as np
from ._mpi import MPI

from . import _agree, _backends, _count, _ending, _env, _pack, _shm, _tree, _wait, _world
from ._agree import FLAG_INLINE, HEADER, agree, describe_call, fast_header
from ._backends import Leaf
from ._checks import check_worker
from ._ops import KNOWN, PROD, SCALAR_OPS, SUM, VERB, fold, quiet
from ._pack import Obj, digest
from .errors import SpmdError, SpmdTypeError, SpmdValueError

# Up to this many bytes gathered in all (value size times workers), a reduction gathers
# every worker's value and folds it locally; above, each worker folds a slice.
GATHER_BYTES = _env.get("GATHER_BYTES", 1 << 17, cast=int, valid=_env.at_least_zero,
                        meaning="a number of bytes, 0 or more")
_world.SAME_EVERYWHERE["SPMDLAB_GATHER_BYTES"] = GATHER_BYTES


def gathers(ex, nbytes):
    """Whether a reduction of ``nbytes`` (each worker's value) gathers every value, one
    Allgather and a local fold: among a few workers, up to GATHER_BYTES in all. Such a
    value skips shared memory, whose two barriers cost more up to there (a 64 KiB
    ``spmd_plus`` at 1x2: 27-28 us gathered, 36-38 through shared memory)."""
    return not ex.tree and nbytes * ex.size <= GATHER_BYTES


def along_tree(ex, nbytes):
    """Whether a reduction of ``nbytes`` (each worker's value; the same on every worker
    of a matching call) folds in the tree's own steps, the whole value at each: among
    more than SPMDLAB_TREE_ABOVE workers, below the shared-memory size. Larger values
    among as many workers fold with the same bracketing (``_ops.tree_fold`` in shared
    memory on a node, ``_tree.scattered`` across nodes); among a few, every value folds
    left in worker order."""
    return ex.tree and nbytes <= GATHER_BYTES and nbytes < _shm.MIN_BYTES


_INT64 = np.dtype(np.int64)
_INT64_MIN, _INT64_MAX = -(2 ** 63), 2 ** 63 - 1
_SCALAR_STRUCT = {"py-float": struct.Struct("<d"), "py-int": struct.Struct("<q"),
                  "py-bool": struct.Struct("<?")}


def key(call, op, destination, tree, leaves, layout=None):
    """The agreement key of a reduction: the one builder every path uses.

    ``tree`` is ``_pack.tree_signature`` of the value, ``leaves`` its leaves'
    ``(dtype.str, shape)``: equal keys mean the same call on values that can be combined.
    ``layout``: what else the workers must agree on (a codistributed array's global
    shape and partition, of which each worker reduces its share), or None.
    """
    if layout is not None:
        return digest((call, op.name, destination, tree, tuple(leaves), layout))
    return digest((call, op.name, destination, tree, tuple(leaves)))


# Operations whose fold of lone Python ints is exact, past int64 (a sum or product),
# where numpy's int64 would wrap: such an int agrees only with Python ints
_EXACT_OPS = (SUM, PROD)
_EXACT = "py-int"


def _leaf_dtype(leaf, op, treedef):
    """A leaf's dtype in a reduction's key: ``_EXACT`` for a lone Python int summed or
    multiplied exactly, which must not meet an int64 array or scalar (their sum would
    wrap on the workers that passed those and not on the others), else its dtype."""
    if treedef is None and leaf.family == "py-int" and op in _EXACT_OPS:
        return _EXACT
    return leaf.dtype.str


def known_op(fcn, treedef, leaves):
    """The operation that computes ``fcn`` on these values, or None.

    Lists and tuples keep Python's meaning (``operator.add`` concatenates them), so only
    single values and dicts of them map to element-wise operations.
    """
    if _has_sequences(treedef):
        return None
    for op in _candidates(fcn):
        if all(type(l) is Leaf and l.dtype.kind in op.kinds for l in leaves):
            return op
    return None


def known_name(fcn):
    """The name a mismatch shows for ``fcn`` where spmdlab folds it itself (``sum`` for
    ``operator.add``), whatever the values; None for other functions."""
    candidates = _candidates(fcn)
    return candidates[0].name if candidates else None


def _candidates(fcn):
    """The operations that may compute ``fcn`` (``_ops.KNOWN``), or ()."""
    try:
        return KNOWN.get(fcn, ())
    except TypeError:  # unhashable callable
        return ()


def _has_sequences(treedef):
    if treedef is None:
        return False
    return treedef[0] != "dict" or any(_has_sequences(c) for c in treedef[3])


# -- the general path ---------------------------------------------------------------------


def reduce_op(call, x, op, destination, layout=None):
    """Reduce ``x`` over the current scope with ``op``: on every worker, or on worker
    ``destination`` only (None elsewhere). ``layout`` (a string, or None): what the
    workers must also agree on, shown where they differ (the global shape and partition
    of the codistributed array whose shares ``x`` holds: a worker whose array is another
    size would otherwise fold its share in silently)."""
    scope = _world.current()
    if destination is None:
        kind = type(x)
        if kind is np.ndarray:
            entry = array_entry(scope, call, op, x, layout)
            if entry is not None:
                return reduce_array(scope, call, x, op, entry, layout=layout)
        elif kind.__module__ == "torch":  # a plain CPU tensor: its numpy view's fast path
            array = _pack.tensor_array(x)
            if array is not None:
                entry = array_entry(scope, call, op, array, layout)
                if entry is not None:
                    return sys.modules["torch"].from_numpy(np.asarray(
                        reduce_array(scope, call, array, op, entry, shown=x,
                                     layout=layout)))
        fast = FAST.get((call, op, kind)) if layout is None else None
        if fast is not None and (kind is not int or _INT64_MIN <= x <= _INT64_MAX):
            return reduce_scalar(scope, call, x, op, fast)
    treedef, leaves = _pack.flatten(x)
    error = check_worker(call, scope, "destination", destination)
    if error is None:
        error = _check_reducible(call, scope, op, leaves)
    total, offsets, payload, k = 0, None, None, 0
    if error is None:
        if op is SUM:
            for leaf in leaves:  # True + True == 2, as in Python (and MATLAB's plus)
                if leaf.family == "py-bool":
                    leaf.family, leaf.value, leaf.dtype = "py-int", int(leaf.value), _INT64
        offsets, total = _layout(leaves)
        k = key(call, op, destination, _pack.tree_signature(treedef),
                ((_leaf_dtype(l, op, treedef), l.shape) for l in leaves), layout)
        # (a lone Python int rides in the record whatever SPMDLAB_INLINE_BYTES says, as
        # on the fast path: only there is its sum exact; its key meets no other value's)
        payload = _payload(leaves, offsets, total) if total <= scope.exchange.inline or \
            (treedef is None and _leaf_dtype(leaves[0], op, None) == _EXACT) else None
    aux, arrays = _shm.AUX_NO, None
    if error is None and payload is None:
        try:  # copies from a device, before agreeing: a failure here is agreed on below
            arrays = [leaf.host() for leaf in leaves]
        except Exception as exc:
            error = SpmdError(f"{call} ({scope.who()}): copying the value to host memory "
                              f"failed: {type(exc).__name__}: {exc}")
    ex = scope.exchange
    if error is None and len(leaves) == 1 and total <= _tree.ROOM and along_tree(ex, total):
        leaf = leaves[0]  # the fast paths' way, which a worker beside may be taking
        value = leaf.value if leaf.family == "py-int" else arrays[0]
        result = _tree_fold(scope, ex, call, k, op, leaf.dtype, leaf.shape, value,
                            lambda: _describe(call, treedef, leaves, destination, op, layout))
        if destination is not None and destination != scope.index:
            return None
        if type(result) is int and leaf.family != "py-int":
            result = _wrap_int64(result)
        elif type(result) is int and treedef is not None:
            # a Python int within a list, tuple or dict: as int64 gives it, as the
            # inline fold (``_fold_inline``) and a structure of more leaves give it
            result = int(_wrap_int64(result))
        out = _wrap_scalar_or_array(leaf, result)
        return out if treedef is None else _pack.unflatten(treedef, [out])
    if error is None and payload is None and destination is None and \
            not gathers(ex, total):
        aux = _shm.offer(scope, leaves, arrays, list(enumerate(offsets)), total)
    ex, _, inline = agree(scope, call, k, exact=k, nbytes=total, payload=payload,
                          error=error,
                          describe=lambda: _describe(call, treedef, leaves, destination, op,
                                                     layout),
                          aux=aux)
    wanted = destination is None or destination == scope.index
    if inline:
        if not wanted:
            return None
        out = [_fold_inline(ex, leaf, off, op, treedef is not None)
               for leaf, off in zip(leaves, offsets)]
        return out[0] if treedef is None else _pack.unflatten(treedef, out)
    plan = _shm.plan(ex, scope.size) if scope.size > 1 else None
    try:
        if plan is not None:
            return _reduce_shared(scope, call, treedef, leaves, arrays, offsets, total, op,
                                  plan)
        return _reduce_tree(scope, call, treedef, leaves, arrays, op, destination, wanted)
    except _wait.AGREED_ERRORS:
        raise
    except Exception:
        _ending.end_committed(scope, call)


def _layout(leaves):
    """Byte offsets of each leaf in a packed payload (aligned to the item size)."""
    if len(leaves) == 1:
        return _ZERO, leaves[0].nbytes
    offsets = []
    total = 0
    for leaf in leaves:
        size = leaf.dtype.itemsize
        total = (total + size - 1) // size * size
        offsets.append(total)
        total += leaf.nbytes
    return offsets, total


_ZERO = (0,)


def _payload(leaves, offsets, total):
    """Every leaf's bytes at its offset (none for a structure without leaves: ``()``,
    ``[]``, ``{}`` or ``{"a": []}``, whose sum is itself)."""
    if len(leaves) == 1:
        leaf = leaves[0]
        fmt = _SCALAR_STRUCT.get(leaf.family)
        if fmt is not None:
            return fmt.pack(leaf.value)
        return np.ascontiguousarray(leaf.host()).tobytes()
    buf = bytearray(total)
    for leaf, off in zip(leaves, offsets):
        data = np.ascontiguousarray(leaf.host()).tobytes()
        buf[off:off + len(data)] = data
    return buf


def _check_reducible(call, scope, op, leaves):
    for leaf in leaves:
        if type(leaf) is Obj and type(leaf.value) is int:
            return SpmdValueError(
                f"{call} ({scope.who()}): the int {leaf.value} does not fit in 64 bits; "
                f"{call} combines Python ints as int64 (pass a float, or split the number)")
        if type(leaf) is Obj and type(leaf.value).__module__.startswith("torch") and \
                hasattr(leaf.value, "dtype"):
            return SpmdTypeError(
                f"{call} ({scope.who()}): cannot {VERB.get(op.name, 'reduce')} a tensor of "
                f"{leaf.value.dtype} ({_pack.describe_leaf(leaf)}): numpy has no such "
                f"dtype; convert it first (say, with .float())")
        if type(leaf) is Obj:
            return SpmdTypeError(
                f"{call} ({scope.who()}): cannot {VERB.get(op.name, 'reduce')} a value of "
                f"type {type(leaf.value).__name__} ({_pack.describe_leaf(leaf)}); pass "
                f"numbers, arrays or tensors")
        if op is SUM and leaf.family == "py-bool":
            continue
        if leaf.dtype.kind not in op.kinds:
            hint = ""
            if leaf.dtype.kind == "b" and op is SUM:
                hint = "; sum x.astype(int) to count, or use spmd_reduce(numpy.logical_or, x)"
            elif leaf.dtype == _backends.BF16_HOST:
                hint = "; reduce x.float() and convert the result back"
            return SpmdTypeError(
                f"{call} ({scope.who()}): cannot {VERB.get(op.name, op.name)} "
                f"{_pack.dtype_name(leaf.dtype)} values ({_pack.describe_leaf(leaf)}){hint}")
    return None


def _describe(call, treedef, leaves, destination=None, op=None, layout=None):
    """The call as a mismatch shows it: with its operation (``fcn='max'``) but where
    ``call`` names it (spmd_plus), so that workers passing different functions see why;
    with the ``layout`` it was given (``reduce_op``)."""
    fcn = None if op is None or call == "spmd_plus" else op.name
    more = {} if layout is None else {"layout": layout}
    return describe_call(call, _pack.describe(treedef, leaves),
                         _pack.value_fields(treedef, leaves), destination=destination,
                         fcn=fcn, **more)


# -- strategy: inline (values rode in the agreement record) -------------------------------


def _fold_inline(ex, leaf, offset, op, within=False):
    """Fold every worker's inline copy of one leaf, in worker order. A Python int
    ``within`` a list, tuple or dict comes back as int64 arithmetic gives it (wrapped),
    as the other ways of reducing carry it, so a sum is the same at every layout."""
    fmt = _SCALAR_STRUCT.get(leaf.family)
    if fmt is not None:
        view = ex.view
        offsets = iter(ex.offsets(offset))
        acc = fmt.unpack_from(view, next(offsets))[0]
        for o in offsets:
            acc = op.pyfold(acc, fmt.unpack_from(view, o)[0])
        if within and leaf.family == "py-int":
            acc = int(_wrap_int64(acc))
        return _wrap_scalar_or_array(leaf, acc)
    block = ex.block(offset, leaf.nbytes).view(leaf.dtype)
    out = np.empty(block.shape[1], dtype=leaf.dtype)
    fold(op, block, out)
    return _wrap_scalar_or_array(leaf, out)


def _wrap_scalar_or_array(leaf, value):
    if leaf.family in ("py-float", "py-int", "py-bool") and type(value) in (float, int, bool):
        return value
    return leaf.wrap(np.asarray(value, dtype=leaf.dtype).reshape(leaf.shape))


# -- strategy: shared memory on one node --------------------------------------------------


def _reduce_shared(scope, call, treedef, leaves, arrays, offsets, total, op, plan):
    """The reduction through node shared memory (see ``_shm``); every worker gets here."""
    if plan == "setup":
        window = _shm.setup(scope, total)
        if window is None:  # not one node, or over SPMDLAB_SHM_BYTES: the same everywhere
            return _reduce_tree(scope, call, treedef, leaves, arrays, op, None, True)
        locations = [(0, 1)] * scope.size  # a new window: every slot is free
    else:
        window = scope.arena.windows[_shm.capacity_for(total)]
        locations = plan
    layout = list(enumerate(offsets))
    region = _shm.reduce(scope, call, window, locations, leaves, arrays, layout, op)
    out = []
    for leaf, off in zip(leaves, offsets):
        view = region[off:off + leaf.nbytes].view(leaf.dtype).reshape(leaf.shape)
        out.append(leaf.wrap(view))
    return out[0] if treedef is None else _pack.unflatten(treedef, out)


# -- strategies over MPI: gathered and scattered ------------------------------------------


def _reduce_tree(scope, call, treedef, leaves, arrays, op, destination, wanted):
    """Every leaf reduced over MPI in worker order: one buffer per dtype.

    Leaves on a GPU are staged through host memory: the fold runs on the host.
    """
    groups = {}
    for i, leaf in enumerate(leaves):
        groups.setdefault(leaf.dtype, []).append(i)
    root = None if destination is None else destination - 1
    out = [None] * len(leaves)
    for dtype, members in groups.items():
        count = sum(leaves[i].nbytes // dtype.itemsize for i in members)
        send = _host_send(arrays, members, dtype, count)
        recv = _pack.results.empty(dtype, count) if wanted else None
        ordered(scope, call, send, recv, op, root)
        if not wanted:
            continue
        offset = 0
        for i in members:
            leaf = leaves[i]
            n = leaf.nbytes // dtype.itemsize
            out[i] = leaf.wrap(recv[offset:offset + n].reshape(leaf.shape))
            offset += n
    if not wanted:
        return None
    return out[0] if treedef is None else _pack.unflatten(treedef, out)


def _host_send(arrays, members, dtype, count):
    if len(members) == 1:
        array = arrays[members[0]]
        if array.flags.c_contiguous:
            return array.reshape(-1)
    send = _pack.scratch.empty(dtype, count)
    offset = 0
    for i in members:
        array = arrays[i]
        n = array.size
        send[offset:offset + n].reshape(array.shape)[...] = array
        offset += n
    return send


def ordered(scope, call, send, recv, op, root=None):
    """Collective: fold every worker's 1-D host array ``send`` in worker order.

    The result goes to ``recv`` (same dtype and length) on every worker, or on scope rank
    ``root`` only (``recv`` None elsewhere). Every wait goes through ``_wait.wait``, so
    a worker that has left, or ``SPMDLAB_TIMEOUT``, ends it with an error.
    """
    n, me, count = scope.size, scope.rank, send.size
    if count == 0:
        return recv
    if n == 1:
        recv[...] = send
        return recv
    comm, dtype, ex = scope.comm, send.dtype, scope.exchange
    if along_tree(ex, send.nbytes):  # O(log N) steps of the whole value
        return _tree.ordered(scope, call, send, recv, op)
    if ex.tree:  # O(log N) steps of halves, the same bracketing
        return _tree.scattered(scope, call, send, recv, op)
    if gathers(ex, send.nbytes):  # gathered
        rows = ex.gathering(send.nbytes, dtype) if root is None else None
        if rows is not None:  # (workers, count): every worker writes its own row
            request, rows = rows
            rows[me] = send
            request.Start()
            ex.arm(send.nbytes)  # the next such reduction rides in the record
        else:
            raw = send.view(np.uint8)
            if root is None or me == root:
                rows = _pack.scratch.empty(_BYTE, n * send.nbytes, use=2)
            if root is None:
                request = comm.Iallgather(raw, rows)
            else:
                request = comm.Igather(raw, rows, root=root)
            if rows is not None:
                rows = rows.view(dtype).reshape(n, count)
        if _count.ON:  # every other worker's bytes, in MPI's recursive doubling
            _count.collective(send.nbytes * (n - 1), send.nbytes * (n - 1), _count.steps(n))
            _count.add(records_examined=n)
        _wait.wait(request, scope, call, keep=(send, rows))
        if rows is not None:
            fold(op, rows, recv)
        return recv
    # scattered: worker j folds elements [bounds[j], bounds[j + 1]) of every input
    raw = send.view(np.uint8)
    item = dtype.itemsize
    bounds = [count * j // n for j in range(n + 1)]
    lo, hi = bounds[me], bounds[me + 1]
    sizes = [(bounds[j + 1] - bounds[j]) * item for j in range(n)]
    starts = [b * item for b in bounds[:-1]]
    mine = hi - lo
    parts = _pack.scratch.empty(dtype, n * mine, use=1).reshape(n, mine)
    request = comm.Ialltoallv(
        [raw, (sizes, starts), MPI.BYTE],
        [parts.reshape(-1).view(np.uint8),
         ([mine * item] * n, [j * mine * item for j in range(n)]), MPI.BYTE])
    if _count.ON:  # a slice to and from each other worker, then the slices gathered
        share = send.nbytes - sizes[me]
        _count.collective(share, (n - 1) * mine * item, n - 1)
        _count.collective(share, share, _count.steps(n))
        _count.add(records_examined=n)
    _wait.wait(request, scope, call, keep=(send, parts))
    result = recv if recv is not None else np.empty(count, dtype=dtype)
    fold(op, parts, result[lo:hi])
    whole = [result.view(np.uint8), (sizes, starts), MPI.BYTE]
    if root is None:
        request = comm.Iallgatherv(MPI.IN_PLACE, whole)
    elif me == root:
        request = comm.Igatherv(MPI.IN_PLACE, whole, root=root)
    else:
        request = comm.Igatherv([result[lo:hi].view(np.uint8), MPI.BYTE], None, root=root)
    _wait.wait(request, scope, call, keep=result)
    return recv


# -- fast paths: one scalar, one small numpy array ----------------------------------------


def reduce_scalar(scope, call, x, op, fast):
    """``reduce_op`` for one scalar: the same key and the same answer, less overhead.

    The common case (no fault or profile hooked, no listener running) is written out
    here, flat: this is the call a solver makes every iteration. Each worker's record is
    read back with one unpack of its header and value."""
    k, fmt, cast, element, header, flags, whole = fast
    ex = scope._exchange or scope.exchange
    if ex.tree:
        return _tree_scalar(scope, call, x, op, fast, ex)
    request = ex.request
    if _agree.HOOKED or _world.listener_running or request is None:
        ex.put_value(fmt, x if cast is None else cast(x))
        ex.fast(scope, call, header, _describe_value, call, x, op)
    else:
        # header and value in one pack: (key, exact, nbytes, flags, aux) as fast_header
        whole.pack_into(ex.send, 0, k, k, fmt.size, flags, _shm.AUX_NO,
                        x if cast is None else cast(x))
        ex.calls += 1
        ex.last = call
        try:
            request.Start()
            test = request.Test  # the others' records come within a few looks, mostly:
            # looked for here, the wait's two calls are saved (0.1-0.2 us of 2.2 at 1x2)
            if not (test() or test() or test() or test()):
                _wait.wait(request, scope, call)
        except BaseException as exc:  # (a Ctrl-C before the wait: as one in it)
            _wait.interrupted_fast(request, scope, call, exc)
            raise
    unpack, view, pyfold = whole.unpack_from, ex.view, op.pyfold
    key_, _, _, flags_, _, acc = unpack(view, 0)
    if key_ != k or flags_ != flags:  # (key and flags fix the rest of a fast header)
        ex.check(scope, call, k, flags, None, lambda: _describe_value(call, x, op))
    if element is not None:  # numpy scalars fold in their own dtype (float32 rounds)
        first = element(acc)
        try:  # (numpy scalars warn as arrays do: see ``_rows_fold``)
            return _scalars_fold(scope, call, x, op, fast, ex, first)
        except (RuntimeWarning, FloatingPointError):
            with quiet():
                return _scalars_fold(scope, call, x, op, fast, ex, first)
    for o in ex.later_rows:  # in worker order
        key_, _, _, flags_, _, value = unpack(view, o)
        if key_ != k or flags_ != flags:
            ex.check(scope, call, k, flags, None, lambda: _describe_value(call, x, op))
        acc = pyfold(acc, value)
    if element is None:  # Python numbers, and float64 (Python's float arithmetic is IEEE's)
        return acc if type(x) is not np.float64 else np.float64(acc)
    return acc


def _rows_fold(ufunc, rows):
    """The workers' small values ``rows`` folded with ``ufunc`` in worker order, into a
    new array. Run as it is, at no cost: a fold that meets inf and -inf or overflows
    warns as numpy warns (the same on every worker: each folds every row); where the
    warnings are errors (``-W error``, ``np.seterr(all="raise")``) the caller folds
    again under ``_ops.quiet``, so that every worker gets inf or NaN, as MPI's sum gives
    (the rows are read only, so the fold can run twice)."""
    result = rows[0].copy() if len(rows) == 1 else ufunc(rows[0], rows[1])
    for row in rows[2:]:  # in worker order
        ufunc(result, row, out=result)
    return result


def _scalars_fold(scope, call, x, op, fast, ex, acc):
    """``reduce_scalar``'s fold of numpy scalars from worker 1's ``acc`` on, in their
    dtype (as ``_rows_fold``: run again under ``_ops.quiet`` where warnings are errors)."""
    k, _, _, element, _, flags, whole = fast
    unpack, view, pyfold = whole.unpack_from, ex.view, op.pyfold
    for o in ex.later_rows:  # in worker order
        key_, _, _, flags_, _, value = unpack(view, o)
        if key_ != k or flags_ != flags:
            ex.check(scope, call, k, flags, None, lambda: _describe_value(call, x, op))
        acc = pyfold(acc, element(value))
    return acc


_FOLDS: dict = {}  # (op, dtype, nbytes) -> its fold (see _tree_fold)


def _tree_fold(scope, ex, call, k, op, dtype, shape, value, describe):
    """Among many workers (``_tree``): one value of ``dtype`` and ``shape`` (up to
    ``_tree.ROOM`` bytes) folded in the agreement's own merges; every path (the fast
    ones, the general one) takes this way for such a value, with the same payload and
    the same fold, so workers passing different families still meet.

    An int64 scalar travels as an exact Python int (``_tree.INT_BYTES``, Python's
    arithmetic, as a gathering exchange folds Python ints) and comes back as one;
    anything else as its bytes, folded by ``op``'s ufunc, and comes back as an array."""
    exact = dtype == _INT64 and shape == ()
    nbytes = _tree.INT_BYTES if exact else dtype.itemsize * math.prod(shape)
    fold = _FOLDS.get((op, dtype, nbytes))
    if fold is None:
        if len(_FOLDS) > 256:
            _FOLDS.clear()
        fold = _FOLDS[(op, dtype, nbytes)] = (
            _tree.int_fold(op) if exact else _tree.array_fold(op.ufunc, dtype, nbytes))
    send = ex.send
    if exact:
        send[HEADER:HEADER + nbytes] = int(value).to_bytes(nbytes, "little", signed=True)
    else:
        send[HEADER:HEADER + nbytes] = value.tobytes() if isinstance(value, np.ndarray) \
            else bytes(value)
    ex.fast(scope, call, fast_header(k, nbytes, True, _shm.AUX_NO), describe, fold=fold,
            nbytes=nbytes)
    if exact:
        return int.from_bytes(ex.result(nbytes), "little", signed=True)
    return np.frombuffer(ex.result(nbytes), dtype=dtype).copy().reshape(shape)


def _wrap_int64(value):
    """A Python int as int64 wraps it (numpy's int64 arithmetic, step by step, gives the
    same bits: sums and products modulo 2**64). ``value`` may be a numpy integer already
    (``max`` and ``min`` fold Python ints with numpy's ufuncs)."""
    return np.int64((int(value) + 2 ** 63) % 2 ** 64 - 2 ** 63)


def _tree_scalar(scope, call, x, op, fast, ex):
    """``reduce_scalar`` among many workers (``_tree_fold``)."""
    k, fmt, cast, element = fast[:4]
    value = x if cast is None else cast(x)
    dtype = np.dtype(fmt.format[1:]) if fmt.format != "<?" else np.dtype(bool)
    if dtype == _INT64:
        result = _tree_fold(scope, ex, call, k, op, dtype, (), value,
                            lambda: _describe_value(call, x, op))
        return result if element is None else _wrap_int64(result)
    result = _tree_fold(scope, ex, call, k, op, dtype, (), np.array(value, dtype),
                        lambda: _describe_value(call, x, op))[()]
    if element is None:
        return result.item() if type(x) is not np.float64 else result
    return element(result)


def _describe_value(call, x, op=None, layout=None):
    return _describe(call, None, [_backends.classify(x)], None, op, layout)


_BYTE = np.dtype(np.uint8)
# (call, op, dtype, shape, workers, layout) -> (header, nbytes, inline, key)
_ARRAYS: dict = {}


def array_entry(scope, call, op, x, layout=None):
    """The fast-path entry for one numpy array, or None when the general path must run
    (``layout``: as ``reduce_op``'s)."""
    k = (call, op, x.dtype, x.shape, scope.size, layout)
    entry = _ARRAYS.get(k)
    if entry is None:
        dtype = x.dtype
        if dtype.kind not in op.kinds or dtype.hasobject or (
                x.nbytes >= _shm.MIN_BYTES and not gathers(scope.exchange, x.nbytes)):
            return None
        inline = x.nbytes <= scope.exchange.inline
        digest_ = key(call, op, None, None, ((dtype.str, x.shape),), layout)
        header = fast_header(digest_, x.nbytes, inline, _shm.AUX_NO)
        if len(_ARRAYS) > 1024:
            _ARRAYS.clear()
        entry = _ARRAYS[k] = (header, x.nbytes, inline, digest_)
    return entry


def reduce_array(scope, call, x, op, entry, shown=None, layout=None):
    """``reduce_op`` for one small numpy array (below the shared-memory size, or
    gathered); ``shown``: the value an error describes, when ``x`` is its view (a
    tensor's); ``layout``: as ``reduce_op``'s (in ``entry``'s key)."""
    header, nbytes, inline, k = entry
    if shown is None:
        shown = x
    ex = scope._exchange or scope.exchange
    # among many workers: folded in the agreement's merges
    if ex.tree and nbytes <= _tree.ROOM and along_tree(ex, nbytes):
        result = _tree_fold(scope, ex, call, k, op, x.dtype, x.shape, x,
                            lambda: _describe_value(call, shown, op, layout))
        return np.asarray(_wrap_int64(result)) if type(result) is int else result
    request = ex.request
    if inline and not (_agree.HOOKED or _world.listener_running or request is None):
        # the common case written out flat, as reduce_scalar's: one MPI call in all
        send = ex.sendview
        send[:HEADER] = header
        send[HEADER:HEADER + nbytes] = x.tobytes()  # C order, whatever the strides
        ex.calls += 1
        ex.last = call
        try:
            request.Start()
            test = request.Test
            if not (test() or test() or test() or test()):  # (as reduce_scalar's)
                _wait.wait(request, scope, call)
        except BaseException as exc:  # (a Ctrl-C before the wait: as one in it)
            _wait.interrupted_fast(request, scope, call, exc)
            raise
        words = ex.words
        for i in ex.key_words:
            if words[i] != k or words[i + 3] != FLAG_INLINE:
                ex.check(scope, call, k, FLAG_INLINE, None,
                         lambda: _describe_value(call, shown, op, layout))
        rows = ex.row_views(x.dtype, nbytes)  # each worker's value, read in place
        try:
            result = _rows_fold(op.ufunc, rows)
        except (RuntimeWarning, FloatingPointError):
            with quiet():
                result = _rows_fold(op.ufunc, rows)
        if result.dtype != x.dtype:  # (a ufunc answers a byte-swapped dtype natively)
            result = result.astype(x.dtype)
        return result if x.ndim == 1 else result.reshape(x.shape)
    if not x.flags.c_contiguous:
        x = np.ascontiguousarray(x)
    if inline:
        ex.put(x.tobytes())
    result = _pack.results.empty(x.dtype, x.size)  # allocated before agreeing
    if not inline and nbytes <= ex.armed and not (_agree.HOOKED or _world.listener_running):
        if _wide_fold(scope, ex, call, x, op, header, k, shown, result, layout):
            return result.reshape(x.shape)
    else:
        ex.fast(scope, call, header, _describe_value, call, shown, op, layout)
    if inline:  # every worker's bytes, read in place: (workers, count) of the dtype
        fold(op, ex.inline_rows[:, :nbytes].view(x.dtype), result)
    else:
        try:
            ordered(scope, call, x.reshape(-1), result, op)
        except _wait.AGREED_ERRORS:
            raise
        except Exception:
            _ending.end_committed(scope, call)
    return result.reshape(x.shape)


_ONE = (1).to_bytes(8, "little")


def _wide_fold(scope, ex, call, x, op, header, k, shown, result, layout=None):
    """``reduce_array`` for a gathered value when the record has room for it
    (``_agree.Exchange.arm``, after a reduction like it): the record and the value in
    one MPI call, folded in worker order into ``result`` as ``ordered`` folds; True.
    False when some worker's value did not come with its record (a call of another
    kind, or of another size, on its way): then every worker has agreed as ``ex.fast``
    agrees (a mismatch raised on every worker) and the values are still to be
    gathered."""
    wide = ex.wide()
    send = wide.sendview
    start = ex.record
    send[:HEADER] = header
    send[start:start + 8] = _ONE
    nbytes = x.nbytes
    send[start + 8:start + 8 + nbytes] = memoryview(x).cast("B")
    ex.calls += 1
    ex.last = call
    request = wide.request
    request.Start()
    if not request.Test():
        _wait.wait(request, scope, call)
    words, sent = wide.words, start // 8
    for i in wide.key_words:  # the key fixes the rest of the header (its flags are 0)
        if words[i] != k or words[i + 3] or words[i + sent] != 1:
            break
    else:
        if ex.armed > 4 * nbytes:
            ex.widen(nbytes)  # (a smaller room from now on)
        fold(op, wide.values(x.dtype, nbytes), result)  # each worker's value, in place
        return True
    wide.took(scope, call)
    for i in ex.key_words:
        if ex.words[i] != k or ex.words[i + 3]:
            ex.check(scope, call, k, 0, None, lambda: _describe_value(call, shown, op, layout))
            break
    return False


def fast_paths():
    """(call, op, type) -> (key, struct, cast, element, header, flags, header and
    value's struct) for ``reduce_scalar``.

    Keys are those ``reduce_op`` computes for the same value, so a worker on the fast path
    and one on the general path still agree. A scalar larger than
    ``SPMDLAB_INLINE_BYTES`` has no fast path (the record would not carry it elsewhere),
    but for a lone Python int summed or multiplied, which rides in the record on every
    path.
    """
    table = {}
    kinds = [(float, "d", None), (int, "q", None), (bool, "?", None),
             (np.float64, "d", None), (np.float32, "f", np.float32),
             (np.int64, "q", np.int64), (np.int32, "i", np.int32),
             (np.bool_, "?", np.bool_)]
    for call in ("spmd_plus", "spmd_reduce"):
        for op in SCALAR_OPS:
            for kind, code, element in kinds:
                dtype = _backends.classify(kind(0)).dtype
                fmt, cast = struct.Struct("<" + code), None
                if kind is bool and op is SUM:
                    dtype, fmt, cast = _INT64, struct.Struct("<q"), int
                if dtype.kind not in op.kinds:
                    continue
                exact = op in _EXACT_OPS and (kind is int or cast is int)
                if not exact and _env.INLINE_BYTES is not None and \
                        fmt.size > _env.INLINE_BYTES:
                    # (a fast path rides in the record, always: where the record may
                    # not carry the value, a 0-d array or tensor of the same key on
                    # another worker gathers it instead, so this one takes the
                    # general path, which does the same; else a wrong sum here, a
                    # hang there. A lone Python int rides in the record on every path)
                    continue
                k = key(call, op, None, None, ((_EXACT if exact else dtype.str, ()),))
                header = fast_header(k, fmt.size, True, _shm.AUX_NO)
                table[(call, op, kind)] = (k, fmt, cast, element, header, FLAG_INLINE,
                                           struct.Struct("<qqqqq" + fmt.format[1:]))
    return table


FAST = fast_paths()
FAST_PLUS = {kind: fast for (call, op, kind), fast in FAST.items()
             if call == "spmd_plus" and op is SUM}
