"""Collectives over the workers of the current scope.

Every collective has the same shape: validate locally, agree across workers (one
fixed-size record exchange that also carries small values, see ``_agree``), move the
data in one MPI call through the array-backend adapters, unpack into the input's family.
Collective: every worker of the current scope must make the same calls in the same order.
"""

import operator
import struct

import numpy as np
from mpi4py import MPI

from . import _backends, _pack, _shm, _world
from ._agree import _HEAD, FLAG_INLINE, HEADER, INLINE, RECORD, agree
from ._backends import Leaf
from ._pack import Obj, digest
from .errors import SpmdTypeError, SpmdValueError

__all__ = ["spmd_barrier", "spmd_broadcast", "spmd_cat", "spmd_index", "spmd_plus",
           "spmd_reduce", "spmd_size"]


def spmd_index():
    """This worker's number, 1-based, within the current scope (MATLAB ``spmdIndex``)."""
    return _world.current().index


def spmd_size():
    """The number of workers in the current scope (MATLAB ``spmdSize``)."""
    return _world.current().size


def check_worker(call, scope, name, value, *, none_ok=True):
    """None, or the error for a worker number outside 1..size (an exception, not raised)."""
    if value is None and none_ok:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        return SpmdTypeError(
            f"{call} ({scope.who()}): '{name}' must be a worker number from 1 to "
            f"{scope.size} (got {value!r} that is a {type(value).__name__})")
    if not 1 <= value <= scope.size:
        return SpmdValueError(
            f"{call} ({scope.who()}): '{name}' must be a worker number from 1 to "
            f"{scope.size} (got {value}); worker numbers are 1-based")
    return None


def fail_together(call, error):
    """Collective: raise ``error`` here and a matching error on every other worker."""
    agree(_world.current(), call, 0, error=error)


# -- reductions with an MPI operation ---------------------------------------------------


class _Op:
    """An MPI reduction, the numpy ufunc that folds the same way, and the dtypes it takes."""

    def __init__(self, name, mpi, ufunc, kinds, pyfold=None):
        self.name = name
        self.mpi = mpi
        self.ufunc = ufunc
        self.kinds = kinds  # numpy dtype kinds MPI defines this operation for
        self.pyfold = pyfold or ufunc  # the same fold on Python scalars, without numpy


_NUMERIC = "iufc"
SUM = _Op("sum", MPI.SUM, np.add, _NUMERIC, operator.add)
_PROD = _Op("prod", MPI.PROD, np.multiply, _NUMERIC, operator.mul)
_MAX = _Op("max", MPI.MAX, np.maximum, "iuf")
_MIN = _Op("min", MPI.MIN, np.minimum, "iuf")
_LAND = _Op("land", MPI.LAND, np.logical_and, "b", operator.and_)
_LOR = _Op("lor", MPI.LOR, np.logical_or, "b", operator.or_)
_LXOR = _Op("lxor", MPI.LXOR, np.logical_xor, "b", operator.xor)
_BAND = _Op("band", MPI.BAND, np.bitwise_and, "iu", operator.and_)
_BOR = _Op("bor", MPI.BOR, np.bitwise_or, "iu", operator.or_)
_BXOR = _Op("bxor", MPI.BXOR, np.bitwise_xor, "iu", operator.xor)

# fcn -> candidate operations; the first whose dtype kinds fit every leaf is used.
_KNOWN = {
    operator.add: (SUM,), np.add: (SUM,),
    operator.mul: (_PROD,), np.multiply: (_PROD,),
    max: (_MAX,), np.maximum: (_MAX,), min: (_MIN,), np.minimum: (_MIN,),
    operator.and_: (_LAND, _BAND), operator.or_: (_LOR, _BOR),
    operator.xor: (_LXOR, _BXOR),
    np.logical_and: (_LAND,), np.logical_or: (_LOR,), np.logical_xor: (_LXOR,),
    np.bitwise_and: (_BAND,), np.bitwise_or: (_BOR,), np.bitwise_xor: (_BXOR,),
}


def _has_sequences(treedef):
    if treedef is None:
        return False
    return treedef[0] != "dict" or any(_has_sequences(c) for c in treedef[3])


def _known_op(fcn, treedef, leaves):
    """The MPI operation that computes ``fcn`` on these values, or None.

    Lists and tuples keep Python's meaning (``operator.add`` concatenates them), so only
    single values and dicts of them map to MPI's element-wise operations.
    """
    if _has_sequences(treedef):
        return None
    try:
        candidates = _KNOWN.get(fcn)
    except TypeError:  # unhashable callable
        return None
    if candidates is None:
        return None
    for op in candidates:
        if all(type(l) is Leaf and l.dtype.kind in op.kinds for l in leaves):
            return op
    return None


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
_SCALAR_STRUCT = {"py-float": struct.Struct("<d"), "py-int": struct.Struct("<q"),
                  "py-bool": struct.Struct("<?")}


def _payload(leaves, offsets, total):
    leaf = leaves[0]
    if len(leaves) == 1:
        fmt = _SCALAR_STRUCT.get(leaf.family)
        if fmt is not None:
            return fmt.pack(leaf.value)
        return np.ascontiguousarray(leaf.host()).tobytes()
    buf = bytearray(total)
    for leaf, off in zip(leaves, offsets):
        data = np.ascontiguousarray(leaf.host()).tobytes()
        buf[off:off + len(data)] = data
    return buf


def _read_leaf(ex, worker, leaf, offset):
    """One worker's copy of a leaf from its inline payload."""
    fmt = _SCALAR_STRUCT.get(leaf.family)
    if fmt is not None:
        return fmt.unpack_from(ex.view, worker * RECORD + HEADER + offset)[0]
    count = leaf.nbytes // leaf.dtype.itemsize
    raw = ex.payload(worker, offset + leaf.nbytes)[offset:]
    return np.frombuffer(raw, dtype=leaf.dtype, count=count).reshape(leaf.shape)


def reduce_op(call, x, op, destination):
    """Reduce ``x`` over the scope with ``op`` (an ``_Op``); result on every worker or one.

    Values that arrived inline are folded locally in worker order with ``op.ufunc``;
    larger ones are reduced by MPI with ``op.mpi``.
    """
    scope = _world.current()
    if destination is None:
        kind = type(x)
        if kind is np.ndarray:
            entry = _array_entry(call, op, x)
            if entry is not None:
                return _reduce_array(scope, call, x, op, entry)
        fast = _FAST.get((call, op, kind))
        if fast is not None and (kind is not int or _INT64_MIN <= x <= _INT64_MAX):
            return _reduce_scalar(scope, call, x, op, fast)
    treedef, leaves = _pack.flatten(x)
    error = check_worker(call, scope, "destination", destination)
    if error is None:
        error = _check_reducible(call, scope, op, leaves)
    if error is None:
        if op is SUM:
            for leaf in leaves:  # True + True == 2, as in Python (and MATLAB's plus)
                if leaf.family == "py-bool":
                    leaf.family, leaf.value, leaf.dtype = "py-int", int(leaf.value), _INT64
        offsets, total = _layout(leaves)
        sig = (call, op.name, destination, _pack.tree_signature(treedef),
               tuple((l.dtype.str, l.shape) for l in leaves))
        key = digest(sig)
        payload = _payload(leaves, offsets, total) if total <= INLINE else None
    else:
        key = total = 0
        payload = None
    aux, arrays = _shm.AUX_NO, None
    if error is None and payload is None and destination is None:
        aux, arrays = _shm.offer(scope, leaves, list(enumerate(offsets)), total)
    ex, _, inline = agree(scope, call, key, exact=key, nbytes=total, payload=payload,
                          error=error, describe=lambda: _describe(call, treedef, leaves),
                          aux=aux)
    wanted = destination is None or destination == scope.index
    if inline:
        if not wanted:
            return None
        out = [_fold_inline(ex, scope.size, leaf, off, op)
               for leaf, off in zip(leaves, offsets)]
        return out[0] if treedef is None else _pack.unflatten(treedef, out)
    plan = _shm.plan(ex, scope.size) if scope.size > 1 else None
    if plan is not None:
        return _reduce_shared(scope, treedef, leaves, arrays, offsets, total, op, plan)
    if treedef is None and not leaves[0].on_gpu:
        return _reduce_host_array(scope, leaves[0], op, destination, wanted)
    return _bulk_reduce(scope, treedef, leaves, op, destination, wanted)


def _reduce_shared(scope, treedef, leaves, arrays, offsets, total, op, plan):
    """The reduction through node shared memory (see ``_shm``); every worker gets here."""
    if plan == "setup":
        window = _shm.setup(scope, total)
        if window is None:  # not one node, or over SPMDLAB_SHM_BYTES: the same everywhere
            return _bulk_reduce(scope, treedef, leaves, op, None, True)
        locations = [(0, 1)] * scope.size  # a new window: every slot is free
    else:
        window = scope.arena.windows[_shm.capacity_for(total)]
        locations = plan
    if arrays is None:
        arrays = [leaf.host() for leaf in leaves]
    layout = list(enumerate(offsets))
    region = _shm.reduce(scope, window, locations, leaves, arrays, layout, op)
    out = []
    for leaf, off in zip(leaves, offsets):
        view = region[off:off + leaf.nbytes].view(leaf.dtype).reshape(leaf.shape)
        out.append(leaf.wrap(view))
    return out[0] if treedef is None else _pack.unflatten(treedef, out)


def _fold_inline(ex, size, leaf, offset, op):
    """Fold every worker's inline copy of one leaf, in worker order."""
    if leaf.family in _SCALAR_STRUCT:
        acc = _read_leaf(ex, 0, leaf, offset)
        for k in range(1, size):
            acc = op.pyfold(acc, _read_leaf(ex, k, leaf, offset))
        return _wrap_scalar_or_array(leaf, acc)
    block = ex.rows[:, HEADER + offset:HEADER + offset + leaf.nbytes].copy()
    block = block.view(leaf.dtype).reshape((size,) + tuple(leaf.shape))
    return _wrap_scalar_or_array(leaf, op.ufunc.reduce(block, axis=0, dtype=leaf.dtype))


def _reduce_host_array(scope, leaf, op, destination, wanted):
    """One host array: reduced straight from the caller's memory into a pooled result."""
    array = leaf.host()
    send = array.reshape(-1) if array.flags.c_contiguous else np.ascontiguousarray(array)
    recv = _pack.results.empty(send.dtype, send.size) if wanted else None
    if destination is None:
        scope.comm.Allreduce(send, recv, op.mpi)
    else:
        scope.comm.Reduce(send, recv, op.mpi, root=destination - 1)
    return leaf.wrap(recv.reshape(leaf.shape)) if wanted else None


_INT64 = np.dtype(np.int64)
_INT64_MIN, _INT64_MAX = -(2 ** 63), 2 ** 63 - 1


def _exchange(scope, call, ex, key, flags, header, describe):
    """The agreement exchange for a fast path whose record header is ``header``.

    A worker on the general path with an equal value writes the same header, so equal
    headers everywhere mean agreement; anything else goes to the full check (which raises
    on every worker).
    """
    request = ex.request
    if request is None or _world.listener_running:
        ex.run(scope, call)
    else:
        request.Start()
        if not request.Test():
            _world.wait(request, scope, call)
    recv = ex.recv
    for offset in range(0, RECORD * scope.size, RECORD):
        if recv[offset:offset + HEADER] != header:
            ex.check(scope, call, key, flags, None, describe)
            return


def _reduce_scalar(scope, call, x, op, fast):
    """``reduce_op`` for one scalar: the same key and the same answer, less overhead."""
    key, fmt, cast, element, header = fast
    ex = scope.exchange
    send = ex.send
    send[:HEADER] = header
    fmt.pack_into(send, HEADER, x if cast is None else cast(x))
    _exchange(scope, call, ex, key, FLAG_INLINE, header,
              lambda: f"{call}({type(x).__name__} scalar)")
    view, fold, size = ex.view, op.pyfold, scope.size
    acc = fmt.unpack_from(view, HEADER)[0]
    if element is None:  # Python numbers, and float64 (Python's float arithmetic is IEEE's)
        for offset in range(HEADER + RECORD, RECORD * size, RECORD):
            acc = fold(acc, fmt.unpack_from(view, offset)[0])
        return acc if type(x) is not np.float64 else np.float64(acc)
    acc = element(acc)  # numpy scalars fold in their own dtype (float32 rounds each step)
    for offset in range(HEADER + RECORD, RECORD * size, RECORD):
        acc = fold(acc, element(fmt.unpack_from(view, offset)[0]))
    return acc


_ARRAYS = {}  # (call, op, dtype, shape) -> (key, header, nbytes, inline) for _reduce_array


def _array_entry(call, op, x):
    """The fast-path entry for one numpy array, or None when the general path must run."""
    k = (call, op, x.dtype, x.shape)
    entry = _ARRAYS.get(k)
    if entry is None:
        dtype = x.dtype
        if dtype.kind not in op.kinds or x.nbytes >= _shm.MIN_BYTES or dtype.hasobject:
            return None
        key = digest((call, op.name, None, None, ((dtype.str, x.shape),)))
        inline = x.nbytes <= INLINE
        header = _HEAD.pack(key, key, x.nbytes, FLAG_INLINE if inline else 0, _shm.AUX_NO)
        if len(_ARRAYS) > 1024:
            _ARRAYS.clear()
        entry = _ARRAYS[k] = (key, header, x.nbytes, inline)
    return entry


def _reduce_array(scope, call, x, op, entry):
    """``reduce_op`` for one small numpy array (below the shared-memory size)."""
    key, header, nbytes, inline = entry
    ex = scope.exchange
    send = ex.send
    send[:HEADER] = header
    if not x.flags.c_contiguous:
        x = np.ascontiguousarray(x)
    if inline:
        send[HEADER:HEADER + nbytes] = x.tobytes()
    _exchange(scope, call, ex, key, FLAG_INLINE if inline else 0, header,
              lambda: f"{call}({_pack.describe_leaf(_backends.classify(x))})")
    if not inline:
        result = _pack.results.empty(x.dtype, x.size)
        scope.comm.Allreduce(x.reshape(-1), result, op.mpi)
        return result.reshape(x.shape)
    block = ex.rows[:, HEADER:HEADER + nbytes].copy().view(x.dtype)
    result = op.ufunc.reduce(block, axis=0, dtype=x.dtype)
    return np.asarray(result).reshape(x.shape)


def _fast_paths():
    """(call, op, type) -> (key, struct, cast, element) for ``_reduce_scalar``.

    Keys are those ``reduce_op`` computes for the same value, so a worker on the fast path
    and one on the general path still agree.
    """
    table = {}
    ops = [SUM, _PROD, _LAND, _LOR, _LXOR, _BAND, _BOR, _BXOR]
    kinds = [(float, "d", None), (int, "q", None), (bool, "?", None),
             (np.float64, "d", None), (np.float32, "f", np.float32),
             (np.int64, "q", np.int64), (np.int32, "i", np.int32),
             (np.bool_, "?", np.bool_)]
    for call in ("spmd_plus", "spmd_reduce"):
        for op in ops:
            for kind, code, element in kinds:
                dtype = _backends.classify(kind(0)).dtype
                fmt, cast = struct.Struct("<" + code), None
                if kind is bool and op is SUM:
                    dtype, fmt, cast = _INT64, struct.Struct("<q"), int
                if dtype.kind not in op.kinds:
                    continue
                key = digest((call, op.name, None, None, ((dtype.str, ()),)))
                header = _HEAD.pack(key, key, fmt.size, FLAG_INLINE, _shm.AUX_NO)
                table[(call, op, kind)] = (key, fmt, cast, element, header)
    return table


_FAST = _fast_paths()
_FAST_PLUS = {kind: fast for (call, op, kind), fast in _FAST.items()
              if call == "spmd_plus" and op is SUM}


def _wrap_scalar_or_array(leaf, value):
    if leaf.family in ("py-float", "py-int", "py-bool") and type(value) in (float, int, bool):
        return value
    return leaf.wrap(np.asarray(value, dtype=leaf.dtype).reshape(leaf.shape))


def _check_reducible(call, scope, op, leaves):
    for leaf in leaves:
        if type(leaf) is Obj:
            return SpmdTypeError(
                f"{call} ({scope.who()}): cannot {_VERB.get(op.name, 'reduce')} a value of "
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
                f"{call} ({scope.who()}): MPI cannot {_VERB.get(op.name, op.name)} "
                f"{_pack.dtype_name(leaf.dtype)} values ({_pack.describe_leaf(leaf)}){hint}")
    return None


_VERB = {"sum": "sum", "prod": "multiply", "max": "take the maximum of",
         "min": "take the minimum of"}


def _describe(call, treedef, leaves):
    return f"{call}({_pack.describe(treedef, leaves)})"


def _bulk_reduce(scope, treedef, leaves, op, destination, wanted):
    """One buffer per dtype, reduced by MPI (all groups started together, one wait)."""
    # One group, hence one MPI call, per dtype: the dtypes are part of the agreed key, so
    # every worker makes the same calls whatever devices its leaves are on.
    groups = {}
    for i, leaf in enumerate(leaves):
        groups.setdefault(leaf.dtype, []).append(i)
    comm = scope.comm
    root = None if destination is None else destination - 1
    requests, unpack = [], []
    for dtype, members in groups.items():
        count = sum(_count(leaves[i]) for i in members)
        if _on_one_gpu([leaves[i] for i in members]):  # CUDA-aware MPI reads it there
            send = _gpu_send(leaves, members)
            recv = _backends.device_empty(leaves[members[0]], count) if wanted else None
        else:
            send = _host_send(leaves, members, dtype, count)
            recv = _pack.results.empty(dtype, count) if wanted else None
        if len(groups) == 1:
            if root is None:
                comm.Allreduce(send, recv, op.mpi)
            else:
                comm.Reduce(send, recv, op.mpi, root=root)
        elif root is None:
            requests.append(comm.Iallreduce(send, recv, op.mpi))
        else:
            requests.append(comm.Ireduce(send, recv, op.mpi, root=root))
        unpack.append((members, recv, send))
    if requests:
        MPI.Request.Waitall(requests)
    if not wanted:
        return None
    out = [None] * len(leaves)
    for members, recv, _ in unpack:
        offset = 0
        for i in members:
            leaf = leaves[i]
            n = _count(leaf)
            piece = recv[offset:offset + n].reshape(leaf.shape)
            offset += n
            out[i] = leaf.wrap(piece) if isinstance(piece, np.ndarray) else piece
    return _pack.unflatten(treedef, out)


def _on_one_gpu(group):
    """Whether a group can be handed to a CUDA-aware MPI as one device buffer."""
    first = group[0]
    return (first.on_gpu and _backends.cuda_aware() and
            all(l.on_gpu and l.family == first.family and l.device == first.device
                for l in group))


def _count(leaf):
    n = 1
    for s in leaf.shape:
        n *= s
    return n


def _host_send(leaves, members, dtype, count):
    if len(members) == 1:
        array = leaves[members[0]].host()
        if array.flags.c_contiguous:
            return array.reshape(-1)
    send = _pack.scratch.empty(dtype, count)
    offset = 0
    for i in members:
        array = leaves[i].host()
        n = array.size
        send[offset:offset + n].reshape(array.shape)[...] = array
        offset += n
    return send


def _gpu_send(leaves, members):
    buffers = [_backends.device_buffer(leaves[i]).reshape(-1) for i in members]
    if len(buffers) == 1:
        return buffers[0]
    first = leaves[members[0]]
    if first.family == "torch":
        return _backends._torch().cat(buffers)
    return _backends._cupy().concatenate(buffers)


# -- public reductions -------------------------------------------------------------------


def spmd_plus(x, destination=None):
    """Element-wise sum of ``x`` over the workers (MATLAB ``spmdPlus``, ``gplus``).

    Collective: every worker must call this.

    ``x`` is a number, a numpy array or scalar, a torch tensor or CuPy array, or a
    dict / list / tuple of these; the result has the same structure, types, dtypes and
    devices, on every worker, or on worker ``destination`` only (None elsewhere).
    Raises SpmdMismatchError on every worker when shapes, dtypes or structures differ,
    SpmdTypeError when a value cannot be summed.
    """
    if destination is None:
        fast = _FAST_PLUS.get(type(x))
        if fast is not None and (type(x) is not int or _INT64_MIN <= x <= _INT64_MAX):
            return _reduce_scalar(_world.current(), "spmd_plus", x, SUM, fast)
    return reduce_op("spmd_plus", x, SUM, destination)


def spmd_reduce(fcn, x, destination=None):
    """``fcn`` folded over the workers' values in worker order (MATLAB ``spmdReduce``, ``gop``).

    Collective: every worker must call this.

    ``fcn(a, b)`` must be associative. Known functions (``operator.add``, ``max``,
    ``min``, ``operator.and_``, ``numpy.logical_or``, ``numpy.maximum``, ...) become
    MPI's own reductions on arrays; any other function is applied to the workers'
    values, which may then be any picklable objects, in worker order. With
    ``destination`` the result is returned on that worker only (None elsewhere).
    """
    scope = _world.current()
    if not callable(fcn):
        error = SpmdTypeError(f"spmd_reduce ({scope.who()}): 'fcn' must be callable "
                              f"(got {fcn!r} that is a {type(fcn).__name__})")
        fail_together("spmd_reduce", error)
    treedef, leaves = _pack.flatten(x)
    op = _known_op(fcn, treedef, leaves)
    if op is not None:
        return reduce_op("spmd_reduce", x, op, destination)
    name = getattr(fcn, "__qualname__", type(fcn).__qualname__)
    values = _gather("spmd_reduce", scope, x, treedef, leaves, destination,
                     ("reduce", name))
    if values is None:
        return None
    if all(type(l) is Leaf for l in leaves):
        fcn = _ELEMENTWISE.get(fcn, fcn)
    acc = values[0]
    for value in values[1:]:
        acc = fcn(acc, value)
    return acc


# MATLAB's max and min are element-wise; Python's are not defined on arrays.
_ELEMENTWISE = {max: np.maximum, min: np.minimum}


def spmd_cat(x, axis=0, destination=None):
    """Concatenation of the workers' ``x`` in worker order (MATLAB ``spmdCat``, ``gcat``).

    Collective: every worker must call this.

    Arrays and tensors are concatenated along ``axis`` (0-based, numpy's convention) and
    may differ in size along that axis only; scalars give a 1-D array ``[x1, ..., xN]``;
    dicts (MATLAB structs) and other picklable objects give a list with one entry per
    worker; lists and tuples are joined end to end. With ``destination`` the result is
    returned on that worker only (None elsewhere).
    """
    scope = _world.current()
    call = "spmd_cat"
    treedef, leaves = _pack.flatten(x)
    if treedef is None and type(leaves[0]) is Leaf:
        return _cat_arrays(call, scope, leaves[0], axis, destination)
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        error = SpmdTypeError(f"{call} ({scope.who()}): 'axis' must be an int "
                              f"(got {axis!r} that is a {type(axis).__name__})")
        fail_together(call, error)
    kind = treedef[0] if treedef is not None else "object"
    values = _gather(call, scope, x, treedef, leaves, destination, ("cat", kind))
    if values is None:
        return None
    if kind == "list":
        return [v for value in values for v in value]
    if kind == "tuple":
        return tuple(v for value in values for v in value)
    return values


def _cat_arrays(call, scope, leaf, axis, destination):
    ndim = len(leaf.shape)
    error = check_worker(call, scope, "destination", destination)
    if error is None and (isinstance(axis, bool) or not isinstance(axis, (int, np.integer))):
        error = SpmdTypeError(f"{call} ({scope.who()}): 'axis' must be an int "
                              f"(got {axis!r} that is a {type(axis).__name__})")
    if error is None and not -max(ndim, 1) <= axis < max(ndim, 1):
        error = SpmdValueError(
            f"{call} ({scope.who()}): axis {axis} is out of range for a value of "
            f"{ndim} dimensions ({_pack.describe_leaf(leaf)})")
    if error is not None:
        fail_together(call, error)
    axis = int(axis) % max(ndim, 1)
    other = leaf.shape[:axis] + leaf.shape[axis + 1:]
    length = leaf.shape[axis] if ndim else 1
    key = digest((call, "array", axis, destination, leaf.dtype.str, ndim, other))
    host = np.ascontiguousarray(leaf.host())
    nbytes = host.nbytes
    payload = host.tobytes() if nbytes <= INLINE else None
    ex, _, inline = agree(scope, call, key, exact=length, nbytes=nbytes, payload=payload,
                          describe=lambda: f"{call}({_pack.describe_leaf(leaf)}, axis={axis})")
    wanted = destination is None or destination == scope.index
    lengths = [ex.field(k, 1) for k in range(scope.size)]
    sizes = ex.sizes()
    if inline:
        if not wanted:
            return None
        buf = b"".join(bytes(ex.payload(k, sizes[k])) for k in range(scope.size))
        buf = np.frombuffer(buf, dtype=np.uint8).copy()
    else:
        buf = _gatherv(scope, host.reshape(-1).view(np.uint8), sizes, destination)
        if buf is None:
            return None
    return leaf.wrap(_assemble(buf, leaf.dtype, leaf.shape, axis, lengths))


def _assemble(buf, dtype, shape, axis, lengths):
    """The concatenation of per-worker C-ordered blocks held end to end in ``buf``."""
    data = buf.view(dtype)
    if not shape:
        return data
    if axis == 0:
        return data.reshape((sum(lengths),) + tuple(shape[1:]))
    pieces, offset = [], 0
    for n in lengths:
        piece_shape = shape[:axis] + (n,) + shape[axis + 1:]
        count = int(np.prod(piece_shape, dtype=np.int64))
        pieces.append(data[offset:offset + count].reshape(piece_shape))
        offset += count
    return np.concatenate(pieces, axis=axis)


def _gatherv(scope, send, sizes, destination):
    """Allgatherv (or Gatherv to ``destination``) of byte buffers of known sizes."""
    counts = np.asarray(sizes, dtype=np.int64)
    displs = np.zeros_like(counts)
    np.cumsum(counts[:-1], out=displs[1:])
    total = int(counts.sum())
    if destination is None:
        recv = np.empty(total, dtype=np.uint8)
        scope.comm.Allgatherv(send, [recv, (counts, displs), MPI.BYTE])
        return recv
    root = destination - 1
    if scope.rank == root:
        recv = np.empty(total, dtype=np.uint8)
        scope.comm.Gatherv(send, [recv, (counts, displs), MPI.BYTE], root=root)
        return recv
    scope.comm.Gatherv(send, None, root=root)
    return None


def _gather(call, scope, x, treedef, leaves, destination, what):
    """Every worker's value, in worker order, on every worker (or on ``destination``)."""
    error = check_worker(call, scope, "destination", destination)
    buf = None
    if error is None:
        try:
            buf = _pack.pack(treedef, leaves, f"{call} ({scope.who()})")
        except SpmdTypeError as exc:
            error = exc
    key = digest((call, what, destination))
    ex, _, _ = agree(scope, call, key, nbytes=0 if buf is None else buf.nbytes,
                     error=error, describe=lambda: _describe(call, treedef, leaves))
    sizes = ex.sizes()
    recv = _gatherv(scope, buf, sizes, destination)
    if recv is None:
        return None
    values, offset = [], 0
    for n in sizes:
        td, _, leaf_values = _pack.unpack(recv[offset:offset + n])
        values.append(_pack.unflatten(td, leaf_values))
        offset += n
    return values


def spmd_broadcast(source, x=None):
    """``x`` of worker ``source`` on every worker (MATLAB ``spmdBroadcast``, ``labBroadcast``).

    Collective: every worker must call this; ``x`` is ignored except on ``source``.
    Any picklable value; arrays and tensors move as raw bytes and come back in the
    source's family, dtype and device kind. Every worker, ``source`` included, gets
    a fresh copy.
    """
    scope = _world.current()
    call = "spmd_broadcast"
    error = check_worker(call, scope, "source", source, none_ok=False)
    buf = None
    if error is None and source == scope.index:
        try:
            treedef, leaves = _pack.flatten(x)
            buf = _pack.pack(treedef, leaves, f"{call} ({scope.who()})")
        except SpmdTypeError as exc:
            error = exc
    key = digest((call, source if error is None else None))
    ex, _, _ = agree(scope, call, key, nbytes=0 if buf is None else buf.nbytes,
                     error=error, describe=lambda: f"{call}(source={source!r})")
    if buf is None:
        buf = np.empty(ex.field(source - 1, 2), dtype=np.uint8)
    scope.comm.Bcast(buf, root=source - 1)
    td, _, values = _pack.unpack(buf)
    return _pack.unflatten(td, values)


def spmd_barrier():
    """Wait until every worker of the current scope reaches this call (``spmdBarrier``).

    Collective: every worker must call this.
    """
    scope = _world.current()
    agree(scope, "spmd_barrier", digest(("spmd_barrier",)),
          describe=lambda: "spmd_barrier()")
