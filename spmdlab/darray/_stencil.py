"""MATLAB's ``conv2`` and ``filter2`` of plain and codistributed matrices.

The sum for each output element runs over the kernel's elements in one fixed order (row
by row), adding only the terms whose input element lies inside the matrix, as a direct
convolution does. A codistributed matrix is convolved where it lies: each worker first
receives the rows (or columns) its share of the output needs from its neighbours (one
all-to-all of overlapping blocks: its own block and a halo as deep as the kernel), then
adds the same terms in the same order as one process would, so the result has the
plain computation's bits at every layout. The output is split along the input's axis.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from .. import _pack
from .._agree import agree
from .._backends import LOCAL, classify
from ..errors import SpmdError, SpmdTypeError, SpmdValueError
from . import _exchange
from ._array import CodistributedArray
from ._codistributor import Codistributor, error, offsets

_SHAPES = ("full", "same", "valid")


def _window(n, m, shape):
    """(first full-convolution index, length) of the output along an axis of ``n``
    input and ``m`` kernel elements."""
    if shape == "full":
        return 0, n + m - 1 if n and m else 0
    if shape == "same":
        return m // 2, n
    return max(m - 1, 0), max(n - max(m - 1, 0), 0)  # MATLAB's size for an empty kernel


def _convolved(x, rows, cols, kernel, out_rows, out_cols, dtype):
    """The full convolution's rows ``out_rows`` and columns ``out_cols`` (ranges) of a
    matrix of which ``x`` holds rows ``rows`` and columns ``cols`` (every input element
    these outputs need). Integers and logicals are converted first, as MATLAB does (an
    int8 product would wrap)."""
    out = np.zeros((len(out_rows), len(out_cols)), dtype)
    x, kernel = x.astype(dtype, copy=False), kernel.astype(dtype, copy=False)
    mb, nb = kernel.shape
    for p in range(mb):
        f0, f1 = max(out_rows.start, rows.start + p), min(out_rows.stop, rows.stop + p)
        if f1 <= f0:
            continue
        for q in range(nb):
            g0, g1 = max(out_cols.start, cols.start + q), min(out_cols.stop, cols.stop + q)
            if g1 <= g0:
                continue
            out[f0 - out_rows.start:f1 - out_rows.start,
                g0 - out_cols.start:g1 - out_cols.start] += kernel[p, q] * x[
                    f0 - p - rows.start:f1 - p - rows.start,
                    g0 - q - cols.start:g1 - q - cols.start]
    return out


def _result(*dtypes):
    """The floats' precision (numpy's promotion among them); doubles for integers and
    logicals alone."""
    floats = [d for d in dtypes if d.kind == "f"]
    return np.result_type(*floats) if floats else np.dtype(np.float64)


def _matrix(call, name, value):
    """``value`` (a plain array, list or number) as a host numpy matrix, checked."""
    leaf = classify(value) if not isinstance(value, (list, tuple)) else None
    array = np.asarray(leaf.host() if leaf is not None else value)
    if array.ndim > 2 or array.dtype.kind not in "biuf":
        raise error(SpmdTypeError, call, f"'{name}' must be a real vector or matrix (got "
                    f"{array.dtype} of shape {array.shape})")
    return np.atleast_2d(array) if array.ndim < 2 else array


def conv2(A: Any, B: Any, C: Any = "full", shape: Optional[str] = None) -> Any:
    """``C = conv2(A, B)``, ``conv2(A, B, "same")``, ``conv2(A, B, "valid")``: MATLAB's
    2-D convolution of a matrix ``A`` (plain or codistributed) with a kernel ``B``
    (plain; a codistributed one is gathered). ``"same"``: the central part, ``A``'s
    size; ``"valid"``: the part computed without zero padding. Floats stay in their
    precision (numpy's promotion between them), integers and logicals become doubles
    (before they are multiplied, as MATLAB converts them). A codistributed ``A`` gives a
    codistributed result split along the same axis (its partition for ``"same"``):
    each worker receives the halo rows (or columns) it needs from its neighbours,
    once, then computes its share with the bits of one process's ``conv2``.
    ``conv2(u, v, A)`` and ``conv2(u, v, A, shape)``: MATLAB's separable form, each
    column of ``A`` convolved with the vector ``u``, then each row of that with the
    vector ``v`` (two passes, as MATLAB computes it).

    Examples
    --------
    >>> conv2(np.eye(3), np.ones((2, 2)))
    array([[1., 1., 0., 0.],
           [1., 2., 1., 0.],
           [0., 1., 2., 1.],
           [0., 0., 1., 1.]])
    >>> conv2(np.array([1.0, 1.0]), np.array([1.0, 1.0]), np.eye(3), "same")
    array([[2., 1., 0.],
           [1., 2., 1.],
           [0., 1., 1.]])

    MATLAB
    ------
    ``C = conv2(A, B)``, ``conv2(A, B, shape)``, ``conv2(u, v, A)``, ``conv2(u, v, A,
    shape)``
    """
    handle = _on_client(A, B, C)
    if handle is not None:  # the client of a pool: computed by the workers
        return handle._on_workers("conv2", conv2, A, B, C, shape)
    if isinstance(C, str):  # conv2(A, B, shape); shape= names it too
        return _conv2("conv2", "B", A, B, C if shape is None else shape)
    return _separable(A, B, C, "full" if shape is None else shape)


def _separable(u, v, A, shape):
    """MATLAB's ``conv2(u, v, A, shape)``: the columns of ``A`` convolved with ``u``, then
    the rows of the result with ``v``; ``u`` and ``v`` must be vectors."""
    call = "conv2"
    kernels = []
    for name, x, along in (("u", u, (-1, 1)), ("v", v, (1, -1))):
        if isinstance(x, CodistributedArray):
            x._check_scope(call)
            x = x.gather()
        try:
            vector = _matrix(call, name, x)
            if min(vector.shape) > 1:
                raise error(SpmdValueError, call, f"'{name}' must be a vector (got a matrix "
                            f"of shape {vector.shape}); conv2(A, B) takes a matrix kernel")
        except SpmdError as exc:
            if isinstance(A, CodistributedArray):  # collective: the others, waiting in
                agree(A._check_scope(call), call, 0, error=exc)  # its exchange, raise too
            raise
        kernels.append(vector.reshape(along))
    return _conv2(call, "v", _conv2(call, "u", A, kernels[0], shape), kernels[1], shape)


def _conv2(call, name, A, B, shape, flip=False):
    """``conv2`` for ``call``: the kernel ``B`` (the argument ``name``) is rotated by 180
    degrees first when ``flip`` (``filter2``'s correlation)."""
    if isinstance(B, CodistributedArray):
        B._check_scope(call)
        B = B.gather()
    try:
        if not isinstance(shape, str) or shape.lower() not in _SHAPES:
            raise error(SpmdValueError, call, f"'shape' must be 'full', 'same' or 'valid' "
                        f"(got {shape!r})")
        shape = shape.lower()
        kernel = _matrix(call, name, B)
    except SpmdError as exc:
        if isinstance(A, CodistributedArray):  # collective: the others, waiting in its
            agree(A._check_scope(call), call, 0, error=exc)  # exchange, raise too
        raise
    if flip:
        kernel = kernel[::-1, ::-1].copy()
    matrix = "A" if call == "conv2" else "X"  # (the matrix argument's name in MATLAB's)
    if not isinstance(A, CodistributedArray):
        a = _matrix(call, matrix, A)
        dtype = _result(a.dtype, kernel.dtype)
        (r0, m), (c0, n) = (_window(a.shape[0], kernel.shape[0], shape),
                            _window(a.shape[1], kernel.shape[1], shape))
        out = _convolved(a, range(a.shape[0]), range(a.shape[1]), kernel,
                         range(r0, r0 + m), range(c0, c0 + n), dtype)
        leaf = classify(A) if not isinstance(A, (list, tuple)) else None
        # (a scalar, Python's or numpy's, gives a numpy matrix, as a list does)
        return out if leaf is None or leaf.family not in LOCAL or leaf.family == "numpy" \
            else LOCAL[leaf.family].like(out, A)
    return _distributed(call, matrix, A, kernel, shape)


def _distributed(call, name, D, kernel, shape):
    scope = D._check_scope(call)
    family = LOCAL[D.family]
    kind = np.dtype(family.dtype(D.local))
    err = None
    if D.ndim != 2:
        err = error(SpmdValueError, call, f"'{name}' must be a matrix (got a codistributed "
                    f"array of shape {D.shape})")
    elif kind.kind not in "biuf":
        err = error(SpmdTypeError, call, f"'{name}' must be real (got {kind})")
    # every worker's kernel and shape alike (else the halos they exchange would not match,
    # or each worker would convolve its part with another kernel)
    values = _pack.content_digest(np.ascontiguousarray(kernel).tobytes())
    agree(scope, call, D._key(call, shape, kernel.shape, kernel.dtype.str, values),
          error=err,
          describe=lambda: D._describe(call, shape=shape, kernel=f"{kernel.dtype} "
                                       f"{kernel.shape} " + " ".join(np.array2string(
                                           kernel, threshold=9, precision=6).split())))
    dtype = _result(kind, kernel.dtype)
    axis, other = D.axis, 1 - D.axis
    windows = [_window(D.shape[d], kernel.shape[d], shape) for d in (0, 1)]
    out_shape = (windows[0][1], windows[1][1])
    first = windows[axis][0]
    partition = D.partition if shape == "same" else None
    target = Codistributor(axis, partition).complete(out_shape)
    m = kernel.shape[axis]
    n = D.shape[axis]
    # the input each worker's outputs need, along the split axis: a halo either side
    needs = []
    for o, c in zip(offsets(target.partition), target.partition):
        lo, hi = (o + first - (m - 1), o + first + c) if c else (0, 0)
        lo, hi = max(lo, 0), min(hi, n)
        needs.append((lo, hi) if hi > lo else (0, 0))
    src = _exchange.codist_blocks(D.codistributor)
    dst = _exchange.blocks(axis, needs, D.shape)
    host = np.asarray(family.host(_exchange.exchange(scope, call, D.local, D.shape, src,
                                                     dst, D.family)))
    mine = needs[scope.rank]
    start = offsets(target.partition)[scope.rank]
    count = target.partition[scope.rank]
    spans = [None, None]
    spans[axis] = range(mine[0], mine[1])
    spans[other] = range(D.shape[other])
    outs = [None, None]
    outs[axis] = range(first + start, first + start + count)
    outs[other] = range(windows[other][0], windows[other][0] + windows[other][1])
    local = _convolved(host, spans[0], spans[1], kernel, outs[0], outs[1], dtype)
    return D._new(family.like(local, D.local), target)


def filter2(h: Any, X: Any, shape: str = "same") -> Any:
    """``Y = filter2(h, X)``: MATLAB's 2-D correlation of ``X`` with the filter ``h``,
    ``conv2(X, rot90(h, 2), shape)``; ``"same"`` by default.

    Examples
    --------
    >>> filter2(np.array([[1.0, 2.0]]), np.array([[1.0, 1.0, 1.0]]))
    array([[3., 3., 1.]])

    MATLAB
    ------
    ``Y = filter2(h, X)``, ``filter2(h, X, shape)``
    """
    handle = _on_client(X, h)
    if handle is not None:  # the client of a pool: computed by the workers
        return handle._on_workers("filter2", filter2, h, X, shape)
    return _conv2("filter2", "h", X, h, shape, flip=True)


def _on_client(*values):
    from ._matlab import _on_client as found  # (that module imports this one)

    return found(*values)
