"""numpy's sorting, differences, joining, repeating, flipping, shifting, diagonal,
nonzero and order-statistic functions on codistributed arrays (MATLAB's sort, diff,
cat/horzcat/vertcat, repmat, flip/fliplr/flipud, circshift, diag, triu/tril, find,
median, ...), against numpy on the whole array, split along each axis, at any worker
count (uneven partitions; more workers than rows or columns)."""

import warnings

import numpy as np
import pytest

from spmdlab import (CodistributedArray, Codistributor, SpmdIndexError, SpmdTypeError,
                     SpmdValueError, distribute, spmd_size)
from spmdlab.matlab import codistributed, codistributor1d

from conftest import host

pytestmark = pytest.mark.mpi


def value(x):
    return host(x.gather() if isinstance(x, CodistributedArray) else x)


def arrays(backend):
    """(numpy array, codistributed array) pairs: every split, both classes, shapes with
    fewer rows or columns than workers, repeated values and negative zeros."""
    n = spmd_size()
    for shape in [(n + 1, 3), (2, n + 2), (2 * n + 1, 1)]:
        A = ((np.arange(np.prod(shape), dtype=float).reshape(shape) * 1.5 - 4) % 7 - 3)
        for axis in (0, 1):
            yield A, distribute(backend.make(A), axis=axis)
            yield A, codistributed(backend.make(A), codistributor1d(axis + 1))


def col(D):
    """D's first column as a codistributed vector (``D[:, 0]`` of an array split by
    columns is one worker's column read by every worker: a replicated array, which
    numpy's own functions refuse when it lives on a GPU)."""
    v = D[:, 0]
    return v if isinstance(v, CodistributedArray) else distribute(v)


def row(D):
    v = D[0, :]
    return v if isinstance(v, CodistributedArray) else distribute(v)


def same(got, expected):
    got = value(got)
    assert got.shape == np.shape(expected)
    assert np.array_equal(got, expected, equal_nan=True), (got, expected)


def test_sort_argsort_along_every_axis_and_vectors(backend):
    for A, D in arrays(backend):
        for axis in (0, 1, -1):
            same(np.sort(D, axis=axis), np.sort(A, axis=axis))
            same(np.argsort(D, axis=axis, kind="stable"),
                 np.argsort(A, axis=axis, kind="stable"))
        same(np.sort(D, axis=None), np.sort(A, axis=None))
        same(np.sort(col(D)), np.sort(A[:, 0]))                 # MATLAB's sort(v)
        same(np.argsort(row(D), kind="stable"), np.argsort(A[0, :], kind="stable"))
        E = D.copy()
        E.sort(axis=0)                                           # in place, same split
        assert E.codistributor == D.codistributor
        same(E, np.sort(A, axis=0))
        assert np.sort(D, axis=D.axis).codistributor == D.codistributor


def test_median_percentile_ptp(backend):
    for A, D in arrays(backend):
        for axis in (0, 1):
            same(np.median(D, axis=axis), np.median(A, axis=axis))
            same(np.median(D, axis=axis, keepdims=True),
                 np.median(A, axis=axis, keepdims=True))
            same(np.percentile(D, 30, axis=axis), np.percentile(A, 30, axis=axis))
            same(np.ptp(D, axis=axis), np.ptp(A, axis=axis))
        assert float(value(np.median(D))) == np.median(A)
        assert float(value(np.median(col(D)))) == np.median(A[:, 0])
        same(np.median(D, axis=(0, 1)), np.median(A, axis=(0, 1)))  # median(D, "all")
        same(np.median(D, axis=(1, 0), keepdims=True),
             np.median(A, axis=(0, 1), keepdims=True))


def test_statistics_over_several_axes(backend):
    # MATLAB's median(D, vecdim), prctile(D, p, vecdim): the split moved off them once
    n = spmd_size()
    A = np.sin(np.arange((n + 1) * 3 * 4, dtype=float)).reshape(n + 1, 3, 4)
    for axis in range(3):
        D = distribute(backend.make(A), axis=axis)
        for axes in ((0, 1), (1, 2), (0, 2), (2, -3)):
            for keepdims in (False, True):
                same(np.median(D, axis=axes, keepdims=keepdims),
                     np.median(A, axis=axes, keepdims=keepdims))
            same(np.nanmedian(D, axis=axes), np.nanmedian(A, axis=axes))
            same(np.percentile(D, 30, axis=axes), np.percentile(A, 30, axis=axes))
        same(np.median(D, axis=(0, 1, 2)), np.median(A))
        with pytest.raises(SpmdValueError, match=r"numpy.median \(worker \d+ of \d+\): "
                           r"repeated axis"):
            np.median(D, axis=(1, 1))


def test_statistics_over_several_axes_of_an_empty_array(backend):
    # a worker that holds none of the axis kept gets an empty block (numpy's median over
    # several axes of a (0, 0, 2) block refused to reshape it: on that worker only,
    # while the others went on); numpy's refusal of the percentile of no values is named
    n = spmd_size()
    E = np.zeros((0, max(n - 1, 1), 2))
    for axis in range(3):
        D = distribute(backend.make(E), axis=axis)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            for keepdims in (False, True):
                same(np.median(D, axis=(0, 2), keepdims=keepdims),
                     np.median(E, axis=(0, 2), keepdims=keepdims))
                same(np.nanmedian(D, axis=(2, 0), keepdims=keepdims),
                     np.nanmedian(E, axis=(0, 2), keepdims=keepdims))
        for axes in ((0, 2), 0):
            with pytest.raises(SpmdIndexError, match=r"numpy.percentile \(worker \d+ of "
                               r"\d+\): index -1 is out of bounds"):
                np.percentile(D, 50, axis=axes)


def test_diff_flip_roll(backend):
    for A, D in arrays(backend):
        for axis in (0, 1):
            for n in (1, 2):
                same(np.diff(D, n, axis=axis), np.diff(A, n, axis=axis))
            same(np.flip(D, axis), np.flip(A, axis))
            for s in (1, -2, 7):
                same(np.roll(D, s, axis=axis), np.roll(A, s, axis=axis))
        same(np.diff(D > 0, axis=0), np.diff(A > 0, axis=0))     # bools: not_equal
        for axis in (0, 1):  # numpy's prepend/append: a number is one slice
            for options in ({"prepend": 0.0}, {"append": 1.5}, {"n": 2, "prepend": -1.0},
                            {"prepend": 0.0, "append": 2.0}):
                same(np.diff(D, axis=axis, **options), np.diff(A, axis=axis, **options))
            edge = A.take([0], axis=axis)
            same(np.diff(D, axis=axis, prepend=backend.make(edge)),
                 np.diff(A, axis=axis, prepend=edge))
        same(np.diff(col(D), append=col(D)), np.diff(A[:, 0], append=A[:, 0]))
        same(np.diff(col(D)), np.diff(A[:, 0]))
        same(np.fliplr(D), np.fliplr(A))
        same(np.flipud(D), np.flipud(A))
        same(np.roll(D, 5), np.roll(A, 5))
        same(np.roll(D, (1, 2), axis=(0, 1)), np.roll(A, (1, 2), axis=(0, 1)))


def test_meshgrid(backend):
    # MATLAB's [X, Y] = meshgrid(x, y) and ndgrid of codistributed or replicated vectors
    n = spmd_size()
    x, y, z = np.linspace(0, 1, n + 2), np.arange(3.0), np.arange(2 * n + 1)
    for make in (lambda v: distribute(backend.make(v)),
                 lambda v: codistributed(backend.make(v.reshape(1, -1)))):  # a row
        for args in ((make(x), backend.make(y)), (backend.make(x), make(y)),
                     (make(x), make(y)), (make(x), backend.make(y), make(z)), (make(z),)):
            plain = [value(v) for v in args]
            plain = [v.reshape(-1) for v in plain]
            for indexing in ("xy", "ij"):
                for sparse in (False, True):
                    got = np.meshgrid(*args, indexing=indexing, sparse=sparse)
                    expected = np.meshgrid(*plain, indexing=indexing, sparse=sparse)
                    assert isinstance(got, tuple) and len(got) == len(expected)
                    for g, e in zip(got, expected):
                        same(g, e)
    X, Y = np.meshgrid(codistributed(backend.make(x.reshape(1, -1))), backend.make(y))
    assert X.axis == Y.axis == 1
    assert X.partition == tuple(codistributor1d.defaultPartition(n + 2))
    X, Y = np.meshgrid(distribute(backend.make(x)), distribute(backend.make(y)))
    assert X.axis == Y.axis == 0 and X.partition == Y.partition  # rows: y's partition
    with pytest.raises(SpmdValueError, match=r"numpy.meshgrid \(worker \d+ of \d+\): "
                       r"'indexing' .*'yx'"):
        np.meshgrid(X, indexing="yx")


def test_concatenate_stack_tile_kron(backend):
    for A, D in arrays(backend):
        B = A * 2 - 1
        E = distribute(backend.make(B), axis=1 - D.axis)         # another split
        for axis in (0, 1):
            same(np.concatenate([D, E, backend.make(A)], axis=axis),
                 np.concatenate([A, B, A], axis=axis))
            same(np.stack([D, E], axis=axis), np.stack([A, B], axis=axis))
        same(np.hstack([D, E]), np.hstack([A, B]))               # [D E]
        same(np.vstack([D, E]), np.vstack([A, B]))               # [D; E]
        same(np.concatenate([col(D), col(E)]), np.concatenate([A[:, 0], B[:, 0]]))
        same(np.vstack([col(D), col(D)]), np.vstack([A[:, 0], A[:, 0]]))
        same(np.column_stack([col(D), col(E)]), np.column_stack([A[:, 0], B[:, 0]]))
        # with a replicated operand of the same family (on a GPU: numpy's own asarray,
        # ravel and expand_dims refuse it)
        rep = backend.make(B[:, 0])
        same(np.column_stack([col(D), rep]), np.column_stack([A[:, 0], B[:, 0]]))
        same(np.concatenate([col(D), rep], axis=None), np.concatenate([A[:, 0], B[:, 0]]))
        same(np.stack([col(D), rep], axis=-1), np.stack([A[:, 0], B[:, 0]], axis=-1))
        same(np.vstack([col(D), rep]), np.vstack([A[:, 0], B[:, 0]]))
        assert np.isclose(float(value(np.vdot(col(D), rep))), np.vdot(A[:, 0], B[:, 0]))
        for reps in [(2, 3), 3, (1, 1), (0, 2), (2, 1, 2)]:
            same(np.tile(D, reps), np.tile(A, reps))             # repmat(D, m, n)
        for reps in [1.5, (2, 0.5), "2"]:     # refused on every worker, as numpy refuses them
            with pytest.raises(SpmdTypeError, match=r"numpy.tile \(worker \d+ of \d+\): 'reps' "
                               r"must be whole numbers"):  # (1.5 tiled once, silently)
                np.tile(D, reps)
        same(np.kron(D, np.eye(2)), np.kron(A, np.eye(2)))
        same(np.kron(np.eye(2), D), np.kron(np.eye(2), A))
        same(np.expand_dims(D, 0), np.expand_dims(A, 0))
        same(np.squeeze(D[:1, :]), np.squeeze(A[:1, :]))
        same(np.atleast_2d(col(D)), np.atleast_2d(A[:, 0]))
        # MATLAB's cat(3, D, E) (refused: "not available for a CodistributedArray")
        same(np.dstack([D, E]), np.dstack([A, B]))
        same(np.dstack([np.dstack([D, E]), backend.make(A)]), np.dstack([A, B, A]))
        same(np.dstack([col(D), rep]), np.dstack([A[:, 0], B[:, 0]]))
        same(np.atleast_3d(D), np.atleast_3d(A))
        same(np.atleast_3d(col(D)), np.atleast_3d(A[:, 0]))
        # MATLAB's block matrix [D E; E D] (refused: "not available for a CodistributedArray")
        same(np.block([[D, E], [E, D]]), np.block([[A, B], [B, A]]))
        same(np.block([[D, backend.make(B)], [E, D]]), np.block([[A, B], [B, A]]))
        same(np.block([col(D), rep]), np.block([A[:, 0], B[:, 0]]))
        with pytest.raises(SpmdTypeError, match=r"numpy.block \(worker \d+ of \d+\): takes "
                           r"nested lists, not tuples"):
            np.block([D, (E,)])
        with pytest.raises(SpmdValueError, match=r"numpy.block \(worker \d+ of \d+\): list "
                           r"depths are mismatched"):
            np.block([[D, E], D])


def test_nonzero_find(backend):
    for A, D in arrays(backend):
        same(np.flatnonzero(D), np.flatnonzero(A))
        same(np.flatnonzero(D.T) + 1, np.flatnonzero(A.T) + 1)   # MATLAB's find(D)
        for got, expected in zip(np.nonzero(D > 0), np.nonzero(A > 0)):
            same(got, expected)
        for got, expected in zip(D.nonzero(), A.nonzero()):
            same(got, expected)
        same(np.argwhere(D), np.argwhere(A))
        same(np.flatnonzero(col(D) > 0), np.flatnonzero(A[:, 0] > 0))
        # np.where(condition) is numpy's np.nonzero(condition) (MATLAB's [i, j] =
        # find(D > 0) ported as numpy writes it; it was refused as a gather)
        found = np.where(D > 0)
        assert isinstance(found, tuple) and len(found) == 2
        for got, expected in zip(found, np.where(A > 0)):
            same(got, expected)
        with pytest.raises(SpmdValueError, match=r"numpy.where \(worker \d+ of \d+\): "
                           r"either both or neither of x and y"):
            np.where(D > 0, D)


def test_diag_triangles(backend):
    for A, D in arrays(backend):
        for k in (-2, -1, 0, 1, 3):
            same(np.diag(D, k), np.diag(A, k))
            same(D.diagonal(k), A.diagonal(k))
            same(np.triu(D, k), np.triu(A, k))
            same(np.tril(D, k), np.tril(A, k))
            same(np.diag(col(D), k), np.diag(A[:, 0], k))       # a vector on a diagonal
            same(np.diag(row(D), k), np.diag(A[0, :], k))
        same(np.triu(D, 1.0), np.triu(A, 1))                    # MATLAB's triu(D, 1): a double
        # a diagonal that is not a whole number is refused on every worker (triu(D, 1.5)
        # kept diagonal 1 where numpy's triu zeroed the whole matrix; diag took diagonal 1)
        for f, name in ((lambda: np.triu(D, 1.5), "triu"), (lambda: np.tril(D, "1"), "tril"),
                        (lambda: np.diag(D, 0.5), "diag"), (lambda: np.diag(col(D), 1.5), "diag"),
                        (lambda: D.diagonal(-1.5), "diagonal")):
            with pytest.raises(SpmdTypeError, match=rf"numpy.{name} \(worker \d+ of \d+\): "
                               r"'(k|offset)' must be an integer"):
                f()


def test_small_ones(backend):
    for A, D in arrays(backend):
        same(np.fix(D), np.fix(A))
        same(np.isin(D, [0.0, 1.5]), np.isin(A, [0.0, 1.5]))
        same(np.outer(col(D), row(D)), np.outer(A[:, 0], A[0, :]))
        assert np.isrealobj(D) and not np.iscomplexobj(D)
        same(np.isreal(D), np.isreal(A))
        N = np.where(D > 1, np.nan, D)
        M = np.where(A > 1, np.nan, A)
        for axis in (None, 0, 1):
            for f in (np.nansum, np.nanmax, np.nanmin):
                assert np.allclose(value(f(N, axis=axis)), f(M, axis=axis), equal_nan=True)
        assert np.isclose(float(value(np.nanmean(N))), np.nanmean(M))
        assert np.isclose(float(value(np.vdot(D, D))), np.vdot(A, A))
        assert D[:1, :1].item() == A[0, 0]


def test_nan_reductions_and_vdot_keep_numpys_dtype_and_order(backend):
    # nanmean of float32 is float32; nanmax/nanmin of complex leave NaN out (numpy's
    # order: real part, then imaginary part); vdot of int8 is int8, of bools a bool
    n = spmd_size()
    A = np.arange(3.0 * (n + 1)).reshape(n + 1, 3) % 5 - 2
    A[1, 1] = A[-1, 0] = np.nan
    Z = A + 1j * A[::-1]
    for axis in (0, 1):
        for M in (A.astype(np.float32), Z):
            D = distribute(backend.make(M), axis=axis)
            for ax in (None, 0, 1):
                for f in (np.nanmean, np.nanmax, np.nanmin):
                    got, expected = value(f(D, axis=ax)), f(M, axis=ax)
                    assert got.dtype == expected.dtype, (f, ax, got.dtype)
                    assert np.allclose(got, expected, equal_nan=True), (f, ax, got)
        for M in (np.arange(2 * n + 3, dtype=np.int8).reshape(-1, 1) * 9,
                  np.arange(2 * n + 3).reshape(-1, 1) % 3 == 1):
            D = distribute(backend.make(M), axis=axis)
            got = value(np.vdot(D, D))
            assert got.dtype == M.dtype and got == np.vdot(M, M), (got, np.vdot(M, M))


def test_unsupported_options_raise_on_every_worker():
    D = distribute(np.arange(12.0).reshape(3, 4))
    with pytest.raises(SpmdTypeError, match=r"numpy.sort \(worker \d+ of \d+\): 'order'"):
        np.sort(D, order="x")
    with pytest.raises(SpmdValueError, match=r"numpy.diff \(worker \d+ of \d+\): .*sizes"):
        np.diff(D, prepend=np.zeros((2, 2)))  # (numpy's: not one slice of the array)
    with pytest.raises(SpmdValueError, match="numpy.concatenate .*sizes must match"):
        np.concatenate([D, D[:, :2]], axis=0)
    with pytest.raises(SpmdValueError, match="numpy.percentile .*'q' must be a number or "
                       "a vector"):
        np.percentile(D, [[10, 20]], axis=0)
    # numpy's own refusals of an option, named as the call and the worker's
    with pytest.raises(SpmdValueError, match=r"numpy.sort \(worker \d+ of \d+\): .*'bogus'"):
        np.sort(D, axis=0, kind="bogus")
    with pytest.raises(SpmdValueError, match=r"numpy.percentile \(worker \d+ of \d+\): "):
        np.percentile(D, 150, axis=0)
    with pytest.raises(SpmdValueError, match=r"numpy.quantile \(worker \d+ of \d+\): "):
        np.quantile(D, 0.5, method="bogus")
    with pytest.raises(SpmdTypeError, match=r"numpy.diff \(worker \d+ of \d+\): 'n' .*1.5"):
        np.diff(D, n=1.5)
    with pytest.raises(SpmdValueError, match=r"numpy.roll \(worker \d+ of \d+\): "):
        np.roll(D, (1, 2, 3), axis=(0, 1))
    for axis in (1.5, (0, 1.5)):  # numpy refuses them; int(1.5) rolled axis 1 silently
        with pytest.raises(SpmdTypeError, match=r"numpy.roll \(worker \d+ of \d+\): 'axis' "
                           r"must be an int or a tuple of ints \(got (1.5|\(0, 1.5\))\)"):
            np.roll(D, 1, axis=axis)
    for axis in (1.5, (0, 1.5)):  # (Python's own TypeError, not an spmdlab error, before)
        with pytest.raises(SpmdTypeError, match=r"numpy.expand_dims \(worker \d+ of \d+\): "
                           r"'axis' must be an int or a tuple of ints"):
            np.expand_dims(D, axis)
    with pytest.raises(SpmdTypeError, match=r"numpy.stack \(worker \d+ of \d+\): 'axis' "
                       r"must be an int \(got 1.5\)"):
        np.stack([D, D], axis=1.5)
    with pytest.raises(SpmdValueError, match=r"numpy.stack \(worker \d+ of \d+\): axis 3 is "
                       r"out of bounds"):  # (named numpy.expand_dims before)
        np.stack([D, D], axis=3)
    # D.swapaxes was numpy's AttributeError; bad axes Python's IndexError and TypeError
    assert np.array_equal(D.swapaxes(0, 1).gather(), np.arange(12.0).reshape(3, 4).T)
    with pytest.raises(SpmdValueError, match=r"numpy.swapaxes \(worker \d+ of \d+\): axis2 "
                       r"5 is out of bounds for an array of 2 dimensions"):
        D.swapaxes(0, 5)
    with pytest.raises(SpmdTypeError, match=r"numpy.swapaxes \(worker \d+ of \d+\): 'axis1' "
                       r"must be an int \(got 0.5\)"):
        np.swapaxes(D, 0.5, 1)
    for width in (1.5, ((1, 2), (0, 0.5))):  # (1.5 padded 1 silently)
        with pytest.raises(SpmdTypeError, match=r"numpy.pad \(worker \d+ of \d+\): "
                           r"'pad_width' must be of integral type"):
            np.pad(D, width)
    with pytest.raises(SpmdValueError, match=r"numpy.vdot \(worker \d+ of \d+\): .*12 and 4"):
        np.vdot(D, D[0])
    with pytest.raises(SpmdTypeError, match=r"numpy.lexsort \(worker \d+ of \d+\): "
                       r"not available .*gather it first"):
        np.lexsort((D, D))
    with pytest.raises(SpmdValueError, match=r"numpy.interp \(worker \d+ of \d+\): "):
        np.interp(D, [1.0, 2.0], [1.0, 2.0, 3.0])


def test_linear_systems_are_solved_whole_on_every_worker(backend):
    # MATLAB's x = D \ b, inv(D), det(D): gathered, solved everywhere, split again
    from spmdlab.matlab import mldivide

    n = spmd_size() + 2
    rng = np.random.default_rng(1)
    A = rng.standard_normal((n, n)) + n * np.eye(n)
    b = rng.standard_normal(n)
    for axis in (0, 1):
        D = distribute(backend.make(A), axis=axis)
        for rhs in (backend.make(b), distribute(backend.make(b))):
            x = np.linalg.solve(D, rhs)
            assert isinstance(x, CodistributedArray)
            assert np.allclose(value(x), np.linalg.solve(A, b))
        assert np.allclose(value(mldivide(D, backend.make(b))), np.linalg.solve(A, b))
        assert np.allclose(value(np.linalg.inv(D)), np.linalg.inv(A))
        assert np.isclose(float(np.linalg.det(D)), np.linalg.det(A))
    tall = distribute(backend.make(np.vstack([A, A])))
    assert np.allclose(value(mldivide(tall, backend.make(np.concatenate([b, b])))),
                       np.linalg.solve(A, b))
    with pytest.raises(np.linalg.LinAlgError, match=r"numpy.linalg.solve \(worker \d+ of"):
        np.linalg.solve(distribute(backend.make(np.zeros((n, n)))), backend.make(b))


def test_factorisations_are_computed_whole_on_every_worker(backend):
    # MATLAB's eig, svd, chol, qr, rank, cond, pinv, A^k of a distributed matrix:
    # gathered, computed on every worker (numpy's bits), results split again
    n = spmd_size() + 2
    rng = np.random.default_rng(2)
    A = rng.standard_normal((n, n))
    S = A @ A.T + np.eye(n)
    for axis in (0, 1):
        D, DS = (distribute(backend.make(M), axis=axis) for M in (A, S))
        for fn, M, E in ((np.linalg.eig, D, A), (np.linalg.eigh, DS, S),
                         (np.linalg.eigvals, D, A), (np.linalg.eigvalsh, DS, S),
                         (np.linalg.svd, D, A), (np.linalg.qr, D, A),
                         (np.linalg.cholesky, DS, S), (np.linalg.pinv, D, A),
                         (np.linalg.slogdet, D, A)):
            got, expected = fn(M), fn(E)
            pairs = [(got, expected)]
            if isinstance(expected, tuple):  # numpy's named results: .eigenvalues
                assert type(got) is type(expected)
                pairs = list(zip(got, expected))
            for g, e in pairs:
                assert isinstance(g, CodistributedArray) == (np.ndim(e) > 0)
                same(g, e)
        same(np.linalg.matrix_power(D, 3), np.linalg.matrix_power(A, 3))
        assert int(np.linalg.matrix_rank(D)) == np.linalg.matrix_rank(A)
        assert float(np.linalg.cond(D)) == np.linalg.cond(A)
    with pytest.raises(np.linalg.LinAlgError, match=r"numpy.linalg.cholesky \(worker \d+ "):
        np.linalg.cholesky(distribute(backend.make(-S)))
    with pytest.raises(np.linalg.LinAlgError, match=r"numpy.linalg.matrix_power \(worker "
                       r"\d+ of \d+\): .*square"):
        np.linalg.matrix_power(distribute(backend.make(np.ones((n, n + 1)))), 2)


def test_rot90_nan_to_num_digitize_polyval_unwrap_take_cummax(backend):
    for A, D in arrays(backend):
        for k in range(-1, 5):
            same(np.rot90(D, k), np.rot90(A, k))
            same(np.rot90(D, k, axes=(1, 0)), np.rot90(A, k, axes=(1, 0)))
        B = A.copy()
        B.flat[::4] = np.nan
        B.flat[1::5] = -np.inf
        E = distribute(backend.make(B), axis=D.axis)
        same(np.nan_to_num(E), np.nan_to_num(B))
        same(np.nan_to_num(E, nan=-1.0, neginf=-9.0), np.nan_to_num(B, nan=-1.0, neginf=-9.0))
        same(np.digitize(D, [-1.0, 0.0, 1.5]), np.digitize(A, [-1.0, 0.0, 1.5]))
        same(np.digitize(D, [-1.0, 0.0, 1.5], right=True),
             np.digitize(A, [-1.0, 0.0, 1.5], right=True))
        same(np.polyval([1.0, -2.0, 0.5], D), np.polyval([1.0, -2.0, 0.5], A))
        for axis in (0, 1):
            same(np.unwrap(D * 3, axis=axis), np.unwrap(A * 3, axis=axis))
            same(np.take(D, [0, -1, 0], axis=axis), np.take(A, [0, -1, 0], axis=axis))
            # MATLAB's cummax(D, dim) / cummin: exact in any order
            same(np.maximum.accumulate(E, axis=axis), np.maximum.accumulate(B, axis=axis))
            same(np.minimum.accumulate(D, axis=axis), np.minimum.accumulate(A, axis=axis))
        same(np.take(D, [2, 0]), np.take(A, [2, 0]))
        with pytest.raises(SpmdValueError, match=r"numpy.rot90 \(worker \d+ of \d+\): 'axes'"):
            np.rot90(D, 1, axes=(0, 0))


def test_take_casts_its_indices_as_numpy_does(backend):
    # numpy's take casts the indices to integers: True is 1 (not a mask, even of the
    # array's shape), [] takes nothing, and indices of several dimensions shape the result
    n = spmd_size()
    A = np.arange(2.0 * (n + 1)).reshape(2, n + 1) * 1.5
    for axis in (0, 1):
        D = distribute(backend.make(A), axis=axis)
        for indices in (np.array([True, False]), [], [[1, 0], [-1, 1]], np.array([[0]]),
                        [1.0, 0.5], [False, True]):
            same(np.take(D, indices, axis=0), np.take(A, indices, axis=0))
            same(np.take(D, indices, axis=1), np.take(A, indices, axis=1))
            same(np.take(D, indices), np.take(A, indices))
        same(np.take(row(D), np.ones(n + 1, bool)), np.take(A[0], np.ones(n + 1, bool)))
        with pytest.raises(SpmdTypeError, match=r"numpy.take \(worker \d+ of \d+\): the "
                           r"indices must be integers"):
            np.take(D, np.array([1.0]))
    with pytest.raises(SpmdTypeError, match=r"numpy.polyval \(worker \d+ of \d+\): the "
                       r"coefficients must be a sequence"):
        np.polyval(3.0, D)


def test_unique_with_indices_inverse_and_counts(backend):
    # MATLAB's [C, ia, ic] = unique(D) (0-based, C order), NaNs together or apart, more
    # workers than elements, every worker with or without the values others hold
    n = spmd_size()
    for A, D in arrays(backend):
        A = A.copy()
        A.flat[::3] = np.nan
        D = distribute(backend.make(A), axis=D.axis)
        for equal_nan in (True, False):
            got = np.unique(D, return_index=True, return_inverse=True, return_counts=True,
                            equal_nan=equal_nan)
            want = np.unique(A, return_index=True, return_inverse=True, return_counts=True,
                             equal_nan=equal_nan)
            assert isinstance(got[0], CodistributedArray)
            for g, w in zip(got, want):
                same(g, w)
            assert value(got[1]).dtype == np.int64
            assert got[2].codistributor == D.codistributor or got[2].ndim == 1
        same(np.unique(D), np.unique(A))
        same(np.unique(D, axis=D.axis), np.unique(A, axis=D.axis))
        values, counts = np.unique(D, axis=0, return_counts=True)
        same(values, np.unique(A, axis=0))
        same(counts, np.unique(A, axis=0, return_counts=True)[1])
    ints = distribute(backend.make(np.arange(3 * n + 2) % 4), axis=0)
    got = np.unique(ints, return_counts=True)
    same(got[0], [0, 1, 2, 3])
    same(got[1], np.unique(np.arange(3 * n + 2) % 4, return_counts=True)[1])
    empty = distribute(backend.make(np.zeros((0, 3))), axis=0)
    same(np.unique(empty), np.zeros(0))


def test_nan_order_statistics_and_interp(backend):
    n = spmd_size()
    for A, D in arrays(backend):
        A = A.copy()
        A[0, 0] = A[-1, -1] = np.nan
        N = distribute(backend.make(A), axis=D.axis)
        for axis in (None, 0, 1):
            for f, q in ((np.nanmedian, ()), (np.nanpercentile, (30,)),
                         (np.nanquantile, (0.7,))):
                got = value(f(N, *q, axis=axis))
                assert np.allclose(got, f(A, *q, axis=axis), equal_nan=True), (f, axis)
        xp, fp = np.array([-3.0, 0.0, 2.0, 4.0]), np.array([1.0, -1.0, 5.0, 0.0])
        got = np.interp(D, xp, fp)                       # MATLAB's interp1(xp, fp, D)
        assert isinstance(got, CodistributedArray) and got.codistributor == D.codistributor
        same(got, np.interp(A if not np.isnan(A).any() else value(D), xp, fp))
        same(np.interp(D, xp, fp, left=-9.0, right=9.0), np.interp(value(D), xp, fp, -9.0,
                                                                     9.0))
    table = distribute(backend.make(np.linspace(0.0, 1.0, 2 * n + 3)))
    values = distribute(backend.make(np.linspace(0.0, 1.0, 2 * n + 3) ** 2))
    same(np.interp([0.25, 0.5], table, values),
         np.interp([0.25, 0.5], np.linspace(0, 1, 2 * n + 3), np.linspace(0, 1, 2 * n + 3) ** 2))


def test_order_statistics_of_ints_keep_one_dtype_where_a_block_is_empty():
    # numpy's nanquantile 'nearest' keeps an int dtype but gives float64 NaNs for no
    # values: a worker whose block is empty (more workers than columns) must still hold
    # the dtype the others' blocks have, or the array cannot be gathered
    n = spmd_size()
    A = np.arange(3 * 2).reshape(3, 2) % 4
    for axis in (0, 1):
        D = distribute(A, axis=axis)
        for f, q in ((np.nanquantile, 0.6), (np.nanpercentile, 60), (np.quantile, 0.6)):
            for method in ("nearest", "lower", "inverted_cdf"):
                for along_ in (0, 1):
                    got = f(D, q, axis=along_, method=method)
                    want = f(A, q, axis=along_, method=method)
                    assert value(got).dtype == want.dtype, (f, method, n)
                    same(got, want)


def test_order_statistics_of_several_q_in_one_move(backend):
    # MATLAB's prctile(D, [10 50 90], dim): every q in the one move of the data, the q
    # axis first as numpy's, with or without keepdims, a worker's block empty or not
    n = spmd_size()
    rng = np.random.default_rng(4)
    for shape in [(n + 2, 3), (7,), (2, 3, n + 1)]:
        A = rng.standard_normal(shape)
        A.flat[::5] = np.nan
        for split in range(len(shape)):
            D = distribute(backend.make(A), axis=split)
            for axis in list(range(len(shape))) + [None]:
                for keepdims in (False, True):
                    for f, q in ((np.nanpercentile, [10, 50, 90]), (np.nanquantile, [0.3]),
                                 (np.percentile, np.array([5.0, 95.0]))):
                        same(f(D, q, axis=axis, keepdims=keepdims),
                             f(A, q, axis=axis, keepdims=keepdims))


def test_delete_and_pad(backend):
    # MATLAB's D(:, k) = [] (np.delete: no communication) and padarray (np.pad:
    # "replicate" is edge, "circular" is wrap; wider pads and other modes gathered)
    n = spmd_size()
    rng = np.random.default_rng(6)
    for shape in [(n + 2, 3), (7,), (2, 3, n + 1)]:
        A = rng.standard_normal(shape)
        for split in range(len(shape)):
            D = distribute(backend.make(A), axis=split)
            for axis in list(range(len(shape))) + [None]:
                m = A.shape[axis] if axis is not None else A.size
                for obj in (0, -1, [0, m - 1], slice(0, m, 2), np.arange(m) % 2 == 0, []):
                    same(np.delete(D, obj, axis=axis), np.delete(A, obj, axis=axis))
            for width in (1, (1, 2), [(2, 0)] + [(1, 1)] * (len(shape) - 1)):
                for mode, options in (("constant", {}), ("constant", {"constant_values": 7}),
                                      ("edge", {}), ("wrap", {}), ("symmetric", {}),
                                      ("reflect", {}), ("maximum", {})):
                    same(np.pad(D, width, mode, **options), np.pad(A, width, mode, **options))
            same(np.pad(D, 9, "wrap"), np.pad(A, 9, "wrap"))  # wider than the array
    with pytest.raises(IndexError, match=r"numpy.delete \(worker \d+ of \d+\): index 9 "):
        np.delete(distribute(backend.make(np.arange(5.0))), 9)
    with pytest.raises(SpmdIndexError, match=r"numpy.delete \(worker \d+ of \d+\): index 3 is "
                       r"out of bounds for axis 1 with size 3"):  # numpy's axis, not 0
        np.delete(distribute(backend.make(np.ones((n + 2, 3))), axis=1), 3, axis=1)
    with pytest.raises(SpmdValueError, match=r"numpy.pad \(worker \d+ of \d+\): "):
        np.pad(distribute(backend.make(np.arange(5.0))), -1)


def test_weighted_quantiles_weigh_each_block_by_its_own_weights(backend):
    # numpy's weights (method="inverted_cdf") of the array's shape, replicated or
    # codistributed, or a vector along the axis: each worker's block takes its own
    # weights, also where a worker holds nothing (it raised there alone, before)
    n = spmd_size()
    rng = np.random.default_rng(8)
    A = rng.standard_normal((n + 2, 2 * n + 1))
    W = rng.random(A.shape) + 0.1
    skewed = Codistributor(1, (0,) * (n - 1) + (A.shape[1],))
    for D in (distribute(backend.make(A)), distribute(backend.make(A), axis=1),
              distribute(backend.make(A), skewed)):
        for axis in (0, 1, -1, None):
            for f, q in ((np.quantile, 0.3), (np.nanquantile, [0.2, 0.9]),
                         (np.percentile, [10, 60])):
                want = f(A, q, axis=axis, method="inverted_cdf", weights=W)
                for weights in (W, distribute(backend.make(W), axis=1 - D.axis)):
                    same(f(D, q, axis=axis, method="inverted_cdf", weights=weights), want)
                if axis is not None:
                    w = W[:, 0] if axis == 0 else W[0]
                    same(f(D, q, axis=axis, method="inverted_cdf", weights=w),
                         np.quantile(A, np.asarray(q) / (100 if f is np.percentile else 1),
                                     axis=axis, method="inverted_cdf", weights=w))
    with pytest.raises(SpmdValueError, match=r"numpy.quantile \(worker \d+ of \d+\): "
                       r"'weights' must have the array's shape"):
        np.quantile(distribute(backend.make(A)), 0.5, axis=0, method="inverted_cdf",
                    weights=W[:, :1])
