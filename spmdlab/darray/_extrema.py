"""Where the largest and smallest elements are: numpy's ``argmax``/``argmin`` and the
maximum and minimum of complex values (numpy's order: real part, then imaginary part),
and MATLAB's ``max``/``min`` (complex values by absolute value, then phase angle; NaN
left out unless asked for; the 1-based index as a second output).

Along an axis other than the distribution axis every worker works on its own block.
Along the distribution axis (or over the whole array) every worker finds its own
candidate, the first it holds of the best, with its global index; the candidates are
joined in worker order (one small ``spmd_cat``) and the same rule, applied to them in
the order of their global indices, picks the first best of the global array. So every
rule that picks the first best (numpy's, MATLAB's, ties and NaN included) gives the
answer it gives on the gathered array, on every worker, bit for bit.
"""

from __future__ import annotations

import numpy as np

from .._backends import BF16_HOST, LOCAL, bf16_as_float32, classify, float32_as_bf16
from ..collectives import _cat_arrays
from .._agree import agree
from ..errors import SpmdError, SpmdTypeError, SpmdValueError
from ._codistributor import Codistributor, error

# -- the rules, on host numpy arrays: the index along ``axis`` of the first best element -----


def numpy_pick(x, axis, name):
    """numpy's ``argmax``/``argmin`` (name "max" or "min") along ``axis``, kept."""
    return np.expand_dims((np.argmax if name == "max" else np.argmin)(x, axis=axis), axis)


def matlab_pick(x, axis, name, omitnan=True, method="auto"):
    """MATLAB's ``[~, I] = max(x, [], axis)`` (or ``min``), 0-based and kept: elements
    compared by ``method`` ("auto": complex values by ``abs`` then ``angle``, real ones
    by value; "abs": by ``abs`` then ``angle``; "real": by real part then imaginary
    part), ties to the first; NaN left out (``omitnan``: the first NaN when all are) or,
    with ``omitnan=False``, the first NaN wins."""
    x = bf16_as_float32(x)  # (a bfloat16 part's stand-in: compared by value)
    complex_ = x.dtype.kind == "c"
    if method == "real" or (method == "auto" and not complex_):
        keys = [x.real, x.imag] if complex_ else [x]
    else:
        keys = [_magnitude(x), np.angle(x)]
    nan = np.isnan(x) if x.dtype.kind in "fc" else np.zeros(x.shape, dtype=bool)
    best = np.max if name == "max" else np.min
    candidate = ~nan
    for key in keys:
        if key.dtype.kind == "b":
            key = key.astype(np.uint8)
        # the best key among the candidates; the others get the best key's opposite
        worst = _worst(key.dtype, name)
        masked = np.where(candidate, key, worst)
        top = best(masked, axis=axis, keepdims=True) if masked.shape[axis] else masked
        candidate = candidate & (masked == top)
    has = candidate.any(axis=axis, keepdims=True)
    first_nan = np.argmax(nan, axis=axis, keepdims=True)
    index = np.where(has, np.argmax(candidate, axis=axis, keepdims=True), first_nan)
    if not omitnan:
        index = np.where(nan.any(axis=axis, keepdims=True), first_nan, index)
    return index


def _magnitude(x):
    """``abs(x)``, exact: an integer's as uint64 (its float64 would round past 2^53, so
    ``int64(2^53 + 1)`` would tie with ``2^53``; ``intmin`` is 2^63), a logical's as
    float64, a float's or complex value's as numpy's ``abs``."""
    if x.dtype.kind == "i":
        return np.abs(x.astype(np.int64)).astype(np.uint64)  # (intmin wraps: 2^63)
    if x.dtype.kind == "u":
        return x.astype(np.uint64)
    return np.abs(x.astype(np.float64) if x.dtype.kind == "b" else x)


def _worst(dtype, name):
    if dtype.kind in "fc":
        return -np.inf if name == "max" else np.inf
    info = np.iinfo(dtype)
    return info.min if name == "max" else info.max


# -- on a local part -------------------------------------------------------------------------


def _host(family, local):
    return np.asarray(family.host(local))


def local_pick(family, local, axis, name, pick):
    """``pick``'s index along ``axis`` of a local part (kept), as host int64. numpy's
    rule runs in the family on numpy parts, on real torch parts (torch's argmax takes
    the first best and the first NaN, as numpy's) and on integer and bool CuPy parts;
    the rest on a host copy (CuPy 14's argmax may take a later NaN than the first, and
    passes over ``nan+1j``; torch's complex argmax is refused), as MATLAB's rule."""
    if pick is numpy_pick and family is LOCAL["torch"] and \
            not local.dtype.is_complex:
        import torch

        fn = torch.argmax if name == "max" else torch.argmin
        if local.dtype == torch.bool:  # torch's argmax refuses bools (numpy's does not)
            local = local.to(torch.uint8)
        return _host(family, fn(local, dim=axis, keepdim=True)).astype(np.int64)
    if pick is numpy_pick and family is not LOCAL["torch"] and \
            (family is LOCAL["numpy"] or local.dtype.kind not in "fc"):
        fn = np.argmax if name == "max" else np.argmin
        return _host(family, fn(local, axis=axis, keepdims=True)).astype(np.int64)
    return pick(_host(family, local), axis, name).astype(np.int64)


def along(call, a, axis, name, pick):
    """(values, 0-based global indices) of the best elements along ``axis`` of
    codistributed ``a``, both kept (length 1 along ``axis``) and whole on every worker
    when ``axis`` is the distribution axis, else this worker's block of them. Host
    numpy arrays. Collective when ``axis`` is the distribution axis."""
    family = LOCAL[a.family]
    local = a.local
    if local.shape[axis]:
        index = local_pick(family, local, axis, name, pick)
        values = np.take_along_axis(_host(family, local), index, axis=axis)
    else:  # nothing here: no candidate
        kept = tuple(0 if d == axis else n for d, n in enumerate(local.shape))
        index = np.zeros(kept, dtype=np.int64)
        values = np.zeros(kept, dtype=_host(family, local).dtype)
    if axis != a.axis:
        return values, index
    index = index + a.codistributor.global_indices().start
    scope = a._scope
    values = _cat_arrays(call, scope, classify(np.ascontiguousarray(values)), axis, None)
    index = _cat_arrays(call, scope, classify(np.ascontiguousarray(index)), axis, None)
    # the candidates follow each other in worker order, which is their global order
    which = pick(bf16_as_float32(values), axis, name)
    return (np.take_along_axis(values, which, axis=axis),
            np.take_along_axis(index, which, axis=axis))


def overall(call, a, name, pick, order="C"):
    """(value, 0-based flat index in ``order``) of the best element of codistributed
    ``a``, on every worker (host numpy scalars). Collective."""
    family = LOCAL[a.family]
    host = _host(family, a.local)
    if host.size:
        flat = host.reshape(-1, order=order)
        i = int(pick(bf16_as_float32(flat), 0, name)[0])
        value = flat[i:i + 1]
        where = np.unravel_index(i, host.shape, order=order)
        start = a.codistributor.global_indices().start
        where = tuple(w + start if d == a.axis else w for d, w in enumerate(where))
        index = np.array([np.ravel_multi_index(where, a.shape, order=order)],
                         dtype=np.int64)
    else:
        value, index = host.reshape(-1)[:0], np.zeros(0, dtype=np.int64)
    scope = a._scope
    # (the global shape and partition agreed on: a worker whose array was made another
    # size would otherwise rank its index in a shape of its own)
    agree(scope, call, a._key(call, "overall", name, order),
          describe=lambda: a._describe(call))
    values = _cat_arrays(call, scope, classify(np.ascontiguousarray(value)), 0, None)
    indices = _cat_arrays(call, scope, classify(index), 0, None)
    ranked = np.argsort(indices, kind="stable")  # the candidates in the array's order
    values, indices = values[ranked], indices[ranked]
    i = int(pick(bf16_as_float32(values), 0, name)[0])
    return values[i], int(indices[i])


def check_not_empty(call, a, axis, what):
    """numpy's and MATLAB's refusal of the best of nothing, on every worker (the shape
    is the same everywhere)."""
    n = a.size if axis is None else a.shape[axis]
    if n == 0:
        raise error(SpmdValueError, call, f"attempt to get the {what} of an empty sequence "
                    f"(shape {a.shape}{'' if axis is None else f', axis {axis}'})")


# -- numpy's argmax and argmin, and the complex max and min --------------------------------


def arg(call, name, a, axis=None, out=None, keepdims=False):
    """numpy's ``argmax``/``argmin`` of codistributed ``a``: int64 indices, codistributed
    like ``a`` without ``axis`` (a replicated scalar of the family for ``axis=None``)."""
    from ._numpy import _axes, _replicated_result, _unsupported

    _unsupported(call, out=out)
    a._check_scope(call)
    keepdims = bool(keepdims) if keepdims is not np._NoValue else False
    family = LOCAL[a.family]
    if axis is None:
        check_not_empty(call, a, None, f"arg{name}")
        _, index = overall(call, a, name, numpy_pick)
        if keepdims:
            return _replicated_result(a, family.like(np.full((1,) * a.ndim, index,
                                                             dtype=np.int64), a.local),
                                      (1,) * a.ndim)
        return _replicated_result(a, family.like(np.array(index, dtype=np.int64),
                                                 a.local), ())
    (axis,) = _axes(call, a, axis)
    check_not_empty(call, a, axis, f"arg{name}")
    _, index = along(call, a, axis, name, numpy_pick)
    shape = tuple(1 if d == axis else n for d, n in enumerate(a.shape))
    if not keepdims:
        index = index.reshape(index.shape[:axis] + index.shape[axis + 1:])
        shape = shape[:axis] + shape[axis + 1:]
    result = family.like(index.copy(), a.local)
    if axis != a.axis:
        new_axis = a.axis if keepdims or a.axis < axis else a.axis - 1
        return a._new(result, Codistributor(new_axis, a.partition, shape))
    return _replicated_result(a, result, shape)


def complex_extremum(call, name, a, axes, keepdims):
    """numpy's ``max``/``min`` of complex ``a`` over ``axes`` (numpy's order: real
    part, then imaginary part; the first NaN wins): along the distribution axis, each
    worker's candidate, joined in worker order and reduced again."""
    from ._numpy import _replicated_result

    family = LOCAL[a.family]
    host = _host(family, a.local)
    reduce = np.max if name == "max" else np.min
    shape = tuple(1 if d in axes else n for d, n in enumerate(a.shape)) if keepdims \
        else tuple(n for d, n in enumerate(a.shape) if d not in axes)
    if a.axis not in axes:
        result = reduce(host, axis=axes, keepdims=keepdims)
        new_axis = a.axis if keepdims else a.axis - sum(1 for d in axes if d < a.axis)
        return a._new(family.like(np.asarray(result).copy(), a.local),
                      Codistributor(new_axis, a.partition, shape))
    if host.shape[a.axis]:
        partial = reduce(host, axis=axes, keepdims=True)
    else:
        partial = np.zeros(tuple(0 if d == a.axis else (1 if d in axes else n)
                                 for d, n in enumerate(host.shape)), dtype=host.dtype)
    joined = _cat_arrays(call, a._scope, classify(np.ascontiguousarray(partial)), a.axis,
                         None)
    total = reduce(joined, axis=a.axis, keepdims=True)
    total = total.reshape(shape).copy()
    return _replicated_result(a, family.like(total, a.local), shape)


# -- MATLAB's max and min -------------------------------------------------------------------

_NANFLAGS = {"omitnan": True, "omitmissing": True, "includenan": False,
             "includemissing": False}
_METHODS = ("auto", "abs", "real")


def _options(call, args):
    """MATLAB's ``max`` arguments after ``A``: (B or None, dim or "all" or None, omitnan,
    method, linear)."""
    from ._matlab import _number

    args = list(args)
    B, reducing, dim, omitnan, method, linear = None, False, None, True, "auto", False
    if args and not isinstance(args[0], str):
        first = args.pop(0)
        if isinstance(first, (list, tuple, np.ndarray)) and np.size(first) == 0 and \
                not hasattr(first, "codistributor"):
            reducing = True
        else:
            B = first
    if B is None and not reducing and args and not isinstance(args[0], str):
        raise error(SpmdTypeError, call, "give the dimension as max(A, [], dim)")
    while args:
        a = args.pop(0)
        word = a.lower() if isinstance(a, str) else None
        if word in _NANFLAGS:
            omitnan = _NANFLAGS[word]
        elif word == "all" and reducing:
            dim = "all"
        elif word == "linear" and reducing:
            linear = True  # (the index is linear for "all" already)
        elif word == "comparisonmethod":
            if not args or not isinstance(args[0], str) or args[0].lower() not in _METHODS:
                raise error(SpmdValueError, call, f"'ComparisonMethod' must be followed by "
                            f"'auto', 'abs' or 'real' (got {args[0] if args else None!r})")
            method = args.pop(0).lower()
        elif reducing and dim is None and not isinstance(a, str):
            if np.ndim(a) > 1 or np.size(a) == 0:
                raise error(SpmdValueError, call, f"'dim' must be a dimension or a vector "
                            f"of dimensions (got {a!r})")
            dims = [_number(call, "dim", d) for d in np.ravel(a)]
            if min(dims) < 1:
                raise error(SpmdValueError, call, f"'dim' must be 1 or more (got "
                            f"{min(dims)}); dimensions are 1-based")
            if len(set(dims)) != len(dims):
                raise error(SpmdValueError, call, f"a vector of dimensions must not repeat "
                            f"one (got {list(dims)})")
            dim = dims[0] if np.ndim(a) == 0 else tuple(dims)
        else:
            raise error(SpmdValueError, call, f"unexpected argument {a!r}")
    return B, dim, omitnan, method, linear


def _family_of(x):
    from .._backends import local_family

    return LOCAL[local_family(x) or "numpy"]


def matlab(name, A, args, nargout):
    """MATLAB's ``max``/``min`` (``name``) of ``A`` (codistributed or not) with MATLAB's
    arguments ``args``; (M, I) when ``nargout`` is 2 (I 1-based)."""
    from ._array import CodistributedArray
    from ._indexing import LOOPS
    from ._matlab import _matlab_size

    call = name
    D = A if isinstance(A, CodistributedArray) else None
    # max(D, [], dim, ...) of a codistributed D: collective, so that every worker works
    # along the same dimension with the same flags, or every worker raises (along an
    # axis D is not split on, a worker would otherwise go on alone while the others
    # wait for it in the exchange of another dimension); max(D, B) is element-wise
    # (not compared, as a ufunc's operands are not), max(D) has nothing to compare; nor
    # is it inside a for-drange loop, whose body each worker runs alone
    reducing = bool(args) and (isinstance(args[0], str) or (isinstance(
        args[0], (list, tuple, np.ndarray)) and np.size(args[0]) == 0))  # (not max(A, B))
    compared = D is not None and reducing and not LOOPS[0]
    err, options = None, None
    try:
        if nargout not in (1, 2):
            raise error(SpmdValueError, call, f"'nargout' must be 1 or 2 (got {nargout!r})")
        options = _options(call, args)
    except SpmdError as exc:
        if not compared:
            raise
        err = exc
    if compared:
        agree(D._check_scope(call), call, D._key(call, None if err else (
            repr(options[1:]), nargout)), error=err,
            describe=lambda: D._describe(call, **({} if options is None else dict(
                dim=str(options[1]), omitnan=str(options[2]), method=options[3],
                linear=str(options[4]))), nargout=str(nargout)))
    B, dim, omitnan, method, linear = options
    linear = linear and nargout == 2
    if isinstance(dim, tuple):  # a vector of dimensions: one after the other
        if nargout == 2:
            raise error(SpmdValueError, call, f"[M, I] = {name}(A, [], vecdim) is not "
                        f"available here: take M alone, or give one dimension or 'all'")
        flags = ["omitnan" if omitnan else "includenan", "ComparisonMethod", method]
        for d in dim:
            A = matlab(name, A, [[], d, *flags], 1)
        return A
    pick = lambda x, axis, n: matlab_pick(x, axis, n, omitnan, method)  # noqa: E731
    if B is not None:
        if nargout == 2:
            raise error(SpmdValueError, call, f"{name}(A, B) has one output; for the "
                        f"indices use {name}(A, [], dim)")
        return _pairwise(call, name, A, B, omitnan, method)
    if not isinstance(A, CodistributedArray):
        return _plain(name, A, dim, pick, nargout, linear)
    A._check_scope(call)
    family = LOCAL[A.family]
    msize = _matlab_size(A.shape)
    if dim == "all":
        if A.size == 0:
            empty = family.empty((0, 0), family.dtype(A.local), A.local)
            return (empty, family.empty((0, 0), np.int64, A.local)) if nargout == 2 \
                else empty
        value, index = overall(call, A, name, pick, order="F")
        M = family.like(np.asarray(value), A.local)
        M = M[()] if isinstance(M, np.ndarray) else M.reshape(())
        if nargout == 1:
            return M
        I = family.like(np.asarray(index + 1, dtype=np.int64), A.local)
        return M, (I[()] if isinstance(I, np.ndarray) else I.reshape(()))
    if dim is None:
        dim = next((d + 1 for d, n in enumerate(msize) if n != 1), 1)
    axis = _axis(A.ndim, dim)
    if axis is None or A.shape[axis] == 0:  # a singleton (or empty) dimension: A itself
        M = A.copy()
        if nargout == 1:
            return M
        if linear and axis is None:  # each element's own position
            start = A.codistributor.global_indices().start
            lin = _linear(None, None, A.shape, A.local.shape,
                          tuple(start if d == A.axis else 0 for d in range(A.ndim)))
            return M, A._new(family.like(lin + 1, A.local), A.codistributor)
        return M, np.full_like(A, 1 if axis is None else 0, dtype=np.int64)
    values, index = along(call, A, axis, name, pick)
    if linear and A.ndim > 1:  # (a row's index is linear already)
        if axis == A.axis:  # every worker holds the whole result
            region, at = tuple(1 if d == axis else n for d, n in enumerate(A.shape)), 0
        else:
            region = tuple(1 if d == axis else n for d, n in enumerate(A.local.shape))
            at = A.codistributor.global_indices().start
        index = _linear(index, axis, A.shape, region,
                        tuple(at if d == A.axis else 0 for d in range(A.ndim)))
    index = index + 1
    shape = tuple(1 if d == axis else n for d, n in enumerate(A.shape))
    if A.ndim == 1:  # a row's maximum is a scalar
        M = family.like(values.reshape(()), A.local)
        I = family.like(index.reshape(()), A.local)
        M, I = [x[()] if isinstance(x, np.ndarray) else x.reshape(()) for x in (M, I)]
    elif axis == A.axis:
        from ._numpy import split

        shape = _dropped(shape)
        M = split(A, family.like(values.reshape(shape), A.local), shape)
        I = split(A, family.like(index.reshape(shape), A.local), shape)
    else:
        keep = _dropped(shape, A.axis)
        codist = Codistributor(A.axis, A.partition, keep)
        block = tuple(1 if d == axis else n for d, n in enumerate(A.local.shape))
        block = block[:len(keep)]
        M = A._new(family.like(values.reshape(block), A.local), codist)
        I = A._new(family.like(index.reshape(block), A.local), codist)
    return (M, I) if nargout == 2 else M


def _axis(ndim, dim):
    """numpy's axis of MATLAB dimension ``dim`` (1-based) of an ``ndim``-D array, or None
    when that dimension is a singleton past the array's (a 1-D array is a 1-by-k row)."""
    if ndim == 0:
        return None
    if ndim == 1:
        return 0 if dim == 2 else None
    return dim - 1 if dim <= ndim else None


def _dropped(shape, keep=-1):
    """MATLAB's size: trailing singleton dimensions past the second (and past axis
    ``keep``) dropped."""
    shape = tuple(shape)
    while len(shape) > max(2, keep + 1) and shape[-1] == 1:
        shape = shape[:-1]
    return shape


def _linear(index, axis, shape, region, offsets):
    """MATLAB's linear indices (0-based, column-major) into an array of ``shape`` of the
    elements ``index`` picks along ``axis`` in a block of ``region`` (``axis`` 1)
    positions from ``offsets``; with ``axis`` None, of the block's own elements."""
    if not region:  # (a scalar)
        return np.zeros((), np.int64)
    subs = [np.arange(n).reshape((-1,) + (1,) * (len(region) - d - 1)) + o
            for d, (n, o) in enumerate(zip(region, offsets))]
    subs = list(np.broadcast_arrays(*subs))
    if axis is not None:
        subs[axis] = np.asarray(index).reshape(region)
    return np.ravel_multi_index(subs, shape, order="F").astype(np.int64)


def _plain(name, A, dim, pick, nargout, linear=False):
    """MATLAB's max/min of an array every worker holds (no communication)."""
    from ._matlab import _matlab_size

    family = _family_of(A)
    host = np.asarray(family.host(A)) if hasattr(A, "shape") else np.asarray(A)
    like = A if family is not LOCAL["numpy"] else None
    wrap = (lambda x: x) if like is None else (lambda x: family.like(x, like))  # noqa
    if dim == "all":
        if host.size == 0:  # (in A's family, as the codistributed array's)
            M = wrap(host.reshape(0, 0))
            return (M, wrap(np.zeros((0, 0), np.int64))) if nargout == 2 else M
        flat = host.reshape(-1, order="F")
        i = int(pick(flat, 0, name)[0])
        M, I = wrap(np.asarray(flat[i])), wrap(np.asarray(i + 1, dtype=np.int64))
        M, I = [x[()] if isinstance(x, np.ndarray) else x for x in (M, I)]
        return (M, I) if nargout == 2 else M
    msize = _matlab_size(host.shape)
    if dim is None:
        dim = next((d + 1 for d, n in enumerate(msize) if n != 1), 1)
    axis = _axis(host.ndim, dim)
    if axis is None or host.shape[axis] == 0:
        I = np.ones(host.shape, np.int64) if axis is None else \
            np.zeros(host.shape, np.int64)
        if linear and axis is None:  # each element's own position
            I = _linear(None, None, host.shape, host.shape, (0,) * host.ndim) + 1
        return (A, wrap(I)) if nargout == 2 else A
    index = pick(host, axis, name)
    values = np.take_along_axis(host, index, axis=axis)
    if linear:
        index = _linear(index, axis, host.shape, index.shape, (0,) * host.ndim)
    shape = () if host.ndim == 1 else _dropped(values.shape)
    M, I = wrap(values.reshape(shape)), wrap((index + 1).reshape(shape))
    if not shape:
        M, I = [x[()] if isinstance(x, np.ndarray) else x for x in (M, I)]
    return (M, I) if nargout == 2 else M


def _pair(name, omitnan, method, x, y):
    """MATLAB's ``max(x, y)`` of host arrays or Python numbers (broadcast), in MATLAB's
    class of the result (``_pair_class``): compared exactly, then converted. Into an
    integer class (values compared as they are, not by ``abs``) each operand is
    converted first and compared there: the conversion keeps the order, so the pick is
    the exact comparison's, where a float64 comparison would round an int64 or uint64
    past 2^53 (``max(int64(2^62 + 1), 0.0)`` came back ``2^62``); a NaN is left out
    (the other operand) or, with ``"includenan"``, wins as 0, MATLAB's integer NaN."""
    out = _pair_class(_matlab_class(x), _matlab_class(y))
    x, y = np.broadcast_arrays(np.asarray(x), np.asarray(y))
    if out.kind in "iu" and method != "abs" and "c" not in x.dtype.kind + y.dtype.kind:
        nan = [np.isnan(v) if v.dtype.kind == "f" else np.zeros(v.shape, bool)
               for v in (x, y)]
        both = np.stack([_to_class(x, out), _to_class(y, out)])
        best = np.take_along_axis(both, matlab_pick(both, 0, name), 0)[0]
        if omitnan:
            return np.where(nan[0], both[1], np.where(nan[1], both[0], best))
        return np.where(nan[0] | nan[1], np.zeros((), out), best)
    dtype = np.result_type(x, y)
    both = np.stack([x.astype(dtype), y.astype(dtype)])
    best = np.take_along_axis(both, matlab_pick(both, 0, name, omitnan, method), 0)[0]
    return _to_class(best, out)


def _matlab_class(x):
    """The dtype of ``x`` as MATLAB's class: a Python number is a double (a bool a
    logical), as MATLAB's literals are."""
    if isinstance(x, bool):
        return np.dtype(np.bool_)
    if isinstance(x, (int, float)):
        return np.dtype(np.float64)
    if isinstance(x, complex):
        return np.dtype(np.complex128)
    return np.asarray(x).dtype


def _pair_class(a, b):
    """MATLAB's class of ``max(A, B)`` for A and B of dtypes ``a`` and ``b``: an integer
    class wins over single, double and logical, single over double, a float over
    logical (MATLAB's valid combinations of unlike classes; ``max(x, 0)`` of single
    ``x`` is single). numpy's promotion where MATLAB has no answer numpy can hold (two
    integer classes, which MATLAB refuses; a complex value and an integer class)."""
    if a == b:
        return a
    kinds = a.kind + b.kind
    ints = [d for d in (a, b) if d.kind in "iu"]
    if len(ints) == 2 or (ints and "c" in kinds) or not set(kinds) <= set("biufc"):
        return np.result_type(a, b)
    if ints:
        return ints[0]
    if "b" in kinds:
        return a if b.kind == "b" else b
    real = min(np.finfo(a).dtype, np.finfo(b).dtype, key=lambda d: d.itemsize)
    return np.result_type(real, np.complex64) if "c" in kinds else real


def _to_class(x, dtype):
    """Host array ``x`` converted to ``dtype`` as MATLAB converts: to an integer class
    rounded half away from zero, held at the class's limits, NaN as 0. Exact: the half
    is found from the fraction (``x - trunc(x)``, exact), never by adding 0.5 (which
    rounds: 0.49999999999999994 + 0.5 is 1, 2^52 + 1 + 0.5 is 2^52 + 2), and a value at or
    past a limit is set to the limit itself, never cast (``intmax("int64")`` as a double
    is 2^63, which int64 does not hold: the cast gave ``intmin``)."""
    if x.dtype == dtype:
        return x
    if dtype.kind in "iu" and x.dtype.kind in "iuf":
        info = np.iinfo(dtype)
        if x.dtype.kind == "f":
            whole = np.trunc(x)
            with np.errstate(invalid="ignore"):  # (inf - inf: held at the limit below)
                whole = whole + np.where(np.abs(x - whole) >= 0.5, np.sign(x), 0)
            x = np.where(np.isnan(x), 0, whole)
        high, low = x >= info.max, x <= info.min
        inside = np.where(high | low, 0, x).astype(dtype)
        return np.where(high, info.max, np.where(low, info.min, inside)).astype(dtype)
    return x.astype(dtype)


def _pairwise(call, name, A, B, omitnan, method):
    from ._array import CodistributedArray
    from ._numpy import elementwise

    # (an array of the family's own; a numpy scalar, np.float32(1), is a host value)
    theirs = lambda x: hasattr(x, "shape") and not isinstance(  # noqa: E731
        x, (np.ndarray, np.generic))

    def apply(family, args, kwargs):
        like = next((x for x in args if theirs(x)), None)
        host = [np.asarray(family.host(x)) if theirs(x) else x for x in args]
        # bfloat16 (torch's; no MATLAB class) is compared as float32, which holds it
        # exactly, and stays bfloat16 where single would stay single (max(D, 2))
        narrow = [isinstance(x, np.ndarray) and x.dtype == BF16_HOST for x in host]
        single = any(np.asarray(x).dtype == np.float32 for x in host
                     if isinstance(x, (np.ndarray, np.generic)))
        host = [bf16_as_float32(x) for x in host]
        result = np.asarray(_pair(name, omitnan, method, *host)).copy()
        if any(narrow) and not single and result.dtype == np.float32:
            result = float32_as_bf16(result)
        return result if like is None else family.like(result, like)

    if isinstance(A, CodistributedArray) or isinstance(B, CodistributedArray):
        # a numpy scalar as a 0-d array: its class is kept (a torch part's operand
        # would be the Python number of it, a double: max(D, single(1)) is single)
        A, B = [np.asarray(x) if isinstance(x, np.generic) else x for x in (A, B)]
        return elementwise(call, (A, B), {}, apply)
    family = _family_of(A if hasattr(A, "shape") else B)
    return apply(family, (A, B), {})
