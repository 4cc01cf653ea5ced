"""Collectives over the workers of the current scope.

Every collective has the same shape: validate locally, agree across workers (one
fixed-size record exchange that also carries small values, see ``_agree``), move the
data in one MPI call through the array-backend adapters, unpack into the input's family.
Collective: every worker of the current scope must make the same calls in the same order.
"""

from __future__ import annotations

import dis
import functools
import math
from typing import Any, Callable, Optional, TypeVar, overload

import numpy as np
from ._mpi import MPI

from . import _agree, _count, _ending, _pack, _reduce, _wait, _world
from ._agree import FLAG_INLINE, HEADER, agree, describe_call
from ._checks import check_worker, fail_together
from ._backends import Leaf
from ._ops import SUM
from ._pack import digest
from .errors import SpmdError, SpmdTypeError, SpmdValueError

__all__ = ["spmd_barrier", "spmd_broadcast", "spmd_cat", "spmd_index", "spmd_plus",
           "spmd_reduce", "spmd_size"]

T = TypeVar("T")


def spmd_index() -> int:
    """This worker's number, 1-based, within the current scope (MATLAB ``spmdIndex``).

    Examples
    --------
    Run as plain ``python`` this is worker 1 of 1; under ``mpiexec -n 4`` each process
    gets its own number, 1 to 4.

    >>> spmd_index()
    1

    MATLAB
    ------
    ``spmdIndex``, ``labindex``
    """
    return _world.here().index  # (the client of a pool: 1, as MATLAB's)


def spmd_size() -> int:
    """The number of workers in the current scope (MATLAB ``spmdSize``).

    Examples
    --------
    >>> spmd_size()
    1
    >>> [k for k in range(1, spmd_size() + 1)]   # every worker's number
    [1]

    MATLAB
    ------
    ``spmdSize``, ``numlabs``
    """
    return _world.here().size


# -- public reductions -------------------------------------------------------------------


@overload
def spmd_plus(x: T, destination: None = None) -> T: ...
@overload
def spmd_plus(x: T, destination: int) -> Optional[T]: ...


def spmd_plus(x: T, destination: Optional[int] = None) -> Optional[T]:
    """Element-wise sum of ``x`` over the workers (MATLAB ``spmdPlus``, ``gplus``).

    Collective: every worker must call this.

    ``x`` is a number, a numpy array or scalar, a torch tensor or CuPy array, or a
    dict / list / tuple of these; the result has the same structure, types, dtypes and
    devices, on every worker, or on worker ``destination`` only (None elsewhere).
    Raises SpmdMismatchError on every worker when shapes, dtypes or structures differ,
    SpmdTypeError when a value cannot be summed.

    Parameters
    ----------
    x
        This worker's value: a number, numpy array or scalar, torch tensor, CuPy array, or a
        dict / list / tuple of them. Every worker passes the same structure, shapes and dtypes.
    destination
        None: the result on every worker. A worker number (1-based): the result on that
        worker, None on the others.

    Examples
    --------
    At one worker the sum is the input itself; at N workers every worker gets the sum of
    the N values.

    >>> spmd_plus(np.array([1.0, 2.0]))
    array([1., 2.])
    >>> spmd_plus({"loss": 0.5, "count": 3}) == {"loss": 0.5, "count": 3}  # field by field
    True
    >>> print(spmd_plus(spmd_index(), destination=1))  # the sum on worker 1 only
    1

    MATLAB
    ------
    ``spmdPlus(X)``, ``spmdPlus(X, destination)``, ``gplus(X, targetlab)``
    """
    if destination is None:
        value: Any = x  # typed as T: a bound check on an int needs no call to cast
        kind = type(value)
        fast = _reduce.FAST_PLUS.get(kind)
        if fast is not None and (kind is not int or -2 ** 63 <= value < 2 ** 63):
            return _reduce.reduce_scalar(_world.current(), "spmd_plus", x, SUM, fast)
        if kind is np.ndarray:  # a small array: straight to its fast path
            scope = _world.current()
            entry = _reduce.array_entry(scope, "spmd_plus", SUM, value)
            if entry is not None:
                return _reduce.reduce_array(scope, "spmd_plus", value, SUM, entry)
    return _reduce.reduce_op("spmd_plus", x, SUM, destination)


@overload
def spmd_reduce(fcn: Callable[[Any, Any], Any], x: T, destination: None = None) -> T: ...
@overload
def spmd_reduce(fcn: Callable[[Any, Any], Any], x: T, destination: int) -> Optional[T]: ...


def spmd_reduce(fcn: Callable[[Any, Any], Any], x: T,
                destination: Optional[int] = None) -> Optional[T]:
    """``fcn`` folded over the workers' values in worker order (MATLAB ``spmdReduce``, ``gop``).

    Collective: every worker must call this.

    ``fcn(a, b)`` must be associative. Known functions (``operator.add``, ``max``,
    ``min``, ``operator.and_``, ``numpy.logical_or``, ``numpy.maximum``, ...) are folded
    element-wise on the raw buffers (still in worker order); any other function is
    applied to the workers' values, which may then be any picklable objects, in worker
    order. With ``destination`` the result is returned on that worker only (None
    elsewhere). If ``fcn`` raises on any worker, every worker raises SpmdError naming
    that worker and the function.

    Parameters
    ----------
    fcn
        ``fcn(a, b)``, associative; folded in worker order: ``fcn(fcn(x1, x2), x3) ...``
        (a known function among more than 4 workers: along the fixed tree of the
        execution model, ``fcn(fcn(fcn(x1, x2), x3), fcn(x4, x5))`` at 5 workers).
    x
        This worker's value (any picklable value for a function spmdlab does not know).
    destination
        None: the result on every worker. A worker number (1-based): the result on that
        worker, None on the others.

    Examples
    --------
    >>> import operator
    >>> spmd_reduce(operator.and_, True)      # "does every worker still have data?"
    True
    >>> spmd_reduce(max, np.array([3, 1, 2]))  # element-wise, as MATLAB's max
    array([3, 1, 2])
    >>> spmd_reduce(lambda a, b: a + "|" + b, f"w{spmd_index()}")  # any function, in order
    'w1'

    MATLAB
    ------
    ``spmdReduce(@fcn, X)``, ``spmdReduce(@fcn, X, destination)``, ``gop(@fcn, X)``
    """
    scope = _world.current()
    if not callable(fcn):
        error = SpmdTypeError(f"spmd_reduce ({scope.who()}): 'fcn' must be callable "
                              f"(got {fcn!r} that is a {type(fcn).__name__})")
        fail_together("spmd_reduce", error)
    treedef, leaves = _pack.flatten(x)
    op = _reduce.known_op(fcn, treedef, leaves)
    if op is not None:
        return _reduce.reduce_op("spmd_reduce", x, op, destination)
    name = getattr(fcn, "__qualname__", type(fcn).__qualname__)
    # (with a destination only its function folds: what the others read is no matter)
    code = _function_code(fcn, captured=destination is None)
    # a function spmdlab folds itself on other values is shown as that path shows it: a
    # worker whose value took that path (1 where this one passed True) then differs
    # from this one in its value's class, not in the function
    known = _reduce.known_name(fcn)
    values = _gather("spmd_reduce", scope, x, treedef, leaves, destination,
                     ("reduce", name) + code[1:],
                     fcn=known or (name if not code else f"{name} at {code[0]}"),
                     decode=False)
    acc: Any = None
    failed: Optional[SpmdError] = None
    if values is not None:
        try:  # (a value that cannot be made again here: every worker learns of it below)
            values = [_decoded("spmd_reduce", scope, buf, k + 1)
                      for k, buf in enumerate(values)]
        except SpmdTypeError as exc:
            values, failed = None, exc
    if values is not None:
        # (not on lists and tuples, where max and min keep Python's meaning and type)
        if all(type(l) is Leaf for l in leaves) and not _reduce._has_sequences(treedef):
            fcn = _ELEMENTWISE.get(fcn, fcn)
        try:
            acc = values[0]
            for value in values[1:]:
                acc = fcn(acc, value)
        except Exception as exc:  # every worker learns of it below
            failed = SpmdError(f"spmd_reduce ({scope.who()}): the reduction function "
                               f"{name} raised {type(exc).__name__}: {exc}")
            failed.__cause__ = exc
    # The function may fail on some workers only (it may depend on the worker): agree on
    # the outcome so that every worker raises or none does. Every worker folded the same
    # values in the same order, so a plain result (a number, a string, a small array)
    # that differs comes from a function that reads something of the worker's own as it
    # runs (spmd_index(), random numbers): compared too, else each keeps its own answer.
    result = _plain_key(acc) if values is not None and destination is None and \
        failed is None else None
    agree(scope, "spmd_reduce", digest(("spmd_reduce", "folded", name, result)),
          error=failed, describe=lambda: _folded(name, acc, result))
    return acc


def _folded(name, acc, result):
    """The Description of a fold's result for a mismatch message (an array's contents by
    their digest where they are larger than a few elements)."""
    if result is None:
        return f"spmd_reduce({name}, ...)"
    if isinstance(acc, np.ndarray) and acc.size > 8:
        text = f"<array {acc.dtype} {acc.shape}, contents {result[2][:8]}>"
    else:
        text = repr(acc)
        text = text if len(text) <= 60 else text[:57] + "..."
    return _agree.Description(
        f"spmd_reduce({name}) gave {text}", call="spmd_reduce", result=text,
        how="the reduction function gave the workers different results from the same "
            "values (it reads something of each worker's own as it runs, such as "
            "spmd_index() or random numbers)")


def _function_code(fcn, captured=True):
    """(where a Python function is defined, with the values it reads that differ from
    worker to worker, a digest of its code and of those values), or () for another
    callable: two workers passing different lambdas (the same name, ``<lambda>``) to
    ``spmd_reduce`` would each fold with its own and get different answers; their
    code tells them apart (the same program's function has the same code everywhere),
    and so do the plain values it reads besides its arguments (``lambda a, b: a + w * b``
    with a ``w`` of each worker's own: see ``_captured``; not with ``captured`` False,
    where one worker alone folds)."""
    bound = []
    while isinstance(fcn, functools.partial):  # (the values it binds are read, too)
        bound += [(f"args[{i}]", v) for i, v in enumerate(fcn.args)]
        bound += list(fcn.keywords.items())
        fcn = fcn.func
    function = getattr(fcn, "__func__", fcn)
    code = getattr(function, "__code__", None)
    if code is None:
        return ()
    where = f"{code.co_filename.rsplit('/', 1)[-1]}:{code.co_firstlineno}"
    column = next((c for _, _, c, _ in getattr(code, "co_positions", list)()
                   if c), None)  # (two lambdas on one line: where each body starts)
    if column is not None and code.co_name == "<lambda>":
        where += f":{column + 1}"
    captured = _captured(function, code, bound) if captured else ()
    if captured:
        where += " with " + ", ".join(f"{name}={text}" for name, text, _ in captured)
    return where, digest((_code_parts(code), tuple(key for _, _, key in captured)))


def _captured(function, code, bound=()):
    """``(name, short text, key)`` of each plain value ``function`` reads besides its
    arguments: ``bound`` (a functools.partial's), its closure's variables, its defaults
    and the module globals its code names (numbers, strings, None, small arrays, tuples
    and lists of them; other objects are not compared). The key is the same text on
    every worker that holds the same value."""
    found = list(bound)
    cells = getattr(function, "__closure__", None) or ()
    for name, cell in zip(code.co_freevars, cells):
        try:
            found.append((name, cell.cell_contents))
        except ValueError:  # (a cell not filled yet)
            pass
    defaults = getattr(function, "__defaults__", None) or ()
    names = code.co_varnames[:code.co_argcount]
    found.extend(zip(names[len(names) - len(defaults):], defaults))
    found.extend((getattr(function, "__kwdefaults__", None) or {}).items())
    space = getattr(function, "__globals__", {})
    found.extend((name, space[name]) for name in _global_names(code) if name in space)
    out = []
    for name, value in found:
        key = _plain_key(value)
        if key is not None:
            text = repr(value) if not isinstance(value, np.ndarray) else \
                f"array of {value.dtype} {value.shape}"
            out.append((name, text if len(text) <= 40 else text[:37] + "...", key))
    return out


@functools.lru_cache(maxsize=256)
def _global_names(code):
    """The global names a code object (and the code objects inside it) looks up: not
    all of ``co_names``, which also holds the attributes it reads (``a.start`` is not
    a module global ``start``)."""
    names = {i.argval for i in dis.get_instructions(code)
             if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for c in code.co_consts:
        if hasattr(c, "co_code"):
            names.update(_global_names(c))
    return tuple(sorted(names))


_PLAIN = (bool, int, float, complex, str, bytes, type(None), np.generic)


def _plain_key(value, depth=0):
    """A value's text for ``_captured``, or None for an object not compared."""
    if isinstance(value, _PLAIN):
        return repr(value) if not isinstance(value, np.generic) else \
            (value.dtype.str, repr(value.item()))
    if isinstance(value, np.ndarray) and not value.dtype.hasobject and \
            value.nbytes <= 1 << 16:  # (its bytes hashed here: not kept in digest's cache)
        return value.dtype.str, value.shape, _pack.content_digest(
            np.ascontiguousarray(value).tobytes())
    if isinstance(value, (tuple, list)) and len(value) <= 64 and depth < 4:
        keys = []
        for v in value:  # (the first object not compared ends it: a list holding itself)
            key = _plain_key(v, depth + 1)
            if key is None:
                return None
            keys.append(key)
        return type(value).__name__, tuple(keys)
    return None


def _code_parts(code):
    return (code.co_code, code.co_names, tuple(_const(c) for c in code.co_consts))


def _const(c):
    """A constant of a code object as the same text in every process (a nested code
    object by its parts, a frozenset's members sorted: their order follows the string
    hashes, which differ from one process to another)."""
    if hasattr(c, "co_code"):
        return _code_parts(c)
    if isinstance(c, frozenset):
        return ("frozenset", tuple(sorted(repr(m) for m in c)))
    if isinstance(c, tuple):
        return tuple(_const(m) for m in c)
    return repr(c)


# MATLAB's max and min are element-wise; Python's are not defined on arrays.
_ELEMENTWISE: dict[Any, Any] = {max: np.maximum, min: np.minimum}


def spmd_cat(x: Any, axis: int = 0, destination: Optional[int] = None) -> Any:
    """Concatenation of the workers' ``x`` in worker order (MATLAB ``spmdCat``, ``gcat``).

    Collective: every worker must call this.

    Arrays and tensors are concatenated along ``axis`` (0-based, numpy's convention) and
    may differ in size along that axis only; scalars give a 1-D array ``[x1, ..., xN]``;
    dicts (MATLAB structs) and other picklable objects give a list with one entry per
    worker; lists and tuples are joined end to end. With ``destination`` the result is
    returned on that worker only (None elsewhere).

    Parameters
    ----------
    x
        This worker's value: an array or tensor (sizes may differ along ``axis`` only), a
        scalar, a dict, a list or tuple, or any picklable object.
    axis
        The axis to join arrays along, 0-based as numpy's (MATLAB's ``dim`` minus 1).
    destination
        None: the result on every worker. A worker number (1-based): the result on that
        worker, None on the others.

    Examples
    --------
    >>> spmd_cat(spmd_index())                 # scalars give [1, 2, ..., N]
    array([1])
    >>> spmd_cat(np.ones((2, 3)), axis=1).shape
    (2, 3)
    >>> spmd_cat({"has_data": True})           # structs give one dict per worker
    [{'has_data': True}]

    MATLAB
    ------
    ``spmdCat(X, dim)`` (``axis = dim - 1``), ``gcat(X, dim, targetlab)``
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
    plain = type(axis) is int and (destination is None or type(destination) is int)
    known = (call, leaf.dtype, leaf.shape, axis, destination, scope.size)
    checked = _CAT_CHECKED.get(known) if plain else None
    if checked is None:
        checked = _cat_check(call, scope, leaf, axis, destination)
        if plain:
            if len(_CAT_CHECKED) > 256:
                _CAT_CHECKED.clear()
            _CAT_CHECKED[known] = checked
    axis, key, length, other = checked
    host = np.ascontiguousarray(leaf.host())
    nbytes = host.nbytes
    ex = scope.exchange

    def describe():
        return describe_call(call, _pack.describe_leaf(leaf), {
            "dtype": _pack.dtype_name(leaf.dtype), "dimensions": str(len(leaf.shape)),
            "sizes outside axis": str(other)}, axis=axis, destination=destination)

    if nbytes <= ex.inline and not (ex.tree or _agree.HOOKED or _world.listener_running
                                    or ex.request is None):
        # the common case written out, as spmd_broadcast's: the record agree writes, one
        # MPI call, the full check only when a worker's key or flags differ (a worker
        # whose value did not fit its record, or a mismatch: raised on every worker)
        ex.sendview[HEADER:HEADER + nbytes] = host.tobytes()
        same, inline = ex.plain(scope, call, key, length, nbytes, FLAG_INLINE, describe)
        # equal lengths everywhere as well (equal keys already mean equal dtypes and
        # sizes outside the axis): every worker's bytes in one copy of the records
        same = same and inline
    else:
        payload = host.tobytes() if nbytes <= ex.inline else None
        ex, _, inline = agree(scope, call, key, exact=length, nbytes=nbytes,
                              payload=payload, describe=describe)
        same = False
    wanted = destination is None or destination == scope.index
    sizes = None if same else ex.sizes()
    if inline:
        if not wanted:
            return None
        if same or min(sizes) == max(sizes):  # as many bytes from every worker: one copy
            buf = ex.inline_rows[:, :nbytes].copy().reshape(-1)
        else:
            buf = np.empty(sum(sizes), dtype=np.uint8)
            start = 0
            for k, size in enumerate(sizes):  # each worker's bytes, end to end
                buf[start:start + size] = ex.payload(k, size)
                start += size
    else:
        buf = _gatherv(call, scope, host.reshape(-1).view(np.uint8), sizes, destination)
        if buf is None:
            return None
    shape = leaf.shape
    if not shape:  # numbers: one 1-D array of them
        result = buf.view(leaf.dtype)
    elif axis == 0 and 0 not in shape[1:]:  # blocks follow each other: one reshape
        result = buf.view(leaf.dtype).reshape((-1,) + tuple(shape[1:]))
    else:
        lengths = [ex.field(k, 1) for k in range(scope.size)]
        result = _assemble(buf, leaf.dtype, shape, axis, lengths)
    return leaf.wrap(result)


# (call, dtype, shape, axis, destination, workers) -> what _cat_check made of them: a
# loop of spmd_cat (or of a darray call that concatenates) checks its arguments and
# works out its key once
_CAT_CHECKED: dict = {}


def _cat_check(call, scope, leaf, axis, destination):
    """``spmd_cat``'s arguments checked (an error raised on every worker), and what the
    call needs from them: (axis, agreement key, length along the axis, other sizes)."""
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
    key = digest((call, "array", axis, destination, _pack.dtype_key(leaf.dtype), ndim,
                  other))
    return axis, key, length, other


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
        count = math.prod(piece_shape)
        pieces.append(data[offset:offset + count].reshape(piece_shape))
        offset += count
    # (dtype: numpy's concatenation gives a byte-swapped dtype in the machine's order)
    return np.concatenate(pieces, axis=axis, dtype=dtype)


def _gatherv(call, scope, send, sizes, destination):
    """Allgatherv (or Gatherv to ``destination``) of byte buffers of known sizes."""
    counts = np.asarray(sizes, dtype=np.int64)
    displs = np.zeros_like(counts)
    np.cumsum(counts[:-1], out=displs[1:])
    total = int(counts.sum())
    recv = None
    try:  # the sizes are known only now, after the agreement
        if destination is None:
            recv = np.empty(total, dtype=np.uint8)
            request = scope.comm.Iallgatherv(send, [recv, (counts, displs), MPI.BYTE])
        elif scope.rank == destination - 1:
            recv = np.empty(total, dtype=np.uint8)
            request = scope.comm.Igatherv(send, [recv, (counts, displs), MPI.BYTE],
                                          root=destination - 1)
        else:
            request = scope.comm.Igatherv(send, None, root=destination - 1)
    except Exception:
        _ending.end_committed(scope, call)
    if _count.ON:  # the others' bytes, in MPI's recursive doubling (to one: its tree)
        own = int(counts[scope.rank])
        others = total - own if recv is not None else 0
        _count.collective(own if destination is not None else total - own, others,
                          _count.steps(scope.size))
    _wait.wait(request, scope, call, keep=(send, recv))
    return recv


def gather(call, x):
    """Collective: every worker's ``x`` (any picklable value), in worker order, on every
    worker; errors are reported as ``call``'s."""
    scope = _world.current()
    treedef, leaves = _pack.flatten(x)
    return _gather(call, scope, x, treedef, leaves, None, ("gather",))


def _out_of_memory(call, scope, exc):
    """The MemoryError of packing this worker's value, led by the call and the worker: it
    comes before the agreement, which then raises it on every worker (alone, it left the
    others waiting in the call, or pairing it with this worker's next one)."""
    error = MemoryError(f"{call} ({scope.who()}): out of memory while packing the value "
                        f"to send: {exc}")
    error.__cause__ = exc
    return error


def _fields(treedef, leaves, what, fcn):
    """What a mismatch of a gather compares: the call's kind; for a reduction (``fcn``,
    compared apart) its value's class, as the reductions spmdlab folds itself compare
    it (a worker on that path beside one on this path differs from it in its value)."""
    return {"kind": repr(what)} if fcn is None else _pack.value_fields(treedef, leaves)


def _gather(call, scope, x, treedef, leaves, destination, what, fcn=None, decode=True):
    """Every worker's value, in worker order, on every worker (or on ``destination``);
    ``fcn``: the reduction function a mismatch names; not ``decode``: each value's
    bytes, for the caller to decode (``_decoded``)."""
    error = check_worker(call, scope, "destination", destination)
    buf = None
    if error is None:
        try:
            buf = _pack.encode(x, f"{call} ({scope.who()})")
        except SpmdTypeError as exc:
            error = exc
        except MemoryError as exc:  # before the agreement: raised on every worker
            error = _out_of_memory(call, scope, exc)
    # (a bad destination, a list or an array, may be unhashable: an error agrees as None)
    key = digest((call, what, destination if error is None else None))
    ex, _, _ = agree(scope, call, key, nbytes=0 if buf is None else len(buf),
                     error=error,
                     describe=lambda: describe_call(
                         call, _pack.describe(treedef, leaves), _fields(treedef, leaves, what,
                                                                       fcn),
                         destination=destination, **({} if fcn is None else {"fcn": fcn})))
    sizes = ex.sizes()
    recv = _gatherv(call, scope, buf, sizes, destination)
    if recv is None:
        return None
    values, offset = [], 0
    for k, n in enumerate(sizes):
        buf = recv[offset:offset + n]
        values.append(_decoded(call, scope, buf, k + 1) if decode else buf)
        offset += n
    return values


def _decoded(call, scope, buf, worker):
    """Worker ``worker``'s value (``buf``) made again here. One that cannot be (a class
    this worker cannot import, a ``__setstate__`` that fails) raises SpmdTypeError
    naming the call, this worker and that worker, as a point-to-point message does (it
    raised the unpickler's bare error, which named neither)."""
    try:
        return _pack.decode(buf)
    except Exception as exc:
        raise SpmdTypeError(
            f"{call} ({scope.who()}): the value of worker {worker} cannot be unpickled "
            f"here: {type(exc).__name__}: {exc}") from exc


def spmd_broadcast(source: int, x: Any = None) -> Any:
    """``x`` of worker ``source`` on every worker (MATLAB ``spmdBroadcast``, ``labBroadcast``).

    Collective: every worker must call this; ``x`` is ignored except on ``source``.
    Any picklable value; arrays and tensors move as raw bytes and come back in the
    source's family, dtype and device kind. Every worker, ``source`` included, gets
    a fresh copy.

    Parameters
    ----------
    source
        The worker (1-based) whose ``x`` every worker gets.
    x
        The value, on ``source``; ignored (may be omitted) elsewhere.

    Examples
    --------
    >>> settings = {"lr": 0.1} if spmd_index() == 1 else None
    >>> spmd_broadcast(1, settings)           # worker 1's value, on every worker
    {'lr': 0.1}

    MATLAB
    ------
    ``spmdBroadcast(source, X)``, ``labBroadcast(source, X)``
    """
    return broadcast("spmd_broadcast", source, x)


def broadcast(call, source, x, name="source"):
    """``spmd_broadcast`` for a caller that reports its errors as ``call`` (``Composite``
    indexing), with the worker-number argument called ``name`` in its messages."""
    scope = _world.current()
    error = None if type(source) is int and 0 < source <= scope.size else \
        check_worker(call, scope, name, source, none_ok=False)
    buf = None
    if error is None and source == scope.index:
        try:
            buf = _pack.encode(x, lambda: f"{call} ({scope.who()})")
        except SpmdTypeError as exc:
            error = exc
        except MemoryError as exc:  # before the agreement: raised on every worker
            error = _out_of_memory(call, scope, exc)
    key = digest((call, source if error is None else None))
    ex = scope.exchange
    inline = buf is not None and len(buf) <= ex.inline
    describe = lambda: describe_call(call, **{name: source})  # noqa: E731
    if error is None and not (ex.tree or _agree.HOOKED or _world.listener_running or
                              ex.request is None):
        # the common case written out: the record agree writes, one MPI call, and the
        # full check only when a worker's key or error flag says something is wrong
        # (the source's record alone carries the value: the flags differ by design)
        if inline:
            ex.sendview[HEADER:HEADER + len(buf)] = memoryview(buf).cast("B")
        ex.plain(scope, call, key, 0, 0 if buf is None else len(buf),
                 FLAG_INLINE if inline else 0, describe, same_flags=False)
    else:
        ex, _, _ = agree(scope, call, key, nbytes=0 if buf is None else len(buf),
                         payload=memoryview(buf).cast("B") if inline else None,
                         error=error, describe=describe)
    if not ex.tree and ex.field(source - 1, 3) & FLAG_INLINE:  # it rode in the record
        payload = bytearray(ex.payload(source - 1, ex.field(source - 1, 2)))
        return _decoded(call, scope, payload, source)
    try:
        if buf is None:  # its size is known only now, after the agreement (the source's
            # is the only one not 0: the largest, in a tree's merged record)
            size = ex.largest_nbytes() if ex.tree else ex.field(source - 1, 2)
            buf = np.empty(size, dtype=np.uint8)
        elif isinstance(buf, bytes):  # MPI writes into every worker's buffer
            buf = bytearray(buf)
        request = scope.comm.Ibcast(buf, root=source - 1)
    except Exception:
        _ending.end_committed(scope, call)
    _wait.wait(request, scope, call, keep=buf)
    return _decoded(call, scope, buf, source)


def spmd_barrier() -> None:
    """Wait until every worker of the current scope reaches this call (``spmdBarrier``).

    Collective: every worker must call this.

    Examples
    --------
    >>> spmd_barrier()   # returns once every worker has reached it

    MATLAB
    ------
    ``spmdBarrier``, ``labBarrier``
    """
    scope = _world.current()
    agree(scope, "spmd_barrier", digest(("spmd_barrier",)),
          describe=lambda: "spmd_barrier()")
