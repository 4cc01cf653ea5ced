"""Making codistributed arrays: from an array every worker holds, from one worker's
array, from every worker's local part, and from a shape (zeros, ones, rand, eye, ...).

Only ``from_local`` (which checks that the parts fit, unless told not to) and
``distribute(x, source=k)`` (which scatters) communicate; the rest compute each
worker's block from the shape.
"""

from __future__ import annotations

import importlib
from typing import Any, Optional

import numpy as np

from .. import _pack, _world
from .._agree import agree, describe_call
from .._backends import LOCAL, local_family
from .._checks import check_worker
from ..collectives import broadcast
from ..errors import SpmdError, SpmdTypeError, SpmdValueError
from . import _exchange
from ._array import CodistributedArray
from ._codistributor import (Codistributor, axis_of, check_shape, default_partition, error,
                             named_axis, offsets)

Like = Any


def as_local(call, x):
    """``x`` as an array of a family that can be a local part (lists become numpy)."""
    if isinstance(x, CodistributedArray):
        raise error(SpmdTypeError, call, "the value is codistributed already; use "
                    ".redistribute() to split it another way")
    if local_family(x) is None:
        if hasattr(x, "__cuda_array_interface__") or type(x).__module__.startswith("torch"):
            raise error(SpmdTypeError, call, f"cannot use a {type(x).__name__} as a local "
                        f"part")
        try:
            x = np.asarray(x)
        except Exception:
            x = None
        if x is None or x.dtype.hasobject:
            raise error(SpmdTypeError, call, "the value must be a numpy array, a torch "
                        "tensor, a CuPy array or numbers (not objects)")
    return x


def resolve(cls, call, codistributor, axis, shape):
    """The complete codistributor for an array of ``shape`` from what the caller gave."""
    if codistributor is not None and axis is not None:
        raise error(SpmdTypeError, call, "give a codistributor or an axis, not both")
    if codistributor is None:
        codistributor = Codistributor(axis_of(call, axis, len(shape)))
    elif not isinstance(codistributor, Codistributor):
        raise error(SpmdTypeError, call, f"'codistributor' must be a Codistributor (got "
                    f"{codistributor!r} that is a {type(codistributor).__name__})")
    return codistributor.complete(shape, default_axis=cls._default_axis, call=call)


def block(x, codist):
    """This worker's block of ``x`` (the whole array) under ``codist``."""
    r = codist.global_indices()
    return x[(slice(None),) * codist.axis + (slice(r.start, r.stop),)]


# -- from arrays ----------------------------------------------------------------------------


def distribute(x: Any, codistributor: Optional[Codistributor] = None, *,
               axis: Optional[int] = None, source: Optional[int] = None
               ) -> CodistributedArray:
    """A codistributed array from ``x``, an array every worker holds whole (or, with
    ``source=k``, that worker ``k`` holds; the others' ``x`` is ignored).

    Without ``source`` nothing is communicated: each worker keeps a copy of its block,
    so ``x`` must be the same on every worker (a later collective names the workers
    whose shapes differ). With ``source`` it is collective: worker ``k`` scatters.
    Split along ``axis`` (default 0) by the default partition, or by ``codistributor``.

    Parameters
    ----------
    x
        The whole array: numpy, torch (CPU or CUDA) or CuPy, or numbers; the local parts
        keep its family, dtype and device.
    codistributor
        How to split it (a ``Codistributor``; what it leaves out is filled in).
    axis
        The distribution axis (0-based), instead of a codistributor.
    source
        The worker (1-based) that holds ``x``; None: every worker does.

    Examples
    --------
    >>> D = distribute(np.arange(10.0))
    >>> D.partition, D.local[:3]            # at 4 workers: (3, 3, 2, 2), each its block
    ((10,), array([0., 1., 2.]))
    >>> distribute(np.ones((4, 6)), axis=1).local.shape
    (4, 6)

    MATLAB
    ------
    ``codistributed(X)``, ``codistributed(X, codist)``, ``codistributed(X, lab)``
    """
    return distribute_as(CodistributedArray, x, codistributor, axis, source)


def distribute_as(cls, x, codistributor=None, axis=None, source=None, call="distribute"):
    """``distribute`` making an array of class ``cls`` (MATLAB's classes use it, with
    their own name for ``call``)."""
    if source is not None:
        return _scatter(cls, call, x, codistributor, axis, source)
    x = as_local(call, x)
    codist = resolve(cls, call, codistributor, axis, tuple(x.shape))
    local = LOCAL[local_family(x)].copy(block(x, codist))
    return cls._make(local, codist, _world.current())


def _scatter(cls, call, x, codistributor, axis, source):
    scope = _world.current()
    err = check_worker(call, scope, "source", source, none_ok=False)
    meta = None
    if err is None and scope.index == source:
        try:
            x = as_local(call, x)
            family = local_family(x)
            dtype = LOCAL[family].dtype(x)  # (bfloat16's stand-in is a structured
            # dtype, whose .str, "|V2", would arrive as plain bytes: its fields go)
            meta = (tuple(x.shape), dtype.str if dtype.fields is None else dtype.descr,
                    family, getattr(x, "is_cuda", False) or family == "cupy")
        except SpmdError as exc:
            err = exc
    if err is not None:
        agree(scope, call, 0, error=err)
    meta = broadcast(call, source, meta)
    shape, dtype, family, on_gpu = meta
    codist, err = None, None
    try:
        codist = resolve(cls, call, codistributor, axis, shape)
    except SpmdError as exc:
        err = exc
    agree(scope, call, _pack.digest((call, None if err else
                                     (codist.axis, codist.partition))), error=err,
          describe=lambda: describe_call(call, codistributor=codist, source=source))
    if scope.index != source:
        like = _like_of(family, on_gpu)
        x = LOCAL[family].empty(shape[:codist.axis] + (0,) + shape[codist.axis + 1:],
                                np.dtype(dtype), like)
    n = shape[codist.axis]
    src = _exchange.blocks(codist.axis, [(0, n) if k == source - 1 else (0, 0)
                                         for k in range(scope.size)], shape)
    local = _exchange.exchange(scope, call, x, shape, src, _exchange.codist_blocks(codist))
    return cls._make(local, codist, scope)


def _like_of(family, on_gpu):
    """An empty array of ``family`` on this worker's device (its current GPU if the
    source's value was on a GPU)."""
    if family == "torch":
        import torch

        return torch.empty(0, device="cuda" if on_gpu else "cpu")
    if family == "cupy":
        return importlib.import_module("cupy").empty(0)
    return np.empty(0)


def from_local(local: Any, codistributor: Optional[Codistributor] = None, *,
               axis: Optional[int] = None, check: bool = True) -> CodistributedArray:
    """A codistributed array from every worker's local part: the parts, joined along the
    distribution axis in worker order, are the global array.

    Collective (one small exchange): the parts must fit together, the same dtype and
    family everywhere and the same size along every other axis; with a complete
    ``codistributor`` each part must have the shape it gives that worker. Any worker
    whose part does not fit makes every worker raise. ``check=False`` (MATLAB's
    ``"noCommunication"``) needs a complete codistributor and checks this worker's part
    only, without communicating.

    Parameters
    ----------
    local
        This worker's part (numpy, torch or CuPy); its family, dtype and device are kept.
    codistributor
        How the global array is split; without one (or without its shape or partition)
        they are learnt from the parts' sizes along ``axis``.
    axis
        The distribution axis (default 0), instead of a codistributor.
    check
        False: no communication (a complete codistributor is needed).

    Examples
    --------
    >>> k = spmd_index()
    >>> D = from_local(np.full((2, 3), float(k)))   # worker k holds rows 2k-1, 2k
    >>> D.shape                                     # at 4 workers: (8, 3)
    (2, 3)

    MATLAB
    ------
    ``codistributed.build(L, codist)``, ``codistributed.build(L, codist, "noCommunication")``
    """
    return from_local_as(CodistributedArray, local, codistributor, axis, check)


def from_local_as(cls, local, codistributor=None, axis=None, check=True, call="from_local"):
    """``from_local`` making an array of class ``cls`` (errors name ``call``)."""
    scope = _world.current()
    negative = None  # a negative axis counts from the end of the parts' dimensions
    try:
        local = as_local(call, local)
        if codistributor is not None and axis is not None:
            raise error(SpmdTypeError, call, "give a codistributor or an axis, not both")
        if codistributor is None:
            if isinstance(axis, (int, np.integer)) and not isinstance(axis, bool) and \
                    axis < 0:
                negative, axis = int(axis), None
            codistributor = Codistributor(0 if axis is None else axis)
        if not isinstance(codistributor, Codistributor):
            raise error(SpmdTypeError, call, f"'codistributor' must be a Codistributor "
                        f"(got {codistributor!r} that is a {type(codistributor).__name__})")
    except SpmdError as exc:
        if check:  # collective: the other workers, waiting in its exchange, raise too
            agree(scope, call, 0, error=exc)
        raise
    family = local_family(local)
    dtype = LOCAL[family].dtype(local)
    shape = tuple(local.shape)
    if codistributor.shape is not None and codistributor.partition is not None or \
            not check:
        return _from_complete(cls, call, scope, local, codistributor, family, dtype, check)
    # learn the partition (and the shape) from every worker's size along the axis
    if negative is not None:
        ax = negative
    elif codistributor.axis is not None:
        ax = codistributor.axis
    else:
        ax = cls._default_axis(codistributor.shape or shape)
    err = None
    if not -len(shape) <= ax < len(shape) or not shape:
        where = named_axis(call, ax) if ax >= 0 else f"axis {ax}"
        err = error(SpmdValueError, call, f"the distribution {where} is beyond a local "
                    f"part of shape {shape}")
    else:
        ax %= len(shape)
    other = None if err else shape[:ax] + shape[ax + 1:]
    key = _pack.digest((call, ax, other, _pack.dtype_key(dtype), family))
    ex, _, _ = agree(scope, call, key, exact=0 if err else shape[ax], error=err,
                     describe=lambda: describe_call(
                         call, f"{dtype} {shape} {family}",
                         {"dtype": str(dtype), "family": family,
                          "sizes outside the axis": str(other)}, axis=ax))
    # every worker has every size now: what follows raises the same on every worker
    partition = tuple(int(ex.field(k, 1)) for k in range(scope.size))
    global_shape = shape[:ax] + (sum(partition),) + shape[ax + 1:]
    if codistributor.shape is not None and codistributor.shape != global_shape:
        raise error(SpmdValueError, call, f"the local parts make an array of shape "
                    f"{global_shape}, but the codistributor's shape is "
                    f"{codistributor.shape}")
    given = codistributor.partition
    codist = Codistributor(ax, partition if given is None else given).complete(
        global_shape, call=call)
    if codist.partition != partition:
        raise error(SpmdValueError, call, f"the local parts hold {list(partition)} along "
                    f"{named_axis(call, ax)}, but the codistributor's partition is "
                    f"{list(codist.partition)}")
    return cls._make(local, codist, scope)


def _from_complete(cls, call, scope, local, codistributor, family, dtype, check):
    err, codist = None, None
    try:
        codist = codistributor.complete(codistributor.shape, default_axis=cls._default_axis,
                                        call=call)
        expected = codist.local_shape()
        if tuple(local.shape) != expected:
            raise error(SpmdValueError, call, f"the local part has shape "
                        f"{tuple(local.shape)}, the codistributor gives this worker "
                        f"{expected} (global shape {codist.shape}, "
                        f"{named_axis(call, codist.axis)}, "
                        f"partition {list(codist.partition)})")
    except SpmdError as exc:
        err = exc
    if not check:
        if err is not None:
            raise err
        return cls._make(local, codist, scope)
    key = _pack.digest((call, None if codist is None else
                        (codist.axis, codist.partition, codist.shape),
                        _pack.dtype_key(dtype), family))
    agree(scope, call, key, error=err, describe=lambda: describe_call(
        call, f"{dtype} {tuple(local.shape)} {family}",
        {"dtype": str(dtype), "family": family}, codistributor=codist))
    return cls._make(local, codist, scope)


# -- from a shape -------------------------------------------------------------------------------


def _made(cls, call, shape, codistributor, axis, like, dtype, fill):
    shape = check_shape(call, shape)
    codist = resolve(cls, call, codistributor, axis, shape)
    if isinstance(like, CodistributedArray):
        like = like.local
    family = "numpy" if like is None else local_family(like)
    if family is None:
        raise error(SpmdTypeError, call, f"'like' must be a numpy array, torch tensor or "
                    f"CuPy array (got a {type(like).__name__})")
    ops = LOCAL[family]
    if dtype is None:
        dtype = np.float64 if like is None else ops.dtype(like)
    local = fill(ops, codist, _numpy_dtype(call, dtype),
                 like if like is not None else np.empty(0))
    return cls._make(local, codist, _world.current())


def _numpy_dtype(call, dtype):
    """``dtype`` (numpy's, or a torch dtype) as a numpy dtype; SpmdTypeError naming
    ``call`` when it is none."""
    if type(dtype).__module__ == "torch":
        import torch

        try:
            return np.dtype(torch.empty(0, dtype=dtype).numpy().dtype)
        except (TypeError, RuntimeError) as exc:
            raise error(SpmdTypeError, call, f"the torch dtype {dtype} has no numpy "
                        f"dtype ({exc})") from exc
    try:
        return np.dtype(dtype)
    except TypeError as exc:
        raise error(SpmdTypeError, call, f"'dtype' {dtype!r} is not a data type: "
                    f"{exc}") from exc


def zeros(shape: Any, dtype: Any = None, *, codistributor: Optional[Codistributor] = None,
          axis: Optional[int] = None, like: Like = None) -> CodistributedArray:
    """A codistributed array of zeros (no communication).

    ``shape`` is the global shape; ``dtype`` defaults to float64 (or ``like``'s);
    ``like`` (an array or tensor, or a codistributed array) gives the family and device
    of the local parts; ``axis`` (default 0) or ``codistributor`` how it is split.

    Examples
    --------
    >>> zeros((4, 6), axis=1).local.shape
    (4, 6)

    MATLAB
    ------
    ``codistributed.zeros(m, n)``, ``zeros(m, n, codist)``, ``zeros(n, "codistributed")``
    """
    return _made(CodistributedArray, "zeros", shape, codistributor, axis, like, dtype,
                 lambda ops, c, d, lk: ops.full(c.local_shape(), 0, d, lk))


def ones(shape: Any, dtype: Any = None, *, codistributor: Optional[Codistributor] = None,
         axis: Optional[int] = None, like: Like = None) -> CodistributedArray:
    """A codistributed array of ones (no communication); arguments as ``zeros``.

    Examples
    --------
    >>> float(ones(5).sum())
    5.0

    MATLAB
    ------
    ``codistributed.ones(n)``, ``ones(n, "codistributed")``
    """
    return _made(CodistributedArray, "ones", shape, codistributor, axis, like, dtype,
                 lambda ops, c, d, lk: ops.full(c.local_shape(), 1, d, lk))


def full(shape: Any, fill_value: Any, dtype: Any = None, *,
         codistributor: Optional[Codistributor] = None, axis: Optional[int] = None,
         like: Like = None) -> CodistributedArray:
    """A codistributed array of ``fill_value`` (no communication); as ``zeros``, the
    dtype defaulting to ``fill_value``'s.

    Examples
    --------
    >>> full(3, 7).local
    array([7, 7, 7])

    MATLAB
    ------
    ``codistributed.Inf(n)``, ``codistributed.NaN(n)``, ``x * codistributed.ones(n)``
    """
    if dtype is None and like is None:
        dtype = np.asarray(fill_value).dtype
    if np.ndim(fill_value) == 0:
        return _made(CodistributedArray, "full", shape, codistributor, axis, like, dtype,
                     lambda ops, c, d, lk: ops.full(c.local_shape(), fill_value, d, lk))
    # an array fills as numpy's full broadcasts it: to the global shape, each worker then
    # taking its own piece (not broadcast to the local part: right or wrong by the layout)
    shape = check_shape("full", shape)
    try:
        whole = np.broadcast_to(np.asarray(fill_value), shape)
    except ValueError:
        raise error(SpmdValueError, "full", f"'fill_value' of shape "
                    f"{np.shape(fill_value)} cannot be broadcast to the shape "
                    f"{shape}") from None

    def fill(ops, codist, dtype, like):
        r = codist.global_indices()
        values = np.array(whole[(slice(None),) * codist.axis + (slice(r.start, r.stop),)],
                          dtype=dtype)
        return values if ops is LOCAL["numpy"] else ops.like(values, like)

    return _made(CodistributedArray, "full", shape, codistributor, axis, like, dtype, fill)


def empty(shape: Any, dtype: Any = None, *, codistributor: Optional[Codistributor] = None,
          axis: Optional[int] = None, like: Like = None) -> CodistributedArray:
    """A codistributed array whose values are not set (no communication).

    Examples
    --------
    >>> empty((3, 2)).shape
    (3, 2)

    MATLAB
    ------
    ``codistributed.zeros`` (MATLAB has no uninitialised arrays)
    """
    return _made(CodistributedArray, "empty", shape, codistributor, axis, like, dtype,
                 lambda ops, c, d, lk: ops.empty(c.local_shape(), d, lk))


def _random(kind):
    def fill(ops, codist, dtype, like, rng):
        shape = codist.local_shape()
        values = rng.random(shape) if kind == "rand" else rng.standard_normal(shape)
        return ops.like(values.astype(dtype, copy=False), like) if ops is not LOCAL["numpy"] \
            else values.astype(dtype, copy=False)
    return fill


def _generator(call, seed):
    """Each worker's generator: numpy's global one (``np.random.seed`` sets it, as
    MATLAB's ``rng`` sets a worker's stream), or one seeded by ``seed`` and the worker
    (an int of at least 0, as numpy's seeds: SpmdTypeError or SpmdValueError naming
    ``call`` otherwise; no communication, so a seed every worker passes fails on each)."""
    if seed is None:
        return np.random
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise error(SpmdTypeError, call, f"'seed' must be an int (got {seed!r} that is a "
                    f"{type(seed).__name__})")
    if seed < 0:
        raise error(SpmdValueError, call, f"'seed' must be at least 0 (got {seed})")
    return np.random.default_rng([int(seed), _world.current().index])


def rand(shape: Any, dtype: Any = None, *, codistributor: Optional[Codistributor] = None,
         axis: Optional[int] = None, like: Like = None, seed: Optional[int] = None) -> CodistributedArray:
    """Uniform random numbers in [0, 1): each worker draws its own block (no
    communication). Without ``seed`` from numpy's global generator (each worker's own:
    seed it per worker for distinct streams); with ``seed``, from a generator seeded by
    ``seed`` and the worker number (the values then depend on the number of workers,
    as MATLAB's do).

    Examples
    --------
    >>> R = rand((4, 4), seed=7)
    >>> bool((R.local >= 0).all() and (R.local < 1).all())
    True

    MATLAB
    ------
    ``codistributed.rand(n)``, ``rand(m, n, "codistributed")``
    """
    rng = _generator("rand", seed)
    return _made(CodistributedArray, "rand", shape, codistributor, axis, like, dtype,
                 lambda ops, c, d, lk: _random("rand")(ops, c, d, lk, rng))


def randn(shape: Any, dtype: Any = None, *, codistributor: Optional[Codistributor] = None,
          axis: Optional[int] = None, like: Like = None, seed: Optional[int] = None) -> CodistributedArray:
    """Standard normal random numbers; as ``rand``.

    Examples
    --------
    >>> randn(1000, seed=1).shape
    (1000,)

    MATLAB
    ------
    ``codistributed.randn(n)``, ``randn(m, n, "codistributed")``
    """
    rng = _generator("randn", seed)
    return _made(CodistributedArray, "randn", shape, codistributor, axis, like, dtype,
                 lambda ops, c, d, lk: _random("randn")(ops, c, d, lk, rng))


def random_integers(low: int, high: int, shape: Any, dtype: Any = None, *,
                    codistributor: Optional[Codistributor] = None,
                    axis: Optional[int] = None, like: Like = None,
                    seed: Optional[int] = None, cls: Any = CodistributedArray,
                    call: str = "randi") -> CodistributedArray:
    """Uniform random integers from ``low`` to ``high``, both included (MATLAB's
    ``randi([low high], ...)``), in ``dtype`` (float64 by default, as MATLAB's): each
    worker draws its own block, as ``rand``."""
    rng = _generator(call, seed)

    def fill(ops, codist, dtype, like):
        values = rng.integers(low, high, codist.local_shape(), endpoint=True) \
            if hasattr(rng, "integers") else \
            rng.randint(low, high + 1, codist.local_shape(), dtype=np.int64)
        values = np.asarray(values).astype(dtype, copy=False)
        return values if ops is LOCAL["numpy"] else ops.like(values, like)
    return _made(cls, call, shape, codistributor, axis, like, dtype, fill)


def eye(n: int, m: Optional[int] = None, k: int = 0, dtype: Any = None, *,
        codistributor: Optional[Codistributor] = None, axis: Optional[int] = None,
        like: Like = None) -> CodistributedArray:
    """The ``n`` x ``m`` identity (ones on diagonal ``k``), codistributed without
    communication.

    Examples
    --------
    >>> I = eye(3)
    >>> float(np.trace(I))
    3.0

    MATLAB
    ------
    ``codistributed.eye(n)``, ``eye(n, "codistributed")``
    """
    n, m = check_shape("eye", (n, n if m is None else m))  # eye(2.0) as zeros(2.0)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise error(SpmdTypeError, "eye", f"'k' must be an int (got {k!r})")

    def fill(ops, codist, dtype, like):
        r = codist.global_indices()
        if codist.axis == 0:
            values = np.eye(len(r), m, k + r.start, dtype=dtype)
        else:
            values = np.eye(n, len(r), k - r.start, dtype=dtype)
        return values if ops is LOCAL["numpy"] else ops.like(values, like)

    return _made(CodistributedArray, "eye", (n, m), codistributor, axis, like, dtype,
                 fill)


def arange(start: Any, stop: Any = None, step: Any = 1, dtype: Any = None, *,
           codistributor: Optional[Codistributor] = None, like: Like = None) -> CodistributedArray:
    """numpy's ``arange`` as a codistributed vector (no communication): each worker
    computes ``start + i * step`` for the indices ``i`` it holds.

    Examples
    --------
    >>> arange(2, 12, 3).local
    array([ 2,  5,  8, 11])

    MATLAB
    ------
    ``codistributed.colon(a, d, b)`` (inclusive of ``b`` there)
    """
    if stop is None:
        start, stop = 0, start
    try:  # numpy's rule: the type of start, stop and step together (arange(2.5) is float)
        some = step if step else 1
        kind = np.result_type(np.arange(start, start, some, dtype=dtype).dtype,
                              np.arange(stop, stop, some, dtype=dtype).dtype)
    except (TypeError, ValueError, OverflowError, RuntimeError) as exc:
        refused = SpmdTypeError if isinstance(exc, (TypeError, RuntimeError)) else \
            SpmdValueError
        raise error(refused, "arange", f"'start', 'stop' and 'step' must be finite real "
                    f"numbers (got {start!r}, {stop!r}, {step!r}): {exc}") from None
    if step == 0:
        raise error(SpmdValueError, "arange", "'step' must not be zero")
    if all(isinstance(v, (int, np.integer)) for v in (start, stop, step)):
        start, stop, step = int(start), int(stop), int(step)
        count = max(0, (stop - start + step - (1 if step > 0 else -1)) // step)
    else:
        count = (stop - start) / step
        if not np.isfinite(count):
            raise error(SpmdValueError, "arange", f"cannot count the elements from "
                        f"{start!r} to {stop!r} by {step!r}")
        count = max(int(np.ceil(count)), 0)

    def fill(ops, codist, dtype, like):
        r = codist.global_indices()
        values = (start + np.arange(r.start, r.stop) * step).astype(kind)
        return values if ops is LOCAL["numpy"] else ops.like(values, like)

    return _made(CodistributedArray, "arange", (count,), codistributor, None, like, kind, fill)


def drange(start: int, stop: Optional[int] = None, step: int = 1) -> range:
    """This worker's share of ``range(start, stop, step)``: a contiguous piece, by the
    default partition, so that the workers together cover the range once.

    Not collective: each worker computes its own piece.

    Examples
    --------
    >>> list(drange(10))          # at 4 workers: [0, 1, 2], [3, 4, 5], [6, 7], [8, 9]
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]

    MATLAB
    ------
    ``for i = drange(1:n)``
    """
    try:
        whole = range(start) if stop is None else range(start, stop, step)
    except (TypeError, ValueError) as exc:  # a float, None; a step of 0
        kind = SpmdTypeError if isinstance(exc, TypeError) else SpmdValueError
        raise error(kind, "drange", f"takes ints as range() does (got start={start!r}, "
                    f"stop={stop!r}, step={step!r}): {exc}") from None
    scope = _world.current()
    try:
        length = len(whole)
    except OverflowError:  # more than sys.maxsize numbers: the same count by arithmetic
        length = max(0, (whole.stop - whole.start + whole.step -
                         (1 if whole.step > 0 else -1)) // whole.step)
    partition = default_partition(length, scope.size)
    first = offsets(partition)[scope.rank]
    return whole[first:first + partition[scope.rank]]
