"""numpy's Fourier transforms, histograms, counts, integration, gradients, repeats and
scans on codistributed arrays (MATLAB's fft, ifft, fft2, real fft2, histcounts,
accumarray, trapz, gradient, repelem, cumsum), against numpy on the whole array, split
along each axis, at any worker count (uneven partitions; more workers than rows or
columns)."""

import warnings

import numpy as np
import pytest

from spmdlab import (CodistributedArray, Codistributor, SpmdTypeError, SpmdValueError,
                     distribute, spmd_index, spmd_plus, spmd_size)

from conftest import host

pytestmark = pytest.mark.mpi


def value(x):
    if isinstance(x, tuple):
        return tuple(value(v) for v in x)
    return host(x.gather() if isinstance(x, CodistributedArray) else x)


def same(got, expected):
    """Bit for bit, as numpy on the whole array."""
    if isinstance(expected, tuple):
        assert isinstance(got, tuple) and len(got) == len(expected)
        for g, e in zip(got, expected):
            same(g, e)
        return
    got = value(got)
    assert got.shape == np.shape(expected), (got.shape, np.shape(expected))
    assert np.array_equal(got, expected, equal_nan=True), (got, expected)


def close(got, expected):
    """Equal up to the order of a sum (what the workers add in worker order)."""
    got = value(got)
    assert got.shape == np.shape(expected)
    assert np.allclose(got, expected, rtol=1e-12, atol=1e-12), (got, expected)


def arrays(backend):
    """(numpy array, codistributed array) pairs, split along each axis: vectors and
    matrices with fewer rows or columns than workers."""
    n = spmd_size()
    rng = np.random.default_rng(7)
    for shape in [(2 * n + 3,), (3,), (n + 1, 5), (3, 2 * n + 1)]:
        A = rng.standard_normal(shape)
        for axis in range(len(shape)):
            yield A, distribute(backend.make(A), axis=axis)


def test_fourier_transforms_along_every_axis(backend):
    for A, D in arrays(backend):
        for axis in range(A.ndim):
            same(np.fft.fft(D, axis=axis), np.fft.fft(A, axis=axis))
            same(np.fft.ifft(D, n=4, axis=axis), np.fft.ifft(A, n=4, axis=axis))
            same(np.fft.rfft(D, axis=axis, norm="ortho"),
                 np.fft.rfft(A, axis=axis, norm="ortho"))
            same(np.fft.irfft(np.fft.rfft(D, axis=axis), axis=axis),
                 np.fft.irfft(np.fft.rfft(A, axis=axis), axis=axis))
        F = np.fft.fft(D)
        assert isinstance(F, CodistributedArray) and F.codistributor == D.codistributor
        if A.ndim == 2:  # the distributed 2-D transform: rows, all-to-all, columns
            same(np.fft.fft2(D), np.fft.fft2(A))
            same(np.fft.ifft2(np.fft.fft2(D)), np.fft.ifft2(np.fft.fft2(A)))
            same(np.fft.fftn(D, s=(3, 4)), np.fft.fftn(A, s=(3, 4)))
            same(np.fft.ifftn(D, axes=(0,)), np.fft.ifftn(A, axes=(0,)))
            # real transforms: rfft along the last axis, then fft along the others
            R = np.fft.rfft2(D)
            same(R, np.fft.rfft2(A))
            same(np.fft.irfft2(R), np.fft.irfft2(np.fft.rfft2(A)))
            same(np.fft.irfft2(R, s=A.shape), np.fft.irfft2(np.fft.rfft2(A), s=A.shape))
            same(np.fft.rfftn(D, s=(4, -1), axes=(1, 0), norm="ortho"),
                 np.fft.rfftn(A, s=(4, -1), axes=(1, 0), norm="ortho"))
            same(np.fft.irfftn(D, axes=(0, 1)), np.fft.irfftn(A, axes=(0, 1)))
        same(np.fft.rfftn(D), np.fft.rfftn(A))


def test_scans_have_one_process_bits(backend):
    # cumsum/cumprod along the split axis continue the previous worker's running value,
    # as one process's scan does: numpy's bits (torch's on the CPU, which carries a
    # float32 scan in float64), for any partition, empty blocks and a leading -0.0
    if backend.name not in ("numpy", "torch"):
        pytest.skip("a GPU's scans are parallel: no one order to follow")
    n = spmd_size()
    rng = np.random.default_rng(11)
    for shape in [(4 * n + 5,), (2 * n + 1, 3), (2, n + 1)]:
        A = rng.standard_normal(shape)
        A.flat[0] = -0.0
        for dtype in (np.float64, np.float32, np.complex64):
            G = (A * (1 + 0.5j) if dtype is np.complex64 else A).astype(dtype)
            T = backend.make(G)
            for split_axis in range(len(shape)):
                late = [0] * (n - 1) + [shape[split_axis]]  # the last worker holds all
                for codist in (Codistributor(split_axis), Codistributor(split_axis, late)):
                    D = distribute(T, codist)
                    for axis in range(len(shape)):
                        for name in ("cumsum", "cumprod"):
                            got = value(getattr(np, name)(D, axis=axis))
                            expected = getattr(np, name)(G, axis=axis) \
                                if backend.name == "numpy" else \
                                getattr(type(T), name)(T, dim=axis).numpy()
                            assert got.dtype == expected.dtype
                            if dtype is np.complex64 and name == "cumprod":
                                # (complex products round by the loop the layout picks)
                                assert np.allclose(got, expected, rtol=1e-5)
                                continue
                            assert np.array_equal(got.view(np.uint8),
                                                  expected.view(np.uint8)), \
                                (shape, dtype, codist, axis, name)
                same(np.cumsum(D, axis=0, dtype=np.float64),
                     np.cumsum(G, axis=0, dtype=np.float64))


def test_scans_with_dtype_and_of_bfloat16_have_torch_bits():
    # torch converts the elements to dtype= before it scans them (a float64 tensor's
    # cumsum(dtype=float32) rounds each one first), carries bfloat16 in float32 and
    # rounds a NaN to bfloat16's positive one; bfloat16 blocks that are empty passed on
    # no identity (their workers raised while the others waited)
    torch = pytest.importorskip("torch")
    n = spmd_size()
    rng = np.random.default_rng(5)
    A = torch.from_numpy(rng.standard_normal(3 * n + 4) * 100 + 1 / 3)
    A[2], A[3] = float("inf"), -float("inf")
    for T, dtype in ((A, torch.float32), (A, torch.float16), (A.float(), torch.float16),
                     (A, torch.bfloat16), (A.bfloat16(), None), (A.bfloat16(), torch.float32)):
        late = [0] * (n - 1) + [T.shape[0]]
        for codist in (Codistributor(0), Codistributor(0, late)):
            D = distribute(T, codist)
            for name in ("cumsum", "cumprod"):
                extra = {} if dtype is None else {"dtype": dtype}
                got = getattr(np, name)(D, **extra).gather()
                expected = getattr(torch, name)(T, 0, **extra)
                assert got.dtype == expected.dtype
                assert torch.equal(got.view(torch.int16) if got.dtype == torch.bfloat16
                                   else got.view(torch.uint8),
                                   expected.view(torch.int16)
                                   if expected.dtype == torch.bfloat16
                                   else expected.view(torch.uint8)), (T.dtype, dtype, name)
            got = np.maximum.accumulate(D).gather()  # (cummax: exact, no carry)
            assert torch.equal(got, torch.cummax(T, 0).values), (T.dtype, codist)


def test_cummax_cummin_continue_the_scan(backend):
    # MATLAB's cummax(D, dim)/cummin: each worker continues the scan from the previous
    # workers' extreme, so 0.0 and -0.0 and NaNs come out as one process's scan has them
    # (np.maximum of the blocks' results picks other zeros and, on torch, other NaNs);
    # an empty block's identity is left out (-inf+0j beats -inf-1j in numpy's order)
    if backend.name not in ("numpy", "torch"):
        pytest.skip("compared with numpy's and torch's CPU scans")
    n = spmd_size()
    rng = np.random.default_rng(3)
    G = rng.choice([0.0, -0.0, 1.0, -1.0], (2 * n + 2, 3))
    G[n, 0] = G[1, 2] = np.nan
    H = rng.standard_normal((2, 9 * n))  # (rows of 9: torch.maximum's vector loop)
    H[:, 0] = np.nan
    for G, axis in ((G, 0), (G, 1), (H, 1)):
        late = [0] * (n - 1) + [G.shape[axis]]
        halves = [G.shape[axis] // 2] + [0] * (n - 2) + [G.shape[axis] - G.shape[axis] // 2]
        for codist in (Codistributor(axis), Codistributor(axis, late),
                       Codistributor(axis, halves if n > 1 else None)):
            D = distribute(backend.make(G), codist)
            for ufunc, name in ((np.maximum, "cummax"), (np.minimum, "cummin")):
                got = value(ufunc.accumulate(D, axis=axis))
                if backend.name == "numpy":
                    expected = ufunc.accumulate(G, axis=axis)
                else:
                    import torch
                    expected = getattr(torch, name)(torch.from_numpy(G), axis).values.numpy()
                assert np.array_equal(got.view(np.uint8), expected.view(np.uint8)), \
                    (codist, name, got, expected)
    if backend.name == "numpy":
        C = np.array([-np.inf - 1j, -np.inf - 2j, 1 + 0j] * n)
        P = np.array([complex(2, -0.0), complex(-0.0, 3), complex(1, -1)] * n)
        for codist in (Codistributor(0), Codistributor(0, [0] * (n - 1) + [3 * n])):
            same(np.maximum.accumulate(distribute(C, codist)), np.maximum.accumulate(C))
            D = distribute(P, codist)
            if codist.partition is not None:  # one worker holds them all: its bits
                got = value(np.cumprod(D))
                assert np.array_equal(got.view(np.uint8), np.cumprod(P).view(np.uint8))


def test_scans_refuse_bad_arguments_on_every_worker():
    n, k = spmd_size(), spmd_index()
    D = distribute(np.ones((n + 1, 3)))
    with pytest.raises(SpmdTypeError, match=rf"numpy.cumsum \(worker {k} of {n}\): 'axis' "
                       r"must be one int \(got \(0, 1\)\)"):
        np.cumsum(D, axis=(0, 1))
    with pytest.raises(SpmdTypeError, match=rf"numpy.cumprod \(worker {k} of {n}\): .*'xx'"):
        np.cumprod(D, axis=0, dtype="xx")
    with pytest.raises(SpmdValueError, match=rf"numpy.maximum.accumulate \(worker {k} of "
                       rf"{n}\): accumulate does not allow multiple axes"):
        np.maximum.accumulate(D, axis=None)
    same(np.maximum.accumulate(D[:, 0], axis=None), np.ones(n + 1))  # (a vector: numpy's)


def test_histograms_and_counts(backend):
    n = spmd_size()
    for A, D in arrays(backend):
        same(np.histogram(D), np.histogram(A))
        same(np.histogram(D, bins=3, range=(-1.0, 1.0)),
             np.histogram(A, bins=3, range=(-1.0, 1.0)))
        same(np.histogram(D, bins=[-2, 0, 0.5, 3], density=True),
             np.histogram(A, bins=[-2, 0, 0.5, 3], density=True))
        same(np.histogram(D, bins="auto"), np.histogram(A, bins="auto"))  # (gathered)
        weights = np.abs(A)
        other = distribute(backend.make(weights), axis=(D.axis + 1) % A.ndim)
        counts, edges = np.histogram(D, bins=4, weights=other)  # moved to D's split
        close(counts, np.histogram(A, bins=4, weights=weights)[0])
        same(edges, np.histogram(A, bins=4)[1])
    subs = np.arange(3 * n + 4) * 7 % 5
    S = distribute(backend.make(subs))
    same(np.bincount(S), np.bincount(subs))
    same(np.bincount(S, minlength=9), np.bincount(subs, minlength=9))
    vals = np.arange(subs.size) * 0.25
    close(np.bincount(S, weights=distribute(backend.make(vals))),  # MATLAB's accumarray
          np.bincount(subs, weights=vals))
    same(np.bincount(distribute(backend.make(np.zeros(0, np.int64)))), np.zeros(0, np.int64))
    same(np.histogram(distribute(backend.make(np.zeros(0)))), np.histogram(np.zeros(0)))


def test_trapezoid_gradient_repeat_append_and_scans(backend):
    for A, D in arrays(backend):
        for axis in range(A.ndim):
            close(np.trapezoid(D, axis=axis), np.trapezoid(A, axis=axis))
            x = np.linspace(0.0, 1.0, A.shape[axis]) ** 2
            close(np.trapezoid(D, x, axis=axis), np.trapezoid(A, x, axis=axis))
            close(np.trapezoid(D, dx=0.5, axis=axis), np.trapezoid(A, dx=0.5, axis=axis))
            if A.shape[axis] > 2:
                same(np.gradient(D, axis=axis), np.gradient(A, axis=axis))
                same(np.gradient(D, 0.5, axis=axis, edge_order=2),
                     np.gradient(A, 0.5, axis=axis, edge_order=2))
            same(np.repeat(D, 2, axis=axis), np.repeat(A, 2, axis=axis))
            counts = np.arange(A.shape[axis]) % 3
            same(np.repeat(D, counts, axis=axis), np.repeat(A, counts, axis=axis))
            same(np.nancumsum(D, axis=axis), np.nancumsum(A, axis=axis))
        if min(A.shape) > 2:
            same(np.gradient(D), np.gradient(A))
        same(np.repeat(D, 3), np.repeat(A, 3))
        same(np.append(D, A), np.append(A, A))
        same(np.append(D, D, axis=0), np.append(A, A, axis=0))
        same(np.cumsum(D), np.cumsum(A))  # numpy's: of the flattened array
        if A.ndim == 1:
            close(np.inner(D, D), np.inner(A, A))
        else:
            same(np.moveaxis(D, 0, -1), np.moveaxis(A, 0, -1))
        E = D.copy()
        E.fill(2.5)
        same(E, np.full(A.shape, 2.5))


def test_einsum_tensordot_covariance_and_correlation(backend):
    # blockwise where the split label allows (split where the output keeps it, summed
    # over the workers where it is contracted), gathered otherwise (an ellipsis)
    n = spmd_size()
    rng = np.random.default_rng(3)
    A, B, v = rng.standard_normal((n + 2, 4)), rng.standard_normal((4, 3)), \
        rng.standard_normal(n + 2)
    for axis in (0, 1):
        D = distribute(backend.make(A), axis=axis)
        V = distribute(backend.make(v))
        for subscripts, operands, expected in [
                ("ij->j", (D,), A.sum(0)), ("ij->i", (D,), A.sum(1)), ("ji", (D,), A.T),
                ("ij,ij->i", (D, D), (A * A).sum(1)), ("ij,jk->ik", (D, B), A @ B),
                ("ij,i->j", (D, v), v @ A), ("ij,i", (D, V), v @ A),
                ("ij,kj->ik", (D, D), A @ A.T), ("...j->...", (D,), A.sum(-1)),
                ("ij,ij->", (D, D), (A * A).sum())]:
            got = np.einsum(subscripts, *operands)
            close(got, expected)
            if subscripts == "ij->i" and axis == 0:  # kept along its split: no moves
                assert got.codistributor.axis == 0 and got.partition == D.partition
        for rowvar in (True, False):
            close(np.cov(D, rowvar=rowvar), np.cov(A, rowvar=rowvar))
            close(np.cov(D, rowvar=rowvar, ddof=0), np.cov(A, rowvar=rowvar, ddof=0))
            close(np.corrcoef(D, rowvar=rowvar), np.corrcoef(A, rowvar=rowvar))
    V = distribute(backend.make(v))
    close(np.cov(V), np.cov(v))                                  # MATLAB's var(v)
    close(np.cov(V, distribute(backend.make(v ** 2))), np.cov(v, v ** 2))
    close(np.corrcoef(V, distribute(backend.make(v ** 2))), np.corrcoef(v, v ** 2))
    T = rng.standard_normal((n + 2, 4, 3))
    for axis in (0, 1, 2):
        D = distribute(backend.make(T), axis=axis)
        for axes, other in [(2, rng.standard_normal((4, 3, 2))), (([0], [0]), A),
                            (([1, 2], [0, 1]), rng.standard_normal((4, 3))), (0, v[:2])]:
            close(np.tensordot(D, other, axes), np.tensordot(T, other, axes))
        close(np.tensordot(D, distribute(backend.make(A)), ([0], [0])),
              np.tensordot(T, A, ([0], [0])))
    with pytest.raises(SpmdValueError, match=r"numpy.einsum \(worker \d+ of \d+\): Size of "
                       r"label 'j'"):
        np.einsum("ij,jk->ik", distribute(backend.make(A)), np.ones((3, 3)))


def test_convolution_gives_numpys_bits(backend):
    # MATLAB's conv(u, v) / conv(u, v, "same"): blocks shorter than the kernel, more
    # workers than elements, either operand codistributed
    n = spmd_size()
    rng = np.random.default_rng(5)
    for length in (1, 3, 2 * n + 3, 17):
        u = rng.standard_normal(length)
        for m in (1, 2, 5, 8):
            k = rng.standard_normal(m)
            for mode in ("full", "same", "valid"):
                U, K = distribute(backend.make(u)), distribute(backend.make(k))
                for a, b in ((U, k), (u, K), (U, K), (K, u)):
                    same(np.convolve(a, b, mode), np.convolve(value(a), value(b), mode))
    ints = np.arange(2 * n + 5) % 4
    same(np.convolve(distribute(backend.make(ints)), [1, -1]), np.convolve(ints, [1, -1]))


def test_bad_arguments_raise_on_every_worker():
    n = spmd_size()
    D = distribute(np.arange(3.0 * (n + 1)).reshape(n + 1, 3))
    S = distribute(np.arange(2 * n + 2) - 1)
    with pytest.raises(SpmdValueError, match=r"numpy.bincount \(worker \d+ of \d+\): "
                       r"'x' must have no negative elements \(its least is -1\)"):
        np.bincount(S)
    with pytest.raises(SpmdTypeError, match=r"numpy.bincount \(worker \d+ of \d+\): .*integers"):
        np.bincount(distribute(np.arange(4.0)))
    with pytest.raises(SpmdValueError, match=r"numpy.repeat \(worker \d+ of \d+\): "):
        np.repeat(D, [1] * (n + 2), axis=0)
    with pytest.raises(SpmdTypeError, match=r"numpy.gradient \(worker \d+ of \d+\): .*uniform"):
        np.gradient(D, np.arange(n + 1.0), np.arange(3.0))
    with pytest.raises(SpmdValueError, match=r"numpy.histogram \(worker \d+ of \d+\): "):
        np.histogram(D, bins=3, range=(2.0, 1.0))
    with pytest.raises(SpmdValueError, match=r"numpy.histogram \(worker \d+ of \d+\): "
                       r"'weights' must have the array's shape"):
        np.histogram(D, weights=np.ones(3))
    with pytest.raises(SpmdValueError, match=r"numpy.fft.fftn \(worker \d+ of \d+\): 's'"):
        np.fft.fftn(D, s=(2, 2, 2), axes=(0, 1))
    with pytest.raises(SpmdTypeError, match=r"numpy.inner \(worker \d+ of \d+\): only vectors"):
        np.inner(D, D)
    with pytest.raises(SpmdValueError, match=r"numpy.convolve \(worker \d+ of \d+\): .*vectors"):
        np.convolve(D, [1.0])
    with pytest.raises(SpmdTypeError, match=r"numpy.cov \(worker \d+ of \d+\): 'fweights'"):
        np.cov(D, fweights=np.ones(3, int))


def test_histogram_of_float32_has_numpy_edges(backend):
    # numpy makes the edges of a float32 array in float32 from its float32 minimum and
    # maximum: the range found over the workers must keep that dtype
    A = (np.arange(7.0 * spmd_size() + 3) * 0.37 - 1.1).astype(np.float32)
    for D in (distribute(backend.make(A)), distribute(backend.make(A.reshape(1, -1)), axis=1)):
        same(np.histogram(D, bins=10), np.histogram(A, bins=10))


def test_bincount_with_weights_where_a_worker_holds_nothing(backend):
    # more workers than elements: an empty block's weighted counts are numpy's int64
    # zeros, the others' float64; every worker must sum float64 counts
    n = spmd_size()
    subs, vals = np.arange(n - 1 if n > 1 else 1) % 3, np.arange(max(n - 1, 1)) * 0.5
    S, V = distribute(backend.make(subs)), distribute(backend.make(vals))
    close(np.bincount(S, weights=V, minlength=4), np.bincount(subs, weights=vals, minlength=4))
    same(np.bincount(distribute(backend.make(np.zeros(0, np.int64))),
                     weights=distribute(backend.make(np.zeros(0)))), np.zeros(0, np.int64))


def test_repeat_by_codistributed_counts(backend):
    # MATLAB's repelem(v, counts) with both codistributed
    n = spmd_size()
    v, counts = np.arange(2.0 * n + 1), np.arange(2 * n + 1) % 3
    same(np.repeat(distribute(backend.make(v)), distribute(backend.make(counts))),
         np.repeat(v, counts))
    A = np.arange(3.0 * (n + 1)).reshape(n + 1, 3)
    same(np.repeat(distribute(backend.make(A), axis=1), distribute(backend.make(counts[:3])),
                   axis=1), np.repeat(A, counts[:3], axis=1))


def test_trapezoid_names_coordinates_of_another_shape():
    n = spmd_size()
    D = distribute(np.arange(3.0 * (n + 1)).reshape(n + 1, 3))
    for x in (distribute(np.ones((n + 2, 3))), np.ones((n + 2, 3))):
        with pytest.raises(SpmdValueError, match=r"numpy.trapezoid \(worker \d+ of \d+\): "
                           r"'x' must be a vector along axis 0 or of the array's shape"):
            np.trapezoid(D, x, axis=0)
    x = np.linspace(0.0, 1.0, n + 1).reshape(-1, 1)  # broadcasts, as numpy's
    close(np.trapezoid(D, x, axis=0), np.trapezoid(D.gather(), x, axis=0))


def test_fftshift_and_ifftshift(backend):
    # MATLAB's fftshift(fft2(D)) for a centred spectrum
    for A, D in arrays(backend):
        same(np.fft.fftshift(D), np.fft.fftshift(A))
        same(np.fft.ifftshift(D), np.fft.ifftshift(A))
        same(np.fft.fftshift(D, axes=0), np.fft.fftshift(A, axes=0))
        same(np.fft.ifftshift(np.fft.fftshift(D)), A)
        if A.ndim == 2:
            same(np.fft.fftshift(np.fft.fft2(D)), np.fft.fftshift(np.fft.fft2(A)))
            same(np.fft.ifftshift(D, axes=(-1,)), np.fft.ifftshift(A, axes=(-1,)))


def test_bincount_of_complex_weights_fails_on_every_worker():
    # numpy refuses complex weights only for a block that holds elements: every worker
    # must refuse, also where some hold none, and the next collective must still meet
    n = spmd_size()
    x = np.arange(n + 1) % 3
    for D in (distribute(x), distribute(x, Codistributor(0, (0,) * (n - 1) + (n + 1,)))):
        with pytest.raises(SpmdTypeError, match=r"numpy.bincount \(worker \d+ of \d+\): "
                           r"'weights' must be real"):
            np.bincount(D, weights=np.ones(n + 1) + 1j)
    assert spmd_plus(1) == n


def test_nanpercentile_of_an_empty_array_keeps_the_q_axis():
    # numpy's nan-functions drop the q axis of an empty array: the blocks must still
    # have the q axis (a job that failed after agreeing, before)
    E = np.zeros((0, 3))
    for axis in (0, 1):
        got = value(np.nanpercentile(distribute(E, axis=axis), [10, 50], axis=0))
        assert got.shape == (2, 3) and np.isnan(got).all()
        assert value(np.nanquantile(distribute(E, axis=axis), [0.1, 0.5], axis=1)).shape \
            == (2, 0)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy's, for bools and one row
def test_cov_einsum_histogram_as_numpy_for_one_row_and_bools():
    A = np.arange(4.0 * (spmd_size() + 1)).reshape(-1, 4) % 3 - 1
    for axis in (0, 1):
        D = distribute(A[:1], axis=axis)  # numpy 2: a one-row matrix's columns
        same(np.cov(D, rowvar=False), np.cov(A[:1], rowvar=False))
        B = distribute(A > 0, axis=axis)  # sums of bools are numpy's: or
        same(np.einsum("ij,j->i", B, A[0] >= 0), np.einsum("ij,j->i", A > 0, A[0] >= 0))
        same(np.einsum("ij->j", B), np.einsum("ij->j", A > 0))
        same(np.histogram(B), np.histogram(A > 0))  # numpy's: bools counted as uint8


def test_corrcoef_of_one_variable_is_a_scalar_of_the_family(backend):
    # MATLAB's corrcoef(v): numpy's 1.0 (torch's parts: a 0-d tensor, not a TypeError)
    v = np.arange(2.0 * spmd_size() + 3) ** 2
    for rowvar in (True, False):
        got = np.corrcoef(distribute(backend.make(v)), rowvar=rowvar)
        assert type(got) in (np.float64, type(backend.make(v)))
        same(got, np.corrcoef(v, rowvar=rowvar))


@pytest.mark.filterwarnings("ignore::numpy.exceptions.ComplexWarning")
@pytest.mark.filterwarnings("ignore:Casting complex values:UserWarning")  # torch's
def test_cov_works_in_numpys_precision_and_dtype(backend):
    # numpy's cov of single precision works in double (float32 data: float64 results to
    # double's round-off, not float32's), and dtype= is the dtype of the result
    rng = np.random.default_rng(9)
    A = (rng.standard_normal((spmd_size() + 3, 4)) * 1e3 + 1e4).astype(np.float32)
    for axis in (0, 1):
        for B in (A, A.astype(np.complex64)):
            D = distribute(backend.make(B), axis=axis)
            for dtype in (None, np.float32, np.float64):
                for rowvar in (True, False):
                    got = value(np.cov(D, rowvar=rowvar, dtype=dtype))
                    want = np.cov(B, rowvar=rowvar, dtype=dtype)
                    assert got.dtype == want.dtype, (B.dtype, dtype, got.dtype)
                    assert np.allclose(got, want, rtol=1e-5 if dtype is np.float32 else 1e-12)
            assert value(np.corrcoef(D, dtype=np.float32)).dtype == np.float32


def test_fill_with_a_value_the_integers_cannot_hold_is_named_on_every_worker(backend):
    # MATLAB's D(:) = v: numpy's OverflowError and torch's RuntimeError for a value out
    # of an integer dtype's range are named as the call's and the worker's, as the rest
    n = spmd_size()
    for dtype in (np.int8, np.uint8):
        D = distribute(backend.make(np.zeros((n + 1, 2), dtype)))
        for v in (2 ** 40, np.nan):
            with pytest.raises(SpmdValueError, match=r"CodistributedArray.fill \(worker \d+ "
                               r"of \d+\): cannot fill .* with "):
                D.fill(v)
        assert not value(D).any()


def test_cov_of_more_than_2_dimensions_and_differences_of_bools_fail_named():
    D3 = distribute(np.arange(24.0).reshape(2, 3, 4))
    for fn, call in ((np.cov, "numpy.cov"), (np.corrcoef, "numpy.corrcoef")):
        with pytest.raises(SpmdValueError, match=f"{call} \\(worker {spmd_index()} of "
                           f"{spmd_size()}\\): 'm' has more than 2 dimensions"):
            fn(D3)
    B = distribute(np.array([True, False, True, True]))
    for fn, call in ((np.gradient, "numpy.gradient"), (np.ptp, "numpy.ptp")):
        with pytest.raises(SpmdTypeError, match=f"{call} \\(worker {spmd_index()} of "
                           f"{spmd_size()}\\): .* of booleans"):
            fn(B)


def test_cross_of_3_vectors_and_searchsorted_are_numpys(backend):
    n = 2 * spmd_size() + 1
    rng = np.random.default_rng(3)
    A, B = rng.standard_normal((n, 3)), rng.standard_normal((n, 3))
    DA, DB = distribute(backend.make(A)), distribute(backend.make(B))  # (split: columns)
    rows = Codistributor(0)
    c = np.array([0.0, 0.0, 1.0])
    for got, want in [(np.cross(DA, DB), np.cross(A, B)),  # moved to rows and back
                      (np.cross(DA.redistribute(rows), DB), np.cross(A, B)),
                      (np.cross(DA.redistribute(rows), c), np.cross(A, c)),
                      (np.cross(c, DA), np.cross(c, A)),
                      (np.cross(DA, B), np.cross(A, B)),
                      (np.cross(distribute(backend.make(A.T)), B.T, axis=0),
                       np.cross(A.T, B.T, axis=0))]:
        assert isinstance(got, CodistributedArray) and got.family == DA.family
        np.testing.assert_array_equal(host(got.gather()), want)
    with pytest.raises(SpmdValueError, match="numpy.cross .* 3 components"):
        np.cross(distribute(backend.make(np.ones((n, 2)))), np.ones((n, 2)))
    s = np.sort(rng.integers(0, 20, 5 * n)).astype(np.float64)
    D = distribute(backend.make(s))
    v = np.array([-1.0, 0.0, 3.0, 3.5, 7.0, 19.0, 25.0])
    for side in ("left", "right"):
        got = np.searchsorted(D, v, side=side)
        np.testing.assert_array_equal(host(got), np.searchsorted(s, v, side=side))
    assert int(host(np.searchsorted(D, 7.0))) == np.searchsorted(s, 7.0)


def test_searchsorted_of_codistributed_values_in_replicated_edges(backend):
    # MATLAB's discretize(D, edges), numpy's searchsorted(edges, D): D's own split, no
    # communication; it raised "the sorted array must be the codistributed one"
    n = spmd_size()
    rng = np.random.default_rng(5)
    X = rng.standard_normal((3 * n + 1, n + 2)) * 3
    edges = np.array([-4.0, -1.0, 0.0, 0.5, 2.0, 6.0])
    for D in (distribute(backend.make(X)), distribute(backend.make(X), axis=1)):
        for side in ("left", "right"):
            got = np.searchsorted(edges, D, side=side)
            assert isinstance(got, CodistributedArray) and got.family == D.family
            assert got.codistributor == D.codistributor
            np.testing.assert_array_equal(host(got.gather()), np.searchsorted(edges, X, side))
    with pytest.raises(SpmdValueError, match=f"numpy.searchsorted \\(worker {spmd_index()} "
                       f"of {spmd_size()}\\): the sorted array must be a vector"):
        np.searchsorted(np.ones((2, 2)), D)
    with pytest.raises(SpmdValueError, match="numpy.searchsorted .*'side'"):
        np.searchsorted(edges, D, side="middle")


def test_nanargmax_and_nanargmin_leave_out_nan(backend):
    # MATLAB's [M, I] = max(D, [], dim) omits NaN: numpy's nanargmax, every split
    n = spmd_size()
    A = np.arange(4.0 * (n + 2)).reshape(4, n + 2) % 7
    A[1, 1] = A[0, 0] = A[3, n + 1] = np.nan
    for axis in (0, 1):
        D = distribute(backend.make(A), axis=axis)
        for fn in (np.nanargmax, np.nanargmin):
            for ax in (None, 0, 1):
                same(fn(D, axis=ax), fn(A, axis=ax))
            same(fn(D, axis=1, keepdims=True), fn(A, axis=1, keepdims=True))
        B = A.copy()
        B[:, 0] = np.nan
        with pytest.raises(SpmdValueError, match=r"numpy.nanargmax \(worker \d+ of \d+\): "
                           r"All-NaN slice"):
            np.nanargmax(distribute(backend.make(B), axis=axis), axis=0)
        ints = distribute(backend.make(np.arange(2 * (n + 1)).reshape(2, n + 1)), axis=axis)
        same(np.nanargmax(ints, axis=1), np.full(2, n))


def test_nanvar_and_nanstd_leave_out_nan(backend):
    # MATLAB's var(D, 0, dim, "omitnan") and std(D, 1, "all", "omitnan")
    n = spmd_size()
    A = np.arange(3.0 * (n + 2)).reshape(3, n + 2) ** 1.5
    A[0, ::2] = np.nan
    A[:, 1] = np.nan  # a column of NaN only: numpy's NaN
    for dtype in (np.float64, np.float32, np.complex128):
        G = (A + 1j * A[::-1]).astype(dtype) if dtype == np.complex128 else A.astype(dtype)
        for axis in (0, 1):
            D = distribute(backend.make(G), axis=axis) if backend.name != "torch" or \
                dtype != np.complex128 else distribute(G, axis=axis)
            with warnings.catch_warnings():  # numpy's, on all-NaN slices and ddof
                warnings.simplefilter("ignore", RuntimeWarning)
                for ax in (0, 1, None):
                    for ddof in (0, 1, 3):
                        for f in (np.nanvar, np.nanstd):
                            want = f(G, axis=ax, ddof=ddof, keepdims=ax == 1)
                            got = value(f(D, axis=ax, ddof=ddof, keepdims=ax == 1))
                            assert got.shape == np.shape(want) and got.dtype == want.dtype
                            assert np.allclose(got, want, rtol=1e-5, equal_nan=True)
