"""Codistributed arrays (spmdlab.darray): construction, gather, redistribute, subscripts,
element-wise operations, reductions, products and errors, against numpy on the whole
array, at any worker count (sizes follow it, so partitions are uneven and some workers
hold nothing) and for every array family available.
"""

import numpy as np
import pytest

import spmdlab.darray as da
from spmdlab import (CodistributedArray, Codistributor, SpmdIndexError, SpmdMismatchError,
                     SpmdTypeError, SpmdValueError, distribute, drange, from_local, spmd,
                     spmd_index, spmd_plus, spmd_size)

from conftest import host, torch

pytestmark = pytest.mark.mpi


def shapes():
    """Global shapes that split unevenly, evenly and with workers that hold nothing."""
    n = spmd_size()
    return [(n + 1, 3), (2 * n, n + 2), (max(n - 1, 1), 2 * n + 1), (3, 2, n + 2)]


def whole(shape, dtype=np.float64):
    """The same array on every worker: values that say where they are."""
    return (np.arange(int(np.prod(shape)), dtype=dtype) * 0.5 - 3).reshape(shape)


def value(x):
    """A result as numpy: gathered if codistributed, moved to the host if a tensor."""
    return host(x.gather() if isinstance(x, CodistributedArray) else x)


def test_default_partition_is_matlabs():
    assert da.default_partition(10, 4) == (3, 3, 2, 2)
    assert da.default_partition(2, 4) == (1, 1, 0, 0)
    assert da.default_partition(0, 3) == (0, 0, 0)
    n = spmd_size()
    assert da.default_partition(n + 1) == (2,) + (1,) * (n - 1)
    with pytest.raises(SpmdValueError, match="'workers' must be at least 1"):
        da.default_partition(5, 0)


def test_distribute_gather_every_axis_and_destination(backend):
    n, k = spmd_size(), spmd_index()
    for shape in shapes():
        G = whole(shape)
        for axis in range(len(shape)):
            D = distribute(backend.make(G), axis=axis)
            assert D.shape == shape and D.axis == axis
            assert D.partition == da.default_partition(shape[axis])
            r = D.global_indices()
            assert np.array_equal(backend.read(D.local), G[D.global_slice()])
            assert D.local.shape[axis] == len(r)
            got = D.gather()
            assert type(got) is type(D.local) and np.array_equal(backend.read(got), G)
            for dest in range(1, n + 1):
                got = D.gather(destination=dest)
                assert (got is None) == (k != dest)
                if got is not None:
                    assert np.array_equal(backend.read(got), G)


def test_distribute_copies_its_input_and_keeps_dtype():
    G = whole((spmd_size() + 2, 2), np.float32)
    D = distribute(G)
    D.local[...] = 7
    assert G.min() == -3 and D.dtype == np.float32
    assert distribute([[1, 2], [3, 4]], axis=1).gather().tolist() == [[1, 2], [3, 4]]


def test_scatter_from_one_worker():
    n, k = spmd_size(), spmd_index()
    G = whole((2 * n + 1, 3))
    for source in range(1, n + 1):
        mine = G if k == source else "ignored"
        D = distribute(mine, source=source, axis=1)
        assert D.axis == 1 and np.array_equal(D.gather(), G)


def test_from_local_learns_the_partition_and_checks_it():
    n, k = spmd_size(), spmd_index()
    D = from_local(np.full((k - 1, 2), float(k)))  # worker 1 holds nothing
    assert D.partition == tuple(range(n)) and D.shape == (n * (n - 1) // 2, 2)
    expected = np.concatenate([np.full((j - 1, 2), float(j)) for j in range(1, n + 1)])
    assert np.array_equal(D.gather(), expected)
    c = Codistributor(1, (2,) * n, (3, 2 * n))
    E = from_local(np.ones((3, 2)), c)
    assert E.codistributor == c
    E2 = from_local(np.ones((3, 2)), c, check=False)  # MATLAB's "noCommunication"
    assert E2.codistributor == c


def test_from_local_sizes_that_do_not_add_up_fail_on_every_worker():
    n, k = spmd_size(), spmd_index()
    c = Codistributor(0, (2,) * n, (2 * n, 3))
    bad = np.ones((3 if k == n else 2, 3))
    with pytest.raises(SpmdValueError, match=r"the local part has shape \(3, 3\)") as info:
        from_local(bad, c)
    # the failing worker raises its own error; the others name it
    assert (k == n) or f"failed on another worker: worker {n}:" in str(info.value)
    other = np.ones((2, 4 if k == 1 else 3))
    if n > 1:
        with pytest.raises(SpmdMismatchError, match="sizes outside the axis"):
            from_local(other)
    with pytest.raises(SpmdValueError, match=r"adds up to"):
        Codistributor(0, (1,) * n, (n + 5, 2))
    with pytest.raises(SpmdValueError, match="beyond an array of 2 dimensions"):
        distribute(np.ones((2, 2)), axis=2)


def test_constructors_need_no_communication_and_match_numpy():
    n = spmd_size()
    shape = (n + 1, 2 * n + 1)
    assert np.array_equal(da.zeros(shape).gather(), np.zeros(shape))
    assert np.array_equal(da.ones(shape, np.int32, axis=1).gather(), np.ones(shape, np.int32))
    assert np.array_equal(da.full(shape, 2.5).gather(), np.full(shape, 2.5))
    assert da.empty(shape).shape == shape
    for axis in (0, 1):
        for kk in (-1, 0, 2):
            assert np.array_equal(da.eye(n + 1, 2 * n + 1, kk, axis=axis).gather(),
                                  np.eye(n + 1, 2 * n + 1, kk))
    assert np.array_equal(da.arange(3, 40, 4).gather(), np.arange(3, 40, 4))
    assert np.allclose(da.arange(0.5, 3.0, 0.25).gather(), np.arange(0.5, 3.0, 0.25))
    R = da.rand((50, 4), seed=3).gather()
    assert R.shape == (50, 4) and 0 <= R.min() and R.max() < 1
    assert np.array_equal(R, da.rand((50, 4), seed=3).gather())  # same seed, same values
    assert abs(float(da.randn((2000,), seed=1).mean())) < 0.2


def test_drange_covers_the_range_once():
    parts = from_local(np.array(list(drange(3, 50, 2)), dtype=np.int64)).gather()
    assert parts.tolist() == list(range(3, 50, 2))
    assert len(drange(spmd_size() - 1)) in (0, 1)


def test_redistribute_moves_every_element_once(backend):
    n = spmd_size()
    for shape in shapes():
        G = whole(shape)
        D = distribute(backend.make(G))
        for axis in range(len(shape)):
            E = D.redistribute(axis=axis)
            assert E.axis == axis and E.partition == da.default_partition(shape[axis])
            assert np.array_equal(backend.read(E.local), G[E.global_slice()])
            uneven = (shape[axis],) + (0,) * (n - 1)
            F = E.redistribute(partition=uneven)
            assert F.axis == axis and F.partition == uneven
            assert np.array_equal(backend.read(F.gather()), G)
            assert type(F.local) is type(D.local)
        same = D.redistribute(D.codistributor)
        same.local[...] = 0  # always a new array
        assert np.array_equal(backend.read(D.gather()), G)


def test_redistribute_between_random_splits():
    """Every pair of splits, pieces contiguous or not in either local array (a split along
    the first axis sends runs of bytes where they lie; others pack and unpack), uneven
    partitions with empty parts: the same global array afterwards."""
    rng = np.random.default_rng(7)  # the same draws on every worker
    n = spmd_size()

    def split(shape):
        axis = int(rng.integers(len(shape)))
        cuts = np.sort(rng.integers(0, shape[axis] + 1, n - 1))
        partition = tuple(int(c) for c in np.diff(np.concatenate(([0], cuts, [shape[axis]]))))
        return axis, partition

    for _ in range(12):
        shape = tuple(int(v) for v in rng.integers(1, 7, int(rng.integers(1, 4))))
        G = whole(shape)
        axis, partition = split(shape)
        D = distribute(G, axis=axis).redistribute(axis=axis, partition=partition)
        for _ in range(3):
            axis, partition = split(shape)
            D = D.redistribute(axis=axis, partition=partition)
            assert D.axis == axis and D.partition == partition
            assert np.array_equal(D.local, G[D.global_slice()])
        assert np.array_equal(D.gather(), G)


def test_results_of_repeated_calls_never_share_memory(backend):
    # A result still alive is never written by a later gather or redistribution, and
    # writing into one never changes another (a pool of result buffers, tried for
    # speed, must keep this).
    n = spmd_size()
    G = whole((64, 32 * n))  # 16 KiB per worker at least, 64 KiB gathered
    D = distribute(backend.make(G))
    kept = [D.gather() for _ in range(4)] + [D.gather(1) for _ in range(2)]
    moved = [D.redistribute(axis=1) for _ in range(4)]
    for i, g in enumerate(kept[:4]):
        g[0, 0] = -i - 1  # each its own memory
    for i, g in enumerate(kept[:4]):
        assert value(g)[0, 0] == -i - 1 and np.array_equal(value(g)[1:], G[1:])
    for i, E in enumerate(moved):
        E.local[...] = i  # each its own memory
    for i, E in enumerate(moved):
        assert np.all(backend.read(E.local) == i)
    del kept, moved
    for _ in range(3):  # memory that comes back holds the right values
        assert np.array_equal(value(D.gather()), G)
        E = D.redistribute(axis=1)
        assert np.array_equal(backend.read(E.local), G[E.global_slice()])


def test_elementwise_needs_no_communication_and_keeps_family(backend):
    G = whole((spmd_size() + 1, 4))
    for axis in (0, 1):
        D = distribute(backend.make(G), axis=axis)
        E = np.sin(D) * 2 + D - 1 / (D * D + 1)
        assert type(E.local) is type(D.local) and E.codistributor == D.codistributor
        assert np.allclose(value(E), np.sin(G) * 2 + G - 1 / (G * G + 1))
        assert np.array_equal(value(D > 0), G > 0)
        assert np.allclose(value(abs(-D) ** 2), G ** 2)
        assert np.allclose(value(np.maximum(D, 0.5)), np.maximum(G, 0.5))
        assert np.allclose(value(np.where(D > 0, D, 0.0)), np.where(G > 0, G, 0.0))
        assert np.allclose(value(np.clip(D, -1, 1)), np.clip(G, -1, 1))
        H = D.copy()
        H += 1
        H *= D
        assert np.allclose(value(H), (G + 1) * G)
        assert np.allclose(value(H), value(D.astype(np.float64) * (D + 1)))


def test_operands_broadcast_and_redistribute(backend):
    n = spmd_size()
    G = whole((n + 2, 3))
    D = distribute(backend.make(G), axis=0)
    E = D.redistribute(axis=1)
    row, col = np.arange(3.0), np.arange(n + 2.0)[:, None]
    for X in (D, E):
        assert np.allclose(value(X + row), G + row)
        assert np.allclose(value(X * col), G * col)
        assert np.allclose(value(backend.make(row) - X), row - G)
    mixed = D + E  # another distribution: redistributed to the first's
    assert mixed.codistributor == D.codistributor and np.allclose(value(mixed), 2 * G)
    sums = np.sum(D, axis=0, keepdims=True)
    assert np.allclose(value(D - sums), G - G.sum(axis=0, keepdims=True))
    with pytest.raises(SpmdValueError, match="cannot be broadcast together"):
        D + np.ones(5)


def test_reductions_along_every_axis(backend):
    for shape in shapes():
        G = whole(shape)
        for axis in range(len(shape)):
            D = distribute(backend.make(G), axis=axis)
            for ax in [None, *range(len(shape)), (0, len(shape) - 1)]:
                for name in ("sum", "prod", "max", "min", "mean", "std", "var"):
                    got = getattr(np, name)(D, axis=ax)
                    assert np.allclose(value(got), getattr(np, name)(G, axis=ax)), \
                        (shape, axis, ax, name)
                for name in ("any", "all"):
                    got = getattr(np, name)(D > 0, axis=ax)
                    assert np.array_equal(value(got), getattr(np, name)(G > 0, axis=ax))
            kept = np.sum(D, axis=axis, keepdims=True)
            assert value(kept).shape == np.sum(G, axis=axis, keepdims=True).shape
            assert np.allclose(value(np.linalg.norm(D)), np.linalg.norm(G))
            assert int(np.count_nonzero(D)) == np.count_nonzero(G)
            assert np.array_equal(value(np.cumsum(D, axis=axis)), np.cumsum(G, axis=axis))
            assert np.allclose(value(np.cumprod(D[..., :2] * 0 + 1.5, axis=0)),
                               np.cumprod(G[..., :2] * 0 + 1.5, axis=0))


def test_max_and_min_of_bools_along_every_axis(backend):
    # numpy's max of bools is any and its min all; along the split axis they are folded
    # over the workers (the partial results are bools there too)
    for shape in shapes():
        G = whole(shape) > 0
        for axis in range(len(shape)):
            D = distribute(backend.make(G), axis=axis)
            for ax in [None, *range(len(shape))]:
                for name in ("max", "min"):
                    got = getattr(np, name)(D, axis=ax)
                    want = getattr(np, name)(G, axis=ax)
                    assert value(got).dtype == np.bool_, (shape, axis, ax, name)
                    assert np.array_equal(value(got), want), (shape, axis, ax, name)


def test_reductions_are_identical_on_every_worker():
    from spmdlab import spmd_cat

    D = da.randn((spmd_size() * 7 + 3,), seed=5)
    total = float(np.sum(D))
    assert len(set(spmd_cat(total).tolist())) == 1


def test_transpose_and_products(backend):
    n = spmd_size()
    A = whole((n + 2, n + 1))
    B = whole((n + 1, 3)) / 7
    v, w = np.arange(n + 1.0), np.arange(n + 2.0)
    for a_axis in (0, 1):
        Da = distribute(backend.make(A), axis=a_axis)
        assert Da.T.axis == 1 - a_axis and np.array_equal(value(Da.T), A.T)
        assert Da.mT.axis == 1 - a_axis and np.array_equal(value(Da.mT), A.mT)  # numpy 2's
        assert np.allclose(value(Da @ backend.make(v)), A @ v)
        assert np.allclose(value(backend.make(w) @ Da), w @ A)
        assert np.allclose(value(np.dot(Da, backend.make(v))), A @ v)
        for b_axis in (0, 1):
            Db = distribute(backend.make(B), axis=b_axis)
            assert np.allclose(value(Da @ Db), A @ B)
            assert np.allclose(value(Da.T @ Da), A.T @ A)
        x = distribute(backend.make(v))
        assert np.allclose(value(Da @ x), A @ v)
        assert np.allclose(value(x @ x), v @ v)
        assert np.allclose(value(np.trace(Da)), np.trace(A))
        for order in (None, "fro", 1, -1, np.inf, -np.inf, 2, -2, "nuc"):
            assert np.allclose(value(np.linalg.norm(Da, order)), np.linalg.norm(A, order)), \
                order
    with pytest.raises(SpmdValueError, match="inner dimensions differ"):
        distribute(A) @ np.ones(n + 5)
    S = distribute(backend.make(whole((2, n + 1, 3))), axis=1)
    assert S.mT.axis == 2 and np.array_equal(value(S.mT), whole((2, n + 1, 3)).mT)
    with pytest.raises(SpmdValueError, match=r"mT \(worker \d+ of \d+\): matrix transpose "
                       r"with ndim < 2 is undefined"):
        distribute(backend.make(v)).mT


def test_subscripts_read_like_numpy(backend):
    n = spmd_size()
    G = whole((2 * n + 1, n + 2))
    keys = [(0, 1), (-1, -1), (2 * n, slice(None)), (slice(1, None, 2), 1),
            (slice(None, None, -1),), (slice(-2, 0, -2), slice(None, 2)), ([2 * n, 0, 1],),
            (slice(None), [1, 0]), (Ellipsis, n + 1), (np.array([True, False] * n + [True]),),
            (0, [1, 0]), ([1, 2], 0), (slice(3, 3),), (1, slice(None, None, -1))]
    for axis in (0, 1):
        D = distribute(backend.make(G), axis=axis)
        for key in keys:
            got = D[key]
            assert np.array_equal(value(got), G[key]), (axis, key)
        assert np.array_equal(value(D[D > 1]), G[G > 1])
        assert np.array_equal(value(D[G > 1]), G[G > 1])
        assert float(D[1, 1]) == G[1, 1]
        assert [float(x[0]) for x in D] == G[:, 0].tolist()


def test_views_and_copies_are_the_same_at_every_worker_count(backend):
    """The guide's rule: a positive step along the split axis is a view of the local parts,
    a negative step a copy, at one worker too (where nothing moves)."""
    n = spmd_size()
    G = whole((2 * n + 1, 3))
    for key, shared in [((slice(1, None),), True), ((slice(None), slice(0, 2)), True),
                        ((slice(None, None, -1),), False), ((slice(-2, 0, -2),), False)]:
        D = distribute(backend.make(G))
        Y = D[key]
        Y += 1
        want = G.copy()
        if shared:
            want[key] += 1
        assert np.array_equal(value(D), want), key


def test_subscripts_write_where_the_elements_live(backend):
    n = spmd_size()
    G = whole((2 * n + 1, n + 2))
    for axis in (0, 1):
        D = distribute(backend.make(G), axis=axis)
        H = G.copy()
        for key, v in [((1, 2), 9.0), ((slice(None), 1), np.arange(2 * n + 1.0)),
                       ((slice(None, None, -2), 0), -np.arange(n + 1.0)),
                       (([2 * n, 0], slice(None)), 5.5), ((Ellipsis, -1), 0.25),
                       ((slice(1, 3), slice(0, 2)), np.array([[1.0, 2.0], [3.0, 4.0]]))]:
            D[key] = backend.make(v) if np.ndim(v) else v
            H[key] = v
        D[D > 10] = -1
        H[H > 10] = -1
        assert np.array_equal(value(D), H), axis
        part = distribute(backend.make(np.full((2 * n + 1, 2), 3.0)), axis=1)
        D[:, 1:3] = part  # a codistributed value: moved to where it is written
        H[:, 1:3] = 3.0
        assert np.array_equal(value(D), H)


def test_writes_through_index_arrays_cast_the_value_to_the_parts_dtype(backend):
    # D([1 3], :) = [1 2 3]; D(:, [1 3]) = int32 ones; D(rows, cols) = v: numpy casts an
    # integer value into a float array; torch's index writes took only their own dtype
    # (a bare RuntimeError on the workers holding the rows)
    n = spmd_size()
    for axis in (0, 1):
        D = distribute(backend.make(np.zeros((2 * n + 1, 3))), axis=axis)
        H = np.zeros((2 * n + 1, 3))
        for key, v in [(([0, 2], slice(None)), np.array([1, 2, 3])),
                       ((slice(None), [0, 2]), np.ones((2 * n + 1, 2), np.int32)),
                       (np.ix_([1, 2 * n], [2, 0]), np.array([[4, 5], [6, 7]]))]:
            D[key] = backend.make(v)
            H[key] = v
        assert np.array_equal(value(D), H) and value(D).dtype == np.float64, axis


def test_a_write_through_np_ix_out_of_bounds_is_an_index_error_of_the_call():
    # D(rows, cols) = v with a row past the end: SpmdIndexError naming the call, as reads
    # give (it was numpy's bare IndexError from the selection's shape)
    n, k = spmd_size(), spmd_index()
    D = distribute(whole((2 * n + 1, n + 2)), axis=0)
    for key in (np.ix_([0, 2 * n + 1], [1]), np.ix_([0], [1, -(n + 3)])):
        with pytest.raises(SpmdIndexError, match=rf"\] = \.\.\. \(worker {k} of {n}\): "
                                                 rf"index -?\d+ is out of bounds"):
            D[key] = 1.0
    assert np.array_equal(value(D), whole((2 * n + 1, n + 2)))


def test_np_ix_reads_check_and_agree_on_every_vector():
    # D[np.ix_(rows, cols)] with a column past the end: the call's SpmdIndexError (it
    # was numpy's bare IndexError), on every worker when one worker's vector is bad;
    # other vectors on one worker: SpmdMismatchError (a pick along the axis that is not
    # split is local: a worker's own rows came back mixed with the ones others picked)
    n, k = spmd_size(), spmd_index()
    G = whole((2 * n + 1, n + 2))
    for axis in (0, 1):
        D = distribute(G, axis=axis)
        with pytest.raises(SpmdIndexError, match=rf"\(worker {k} of {n}\): index {n + 2} "
                                                 rf"is out of bounds for axis 1"):
            D[np.ix_([0, 1], [0, n + 2])]
        with pytest.raises(SpmdIndexError, match=rf"\(worker {k} of {n}[,)].* index "
                                                 rf"{2 * n + 1} is out of bounds"):
            D[np.ix_([0, 2 * n + 1 if k == n else 1], [0])]
        if n > 1:
            for key in (np.ix_([0, k], [0, 1]), np.ix_([0, 1], [0, k])):
                with pytest.raises(SpmdMismatchError, match=r"differ in"):
                    D[key]
        key = np.ix_([-1, 0, 2 * n], [n + 1, 0])
        assert np.array_equal(value(D[key]), G[key])


def test_a_bad_subscript_on_one_worker_of_a_collective_read_fails_on_every_worker():
    # D[i, 0] and D[[0, i]] with i past the end on one worker: it raised there alone and
    # the others waited in the read; now every worker raises that worker's error
    n, k = spmd_size(), spmd_index()
    D = distribute(whole((n + 1, 3)))
    for key in ((n + 1 if k == n else 0, 0), [0, n + 1 if k == n else 1],
                (0, 0, 0) if k == n else (0, 0)):
        with pytest.raises(SpmdIndexError, match=rf"\(worker {k} of {n}[,)].*(index "
                                                 rf"{n + 1} is out of bounds|too many)"):
            D[key]
    assert np.array_equal(value(D[0:2, 1]), whole((n + 1, 3))[0:2, 1])


def test_a_collective_read_of_a_long_key_agrees_on_all_of_it():
    # a call's name shows its key's first 37 characters: reads that differed past them
    # (a long index array, a third axis's slice) gave a worker the others' selection,
    # or put its picks where the others' go, silently
    n, k = spmd_size(), spmd_index()
    G = whole((n + 2, 4, 5))
    D = distribute(G)
    idx = np.arange(40) % (n + 2)
    assert np.array_equal(value(D[idx]), G[idx])
    assert np.array_equal(value(D[1, :, 0:2]), G[1, :, 0:2])
    assert np.array_equal(value(D[::-1, :, 0:2]), G[::-1, :, 0:2])
    if n > 1:
        idx[-1] = k % (n + 2)
        for key in (idx, (1, slice(None), slice(0, 1 + k)),
                    (slice(None, None, -1), slice(None), slice(0, 1 + k))):
            with pytest.raises(SpmdMismatchError, match=r"differ in: axis"):
                D[key]
        E = distribute(G, axis=2)
        with pytest.raises(SpmdMismatchError, match=r"differ in: axis 1"):
            E[:, [0, 1, 2, 3, 1, 1, 1, 1, k % 4], 1]


def test_subscripts_by_index_vectors_on_two_axes(backend):
    # MATLAB's D(rows, cols) and D(rows, cols) = v are numpy's D[np.ix_(rows, cols)]
    n = spmd_size()
    G = whole((2 * n + 1, n + 2))
    G3 = whole((3, n + 1, 4))
    for axis in (0, 1):
        D = distribute(backend.make(G), axis=axis)
        for key in (np.ix_([0, 2 * n, 1], [n + 1, 0]), np.ix_([1], [0, 1]),
                    np.ix_([], [1]), (Ellipsis,) + np.ix_([2, 0], [1])):
            assert np.array_equal(value(D[key]), G[key]), (axis, key)
        H = G.copy()
        for key, v in ((np.ix_([0, 2], [1, 0]), -1.0),
                       (np.ix_([2 * n, 1], [0, n, 1]), np.arange(6.0).reshape(2, 3)),
                       (np.ix_([1], [1, 0]), np.array([7.0, 8.0])),
                       (np.ix_([0, 1], [n]), np.array([[5.0], [6.0]]))):
            D[key] = backend.make(v) if np.ndim(v) else v
            H[key] = v
            assert np.array_equal(value(D), H), (axis, key)
        D3 = distribute(backend.make(G3), axis=axis)
        key = (slice(None),) + np.ix_([0, n], [3, 1])
        assert np.array_equal(value(D3[key]), G3[key])
        assert np.array_equal(value(D3[np.ix_([2, 0], [n], [0, 3])]),
                              G3[np.ix_([2, 0], [n], [0, 3])])
        H3 = G3.copy()
        H3[key] = np.arange(12.0).reshape(3, 2, 2)
        D3[key] = backend.make(np.arange(12.0).reshape(3, 2, 2))
        assert np.array_equal(value(D3), H3)
        # three vectors (MATLAB's D(i, j, k) = v), with values that broadcast
        for key, v in ((np.ix_([2, 0], [n, 0], [3, 1, 0]), np.arange(12.0).reshape(2, 2, 3)),
                       (np.ix_([1], [0, n], [2]), -5.0),
                       (np.ix_([0, 2], [1], [0, 3]), np.array([[8.0, 9.0]])),
                       (np.ix_([0, 1, 2], [n], [1]), np.array([[[1.0]], [[2.0]], [[3.0]]])),
                       (np.ix_([], [0], [1, 2]), 4.0)):
            D3[key] = backend.make(v) if np.ndim(v) else v
            H3[key] = v
            assert np.array_equal(value(D3), H3), (axis, key)


def test_written_values_that_do_not_fit_fail_on_every_worker(backend):
    # the selection D[:, 0] lies on worker 1 alone when D is split by columns: every
    # worker must raise, not only the one that writes (the others would go on)
    n, k = spmd_size(), spmd_index()
    G = whole((n + 1, 2 * n))
    for axis in (0, 1):
        D = distribute(backend.make(G), axis=axis)
        for key, v in [((slice(None), 0), np.ones(n + 2)), ((0, slice(None)), np.ones(3)),
                       ((0, 0), np.ones(2)), (([0, 1], slice(None)), np.ones((3, 2 * n)))]:
            with pytest.raises(SpmdValueError, match=rf"\(worker {k} of {n}\): could not "
                               rf"broadcast a value of shape"):
                D[key] = backend.make(v)
        assert np.array_equal(value(D), G)
        D[:, 0] = backend.make(np.ones((1, n + 1)))  # numpy drops leading length-1 axes
        H = G.copy()
        H[:, 0] = np.ones((1, n + 1))
        assert np.array_equal(value(D), H)


def test_subscripts_out_of_range_fail_on_every_worker():
    n = spmd_size()
    D = da.zeros((n + 1, 2))
    with pytest.raises(SpmdIndexError, match=rf"index {n + 1} is out of bounds for axis 0"):
        D[n + 1, 0]
    with pytest.raises(IndexError, match="index -3 is out of bounds for axis 1"):
        D[0, -3] = 1
    with pytest.raises(SpmdIndexError, match="too many indices"):
        D[0, 0, 0]
    with pytest.raises(SpmdTypeError, match="valid subscripts"):
        D["a"]


def test_mismatched_calls_fail_on_every_worker():
    n, k = spmd_size(), spmd_index()
    if n == 1:
        pytest.skip("needs two workers")
    D = da.zeros((n, 3 if k == 1 else 4))  # worker 1's shape differs
    with pytest.raises(SpmdMismatchError, match="they differ in: .*shape"):
        D.gather()
    E = da.zeros((n, 3))
    with pytest.raises(SpmdMismatchError):
        E.redistribute(axis=0 if k == 1 else 1)


def test_an_array_used_outside_its_region_fails():
    n = spmd_size()
    made = None
    for _ in spmd(max(n - 1, 1)):
        made = da.ones((4, 2))
        assert made.gather().sum() == 8
    if made is not None and n > 1:
        with pytest.raises(SpmdValueError, match="made with .* another spmd region"):
            made.gather()


def test_a_part_of_another_regions_array_is_refused():
    # getLocalPart / globalIndices / getCodistributor are local, but inside spmd(n) a
    # part of a world array would be read as the block's share (gplus of the parts
    # would sum part of the array): refused as the collectives are
    from spmdlab.matlab import getCodistributor, getLocalPart, globalIndices

    n = spmd_size()
    D = da.ones((4, 4))
    assert spmd_plus(float(np.sum(getLocalPart(D)))) == 16.0
    if n > 1:
        for _ in spmd(n - 1):
            for call in (lambda: getLocalPart(D), lambda: globalIndices(D, 2),
                         lambda: getCodistributor(D)):
                with pytest.raises(SpmdValueError, match="another spmd region"):
                    call()


def test_not_an_implicit_array():
    D = da.ones(3)
    with pytest.raises(TypeError, match="gather"):
        np.asarray(D)
    with pytest.raises(TypeError, match="not available for a CodistributedArray"):
        np.lexsort((D, D))
    with pytest.raises(TypeError, match="cannot be pickled"):
        import pickle
        pickle.dumps(D)
    assert "stores" in repr(D)


def test_copy_deepcopy_and_in_are_numpys():
    # copy.copy(D) and copy.deepcopy(D) (MATLAB's value copy E = D) raised "cannot be
    # pickled or sent"; 2.0 in D raised numpy's "truth value of an array ... ambiguous"
    import copy

    from spmdlab.matlab import codistributed

    n = spmd_size()
    A = np.arange(2.0 * n + 1).reshape(-1, 1) * np.ones(3)
    for D in (distribute(A), distribute(A, axis=1), codistributed(A)):
        for E in (copy.copy(D), copy.deepcopy(D), copy.deepcopy({"D": [D]})["D"][0]):
            assert type(E) is type(D) and E.codistributor == D.codistributor
            E[0, 0] = -1
            assert np.array_equal(E.gather()[1:], A[1:]) and D.gather()[0, 0] == A[0, 0]
        assert 2.0 in D and -1.0 not in D and 2 * n in D and 2 * n + 1 not in D


def test_mixed_families_are_refused():
    if torch is None:
        pytest.skip("needs torch")
    D = da.ones(4)
    T = da.ones(4, like=torch.zeros(0))
    with pytest.raises(SpmdTypeError, match="different families"):
        D + T


def test_a_cast_numpy_refuses_is_named_on_every_worker():
    k, n = spmd_index(), spmd_size()
    D = distribute(np.arange(2 * n + 1))  # integers, uneven
    with pytest.raises(SpmdTypeError, match=rf"\(worker {k} of {n}\): Cannot cast"):
        D += 1.5  # MATLAB would round; numpy refuses to cast float into int in place
    with pytest.raises(SpmdTypeError, match=rf"\(worker {k} of {n}\): Cannot cast"):
        np.add(D, 1.5, out=D, casting="same_kind")
    assert np.array_equal(D.gather(), np.arange(2 * n + 1))  # nothing was written
    D += 2  # an int: fine
    assert np.array_equal(D.gather(), np.arange(2 * n + 1) + 2)


def test_a_vector_written_through_a_mask_fills_in_numpys_order_in_every_split(backend):
    """MATLAB's D(D > t) = v on its default split (by columns) as on rows and on a 3-D
    array's middle axis: the i-th selected element (C order) gets v[i]."""
    k, n = spmd_index(), spmd_size()
    for shape in ((2 * n + 1, n + 2), (3, 2 * n + 1, 2)):
        G = np.arange(float(np.prod(shape))).reshape(shape) % 7
        for axis in range(len(shape)):
            D = distribute(backend.make(G), axis=axis)
            H = G.copy()
            picked = int((G > 3).sum())
            v = np.arange(100.0, 100.0 + picked)
            D[D > 3] = backend.make(v)  # a codistributed mask
            H[H > 3] = v
            assert np.array_equal(value(D), H), (shape, axis)
            D[G < 1] = list(range(int((G < 1).sum())))  # a replicated mask, a list
            H[G < 1] = list(range(int((G < 1).sum())))
            assert np.array_equal(value(D), H), (shape, axis)
            with pytest.raises(SpmdValueError, match=rf"\(worker {k} of {n}\): a value of "
                               rf"shape \({picked - 1},\) for {picked} selected"):
                D[G > 3] = v[:-1]


# -- complex max/min, argmax/argmin, reshape -------------------------------------------------


def complex_whole(shape, nan=False):
    """Complex values with ties in the real part (broken by the imaginary part), ties in
    both, and, with ``nan``, a NaN or two."""
    G = whole(shape)
    Z = np.round(G / 2) + 1j * np.round(np.cos(G) * 3)
    if nan:
        Z.reshape(-1)[Z.size // 2] = complex(np.nan, 1)
        Z.reshape(-1)[-1] = complex(np.nan, np.nan)
    return Z


def same_result(got, want, like):
    """``got`` (codistributed or a scalar of the family) equals numpy's ``want``
    exactly (NaN where numpy has NaN), with the family and numpy's dtype."""
    if isinstance(got, CodistributedArray):
        assert got.family == da.distribute(like).family
    elif np.ndim(want) == 0:
        assert type(got) is type(np.asarray(want)[()]) or type(got) is type(like)
    np.testing.assert_array_equal(value(got), want)
    assert value(got).dtype == np.asarray(want).dtype


def test_max_and_min_of_complex_values_are_numpys(backend):
    for shape in shapes():
        for nan in (False, True):
            G = complex_whole(shape, nan)
            for axis in range(len(shape)):
                D = distribute(backend.make(G), axis=axis)
                for ax in [None, *range(len(shape)), (0, len(shape) - 1)]:
                    for name in ("max", "min", "amax", "amin"):
                        got = getattr(np, name)(D, axis=ax)
                        same_result(got, getattr(np, name)(G, axis=ax), D.local)
                    kept = np.max(D, axis=ax, keepdims=True)
                    np.testing.assert_array_equal(value(kept),
                                                  np.max(G, axis=ax, keepdims=True))
                np.testing.assert_array_equal(value(D.min(axis=axis)), G.min(axis=axis))
    with pytest.raises(SpmdValueError, match=rf"numpy.max \(worker {spmd_index()} of "
                       rf"{spmd_size()}\): zero-size array"):
        np.max(distribute(np.zeros((0, 3), complex)))


def test_argmax_and_argmin_are_numpys(backend):
    for shape in shapes():
        for G in (np.round(whole(shape) / 3) ** 2, complex_whole(shape),
                  complex_whole(shape, nan=True), np.where(whole(shape) > 0, np.nan, 1.0)):
            for axis in range(len(shape)):
                D = distribute(backend.make(G), axis=axis)
                for ax in [None, *range(len(shape))]:
                    for name in ("argmax", "argmin"):
                        got = getattr(np, name)(D, axis=ax)
                        want = getattr(np, name)(G, axis=ax)
                        same_result(got, want, D.local)
                        kept = getattr(D, name)(axis=ax, keepdims=True)
                        np.testing.assert_array_equal(
                            value(kept), getattr(np, name)(G, axis=ax, keepdims=True))
                if ax is not None and shape[ax] > 1 and ax != axis:
                    assert got.axis == axis - (ax < axis)  # along another axis: local
    n, k = spmd_size(), spmd_index()
    with pytest.raises(SpmdValueError, match=rf"numpy.argmax \(worker {k} of {n}\): "
                       r"attempt to get the argmax of an empty sequence \(shape \(3, 0\)"):
        np.argmax(da.zeros((3, 0)))
    with pytest.raises(SpmdValueError, match=rf"numpy.argmin \(worker {k} of {n}\): axis 2 "
                       r"is out of bounds"):
        np.argmin(da.zeros((3, 2)), axis=2)


def test_reshape_ravel_and_flatten_are_numpys(backend):
    n = spmd_size()
    for shape in shapes():
        G = whole(shape)
        size = G.size
        news = [(-1,), (1, -1), (-1, 1), shape[::-1], shape + (1,), (size // shape[0],
                                                                       shape[0])]
        for axis in range(len(shape)):
            D = distribute(backend.make(G), axis=axis)
            for new in news:
                for order in ("C", "F"):
                    R = D.reshape(new, order=order)
                    want = G.reshape(new, order=order)
                    assert R.shape == want.shape and R.axis == 0
                    assert R.partition == da.default_partition(want.shape[0])
                    assert type(R.local) is type(D.local)
                    assert np.array_equal(backend.read(R.local), want[R.global_slice()])
                    assert np.array_equal(value(np.reshape(D, new, order=order)), want)
            assert np.array_equal(value(D.reshape(*shape[::-1])), G.reshape(shape[::-1]))
            for order in ("C", "F"):
                assert np.array_equal(value(D.ravel(order)), G.ravel(order))
                assert np.array_equal(value(np.ravel(D, order)), G.ravel(order))
            F = D.flatten()
            F.local[...] = 0  # a copy
            assert np.array_equal(value(D), G)
            M = da.distribute(backend.make(G), axis=axis)
            R = M.reshape(new)
            assert R.dtype == M.dtype
    k = spmd_index()
    D = da.zeros((n + 1, 3))
    with pytest.raises(SpmdValueError, match=rf"^CodistributedArray.reshape \(worker {k} of "
                       rf"{n}\): cannot reshape an array of size {3 * n + 3} into shape "
                       r"\(2, 5\)"):
        D.reshape(2, 5)
    with pytest.raises(SpmdValueError, match="may hold one -1"):
        np.reshape(D, (-1, -1))
    if n > 1:  # a shape that differs between workers is named, never waited on
        with pytest.raises(SpmdMismatchError, match="numpy.reshape"):
            np.reshape(D, (1, -1) if k == 1 else (-1, 1))


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")  # numpy's own, -1
def test_norms_of_integers_and_bools_are_numpys_in_float(backend):
    # numpy's norm converts integers and bools to float first: no overflow in abs(x)**2
    # (int8), no integer power refused for a negative order, a float result; a worker
    # that holds nothing must not skip a refusal the others make
    n = spmd_size()
    G = (np.arange(2 * (n + 1)).reshape(n + 1, 2) * 37 - 100).astype(np.int8)
    G[0, 0] = -128
    for A in (G, G > 0, G.astype(np.int64)):
        for axis in (0, 1):
            D = distribute(backend.make(A), axis=axis)
            for order in (None, "fro", 1, -1, 2, -2, np.inf, -np.inf, "nuc"):
                got, want = np.asarray(value(np.linalg.norm(D, order))), \
                    np.linalg.norm(A, order)
                assert got.dtype == want.dtype and np.allclose(got, want), (A.dtype, order)
            for order in (None, 0, 1, 3, -1, 0.5, np.inf, -np.inf):
                for ax in (0, 1):
                    got = np.asarray(value(np.linalg.norm(D, order, axis=ax)))
                    want = np.linalg.norm(A, order, axis=ax)
                    assert got.dtype == want.dtype and np.allclose(got, want), \
                        (A.dtype, order, ax)


def test_norms_of_single_precision_stay_single(backend):
    # numpy's 2, -2 and nuclear matrix norms and the count (ord 0) of float32 and
    # complex64 arrays are float32, as every other norm of them is
    n = spmd_size()
    G = whole((n + 2, n + 1)) / 3
    for A in (G.astype(np.float32), (G + 1j * G[::-1]).astype(np.complex64)):
        for axis in (0, 1):
            D = distribute(backend.make(A), axis=axis)
            for order in (None, "fro", 1, 2, -2, "nuc", np.inf):
                got = np.asarray(value(np.linalg.norm(D, order)))
                want = np.linalg.norm(A, order)
                assert got.dtype == want.dtype and np.allclose(got, want, rtol=1e-5), \
                    (A.dtype, order)
            for order in (0, 1, 2, np.inf):
                got = np.asarray(value(np.linalg.norm(D, order, axis=1)))
                want = np.linalg.norm(A, order, axis=1)
                assert got.dtype == want.dtype and np.allclose(got, want, rtol=1e-5), \
                    (A.dtype, order)


def test_a_negative_integer_power_of_integers_fails_on_every_worker(backend):
    # numpy refuses it only where a part holds an element: a worker that holds nothing
    # (or only non-negative exponents) went on while the others raised
    n, k = spmd_size(), spmd_index()
    D = distribute(backend.make(np.arange(1, 3)))  # two rows: workers 3.. hold none
    message = rf"^numpy.power \(worker {k} of {n}\): integers to negative integer powers"
    for make in (lambda: D ** -1, lambda: np.power(D, backend.make(np.array([1, -2]))),
                 lambda: 2 ** -D, lambda: D ** -D):
        with pytest.raises(SpmdValueError, match=message + r".*exponent -"):
            make()
    assert np.array_equal(value(D ** 2), [1, 4])
    assert np.allclose(value(D.astype(np.float64) ** -1), [1, 0.5])
    assert np.array_equal(value(D ** D), [1, 4])


def test_the_max_of_an_empty_axis_that_is_not_split_is_named_on_every_worker(backend):
    n, k = spmd_size(), spmd_index()
    for dtype in (np.float64, np.int32):
        for G, axis, ax in ((np.zeros((n + 1, 0), dtype), 0, 1),
                            (np.zeros((0, n + 1), dtype), 1, 0),
                            (np.zeros((2, 0, n), dtype), 2, (0, 1))):
            D = distribute(backend.make(G), axis=axis)
            for name in ("max", "min"):
                with pytest.raises(SpmdValueError, match=rf"^numpy.{name} \(worker {k} of "
                                   rf"{n}\): zero-size array to reduction operation"):
                    getattr(np, name)(D, axis=ax)
            assert value(np.sum(D, axis=ax)).shape == np.sum(G, axis=ax).shape


def test_clip_keywords_float16_means_and_values_the_dtype_refuses_on_every_worker():
    A = np.arange(12.0).reshape(4, 3) - 5
    D = da.distribute(A)
    assert np.array_equal(np.clip(D, min=0).gather(), np.clip(A, min=0))
    assert np.array_equal(np.clip(D, max=0).gather(), np.clip(A, max=0))
    with pytest.raises(SpmdTypeError, match="numpy.clip"):
        np.clip(D, 0, 1, casting="unsafe")
    H = np.full(3000, 100, np.float16)
    m = np.mean(da.distribute(H))
    assert m == np.mean(H) and m.dtype == np.float16
    R = np.mean(da.distribute(H.reshape(3, 1000)), axis=1)
    assert R.dtype == np.float16 and np.array_equal(R.gather(), np.mean(H.reshape(3, 1000), 1))
    E = da.distribute(np.zeros((spmd_size() + 1, 2), np.int8))
    with pytest.raises(SpmdValueError, match="worker"):
        E[spmd_size()] = 300  # only the last worker holds the row: every worker raises
    with pytest.raises(SpmdTypeError):
        E[0, 1] = 1j
    E[spmd_size()] = 5
    assert E.gather()[-1].tolist() == [5, 5]


@pytest.mark.skipif(torch is None, reason="torch")
def test_torch_results_never_share_the_operands_memory():
    T = da.distribute(torch.arange(6.0))
    for R in (T.astype(np.float32), +T):
        assert R.local.data_ptr() != T.local.data_ptr() or T.local.numel() == 0
    C = da.distribute(torch.complex(torch.arange(6.0), torch.ones(6)))
    K = C.conj()
    assert not K.local.is_conj()
    C.local[...] = 0
    assert (K.local.imag == -1).all()


def test_integer_division_by_zero_is_numpys_zero_on_every_family(backend):
    # numpy's integer // and % by zero give 0 (with a warning); torch's raise, on the
    # worker that holds the zero alone: torch parts follow numpy
    G = np.array([1, 2, 3, 4, 5, 0, -7, 0] * spmd_size(), np.int8)
    D = distribute(backend.make(G))
    with np.errstate(divide="ignore"):
        for got, want in ((10 // D, 10 // G), (D // D, G // G), (D % D, G % G),
                          (np.fmod(D, D), np.fmod(G, G)), (D // 0, G // 0), (D % 3, G % 3)):
            same_result(got, want, D.local)


def test_products_and_sums_of_bools_are_numpys(backend):
    # numpy's matmul of bools is an OR of ANDs, a sum with dtype=bool any, a prod all
    rng = np.random.default_rng(7)
    n = spmd_size()
    A, B = rng.random((3, 2 * n + 1)) > 0.6, rng.random((2 * n + 1, 4)) > 0.5
    for axis in (0, 1):
        D = distribute(backend.make(A), axis=axis)
        for ax in (None, 0, 1):
            np.testing.assert_array_equal(value(np.sum(D, axis=ax, dtype=bool)),
                                          np.sum(A, axis=ax, dtype=bool))
            np.testing.assert_array_equal(value(np.prod(D, axis=ax, dtype=bool)),
                                          np.prod(A, axis=ax, dtype=bool))
        # torch has no matmul of bools (and refused it only on the workers holding
        # elements): torch parts are multiplied as numpy's, on every worker alike
        np.testing.assert_array_equal(value(D @ B), A @ B)
        np.testing.assert_array_equal(value(D @ distribute(backend.make(B), axis=0)), A @ B)
        np.testing.assert_array_equal(value(D.T @ D), A.T @ A)
        np.testing.assert_array_equal(value(D @ D.T), A @ A.T)


@pytest.mark.skipif(torch is None, reason="torch")
def test_torch_products_of_different_dtypes_are_promoted():
    # torch's matmul refuses float32 @ float64 (a RuntimeError naming no call): the
    # operands are promoted, as torch's element-wise rules and numpy's matmul do
    n = spmd_size()
    A = whole((n + 1, 3)).astype(np.float32)
    x = np.arange(3.0)
    for axis in (0, 1):
        D = distribute(torch.from_numpy(A), axis=axis)
        for got in (D @ x, D @ torch.from_numpy(x), D @ distribute(torch.from_numpy(x))):
            assert got.family == "torch" and got.dtype == torch.float64
            np.testing.assert_allclose(value(got), A.astype(np.float64) @ x)
        E = distribute(torch.from_numpy(A.T.astype(np.float64)), axis=axis)
        np.testing.assert_allclose(value(D @ E), A.astype(np.float64) @ A.T)
        I = distribute(torch.from_numpy(A.astype(np.int64)), axis=axis)
        np.testing.assert_allclose(value(I @ x), A.astype(np.int64) @ x)


@pytest.mark.skipif(torch is None, reason="torch")
def test_torch_isclose_takes_numbers_and_other_dtypes_as_numpy_does():
    # torch.isclose takes two tensors of one dtype: np.isclose(D, 0.5) of torch parts was
    # torch's TypeError (as SpmdTypeError), and an int part beside floats its RuntimeError
    n = spmd_size()
    A = whole((n + 1, 3))
    A[0, 1] = 0.5
    N = np.arange(3 * (n + 1)).reshape(n + 1, 3) % 3
    for axis in (0, 1):
        D = distribute(torch.from_numpy(A), axis=axis)
        I = distribute(torch.from_numpy(N), axis=axis)
        for got, want in [(np.isclose(D, 0.5), np.isclose(A, 0.5)),
                          (np.isclose(0.5, D), np.isclose(0.5, A)),
                          (np.isclose(D, A[0]), np.isclose(A, A[0])),
                          (np.isclose(I, 1.0), np.isclose(N, 1.0)),
                          (np.isclose(I, 1), np.isclose(N, 1)),
                          (np.isclose(D, I), np.isclose(A, N))]:
            assert got.family == "torch" and got.dtype == torch.bool
            np.testing.assert_array_equal(value(got), want)
        assert np.allclose(D, D) and np.allclose(D * 0 + 0.5, 0.5)
        assert not np.allclose(D, 0.5)


@pytest.mark.skipif(torch is None, reason="torch")
def test_torch_sign_and_heaviside_keep_nan_as_numpy_does():
    # torch.sign(NaN) is 0 and torch.heaviside(NaN, v) 0 or 1, silently (numpy: NaN);
    # torch.sign refuses complex values and torch.heaviside a number (numpy 2: z / |z|)
    n = spmd_size()
    A = whole((n + 1, 3))
    A[0, 1] = A[-1, -1] = np.nan
    Z = A + 1j * A[::-1]
    for axis in (0, 1):
        D = distribute(torch.from_numpy(A), axis=axis)
        for got, want in [(np.sign(D), np.sign(A)), (np.heaviside(D, 0.5),
                                                      np.heaviside(A, 0.5)),
                          (np.heaviside(D, D), np.heaviside(A, A)),
                          (np.sign(distribute(torch.from_numpy(Z), axis=axis)), np.sign(Z))]:
            assert got.family == "torch" and value(got).dtype == want.dtype
            np.testing.assert_allclose(value(got), want, rtol=1e-15)  # (complex: torch's
            # z / |z| rounds its own way)
        out = D.copy()
        np.sign(D, out=out)
        np.testing.assert_array_equal(value(out), np.sign(A))


@pytest.mark.skipif(torch is None, reason="torch")
def test_torch_refusals_name_the_call_and_worker():
    k, n = spmd_index(), spmd_size()
    I = da.distribute(torch.arange(2 * n + 1))
    with pytest.raises(SpmdTypeError, match=rf"^numpy.add \(worker {k} of {n}\): "):
        I += 1.5                                 # torch: a RuntimeError before
    C = da.distribute(torch.ones(n + 1, dtype=torch.complex64))
    with pytest.raises(SpmdTypeError, match=rf"^numpy.greater \(worker {k} of {n}\): "):
        C > 0
    with pytest.raises(SpmdTypeError, match=rf"^CodistributedArray.astype \(worker {k} "
                                            rf"of {n}\): .*'bogus'"):
        C.astype("bogus")
    with pytest.raises(SpmdTypeError, match=rf"^zeros \(worker {k} of {n}\): "):
        da.zeros(3, dtype="bogus")


@pytest.mark.skipif(torch is None, reason="torch")
def test_torch_dtypes_are_accepted_and_bools_have_numpys_statistics():
    n = spmd_size()
    T = da.distribute(torch.arange(2.0 * n + 1))
    assert T.astype(torch.int32).dtype == torch.int32
    assert T.astype(torch.int32).gather().tolist() == list(range(2 * n + 1))
    O = da.ones((n + 1, 2), dtype=torch.float32, like=torch.zeros(0))
    assert O.family == "torch" and O.dtype == torch.float32
    G = np.arange(3 * (n + 1)).reshape(n + 1, 3) % 3 == 0
    B = da.distribute(torch.from_numpy(G))
    for ax in (None, 0, 1):
        np.testing.assert_allclose(value(np.var(B, axis=ax)), np.var(G, axis=ax))
        np.testing.assert_allclose(value(np.std(B, axis=ax)), np.std(G, axis=ax))


def test_negative_axes_count_from_the_end(backend):
    k, n = spmd_index(), spmd_size()
    G = whole((n + 1, 3, 2))
    for axis in (-1, -2, -3):
        want = axis + 3
        assert distribute(backend.make(G), axis=axis).axis == want
        assert da.zeros(G.shape, axis=axis).axis == want
        D = distribute(backend.make(G)).redistribute(axis=axis)
        assert D.axis == want and np.array_equal(value(D), G)
        L = backend.make(np.ones((2, 3, 2)))
        P = from_local(L, axis=axis)
        assert P.axis == want and P.shape[want] == L.shape[want] * n
    for call, make in (("distribute", lambda: distribute(backend.make(G), axis=-4)),
                       ("zeros", lambda: da.zeros(G.shape, axis=-4)),
                       ("CodistributedArray.redistribute",
                        lambda: distribute(backend.make(G)).redistribute(axis=-4)),
                       ("from_local", lambda: from_local(backend.make(G), axis=-4))):
        with pytest.raises(SpmdValueError, match=rf"^{call} \(worker {k} of {n}\): .*"
                                                 rf"axis -4 is beyond"):
            make()


def test_cumsum_and_cumprod_methods(backend):
    G = whole((spmd_size() + 1, 3))
    D = distribute(backend.make(G))
    for axis in (0, 1):
        np.testing.assert_array_equal(value(D.cumsum(axis=axis)), G.cumsum(axis=axis))
        np.testing.assert_array_equal(value(D.cumprod(axis)), G.cumprod(axis))


def test_argmax_and_argmin_of_bools_on_every_family(backend):
    # torch's argmax refuses bools, on the workers that hold elements only (the others
    # went on into the collective): torch parts are picked as numpy's, on every worker
    n = spmd_size()
    G = np.arange(3 * (n + 1)).reshape(n + 1, 3) % 4 == 1
    G[0, 0] = False
    for axis in (0, 1):
        D = distribute(backend.make(G), axis=axis)
        for ax in (None, 0, 1):
            same_result(np.argmax(D, axis=ax), np.argmax(G, axis=ax), D.local)
            same_result(np.argmin(D, axis=ax), np.argmin(G, axis=ax), D.local)


def test_matrix_norms_from_singular_values_are_scalars_and_take_empty_arrays(backend):
    # the 2, -2 and nuclear norms are a scalar of the family, as numpy's and the other
    # norms are (not a 0-d array); of an empty matrix the 2 and nuclear norms are 0, and
    # the -2 norm is numpy's refusal, named, on every worker
    n = spmd_size()
    G = whole((n + 2, 3))
    for axis in (0, 1):
        D = distribute(backend.make(G), axis=axis)
        for order in (2, -2, "nuc"):
            got, want = np.linalg.norm(D, order), np.linalg.norm(G, order)
            assert type(got) in (type(want), type(D.local)), (order, type(got))
            assert value(got).dtype == want.dtype and np.isclose(value(got), want)
    for shape in ((0, n + 1), (n + 1, 0), (0, 0)):
        Z = np.zeros(shape)
        for axis in (0, 1):
            D = distribute(backend.make(Z), axis=axis)
            for order in (2, "nuc"):
                same_result(np.linalg.norm(D, order), np.linalg.norm(Z, order), D.local)
            with pytest.raises(SpmdValueError, match=r"numpy.linalg.norm \(worker .*zero-"):
                np.linalg.norm(D, -2)


def test_a_boolean_mask_of_another_shape_is_an_index_error_on_every_worker(backend):
    # numpy's IndexError, naming both shapes, for a mask of the transposed array, of too
    # few rows, or codistributed (not "gather it first": that would not help)
    n = spmd_size()
    G = whole((n + 1, n + 2))
    D = distribute(backend.make(G))
    for mask in (G.T > 0, G[:-1] > 0, distribute(backend.make(G.T > 0)), [[True] * 2]):
        shape = mask.shape if isinstance(mask, CodistributedArray) else np.shape(mask)
        text = rf"a boolean mask of shape \({shape[0]}, {shape[1]}\) does not match"
        with pytest.raises(SpmdIndexError, match=text):
            D[mask]
        with pytest.raises(IndexError, match=text):
            D[mask] = 0
    rows = np.arange(n + 1) % 2 == 0  # one axis's boolean index is still numpy's
    np.testing.assert_array_equal(value(D[rows]), G[rows])
    full = distribute(backend.make(G > n))  # (in a one-element tuple: numpy's D[mask])
    np.testing.assert_array_equal(value(D[(full,)]), G[G > n])


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy's, for ddof past the count
def test_variance_with_ddof_past_the_count_is_numpys_nan_or_inf(backend):
    # numpy divides by max(count - ddof, 0): never a negative variance (and std a NaN)
    n = spmd_size()
    G = whole((n + 1, 3))
    for A in (G, np.zeros((0, 3))):
        for axis in (0, 1):
            D = distribute(backend.make(A), axis=axis)
            for ax, ddof in ((0, n + 2), (0, n + 1), (1, 4), (None, 3 * n + 5), (0, 1)):
                for name in ("var", "std"):
                    got = value(getattr(np, name)(D, axis=ax, ddof=ddof))
                    np.testing.assert_array_equal(got, getattr(np, name)(A, axis=ax,
                                                                          ddof=ddof))
                    # numpy 2's name for ddof (refused as an option before)
                    got = value(getattr(np, name)(D, axis=ax, correction=ddof))
                    np.testing.assert_array_equal(got, getattr(np, name)(A, axis=ax,
                                                                          ddof=ddof))
    with pytest.raises(SpmdValueError, match=r"numpy.std \(worker \d+ of \d+\): ddof and "
                       r"correction can't be provided simultaneously"):
        np.std(D, ddof=1, correction=1)


def test_one_and_inf_norms_of_an_empty_matrix_are_numpys_zero(backend):
    # numpy's 1 and inf norms are maxima from 0: of a matrix with no rows or columns, 0
    # (its -1 and -inf norms are numpy's refusal, named, on every worker)
    n = spmd_size()
    for shape in ((0, n + 1), (n + 1, 0), (0, 0)):
        Z = np.zeros(shape)
        for axis in (0, 1):
            D = distribute(backend.make(Z), axis=axis)
            for order in (1, np.inf, -1, -np.inf):
                try:
                    want = np.linalg.norm(Z, order)
                except ValueError:
                    with pytest.raises(SpmdValueError, match=r"numpy.linalg.norm \(worker"):
                        np.linalg.norm(D, order)
                else:
                    same_result(np.linalg.norm(D, order), want, D.local)


def test_values_a_mask_cannot_write_fail_named_on_every_worker(backend):
    # MATLAB's D(D > t) = v: a scalar the dtype refuses, or a vector of values it
    # refuses where the mask selects elements of one worker only, fail on every worker
    # with the call and the worker named (numpy's bare error, on some workers, before)
    k, n = spmd_index(), spmd_size()
    G = whole((n + 1, 2 * n))
    first = np.zeros(G.shape, bool)
    first[0, 0] = True  # on worker 1 alone, split either way
    for axis in (0, 1):
        I = distribute(backend.make(G.astype(np.int8)), axis=axis)
        for mask in (first, I > 100, distribute(backend.make(first), axis=1 - axis)):
            for v in (300, np.nan, "x"):
                with pytest.raises((SpmdValueError, SpmdTypeError),
                                   match=rf"\(worker {k} of {n}\): the value cannot be "
                                   rf"written into an array of"):
                    I[mask] = v
        D = distribute(backend.make(G), axis=axis)
        with pytest.raises((SpmdValueError, SpmdTypeError),
                           match=rf"\(worker {k} of {n}\): the value cannot be written"):
            D[first] = ["x"]
        assert np.array_equal(value(D), G) and np.array_equal(value(I), G.astype(np.int8))
    assert spmd_plus(1) == n


def test_arguments_that_differ_between_workers_fail_named_on_every_worker():
    # np.percentile(D, q) with a q of each worker's own would mix their answers: every
    # worker raises, naming the parameter and each worker's value
    if spmd_size() == 1:
        pytest.skip("needs a second worker")
    k = spmd_index()
    D = distribute(np.arange(4.0 * spmd_size() * 5).reshape(-1, 5))
    cases = [(lambda: np.percentile(D, 10 * k, axis=0), "q", "q=10", "q=20"),
             (lambda: np.roll(D, k, axis=1), "shift", "shift=1, axis=1", "shift=2, axis=1"),
             (lambda: np.delete(D, [k], axis=1), "obj", "obj=[1]", "obj=[2]"),
             (lambda: np.sum(D, axis=k % 2), "axis", "axis=1", "axis=0"),
             (lambda: np.dot(D, np.full(5, float(k))), "b", "b=array([1.", "b=array([2.")]
    for fn, name, first, second in cases:
        with pytest.raises(SpmdMismatchError) as info:
            fn()
        text = str(info.value)
        assert f"workers passed different arguments (they differ in: {name})" in text
        assert first in text and second in text, text
    # the methods that take such arguments
    with pytest.raises(SpmdMismatchError, match=r"CodistributedArray.astype .*they differ "
                                                r"in: dtype"):
        D.astype(np.float32 if k == 1 else np.float64)
    with pytest.raises(SpmdMismatchError, match=r"numpy.transpose .*they differ in: axes"):
        D.transpose((0, 1) if k == 1 else (1, 0))
    # the same arguments everywhere: as before; a default passed or left out is one call
    np.testing.assert_array_equal(value(np.roll(D, 2, axis=1)),
                                  np.roll(D.gather(), 2, axis=1))
    total = np.sum(D) if k == 1 else np.sum(D, axis=None, keepdims=False)
    assert float(total) == float(D.gather().sum())
    assert D.astype(np.float32).dtype == np.float32


def test_a_product_with_an_operand_of_each_workers_own_fails_named_on_every_worker():
    # D @ x and x @ D (numpy's matmul ufunc) with an x of each worker's own mixed the
    # workers' answers silently, where np.dot(D, x) raised; a larger array's contents
    # are shown by a digest (each worker was shown the same '<array float64 (6, 2)>')
    if spmd_size() == 1:
        pytest.skip("needs a second worker")
    k, n = spmd_index(), spmd_size()
    G = whole((2 * n, 6))
    D = distribute(G)
    cases = [(lambda: D @ np.full(6, float(k)), "x2", "x2=array([1.", "x2=array([2."),
             (lambda: np.matmul(D, np.full(6, float(k))), "x2", "x2=array([1.",
              "x2=array([2."),
             (lambda: np.full(2 * n, float(k)) @ D, "x1",  # (over 8 elements from 5 workers)
              *(["x1=array([1.", "x1=array([2."] if 2 * n <= 8 else ["contents "] * 2)),
             (lambda: D @ np.full((6, 2), float(k)), "x2", "contents ", "contents "),
             (lambda: np.dot(D, np.full((6, 2), float(k))), "b", "contents ", "contents ")]
    for fn, name, first, second in cases:
        with pytest.raises(SpmdMismatchError) as info:
            fn()
        text = str(info.value)
        assert f"workers passed different arguments (they differ in: {name})" in text, text
        assert "worker 1: numpy." in text and "worker 2: numpy." in text, text
        assert first in text and second in text, text
    # the same operand everywhere: numpy's product
    x, y = np.arange(6.0), np.arange(2.0 * n)
    np.testing.assert_array_equal(value(D @ x), G @ x)
    np.testing.assert_array_equal(value(y @ D), y @ G)
    np.testing.assert_array_equal(value(D @ np.ones((6, 2))), G @ np.ones((6, 2)))


def test_arguments_compared_by_name_and_beside_codistributed_arrays_in_lists():
    # by position on one worker, by keyword on another; keywords in another order (as
    # **options built from a set of names gives, with each process's string hashes)
    k = spmd_index()
    G = np.arange(4.0 * spmd_size() * 5).reshape(-1, 5)
    D, E = distribute(G), distribute(G + 1)
    both = np.concatenate((D, E), 1) if k % 2 else np.concatenate((D, E), axis=1)
    np.testing.assert_array_equal(value(both), np.concatenate((G, G + 1), 1))
    options = [("axis", 0), ("keepdims", True), ("dtype", np.float64)]
    if k % 2:
        options.reverse()
    np.testing.assert_array_equal(value(np.sum(D, **dict(options))),
                                  np.sum(G, axis=0, keepdims=True))
    # beside codistributed arrays in a list, an array of each worker's own
    if spmd_size() > 1:
        with pytest.raises(SpmdMismatchError, match=r"they differ in: arrays\)"):
            np.concatenate([D, np.full((1, 5), float(k))])
    # 'out' is written, not read: a buffer of each worker's own is no mismatch (and numpy's
    # 'out' is refused as before)
    with pytest.raises(SpmdTypeError, match="'out' is not available"):
        np.sum(D, axis=0, out=np.full(5, float(k)))


def test_a_slice_written_into_an_overlapping_slice_of_itself(backend):
    # MATLAB's u(2:end, :) = u(1:end-1, :) and u(2:end) = u(2:end) + u(1:end-1): the right
    # side is read whole first, as numpy does (torch refused some such overlaps on the
    # workers holding elements, and copied others element by element: wrong values)
    n = spmd_size()
    for shape in ((n + 2, 3), (8, 3), (3, n + 1)):
        for axis in (0, 1):
            G = whole(shape)
            cases = [(lambda A: A.__setitem__(slice(1, None), A[:-1]), slice(1, None),
                      lambda A: A[:-1].copy()),
                     (lambda A: A.__setitem__(slice(None, -1), A[1:]), slice(None, -1),
                      lambda A: A[1:].copy()),
                     (lambda A: A.__setitem__((slice(None), slice(1, None)), A[:, :-1]),
                      (slice(None), slice(1, None)), lambda A: A[:, :-1].copy()),
                     (lambda A: A.__setitem__(slice(None, None, 2), A[:(shape[0] + 1) // 2]),
                      slice(None, None, 2), lambda A: A[:(shape[0] + 1) // 2].copy())]
            for write, key, source in cases:
                D = da.distribute(backend.make(G), axis=axis)
                write(D)
                want = G.copy()
                want[key] = source(G)
                assert np.array_equal(value(D), want), (shape, axis, key)
            D = da.distribute(backend.make(G), axis=axis)
            D[1:] += D[:-1]
            want = G.copy()
            want[1:] += G[:-1].copy()
            assert np.array_equal(value(D), want)
            D *= D  # the same view in and out: done in place, as before
            assert np.array_equal(value(D), want * want)


def test_conj_of_real_values_keeps_their_dtype(backend):
    # MATLAB's mask' is logical: D.conj().T keeps bools and ints, as numpy's ndarray.conj
    for G in (np.arange(2 * spmd_size() + 1) % 3 == 0, np.arange(5, dtype=np.int16)):
        D = da.distribute(backend.make(G))
        E = D.conj()
        assert value(E).dtype == G.conj().dtype and np.array_equal(value(E), G)
        assert E.local is not D.local


@pytest.mark.parametrize("case", ["gather list", "gather 0-d", "from_local object",
                                  "from_local codistributor"])
def test_a_bad_argument_on_one_worker_of_a_darray_call_fails_everywhere(case):
    # checked (or hashed) before the call's exchange on the worker that passed it alone
    k, n = spmd_index(), spmd_size()
    D = da.distribute(np.arange(4.0 * n).reshape(n, 4))
    one = k == n
    if case.startswith("gather"):
        bad = [1] if case == "gather list" else np.array(1)
        with pytest.raises(SpmdTypeError, match=r"CodistributedArray.gather .*'destination' "
                                                r"must be a worker number"):
            D.gather(bad if one else 1)
    elif case == "from_local object":
        with pytest.raises(SpmdTypeError, match=r"from_local .*not objects"):
            da.from_local(object() if one else np.ones(2))
    else:
        with pytest.raises(SpmdTypeError, match=r"from_local .*'codistributor' must be a "
                                                r"Codistributor \(got 'x'"):
            da.from_local(np.ones(2), "x" if one else None)
    assert D.gather().shape == (n, 4)


@pytest.mark.skipif(torch is None, reason="torch")
def test_bfloat16_parts_sort_and_pick_by_their_values():
    # a bfloat16 part's host stand-in is its bits as int16: numpy sorted it by them
    # (negative numbers backwards) and refused argmax/median ("data type not ordered")
    t = torch.tensor([[-1.0, 2.0, -0.25], [-3.0, 0.5, 4.0], [4.0, -0.25, -8.0],
                      [0.0, -2.0, 1.5], [float("nan"), 1.0, -1.0]] * spmd_size(),
                     dtype=torch.bfloat16)
    ref = t.float().numpy()
    for axis in (0, 1):
        D = distribute(t, axis=axis)
        for ax in (0, 1):
            s = np.sort(D, axis=ax).gather()
            assert s.dtype == torch.bfloat16
            assert np.array_equal(s.float().numpy(), np.sort(ref, axis=ax), equal_nan=True)
            assert np.array_equal(np.argsort(D, axis=ax, kind="stable").gather().numpy(),
                                  np.argsort(ref, axis=ax, kind="stable"))
            for f in (np.argmax, np.argmin):
                assert np.array_equal(np.asarray(value(f(D, axis=ax))), f(ref, axis=ax))
            m = np.median(D[1:4], axis=ax).gather()
            assert m.dtype == torch.bfloat16 and torch.equal(
                m, torch.from_numpy(np.median(ref[1:4], axis=ax)).to(torch.bfloat16))
        assert int(value(np.argmin(D))) == int(np.argmin(ref))
        u, i, c = np.unique(D, return_index=True, return_counts=True)
        ru, ri, rc = np.unique(ref, return_index=True, return_counts=True)
        assert u.gather().dtype == torch.bfloat16 and np.array_equal(
            u.gather().float().numpy(), ru, equal_nan=True)
        assert np.array_equal(value(i), ri) and np.array_equal(value(c), rc)
    from spmdlab.matlab import max as mmax, min as mmin  # MATLAB's (NaN left out)
    flat = t.reshape(-1)
    assert float(mmax(distribute(flat))) == float(np.nanmax(ref)) == float(mmax(flat))
    M, Im = mmin(distribute(t, axis=1), [], 2, nargout=2)
    assert np.array_equal(value(Im).ravel(), np.nanargmin(ref, axis=1) + 1)


@pytest.mark.skipif(torch is None, reason="torch")
def test_torch_results_of_a_dtype_numpy_has_none_for_fail_where_they_are_made():
    # 1j + D of float16 parts is torch's complex32, which no collective can move: the
    # gather that followed raised a bare KeyError; refused where it is made, everywhere
    D = da.distribute(torch.ones(2 * spmd_size() + 1, dtype=torch.float16))
    for make in (lambda: 1j + D, lambda: D * torch.ones(1, dtype=torch.complex32),
                 lambda: np.where(D > 0, D, 1j), lambda: D.astype(torch.complex32),
                 lambda: D.astype(torch.float8_e4m3fn)):
        with pytest.raises(SpmdTypeError, match=r"\(worker \d+ of \d+\): the result's local "
                                                r"parts would be Tensors of (complex32|"
                                                r"float8_e4m3fn), which numpy has no dtype"):
            make()
    assert value(D + 1j * np.ones(1, np.complex64)).dtype == np.complex64


def test_a_reduction_in_a_dtype_the_family_cannot_reduce_in_fails_on_every_worker(backend):
    # np.sum(D, dtype=torch.complex32) raised torch's bare NotImplementedError, and only
    # on the workers whose part held elements (torch sums no complex32 values, but
    # refuses two): the others went on into the fold. numpy's unknown dtype name too
    D = da.distribute(backend.make(np.arange(2.0 * spmd_size() - 1)))
    bad = [("complex32", r"TypeError: data type 'complex32' not understood")]
    if torch is not None and isinstance(D.local, torch.Tensor):
        bad.append((torch.complex32, r"NotImplementedError: .*ComplexHalf"))
    for dtype, why in bad:
        for fn in (np.sum, np.mean, np.prod, np.nansum):
            name = "prod" if fn is np.prod else "sum"
            with pytest.raises(SpmdTypeError, match=rf"numpy\.{fn.__name__} \(worker \d+ "
                               rf"of \d+\): cannot {name} in dtype .*{why}"):
                fn(D, dtype=dtype)
    assert float(np.sum(D, dtype=np.float32)) == float(np.arange(2.0 * spmd_size() - 1).sum())


def test_complex_products_along_the_split_axis_leave_out_workers_that_hold_nothing(backend):
    # an empty block's product, 1+0j, is not neutral: (1+0j) * (inf+nanj) is nan+nanj,
    # where numpy's product of the one element is inf+nanj
    n = spmd_size()
    G = np.array([[complex(np.inf, 0), 2 - 1j], [1 + 1j, complex(0, np.inf)]], np.complex64)
    for axis in (0, 1):
        for k in range(n):  # one worker holds the axis: numpy's product, bit for bit
            part = (0,) * k + (2,) + (0,) * (n - k - 1)
            D = distribute(backend.make(G), Codistributor(axis, part))
            with np.errstate(invalid="ignore"):
                for ax in (None, axis):
                    for keepdims in (False, True):
                        got = value(np.prod(D, axis=ax, keepdims=keepdims))
                        want = np.prod(G, axis=ax, keepdims=keepdims)
                        assert got.dtype == want.dtype and got.shape == want.shape
                        np.testing.assert_array_equal(got, want)


def test_powers_of_numpy_parts_are_numpys_operator():
    # numpy's A ** 2 is np.square (bools give int8, np.power's int64; complex values
    # have square's bits), A ** 0.5 of floats np.sqrt and A ** -1 np.reciprocal
    n = spmd_size()
    rng = np.random.default_rng(3)
    z = (rng.standard_normal(4 * n + 3) + 1j * rng.standard_normal(4 * n + 3)) * 3
    for G in (np.arange(2 * n + 1) % 2 == 0, np.arange(2 * n + 1, dtype=np.int8),
              z.astype(np.complex64), z, z.real.astype(np.float16)):
        D = distribute(G)
        for k in (2, 0.5, -1, 3, 2.0):
            if G.dtype.kind in "biu" and k == -1:
                continue
            with np.errstate(all="ignore"):
                got, want = value(D ** k), G ** k
            assert got.dtype == want.dtype and got.tobytes() == want.tobytes(), (G.dtype, k)


def test_an_empty_list_subscript_picks_nothing_as_numpys():
    # np.asarray([]) is float64: D[[]] and D[:, []] were refused as a float subscript
    G = whole((spmd_size() + 1, 4))
    for axis in (0, 1):
        D = distribute(G, axis=axis)
        for key in ([], ([], slice(None)), (slice(None), []), (1, [])):
            got, want = value(D[key]), G[key]
            assert got.shape == want.shape and got.dtype == want.dtype
            E, F = D.copy(), G.copy()
            E[key], F[key] = 7, 7
            assert np.array_equal(value(E), F)


def test_in_place_powers_of_numpy_parts_are_numpys_operator():
    # numpy's A **= k takes A ** k's fast path too (np.square, np.sqrt, np.reciprocal):
    # D **= 2 of complex values had np.power's bits, not numpy's
    n = spmd_size()
    rng = np.random.default_rng(4)
    z = (rng.standard_normal(4 * n + 3) + 1j * rng.standard_normal(4 * n + 3)) * 3
    for G in (np.arange(2 * n + 1, dtype=np.int8), z.astype(np.complex64), z,
              z.real.astype(np.float16)):
        for k in ((2, 3) if G.dtype.kind == "i" else (2, 0.5, -1, 3, 2.0)):
            D, want = distribute(G), G.copy()
            E = D
            with np.errstate(all="ignore"):
                D **= k
                want **= k
            assert D is E and D.dtype == want.dtype
            assert value(D).tobytes() == want.tobytes(), (G.dtype, k)
    D = distribute(np.arange(2 * n + 1) % 2 == 0)  # numpy's: square's int8 is no bool
    with pytest.raises(SpmdTypeError, match=r"numpy.square \(worker .*Cannot cast"):
        D **= 2


def test_means_of_complex64_are_numpys():
    # numpy divides a mean's sum by its count as an intp: complex64 in complex128,
    # rounded back; a complex64 division gave other bits, at every worker count
    n = spmd_size()
    rng = np.random.default_rng(5)
    G = (rng.standard_normal((2 * n + 1, 7)) + 1j * rng.standard_normal((2 * n + 1, 7)))
    G = G.astype(np.complex64)
    D = distribute(G)
    for keepdims in (False, True):
        got, want = np.mean(D, axis=1, keepdims=keepdims), np.mean(G, axis=1,
                                                                     keepdims=keepdims)
        assert value(got).dtype == want.dtype and value(got).tobytes() == want.tobytes()
        if n == 1:  # (along the split axis the workers' sums are folded: other bits)
            got, want = np.mean(D, keepdims=keepdims), np.mean(G, keepdims=keepdims)
            assert value(got).dtype == want.dtype and value(got).tobytes() == want.tobytes()
    got, want = np.var(D, axis=1), np.var(G, axis=1)
    assert value(got).dtype == want.dtype and value(got).tobytes() == want.tobytes()


def test_the_inf_norm_of_a_vector_of_no_elements_is_numpys_zero():
    # numpy's vector inf norm is a maximum from 0: 0 of no elements (was refused)
    n = spmd_size()
    for dtype in (np.float64, np.float32, np.complex64, np.int8):
        G = np.zeros(0, dtype)
        same_result(np.linalg.norm(distribute(G), np.inf), np.linalg.norm(G, np.inf), G)
    G = np.zeros((n + 1, 0))
    for axis in (0, 1):
        D = distribute(G, axis=axis)
        for keepdims in (False, True):
            got = np.linalg.norm(D, np.inf, axis=1, keepdims=keepdims)
            same_result(got, np.linalg.norm(G, np.inf, axis=1, keepdims=keepdims), G)
    with pytest.raises(SpmdValueError, match=r"numpy.linalg.norm \(worker .*axis 3 is out"):
        np.linalg.norm(distribute(np.zeros(0)), np.inf, axis=3)


def test_reductions_along_other_axes_have_the_gathered_arrays_bits():
    # numpy reduces in an order that follows the layout: a block one wide along the split
    # axis (a matrix split by columns over as many workers) is added pairwise along the
    # other axis where the gathered matrix adds its rows one after the other, and a
    # transpose's block (not in C order) column by column; their bits differed
    n = spmd_size()
    rng = np.random.default_rng(6)
    G = rng.standard_normal((1000, n))
    for D, A in ((distribute(G, axis=1), G),
                 (distribute(G.T.copy(), axis=0).T, G),
                 (distribute(np.concatenate([G.T, G.T]), axis=0).T,
                  np.ascontiguousarray(np.concatenate([G.T, G.T]).T)),
                 (distribute(G.reshape(250, 4, n), axis=2), G.reshape(250, 4, n)),
                 (distribute(G.reshape(250, 4, n).astype(np.float32), axis=2),
                  G.reshape(250, 4, n).astype(np.float32))):
        for f in (np.sum, np.mean, np.var, np.std, np.linalg.norm):
            axes = [0] + ([(0, 1), 1] if A.ndim == 3 else [])
            for axis in axes:
                got, want = value(f(D, axis=axis)), f(A, axis=axis)
                assert got.dtype == want.dtype and got.tobytes() == want.tobytes(), \
                    (f.__name__, A.shape, axis)


def test_python_round_of_a_codistributed_array_is_numpys():
    # round(D) had no __round__ (a bare TypeError); numpy's round(A) is np.round(A)
    A = np.linspace(-2.5, 2.5, 2 * spmd_size() + 3)
    D = da.distribute(A)
    assert np.array_equal(value(round(D)), np.round(A))
    assert np.array_equal(value(round(D / 3, 2)), np.round(A / 3, 2))


def test_clip_of_integers_drops_a_python_int_bound_past_the_dtypes_range_as_numpy():
    # numpy's clip: a Python int bound at or past an integer dtype's limit bounds nothing
    # (np.clip(uint16, -2, 1) is uint16); np.maximum(D, -2) raised OverflowError
    n = spmd_size()
    for dtype in (np.uint8, np.uint16, np.uint64, np.int8):
        G = (np.arange(3 * n + 1) % 7).astype(dtype)
        D = distribute(G)
        for lo, hi in ((-2, 1), (-2, 10 ** 20), (None, 10 ** 20), (-(10 ** 20), None)):
            same_result(np.clip(D, lo, hi), np.clip(G, lo, hi), G)
            same_result(D.clip(lo, hi), np.clip(G, lo, hi), G)
        same_result(np.clip(D, -2.0, 1), np.clip(G, -2.0, 1), G)  # a float: float64
        with pytest.raises(OverflowError):  # as numpy's: a bound inside the other side
            np.clip(D, None, -(10 ** 20))


def test_a_mean_in_an_integer_dtype_is_numpys_integer():
    # numpy divides the sum into its integer dtype (casting="unsafe"): was a float64
    n = spmd_size()
    G = (np.arange(6 * (n + 1)) % 5).astype(np.uint32).reshape(n + 1, 6)
    for axis in (0, 1):
        D = distribute(G, axis=axis)
        for dtype in (np.int64, np.int8, np.uint16):
            for ax in (0, 1, None):
                for keepdims in (False, True):
                    got = np.mean(D, axis=ax, dtype=dtype, keepdims=keepdims)
                    same_result(got, np.mean(G, axis=ax, dtype=dtype, keepdims=keepdims), G)
        same_result(D.mean(axis=0, dtype=np.int64), np.mean(G, axis=0, dtype=np.int64), G)


def test_norms_of_complex_values_square_as_numpy_does():
    # numpy's norm squares re * re + im * im; abs(x) squared, rounded twice, gave the
    # norm of [4+2j, -3] 1 ulp off (5.385164807134505 for numpy's 5.385164807134504)
    n = spmd_size()
    for dtype in (np.complex128, np.complex64):
        G = np.array([4 + 2j, -3] + [0] * (n - 1), dtype)
        same_result(np.linalg.norm(distribute(G)), np.linalg.norm(G), G)
        M = np.array([[4 + 2j, -3], [0, 0]] * n, dtype)
        for axis in (0, 1):
            D = distribute(M, axis=axis)
            same_result(np.linalg.norm(D), np.linalg.norm(M), M)
            same_result(np.linalg.norm(D, "fro"), np.linalg.norm(M, "fro"), M)
            same_result(np.linalg.norm(D, axis=1), np.linalg.norm(M, axis=1), M)


def test_a_mask_write_of_a_vector_of_the_wrong_length_on_some_workers_fails_everywhere():
    # the value's length was checked on each worker alone: a worker whose vector was one
    # short raised, the others wrote theirs and went on (to the next collective)
    n, k = spmd_size(), spmd_index()
    G = np.arange(4.0 * (n + 1)).reshape(n + 1, 4)
    D = distribute(G)
    count = int(np.sum(G > 2))
    with pytest.raises(SpmdValueError, match=rf"\(worker {k} of {n}\): a value of shape "
                                             rf"\({count - 1},\) for {count} selected"):
        D[D > 2] = np.ones(count - 1)  # the same on every worker: numpy's message
    if n > 1:
        v = np.ones(count if k == 1 else count - 1)
        with pytest.raises(SpmdValueError, match=rf"\(worker {k} of {n}\): the value must "
                                                 rf"hold one value per selected element "
                                                 rf"\({count}\).* on worker 2: "
                                                 rf"\({count - 1},\)"):
            D[D > 2] = v
    assert np.array_equal(D.gather(), G)
    D[D > 2] = np.arange(count)
    want = G.copy()
    want[G > 2] = np.arange(count)
    assert np.array_equal(D.gather(), want)


def test_matmul_with_an_operand_of_each_workers_own_fails_as_dot_does():
    # ``D @ v`` with a ``v`` of each worker's own mixed the workers' rows silently, where
    # np.dot(D, v) raised SpmdMismatchError
    n, k = spmd_size(), spmd_index()
    G = np.arange(4.0 * (n + 1)).reshape(n + 1, 4)
    D = distribute(G)
    v = np.ones(4)
    same_result(D @ v, G @ v, G)
    same_result(np.matmul(D, v), G @ v, G)
    same_result(G[:, :1].T @ D, G[:, :1].T @ G, G)
    if n == 1:
        return
    mine = np.full(4, float(k))
    cases = [(lambda: D @ mine, "x2"), (lambda: np.matmul(D, mine), "x2"),
             (lambda: D @ np.outer(mine, [1, 1]), "x2"), (lambda: mine @ D.T, "x1"),
             (lambda: np.full((1, n + 1), float(k)) @ D, "x1")]
    for fn, name in cases:
        with pytest.raises(SpmdMismatchError, match=rf"numpy.matmul \(worker {k} of {n}\).*"
                                                    rf"they differ in: {name}"):
            fn()


def test_a_reduction_of_an_array_of_another_size_on_one_worker_fails_on_every_worker():
    # constructors from a shape do not communicate: with ``n`` of each worker's own
    # (``ones(3, 3 + k, "codistributed")``), np.sum(D), D.sum(), np.max, np.linalg.norm,
    # np.count_nonzero, np.trace and np.einsum folded each worker's share of another array
    # silently, and np.mean divided by each worker's own count: different answers on the
    # workers. The shares' global shape and partition are agreed on with the values.
    n, k = spmd_size(), spmd_index()
    G = np.ones((3, n + 2))
    D = da.ones((3, n + 2), axis=1)
    same_result(np.sum(D), G.sum(), G)
    same_result(np.mean(D), G.mean(), G)
    same_result(np.sum(D, axis=1), G.sum(axis=1), G)
    if n == 1:
        return
    big = da.ones((60000, n + 1 + (k == 2)), axis=1)  # (a value past the inline size)
    for D in (da.ones((3, n + 1 + k), axis=1), da.ones((n + k, 3), axis=0)):
        cases = [("numpy.sum", lambda: np.sum(D)), ("numpy.sum", lambda: D.sum()),
                 ("numpy.sum", lambda: np.sum(D, axis=D.axis)),
                 ("numpy.mean", lambda: np.mean(D)), ("numpy.max", lambda: np.max(D)),
                 ("numpy.any", lambda: np.any(D)),
                 ("numpy.count_nonzero", lambda: np.count_nonzero(D)),
                 ("numpy.linalg.norm", lambda: np.linalg.norm(D)),
                 ("numpy.trace", lambda: np.trace(D)),
                 ("numpy.einsum", lambda: np.einsum("ij,ij->", D, D)),
                 ("numpy.sum", lambda: np.sum(big, axis=1))]
        for call, fn in cases:
            with pytest.raises(SpmdMismatchError, match=rf"{call} \(worker {k} of {n}\).*"
                                                        rf"they differ in: layout.*worker 2: "
                                                        rf".*layout="):
                fn()
    # the calls whose workers exchange other things than a fold of shares: an index
    # ranked in each worker's own shape, counts of each worker's bins
    D = da.ones((3, n + 1 + k), axis=1)
    cases = [("numpy.argmax", lambda: np.argmax(D), "differ in: shape"),
             ("numpy.unique", lambda: np.unique(D), "differ in layout: worker 1: "),
             ("numpy.histogram", lambda: np.histogram(D, 3), "differ in: layout"),
             ("numpy.bincount", lambda: np.bincount(D.astype(np.int64)[0]),
              "differ in: layout"),
             ("numpy.searchsorted", lambda: np.searchsorted(D[0], 0.5), "differ in: layout")]
    for call, fn, why in cases:
        with pytest.raises(SpmdMismatchError, match=rf"\(worker {k} of {n}\).*{why}"):
            fn()
    E = da.ones((n + 1, 3), axis=0)
    assert float(np.sum(E)) == 3.0 * (n + 1)  # (the workers still in step)


@pytest.mark.skipif(torch is None, reason="torch")
def test_bfloat16_means_sums_and_extrema_have_torchs_bits_along_any_axis():
    # np.mean of bfloat16 parts divided a bfloat16 sum (rounded twice: 0.1221 where
    # torch.mean gives 0.1216) and, like sum, max and min, refused the split axis ("MPI
    # has no bfloat16 sum"): now summed in float32 (which holds every bfloat16) and
    # rounded once, as torch's; extrema are exact in float32
    n = spmd_size()
    t = (torch.arange(15.0 * n).reshape(5, 3 * n) * 0.37 - 2.1).to(torch.bfloat16)
    for split in (0, 1):
        D = distribute(t, axis=split)
        for ax in (None, 0, 1):
            for f, ref in ((np.mean, torch.mean), (np.sum, torch.sum), (np.max, torch.amax),
                           (np.min, torch.amin)):
                got = f(D, axis=ax)
                got = got.gather() if isinstance(got, CodistributedArray) else got
                want = ref(t) if ax is None else ref(t, dim=ax)
                assert got.dtype == torch.bfloat16 and torch.equal(got, want), (f, split, ax)
        with pytest.raises(SpmdTypeError, match=r"cannot multiply bfloat16 values"):
            np.prod(D, axis=split)


@pytest.mark.skipif(torch is None, reason="torch")
def test_means_and_variances_take_a_torch_dtype_as_sums_do():
    # np.sum(D, dtype=torch.float64) worked; np.mean, np.var, np.std and np.nanmean
    # raised numpy's bare TypeError "Cannot interpret 'torch.float64' as a data type"
    n = spmd_size()
    t = torch.arange(6.0 * n, dtype=torch.float32).reshape(2 * n, 3)
    D = distribute(t)
    for ax in (None, 0, 1):
        for f in (np.mean, np.var, np.std, np.nanmean):
            got = f(D, axis=ax, dtype=torch.float64)
            got = got.gather() if isinstance(got, CodistributedArray) else got
            want = f(t.double().numpy(), axis=ax)
            assert got.dtype == torch.float64 and np.allclose(got.numpy(), want), (f, ax)
    for f in (np.mean, np.var, np.nanmean):
        with pytest.raises(SpmdTypeError, match=rf"^numpy\.\w+ \(worker {spmd_index()} of "
                                                rf"{n}\): cannot sum in dtype torch.complex32"):
            f(D, dtype=torch.complex32)


@pytest.mark.skipif(torch is None, reason="torch")
def test_a_bfloat16_tensor_scatters_from_its_source():
    # distribute(t, source=k) sent the dtype as its .str: bfloat16's stand-in, a
    # structured dtype, arrived as plain bytes ("|V2"), and the other workers raised a
    # bare TypeError while the source went on into the exchange
    from spmdlab.matlab import codistributed
    n = spmd_size()
    t = (torch.arange(6.0 * n + 3).reshape(2 * n + 1, 3) * 0.37 - 2.1).to(torch.bfloat16)
    mine = t if spmd_index() == 1 else None
    for D in (distribute(mine, source=1), distribute(mine, source=1, axis=1),
              codistributed(mine, 1)):
        assert D.local.dtype == torch.bfloat16 and D.family == "torch"
        assert torch.equal(D.gather(), t)
    assert np.array_equal(value(distribute(t.float().numpy() if spmd_index() == 1 else None,
                                           source=1)), t.float().numpy())


@pytest.mark.parametrize("family", ["numpy", "torch"])
def test_numpys_size_attributes_and_list_methods(family):
    """``D.nbytes``, ``itemsize``, ``tolist()``, ``take`` and ``repeat`` as numpy's
    (they were AttributeError)."""
    if family == "torch":
        torch = pytest.importorskip("torch")
        A = torch.arange(12, dtype=torch.float32).reshape(3, 4)
        host = A.numpy()
    else:
        A = np.arange(12, dtype=np.float32).reshape(3, 4)
        host = A
    D = da.distribute(A, axis=1)
    assert D.itemsize == 4 and D.nbytes == 48
    assert D.tolist() == host.tolist()

    def whole(x):
        x = x.gather() if isinstance(x, CodistributedArray) else x
        return x.numpy() if family == "torch" else x

    np.testing.assert_array_equal(whole(D.take([0, 5, 11])), host.take([0, 5, 11]))
    np.testing.assert_array_equal(whole(D.take([3, 1], axis=1)), host.take([3, 1], axis=1))
    np.testing.assert_array_equal(whole(D.repeat(2, axis=1)), host.repeat(2, axis=1))


def test_matmul_into_out_and_in_place():
    """``D @= M`` and ``np.matmul(A, B, out=C)`` write the product into the array (in its
    own distribution), with numpy's checks; ``@=`` was refused ("takes no options")."""
    rng = np.random.default_rng(7)
    A, M = rng.standard_normal((5, 4)), rng.standard_normal((4, 4))
    D = da.distribute(A, axis=0)
    keep = D
    D @= M
    assert D is keep
    np.testing.assert_allclose(D.gather(), A @ M)
    C = da.distribute(np.zeros((5, 4)), axis=1)  # another distribution
    assert np.matmul(da.distribute(A, axis=0), M, out=C) is C
    np.testing.assert_allclose(C.gather(), A @ M)
    with pytest.raises(SpmdValueError, match=r"numpy.matmul \(worker \d+ of \d+\): the "
                       r"product's shape \(5, 3\) is not 'out''s \(5, 4\)"):
        np.matmul(D, np.ones((4, 3)), out=D)
    ints = da.distribute(np.zeros((5, 4), dtype=np.int64))
    with pytest.raises(SpmdTypeError, match="cannot cast the product from float64"):
        np.matmul(da.distribute(A), M, out=ints)


def test_numpys_generalized_ufuncs_vecdot_matvec_vecmat():
    """numpy 2's ``np.vecdot``, ``np.matvec`` and ``np.vecmat`` reduce over a core
    dimension: each worker's parts alone gave an array of the operands' shape whose
    local parts did not match it (garbage gathered, or the job ended); now numpy's
    results on every split, and a clear error for what is not available."""
    rng = np.random.default_rng(11)
    n = spmd_size()
    A = rng.standard_normal((n + 1, 4)) + 1j * rng.standard_normal((n + 1, 4))
    v, w = np.arange(4.0), np.arange(n + 1.0) * (1 + 1j)
    for axis in (0, 1):
        D = da.distribute(A, axis=axis)
        for got, expected in [(np.vecdot(D, D), np.vecdot(A, A)),
                              (np.vecdot(D, D, axis=0), np.vecdot(A, A, axis=0)),
                              (np.vecdot(D, v), np.vecdot(A, v)),
                              (np.vecdot(1j * v, D), np.vecdot(1j * v, A)),
                              (np.matvec(D, v), np.matvec(A, v)),
                              (np.matvec(D, da.distribute(v)), np.matvec(A, v)),
                              (np.vecmat(w, D), np.vecmat(w, A))]:
            assert value(got).shape == expected.shape
            np.testing.assert_allclose(value(got), expected, rtol=1e-13, atol=1e-13)
    S = da.distribute(rng.standard_normal((3, n + 1, 4)), axis=1)
    with pytest.raises(SpmdValueError, match=r"numpy.vecdot \(worker \d+ of \d+\): the "
                       r"vectors' lengths differ along axis -1"):
        np.vecdot(S, np.ones(3))
    with pytest.raises(SpmdTypeError, match=r"numpy.matvec \(worker \d+ of \d+\): only a "
                       r"matrix and a vector here"):
        np.matvec(S, v)
    with pytest.raises(SpmdTypeError, match=r"numpy.vecdot \(worker \d+ of \d+\): not "
                       r"available .* options \['out'\]"):
        np.vecdot(S, S, out=S)


def test_a_ufuncs_where_mask_is_split_as_its_operands(backend):
    """``np.divide(A, B, out=C, where=B != 0)``: the mask, replicated (of any shape that
    broadcasts) or codistributed (in any split), selects the same elements as numpy's.
    Every worker's block was given the whole mask (numpy's bare broadcasting error, on
    the workers whose block differed), a codistributed mask was refused, and torch parts
    filled what the mask left out with a new array's garbage."""
    n = spmd_size()
    A = whole((n + 2, 3)) + 0.25  # (no zeros)
    masks = [A > 0, np.array([True, False, True]), (np.arange(n + 2) % 2 == 0)[:, None]]
    for axis in (0, 1):
        D = distribute(backend.make(A), axis=axis)
        for mask in masks:
            expected = np.divide(A, A, out=np.full(A.shape, 7.0), where=mask)
            out = distribute(backend.make(np.full(A.shape, 7.0)), axis=axis)
            assert np.divide(D, D, out=out, where=mask) is out
            assert np.array_equal(value(out), expected)
            whole_mask = np.broadcast_to(mask, A.shape).copy()
            for mask_axis in (0, 1):
                out = distribute(backend.make(np.full(A.shape, 7.0)), axis=axis)
                np.divide(D, D, out=out,
                          where=distribute(backend.make(whole_mask), axis=mask_axis))
                assert np.array_equal(value(out), expected), (axis, mask_axis)
    # large enough that a new array's memory is fresh pages (zeros), not the 7s
    big = distribute(backend.make(np.ones((300, 300))), axis=0)
    out = distribute(backend.make(np.full((300, 300), 7.0)), axis=0)
    np.add(big, 1, out=out, where=np.arange(300) % 2 == 0)
    assert np.array_equal(value(out)[:, :2], np.tile([2.0, 7.0], (300, 1)))
    with pytest.raises(SpmdValueError, match=r"numpy.add \(worker \d+ of \d+\): operands of "
                       r"shapes .* cannot be broadcast together \(the last: where\)"):
        np.add(D, 1, out=D, where=np.ones((n + 5, 1), bool))


@pytest.mark.filterwarnings("ignore:Mean of empty slice:RuntimeWarning")  # numpy's
def test_reductions_take_numpys_where_and_initial(backend):
    """``np.sum(D, where=mask)``, ``np.max(D, axis=0, where=mask, initial=0)``,
    ``np.mean(D, where=mask)`` and ``initial=`` (refused as options before): the mask
    replicated or codistributed, broadcast as numpy's; max and min exact, sums and means
    within rounding; an empty max with ``initial`` is ``initial``."""
    n = spmd_size()
    A = whole((n + 2, 5))
    masks = [A > 0, np.array([True, False, True, True, False]),
             (np.arange(n + 2) % 2 == 0)[:, None]]
    for axis in (0, 1):
        D = distribute(backend.make(A), axis=axis)
        whole_mask = distribute(backend.make(masks[2] & np.ones(A.shape, bool)),
                                axis=1 - axis)
        for mask, m in [(masks[0], masks[0]), (masks[1], masks[1]), (masks[2], whole_mask)]:
            for ax in (None, 0, 1):
                for got, expected in [
                        (np.sum(D, axis=ax, where=m), np.sum(A, axis=ax, where=mask)),
                        (np.prod(D / 3, axis=ax, where=m),
                         np.prod(A / 3, axis=ax, where=mask)),
                        (np.any(D > 1, axis=ax, where=m),
                         np.any(A > 1, axis=ax, where=mask)),
                        (np.all(D > -3, axis=ax, where=m),
                         np.all(A > -3, axis=ax, where=mask)),
                        (np.max(D, axis=ax, where=m, initial=-9),
                         np.max(A, axis=ax, where=mask, initial=-9)),
                        (np.min(D, axis=ax, where=m, initial=9, keepdims=True),
                         np.min(A, axis=ax, where=mask, initial=9, keepdims=True))]:
                    assert value(got).shape == expected.shape
                    np.testing.assert_allclose(value(got), expected)
                with np.errstate(invalid="ignore", divide="ignore"):  # (all left out: nan)
                    expected = np.mean(A, axis=ax, where=mask)
                    got = np.mean(D, axis=ax, where=m)
                np.testing.assert_allclose(value(got), expected)
        for ax in (None, 0, 1):
            for name in ("max", "min"):
                got = getattr(np, name)(D, axis=ax, initial=1.5)
                assert np.array_equal(value(got), getattr(np, name)(A, axis=ax, initial=1.5))
            np.testing.assert_allclose(value(np.sum(D, axis=ax, initial=2)),
                                       np.sum(A, axis=ax, initial=2))
    empty = distribute(backend.make(np.zeros((0, 3))))
    assert np.array_equal(value(np.max(empty, axis=0, initial=-1)), [-1.0, -1.0, -1.0])
    with pytest.raises(SpmdValueError, match=r"numpy.max \(worker \d+ of \d+\): reduction "
                       r"operation 'maximum' does not have an identity"):
        np.max(D, where=A > 0)
