"""numpy's Fourier transforms, histograms, counts, integration and gradients for
codistributed arrays (MATLAB's ``fft``, ``ifft``, ``fft2``, ``histcounts``,
``accumarray``, ``trapz``, ``gradient``).

A transform along the distribution axis works as ``_shaping.along`` does (the axis made
whole on every worker by one all-to-all, transformed, moved back); along any other axis
it is local, so a 2-D transform of a matrix split by rows is the classic distributed FFT:
local transforms of the rows, one all-to-all, local transforms of the columns, one
all-to-all back. Histograms and counts are computed on each worker's block with the same
bins and summed over the workers (exact for counts). Results equal numpy's on the
gathered array: bit for bit for the transforms and the counts, up to the order of a
sum for weights and integrals.
"""

from __future__ import annotations

import builtins

import numpy as np

from .._backends import LOCAL
from .._ops import LOR, SUM
from .._reduce import reduce_op
from ..collectives import gather
from ..errors import SpmdTypeError, SpmdValueError
from ._codistributor import Codistributor, error
from ._numpy import (_axes, _on_host, _replicated_result, _unsupported, implements, layout,
                     split)
from ._shaping import (_along_slice, _codist, _host_call, _one_axis, _other_axis, _refused,
                       along, concatenate)


# -- Fourier transforms ------------------------------------------------------------------------


def _transform(fn):
    """numpy's 1-D transform ``fn`` (``fft``, ``ifft``, ``rfft``, ...) along one axis."""
    call = f"numpy.fft.{fn.__name__}"

    def impl(a, n=None, axis=-1, norm=None, out=None):
        _unsupported(call, out=out)
        axis = _one_axis(call, a, axis)
        return along(call, a, axis, lambda x, d: fn(x, n=n, axis=d, norm=norm))
    return impl


for _fn in (np.fft.fft, np.fft.ifft, np.fft.rfft, np.fft.irfft, np.fft.hfft, np.fft.ihfft):
    implements(_fn)(_transform(_fn))


def _transform_n(name, first, rest=None, default_axes=None, inverse_real=False):
    """numpy's ``fftn``, ``ifftn``, ``rfftn``, ``irfftn`` (their 2-D forms with
    ``default_axes``): the 1-D transforms along each axis in numpy's order (``first``
    along the last axis, then ``rest`` along the others from the last; ``irfftn``
    ``rest`` along the others from the first, then ``first`` along the last)."""
    call = f"numpy.fft.{name}"
    rest = rest or first

    def impl(a, s=None, axes=default_axes, norm=None, out=None):
        _unsupported(call, out=out)
        if axes is None:
            axes = tuple(range(a.ndim)) if s is None else tuple(range(-len(s), 0))
        axes = [_one_axis(call, a, d) for d in np.atleast_1d(axes).tolist()]
        if not axes:
            raise error(SpmdValueError, call, "'axes' names no axis")
        sizes = [a.shape[d] for d in axes] if s is None else list(s)
        if len(sizes) != len(axes):
            raise error(SpmdValueError, call, f"'s' and 'axes' must have the same length "
                        f"(got {len(sizes)} and {len(axes)})")
        sizes = [a.shape[d] if n == -1 else n for n, d in zip(sizes, axes)]
        if inverse_real and s is None:
            sizes[-1] = 2 * (a.shape[axes[-1]] - 1)
        last = (axes[-1], sizes[-1], first)
        others = [(d, n, rest) for d, n in zip(axes[:-1], sizes[:-1])]
        for d, n, fn in others + [last] if inverse_real else [last] + others[::-1]:
            a = along(call, a, d, lambda x, e, n=n, fn=fn: fn(x, n=n, axis=e, norm=norm))
        return a
    return impl


def _shift(name, sign):
    """numpy's ``fftshift`` / ``ifftshift`` (MATLAB's): a roll by half of each axis."""
    call = f"numpy.fft.{name}"

    def impl(x, axes=None):
        x._check_scope(call)
        axes = tuple(range(x.ndim)) if axes is None else axes
        axes = (axes,) if np.ndim(axes) == 0 else tuple(axes)
        axes = [_one_axis(call, x, d) for d in axes]
        return np.roll(x, [sign * (x.shape[d] // 2) for d in axes], axes)
    return impl


implements(np.fft.fftshift)(_shift("fftshift", 1))
implements(np.fft.ifftshift)(_shift("ifftshift", -1))
for _name, _first, _rest, _inverse in (("fftn", np.fft.fft, None, False),
                                       ("ifftn", np.fft.ifft, None, False),
                                       ("rfftn", np.fft.rfft, np.fft.fft, False),
                                       ("irfftn", np.fft.irfft, np.fft.ifft, True)):
    implements(getattr(np.fft, _name))(_transform_n(_name, _first, _rest, None, _inverse))
    implements(getattr(np.fft, _name[:-1] + "2"))(
        _transform_n(_name[:-1] + "2", _first, _rest, (-2, -1), _inverse))


# -- histograms and counts ----------------------------------------------------------------------


def _summed(call, local, a):
    """The sum over the workers, in worker order, of each worker's ``local`` array, its
    part of codistributed ``a`` (whose global shape and partition the workers agree on
    in the same call)."""
    return reduce_op(call, np.ascontiguousarray(local), SUM, None, layout(a))


def _local_of(call, a, other, name):
    """This worker's part of ``other`` where ``a`` holds its block: ``other`` is
    codistributed (moved to ``a``'s distribution when it differs) or replicated, of
    ``a``'s shape."""
    if _codist(other):
        if other.shape != a.shape:
            raise error(SpmdValueError, call, f"'{name}' must have the array's shape "
                        f"{a.shape} (got {other.shape})")
        if other.codistributor != a.codistributor:
            other = other._moved(call, a.codistributor)
        return np.asarray(LOCAL[other.family].host(other.local))
    other = _on_host(other)
    if other.shape != a.shape:
        raise error(SpmdValueError, call, f"'{name}' must have the array's shape {a.shape} "
                    f"(got {other.shape})")
    mine = a.global_indices()
    return other[_along_slice(a.ndim, a.axis, slice(mine.start, mine.stop))]


@implements(np.histogram)
def _histogram(a, bins=10, range=None, density=None, weights=None):
    """numpy's ``histogram`` (MATLAB's ``histcounts``): each worker counts its block
    into the same bins, the counts are summed; the bins of an int ``bins`` span the
    array's minimum and maximum (two reductions) unless ``range`` is given. Bins that
    numpy chooses from the data (``bins="auto"``, ...) need the whole array: gathered.
    The counts and edges are replicated, in the array's family."""
    call = "numpy.histogram"
    a._check_scope(call)
    family = LOCAL[a.family]
    if family.dtype(a.local) == bool:  # numpy's: bools are counted as uint8
        a = a.astype(np.uint8)
    if isinstance(bins, str) or _codist(bins):
        whole = family.host(a.gather())
        w = None if weights is None else (
            family.host(weights.gather()) if _codist(weights) else _on_host(weights))
        edges = family.host(bins.gather()) if _codist(bins) else bins
        hist, edges = _refused(call, np.histogram, whole, edges, range, density, w)
        return family.like(hist, a.local), family.like(edges, a.local)
    if range is None and np.ndim(bins) == 0:
        if a.size == 0:
            range = (0, 1)
        else:  # numpy scalars of the array's dtype: numpy makes the edges in it
            range = (np.asarray(family.host(np.min(a)))[()],
                     np.asarray(family.host(np.max(a)))[()])
    w = None if weights is None else _local_of(call, a, weights, "weights").reshape(-1)
    host = np.asarray(family.host(a.local)).reshape(-1)
    counts, edges = _refused(call, np.histogram, host, bins, range, None, w)
    total = _summed(call, counts, a)
    if density:  # numpy's: each count over the bin's width and the total
        total = total / np.diff(edges) / total.sum()
    return family.like(np.asarray(total), a.local), family.like(edges, a.local)


@implements(np.bincount)
def _bincount(x, weights=None, minlength=0):
    """numpy's ``bincount`` (MATLAB's ``accumarray(subs, vals)`` is
    ``np.bincount(subs - 1, weights=vals)``): each worker counts its block up to the
    largest value anywhere (one reduction), the counts are summed over the workers; the
    result is replicated, in the array's family."""
    call = "numpy.bincount"
    x._check_scope(call)
    family = LOCAL[x.family]
    if x.ndim != 1:
        raise error(SpmdValueError, call, f"'x' must be 1-D (got {x.ndim} dimensions)")
    if family.dtype(x.local).kind not in "iub":
        raise error(SpmdTypeError, call, f"'x' must hold integers (got "
                    f"{family.dtype(x.local)})")
    if isinstance(minlength, bool) or not isinstance(minlength, (int, np.integer)) or \
            minlength < 0:
        raise error(SpmdValueError, call, f"'minlength' must be an int, 0 or more (got "
                    f"{minlength!r})")
    length = int(minlength)
    if x.size:
        low = np.asarray(family.host(np.min(x))).item()
        if low < 0:
            raise error(SpmdValueError, call, f"'x' must have no negative elements (its "
                        f"least is {low})")
        length = builtins.max(length, int(np.asarray(family.host(np.max(x))).item()) + 1)
    w = None if weights is None else _local_of(call, x, weights, "weights")
    if w is not None and not np.can_cast(w.dtype, np.float64, "safe"):  # (refused here:
        # numpy refuses only a block that holds elements, so some workers would go on)
        raise error(SpmdTypeError, call, f"'weights' must be real numbers (got {w.dtype})")
    host = np.asarray(family.host(x.local))
    counts = _refused(call, lambda: np.bincount(host, w, minlength=length))
    if w is not None and x.size:  # numpy's float64 (an empty block's are int64 zeros)
        counts = counts.astype(np.float64)
    return family.like(np.asarray(_summed(call, counts, x)), x.local)


@implements(np.searchsorted)
def _searchsorted(a, v, side="left", sorter=None):
    """numpy's ``searchsorted`` of values ``v`` in a sorted codistributed vector: each
    worker counts the elements of its block before each value (the blocks follow each
    other in the sorted order, so the counts add up), summed over the workers (exact
    integers); replicated, of ``v``'s shape, in ``a``'s family. Codistributed values in a
    replicated sorted vector (MATLAB's ``discretize(D, edges)``): each worker looks up
    its own block (no communication), the result distributed as ``v``."""
    call = "numpy.searchsorted"
    _unsupported(call, sorter=sorter)
    if side not in ("left", "right"):
        raise error(SpmdValueError, call, f"'side' must be 'left' or 'right' (got {side!r})")
    if not _codist(a):
        v._check_scope(call)
        edges = _on_host(a)
        if edges.ndim != 1:
            raise error(SpmdValueError, call, f"the sorted array must be a vector (got "
                        f"shape {edges.shape})")
        return v._new(_host_call(v, v.local, lambda x: np.searchsorted(edges, x, side),
                                 call), v.codistributor)
    a._check_scope(call)
    if a.ndim != 1:
        raise error(SpmdValueError, call, f"the sorted array must be a vector (got shape "
                    f"{a.shape})")
    values = _on_host(v.gather() if _codist(v) else v)
    family = LOCAL[a.family]
    block = np.asarray(family.host(a.local))
    counts = np.asarray(_refused(call, lambda: np.searchsorted(block, values, side)),
                        dtype=np.int64)
    total = np.asarray(_summed(call, counts.reshape(-1), a)).reshape(counts.shape)
    return total[()] if total.ndim == 0 else family.like(total, a.local)


@implements(np.cross)
def _cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    """numpy's ``cross`` of 3-vectors along one axis (MATLAB's ``cross(A, B, dim)``):
    local where the arrays are split along another axis (else moved to one and back);
    the other operand codistributed alike (moved to the same distribution), or
    replicated: of the same shape, or one 3-vector."""
    call = "numpy.cross"
    if axis is not None:
        axisa = axisb = axisc = axis
    ref = a if _codist(a) else b
    ref._check_scope(call)
    other = b if ref is a else a
    if _codist(other) and (other.shape != ref.shape or other.family != ref.family):
        raise error(SpmdValueError, call, f"the codistributed operands must have one shape "
                    f"and family (got {a.shape} {a.family} and {b.shape} {b.family})")
    if not axisa == axisb == axisc:
        raise error(SpmdTypeError, call, f"the vectors must lie along one axis for "
                    f"codistributed arrays (got axisa={axisa}, axisb={axisb}, "
                    f"axisc={axisc})")
    d = _one_axis(call, ref, axisa)
    if ref.shape[d] != 3:
        raise error(SpmdValueError, call, f"the vectors along axis {d} must have 3 "
                    f"components (got {ref.shape[d]})")
    family = LOCAL[ref.family]
    if ref.ndim == 1:  # one 3-vector
        x = family.host(ref.gather())
        y = _on_host(other.gather() if _codist(other) else other)
        result = np.asarray(_refused(call, lambda: np.cross(
            *((x, y) if ref is a else (y, x)))))
        return split(ref, family.like(result, ref.local), result.shape)
    work = ref if ref.axis != d else ref._moved(
        call, Codistributor(_other_axis(ref, d)).complete(ref.shape))
    if _codist(other):
        y = family.host(other._moved(call, work.codistributor).local)
    else:
        y = _on_host(other)
        if y.shape == ref.shape:  # this worker's block of it
            r = work.codistributor.global_indices()
            y = y[_along_slice(ref.ndim, work.axis, slice(r.start, r.stop))]
        elif y.shape == (3,):  # one vector for all: along axis d
            y = y.reshape(tuple(3 if k == d else 1 for k in range(ref.ndim)))
        else:
            raise error(SpmdValueError, call, f"a replicated operand must have the "
                        f"codistributed one's shape {ref.shape} or be one 3-vector (got "
                        f"{y.shape})")
    x = family.host(work.local)
    local = np.asarray(_refused(call, lambda: np.cross(
        *((x, y) if ref is a else (y, x)), axis=d)))
    result = work._new(family.like(local, work.local), work.codistributor)
    return result if work is ref else result._moved(call, ref.codistributor)


# -- integration and gradients -----------------------------------------------------------------


def _spacing(call, y, x, dx, axis):
    """numpy's ``trapezoid`` spacing: ``dx``, or the differences of the coordinates
    ``x`` (a vector along ``axis``, or an array of ``y``'s shape) shaped to broadcast."""
    if x is None:
        return dx
    if _codist(x) and x.ndim == 1 and y.ndim > 1:
        x = x.gather()
    if not _codist(x) and np.ndim(x) == 1:
        d = np.diff(_on_host(x))
        if d.shape[0] != y.shape[axis] - 1:
            raise error(SpmdValueError, call, f"'x' has {d.shape[0] + 1} points, the "
                        f"array {y.shape[axis]} along axis {axis}")
        shape = [1] * y.ndim
        shape[axis] = d.shape[0]
        return d.reshape(shape)
    try:
        fits = np.broadcast_shapes(np.shape(x), y.shape) == y.shape
    except ValueError:
        fits = False
    if not fits:
        raise error(SpmdValueError, call, f"'x' must be a vector along axis {axis} or of the "
                    f"array's shape {y.shape} (got {np.shape(x)})")
    return np.diff(x, axis=axis)


@implements(np.trapezoid)
def _trapezoid(y, x=None, dx=1.0, axis=-1):
    """numpy's ``trapezoid`` (MATLAB's ``trapz``, along ``axis``): numpy's formula on
    codistributed slices, summed along ``axis`` (collective along the split axis)."""
    call = "numpy.trapezoid"
    y._check_scope(call)
    axis = _one_axis(call, y, axis)
    d = _spacing(call, y, x, dx, axis)
    upper = y[_along_slice(y.ndim, axis, slice(1, None))]
    lower = y[_along_slice(y.ndim, axis, slice(None, -1))]
    return np.sum(d * (upper + lower) / 2.0, axis=axis)


@implements(np.gradient)
def _gradient(f, *varargs, axis=None, edge_order=1):
    """numpy's ``gradient`` with uniform spacing (MATLAB's ``gradient``): central
    differences inside, one-sided ones (``edge_order`` 1 or 2) at the ends, from
    codistributed slices joined along each axis; one array per axis (a tuple for
    several), split as ``f``."""
    call = "numpy.gradient"
    f._check_scope(call)
    if f.dtype == np.bool_:  # (numpy's error: bools have no difference)
        raise error(SpmdTypeError, call, "the differences of booleans are not defined "
                    "(numpy's boolean subtract); convert to a number type first")
    axes = list(_axes(call, f, axis))
    if len(varargs) > 1 and len(varargs) != len(axes):
        raise error(SpmdTypeError, call, f"give one spacing, or one per axis ({len(axes)}; "
                    f"got {len(varargs)})")
    spacing = list(varargs) * len(axes) if len(varargs) == 1 else (
        list(varargs) or [1.0] * len(axes))
    if any(np.ndim(h) != 0 for h in spacing):
        raise error(SpmdTypeError, call, "only uniform spacing (a number per axis) is "
                    "available for a codistributed array")
    if edge_order not in (1, 2):
        raise error(SpmdValueError, call, f"'edge_order' must be 1 or 2 (got {edge_order!r})")
    if LOCAL[f.family].dtype(f.local).kind in "iub":
        f = f.astype(np.float64)  # numpy's: differences of ints are floats
    out = []
    for d, h in zip(axes, spacing):
        n = f.shape[d]
        if n < edge_order + 1:
            raise error(SpmdValueError, call, f"the array is too small along axis {d} "
                        f"({n}) for edge_order={edge_order}; at least {edge_order + 1}")
        at = lambda s, d=d: f[_along_slice(f.ndim, d, s)]  # noqa: E731
        inside = (at(slice(2, None)) - at(slice(None, -2))) / (2.0 * h)
        if edge_order == 1:  # (numpy's formulas, term by term: the same bits)
            first = (at(slice(1, 2)) - at(slice(0, 1))) / h
            last = (at(slice(n - 1, n)) - at(slice(n - 2, n - 1))) / h
        else:
            first = (-1.5 / h) * at(slice(0, 1)) + (2.0 / h) * at(slice(1, 2)) \
                + (-0.5 / h) * at(slice(2, 3))
            last = (0.5 / h) * at(slice(n - 3, n - 2)) + (-2.0 / h) * at(slice(n - 2, n - 1)) \
                + (1.5 / h) * at(slice(n - 1, n))
        out.append(concatenate(call, [first, inside, last], d, f.codistributor))
    return out[0] if len(out) == 1 else tuple(out)


# -- einsum, covariance --------------------------------------------------------------------------


def _einsum_labels(call, subscripts, count):
    """(each operand's labels, the output's labels) of explicit or implicit subscripts
    without an ellipsis; None for what this module does not split (an ellipsis)."""
    if not isinstance(subscripts, str):
        raise error(SpmdTypeError, call, "give the subscripts as a string ('ij,jk->ik')")
    text = subscripts.replace(" ", "")
    if "." in text:
        return None
    inputs, arrow, output = text.partition("->")
    parts = inputs.split(",")
    if len(parts) != count:
        raise error(SpmdValueError, call, f"the subscripts name {len(parts)} operands, "
                    f"{count} given")
    if not arrow:  # numpy's implicit output: the labels seen once, in alphabetical order
        seen = "".join(parts)
        output = "".join(sorted(c for c in set(seen) if seen.count(c) == 1))
    return parts, output


@implements(np.einsum)
def _einsum(subscripts, *operands, out=None, optimize=False, **kwargs):
    """numpy's ``einsum``. When every codistributed operand is split along one label
    (each holding it once, where it is split) each worker works on its blocks (a
    replicated operand with that label sliced to the block; codistributed operands
    split otherwise along it are moved to the first's partition): the result is split
    along that label where the output keeps it (no communication), and summed over the
    workers, in worker order, where it is contracted. Anything else (an ellipsis, a
    label split twice) is gathered and computed whole on every worker."""
    call = "numpy.einsum"
    _unsupported(call, out=out)
    ref = next(x for x in operands if _codist(x))
    ref._check_scope(call)
    family = LOCAL[ref.family]
    labels = _einsum_labels(call, subscripts, len(operands))

    def whole():
        host = [family.host(x.gather()) if _codist(x) else _on_host(x) for x in operands]
        result = np.asarray(_refused(call, lambda: np.einsum(subscripts, *host,
                                                            optimize=optimize, **kwargs)))
        return _replicated_result(ref, family.like(result, ref.local), result.shape)

    if labels is None:
        return whole()
    parts, output = labels
    split_label = parts[next(i for i, x in enumerate(operands) if x is ref)][ref.axis]

    def blockwise(p, x):  # the operand's blocks line up along the split label
        if len(p) != np.ndim(x):
            return False  # (numpy's own error, from the whole arrays)
        if _codist(x):
            return p.count(split_label) == 1 and p[x.axis] == split_label and \
                x.shape[x.axis] == ref.shape[ref.axis]
        return p.count(split_label) <= 1

    if not all(blockwise(p, x) for p, x in zip(parts, operands)):
        return whole()
    # numpy's checks of the labels' sizes, on the whole shapes (no data: empty views)
    dtype = family.dtype(ref.local)
    _refused(call, lambda: np.einsum_path(subscripts, *(
        np.broadcast_to(np.zeros((), dtype), np.shape(x) if not _codist(x) else x.shape)
        for x in operands)))
    partition = ref.partition
    mine = ref.global_indices()
    local = []
    for p, x in zip(parts, operands):
        if _codist(x):
            if x.partition != partition:
                x = x._moved(call, Codistributor(x.axis, partition, x.shape))
            local.append(np.asarray(family.host(x.local)))
        else:
            x = _on_host(x)
            if split_label in p:
                d = p.index(split_label)
                if x.shape[d] != ref.shape[ref.axis]:
                    raise error(SpmdValueError, call, f"operand with subscripts '{p}' has "
                                f"{x.shape[d]} elements along '{split_label}', the "
                                f"codistributed operand {ref.shape[ref.axis]}")
                x = x[_along_slice(x.ndim, d, slice(mine.start, mine.stop))]
            local.append(x)
    result = np.asarray(_refused(call, lambda: np.einsum(subscripts, *local,
                                                        optimize=optimize, **kwargs)))
    if split_label in output:
        at = output.index(split_label)
        shape = result.shape[:at] + (ref.shape[ref.axis],) + result.shape[at + 1:]
        return ref._new(family.like(result, ref.local), Codistributor(at, partition, shape))
    total = np.asarray(reduce_op(call, result if result.flags.c_contiguous else
                                 result.copy(), LOR if result.dtype == bool else SUM, None,
                                 layout(ref)))
    return _replicated_result(ref, family.like(total, ref.local), total.shape)


# numpy 2's cov takes a one-row matrix's columns as its variables with rowvar=False
# (numpy 1's, its one row): as the numpy installed does
_COV_ROWS = np.cov(np.ones((1, 2)), rowvar=False, bias=True).shape == (2, 2)


@implements(np.cov)
def _cov(m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None, *,
         dtype=None, _call="numpy.cov"):
    """numpy's ``cov`` (MATLAB's ``cov(D)`` is ``np.cov(D, rowvar=False)``: columns
    as variables): the means and the centred products of the observations each worker
    holds, summed over the workers (``einsum``); small, so the matrix is replicated.
    ``y`` joins ``m``'s variables."""
    call = _call
    _unsupported(call, fweights=fweights, aweights=aweights)
    ref = m if _codist(m) else y
    ref._check_scope(call)
    for name, v in (("m", m), ("y", y)):
        if np.ndim(v) > 2:
            raise error(SpmdValueError, call, f"'{name}' has more than 2 dimensions "
                        f"(shape {np.shape(v)})")
    x = m if m.ndim > 1 or not _codist(m) else m.reshape((1, m.shape[0]))
    if not _codist(x):
        x = np.atleast_2d(_on_host(x))
    if not rowvar and (x.shape[0] != 1 or _COV_ROWS and np.ndim(m) != 1):
        x = x.T
    if y is not None:
        other = y if _codist(y) else np.atleast_2d(_on_host(y))
        if other.ndim == 1:
            other = other.reshape((1, other.shape[0]))
        if not rowvar and other.shape[0] != 1:
            other = other.T
        x = concatenate(call, [x, other], 0)
    if not _codist(x):
        raise error(SpmdTypeError, call, "needs a codistributed operand")
    if ddof is None:
        ddof = 0 if bias else 1
    family = LOCAL[x.family]
    if dtype is None:  # numpy's: at least double precision (float32 in float64)
        dtype = np.result_type(family.dtype(x.local), np.float64)
    if family.dtype(x.local) != dtype:
        x = x.astype(dtype)
    n = x.shape[1]
    centred = x - np.mean(x, axis=1, keepdims=True)
    conj = np.conj(centred) if family.dtype(centred.local).kind == "c" else centred
    c = np.einsum("ik,jk->ij", centred, conj)
    c = family.host(c.gather()) if _codist(c) else np.asarray(family.host(c))
    # numpy's c *= 1 / (n - ddof): in c's dtype (float32 stays float32 with dtype=)
    c = np.multiply(c, np.true_divide(1, max(n - ddof, 0)), dtype=c.dtype)
    return family.like(np.asarray(c.squeeze()), ref.local)


@implements(np.corrcoef)
def _corrcoef(x, y=None, rowvar=True, bias=np._NoValue, ddof=np._NoValue, *, dtype=None):
    """numpy's ``corrcoef`` from ``cov``, as numpy computes it (replicated)."""
    _unsupported("numpy.corrcoef", bias=bias, ddof=ddof)
    ref = x if _codist(x) else y
    family = LOCAL[ref.family]
    c = np.asarray(family.host(_cov(x, y, rowvar, dtype=dtype, _call="numpy.corrcoef")))
    if c.ndim == 0:  # one variable: numpy's scalar (a 0-d tensor for torch's parts)
        one = family.like(np.asarray(c / c), ref.local)
        return one[()] if isinstance(one, np.ndarray) else one
    d = np.diag(c)
    stddev = np.sqrt(d.real)
    c = c / stddev[:, None]
    c = c / stddev[None, :]
    np.clip(c.real, -1, 1, out=c.real)
    if np.iscomplexobj(c):
        np.clip(c.imag, -1, 1, out=c.imag)
    return family.like(c, ref.local)


@implements(np.tensordot)
def _tensordot(a, b, axes=2):
    """numpy's ``tensordot`` as the ``einsum`` that names its axes."""
    call = "numpy.tensordot"
    na, nb = np.ndim(a), np.ndim(b)
    try:
        if isinstance(axes, (int, np.integer)):
            first, second = list(range(na - int(axes), na)), list(range(int(axes)))
        else:
            first, second = ([int(d) for d in np.atleast_1d(x)] for x in axes)
        first = [d % na for d in first] if na else first
        second = [d % nb for d in second] if nb else second
    except (TypeError, ValueError) as exc:
        raise error(SpmdValueError, call, f"'axes' must be an int or two sequences of "
                    f"axes (got {axes!r}): {exc}") from exc
    if len(first) != len(second) or len(set(first)) != len(first) or \
            any(d >= na for d in first) or any(d >= nb for d in second):
        raise error(SpmdValueError, call, f"'axes' {axes!r} do not pair the axes of arrays "
                    f"of {na} and {nb} dimensions")
    letters = iter("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    left = [next(letters) for _ in range(na)]
    right = [left[first[second.index(d)]] if d in second else next(letters)
             for d in range(nb)]
    out = [c for d, c in enumerate(left) if d not in first] + \
        [c for d, c in enumerate(right) if d not in second]
    return _einsum(f"{''.join(left)},{''.join(right)}->{''.join(out)}", a, b)


# -- convolution ---------------------------------------------------------------------------------


@implements(np.convolve)
def _convolve(a, v, mode="full"):
    """numpy's ``convolve`` (MATLAB's ``conv(u, v)``, ``conv(u, v, "same")``) of a
    codistributed vector with a shorter kernel of ``m`` elements: one small gather of
    the first and last ``2m - 1`` elements of every block gives each worker the
    ``m - 1`` elements before its block and the array's ends; each worker computes its
    block's share of the result (the last worker the ``m - 1`` extra ones of the full
    convolution), with the same products summed as numpy sums them (the ends as
    numpy's own convolution of the ends): the same bits. ``"same"`` and ``"valid"``
    are slices of it. A codistributed kernel is gathered; a codistributed kernel of a
    longer replicated vector gives a result computed whole."""
    call = "numpy.convolve"
    ref = a if _codist(a) else v
    ref._check_scope(call)
    family = LOCAL[ref.family]
    if np.ndim(a) != 1 or np.ndim(v) != 1:
        raise error(SpmdValueError, call, f"both operands must be vectors (got "
                    f"{np.ndim(a)} and {np.ndim(v)} dimensions)")
    if mode not in ("full", "same", "valid"):
        raise error(SpmdValueError, call, f"'mode' must be 'full', 'same' or 'valid' "
                    f"(got {mode!r})")
    n, m = np.shape(a)[0], np.shape(v)[0]
    if n == 0 or m == 0:
        raise error(SpmdValueError, call, f"{'a' if n == 0 else 'v'} cannot be empty")
    signal, kernel = (a, v) if n >= m else (v, a)  # numpy's: the longer one slides
    kernel = family.host(kernel.gather()) if _codist(kernel) else _on_host(kernel)
    if not _codist(signal):
        whole = np.convolve(_on_host(signal), kernel, mode)
        return _replicated_result(ref, family.like(whole, ref.local), whole.shape)
    n, m = signal.shape[0], kernel.shape[0]
    block = np.asarray(family.host(signal.local))
    reach = 2 * m - 1
    ends = gather(call, (block[:reach], block[max(0, block.shape[0] - reach):]))
    rank = signal._scope.rank
    head = np.concatenate([first for first, _ in ends])[:min(n, reach)]
    tail = np.concatenate([last for _, last in ends])[-min(n, reach):]
    before = np.concatenate([last for _, last in ends[:rank]] + [block[:0]])
    before = before[max(0, before.shape[0] - (m - 1)):]
    s = signal.global_indices().start
    e = s + block.shape[0] + (m - 1 if rank == signal._scope.size - 1 else 0)
    dtype = np.result_type(block, kernel)
    local = np.empty(e - s, dtype)
    lo, hi = min(max(s, m - 1), e), max(min(e, n), min(max(s, m - 1), e))
    if s < lo:  # the first m - 1: numpy's own, from the head
        local[:lo - s] = np.convolve(head, kernel, "full")[s:lo]
    if lo < hi:  # full overlaps: windows of m elements
        ext = np.concatenate([before, block])  # elements s - len(before) .. of the array
        at = s - before.shape[0]
        local[lo - s:hi - s] = np.convolve(ext[lo - m + 1 - at:hi - at], kernel, "valid")
    if hi < e:  # the last m - 1 of the full convolution: numpy's own, from the tail
        right = np.convolve(tail, kernel, "full")
        local[hi - s:] = right[hi - (n - tail.shape[0]):e - (n - tail.shape[0])]
    partition = signal.partition[:-1] + (signal.partition[-1] + m - 1,)
    full = signal._new(family.like(local, signal.local),
                       Codistributor(0, partition, (n + m - 1,)))
    if mode == "full":
        return full
    length = n if mode == "same" else n - m + 1
    start = (m - 1) // 2 if mode == "same" else m - 1
    return full[start:start + length]
