"""MATLAB's names for codistributed arrays (spmdlab.matlab): the lines of real MATLAB
programs ported one to one, with MATLAB's conventions, at any worker count."""

import numpy as np
import pytest

from spmdlab import (SpmdError, SpmdIndexError, SpmdMismatchError, SpmdTypeError,
                     SpmdValueError)
from spmdlab.matlab import (Composite, codistributed, codistributor, codistributor1d,
                            distributed, drange, eye, gather, getCodistributor,
                            getLocalPart, globalIndices, gplus, iscodistributed,
                            isdistributed, isempty, isreplicated, length, ndims, numel,
                            ones, rand,
                            randi, randn, sortrows,
                            redistribute, reshape, size, spmdIndex, spmdSize, zeros)
from spmdlab.matlab import max as mmax, min as mmin

from conftest import host, torch

pytestmark = pytest.mark.mpi


def test_default_partition_and_codistributor_properties():
    n = spmdSize()
    p = codistributor1d.defaultPartition(10)
    assert p.sum() == 10 and len(p) == n and p[0] == -(-10 // n)
    assert codistributor1d.unsetDimension == 0 and len(codistributor1d.unsetPartition) == 0
    c = codistributor1d()
    assert c.Dimension == 0 and c.Partition.size == 0 and not c.isComplete()
    c = codistributor1d(2, codistributor1d.unsetPartition, [n + 3, 4 * n])
    assert not c.isComplete() or c.isComplete()  # MATLAB derives the partition later
    assert codistributor("1d", 1).Dimension == 1
    with pytest.raises(SpmdValueError, match="only the '1d'"):
        codistributor("2dbc")


def test_the_default_dimension_is_the_last_non_singleton():
    n = spmdSize()
    assert getCodistributor(codistributed(np.zeros((4, 2 * n)))).Dimension == 2
    assert getCodistributor(codistributed(np.zeros((2 * n, 1)))).Dimension == 1
    assert getCodistributor(codistributed(np.zeros((2, 3, n + 1)))).Dimension == 3
    assert getCodistributor(codistributed(np.zeros((2, 3, 1)))).Dimension == 2
    row = codistributed(np.arange(10.0))  # a 1-D array is a 1-by-10 row: dimension 2
    assert getCodistributor(row).Dimension == 2 and row.shape == (10,)
    assert np.array_equal(gather(row), np.arange(10.0))


def test_build_from_local_parts_as_matlab_programs_do():
    # codist = codistributor1d(2, codistributor1d.defaultPartition(n), [n n]);
    # L = ...; D = codistributed.build(L, codist)
    n, k, N = 10, spmdIndex(), spmdSize()
    codist = codistributor1d(2, codistributor1d.defaultPartition(n), [n, n])
    assert codist.isComplete()
    cols = codist.globalIndices(2)
    L = np.tile(cols.astype(float), (n, 1))  # column j holds j
    D = codistributed.build(L, codist)
    assert np.array_equal(gather(D), np.tile(np.arange(1.0, n + 1), (n, 1)))
    assert np.array_equal(getLocalPart(D), L)
    e, f = globalIndices(D, 2, nargout=2)
    assert (e, f) == (cols[0], cols[-1]) if len(cols) else e == f + 1
    assert np.array_equal(globalIndices(D, 1), np.arange(1, n + 1))
    for lab in range(1, N + 1):
        assert np.array_equal(globalIndices(D, 2, lab), codist.globalIndices(2, lab))
    D2 = codistributed.build(L, codist, "noCommunication")
    assert np.array_equal(gather(D2), gather(D))


def test_a_global_size_completes_the_codistributor_as_in_matlabs_build_example():
    # MATLAB's codistributed.build example: the partition left unset is derived from the
    # global size, so codistr.globalIndices(2) works before any array exists
    N, n = spmdSize(), 11
    codistr = codistributor1d(2, codistributor1d.unsetPartition, [n, n])
    assert codistr.isComplete() and codistr.Dimension == 2
    assert np.array_equal(codistr.Partition, codistributor1d.defaultPartition(n))
    globalInd = codistr.globalIndices(2)
    localPart = np.zeros((n, len(globalInd)))
    for localCol in range(1, len(globalInd) + 1):
        localPart[:, localCol - 1] = globalInd[localCol - 1]
    D = codistributed.build(localPart, codistr)
    assert np.array_equal(gather(D), np.tile(np.arange(1.0, n + 1), (n, 1)))
    c = codistributor1d(codistributor1d.unsetDimension, codistributor1d.unsetPartition,
                        [n, 1])  # the last non-singleton dimension: 1
    assert c.isComplete() and c.Dimension == 1 and c.Partition.sum() == n
    c = codistributor1d(codistributor1d.unsetDimension, [n] + [0] * (N - 1), [3, n])
    assert c.Dimension == 2 and list(c.Partition) == [n] + [0] * (N - 1)
    assert codistributor1d(1).Partition.size == 0 and not codistributor1d(1).isComplete()


def test_build_without_a_global_size_reads_parts_as_matlab_shapes():
    # a 1-D part is a 1-by-k row, a scalar 1-by-1: joined along dimension 1 they stack
    # into an N-by-k matrix (not one long row), along dimension 2 into a 1-by-N row, and
    # along a dimension past the part's last into pages
    N, k = spmdSize(), spmdIndex()
    A = codistributed.build(np.arange(3.0) + 10 * k, codistributor1d(1))
    assert A.shape == (N, 3) and getCodistributor(A).Dimension == 1
    assert np.array_equal(gather(A), np.arange(3.0) + 10 * np.arange(1, N + 1)[:, None])
    C = codistributed.build(float(k), codistributor1d(2))
    assert np.array_equal(gather(C), np.arange(1.0, N + 1)[None, :])
    E = codistributed.build(np.full((2, 2), float(k)), codistributor1d(3))
    assert E.shape == (2, 2, N) and getCodistributor(E).Dimension == 3


def test_errors_of_matlabs_names_count_dimensions_from_one():
    # codistributor1d(2, ...) is numpy's axis 1: the message says MATLAB's "dimension 2",
    # the snake_case API's keeps numpy's "axis 1"
    from spmdlab.darray import Codistributor, distribute
    N = spmdSize()
    with pytest.raises(SpmdValueError, match=f"has {N + 2} along dimension 2 "):
        codistributor1d(2, [1] * N, [3, N + 2])
    with pytest.raises(SpmdValueError, match=f"has {N + 2} along axis 1 "):
        distribute(np.ones((3, N + 2)), Codistributor(1, (1,) * N))


def test_build_checks_that_the_parts_add_up():
    N, k = spmdSize(), spmdIndex()
    codist = codistributor1d(1, [2] * N, [2 * N, 3])
    L = np.ones((1 if k == 1 else 2, 3))
    with pytest.raises(SpmdValueError, match=r"local part has shape \(1, 3\)"):
        codistributed.build(L, codist)
    with pytest.raises(SpmdValueError, match="adds up to"):
        codistributor1d(1, [1] * N, [N + 1, 3])


def test_build_refuses_structured_parts_whose_fields_differ():
    # two structured dtypes of one size (|V12) differ in their fields: a part read with
    # another worker's fields would be garbage, so every worker raises
    N, k = spmdSize(), spmdIndex()
    if N < 2:
        pytest.skip("needs two workers")
    fields = [("x", "i4"), ("y", "f8")]
    L = np.zeros((2, 1), dtype=fields if k == 1 else fields[::-1])
    for codist in (codistributor1d(2), codistributor1d(2, [1] * N, [2, N])):
        with pytest.raises(SpmdMismatchError, match=r"codistributed.build \(worker"):
            codistributed.build(L, codist)


def test_build_errors_name_codistributed_build():
    # a MATLAB user called codistributed.build, not spmdlab's from_local: the error says so
    N, k = spmdSize(), spmdIndex()
    codist = codistributor1d(2, codistributor1d.defaultPartition(N + 1), [3, N + 1])
    L = np.ones((3, int(codist.Partition[k - 1]) + (2 if k == N else 0)))
    with pytest.raises(SpmdValueError, match=rf"^codistributed.build \(worker {k} of {N}\)"):
        codistributed.build(L, codist)
    if N > 1:  # no global size: the parts' other sizes differ
        with pytest.raises(SpmdMismatchError, match=rf"^codistributed.build \(worker {k} "):
            codistributed.build(np.ones((k, 2)), codistributor1d(2))
    with pytest.raises(SpmdTypeError, match=rf"^codistributed.build \(worker {k} of {N}\)"):
        codistributed.build(np.array([object()]), codist)
    with pytest.raises(SpmdValueError, match=rf"^codistributed \(worker {k} of {N}\)"):
        codistributed(np.ones((2, N + 1)), codistributor1d(2, [N + 2] + [0] * (N - 1)))


def test_getlocalpart_is_read_only_as_matlabs_copy():
    D = codistributed(np.zeros((3, 4)))
    L = getLocalPart(D)
    with pytest.raises(ValueError, match="read-only"):
        L[...] = 1
    L2 = getLocalPart(D).copy()
    L2[...] = 1
    assert float(gather(D).sum()) == 0


def test_subscripts_copy_as_matlab_values():
    D = codistributed(np.zeros((4, 3)), codistributor1d(1))
    E = D[1:3]
    E[...] = 5
    assert float(gather(D).sum()) == 0


def test_transposes_and_real_parts_copy_as_matlab_values():
    # MATLAB's E = D'; E(1, 1) = 9 (and permute, real, a new singleton dimension) leaves D
    # be; they were views of D's local parts, so the docs' D(mask) = v recipe,
    # E = D.T; E[mask.T] = v, changed D too. The snake_case array keeps numpy's views.
    A = np.arange(12.0).reshape(3, 4)
    for split in (1, 2):
        D = codistributed(A, codistributor1d(split))
        for E in (D.T, D.transpose(), np.transpose(D), np.moveaxis(D, 0, 1),
                  np.swapaxes(D, 0, 1), D.real, np.expand_dims(D, 0)):
            E[(0,) * E.ndim] = 99
            E[E > 5] = -1
        assert np.array_equal(gather(D), A)
        E = D.T
        E[(D > 5).T] = 0                                     # the docs' D(mask) = 0
        assert np.array_equal(gather(E.T), np.where(A > 5, 0, A))
        assert np.array_equal(gather(D), A)
        assert np.array_equal(gather(reshape(D, 4, 3)), A.reshape((4, 3), order="F"))
    Z = A + 2j * A                                           # real(Z), imag(Z): numpy's views
    for split in (1, 2):
        D = codistributed(Z, codistributor1d(split))
        for E in (D.real, D.imag, np.real(D), np.imag(D), codistributed(A).imag):
            E[0, 0] = 99                                     # (imag of a real D: read-only)
        assert np.array_equal(gather(D), Z)
    from spmdlab.darray import distribute

    V = distribute(A.copy())                                 # numpy's view, as before
    V.T[0, 0] = 99
    assert float(V.gather()[0, 0]) == 99


def test_redistribute_and_gather_to_one_worker():
    N, k = spmdSize(), spmdIndex()
    A = np.arange(24.0).reshape(4, 6)
    D = codistributed(A)  # by columns
    R = redistribute(D, codistributor1d(1))
    assert getCodistributor(R).Dimension == 1 and np.array_equal(gather(R), A)
    R2 = redistribute(R, codistributor1d(2, [6] + [0] * (N - 1)))
    assert list(getCodistributor(R2).Partition) == [6] + [0] * (N - 1)
    for lab in range(1, N + 1):
        X = gather(R2, lab)
        if k == lab:
            assert np.array_equal(X, A)
        else:
            assert X.shape == (0, 0) and X.dtype == A.dtype
    X1, X2 = gather(D, R)
    assert np.array_equal(X1, A) and np.array_equal(X2, A)
    assert gather(7) == 7 and gather(Composite(k)) == list(range(1, N + 1))


def test_gather_to_a_worker_given_as_a_1x1_array():
    # gather(D, lab) with lab a 1x1 array (MATLAB's find(...), np.array(2.0)) was read as
    # a second value to gather: every worker got the whole array, and the lab back
    N, k = spmdSize(), spmdIndex()
    A = np.arange(12.0).reshape(3, 4)
    D = codistributed(A)
    for lab in (np.array(float(N)), np.array([N]), np.array([[float(N)]])):
        X = gather(D, lab)
        if k == N:
            assert np.array_equal(X, A)
        else:
            assert isinstance(X, np.ndarray) and X.shape == (0, 0)
    with pytest.raises(SpmdTypeError, match=r"gather \(worker \d+ of \d+\): 'lab' must be "
                       r"an integer \(got 1.5\)"):
        gather(D, np.array([1.5]))
    assert [x.shape for x in gather(D, D)] == [(3, 4), (3, 4)]


def test_redistribute_along_a_singleton_dimension_does_what_the_constructors_do(backend):
    # a 1-D array is MATLAB's 1-by-n row: along dimension 1 it becomes (1, n), as
    # codistributed(x, codistributor1d(1)) makes it; a 2-D array along dimension 3 gains
    # the trailing singleton axis it is split along, as zeros(m, n, codistributor1d(3))
    N, k = spmdSize(), spmdIndex()
    x = np.arange(N + 4.0)
    v = codistributed(backend.make(x))
    R = redistribute(v, codistributor1d(1))
    C = codistributed(backend.make(x), codistributor1d(1))
    assert R.shape == C.shape == (1, N + 4) and R.codistributor == C.codistributor
    assert type(R.local) is type(v.local) and np.array_equal(gather_np(R), x[None])
    assert np.array_equal(gather_np(redistribute(v, codistributor1d(2))), x)
    A = np.arange(4.0 * (N + 1)).reshape(4, N + 1)
    for D in (codistributed(backend.make(A)), codistributed(backend.make(A),
                                                           codistributor1d(1))):
        R = redistribute(D, codistributor1d(3))
        Z = zeros(4, N + 1, codistributor1d(3))
        assert R.shape == Z.shape == (4, N + 1, 1) and R.codistributor == Z.codistributor
        assert R.local.shape == ((4, N + 1, 1) if k == 1 else (4, N + 1, 0))
        assert np.array_equal(gather_np(R), A[..., None])
        assert list(size(R)) == [4, N + 1] and size(R, 3) == 1
        assert getCodistributor(R).Dimension == 3
        assert list(globalIndices(R, 3)) == ([1] if k == 1 else [])
        back = redistribute(R, codistributor1d(1))  # MATLAB's size again: 4-by-(N+1)
        assert back.shape == (4, N + 1) and np.array_equal(gather_np(back), A)
        assert redistribute(R).shape == (4, N + 1)
    part = [2] + [0] * (N - 1)
    with pytest.raises(SpmdValueError, match=rf"^redistribute \(worker {k} of {N}\): the "
                       r"partition \[2(, 0)*\] adds up to 2, but the array has 1"):
        redistribute(codistributed.zeros(2, 3), codistributor1d(3, part))


def gather_np(D):
    return host(gather(D))


def test_codistributed_of_a_codistributed_array_redistributes_it():
    # MATLAB: C = codistributed(C1, codist) is the same as C = redistribute(C1, codist)
    N, k = spmdSize(), spmdIndex()
    A = np.arange(6.0 * (N + 1)).reshape(6, N + 1)
    D = codistributed(A)  # by columns
    C = codistributed(D, codistributor1d(1))
    assert isinstance(C, codistributed) and getCodistributor(C).Dimension == 1
    assert np.array_equal(gather(C), A)
    assert np.array_equal(getLocalPart(C), A[globalIndices(C, 1) - 1])
    part = [0] * (N - 1) + [N + 1]
    C = codistributed(C, codistributor1d(2, part, [6, N + 1]))
    assert list(getCodistributor(C).Partition) == part and np.array_equal(gather(C), A)
    C = codistributed(C)  # the default distribution again
    assert getCodistributor(C).Dimension == 2 and np.array_equal(getLocalPart(C),
                                                                  getLocalPart(D))
    import spmdlab.darray as da
    E = codistributed(da.distribute(A), codistributor1d(2))  # a snake_case array
    assert isinstance(E, codistributed) and np.array_equal(gather(E), A)


def test_scatter_from_a_worker():
    N, k = spmdSize(), spmdIndex()
    for lab in range(1, N + 1):
        X = np.arange(2.0 * N + 1) if k == lab else np.zeros(1)
        D = codistributed(X, lab)
        assert np.array_equal(gather(D), np.arange(2.0 * N + 1))
        D = codistributed(X, lab, codistributor1d(2, [2 * N + 1] + [0] * (N - 1)))
        assert getLocalPart(D).size == (2 * N + 1 if k == 1 else 0)


def test_a_matlab_literal_of_whole_numbers_is_double():
    # MATLAB's [1 2 3] is double: numpy made codistributed([1, 2, 3]) int64, and D(2) =
    # 2.5 then stored 2
    N, k = spmdSize(), spmdIndex()
    D = codistributed([1, 2, 3])
    assert D.dtype == np.float64
    D[1] = 2.5
    assert gather(D).tolist() == [1.0, 2.5, 3.0]
    assert codistributed(7).dtype == np.float64
    assert codistributed(list(range(2 * N)), N).dtype == np.float64  # scattered from N
    assert codistributed([True, False]).dtype == np.bool_  # logical stays logical
    assert codistributed(np.arange(3)).dtype == np.int64  # an array keeps its class


def test_constructors_take_matlabs_arguments():
    N = spmdSize()
    assert codistributed.zeros(3).shape == (3, 3)
    assert codistributed.ones(2, 5).shape == (2, 5)
    assert codistributed.zeros([2, 3, 4]).shape == (2, 3, 4)
    assert codistributed.zeros(2, "int8").dtype == np.int8
    assert codistributed.zeros(2, 3, codistributor1d(1)).axis == 0
    assert codistributed.zeros(4, "noCommunication").shape == (4, 4)
    assert bool(codistributed.true(2).all()) and not bool(codistributed.false(2).any())
    assert float(codistributed.Inf(2).min()) == np.inf
    assert bool(np.isnan(codistributed.NaN(2, 1)).all())
    assert np.array_equal(gather(codistributed.eye(N + 1)), np.eye(N + 1))
    assert np.array_equal(gather(codistributed.colon(1, 3, 20)), np.arange(1, 21, 3))
    assert np.allclose(gather(codistributed.colon(0, 0.5, 2)), [0, 0.5, 1, 1.5, 2])
    r = codistributed.rand(50, 3)
    assert r.shape == (50, 3) and 0 <= float(r.min()) and float(r.max()) < 1
    assert codistributed.randn(4).shape == (4, 4)


def test_colon_split_along_dimension_1_holds_the_row():
    # codistributed.colon(a, b, codistributor1d(1)): the 1-by-n row split along its
    # (singleton) dimension 1: worker 1 holds all of it, the others a 0-by-n part
    N, k = spmdSize(), spmdIndex()
    c = codistributed.colon(1, 10, codistributor1d(1))
    assert c.shape == (1, 10) and getCodistributor(c).Dimension == 1
    assert getLocalPart(c).shape == ((1, 10) if k == 1 else (0, 10))
    assert np.array_equal(gather(c), np.arange(1, 11).reshape(1, 10))
    c = codistributed.colon(2, 0.5, 4, codistributor1d(1, [0] * (N - 1) + [1]))
    assert np.array_equal(gather(c), np.array([[2.0, 2.5, 3.0, 3.5, 4.0]]))
    assert getLocalPart(c).shape == ((1, 5) if k == N else (0, 5))


def test_builtin_forms_with_codistributed():
    n = spmdSize() + 2
    T = ones(n, "codistributed")  # T = ones(n, "codistributed")
    assert iscodistributed(T) and float(T.sum()) == n * n
    Z = zeros(n, 3, codistributor1d(1))
    assert getCodistributor(Z).Dimension == 1 and Z.shape == (n, 3)
    assert np.array_equal(gather(eye(n, "codistributed")), np.eye(n))
    assert rand(3, "codistributed").shape == (3, 3) and randn(2, 4, "distributed").shape == (2, 4)
    assert isdistributed(zeros(2, "distributed"))
    assert zeros(3).shape == (3, 3) and not iscodistributed(ones(2, 3))  # plain MATLAB
    assert zeros(2, "like", T).dtype == T.dtype


def test_for_drange_fills_a_codistributed_array():
    # r = zeros(1, 40, codistributor()); for n = drange(1:40), r(n) = n^2; end
    r = zeros(1, 40, codistributor())
    for i in drange(1, 40):
        r[0, i - 1] = i ** 2
    assert np.array_equal(gather(r), (np.arange(1, 41) ** 2.0).reshape(1, 40))
    mine = list(drange(1, 2, 30))
    assert all(v % 2 == 1 for v in mine)
    assert sum(Composite(len(mine))[:]) == 15


def test_distributed_arrays_in_a_script():
    D = distributed.rand(5)
    assert isdistributed(D) and iscodistributed(D) and D.shape == (5, 5)
    X = distributed(np.arange(12.0).reshape(3, 4))
    assert np.array_equal(gather(X * 2), np.arange(12.0).reshape(3, 4) * 2)
    with pytest.raises(SpmdTypeError, match="takes one argument"):
        distributed(np.ones(3), codistributor1d(1))


def test_arithmetic_and_reductions_keep_matlab_classes():
    A = np.arange(20.0).reshape(4, 5)
    D = codistributed(A)
    E = np.sqrt(D) + 1
    assert isinstance(E, codistributed)
    assert np.allclose(gather(E), np.sqrt(A) + 1)
    s = np.sum(D, axis=1)  # MATLAB sum(D, 2): along the distribution dimension
    assert isinstance(s, codistributed) and np.allclose(gather(s), A.sum(axis=1))
    assert np.allclose(gather(D @ D.T), A @ A.T)
    assert "stores (:," in repr(D)


def test_conjugate_transpose_as_numpy_writes_it():
    # MATLAB's D' (the conjugate transpose) is numpy's D.conj().T
    N = spmdSize()
    A = np.arange(2.0 * (N + 1)).reshape(2, N + 1) * (1 - 2j)
    D = codistributed(A)
    Dh = D.conj().T
    assert isinstance(Dh, codistributed) and getCodistributor(Dh).Dimension == 1
    assert np.array_equal(gather(Dh), A.conj().T)
    assert np.array_equal(gather(D.conjugate()), A.conjugate())
    assert np.allclose(gather(D.conj().T @ D), A.conj().T @ A)
    # real(D), imag(D), round(D), min(max(D, lo), hi) the numpy way, as methods too
    assert np.array_equal(gather(D.real), A.real) and np.array_equal(gather(D.imag), A.imag)
    R = codistributed(np.linspace(-2, 2, 2 * (N + 1)).reshape(2, N + 1))
    assert np.array_equal(gather(R.round(1)), gather(R).round(1))
    assert np.array_equal(gather(R.clip(-1, 0.5)), gather(R).clip(-1, 0.5))
    assert isinstance(R.clip(None, 0), codistributed)


def test_errors_name_the_call_and_the_worker():
    N, k = spmdSize(), spmdIndex()
    with pytest.raises(SpmdValueError, match=rf"globalIndices \(worker {k} of {N}\): 'dim' "):
        globalIndices(codistributed.zeros(3), 0)
    with pytest.raises(SpmdTypeError, match="getLocalPart .* takes a codistributed array"):
        getLocalPart(np.ones(3))
    with pytest.raises(SpmdValueError, match="not complete"):
        codistributor1d(1).globalIndices(1)
    if N > 1:
        D = codistributed.zeros(4, 3 + (k == 1))
        with pytest.raises(SpmdMismatchError):
            gather(D)
    with pytest.raises(SpmdError, match="lab"):
        codistributed(np.ones(3), N + 1)


def test_globalindices_and_defaultpartition_errors_name_the_matlab_call():
    N, k = spmdSize(), spmdIndex()
    D = codistributed.zeros(3, N + 1)
    codist = getCodistributor(D)
    for lab in (0, N + 1):
        with pytest.raises(SpmdValueError, match=rf"^globalIndices \(worker {k} of {N}\): "
                           rf"'lab' must be a worker number from 1 to {N} \(got {lab}\)"):
            globalIndices(D, 2, lab)
        with pytest.raises(SpmdValueError, match=r"^globalIndices .*'lab'"):
            globalIndices(codist, 1, lab)
    with pytest.raises(SpmdValueError, match=rf"^codistributor1d.defaultPartition \(worker "
                       rf"{k} of {N}\): 'n' must be at least 0 \(got -1\)"):
        codistributor1d.defaultPartition(-1)


def test_torch_local_parts():
    if torch is None:
        pytest.skip("needs torch")
    T = torch.arange(12.0).reshape(3, 4)
    D = codistributed(T)
    assert isinstance(getLocalPart(D), torch.Tensor)
    G = gather(D * 2)
    assert isinstance(G, torch.Tensor) and torch.equal(G, T * 2)


# -- MATLAB's sizes, reshape, max and min -----------------------------------------------------


def test_sizes_drop_trailing_singletons_unless_a_codistributor_names_one():
    N, k = spmdSize(), spmdIndex()
    for made in (ones(2, 3, 1, "codistributed"), codistributed.ones(2, 3, 1),
                 zeros([2, 3, 1, 1], "codistributed"), rand(2, 3, 1, codistributor1d())):
        assert made.shape == (2, 3) and list(size(made)) == [2, 3] and ndims(made) == 2
    assert ones(2, 3, 1).shape == (2, 3)  # not distributed: MATLAB's too
    assert codistributed(np.zeros((2, 3, 1))).shape == (2, 3)  # a numpy array's too
    part = [3] + [0] * (N - 1)
    L = np.ones((2, 3, 1) if k == 1 else (2, 0, 1))
    assert codistributed.build(L, codistributor1d(2, part, [2, 3, 1])).shape == (2, 3)
    assert zeros(2, 1, 3, "codistributed").shape == (2, 1, 3)
    for Z in (zeros(4, 4, codistributor1d(3)), zeros(4, 4, 1, codistributor1d(3)),
              codistributed.zeros(4, 4, codistributor1d(3, [], [4, 4, 1]))):
        assert Z.shape == (4, 4, 1) and Z.axis == 2
        assert Z.local.shape == ((4, 4, 1) if k == 1 else (4, 4, 0))
        assert list(size(Z)) == [4, 4] and size(Z, 3) == 1 and size(Z, 1) == 4
        assert ndims(Z) == 2 and numel(Z) == 16 and getCodistributor(Z).Dimension == 3
    Z = zeros(2, 3, 4, codistributor1d(5))
    assert Z.shape == (2, 3, 4, 1, 1) and list(size(Z)) == [2, 3, 4] and ndims(Z) == 3
    assert list(size(np.zeros((2, 3, 4)), [1, 3, 7])) == [2, 4, 1]
    assert list(size(np.zeros((2, 3, 4)), 3, 1)) == [4, 2]
    assert size(np.zeros((2, 3, 4)), nargout=2) == (2, 12)
    assert size(np.zeros((2, 3)), nargout=4) == (2, 3, 1, 1)
    assert list(size(5.0)) == [1, 1] and list(size(np.arange(4))) == [1, 4]
    assert size(codistributed(np.arange(N + 2.0)), 2) == N + 2
    with pytest.raises(SpmdValueError, match=rf"^size \(worker {k} of {N}\): dimensions are "
                       r"1-based: 'dim' must be 1 or more \(got \[0\]\)"):
        size(Z, 0)


def test_reshape_is_column_major_as_matlabs(backend):
    N, k = spmdSize(), spmdIndex()
    for shape in [(N + 1, 6), (2 * N, N + 2), (3, 2, N + 2), (N + 3,)]:
        G = np.arange(float(np.prod(shape))).reshape(shape) - 2
        count = G.size
        for dim in range(1, len(shape) + 1):
            D = codistributed(backend.make(G), codistributor1d(dim if len(shape) > 1
                                                               else 2))
            for sizes, want in [((count, 1), (count, 1)), ((1, []), (1, count)),
                                (([], 2 if count % 2 == 0 else 1), None),
                                (([shape[-1], count // shape[-1], 1],), None)]:
                R = reshape(D, *sizes)
                msize = sizes[0] if len(sizes) == 1 else sizes
                numpy_shape = want or tuple(
                    s if not isinstance(s, list) else count // int(np.prod(
                        [v for v in msize if not isinstance(v, list)])) for s in msize)
                numpy_shape = numpy_shape[:2] if len(numpy_shape) == 3 and \
                    numpy_shape[2] == 1 else numpy_shape
                ref = G.reshape(numpy_shape, order="F")
                assert R.shape == ref.shape and isinstance(R, codistributed)
                last = max(d for d in range(len(ref.shape)) if ref.shape[d] != 1) \
                    if any(n != 1 for n in ref.shape) else len(ref.shape) - 1
                assert R.axis == last  # the default distribution of the new size
                assert type(R.local) is type(D.local)
                assert np.array_equal(gather_np(R), ref)
            assert np.array_equal(np.asarray(gather_np(reshape(backend.make(G), 1, []))),
                                  G.reshape((1, count), order="F"))
    D = codistributed(np.zeros((N + 1, 3)))
    with pytest.raises(SpmdValueError, match=rf"^reshape \(worker {k} of {N}\): the number "
                       rf"of elements must not change: {3 * N + 3} elements into size 5x7"):
        reshape(D, 5, 7)
    with pytest.raises(SpmdValueError, match="one of them \\[\\] at most"):
        reshape(D, [], [])


def matlab_reference(G, name, dim=None, omitnan=True, method="auto"):
    """MATLAB's [M, I] = max(G, [], dim) (or min) element by element, on numpy G (2-D or
    more), written out as MATLAB's documentation says it, for comparison."""
    axis = dim - 1
    moved = np.moveaxis(G, axis, -1)
    M = np.empty(moved.shape[:-1], dtype=G.dtype)
    I = np.empty(moved.shape[:-1], dtype=np.int64)
    better = (lambda a, b: a > b) if name == "max" else (lambda a, b: a < b)
    for where in np.ndindex(*moved.shape[:-1]):
        v = moved[where]
        best = None
        for i, x in enumerate(v):
            if np.isnan(x):
                if not omitnan:
                    best = i
                    break
                continue
            if G.dtype.kind == "c" and method != "real" or method == "abs":
                key = (abs(x), np.angle(x))
            else:
                key = (np.real(x), np.imag(x))
            if best is None or better(key, best_key):
                best, best_key = i, key
        if best is None:  # all NaN: the first
            best = 0
        M[where], I[where] = v[best], best + 1
    return np.expand_dims(M, axis), np.expand_dims(I, axis)


def test_max_and_min_follow_matlabs_rules_on_every_split(backend):
    N = spmdSize()
    ring = np.array([1, -1, 1j, -1j, 1 + 0j, np.nan, 0.5, -2, 2j, -2])
    for shape in [(N + 1, 4), (3, N + 2), (2, 3, N + 1)]:
        count = int(np.prod(shape))
        Z = np.resize(ring, count).reshape(shape)
        Z.reshape(-1)[: shape[-1]] = np.nan  # a first row (or page) of NaN only
        R = np.resize(np.array([3.0, np.nan, -1, 3, 2, -1]), count).reshape(shape)
        for G in (Z, R):
            for dist in range(1, len(shape) + 1):
                D = codistributed(backend.make(G), codistributor1d(dist))
                for name, fn in (("max", mmax), ("min", mmin)):
                    for dim in range(1, len(shape) + 1):
                        for omit, flag in ((True, "omitnan"), (False, "includenan")):
                            wM, wI = matlab_reference(G, name, dim, omit)
                            M, I = fn(D, [], dim, flag, nargout=2)
                            assert isinstance(M, codistributed)
                            assert type(M.local) is type(D.local)
                            np.testing.assert_array_equal(gather_np(M).reshape(wM.shape),
                                                          wM)
                            np.testing.assert_array_equal(gather_np(I).reshape(wI.shape),
                                                          wI)
                    wM, wI = matlab_reference(G, name, 1)
                    np.testing.assert_array_equal(gather_np(fn(D)).reshape(wM.shape), wM)
                    flat = G.reshape(-1, order="F")[:, None]
                    aM, aI = matlab_reference(flat, name, 1)
                    M, I = fn(D, [], "all", nargout=2)
                    np.testing.assert_array_equal(host(M), aM[0, 0])
                    assert int(I) == int(aI[0, 0])
                    if G is Z:
                        rM, rI = matlab_reference(G, name, 2, method="real")
                        M, I = fn(D, [], 2, "ComparisonMethod", "real", nargout=2)
                        np.testing.assert_array_equal(gather_np(M).reshape(rM.shape), rM)
                        np.testing.assert_array_equal(gather_np(I).reshape(rI.shape), rI)
    # a row's maximum is a scalar; MATLAB's documented examples
    assert mmax(np.array([-2 + 2j, 4 + 1j, -1 - 3j])) == 4 + 1j
    assert mmax(codistributed(np.array([-2 + 2j, 4 + 1j, -1 - 3j]))) == 4 + 1j
    M, I = mmax(codistributed(np.array([[1.0, 9, -2], [8, 4, -5]])), nargout=2)
    assert gather(M).tolist() == [[8, 9, -2]] and gather(I).tolist() == [[2, 1, 1]]
    assert mmax(np.array([1.77, -0.005, 3.98, -2.95, np.nan, 0.34, np.nan, 0.19])) == 3.98
    assert np.isnan(mmin(np.array([1.0, np.nan]), [], "includenan"))
    C = mmax(codistributed(np.array([[1.0, 7, 3], [6, 2, 9]])), 5)
    assert gather(C).tolist() == [[5, 7, 5], [6, 5, 9]]
    assert gather(mmin(codistributed(np.array([np.nan, 1j])), np.array([2, -1]))
                  ).tolist() == [2, 1j]


def test_max_and_min_over_a_vector_of_dimensions(backend):
    # MATLAB's max(A, [], vecdim): the extreme over every dimension listed, the others
    # kept; [1 2] of a matrix is its overall one, a dimension past the array's is one
    N = spmdSize()
    G = np.resize(np.array([3.0, np.nan, -1, 7, 2, -1, 0.5]), 2 * 3 * (N + 1))
    G = G.reshape(2, 3, N + 1)
    for dist in (1, 2, 3):
        D = codistributed(backend.make(G), codistributor1d(dist))
        for name, fn, pick in (("max", mmax, np.nanmax), ("min", mmin, np.nanmin)):
            for vecdim, axes in (([1, 2], (0, 1)), ([3, 1], (0, 2)), ([1, 2, 3], None),
                                 ([2, 4], (1,))):
                want = pick(G, axis=axes, keepdims=True)
                got = gather_np(fn(D, [], vecdim))
                np.testing.assert_array_equal(got.reshape(want.shape), want)
                plain = fn(G, [], vecdim)
                np.testing.assert_array_equal(np.asarray(plain).reshape(want.shape), want)
            want = (np.max if name == "max" else np.min)(G, axis=(0, 2), keepdims=True)
            got = gather_np(fn(D, [], [1, 3], "includenan"))  # NaN where a slice has one
            np.testing.assert_array_equal(got.reshape(want.shape), want)
            assert np.isnan(want).any()
    M = codistributed(np.array([[1.0, 9, -2], [8, 4, -5]]))
    assert gather(mmax(M, [], [1, 2])).item() == 9 and gather(mmin(M, [], [2, 1])).item() == -5
    with pytest.raises(SpmdValueError, match=r"\[M, I\] = max\(A, \[\], vecdim\) is not"):
        mmax(M, [], [1, 2], nargout=2)
    with pytest.raises(SpmdValueError, match=r"must not repeat one"):
        mmin(M, [], [2, 2])


def test_max_and_min_linear_give_matlabs_linear_indices(backend):
    # [M, I] = max(A, [], dim, "linear"): I is the column-major linear index into A
    # (sub2ind), not the index along dim, which 'linear' gave silently
    N = spmdSize()
    G = np.random.default_rng(5).permutation(2 * 3 * (N + 1)).reshape(2, 3, N + 1) * 1.0
    F = G.reshape(-1, order="F")
    for dist in (None, 1, 2, 3):
        A = backend.make(G) if dist is None else \
            codistributed(backend.make(G), codistributor1d(dist))
        for name, fn, arg in (("max", mmax, np.argmax), ("min", mmin, np.argmin)):
            for dim in (1, 2, 3, 4):
                M, I = fn(A, [], dim, "linear", nargout=2)
                M, I = [host(gather(x)) if dist else host(x) for x in (M, I)]
                if dim <= 3:
                    at = np.expand_dims(arg(G, axis=dim - 1), dim - 1)
                    subs = list(np.indices(at.shape))
                    subs[dim - 1] = at
                    want = np.ravel_multi_index(subs, G.shape, order="F") + 1
                else:  # a singleton dimension: every element, at its own position
                    want = np.arange(1, G.size + 1).reshape(G.shape, order="F")
                np.testing.assert_array_equal(I.reshape(want.shape), want)
                np.testing.assert_array_equal(M.reshape(want.shape), F[want - 1])
    _, I = mmax(codistributed(np.array([[1.0, 9, -2], [8, 4, -5]])), [], 2, "linear",
                nargout=2)
    assert host(gather(I)).ravel().tolist() == [3, 2]  # MATLAB: [3; 2]


def test_max_and_min_errors_name_matlabs_call_on_every_worker():
    N, k = spmdSize(), spmdIndex()
    D = codistributed(np.zeros((N + 1, 3)))
    with pytest.raises(SpmdValueError, match=rf"^max \(worker {k} of {N}\): 'dim' must be 1 "
                       r"or more \(got 0\)"):
        mmax(D, [], 0)
    with pytest.raises(SpmdValueError, match=rf"^min \(worker {k} of {N}\): min\(A, B\) has "
                       r"one output"):
        mmin(D, D, nargout=2)
    with pytest.raises(SpmdValueError, match=r"'ComparisonMethod' must be followed by"):
        mmax(D, [], 1, "ComparisonMethod", "size")
    with pytest.raises(SpmdValueError, match=r"unexpected argument 'omitNaNs'"):
        mmax(D, [], "omitNaNs")


def test_max_of_two_arrays_is_in_matlabs_class_of_the_result(backend):
    # MATLAB's valid combinations of unlike classes: max(single, double) is single (a
    # ReLU max(X, 0) keeps single data single), max(integer, double) is the integer
    # class, the double rounded and held at the class's limits; a Python number is a
    # double, as MATLAB's literals are
    N = spmdSize()
    X = np.linspace(-3, 3, 3 * (N + 1)).reshape(3, N + 1)
    S = codistributed(backend.make(X.astype(np.float32)))
    R = mmax(S, 0)
    assert gather_np(R).dtype == np.float32
    np.testing.assert_array_equal(gather_np(R), np.maximum(X.astype(np.float32), 0))
    assert gather_np(mmin(S, np.zeros(N + 1))).dtype == np.float32
    I = codistributed(backend.make(np.array([[1, -2, 3], [4, -5, 6]], np.int32)))
    np.testing.assert_array_equal(gather_np(mmax(I, 2.6)), [[3, 3, 3], [4, 3, 6]])
    assert gather_np(mmax(I, 2.6)).dtype == np.int32
    B = codistributed(backend.make(np.array([[1, 2, 3]], np.uint8)))
    np.testing.assert_array_equal(gather_np(mmax(B, 1000)), [[255, 255, 255]])
    np.testing.assert_array_equal(gather_np(mmin(B, -1)), [[0, 0, 0]])
    assert gather_np(mmin(B, -1)).dtype == np.uint8
    L = codistributed(backend.make(np.array([[True, False, True]])))
    assert gather_np(mmax(L, 0.5)).dtype == np.float64
    assert gather_np(mmax(L, L)).dtype == np.bool_
    assert mmax(np.array([1.0, -1.0], np.float32), 0).dtype == np.float32
    assert mmax(np.uint8(1), 1000.0) == 255  # MATLAB's documented max(1000, uint8(1))


def test_max_of_an_integer_class_and_a_double_converts_the_double_exactly():
    # max(int64(0), 1e19) is intmax("int64") (the double was cast past int64's range, to
    # intmin), max(int64(0), 2^52 + 1) is 2^52 + 1 (adding 0.5 to round it rounded it to
    # 2^52 + 2), max(int64(0), 0.49999999999999994) is 0 (it was 1)
    N = spmdSize()
    top, low = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    D = codistributed(np.zeros((2, N + 1), np.int64))
    for value, want in ((1e19, top), (np.inf, top), (2.0 ** 52 + 1, 2 ** 52 + 1),
                        (0.49999999999999994, 0), (2.5, 3), (2.0 ** 63, top)):
        M = gather(mmax(D, value))
        assert M.dtype == np.int64 and (M == want).all(), (value, M)
    for value, want in ((-1e19, low), (-np.inf, low), (-(2.0 ** 52 + 1), -(2 ** 52 + 1)),
                        (-2.5, -3)):
        M = gather(mmin(D, value))
        assert M.dtype == np.int64 and (M == want).all(), (value, M)
    U = gather(mmax(codistributed(np.zeros((2, N + 1), np.uint64)), 1e20))
    assert U.dtype == np.uint64 and (U == np.iinfo(np.uint64).max).all()
    assert mmax(np.array([0], np.int64), 1e19)[0] == top  # a plain array alike


def test_max_of_an_int64_past_2_to_the_53_and_a_double_keeps_the_int64():
    # max(int64(2^62 + 1), 0.0) is 2^62 + 1: the pair was compared in float64, which
    # rounded the int64 to 2^62 (and gave that back, converted); NaN is still left out,
    # or wins as 0 with "includenan"
    N = spmdSize()
    big = 2 ** 62 + 1
    D = codistributed(np.array([[big, -5] * (N + 1)], np.int64))
    M = gather(mmax(D, 0.0))
    assert M.dtype == np.int64 and M.tolist() == [[big, 0] * (N + 1)]
    assert gather(mmin(D, 2.0 ** 63)).tolist() == [[big, -5] * (N + 1)]
    assert gather(mmax(D, np.nan)).tolist() == [[big, -5] * (N + 1)]
    assert gather(mmax(D, np.nan, "includenan")).tolist() == [[0, 0] * (N + 1)]
    U = np.array([2 ** 64 - 1, 2 ** 53 + 1], np.uint64)
    assert mmin(U, 1e300).tolist() == U.tolist() and mmax(U, -1.0).tolist() == U.tolist()


def test_max_by_abs_compares_int64_magnitudes_exactly():
    # "ComparisonMethod", "abs" compared integers by their float64 abs, which ties
    # 2^53 + 1 with 2^53: max picked -2^53 (the larger angle) instead of 2^53 + 1
    N, k = spmdSize(), spmdIndex()
    big = np.array([2 ** 53 + 1, -(2 ** 53)], np.int64)
    D = codistributed(np.tile(big, (2, N)))  # split along dimension 2
    M, I = mmax(D, [], 2, "ComparisonMethod", "abs", nargout=2)
    assert gather(M).tolist() == [[2 ** 53 + 1]] * 2 and gather(I).tolist() == [[1]] * 2
    M, I = mmax(D, [], 1, "ComparisonMethod", "abs", nargout=2)
    assert gather(M).tolist() == [big.tolist() * N]
    M, I = mmin(D, [], "all", "ComparisonMethod", "abs", nargout=2)
    assert M == -(2 ** 53) and I == 3  # column by column: row 1 of column 2
    U = np.array([2 ** 53 + 1, 2 ** 53], np.uint64)
    assert mmin(U, [], "ComparisonMethod", "abs", nargout=2)[1] == 2


def test_colon_is_double_as_matlabs_so_writes_are_not_truncated():
    # MATLAB's 1:n is double: C = codistributed.colon(1, n); C(2) = C(2) / 4 stores 0.5
    # (an int64 row truncated it to 0); a numpy integer or single operand gives its class
    N = spmdSize()
    C = codistributed.colon(1, N + 2)
    assert C.dtype == np.float64
    C[1] = C[1] / 4
    np.testing.assert_array_equal(gather(C), np.r_[1.0, 0.5, np.arange(3.0, N + 3)])
    assert codistributed.colon(np.int32(1), 5).dtype == np.int32
    assert codistributed.colon(1, np.float32(0.5), 3).dtype == np.float32
    assert codistributed.colon(1, 2, 9, codistributor1d(1)).dtype == np.float64
    assert [int(i) for i in drange(1, N)] == list(drange(1, N))  # loop indices: ints


def test_colon_follows_matlabs_colonop_and_refuses_non_finite_ends():
    # MATLAB's a:d:b stops at b within 2*eps*max(|a|, |b|) (0:1:2.9999999999 is 0:2, not
    # 0:3), fills its second half from the end (0:0.1:0.3 ends at 0.3 exactly) and is
    # symmetric (-1:0.01:1 has an exact 0 in the middle); an infinite or NaN end, or a
    # non-number, is an error naming the call and the worker on every worker
    np.testing.assert_array_equal(gather(codistributed.colon(0, 1, 2.9999999999)), [0, 1, 2])
    assert [float(i) for i in drange(0, 1, 2.9999999999)] == [
        float(i) for i in np.array_split([0.0, 1.0, 2.0], spmdSize())[spmdIndex() - 1]]
    assert gather(codistributed.colon(0, 0.1, 0.3))[-1] == 0.3
    np.testing.assert_array_equal(gather(codistributed.colon(0, 0.1, 0.5))[3:], [0.3, 0.4, 0.5])
    v = gather(codistributed.colon(-1, 0.01, 1))
    assert v.size == 201 and v[100] == 0 and np.array_equal(v, -v[::-1])
    np.testing.assert_array_equal(gather(codistributed.colon(4, -0.5, 1)), np.arange(8, 1, -1) / 2)
    for args in ((1, np.inf), (1, np.nan), (np.nan, 1, 3)):
        with pytest.raises(SpmdValueError,
                           match=r"codistributed.colon \(worker \d+ of \d+\): .* finite"):
            codistributed.colon(*args)
    with pytest.raises(SpmdValueError, match=r"drange \(worker .*'b' must be finite \(got inf\)"):
        drange(1, np.inf)
    with pytest.raises(SpmdTypeError,
                       match=r"drange \(worker .*'b' must be a real number \(got 'a'\)"):
        drange(1, "a")


def test_colon_of_an_integer_class_counts_down_and_stays_in_the_class():
    # MATLAB's uint8(5):-1:1 is 5 4 3 2 1 (uint8): the operands' difference was taken in
    # uint8 (1 - 5 wrapped to 252), which made the row empty; an end past the class's
    # limits is held there, as MATLAB converts it (the values wrapped to 0, 1, ... before)
    row = codistributed.colon(np.uint8(5), -1, np.uint8(1))
    assert row.dtype == np.uint8
    np.testing.assert_array_equal(gather(row), [5, 4, 3, 2, 1])
    np.testing.assert_array_equal(gather(codistributed.colon(np.uint8(3), np.uint8(1))), [])
    row = codistributed.colon(np.uint8(250), 300)
    np.testing.assert_array_equal(gather(row), np.arange(250, 256))
    assert row.dtype == np.uint8
    np.testing.assert_array_equal(gather(codistributed.colon(np.int8(-126), -2, -200)),
                                  [-126, -128])
    assert [int(i) for i in drange(np.uint8(3), -1, np.uint8(1))] == [
        int(i) for i in np.array_split([3, 2, 1], spmdSize())[spmdIndex() - 1]]


def test_inf_and_nan_of_an_integer_or_logical_class_are_refused():
    # MATLAB's Inf(2, "int8") and NaN(2, "like", int32(1)) are errors (only single and
    # double hold them); they made arrays of zeros, with numpy's cast warning
    D = codistributed(np.zeros((2, 3), np.int32))
    for make, args in ((codistributed.NaN, (2, "int8")), (codistributed.Inf, (3, "uint16")),
                       (codistributed.NaN, (2, 2, "like", D)),
                       (codistributed.Inf, (2, "logical"))):
        with pytest.raises(SpmdValueError, match=rf"codistributed.{make.__name__} \(worker "
                           rf"\d+ of \d+\): {make.__name__} makes single or double values "
                           rf"\(got the class (int8|uint16|int32|logical)\)"):
            make(*args)
    assert codistributed.NaN(2, "single").dtype == np.float32
    assert codistributed.Inf(2, 3, "like", D.astype(np.float32)).dtype == np.float32


def test_codistributor_takes_the_global_size_as_matlabs_example():
    # MATLAB's codistributor example: codist = codistributor('1d', dim, [1 2 1 2],
    # [2 6 4]); L = rand(2, 1, 4) or rand(2, 2, 4); A = codistributed.build(L, codist)
    N, k = spmdSize(), spmdIndex()
    part = [1 if w % 2 else 2 for w in range(1, N + 1)]
    codist = codistributor("1d", 2, part, [2, sum(part), 4])
    assert codist.isComplete() and codist.Dimension == 2
    L = np.full((2, 1, 4) if k % 2 else (2, 2, 4), float(k))
    A = codistributed.build(L, codist)
    assert list(size(A)) == [2, sum(part), 4]
    np.testing.assert_array_equal(gather(A)[0, :, 0], np.repeat(np.arange(1.0, N + 1), part))


def test_like_gives_the_class_of_any_prototype_and_random_classes_are_floats():
    # MATLAB's eye(n, 'like', p) and rand(n, 'like', p) take p's class (plain eye, rand
    # and randn ignored it); p may be a number (zeros(2, 'like', 1.0) raised
    # AttributeError); rand and randn make single or double only (rand(2, 'int8')
    # was a matrix of zeros)
    N, k = spmdSize(), spmdIndex()
    assert eye(3, "like", np.int8(1)).dtype == np.int8
    assert rand(1, 3, "like", np.float32(1)).dtype == np.float32
    assert randn(2, "like", np.zeros(1, np.float32)).dtype == np.float32
    assert zeros(2, "like", 1.0).dtype == np.float64
    assert zeros(2, "like", np.float32(1), "codistributed").dtype == np.float32
    assert ones(2, "int16", "like", np.float32(1)).dtype == np.int16
    if torch is not None:
        t = eye(2, "like", torch.ones(1, dtype=torch.float32))
        assert isinstance(t, torch.Tensor) and t.dtype == torch.float32
    for make in (lambda: rand(2, "int8"), lambda: randn(2, "like", np.int16(1)),
                 lambda: rand(2, "logical", "codistributed"),
                 lambda: codistributed.randn(2, "like", codistributed.ones(2, "uint8"))):
        with pytest.raises(SpmdValueError, match=rf"\(worker {k} of {N}\): rand.? makes "
                           r"single or double values \(got the class"):
            make()


def _direct_conv2(A, B, shape):
    """MATLAB's definition, element by element: C(j, k) = sum A(p, q) B(j-p+1, k-q+1)."""
    ma, na = A.shape
    mb, nb = B.shape
    C = np.zeros((ma + mb - 1, na + nb - 1))
    for j in range(C.shape[0]):
        for k in range(C.shape[1]):
            C[j, k] = sum(A[j - p, k - q] * B[p, q] for p in range(mb) for q in range(nb)
                          if 0 <= j - p < ma and 0 <= k - q < na)
    if shape == "same":
        return C[mb // 2:mb // 2 + ma, nb // 2:nb // 2 + na]
    if shape == "valid":
        return C[mb - 1:ma, nb - 1:na][:max(ma - mb + 1, 0), :max(na - nb + 1, 0)]
    return C


def test_conv2_and_filter2_where_the_matrix_lies(backend):
    # C = conv2(D, K, "same") of a codistributed D: each worker's halo from its
    # neighbours, then one process's bits, split as D; the last worker holding all, too
    from spmdlab.matlab import conv2, filter2

    N, k = spmdSize(), spmdIndex()
    rng = np.random.default_rng(4)
    laplace = np.array([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]])
    for shape in ((N + 4, 6), (4, 2 * N + 3), (2, 3)):
        A = rng.standard_normal(shape)
        for K in (laplace, rng.standard_normal((2, 4)), np.ones((4, 1)) / 4):
            for mode in ("full", "same", "valid"):
                plain = conv2(A, K, mode)
                assert np.allclose(plain, _direct_conv2(A, K, mode))
                assert plain.shape == _direct_conv2(A, K, mode).shape
                for dim in (1, 2):
                    late = [0] * (N - 1) + [shape[dim - 1]]
                    for codist in (codistributor1d(dim), codistributor1d(dim, late)):
                        D = codistributed(backend.make(A), codist)
                        C = conv2(D, K, mode)
                        assert isinstance(C, codistributed) and C.axis == dim - 1
                        assert np.array_equal(host(C.gather()), plain), (shape, mode, dim)
                        if mode == "same":
                            assert C.partition == D.partition
        D = codistributed(backend.make(A))
        assert np.array_equal(host(filter2(laplace[:2], D).gather()), filter2(laplace[:2], A))
    with pytest.raises(SpmdValueError, match=rf"conv2 \(worker {k} of {N}\): 'shape'"):
        conv2(codistributed(backend.make(A)), laplace, "middle")
    assert conv2(np.eye(2, dtype=np.float32), np.ones((1, 1), np.float32)).dtype == np.float32
    assert conv2(np.eye(2, dtype=np.int8), [[1, 1]]).dtype == np.float64


def test_conv2_separable_form_as_matlab(backend):
    # MATLAB's C = conv2(u, v, A, shape): the columns convolved with u, then the rows with
    # v; it was Python's TypeError (conv2() takes from 2 to 3 positional arguments)
    from spmdlab.matlab import conv2

    N, k = spmdSize(), spmdIndex()
    rng = np.random.default_rng(5)
    u, v = np.array([1.0, -2.0, 3.0]), np.array([[2.0, 0.5, -1.0, 4.0]])  # v even
    for shape in ((N + 4, 6), (3, 2 * N + 3)):
        A = rng.integers(-9, 9, shape).astype(np.float64)  # whole numbers: exact sums
        for mode in ("full", "same", "valid"):
            expected = _direct_conv2(A, np.outer(u, v), mode)
            plain = conv2(u, v, A, mode)
            assert plain.shape == expected.shape and np.array_equal(plain, expected), mode
            # MATLAB's two passes, as numpy computes them
            assert np.array_equal(plain, conv2(conv2(A, u[:, None], mode), v, mode))
            for dim in (1, 2):
                D = codistributed(backend.make(A), codistributor1d(dim))
                C = conv2(u, v, D, shape=mode)
                assert isinstance(C, codistributed) and C.axis == dim - 1
                assert np.array_equal(host(C.gather()), plain), (shape, mode, dim)
    assert conv2(u, v, A).shape == (A.shape[0] + 2, A.shape[1] + 3)  # "full" by default
    with pytest.raises(SpmdValueError, match=rf"conv2 \(worker {k} of {N}\): 'u' must be "
                       r"a vector \(got a matrix of shape \(2, 2\)\)"):
        conv2(np.ones((2, 2)), v, codistributed(backend.make(A)))
    with pytest.raises(SpmdValueError, match=rf"conv2 \(worker {k} of {N}\): 'shape'"):
        conv2(u, v, codistributed(backend.make(A)), "middle")


def test_sortrows_as_matlab(backend):
    # [B, I] = sortrows(D, [-1 2]): stable, NaN last ascending and first descending;
    # B split as D was, I a codistributed column of 1-based rows
    A = np.array([[3, 1, 2], [1, 5, 0], [3, 0, 9], [np.nan, 2, 1], [1, 5, -1], [3, 1, 0.5]])

    def rows_in_order(columns):  # Python's stable sorts, last key first
        order = list(range(len(A)))
        for c in reversed(columns):
            x = A[:, abs(c) - 1]
            order.sort(key=lambda i: (np.isnan(x[i]) == (c > 0), 0.0 if np.isnan(x[i])
                                      else x[i] * np.sign(c)))
        return order

    for args, columns in (((), [1, 2, 3]), ((2,), [2]), (([-1, 2],), [-1, 2]),
                          (("descend",), [-1, -2, -3]), (([1, -3],), [1, -3])):
        order = rows_in_order(columns)
        B, I = sortrows(A, *args, nargout=2)
        assert np.array_equal(B, A[order], equal_nan=True), args
        assert np.array_equal(I.ravel(), np.array(order) + 1)
        for dim in (1, 2):
            D = codistributed(backend.make(A), codistributor1d(dim))
            DB, DI = sortrows(D, *args, nargout=2)
            assert isinstance(DB, codistributed) and DB.codistributor == D.codistributor
            assert np.array_equal(host(DB.gather()), A[order], equal_nan=True), (args, dim)
            assert np.array_equal(host(DI.gather()).ravel(), np.array(order) + 1)
    small = np.array([[-128, 1], [127, 0], [0, 3]], dtype=np.int8)
    assert np.array_equal(sortrows(small, -1), small[[1, 2, 0]])  # no overflow
    k, N = spmdIndex(), spmdSize()
    for bad in (0, 4, 1.5, "up"):
        with pytest.raises(SpmdValueError, match=rf"sortrows \(worker {k} of {N}\): "):
            sortrows(codistributed(backend.make(A)), bad)
    D = codistributed(backend.make(A))
    with pytest.raises(SpmdValueError, match=rf"sortrows \(worker {k} of {N}\): "):
        sortrows(D, 2 if k != N else 0)  # a bad column on one worker: every worker raises
    if N > 1:  # each worker would sort by its own columns
        with pytest.raises(SpmdMismatchError, match=r"sortrows .*differ in: columns"):
            sortrows(D, 1 if k == 1 else 2)
    assert np.array_equal(host(sortrows(D).gather()), sortrows(A), equal_nan=True)


def test_sortrows_of_a_number_and_a_vector_keeps_their_shape(backend):
    # sortrows(5) is 5 (it was numpy's IndexError); a plain vector stays a vector, as a
    # codistributed one does (it came back a column)
    assert sortrows(5) == 5 and np.ndim(sortrows(np.float64(2.0))) == 0
    v = np.array([3.0, 1.0, 2.0])
    for args, want in (((), [1.0, 2.0, 3.0]), ((-1,), [3.0, 2.0, 1.0])):
        assert np.array_equal(host(sortrows(backend.make(v), *args)), want)
        D = codistributed(backend.make(v))
        assert host(sortrows(D, *args).gather()).shape == host(sortrows(
            backend.make(v), *args)).shape == (3,)
    B, I = sortrows(v, nargout=2)
    assert np.array_equal(I, [[2.0], [3.0], [1.0]])


def test_conv2_of_an_empty_kernel_integers_and_scalars_is_matlabs():
    # 'valid' with an empty kernel has MATLAB's size, max(ma - max(0, mb - 1), 0) (it had
    # a row too many); integers become doubles before they multiply (int8 100 * 100 was
    # 16); a scalar A is a 1-by-1 matrix (it raised KeyError)
    from spmdlab.matlab import conv2

    N = spmdSize()
    A = np.arange(1.0, 4 * N + 5).reshape(4, N + 1)
    for K in (np.zeros((0, 2)), np.zeros((2, 0)), np.zeros((0, 0))):
        want = np.zeros((4 - max(K.shape[0] - 1, 0), N + 1 - max(K.shape[1] - 1, 0)))
        assert np.array_equal(conv2(A, K, "valid"), want)
        for dim in (1, 2):
            C = conv2(codistributed(A, codistributor1d(dim)), K, "valid")
            assert np.array_equal(gather(C), want)
    big = np.full((3, 2 * N), 100, np.int8)
    assert np.array_equal(conv2(big, big[:1, :1]), np.full((3, 2 * N), 10000.0))
    assert np.array_equal(gather(conv2(codistributed(big), big[:1, :1], "same")),
                          np.full((3, 2 * N), 10000.0))
    assert np.array_equal(conv2(np.full((1, 1), 200, np.uint8), [[2]]), [[400.0]])
    assert np.array_equal(conv2(3.0, np.ones((2, 2))), np.full((2, 2), 3.0))


def test_conv2_with_another_kernel_or_shape_on_one_worker_raises_everywhere():
    # the kernel and shape must be alike on every worker: the halos exchanged follow
    # from them (a kernel of another size on one worker hung; another shape gave arrays
    # of different sizes; a bad one raised on one worker while the others waited)
    from spmdlab.matlab import conv2, filter2

    N, k = spmdSize(), spmdIndex()
    D = codistributed(np.arange(4.0 * N + 8).reshape(4, N + 2))
    if N > 1:
        with pytest.raises(SpmdMismatchError, match=r"conv2 .*differ in: kernel"):
            conv2(D, np.ones((2, 2)) if k == 1 else np.ones((3, 3)))
        with pytest.raises(SpmdMismatchError, match=r"conv2 .*differ in: shape"):
            conv2(D, np.ones((2, 2)), "same" if k == 1 else "full")
        with pytest.raises(SpmdMismatchError, match=r"conv2 .*differ in: kernel"):
            conv2(D, np.full((2, 2), 1.0 if k == 1 else 2.0))  # values of its own
    with pytest.raises(SpmdTypeError, match=r"conv2 \(worker \d+ of \d+\).*'B' must be"):
        conv2(D, np.ones((2, 2)) if k != N else np.ones((2, 2, 2)))
    with pytest.raises(SpmdValueError, match=r"filter2 \(worker \d+ of \d+\).*'shape'"):
        filter2(np.ones((2, 2)), D, "same" if k != N else "middle")
    assert np.array_equal(gather(conv2(D, np.ones((2, 2)))), conv2(gather(D), np.ones((2, 2))))


def test_randi_refuses_a_range_past_int64_on_every_worker():
    # randi(1e20) raised numpy's bare "high is out of bounds for int64"
    with pytest.raises(SpmdValueError, match=r"randi \(worker \d+ of \d+\): the range 1 "
                                             r"to 100000000000000000000 must lie within"):
        randi(1e20, 1, 2)
    with pytest.raises(SpmdValueError, match=r"codistributed.randi .*must lie within"):
        codistributed.randi(1e20, 2)
    assert randi([2 ** 63 - 2, 2 ** 63 - 1], 1, 3, "int64").min() >= 2 ** 63 - 2


def test_length_and_isempty_read_matlab_sizes():
    # length(D) is MATLAB's largest dimension (a row vector's n, not numpy's len 1)
    N = spmdSize()
    assert length(zeros(3, 2 * N + 1, "codistributed")) == 2 * N + 1
    assert length(codistributed.colon(1, N + 3)) == N + 3
    assert length(zeros(0, 4, "codistributed")) == 0 and length(np.arange(5)) == 5
    assert length(7.0) == 1
    assert isempty(zeros(0, 3, "codistributed")) and isempty([]) and not isempty(ones(2))


def test_none_is_matlabs_empty_in_isempty_size_numel_and_length():
    # MATLAB's [] is None: R = spmdCat(x, 1, 1) leaves it on the other workers, and the
    # port's "if ~isempty(R)" ran there (isempty(None) was false: None was a 1x1 scalar)
    from spmdlab.matlab import spmdCat

    N, k = spmdSize(), spmdIndex()
    R = spmdCat(k, 1, 1)
    assert isempty(R) == (k != 1)
    assert isempty(None) and numel(None) == 0 and length(None) == 0
    assert size(None).tolist() == [0, 0] and ndims(None) == 2 and size(None, 1) == 0
    if k == 1:
        assert size(R).tolist() == [N, 1]


def test_prctile_is_numpys_hazen_percentile_as_the_guide_says():
    # MATLAB's prctile([1 2 3 4]', 25) is 1.5 (numpy's default "linear" gives 1.75): the
    # guide ports prctile(D, p, dim) as np.percentile(D, p, axis=dim - 1,
    # method="hazen"), on every split
    A = np.array([[1.0, 5.0], [2.0, 6.0], [3.0, 7.0], [4.0, 9.0]])
    want = [[1.0, 5.0], [1.5, 5.5], [2.5, 6.5], [4.0, 9.0]]  # prctile(A, [10 25 50 90])
    for dim in (1, 2):
        D = codistributed(A, codistributor1d(dim))
        got = np.percentile(D, [10, 25, 50, 90], axis=0, method="hazen")
        assert gather(got).tolist() == want
    assert np.quantile(codistributed(np.array([1.0, 2.0, 3.0, 4.0])), 0.25,
                       method="hazen") == 1.5


def test_none_is_matlabs_empty_in_isempty_and_size():
    # res = gop(@plus, x, 1); if ~isempty(res), ...: the other workers' res is MATLAB's
    # [] (None here), which isempty called nonempty (np.shape(None) is (): a 1x1 scalar),
    # so the port went on there as if it had the sum
    from spmdlab.matlab import gop

    k = spmdIndex()
    res = gop("plus", 1, 1)
    assert isempty(res) == (k != 1)
    assert isempty(None) and numel(None) == 0 and length(None) == 0 and ndims(None) == 2
    assert size(None).tolist() == [0, 0] and size(None, 1) == 0
    assert size(None, nargout=2) == (0, 0)


def test_a_composite_is_1_by_n_in_length_size_and_numel():
    # for w = 1:length(c), c{w} = 0; end: MATLAB's length of a Composite is its number of
    # workers; it was the length of the elements (numpy's shape of the Composite, read
    # collectively), and of a Composite with no element yet an error
    N = spmdSize()
    c = Composite(np.zeros(N + 5))
    assert length(c) == N and numel(c) == N and size(c).tolist() == [1, N]
    empty = Composite()
    assert length(empty) == N and not isempty(empty) and size(empty, 2) == N
    assert empty.exist() == [False] * N  # (nothing was read)


def test_randi_as_matlab_makes_it():
    # randi(imax, n), randi([imin imax], m, n, class), randi(r, n, "codistributed"),
    # codistributed.randi, distributed.randi: doubles unless a class is named
    N, k = spmdSize(), spmdIndex()
    np.random.seed(k)
    x = randi(10, 1, 5)
    assert x.shape == (1, 5) and x.dtype == np.float64 and 1 <= x.min() <= x.max() <= 10
    y = randi([-3, 3], 4, "int8")
    assert y.shape == (4, 4) and y.dtype == np.int8 and -3 <= y.min() <= y.max() <= 3
    D = randi(6, 3, 2 * N + 1, "codistributed")
    assert isinstance(D, codistributed) and D.shape == (3, 2 * N + 1) and D.axis == 1
    G = host(D.gather())
    assert G.dtype == np.float64 and 1 <= G.min() <= G.max() <= 6 and (G == G.round()).all()
    E = codistributed.randi([5, 7], N + 2, codistributor1d(1), "int32")
    assert E.axis == 0 and E.dtype == np.int32 and 5 <= int(E.min()) <= int(E.max()) <= 7
    assert distributed.randi(4, 2, 6).shape == (2, 6)
    if torch is not None:
        t = randi(9, 3, "like", torch.zeros(1, dtype=torch.float32))
        assert isinstance(t, torch.Tensor) and t.dtype == torch.float32
    for args, what in (((0, 3), "end must be at least"), (([5, 2], 3), "at least"),
                       ((2.5, 3), "integer imax"), (([1, 2, 3], 2), "integer imax"),
                       ((300, 2, "uint8"), "does not fit"), ((3, 2, "logical"), "logical"),
                       ((3, 2, "codistributed", "logical"), "logical")):
        with pytest.raises(SpmdValueError, match=rf"randi \(worker {k} of {N}\): .*{what}"):
            randi(*args)


def test_for_drange_reads_the_local_part_as_matlab_does():
    # D = codistributed(A, codistributor1d(1)); s = 0;
    # for i = drange(1:n), s = s + D(i, 1) * D(i, end); end; s = gplus(s)
    # MATLAB reads D(i, ...) from the local part inside for-drange (no communication);
    # a collective read there could not match, each worker reading its own rows
    n = 2 * spmdSize() + 1
    A = np.arange(3.0 * n).reshape(n, 3)
    for make in (lambda X: X, torch.from_numpy) if torch is not None else (lambda X: X,):
        D = codistributed(make(A), codistributor1d(1))
        s = 0.0
        for i in drange(1, n):
            s = s + float(D[i - 1, 0] * D[i - 1, -1])
            row = D[i - 1, :]
            row[0] = -1  # a copy, as a collective read gives
        assert gplus(s) == float(np.sum(A[:, 0] * A[:, -1]))
        assert np.array_equal(host(gather(D)), A)
        for i in drange(1, n):
            break
        assert float(D[n - 1, 2]) == A[-1, 2]  # collective again after the loop (a break)
    # MATLAB's own counter-example, f(k) = f(k-1) + 1, reads another worker's part: every
    # worker's first read here (worker 1's f(end), the others' f(k-1)) fails, as in MATLAB
    f = zeros(1, 4 * spmdSize(), "codistributed")
    if spmdSize() > 1:
        with pytest.raises(SpmdIndexError, match=r"for-drange loop a subscript reads only "
                           r"this worker's part .* held by worker"):
            for k in drange(1, 4 * spmdSize()):
                f[0, k - 1] = f[0, k - 2] + 1
    assert drange(1, 4) == list(drange(1, 4)) and len(drange(1, 3 * spmdSize())) == 3


def test_a_collective_inside_a_for_drange_loop_of_uneven_counts_is_refused():
    # for i = drange(1:n), s = gplus(1); end with n not a multiple of the workers: the
    # workers with fewer iterations went on to the next gplus, which the others' last
    # iteration met: gplus(100) after the loop gave 202 at 4 workers, silently
    N = spmdSize()
    if N == 1:
        pytest.skip("needs a second worker")
    n = 2 * N + 1  # 3 iterations on worker 1, 2 on the others
    others = "worker 2" if N == 2 else f"workers {', '.join(map(str, range(2, N + 1)))}"
    counts = rf"\(3 on worker 1; 2 on {others}\)"
    D = codistributed(np.arange(float(n)))
    for body in (lambda: gplus(1), lambda: gather(D), lambda: np.sum(D)):
        with pytest.raises(SpmdError, match=rf"\(worker {spmdIndex()} of {N}\): called "
                           rf"inside a for-drange loop whose workers run different numbers "
                           rf"of iterations {counts}: its collectives cannot pair up"):
            for i in drange(1, n):
                body()
        assert gplus(100) == 100 * N  # in step again after the loop
    # even counts: every worker makes as many, in step
    total = 0
    for i in drange(1, 2 * N):
        total += gplus(1)
    assert total == 2 * N
    # local work in an uneven loop, and a collective after a break out of one
    for i in drange(1, n):
        D[i - 1] = 2.0 * i
        break
    assert gplus(1) == N


def test_for_drange_reads_and_writes_through_np_ix_its_own_rows():
    # D(i, [1 3]) inside the loop, as numpy's D[np.ix_([i - 1], [0, 2])]: this worker's
    # row alone, with no agreement (the workers run different iterations)
    n = 2 * spmdSize() + 1
    A = np.arange(n * 4, dtype=float).reshape(n, 4)
    D = codistributed(A, codistributor1d(1))
    read = [np.asarray(D[np.ix_([i - 1], [0, 2])]).tolist() for i in drange(1, n)]
    for i in drange(1, n):
        D[np.ix_([i - 1], [1, 3])] = -i
    assert read == [[[A[i - 1, 0], A[i - 1, 2]]] for i in drange(1, n)]
    B = A.copy()
    B[:, 1] = B[:, 3] = -np.arange(1, n + 1)
    assert np.array_equal(gather(D), B)


def test_for_drange_writes_and_slices_only_the_local_part():
    # T = ones(n, 2, codistributor1d(1, [0 ... n], [n 2])); for i = drange(1:n), T(i, 1) = i;
    # end: the loop's rows are not the array's, so a write lands on a worker that does not
    # hold the element (it was dropped: the gathered T kept 1s); and s = sum(D(i, :)) of
    # an array split by columns mixed the rows of the workers' different iterations
    n, N, k = 2 * spmdSize(), spmdSize(), spmdIndex()
    T = ones(n, 2, codistributor1d(1, [0] * (N - 1) + [n], [n, 2]))
    A = np.arange(N * n).reshape(n, N).T  # N x n
    C = codistributed(A)  # split by columns
    if k < N:  # worker N holds every row: its own are its to write
        with pytest.raises(SpmdIndexError, match=r"for-drange loop a subscript writes only "
                           r"this worker's part .* held by worker"):
            for i in drange(1, n):
                T[i - 1, 0] = i
    if N > 1:
        with pytest.raises(SpmdIndexError, match=r"for-drange loop a subscript reads only "
                           r"this worker's part .* held by worker"):
            for i in drange(1, N):
                float(np.sum(C[i - 1, :]))
        with pytest.raises(SpmdIndexError, match=r"writes only this worker's part"):
            for i in drange(1, N):
                C[i - 1, :] = 0
    # within the part: plain local reads and writes, no communication
    T = ones(n, 2, codistributor1d(1))
    for i in drange(1, n):
        T[i - 1, :] = [i, -i]
        T[i - 1:i, 1] = T[i - 1:i, 1] * 2  # a slice of this worker's rows: a plain array
        assert not iscodistributed(T[i - 1:i, :])
    expect = np.stack([np.arange(1.0, n + 1), -2 * np.arange(1.0, n + 1)], axis=1)
    assert np.array_equal(gather(T), expect)
    for j in drange(1, n):
        assert np.array_equal(C[:, j - 1], A[:, j - 1])
        assert np.array_equal(C[1:, [j - 1]], A[1:, [j - 1]])
    for j in drange(1, N):  # one iteration each: np.diff's own slices of C are not the body's
        assert np.array_equal(gather(np.diff(C, axis=1)), np.diff(A, axis=1))


def test_matlab_constructors_spmdlab_has_none_of_are_named():
    # codistributed.sparse / speye / sprand / cell gave a bare AttributeError
    k, N = spmdIndex(), spmdSize()
    for cls, name in ((codistributed, "sparse"), (codistributed, "speye"),
                      (codistributed, "sprand"), (distributed, "speye"),
                      (codistributed, "cell")):
        with pytest.raises(SpmdValueError, match=rf"{cls.__name__}\.{name} \(worker {k} of "
                           rf"{N}\): not available in spmdlab: "):
            getattr(cls, name)(3, 3)


def test_for_drange_holds_a_mask_and_the_value_written_to_the_local_part():
    # for j = drange(1:n), D(mask_j) = [..]; end with a replicated mask of column j alone:
    # local reads and writes. A codistributed mask, a mask reaching another worker's part
    # and a codistributed value were collective inside the loop (a mismatch, or a hang,
    # once the workers ran different numbers of iterations): SpmdIndexError /
    # SpmdValueError on the worker that runs them
    n, N, k = 2 * spmdSize() + 1, spmdSize(), spmdIndex()
    A = np.arange(3.0 * n).reshape(3, n)
    for make in (lambda X: X, torch.from_numpy) if torch is not None else (lambda X: X,):
        D = codistributed(make(A.copy()))  # split by columns
        expect = A.copy()
        for j in drange(1, n):
            m = np.zeros((3, n), bool)
            m[::2, j - 1] = True
            assert np.array_equal(host(D[m]), A[m])
            D[m] = [100.0 * j, 100.0 * j + 1]
            D[(np.arange(3) == 1)[:, None] & (np.arange(n) == j - 1)] = -j
            M = mmax(D, [], 1)  # along the rows of a split by columns: this worker's own,
        for j in range(1, n + 1):
            expect[::2, j - 1] = [100.0 * j, 100.0 * j + 1]
            expect[1, j - 1] = -j
        assert np.array_equal(host(gather(D)), expect)
        assert np.array_equal(host(gather(M)).ravel(), expect.max(axis=0))  # in the loop:
        # max(D, [], dim) agrees on its arguments outside for-drange loops only
        M = D > 0
        W = np.zeros((3, n), bool)
        W[0, [0, n - 1]] = True  # worker 1's first column and worker N's last
        E = codistributed(make(np.ones(3)))
        for j in drange(1, n):
            with pytest.raises(SpmdIndexError, match=r"for-drange loop a subscript reads "
                               r"only this worker's part .*a codistributed mask"):
                D[M]
            with pytest.raises(SpmdIndexError, match=r"writes only this worker's part "
                               r".*a codistributed mask"):
                D[M] = 0
            if N > 1:
                with pytest.raises(SpmdIndexError, match=rf"\(worker {k} of {N}\): inside a "
                                   rf"for-drange loop a subscript reads only this worker's "
                                   rf"part .*the mask selects element \(0, "
                                   rf"{n - 1 if k == 1 else 0}\), held by worker "
                                   rf"{N if k == 1 else 1}"):
                    D[W]
                with pytest.raises(SpmdIndexError, match=r"writes only this worker's part"):
                    D[W] = -7
            with pytest.raises(SpmdValueError, match=r"inside a for-drange loop the value "
                               r"written must be this worker's"):
                D[:, j - 1] = E
        assert np.array_equal(host(gather(D)), expect)  # nothing written by the refusals


def test_a_codistributed_logical_index_of_one_dimension():
    # keep = D(:, 1) > 2; R = D(keep, :); D(keep, 2) = 0
    n = spmdSize() + 3
    A = np.arange(3.0 * n).reshape(n, 3)
    for dim in (1, 2):
        D = codistributed(A, codistributor1d(dim))
        keep = D[:, 0] > 2
        assert np.array_equal(gather(D[keep, :]), A[A[:, 0] > 2, :])
        D[keep, 1] = 0
        B = A.copy()
        B[A[:, 0] > 2, 1] = 0
        assert np.array_equal(gather(D), B)


@pytest.mark.parametrize("case", ["gather lab", "build codist", "build part", "scatter lab"])
def test_a_bad_argument_on_one_worker_of_a_collective_call_fails_everywhere(case):
    # these were checked before the call's exchange, on the worker that passed them
    # alone: it raised while the others waited in the exchange (until its next call)
    k, n = spmdIndex(), spmdSize()
    D = codistributed(np.arange(4.0 * n).reshape(4, n))
    codist = getCodistributor(D)
    one = k == n  # the last worker passes the bad value
    if case == "gather lab":
        with pytest.raises(SpmdTypeError, match=rf"gather \(worker {k} of.*'lab' must be an "
                                                r"integer \(got 2\.5\)"):
            gather(D, 2.5 if one else 1)
    elif case == "build codist":
        with pytest.raises(SpmdTypeError, match=r"codistributed.build .*'codist' must be a "
                                                r"codistributor1d \(got 'x'"):
            codistributed.build(getLocalPart(D), "x" if one else codist)
    elif case == "build part":
        with pytest.raises(SpmdTypeError, match=r"codistributed.build .*must be a numpy "
                                                r"array.*not objects"):
            codistributed.build(object() if one else getLocalPart(D), codist)
    else:
        with pytest.raises(SpmdTypeError, match=rf"codistributed \(worker {k} of.*'lab' must "
                                                r"be a worker number.*got 2\.5"):
            codistributed(np.arange(4.0), 2.5 if one else 1)
    assert gather(D, 1.0).shape == ((4, n) if k == 1 else (0, 0))


@pytest.mark.skipif(torch is None, reason="torch")
def test_max_and_min_of_torch_values_keep_the_family_and_matlabs_class():
    # max(T, single(2)) of a plain tensor raised AttributeError ('is_cuda'); of torch
    # parts it was double (the numpy scalar became a Python number); max(T, [], "all")
    # of a plain tensor gave a numpy index, and numpy arrays when empty
    G = np.array([[1.0, 5.0, -2.0], [4.0, -1.0, 3.0]])
    T = torch.from_numpy(G.copy())
    for fn, want in ((mmax, np.maximum(G, 2)), (mmin, np.minimum(G, 2))):
        for X in (T, codistributed(T)):
            got = gather(fn(X, np.float32(2)))
            assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
            assert np.array_equal(got.numpy(), want)
        M, I = fn(T, [], "all", nargout=2)
        MD, ID = fn(codistributed(T), [], "all", nargout=2)
        for x, y in ((M, MD), (I, ID)):
            assert isinstance(x, torch.Tensor) and x.dtype == y.dtype and x.shape == ()
            assert x.item() == y.item()
        M, I = fn(torch.zeros(0, 3), [], "all", nargout=2)
        assert isinstance(M, torch.Tensor) and M.shape == (0, 0)
        assert M.dtype == torch.float32 and I.dtype == torch.int64


def test_isreplicated_says_whether_every_worker_holds_the_same_value():
    # MATLAB's isreplicated(X): collective, the same answer on every worker
    n, k = spmdSize(), spmdIndex()
    assert isreplicated(np.arange(6.0).reshape(2, 3)) is True
    assert isreplicated({"a": [1, 2.5], "b": "text"})
    assert isreplicated(np.float64(np.nan))  # the same bits
    assert isreplicated(np.full(3, float(k))) is (n == 1)
    assert isreplicated(k if k < n else 1) is (n <= 2)  # [1, 1] at 2, [1, 2, 1] at 3
    assert isreplicated(-0.0 if k == 1 else 0.0) is (n == 1)
    assert isreplicated(np.ones(2, np.float32) if k == 1 else np.ones(2)) is (n == 1)
    assert isreplicated(codistributed.ones(4)) is False
    with pytest.raises(SpmdTypeError, match=r"isreplicated \(worker \d of \d\): (cannot "
                                            r"send|failed on another worker: worker 1: can)"):
        isreplicated((lambda: 0) if k == 1 else 0)  # worker 1's cannot be pickled


def test_max_along_a_dimension_each_worker_names_differently_raises_on_every_worker():
    # max(D, [], dim) with a dim of each worker's own: along dimension 1 of a matrix
    # split by columns a worker needs no communication, so it went on alone while the
    # others waited in the exchange of dimension 2 (the job failed later, at the next
    # collective, naming another call); a bad flag on one worker raised there only
    k, N = spmdIndex(), spmdSize()
    D = codistributed(np.arange(6.0 * N).reshape(2, 3 * N))
    assert getCodistributor(D).Dimension == 2
    if N > 1:
        for args in (([], 1 if k == 1 else 2), ([], 1, "omitnan" if k == 1 else "includenan"),
                     ([], "all" if k == N else 1)):
            with pytest.raises(SpmdMismatchError, match=r"max \(worker .*differ in"):
                mmax(D, *args)
        with pytest.raises(SpmdMismatchError, match=r"min \(worker .*differ in"):
            mmin(D, [], 2, nargout=2 if k == 1 else 1)
    with pytest.raises(SpmdValueError, match=rf"^max \(worker {k} of {N}\): .*unexpected "
                       r"argument 'up'"):
        mmax(D, [], 1, "up" if k == N else "omitnan")
    np.testing.assert_array_equal(gather(mmax(D, [], 1)), np.arange(3.0 * N, 6.0 * N)[None])
    np.testing.assert_array_equal(getLocalPart(mmin(D, 0.5 * k)), getLocalPart(D).clip(
        max=0.5 * k))  # element-wise with each worker's own B: not compared, as a ufunc


def test_mldivide_of_a_scalar_divides_as_matlab():
    # MATLAB's a \ B with a scalar a is a .\ B; numpy's solve refused the 0-D (or 1x1
    # against a B of more rows) array with LinAlgError
    from spmdlab.matlab import mldivide

    assert mldivide(2.0, 4.0) == 2.0
    np.testing.assert_array_equal(mldivide(np.array([[2.0]]), np.array([[4.0, 6.0]])),
                                  [[2.0, 3.0]])
    np.testing.assert_array_equal(mldivide(4, [2, 6]), [0.5, 1.5])
    B = codistributed(np.arange(6.0).reshape(3, 2))
    X = mldivide(codistributed(np.array([[4.0]])), B)
    assert isinstance(X, codistributed)
    np.testing.assert_array_equal(gather(X), np.arange(6.0).reshape(3, 2) / 4)


def test_mldivide_gives_matlabs_basic_solution_and_goes_on_where_matlab_warns():
    # numpy's lstsq gave the minimum-norm solution of a rectangular system ([2 1] \ 1
    # was [0.4; 0.2]; MATLAB's QR with column pivoting gives [0.5; 0]) and numpy's solve
    # raised LinAlgError for a singular matrix, where MATLAB warns and returns Inf/NaN
    from spmdlab.matlab import mldivide

    np.testing.assert_array_equal(mldivide(np.array([[2.0, 1.0]]), 1.0), [0.5, 0.0])
    np.testing.assert_allclose(mldivide(np.array([[1.0, 2, 3], [4, 5, 6]]), [1.0, 1.0]),
                               [-0.5, 0.0, 0.5], atol=1e-14)
    wide = np.random.default_rng(2).standard_normal((3, 7))
    x = mldivide(wide, np.ones(3))
    assert np.count_nonzero(x) == 3 and np.allclose(wide @ x, 1.0)
    tall = np.random.default_rng(3).standard_normal((9, 4))
    np.testing.assert_allclose(mldivide(tall, np.arange(9.0)),
                               np.linalg.lstsq(tall, np.arange(9.0), rcond=None)[0])
    with pytest.warns(RuntimeWarning, match=r"mldivide \(worker \d+ of \d+\): Rank "
                      r"deficient, rank = 1, tol = "):
        x = mldivide(np.array([[1.0, 2.0], [2.0, 4.0], [3.0, 6.0]]), [1.0, 2.0, 3.0])
    np.testing.assert_allclose(x, [0.0, 0.5])
    singular = r"mldivide \(worker \d+ of \d+\): Matrix is singular to working precision"
    with pytest.warns(RuntimeWarning, match=singular):
        x = mldivide(np.array([[1, 2], [2, 4]]), [1, 2])  # MATLAB's literals: doubles
    assert x.dtype == np.float64 and np.isnan(x).all()
    with pytest.warns(RuntimeWarning, match=singular):  # triangular: substitution
        np.testing.assert_array_equal(mldivide(np.array([[1.0, 2.0], [0.0, 0.0]]),
                                               [1.0, 1.0]), [-np.inf, np.inf])
    magic4 = np.array([[16.0, 2, 3, 13], [5, 11, 10, 8], [9, 7, 6, 12], [4, 14, 15, 1]])
    # singular in exact arithmetic, not to working precision: LU's last pivot is rounding
    # noise, so which of the solutions comes out depends on the BLAS kernel (MATLAB's
    # documented [1.5 2.5 -0.5 0.5] on one CPU, [1.653 2.958 -0.958 0.347] on another);
    # every one solves the system
    x = mldivide(magic4, np.full(4, 34.0))
    assert np.all(np.isfinite(x)) and np.allclose(magic4 @ x, 34.0)
    lower = np.array([[2.0, 0.0], [1.0, 4.0]])
    np.testing.assert_array_equal(mldivide(lower, [2.0, 9.0]), [1.0, 2.0])
    assert mldivide(np.eye(2, dtype=np.float32), np.ones(2)).dtype == np.float32
    assert mldivide(np.zeros((0, 3)), np.zeros((0, 2))).shape == (3, 2)
    with pytest.raises(SpmdValueError, match=r"mldivide \(worker \d+ of \d+\): A must be "
                       r"a matrix with as many rows as B \(got A of size 3x2 and B of 4"):
        mldivide(np.ones((3, 2)), np.ones(4))
    # codistributed: gathered, the same basic solution on every worker, codistributed
    D = codistributed(np.array([[1.0, 2, 3], [4, 5, 6]]), codistributor1d(2))
    X = mldivide(D, codistributed(np.array([1.0, 1.0])))
    assert isinstance(X, codistributed)
    np.testing.assert_allclose(gather(X), [-0.5, 0.0, 0.5], atol=1e-14)
    with pytest.raises(SpmdValueError, match="A must be a matrix"):
        mldivide(D, np.ones(3))


def test_like_a_distributed_array_makes_a_distributed_array():
    # MATLAB's zeros(n, 'like', D) of a distributed D is distributed (p's class); it was
    # codistributed, so isdistributed of it was false where every other array made from
    # D (D + 1, sum(D), D', redistribute(D)) is distributed
    n = spmdSize()
    D = distributed(np.ones((n + 1, 3), np.float32))
    for made in (zeros(3, "like", D), ones(2, 4, "like", D), eye(3, "like", D),
                 rand(3, "like", D), randn(2, "like", D), randi(5, 2, "like", D),
                 zeros([2, 3], "single", "like", D)):
        assert isdistributed(made) and iscodistributed(made), type(made)
        assert made.dtype == np.float32
    C = codistributed(np.ones(3))
    for made in (zeros(3, "like", C), zeros(3, "like", D, "codistributed"),
                 zeros(3, 3, "like", D, codistributor1d(1))):
        assert iscodistributed(made) and not isdistributed(made), type(made)
    assert isdistributed(zeros(3, "like", C, "distributed"))
    assert gather(ones(2, "like", D)).tolist() == [[1, 1], [1, 1]]


@pytest.mark.skipif(torch is None, reason="torch")
def test_max_of_bfloat16_parts_and_a_value_stays_bfloat16():
    # max(D, 2) of bfloat16 torch parts raised numpy's "The DType VoidDType could not be
    # promoted by Float64DType" (the host stand-in of bfloat16): compared as float32 now,
    # kept bfloat16 where single would stay single
    n = spmdSize()
    t = (torch.arange(4.0 * n + 4).reshape(n + 1, 4) - 5.5).to(torch.bfloat16)
    D = codistributed(t)
    for f in (mmax, mmin):
        for b in (2, 0.3, True, t.flip(0), np.float32(1), torch.ones(4, dtype=torch.int16)):
            got, want = gather(f(D, b)), f(t, b)
            assert got.dtype == want.dtype and torch.equal(got, want), (f, b)
            if got.dtype.is_floating_point:  # (an integer class rounds half away from 0)
                whole = (np.maximum if f is mmax else np.minimum)(
                    t.float().numpy(), host(b.float()) if isinstance(b, torch.Tensor) else b)
                assert torch.equal(got, torch.from_numpy(whole.astype(np.float32)).to(
                    got.dtype))
    assert gather(mmax(D, 2)).dtype == torch.bfloat16
    assert gather(mmax(D, np.float32(1))).dtype == torch.float32
