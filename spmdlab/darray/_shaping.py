"""More of numpy's functions for codistributed arrays: sorting, differences, joining,
repeating, flipping, shifting, diagonals, finding nonzero elements, order statistics.

What works along an axis other than the distribution axis is local (no communication).
Along the distribution axis, an array of 2 or more dimensions is first redistributed so
that the axis is whole on every worker (one all-to-all, split along another axis), the
local function runs, and the result is redistributed back (one more all-to-all); a
vector, which has no other axis, is gathered, worked on whole by every worker and split
again by the default partition. Results equal numpy's on the gathered array.
"""

from __future__ import annotations

import math

import numpy as np

from .._backends import BF16_HOST, LOCAL, bf16_as_float32, float32_as_bf16, local_family
from ..collectives import gather
from ..errors import (SpmdError, SpmdIndexError, SpmdMismatchError, SpmdTypeError,
                      SpmdValueError)
from ._array import CodistributedArray
from ._codistributor import Codistributor, error, offsets
from . import _extrema
from ._numpy import (_axes, _family_call, _kind, _name, _on_host, _replicated_result,
                     _unsupported,
                     elementwise, implements, layout, numpy_dtype,
                     reduction, scan, split)


def _codist(x):
    return isinstance(x, CodistributedArray)


def _array(x):
    """A replicated operand as an array of its own family (a list becomes numpy's): numpy's
    own ``asarray``, ``ravel`` and ``expand_dims`` refuse a GPU array, its methods do not."""
    return x if hasattr(x, "reshape") and hasattr(x, "ndim") else np.asarray(x)


def _host_call(a, local, fn, call=None):
    """``fn`` of a host numpy copy of ``local``, back in ``a``'s family and device."""
    family = LOCAL[a.family]
    return family.like(np.asarray(_refused(call, fn, family.host(local))), a.local)


def _refused(call, fn, *args):
    """``fn(*args)``, numpy's refusal of an option (a sort kind, a q out of range, the
    percentile of no values) named as the call and worker's: every worker has the same
    options and dtype, so every worker refuses alike. A torch part's bfloat16 (its host
    stand-in) is worked on as float32 and float results rounded back (numpy sorted the
    stand-in by its bits: negative numbers backwards)."""
    if any(isinstance(x, np.ndarray) and x.dtype == BF16_HOST for x in args):
        result = _refused(call, fn, *(bf16_as_float32(x) for x in args))
        if isinstance(result, (np.ndarray, np.generic)) and result.dtype == np.float32:
            return float32_as_bf16(result)
        return result
    try:
        return fn(*args)
    except (TypeError, ValueError, IndexError) as exc:
        if call is None or isinstance(exc, SpmdError):
            raise
        kind = SpmdTypeError if isinstance(exc, TypeError) else \
            SpmdIndexError if isinstance(exc, IndexError) else SpmdValueError
        raise error(kind, call, str(exc)) from exc


def _one_axis(call, a, axis):
    if axis is None or isinstance(axis, tuple):
        raise error(SpmdTypeError, call, f"'axis' must be one int here (got {axis!r})")
    return _axes(call, a, axis)[0]


def _other_axis(a, axis):
    """The axis to split along while ``axis`` (or a tuple of axes) is worked on whole:
    the longest other."""
    worked = set(axis) if isinstance(axis, tuple) else {axis}
    return max((d for d in range(a.ndim) if d not in worked),
               key=lambda d: (a.shape[d], -d))


def along(call, a, axis, fn, keep=True):
    """``fn(host block, axis)`` applied with ``axis`` whole: local when ``a`` is split
    along another axis; else as the module says. ``fn`` may change the length of
    ``axis`` (1 with ``keep=False``: that axis is then dropped from the result).
    ``axis`` may be a tuple of axes, all whole, short of one of the array's."""
    a._check_scope(call)
    family = LOCAL[a.family]
    if a.ndim == 1:
        whole = family.host(a.gather())
        result = np.asarray(_refused(call, fn, whole, axis))
        if not keep:
            return _replicated_result(a, family.like(result.reshape(()), a.local), ())
        return split(a, family.like(result, a.local), result.shape)
    worked = axis if isinstance(axis, tuple) else (axis,)
    work = a
    if a.axis in worked:
        work = a._moved(call, Codistributor(_other_axis(a, axis)).complete(a.shape))
    local = _host_call(a, work.local, lambda x: fn(x, axis), call)
    shape = tuple(local.shape[d] if d in worked else n for d, n in enumerate(a.shape))
    if not keep:
        shape = tuple(n for d, n in enumerate(shape) if d not in worked)
        local = local.reshape(tuple(n for d, n in enumerate(local.shape)
                                    if d not in worked))
        at = work.axis - sum(d < work.axis for d in worked)
        return a._new(local, Codistributor(at, work.partition, shape))
    result = a._new(local, Codistributor(work.axis, work.partition, shape))
    if work is a:
        return result
    if shape == a.shape:
        return result._moved(call, a.codistributor)
    return result if len(worked) > 1 else \
        result._moved(call, Codistributor(axis).complete(shape))


# -- sorting and order statistics --------------------------------------------------------------


def _order(kind, stable):
    """numpy's sorting options, ``stable`` only where given (numpy 2 has it)."""
    return {"kind": kind} if stable is None else {"kind": kind, "stable": stable}


def _sorting(fn):
    """numpy's ``sort`` or ``argsort`` (``fn``) along one axis, or of all elements."""
    call = f"numpy.{fn.__name__}"

    def impl(a, axis=-1, kind=None, order=None, *, stable=None):
        _unsupported(call, order=order)
        how = _order(kind, stable)
        if axis is None:
            return along(call, a.ravel(), 0, lambda x, d: fn(x, **how))
        return along(call, a, _one_axis(call, a, axis), lambda x, d: fn(x, axis=d, **how))
    return impl


implements(np.sort)(_sorting(np.sort))
implements(np.argsort)(_sorting(np.argsort))


def _statistic(call, a, axis, keepdims, fn):
    """``fn(x, axis, keepdims=True)`` (numpy's median, percentile, ...) of ``a`` along
    one ``axis`` or a tuple of them (MATLAB's ``vecdim``), or over all elements
    (gathered) with ``axis=None`` or every axis."""
    axes = None if axis is None else _axes(call, a, axis)
    if axes is None or len(axes) == a.ndim:
        family = LOCAL[a.family]
        value = np.asarray(_refused(call, fn, family.host(a.gather()), axes, keepdims))
        value = family.like(value, a.local)
        return split(a, value, value.shape) if keepdims else \
            _replicated_result(a, value, tuple(value.shape))
    whole = a.size > 0

    def block(x, d):
        kept_empty = any(not m for e, m in enumerate(x.shape) if e not in axes)
        if not x.size and (whole or kept_empty):
            # an empty block: empty, of the others' dtype (numpy's nanquantile 'nearest'
            # keeps ints yet gives float64 for no values, and its nan-functions of
            # several q drop the q axis of an empty array); of an empty array, the block
            # of a worker that holds none of the other axes is empty too (numpy's median
            # over several axes of it refuses to reshape, where the others' is NaN)
            probe = np.zeros(tuple(m if e in axes else 1 for e, m in enumerate(x.shape)),
                             x.dtype)
            like = np.asarray(fn(probe, d, True))
            return np.zeros(tuple(like.shape[e] if e in axes else m
                                  for e, m in enumerate(x.shape)), like.dtype)
        return np.asarray(fn(x, d, True))
    return along(call, a, axes[0] if len(axes) == 1 else axes, block, keep=keepdims)


@implements(np.median)
def _median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    _unsupported("numpy.median", out=out)
    return _statistic("numpy.median", a, axis, keepdims,
                      lambda x, d, k: np.median(x, axis=d, keepdims=k))


def _order_statistic(fn):
    """numpy's ``percentile`` or ``quantile`` (``fn``) for one ``q`` or a vector of
    them (MATLAB's ``prctile(D, [10 50 90])``): with a vector, every q is computed in
    the one move of the data (the q's results take the axis's place), then the q axis
    is put first, as numpy's."""
    call = f"numpy.{fn.__name__}"

    def impl(a, q, axis=None, out=None, overwrite_input=False, method="linear",
             keepdims=False, **kwargs):
        _unsupported(call, out=out)
        if np.ndim(q) > 1:
            raise error(SpmdValueError, call, f"'q' must be a number or a vector (got "
                        f"{np.ndim(q)} dimensions)")
        weights = _weights(call, a, axis, kwargs.pop("weights", None))
        if np.ndim(q) == 0 or axis is None:
            return _statistic(call, a, axis, keepdims, lambda x, d, k: fn(
                x, q, axis=d, method=method, keepdims=k, **weights(x), **kwargs))
        qs = _on_host(q)
        axis = _one_axis(call, a, axis)

        def block(x, d, k):
            value = np.asarray(fn(x, qs, axis=d, method=method, **weights(x), **kwargs))
            if value.ndim < x.ndim:  # numpy's nan-functions drop the q axis of an empty x
                value = np.broadcast_to(value, (len(qs),) + value.shape)
            return np.moveaxis(value, 0, d)
        result = _statistic(call, a, axis, True, block)
        result = _moved_first(result, axis)
        return expand_dims(result, axis + 1) if keepdims else result
    return impl


def _weights(call, a, axis, weights):
    """numpy's ``weights`` of ``percentile``/``quantile`` for each block ``x`` the
    statistic works on, of the block's shape: weights of the array's shape cut to the
    block where ``axis`` is whole (collective when they are codistributed), a vector
    along ``axis`` spread over the block (numpy's nan-functions misread a vector along
    an axis of a matrix); all of them with ``axis=None`` (gathered)."""
    if weights is None:
        return lambda x: {}
    along_axis = axis is not None and a.ndim > 1
    if along_axis:
        axis = _one_axis(call, a, axis)
    if np.shape(weights) != a.shape and not (along_axis and
                                             np.shape(weights) == (a.shape[axis],)):
        raise error(SpmdValueError, call, f"'weights' must have the array's shape "
                    f"{a.shape}{f' or be a vector along axis {axis}' if along_axis else ''}"
                    f" (got {np.shape(weights)})")
    if not along_axis or np.ndim(weights) == 1:
        whole = _on_host(weights.gather() if _codist(weights) else weights)
        if not along_axis:
            return lambda x: {"weights": whole}
        whole = whole.reshape(tuple(-1 if d == axis else 1 for d in range(a.ndim)))
        return lambda x: {"weights": np.broadcast_to(whole, x.shape)}
    work = a.codistributor if a.axis != axis else \
        Codistributor(_other_axis(a, axis)).complete(a.shape)
    if _codist(weights):
        part = _on_host(weights._moved(call, work).local)
    else:
        r = work.global_indices()
        part = _on_host(weights)[(slice(None),) * work.axis + (slice(r.start, r.stop),)]
    # (an empty block's statistic is worked out on a probe of another shape: any weights)
    return lambda x: {"weights": part if x.shape == part.shape else np.ones(x.shape)}


def _moved_first(a, axis):
    """``a`` with ``axis`` first (numpy's ``moveaxis(a, axis, 0)``)."""
    return a if axis == 0 else np.transpose(
        a, (axis,) + tuple(d for d in range(a.ndim) if d != axis))


implements(np.percentile)(_order_statistic(np.percentile))
implements(np.quantile)(_order_statistic(np.quantile))
implements(np.nanpercentile)(_order_statistic(np.nanpercentile))
implements(np.nanquantile)(_order_statistic(np.nanquantile))


@implements(np.nanmedian)
def _nanmedian(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    _unsupported("numpy.nanmedian", out=out)
    return _statistic("numpy.nanmedian", a, axis, keepdims,
                      lambda x, d, k: np.nanmedian(x, axis=d, keepdims=k))


# -- unique values, interpolation ----------------------------------------------------------------


@implements(np.unique)
def _unique(ar, return_index=False, return_inverse=False, return_counts=False, axis=None,
            *, equal_nan=True, sorted=True):
    """numpy's ``unique`` (MATLAB's ``[C, ia, ic] = unique(D)``, 0-based and in C
    order): each worker finds the unique values of its block, with their counts and
    first places; one gather of those (each worker's distinct values, not its block)
    gives every worker the whole answer. The values, first indices (C-order flat
    indices into the array) and counts come back as codistributed vectors, the inverse
    distributed as ``ar`` is. With ``axis`` (unique rows or columns) the array is
    gathered and every worker finds them."""
    call = "numpy.unique"
    ar._check_scope(call)
    family = LOCAL[ar.family]
    wanted = (return_index, return_inverse, return_counts)

    def vector(v):
        v = np.asarray(v)
        return split(ar, family.like(v, ar.local), v.shape)

    # (bfloat16 parts: ordered as float32, which holds each exactly, see _refused)
    bf16 = np.dtype(family.dtype(ar.local)) == BF16_HOST

    def values_vector(v):
        return vector(float32_as_bf16(v) if bf16 else v)

    if axis is not None:
        whole = bf16_as_float32(np.asarray(family.host(ar.gather())))
        got = _refused(call, lambda: np.unique(
            whole, return_index, return_inverse, return_counts, axis=axis,
            equal_nan=equal_nan))
        if not any(wanted):
            return values_vector(got)
        return (values_vector(got[0]),) + tuple(vector(v) for v in got[1:])
    host = bf16_as_float32(np.asarray(family.host(ar.local)))
    values, first, inverse, counts = _refused(call, lambda: np.unique(
        host.reshape(-1), return_index=True, return_inverse=True, return_counts=True,
        equal_nan=equal_nan))
    if host.size:  # first places as flat indices of the whole array
        at = list(np.unravel_index(first, host.shape))
        at[ar.axis] = at[ar.axis] + ar.global_indices().start
        first = np.ravel_multi_index(tuple(at), ar.shape)
    # (each worker's layout rides along: one whose array was made another size would
    # otherwise place its first indices in a shape of its own)
    parts = gather(call, (values, first.astype(np.int64), counts.astype(np.int64),
                          layout(ar)))
    if any(p[3] != parts[0][3] for p in parts):
        raise error(SpmdMismatchError, call, "the workers' arrays differ in layout: " +
                    "; ".join(f"worker {k}: {p[3]}" for k, p in enumerate(parts, 1)))
    # every worker's values in the order of their first places, so that values numpy
    # keeps apart although equal in order (NaNs with equal_nan=False) come in C order,
    # as numpy's stable sort leaves them
    order = np.argsort(np.concatenate([p[1] for p in parts]), kind="stable")
    result, _, placed = np.unique(np.concatenate([p[0] for p in parts])[order],
                                  return_index=True, return_inverse=True,
                                  equal_nan=equal_nan)
    where = np.empty(order.size, np.intp)
    where[order] = placed.reshape(-1)  # each gathered value's place in the result
    out = [values_vector(result)]
    if return_index:
        firsts = np.full(result.size, np.iinfo(np.int64).max, np.int64)
        np.minimum.at(firsts, where, np.concatenate([p[1] for p in parts]))
        out.append(vector(firsts))
    if return_inverse:  # each element's place in the result, distributed as ``ar``
        mine = sum(len(p[0]) for p in parts[:ar._scope.rank])
        local = where[mine:mine + values.size][inverse.reshape(-1)].astype(np.int64)
        inv = ar._new(family.like(local.reshape(host.shape), ar.local), ar.codistributor)
        flat = np.unique(np.zeros((1,) * max(ar.ndim, 1)), return_inverse=True)[1].ndim == 1
        out.append(inv.ravel() if flat and ar.ndim != 1 else inv)
    if return_counts:
        totals = np.zeros(result.size, np.int64)
        np.add.at(totals, where, np.concatenate([p[2] for p in parts]))
        out.append(vector(totals))
    return out[0] if len(out) == 1 else tuple(out)


@implements(np.interp)
def _interp(x, xp, fp, left=None, right=None, period=None):
    """numpy's ``interp`` (MATLAB's ``interp1(xp, fp, D)``): a codistributed ``x`` is
    interpolated where it lies, in the same distribution (no communication); the table
    ``xp``, ``fp`` is gathered first where it is codistributed."""
    call = "numpy.interp"
    ref = next(v for v in (x, xp, fp) if _codist(v))
    ref._check_scope(call)
    family = LOCAL[ref.family]
    xp, fp = (family.host(v.gather()) if _codist(v) else _on_host(v) for v in (xp, fp))
    if not _codist(x):
        return family.like(np.asarray(_refused(call, lambda: np.interp(
            _on_host(x), xp, fp, left, right, period))), ref.local)
    x._check_scope(call)
    local = _refused(call, lambda: np.interp(
        np.asarray(LOCAL[x.family].host(x.local)), xp, fp, left, right, period))
    return x._new(LOCAL[x.family].like(np.asarray(local), x.local), x.codistributor)


@implements(np.ptp)
def _ptp(a, axis=None, out=None, keepdims=False):
    _unsupported("numpy.ptp", out=out)
    if a.dtype == np.bool_:  # (numpy's error: bools have no difference)
        raise error(SpmdTypeError, "numpy.ptp", "the range of booleans is not defined "
                    "(numpy's boolean subtract); convert to a number type first")
    return np.max(a, axis=axis, keepdims=keepdims) - np.min(a, axis=axis, keepdims=keepdims)


# -- differences, flips, shifts -------------------------------------------------------------------


def _along_slice(ndim, axis, s):
    return (slice(None),) * axis + (s,)


@implements(np.diff)
def _diff(a, n=1, axis=-1, prepend=np._NoValue, append=np._NoValue):
    call = "numpy.diff"
    axis = _one_axis(call, a, axis)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise error(SpmdTypeError, call, f"'n' must be an int (got {n!r})")
    if n < 0:
        raise error(SpmdValueError, call, f"order must be non-negative but got {n}")
    if n and (prepend is not np._NoValue or append is not np._NoValue):
        # numpy's: a number is one slice along the axis; joined as np.concatenate joins
        edge = a.shape[:axis] + (1,) + a.shape[axis + 1:]
        ends = [e if _codist(e) or np.ndim(e) else np.full(edge, e, np.asarray(e).dtype)
                for e in (prepend, append)]
        parts = ([ends[0]] if prepend is not np._NoValue else []) + [a] + \
            ([ends[1]] if append is not np._NoValue else [])
        a = concatenate(call, parts, axis)
    boolean = LOCAL[a.family].dtype(a.local).kind == "b"
    for _ in range(n):
        if a.shape[axis] == 0:
            break
        later, earlier = a[_along_slice(a.ndim, axis, slice(1, None))], \
            a[_along_slice(a.ndim, axis, slice(None, -1))]
        a = np.not_equal(later, earlier) if boolean else later - earlier
    return a


@implements(np.flip)
def _flip(m, axis=None):
    axes = _axes("numpy.flip", m, axis)
    return m[tuple(slice(None, None, -1) if d in axes else slice(None)
                   for d in range(m.ndim))]


@implements(np.rot90)
def _rot90(m, k=1, axes=(0, 1)):
    """numpy's ``rot90`` (MATLAB's ``rot90(D, k)``): flips and a transpose, as numpy
    makes it (a flip along the split axis moves each element once; the transpose is
    local)."""
    call = "numpy.rot90"
    m._check_scope(call)
    axes = tuple(axes)
    if len(axes) != 2 or m.ndim < 2:
        raise error(SpmdValueError, call, f"'axes' must name two axes of an array of 2 or "
                    f"more dimensions (got {axes!r} for {m.ndim} dimensions)")
    first, second = _axes(call, m, axes[0])[0], _axes(call, m, axes[1])[0]
    if first == second:
        raise error(SpmdValueError, call, f"'axes' must be different (got {axes!r})")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise error(SpmdTypeError, call, f"'k' must be an int (got {k!r})")
    k = int(k) % 4
    if k == 0:
        return m.copy()
    if k == 2:
        return _flip(_flip(m, first), second)
    order = list(range(m.ndim))
    order[first], order[second] = order[second], order[first]
    if k == 1:
        return np.transpose(_flip(m, second), order)
    return _flip(np.transpose(m, order), second)


@implements(np.fliplr)
def _fliplr(m):
    if m.ndim < 2:
        raise error(SpmdValueError, "numpy.fliplr", "the array must be at least 2-D")
    return _flip(m, 1)


@implements(np.flipud)
def _flipud(m):
    if m.ndim < 1:
        raise error(SpmdValueError, "numpy.flipud", "the array must be at least 1-D")
    return _flip(m, 0)


@implements(np.roll)
def _roll(a, shift, axis=None):
    call = "numpy.roll"
    if axis is None:  # numpy rolls the flattened array, in the array's shape again
        flat = _roll(a.ravel(), shift, 0)
        return flat.reshape(a.shape).redistribute(a.codistributor)
    if np.asarray(axis).dtype.kind not in "iu":  # (int(1.5) rolled axis 1)
        raise error(SpmdTypeError, call, f"'axis' must be an int or a tuple of ints (got "
                    f"{axis!r})")
    shifts, axes = _refused(call, np.broadcast_arrays, np.asarray(shift), np.asarray(axis))
    total = {}
    for s, d in zip(shifts.ravel(), axes.ravel()):
        d = _one_axis(call, a, int(d))
        total[d] = total.get(d, 0) + int(s)
    moved = False
    for d, s in total.items():
        n = a.shape[d]
        if n == 0 or s % n == 0:
            continue
        s %= n
        a = concatenate(call, [a[_along_slice(a.ndim, d, slice(n - s, None))],
                               a[_along_slice(a.ndim, d, slice(None, n - s))]], d,
                        a.codistributor)
        moved = True
    return a if moved else a.copy()


# -- joining, repeating, adding and removing axes ----------------------------------------------


def concatenate(call, arrays, axis, target=None):
    """``arrays`` (codistributed or replicated, at least one codistributed) joined along
    ``axis``, split by ``target`` (default: the first codistributed array's axis, its
    partition when that is not ``axis``, else the default one). Each codistributed
    operand moves to its share of the result (one all-to-all each, none when it is
    already there); replicated operands are sliced."""
    arrays = [np.asarray(x) if isinstance(x, (list, tuple)) else x for x in arrays]
    dist = [x for x in arrays if _codist(x)]
    if not dist:
        raise error(SpmdTypeError, call, "needs a codistributed array")
    ref = dist[0]
    ref._check_scope(call)
    for x in dist:
        x._check_scope(call)
        if x.family != ref.family:
            raise error(SpmdTypeError, call, f"the operands' local parts are of different "
                        f"families ({ref.family} and {x.family}); convert one")
    shapes = [x.shape if _codist(x) else np.shape(x) for x in arrays]
    if any(len(s) != ref.ndim for s in shapes):
        raise error(SpmdValueError, call, f"all the input arrays must have the same "
                    f"number of dimensions (shapes {shapes})")
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) or \
            not -ref.ndim <= axis < ref.ndim:
        raise error(SpmdValueError, call, f"axis {axis!r} is out of bounds for arrays of "
                    f"{ref.ndim} dimensions")
    axis = int(axis) % ref.ndim
    if any(tuple(s[:axis] + s[axis + 1:]) != ref.shape[:axis] + ref.shape[axis + 1:]
           for s in shapes):
        raise error(SpmdValueError, call, f"the input arrays' sizes must match except "
                    f"along axis {axis} (shapes {shapes})")
    shape = ref.shape[:axis] + (sum(s[axis] for s in shapes),) + ref.shape[axis + 1:]
    if target is None:
        target = Codistributor(ref.axis, ref.partition, shape) if ref.axis != axis else \
            Codistributor(axis).complete(shape)
    family = LOCAL[ref.family]
    mine = target.global_indices()
    pieces, start = [], 0
    for x, xshape in zip(arrays, shapes):
        n = xshape[axis]
        if target.axis == axis:  # each worker's share of this operand
            counts = tuple(max(0, min(o + c, start + n) - max(o, start))
                           for o, c in zip(offsets(target.partition), target.partition))
            lo = min(max(mine.start - start, 0), n)
            hi = max(min(mine.stop - start, n), lo)
            piece = Codistributor(axis, counts, xshape)
        else:
            lo, hi = mine.start, mine.stop
            piece = Codistributor(target.axis, target.partition, xshape)
        if _codist(x):
            pieces.append(x.local if x.codistributor == piece else x._moved(call, piece).local)
        else:
            part = x[_along_slice(len(xshape), piece.axis, slice(lo, hi))]
            pieces.append(family.asarray(part, ref.local))
        start += n
    return ref._new(family.cat(pieces, axis), target)


@implements(np.concatenate)
def _concatenate(arrays, axis=0, out=None, *, dtype=None, casting="same_kind"):
    call = "numpy.concatenate"
    _unsupported(call, out=out, dtype=dtype)
    if axis is None:
        return concatenate(call, [x.ravel() if _codist(x) else _array(x).reshape(-1)
                                  for x in arrays], 0)
    return concatenate(call, list(arrays), axis)


@implements(np.expand_dims)
def expand_dims(a, axis):
    """New axes of length 1: no communication."""
    call = "numpy.expand_dims"
    axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
    if any(isinstance(d, bool) or not isinstance(d, (int, np.integer)) for d in axes):
        raise error(SpmdTypeError, call, f"'axis' must be an int or a tuple of ints (got "
                    f"{axis!r})")  # (a float raised Python's own TypeError)
    ndim = a.ndim + len(axes)
    if any(isinstance(d, bool) or not isinstance(d, (int, np.integer)) or
           not -ndim <= d < ndim for d in axes):
        raise error(SpmdValueError, call, f"axis {axis!r} is out of bounds for the "
                    f"result of {ndim} dimensions")
    axes = tuple(sorted(int(d) % ndim for d in axes))
    if len(set(axes)) != len(axes):
        raise error(SpmdValueError, call, f"repeated axis in {axis!r}")
    shape, local_shape, at, it = [], [], 0, 0
    for d in range(ndim):
        if d in axes:
            shape.append(1)
            local_shape.append(1)
        else:
            if it == a.axis:
                at = d
            shape.append(a.shape[it])
            local_shape.append(a.local.shape[it])
            it += 1
    local = a.local.reshape(tuple(local_shape))
    if a._copies_on_read:  # (MATLAB's value semantics, as transpose)
        local = LOCAL[a.family].copy(local)
    return a._new(local, Codistributor(at, a.partition, tuple(shape)))


@implements(np.squeeze)
def _squeeze(a, axis=None):
    call = "numpy.squeeze"
    if axis is None:
        drop = tuple(d for d, n in enumerate(a.shape) if n == 1)
    else:
        drop = _axes(call, a, axis)
        if any(a.shape[d] != 1 for d in drop):
            raise error(SpmdValueError, call, "cannot select an axis to squeeze out which "
                        "has size not equal to one")
    if not drop:
        return a.copy()
    if len(drop) == a.ndim:  # numpy's 0-d array: its one element, on every worker
        return a[(0,) * a.ndim]
    if a.axis in drop:
        keep = [d for d in range(a.ndim) if d not in drop]
        a = a._moved(call, Codistributor(keep[0]).complete(a.shape))
    shape = tuple(n for d, n in enumerate(a.shape) if d not in drop)
    local = a.local.reshape(tuple(n for d, n in enumerate(a.local.shape) if d not in drop))
    at = a.axis - sum(1 for d in drop if d < a.axis)
    return a._new(local, Codistributor(at, a.partition, shape))


@implements(np.atleast_1d)
def _atleast_1d(*arys):
    out = [x if not _codist(x) or x.ndim >= 1 else x for x in arys]
    return out[0] if len(out) == 1 else out


@implements(np.atleast_2d)
def _atleast_2d(*arys):
    out = [(expand_dims(x, 0) if x.ndim == 1 else x) if _codist(x) else
           _array(x).reshape((1,) * (2 - _array(x).ndim) + tuple(_array(x).shape))
           for x in arys]
    return out[0] if len(out) == 1 else out


def _as_3d(x):
    """numpy's ``atleast_3d`` of one operand: a vector of n elements as 1-by-n-by-1, a
    matrix as m-by-n-by-1 (new axes of length 1: no communication)."""
    if _codist(x):
        return x if x.ndim >= 3 else expand_dims(x, (0, 2) if x.ndim == 1 else 2)
    x = _array(x)
    if x.ndim >= 3:
        return x
    shape = tuple(x.shape)
    return x.reshape(((1, 1, 1) if not shape else (1, shape[0], 1) if len(shape) == 1
                      else shape + (1,)))


@implements(np.atleast_3d)
def _atleast_3d(*arys):
    out = [_as_3d(x) for x in arys]
    return out[0] if len(out) == 1 else out


@implements(np.hstack)
def _hstack(tup, *, dtype=None, casting="same_kind"):
    _unsupported("numpy.hstack", dtype=dtype)
    arrays = list(tup)
    axis = 0 if all(np.ndim(x) == 1 if not _codist(x) else x.ndim == 1 for x in arrays) \
        else 1
    return concatenate("numpy.hstack", arrays, axis)


@implements(*[f for f in (np.vstack, getattr(np, "row_stack", None)) if f is not None])
def _vstack(tup, *, dtype=None, casting="same_kind"):
    _unsupported("numpy.vstack", dtype=dtype)
    return concatenate("numpy.vstack", [_atleast_2d(x) for x in tup], 0)


@implements(np.dstack)
def _dstack(tup):
    """MATLAB's ``cat(3, A, B)``: joined along the third axis, vectors and matrices
    taking numpy's ``atleast_3d`` shape first."""
    return concatenate("numpy.dstack", [_as_3d(x) for x in tup], 2)


@implements(np.block)
def _block(arrays):
    """MATLAB's block matrix ``[A B; C D]`` as numpy's ``np.block([[A, B], [C, D]])``:
    the innermost lists joined along the last axis, the lists of those along the one
    before, and so on, each operand first given leading axes of length 1 up to the
    result's dimensions. A list with a codistributed operand is joined as
    ``np.concatenate`` joins it (each operand moved once to its share); one of
    replicated operands as numpy joins them."""
    call = "numpy.block"
    depth = _block_depth(call, arrays, 0)
    if depth == 0:  # (numpy's: a copy of the one operand)
        return arrays.copy()
    leaves = list(_block_leaves(arrays))
    ndim = max([depth] + [x.ndim if _codist(x) else np.ndim(x) for x in leaves])

    def join(item, level):
        if level == depth:
            if _codist(item):
                return item if item.ndim == ndim else \
                    expand_dims(item, tuple(range(ndim - item.ndim)))
            item = _array(item)
            return item.reshape((1,) * (ndim - item.ndim) + tuple(item.shape))
        parts = [join(x, level + 1) for x in item]
        axis = ndim - depth + level
        if any(_codist(x) for x in parts):
            return concatenate(call, parts, axis)
        family = local_family(parts[0])
        if family is not None and all(local_family(x) == family for x in parts):
            return LOCAL[family].cat(parts, axis)
        return np.concatenate(parts, axis=axis)

    return join(arrays, 0)


def _block_depth(call, item, level):
    """How deep ``np.block``'s lists nest (numpy's rules: lists only, none empty, every
    operand at the same depth), the same on every worker."""
    if isinstance(item, tuple):
        raise error(SpmdTypeError, call, f"takes nested lists, not tuples (a tuple at "
                    f"depth {level})")
    if not isinstance(item, list):
        return level
    if not item:
        raise error(SpmdValueError, call, f"lists cannot be empty (an empty list at depth "
                    f"{level})")
    depths = {_block_depth(call, x, level + 1) for x in item}
    if len(depths) > 1:
        raise error(SpmdValueError, call, f"list depths are mismatched (operands at depths "
                    f"{sorted(depths)})")
    return depths.pop()


def _block_leaves(item):
    if isinstance(item, list):
        for x in item:
            yield from _block_leaves(x)
    else:
        yield item


@implements(np.column_stack)
def _column_stack(tup):
    arrays = [(expand_dims(x, 1) if _codist(x) else _array(x).reshape(-1, 1))
              if np.ndim(x) == 1 or (_codist(x) and x.ndim == 1) else x for x in tup]
    return concatenate("numpy.column_stack", arrays, 1)


@implements(np.stack)
def _stack(arrays, axis=0, out=None, *, dtype=None, casting="same_kind"):
    call = "numpy.stack"
    _unsupported(call, out=out, dtype=dtype)
    arrays = list(arrays)
    shapes = {x.shape if _codist(x) else np.shape(x) for x in arrays}
    if len(shapes) != 1:
        raise error(SpmdValueError, call, "all input arrays must have the same shape")
    ndim = len(next(iter(shapes))) + 1
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise error(SpmdTypeError, call, f"'axis' must be an int (got {axis!r})")
    if not -ndim <= axis < ndim:
        raise error(SpmdValueError, call, f"axis {axis!r} is out of bounds for the result "
                    f"of {ndim} dimensions")
    axis = int(axis) % ndim
    return concatenate(call, [expand_dims(x, axis) if _codist(x) else _array(x).reshape(
        tuple(np.shape(x)[:axis]) + (1,) + tuple(np.shape(x)[axis:])) for x in arrays], axis)


@implements(np.tile)
def _tile(A, reps):
    """numpy's ``tile`` (MATLAB's ``repmat``): the array joined to itself along each axis."""
    call = "numpy.tile"
    given = reps
    reps = tuple(_refused(call, lambda: np.asarray(reps, dtype=object).reshape(-1)))
    if not all(isinstance(r, (int, float, np.integer, np.floating, np.bool_))
               and float(r).is_integer() for r in reps):
        # int(1.5) would have tiled once where numpy (and MATLAB's repmat) refuse it
        raise error(SpmdTypeError, call, f"'reps' must be whole numbers (got {given!r})")
    reps = tuple(int(r) for r in reps)
    if any(r < 0 for r in reps):
        raise error(SpmdValueError, call, f"negative repetitions {reps}")
    while A.ndim < len(reps):
        A = expand_dims(A, 0)
    reps = (1,) * (A.ndim - len(reps)) + reps
    for d, r in enumerate(reps):
        if r == 0:
            A = A[_along_slice(A.ndim, d, slice(0, 0))]
        elif r > 1:
            A = concatenate(call, [A] * r, d)
    return A.copy() if all(r == 1 for r in reps) else A


@implements(np.repeat)
def _repeat(a, repeats, axis=None):
    """numpy's ``repeat`` (MATLAB's ``repelem`` along one dimension): each worker
    repeats the elements of its block, with no communication (a flattened array,
    ``axis=None``, is first raveled); the result is split where the block's copies
    fall."""
    call = "numpy.repeat"
    a._check_scope(call)
    if axis is None:
        a, axis = a.ravel(), 0
    axis = _one_axis(call, a, axis)
    if _codist(repeats):  # (MATLAB's repelem(v, counts) with codistributed counts)
        repeats._check_scope(call)
        repeats = LOCAL[repeats.family].host(repeats.gather())
    r = _on_host(repeats)
    if r.dtype.kind not in "iu" or r.ndim > 1 or (r < 0).any():
        raise error(SpmdValueError, call, f"'repeats' must be a non-negative int or a "
                    f"vector of them (got {repeats!r})")
    n = a.shape[axis]
    if r.ndim == 1 and r.shape[0] not in (1, n):
        raise error(SpmdValueError, call, f"'repeats' has {r.shape[0]} counts for {n} "
                    f"elements along axis {axis}")
    r = np.broadcast_to(r.reshape(-1), (n,)) if r.ndim else np.full(n, int(r))
    mine = a.global_indices(axis) if axis == a.axis else range(n)
    local = _host_call(a, a.local, lambda x: np.repeat(x, r[mine.start:mine.stop], axis))
    shape = a.shape[:axis] + (int(r.sum()),) + a.shape[axis + 1:]
    partition = a.partition if axis != a.axis else tuple(
        int(r[o:o + c].sum()) for o, c in zip(offsets(a.partition), a.partition))
    return a._new(local, Codistributor(a.axis, partition, shape))


@implements(np.delete)
def _delete(arr, obj, axis=None):
    """numpy's ``delete`` (MATLAB's ``D(:, k) = []``): each worker drops the deleted
    elements of its block, with no communication (a flattened array, ``axis=None``, is
    first raveled); the result is split where the kept elements lie."""
    call = "numpy.delete"
    arr._check_scope(call)
    if axis is None:
        arr, axis = arr.ravel(), 0
    axis = _one_axis(call, arr, axis)
    n = arr.shape[axis]
    if _codist(obj):
        obj = LOCAL[obj.family].host(obj.gather())
    try:  # numpy's own rules (negative indices, slices, masks), on the indices alone
        kept = np.delete(np.arange(n), obj)
    except IndexError as exc:  # numpy names the axis of that 1-D range: 0; name ``axis``
        raise error(SpmdIndexError, call, str(exc).replace(
            "for axis 0 with", f"for axis {axis} with")) from exc
    except (TypeError, ValueError) as exc:
        raise error(SpmdTypeError if isinstance(exc, TypeError) else SpmdValueError, call,
                    str(exc)) from exc
    shape = arr.shape[:axis] + (kept.size,) + arr.shape[axis + 1:]
    if axis != arr.axis:
        local = _host_call(arr, arr.local, lambda x: np.take(x, kept, axis))
        return arr._new(local, Codistributor(arr.axis, arr.partition, shape))
    mine = arr.global_indices()
    own = kept[(kept >= mine.start) & (kept < mine.stop)] - mine.start
    local = _host_call(arr, arr.local, lambda x: np.take(x, own, axis))
    partition = tuple(int(((kept >= o) & (kept < o + c)).sum())
                      for o, c in zip(offsets(arr.partition), arr.partition))
    return arr._new(local, Codistributor(axis, partition, shape))


@implements(np.pad)
def _pad(array, pad_width, mode="constant", **kwargs):
    """numpy's ``pad`` (MATLAB's ``padarray``: ``"replicate"`` is ``mode="edge"``,
    ``"circular"`` is ``"wrap"``, ``"symmetric"`` the same): the pads joined to the array
    along each axis in turn, as numpy pads (so corners are numpy's); ``"constant"``
    (``constant_values``), ``"edge"``, ``"wrap"``, ``"symmetric"``, ``"reflect"`` where the
    widths stay within the array; other modes and wider pads are computed on the
    gathered array."""
    call = "numpy.pad"
    array._check_scope(call)
    family = LOCAL[array.family]
    if np.asarray(pad_width).dtype.kind != "i":  # numpy's rule (1.5 padded 1 here)
        raise error(SpmdTypeError, call, f"'pad_width' must be of integral type (got "
                    f"{pad_width!r})")
    widths = _refused(call, lambda: np.broadcast_to(
        np.asarray(pad_width, dtype=np.int64), (array.ndim, 2)))
    if (widths < 0).any():
        raise error(SpmdValueError, call, f"'pad_width' cannot be negative (got {pad_width!r})")
    values = np.broadcast_to(np.asarray(kwargs.get("constant_values", 0)), (array.ndim, 2)) \
        if mode == "constant" else None
    within = mode in ("constant", "edge") or all(
        max(w) <= (n - 1 if mode == "reflect" else n)
        for w, n in zip(widths, array.shape)) and mode in ("wrap", "symmetric", "reflect")
    extra = set(kwargs) - ({"constant_values"} if mode == "constant" else set())
    if not within or extra or (mode != "constant" and array.size == 0):
        whole = np.asarray(_refused(call, lambda: np.pad(
            family.host(array.gather()), pad_width, mode, **kwargs)))
        return split(array, family.like(whole, array.local), whole.shape)
    out = array
    for d, ((before, after), n) in enumerate(zip(widths, array.shape)):
        if before == after == 0:
            continue
        at = lambda s, d=d: out[_along_slice(out.ndim, d, s)]  # noqa: E731
        if mode == "constant":
            shape = list(out.shape)
            parts = []
            for width, value in ((before, values[d][0]), (after, values[d][1])):
                shape[d] = width
                parts.append(family.asarray(np.full(tuple(shape), value,
                                                    dtype=family.dtype(out.local)),
                                            out.local))
            pieces = [parts[0], out, parts[1]]
        elif mode == "edge":
            pieces = [np.repeat(at(slice(0, 1)), before, axis=d), out,
                      np.repeat(at(slice(n - 1, n)), after, axis=d)]
        elif mode == "wrap":
            pieces = [at(slice(n - before, n)), out, at(slice(0, after))]
        else:  # symmetric repeats the edge element, reflect does not
            skip = 1 if mode == "reflect" else 0
            first = at(slice(skip, skip + before))
            last = at(slice(n - skip - after, n - skip))
            pieces = [np.flip(first, d) if before else first, out,
                      np.flip(last, d) if after else last]
        out = concatenate(call, [p for p in pieces if p.shape[d] or p is out], d,
                          Codistributor(array.axis).complete(
                              out.shape[:d] + (n + before + after,) + out.shape[d + 1:])
                          if d == array.axis else None)
    return out if out is not array else array.copy()


@implements(np.append)
def _append(arr, values, axis=None):
    """numpy's ``append``: ``concatenate`` (both raveled when ``axis`` is None)."""
    if axis is None:
        return concatenate("numpy.append", [x.ravel() if _codist(x) else
                                            _array(x).reshape(-1) for x in (arr, values)], 0)
    return concatenate("numpy.append", [arr, values], axis)


@implements(np.inner)
def _inner(a, b):
    """numpy's ``inner`` of two vectors (their ``dot``); of larger arrays, not
    available."""
    if np.ndim(a) > 1 or np.ndim(b) > 1:
        ref = a if _codist(a) else b
        ref._check_scope("numpy.inner")
        raise error(SpmdTypeError, "numpy.inner", "only vectors are available for a "
                    "codistributed array (for matrices, np.dot(A, B.T) or A @ B.T)")
    return np.dot(a, b)


@implements(np.moveaxis)
def _moveaxis(a, source, destination):
    """numpy's ``moveaxis``: a transpose (MATLAB's ``permute``)."""
    call = "numpy.moveaxis"
    normalize = np.lib.array_utils.normalize_axis_tuple
    source = _refused(call, normalize, source, a.ndim, "source")
    destination = _refused(call, normalize, destination, a.ndim, "destination")
    if len(source) != len(destination):
        raise error(SpmdValueError, call, "'source' and 'destination' must have the same "
                    "number of elements")
    order = [d for d in range(a.ndim) if d not in source]
    for dest, src in sorted(zip(destination, source)):
        order.insert(dest, src)
    return np.transpose(a, order)


@implements(np.kron)
def _kron(a, b):
    """Codistributed ``a`` with a replicated ``b`` of as many dimensions: each worker's
    blocks, no communication. Otherwise both are gathered and the product split by
    the default distribution."""
    call = "numpy.kron"
    if _codist(a) and not _codist(b) and np.ndim(b) == a.ndim:
        a._check_scope(call)
        bshape = np.shape(b)
        local = _host_call(a, a.local, lambda x: np.kron(x, _on_host(b)))
        shape = tuple(m * n for m, n in zip(a.shape, bshape))
        return a._new(local, Codistributor(a.axis, tuple(c * bshape[a.axis]
                                                         for c in a.partition), shape))
    ref = a if _codist(a) else b
    ref._check_scope(call)
    family = LOCAL[ref.family]
    host = [family.host(x.gather()) if _codist(x) else _on_host(x) for x in (a, b)]
    whole = np.kron(*host)
    return split(ref, family.like(whole, ref.local), whole.shape)


# -- finding nonzero elements -----------------------------------------------------------------


def _flat_nonzero(call, a):
    """(this worker's C-order flat indices of its nonzero elements, every worker's
    count): split along axis 0 (redistributed to it first otherwise), each worker's
    indices follow the previous workers'."""
    if a.ndim == 0:
        raise error(SpmdValueError, call, "not available for a 0-d array")
    rows = a if a.axis == 0 else a._moved(call, Codistributor(0).complete(a.shape))
    host = LOCAL[a.family].host(rows.local)
    inner = math.prod(a.shape[1:])
    idx = np.flatnonzero(host) + rows.global_indices().start * inner
    counts = tuple(gather(call, int(idx.size)))
    return idx.astype(np.int64), counts


def _vector(a, idx, counts):
    return a._new(LOCAL[a.family].like(idx, a.local),
                  Codistributor(0, counts, (sum(counts),)))


@implements(np.flatnonzero)
def _flatnonzero(a):
    """The flat (C-order) indices of the nonzero elements, a codistributed vector (one
    small gather of counts; an array not split by rows is redistributed to rows). For
    MATLAB's ``find(D)`` (column-major, 1-based) write ``np.flatnonzero(D.T) + 1``."""
    idx, counts = _flat_nonzero("numpy.flatnonzero", a)
    return _vector(a, idx, counts)


@implements(np.nonzero)
def nonzero(a):
    idx, counts = _flat_nonzero("numpy.nonzero", a)
    return tuple(_vector(a, i.astype(np.int64), counts)
                 for i in np.unravel_index(idx, a.shape))


@implements(np.argwhere)
def _argwhere(a):
    idx, counts = _flat_nonzero("numpy.argwhere", a)
    local = np.stack(np.unravel_index(idx, a.shape), axis=1).astype(np.int64) \
        if a.ndim else np.zeros((idx.size, 0), np.int64)
    return a._new(LOCAL[a.family].like(local, a.local),
                  Codistributor(0, counts, (sum(counts), a.ndim)))


# -- diagonals and triangles ---------------------------------------------------------------------


def _diagonal_number(call, name, k):
    """The number of a diagonal (``k``, ``offset``): an int, or a float or 0-d array that is
    whole, as MATLAB's ``triu(D, k)`` and ``diag(D, k)`` take it; anything else refused
    on every worker (``int(1.5)`` picked diagonal 1 where numpy's ``triu`` zeroed it all)."""
    if isinstance(k, np.ndarray) and k.ndim == 0:
        k = k.item()
    if not isinstance(k, (int, float, np.integer, np.floating, np.bool_)) or \
            not float(k).is_integer():
        raise error(SpmdTypeError, call, f"'{name}' must be an integer (got {k!r})")
    return int(k)


@implements(np.diagonal)
def diagonal(a, offset=0, axis1=0, axis2=1):
    """The ``offset`` diagonal of a 2-D array: each worker reads the elements in its
    block (no communication); a vector split as the array's block holds them."""
    call = "numpy.diagonal"
    if a.ndim != 2 or (axis1, axis2) != (0, 1):
        raise error(SpmdValueError, call, "only the diagonals of a 2-D array over axes "
                    "(0, 1) are available for a codistributed array")
    a._check_scope(call)
    k = _diagonal_number(call, "offset", offset)
    m, n = a.shape
    if a.axis == 0:
        first, stop = max(0, -k), min(m, n - k)  # the rows that hold one
    else:
        first, stop = max(0, k), min(n, m + k)  # the columns that hold one
    counts = tuple(max(0, min(o + c, stop) - max(o, first))
                   for o, c in zip(offsets(a.partition), a.partition))
    start = a.global_indices().start
    shift = k + start if a.axis == 0 else k - start
    local = LOCAL[a.family].copy(a.local.diagonal(shift))
    return a._new(local, Codistributor(0, counts, (sum(counts),)))


@implements(np.diag)
def _diag(v, k=0):
    """numpy's ``diag``: a 2-D array's diagonal (as ``diagonal``), or the square matrix
    with a vector on its ``k`` diagonal, split by rows like the vector (no
    communication)."""
    call = "numpy.diag"
    k = _diagonal_number(call, "k", k)
    if v.ndim == 2:
        return diagonal(v, k)
    if v.ndim != 1:
        raise error(SpmdValueError, call, "input must be 1- or 2-d")
    v._check_scope(call)
    n = v.shape[0]
    size = n + abs(k)
    partition = list(v.partition)
    if k >= 0:
        partition[-1] += k
    else:
        partition[0] -= k
    lead = -k if k < 0 and v._scope.rank == 0 else 0
    rows = partition[v._scope.rank]
    r = v.global_indices()
    j = np.arange(r.start, r.stop)
    out = np.zeros((rows, size), dtype=np.asarray(LOCAL[v.family].host(v.local)).dtype)
    out[np.arange(j.size) + lead, j + max(k, 0)] = LOCAL[v.family].host(v.local)
    return v._new(LOCAL[v.family].like(out, v.local),
                  Codistributor(0, tuple(partition), (size, size)))


def _triangle(name):
    def fn(m, k=0):
        call = f"numpy.{name}"
        if m.ndim < 2:
            raise error(SpmdValueError, call, "the array must be at least 2-D")
        m._check_scope(call)
        k = _diagonal_number(call, "k", k)
        start = m.global_indices().start
        shift = {m.ndim - 2: start, m.ndim - 1: -start}.get(m.axis, 0)
        local = _family_call(LOCAL[m.family], name, m.local, k + shift) \
            if m.family != "torch" else getattr(m.local, name)(k + shift)
        return m._new(local, m.codistributor)
    return fn


implements(np.triu)(_triangle("triu"))
implements(np.tril)(_triangle("tril"))


# -- element-wise and small ones ----------------------------------------------------------------


@implements(np.nan_to_num)
def _nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    """numpy's ``nan_to_num`` (MATLAB's ``D(isnan(D)) = 0`` and ``fillmissing`` with a
    constant): element-wise, no communication; ``copy=False`` writes into ``x``."""
    call = "numpy.nan_to_num"
    result = elementwise(call, (x,), {}, lambda fam, args, kw: _family_call(
        fam, "nan_to_num", *args, nan=nan, posinf=posinf, neginf=neginf))
    if copy:
        return result
    x.local[...] = result.local
    return x


@implements(np.digitize)
def _digitize(x, bins, right=False):
    """numpy's ``digitize`` (MATLAB's ``discretize``, shifted) of codistributed values
    in replicated bins (gathered if codistributed): each worker its own block."""
    call = "numpy.digitize"
    if not _codist(x):
        raise error(SpmdTypeError, call, "the values must be the codistributed array (the "
                    "bins are gathered if codistributed)")
    x._check_scope(call)
    edges = _on_host(bins.gather() if _codist(bins) else bins)
    return x._new(_host_call(x, x.local, lambda v: np.digitize(v, edges, right), call),
                  x.codistributor)


@implements(np.polyval)
def _polyval(p, x):
    """numpy's ``polyval`` (MATLAB's ``polyval(p, D)``): Horner's rule on each block,
    numpy's steps and bits; codistributed coefficients are gathered."""
    call = "numpy.polyval"
    if _codist(p):
        p._check_scope(call)
        p = LOCAL[p.family].host(p.gather())
    if not _codist(x):  # (codistributed coefficients, replicated points)
        return np.polyval(np.asarray(p), _on_host(x))
    x._check_scope(call)
    p = np.asarray(_on_host(p))
    if p.ndim == 0:  # (numpy's refusal: it iterates over the coefficients)
        raise error(SpmdTypeError, call, f"the coefficients must be a sequence, not a "
                    f"number (got {p.item()!r})")
    y = np.zeros_like(x)
    for c in p:
        y = y * x + c
    return y


@implements(np.unwrap)
def _unwrap(p, discont=None, axis=-1, *, period=2 * np.pi):
    """numpy's ``unwrap`` (MATLAB's ``unwrap(D, [], dim)``) along one axis, made whole
    as ``sort`` does when the array is split along it."""
    call = "numpy.unwrap"
    axis = _one_axis(call, p, axis)
    return along(call, p, axis, lambda x, d: np.unwrap(x, discont, axis=d, period=period))


@implements(np.take)
def _take(a, indices, axis=None, out=None, mode="raise"):
    """numpy's ``take``: the subscripts ``a[..., indices]`` along ``axis`` (of the
    flattened array without one), as indexing reads them (collective)."""
    call = "numpy.take"
    _unsupported(call, out=out)
    if mode != "raise":
        raise error(SpmdTypeError, call, f"mode={mode!r} is not available for a "
                    f"codistributed array (out-of-range indices raise)")
    if _codist(indices):
        indices._check_scope(call)
        indices = LOCAL[indices.family].host(indices.gather())
    # numpy's take casts the indices to integers: True is 1 (not a mask), [] takes
    # nothing, a list's numbers are truncated; an array of floats is refused
    try:
        indices = np.array(indices, dtype=np.intp) if isinstance(indices, (list, tuple)) \
            else np.asarray(indices)
    except (TypeError, ValueError) as exc:
        raise error(SpmdTypeError, call, f"the indices must be integers ({exc})") from None
    if indices.dtype.kind == "b":
        indices = indices.astype(np.intp)
    elif indices.dtype.kind not in "iu":
        raise error(SpmdTypeError, call, f"the indices must be integers (got an array of "
                    f"{indices.dtype})")
    if axis is None:
        a, axis = (a if a.ndim == 1 else a.ravel()), 0
    axis = _one_axis(call, a, axis)
    if indices.ndim <= 1:
        return a[_along_slice(a.ndim, axis, indices if indices.ndim else int(indices))]
    # (an array of indices of several dimensions: taken flat, then shaped as numpy's)
    taken = a[_along_slice(a.ndim, axis, indices.reshape(-1))]
    return np.reshape(taken, a.shape[:axis] + indices.shape + a.shape[axis + 1:])


@implements(np.fix)
def _fix(x, out=None):
    return elementwise("numpy.fix", (x,), {} if out is None else {"out": out},
                       lambda fam, args, kw: _family_call(fam, "fix", *args, **kw))


@implements(np.isrealobj)
def _isrealobj(x):
    return LOCAL[x.family].dtype(x.local).kind != "c"


@implements(np.iscomplexobj)
def _iscomplexobj(x):
    return LOCAL[x.family].dtype(x.local).kind == "c"


@implements(np.isreal)
def _isreal(x):
    return np.imag(x) == 0 if _iscomplexobj(x) else np.ones_like(x, dtype=bool)


@implements(np.iscomplex)
def _iscomplex(x):
    return np.imag(x) != 0 if _iscomplexobj(x) else np.zeros_like(x, dtype=bool)


@implements(np.isin)
def _isin(element, test_elements, assume_unique=False, invert=False, **kwargs):
    call = "numpy.isin"
    if _codist(test_elements):
        test_elements = test_elements.gather()
    test = _on_host(test_elements)
    if not _codist(element):
        raise error(SpmdTypeError, call, "the elements must be the codistributed array "
                    "(the test elements are gathered if codistributed)")
    return element._new(_host_call(element, element.local, lambda x: np.isin(
        x, test, assume_unique=assume_unique, invert=invert, **kwargs), call),
        element.codistributor)


@implements(np.outer)
def _outer(a, b, out=None):
    """The outer product of two vectors: split like the codistributed one (the other
    gathered if it is codistributed too)."""
    call = "numpy.outer"
    _unsupported(call, out=out)
    a = a.ravel() if _codist(a) and a.ndim != 1 else a
    b = b.ravel() if _codist(b) and b.ndim != 1 else b
    ref = a if _codist(a) else b
    ref._check_scope(call)
    if _codist(a) and _codist(b) and a.family != b.family:
        raise error(SpmdTypeError, call, f"the operands' local parts are of different "
                    f"families ({a.family} and {b.family}); convert one")
    family = LOCAL[ref.family]
    a, b = [x if _codist(x) else family.asarray(x, ref.local).reshape(-1) for x in (a, b)]
    shape = (math.prod(a.shape), math.prod(b.shape))
    if _codist(a):
        other = b.gather() if _codist(b) else b
        local = a.local[:, None] * other[None, :]
        return a._new(local, Codistributor(0, a.partition, shape))
    other = a
    return b._new(other[:, None] * b.local[None, :], Codistributor(1, b.partition, shape))


@implements(np.meshgrid)
def _meshgrid(*xi, copy=True, sparse=False, indexing="xy"):
    """numpy's ``meshgrid`` (MATLAB's ``[X, Y] = meshgrid(x, y)``; ``ndgrid`` is
    ``indexing="ij"``) of vectors, codistributed or replicated: each grid is split by
    the default distribution of the grid's shape, with the partition of the vector
    along that axis where it is codistributed (MATLAB's ``meshgrid`` of ``x`` split by
    columns gives grids split by columns as ``x`` is). Each worker fills its block from
    its part of that vector and the other vectors whole (gathered when codistributed).
    ``sparse=True``: the grid along the split axis is codistributed, the others are
    replicated arrays of the family. Always copies (``copy=False`` too)."""
    call = "numpy.meshgrid"
    if indexing not in ("xy", "ij"):
        raise error(SpmdValueError, call, f"'indexing' must be 'xy' or 'ij' (got "
                    f"{indexing!r})")
    ref = next(x for x in xi if _codist(x))
    ref._check_scope(call)
    families = {x.family for x in xi if _codist(x)}
    if len(families) > 1:
        raise error(SpmdTypeError, call, f"the vectors' local parts are of different "
                    f"families ({' and '.join(sorted(families))}); convert them to one")
    family = LOCAL[ref.family]
    # the grids' axis of each vector: numpy's 'xy' swaps the first two
    along_axes = list(range(len(xi)))
    if indexing == "xy" and len(xi) > 1:
        along_axes[:2] = [1, 0]
    sizes = [math.prod(x.shape if _codist(x) else np.shape(x)) for x in xi]
    shape = tuple(sizes[along_axes.index(d)] for d in range(len(xi)))
    axis = type(ref)._default_axis(shape)
    k = along_axes.index(axis)  # the vector along the split axis
    x = xi[k]
    if _codist(x) and (x.ndim != 1 and any(n != 1 for d, n in enumerate(x.shape)
                                           if d != x.axis)):
        x = x.ravel()
    if _codist(x):
        target = Codistributor(axis, x.partition, shape)
        mine = family.asarray(x.local, ref.local).reshape(-1)
    else:
        target = Codistributor(axis).complete(shape)
        r = target.global_indices()
        mine = family.asarray(x, ref.local).reshape(-1)[r.start:r.stop]
    grids = []
    for i, v in enumerate(xi):
        values = mine if i == k else family.asarray(
            v.gather() if _codist(v) else v, ref.local).reshape(-1)
        view = tuple(len(values) if d == along_axes[i] else 1 for d in range(len(xi)))
        if sparse:
            grid = family.copy(values.reshape(view))
            grids.append(ref._new(grid, Codistributor(axis, target.partition, tuple(
                sizes[i] if d == axis else n for d, n in enumerate(view))))
                if i == k else grid)
            continue
        grid = family.empty(target.local_shape(), family.dtype(values), ref.local)
        grid[...] = values.reshape(view)
        grids.append(ref._new(grid, target))
    return tuple(grids)


@implements(np.vdot)
def _vdot(a, b):
    sizes = [math.prod(np.shape(x)) for x in (a, b)]
    if sizes[0] != sizes[1]:
        raise error(SpmdValueError, "numpy.vdot", f"the vectors have different sizes "
                    f"({sizes[0]} and {sizes[1]})")
    if _codist(a) and _codist(b) and a.shape != b.shape:
        b = b.reshape(a.shape)
    elif not _codist(b):
        b = _array(b).reshape(a.shape)
    elif not _codist(a):
        a = _array(a).reshape(b.shape)
    # numpy's vdot conjugates complex ``a`` only and keeps the dtype (int8: int8)
    product = (np.conj(a) if _kind(a) == "c" else a) * b
    return np.sum(product, dtype=LOCAL[product.family].dtype(product.local))


# -- NaN-ignoring reductions ---------------------------------------------------------------------


def _nan_filled(a, fill):
    return np.where(np.isnan(a), fill, a) if LOCAL[a.family].dtype(a.local).kind in "fc" \
        else a


@implements(np.nansum)
def _nansum(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    return reduction("numpy.nansum", "sum", _nan_filled(a, 0), axis, dtype, keepdims, out,
                     initial, where)


@implements(np.nanprod)
def _nanprod(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    return reduction("numpy.nanprod", "prod", _nan_filled(a, 1), axis, dtype, keepdims,
                     out, initial, where)


implements(np.nancumsum)(lambda a, axis=None, dtype=None, out=None: scan(
    "numpy.nancumsum", "cumsum", _nan_filled(a, 0), axis, dtype, out))
implements(np.nancumprod)(lambda a, axis=None, dtype=None, out=None: scan(
    "numpy.nancumprod", "cumprod", _nan_filled(a, 1), axis, dtype, out))


@implements(np.nanmean)
def _nanmean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=None):
    _unsupported("numpy.nanmean", out=out, where=where)
    dtype = numpy_dtype(dtype)
    if LOCAL[a.family].dtype(a.local).kind not in "fc":
        return np.mean(a, axis=axis, dtype=dtype, keepdims=keepdims)
    total = _nansum(a, axis, dtype, keepdims=keepdims)
    count = reduction("numpy.nanmean", "sum", ~np.isnan(a), axis, np.int64, keepdims)
    result = total / count
    want = np.dtype(dtype) if dtype is not None else LOCAL[a.family].dtype(a.local)
    if isinstance(result, CodistributedArray):  # numpy's: float32 stays float32
        return result.astype(want)
    return result.astype(want) if isinstance(result, np.generic) else \
        LOCAL[a.family].astype(result, want)


@implements(np.nanvar)
def _nanvar(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None,
            mean=None, correction=None):
    """numpy's ``nanvar`` (MATLAB's ``var(D, w, dim, "omitnan")``): the squared distances
    from ``nanmean`` of the values that are not NaN, summed and divided by their count
    less ``ddof`` (NaN where that is not positive, as numpy)."""
    call = "numpy.nanvar"
    _unsupported(call, out=out, where=where, mean=mean, correction=correction)
    kind = LOCAL[a.family].dtype(a.local).kind
    if kind not in "fc":
        return np.var(a, axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims)
    m = _nanmean(a, axis, dtype, keepdims=True)
    d = _nan_filled(np.abs(a - m), 0)
    total = reduction(call, "sum", d * d, axis, None, keepdims)
    dof = reduction(call, "sum", ~np.isnan(a), axis, np.int64, keepdims) - ddof
    want = np.empty(0, dtype if dtype is not None else LOCAL[a.family].dtype(a.local)).real
    if isinstance(total, CodistributedArray):
        return np.where(dof > 0, total / np.maximum(dof, 1), np.nan).astype(want.dtype)
    value = float(total) / float(dof) if int(dof) > 0 else math.nan
    return want.dtype.type(value) if isinstance(total, np.generic) else \
        LOCAL[a.family].full((), value, want.dtype, a.local)


@implements(np.nanstd)
def _nanstd(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None,
            mean=None, correction=None):
    """numpy's ``nanstd`` (MATLAB's ``std(D, w, dim, "omitnan")``): ``nanvar``'s root."""
    return np.sqrt(_nanvar(a, axis, dtype, out, ddof, keepdims, where=where, mean=mean,
                           correction=correction))


def _nan_extremum(name):
    def fn(a, axis=None, out=None, keepdims=False, initial=None, where=None):
        call = f"numpy.nan{name}"
        kind = LOCAL[a.family].dtype(a.local).kind
        if kind not in "fc":
            return reduction(call, name, a, axis, None, keepdims, out, initial, where)
        fill = -np.inf if name == "max" else np.inf
        if kind == "c":  # numpy orders complex by real part, then imaginary part
            fill = complex(fill, fill)
        best = reduction(call, name, _nan_filled(a, fill), axis, None, keepdims, out,
                         initial, where)
        empty = reduction(call, "all", np.isnan(a), axis, None, keepdims)
        if isinstance(best, CodistributedArray):  # all NaN: NaN, as numpy
            return np.where(empty, np.nan, best)
        return best * np.nan if empty else best
    return fn


implements(np.nanmax)(_nan_extremum("max"))
implements(np.nanmin)(_nan_extremum("min"))


def _nan_arg(name):
    def fn(a, axis=None, out=None, *, keepdims=np._NoValue):
        """numpy's ``nanargmax``/``nanargmin`` (MATLAB's ``[M, I] = max(D, [], dim)``,
        which omits NaN): numpy's way, the arg of the array with NaN as -inf (+inf), and
        ValueError on every worker for a slice of NaN alone."""
        call = f"numpy.nanarg{name}"
        _unsupported(call, out=out)
        a._check_scope(call)
        if LOCAL[a.family].dtype(a.local).kind not in "fc":
            return _extrema.arg(call, name, a, axis, None, keepdims)
        empty = reduction(call, "all", np.isnan(a), axis, None, False)
        if bool(np.any(empty) if isinstance(empty, CodistributedArray) else empty):
            raise error(SpmdValueError, call, "All-NaN slice encountered")
        fill = -np.inf if name == "max" else np.inf
        return _extrema.arg(call, name, _nan_filled(a, fill), axis, None, keepdims)
    return fn


implements(np.nanargmax)(_nan_arg("max"))
implements(np.nanargmin)(_nan_arg("min"))


# -- linear systems (gathered) -------------------------------------------------------------------
# MATLAB's x = D \ b, inv(D), det(D): every worker gathers the operands and solves the
# whole system (the same data and library give every worker the same answer); a
# codistributed result is then split with no communication. Correct, not parallel: the
# O(n^3) work is done on every worker.


def _gathered(call, *operands):
    """The operands whole, as host numpy arrays, and the codistributed one to shape the
    result like (its family, device and class)."""
    ref = next(x for x in operands if _codist(x))
    ref._check_scope(call)
    family = LOCAL[ref.family]
    whole = [family.host(x.gather()) if _codist(x) else
             np.asarray(family.host(x) if type(x).__module__.startswith(("torch", "cupy"))
                        else x) for x in operands]
    return ref, family, whole


def _solved(call, fn, *arrays):
    """``fn(*arrays)`` of the gathered operands, numpy's refusal named as the call and
    worker's (a LinAlgError stays one): the same data everywhere, so raised everywhere."""
    try:
        return fn(*arrays)
    except np.linalg.LinAlgError as exc:
        raise error(np.linalg.LinAlgError, call, str(exc)) from None
    except (TypeError, ValueError) as exc:
        if isinstance(exc, SpmdError):
            raise
        kind = SpmdTypeError if isinstance(exc, TypeError) else SpmdValueError
        raise error(kind, call, str(exc)) from exc


def _shaped(ref, family, result):
    """A result of the gathered operands (an array, a number, or numpy's tuple of
    them: ``EigResult``, ``SVDResult``, ...) in ``ref``'s class and family, arrays split
    by the default distribution (without communication)."""
    if isinstance(result, tuple):
        parts = [_shaped(ref, family, r) for r in result]
        return type(result)._make(parts) if hasattr(type(result), "_make") else tuple(parts)
    result = np.asarray(result)
    local = family.like(result, ref.local)
    return _replicated_result(ref, local, result.shape)


def _gathered_linalg(fn):
    """numpy's ``fn`` (a factorisation or a matrix function: MATLAB's ``eig``, ``svd``,
    ``chol``, ``qr``, ``rank``, ``cond``, ``pinv``) of a codistributed matrix: gathered
    and computed on every worker, as ``solve``; its results split by the default
    distribution of their shapes."""
    call = _name(fn)

    def impl(a, *args, **kwargs):
        ref, family, (A,) = _gathered(call, a)
        for value in list(args) + list(kwargs.values()):
            if _codist(value):
                raise error(SpmdTypeError, call, "only the matrix may be codistributed")
        return _shaped(ref, family, _solved(call, lambda x: fn(x, *args, **kwargs), A))
    return impl


for _fn in (np.linalg.eig, np.linalg.eigh, np.linalg.eigvals, np.linalg.eigvalsh,
            np.linalg.svd, getattr(np.linalg, "svdvals", None), np.linalg.qr,
            np.linalg.cholesky, np.linalg.pinv, np.linalg.matrix_rank, np.linalg.cond,
            np.linalg.matrix_power, np.linalg.slogdet):
    if _fn is not None:
        implements(_fn)(_gathered_linalg(_fn))


@implements(np.linalg.solve)
def _solve(a, b):
    call = "numpy.linalg.solve"
    ref, family, (A, B) = _gathered(call, a, b)
    return _shaped(ref, family, _solved(call, np.linalg.solve, A, B))


@implements(np.linalg.lstsq)
def _lstsq(a, b, rcond=None):
    call = "numpy.linalg.lstsq"
    ref, family, (A, B) = _gathered(call, a, b)
    x, residuals, rank, sv = _solved(call, lambda p, q: np.linalg.lstsq(p, q, rcond=rcond),
                                     A, B)
    return _shaped(ref, family, x), residuals, rank, sv


@implements(np.linalg.inv)
def _inv(a):
    call = "numpy.linalg.inv"
    ref, family, (A,) = _gathered(call, a)
    return _shaped(ref, family, _solved(call, np.linalg.inv, A))


@implements(np.linalg.det)
def _det(a):
    call = "numpy.linalg.det"
    ref, family, (A,) = _gathered(call, a)
    return _shaped(ref, family, _solved(call, np.linalg.det, A))
