"""MATLAB names and argument conventions (spmdlab.matlab)."""

import operator

import numpy as np
import pytest

from spmdlab.matlab import (gcat, gop, gplus, labBarrier, labBroadcast, labindex,
                            labProbe, labReceive, labSend, labSendReceive, numlabs,
                            spmdBarrier, spmdBroadcast, spmdCat, spmdIndex, spmdPlus,
                            spmdProbe, spmdProbeStatus, spmdReceive, spmdReceiveStatus,
                            spmdReduce, spmdSend, spmdSendReceive,
                            spmdSize)
from spmdlab import SpmdError, SpmdMismatchError, SpmdValueError, spmd_index, spmd_size

pytestmark = pytest.mark.mpi


def test_index_size_and_legacy_names():
    assert spmdIndex() == labindex() and spmdSize() == numlabs()


def test_plus_and_gplus_with_destination():
    n = spmdSize()
    assert spmdPlus(1) == n and gplus(1) == n
    result = gplus(2.0, 1)
    assert result == (2.0 * n if labindex() == 1 else None)


def test_cat_dim_defaults_to_2_matlab_shapes():
    n, k = spmdSize(), spmdIndex()
    assert spmdCat(k).tolist() == list(range(1, n + 1))          # 1xN row -> 1-D
    assert spmdCat(k, 1).shape == (n, 1)                          # Nx1 column
    assert spmdCat(np.arange(3)).shape == (3 * n,)                # rows side by side
    assert spmdCat(np.arange(3), 1).shape == (n, 3)               # rows stacked
    assert spmdCat(np.ones((2, 2)), 3).shape == (2, 2, n)         # third dimension
    assert gcat(np.ones((2, k)), 2).shape == (2, n * (n + 1) // 2)
    assert [s["k"] for s in gcat({"k": k})] == list(range(1, n + 1))
    last = gcat(k, 2, n)
    assert (last.tolist() == list(range(1, n + 1))) if k == n else last is None


def test_cat_leaves_out_empty_operands_as_matlab_does():
    # results = []; ... results = [results; row]; all = spmdCat(results, 1): the workers
    # that found nothing give [] (0x0 double), the others rows of int64 or a torch family
    n, k = spmdSize(), spmdIndex()
    found = [j for j in range(1, n + 1) if j % 2]  # workers 1, 3, ...: one row each
    rows = np.array([[j, 10 * j, 100 * j] for j in found])
    mine = np.zeros((0, 0)) if k % 2 == 0 else np.array([[k, 10 * k, 100 * k]])
    got = spmdCat(mine, 1)
    assert got.dtype == np.int64 and got.tolist() == rows.tolist()
    assert gcat(mine, 1, 1).tolist() == rows.tolist() if k == 1 else gcat(mine, 1, 1) is None
    side = np.array([]) if k % 2 == 0 else np.array([k, k])  # a 1x0 row among 1x2 rows
    assert spmdCat(side).tolist() == [j for j in found for _ in range(2)]
    assert spmdCat(mine, 2).shape == (1, 3 * len(found))
    torch = pytest.importorskip("torch")
    part = np.zeros((0, 0)) if k % 2 == 0 else torch.full((2, 1), float(k))
    got = spmdCat(part, 2)
    assert isinstance(got, torch.Tensor) and got.tolist() == [[float(j) for j in found]] * 2
    # empty everywhere, or nonempty parts that differ: MATLAB's error stands, named
    assert spmdCat(np.zeros((0, 0)), 1).shape == (0, 0)
    if n > 2:
        with pytest.raises(SpmdValueError, match="cannot be combined"):
            spmdCat(np.zeros((0, 0)) if k == 2 else np.ones((1, k)), 1)


def test_cat_leaves_out_none_as_matlabs_empty():
    # MATLAB's [] is None: spmdCat(X, dim, k) leaves None on the workers other than k,
    # and a later spmdCat of that result (or results = [] on a worker that found
    # nothing) must leave those parts out; it raised "cannot be combined"
    n, k = spmdSize(), spmdIndex()
    part = gcat(np.array([k, 10 * k]), 1, 1)               # N x 2 on worker 1, None elsewhere
    got = spmdCat(part, 1)
    assert got.tolist() == [[j, 10 * j] for j in range(1, n + 1)]
    odd = [j for j in range(1, n + 1) if j % 2]
    got = spmdCat(np.array([k, k]) if k % 2 else None)      # 1-D rows side by side
    assert got.ndim == 1 and got.tolist() == [j for j in odd for _ in range(2)]
    got = gcat(np.full((1, 2), float(k)) if k % 2 else None, 1, n)
    assert got.tolist() == [[float(j)] * 2 for j in odd] if k == n else got is None
    assert spmdCat(None) is None and gcat(None, 1) is None  # [] everywhere: [] (a list
    assert spmdCat(None, 2, 1) is None                      # of Nones before)
    assert spmdPlus(k) == n * (n + 1) // 2                  # still in step


def test_cat_of_unlike_classes_is_in_matlabs_class():
    # [int8([1 2]) [2.7 300]] is int8([1 2 3 127]) in MATLAB; gcat of such parts on
    # different workers raised a mismatch of dtypes
    n, k = spmdSize(), spmdIndex()
    x = np.array([1, 2], np.int8) if k == 1 else np.array([2.7, 300.0])
    got = gcat(x)
    assert got.dtype == np.int8 and got.tolist() == [1, 2] + [3, 127] * (n - 1)
    y = np.array([1.5], np.float32) if k == n else np.array([2.25])
    assert gcat(y).dtype == np.float32 and gcat(y).tolist() == [2.25] * (n - 1) + [1.5]
    z = np.array([True, False]) if k % 2 else np.array([0.5, 1.5])
    assert gcat(z, 1).dtype == (np.float64 if n > 1 else np.bool_)
    w = np.zeros((0, 0)) if k == 2 else np.array([7], np.uint8) if k == 1 else \
        np.array([-3.6])
    assert gcat(w).dtype == np.uint8 and gcat(w).tolist() == [7] + [0] * max(n - 2, 0)
    assert spmdPlus(k) == n * (n + 1) // 2                  # still in step


def test_cat_of_complex_beside_real_parts_is_complex():
    # r = roots(p); R = gcat(r, 1): roots are complex on a worker, real on another
    # ([1i; 2] is complex in MATLAB); it raised a mismatch of dtypes
    n, k = spmdSize(), spmdIndex()
    r = np.roots([1, 0, 1]) if k == 1 else np.roots([1, -3, 2])
    got = gcat(r.reshape(-1, 1), 1)
    expected = np.concatenate([np.roots([1, 0, 1])] + [np.roots([1, -3, 2])] * (n - 1))
    assert got.dtype == np.complex128 and np.array_equal(got.ravel(), expected)
    x = np.complex64(1j) if k == n else np.float32(2.0)
    assert gcat(x).dtype == np.complex64 and gcat(x).tolist() == [2.0] * (n - 1) + [1j]
    assert gop("vertcat", np.array([[1j]]) if k == 1 else np.array([[True]])).dtype == \
        np.complex128
    if n > 1:  # MATLAB's complex integers have no numpy class: the mismatch stands
        with pytest.raises(SpmdValueError, match="cannot be combined"):
            gcat(1j if k == 1 else np.int8(2))
    assert spmdPlus(k) == n * (n + 1) // 2                  # still in step


def test_cat_of_a_list_among_arrays_fails_everywhere_in_step():
    # a list (or a struct) on one worker where the others pass arrays, some of them
    # empty: every worker raises the same mismatch, and the next collective works
    n, k = spmdSize(), spmdIndex()
    if n > 2:
        part = [] if k == 1 else np.zeros(0) if k == 2 else np.ones(2)
        with pytest.raises(SpmdValueError, match="cannot be combined"):
            gcat(part)
    assert spmdPlus(k) == n * (n + 1) // 2


def test_cat_bad_dim_fails_everywhere():
    with pytest.raises(SpmdValueError, match="'dim' must be a positive int"):
        spmdCat(1, 0)


def test_reduce_by_matlab_name_and_function():
    n, k = spmdSize(), spmdIndex()
    assert spmdReduce("and", True) is True
    assert gop("@or", k == n) is True
    assert gop("max", k) == n and gop("min", float(k)) == 1.0
    assert spmdReduce("plus", np.array([1, 2])).tolist() == [n, 2 * n]
    assert gop(operator.mul, 2) == 2 ** n
    assert spmdReduce(np.bitwise_or, np.int64(1 << (k - 1))) == (1 << n) - 1
    with pytest.raises(SpmdValueError, match="unknown MATLAB function name"):
        spmdReduce("sum", 1)
    # "cat" alone was refused by a message that listed "cat" among the names to use
    with pytest.raises(SpmdValueError, match=r"unknown MATLAB function name '@cat'; use one "
                       r"of and, bitand, bitor, bitxor, horzcat, max, min, or, plus, times, "
                       r"vertcat, xor \(with or without '@'\), \('cat', dim\) or a Python "
                       r"function \(cat takes its dim: \('cat', dim\)\)"):
        gop("@cat", 1)


def test_a_python_int_beside_floats_is_a_matlab_double():
    # s = 0; for x = found, s = s + x; end; total = gplus(s): a worker that found
    # nothing keeps the Python int 0, the others a float; every MATLAB number is a
    # double, so the sum is MATLAB's (it raised "cannot be combined" on every worker)
    n, k = spmdSize(), spmdIndex()
    s = 0 if k == 1 else k + 0.5
    want = float(sum(j + 0.5 for j in range(2, n + 1)))
    assert gplus(s) == want and type(gplus(s)) is (float if n > 1 else int)
    assert spmdPlus(s, 1) == (want if k == 1 else None)
    assert gop("max", s) == (n + 0.5 if n > 1 else 0)
    assert spmdReduce("min", -s) == -(n + 0.5 if n > 1 else 0)
    assert gop(max, {"best": s, "count": k - 1})["best"] == (n + 0.5 if n > 1 else 0)
    assert gplus({"s": s, "found": [k - 1, s]}) == {"s": want, "found": [
        float(n * (n - 1) // 2) if n > 1 else 0, want]}
    assert gplus(k) == n * (n + 1) // 2 and type(gplus(k)) is int   # all ints: exact
    assert gcat(s).tolist() == [0] + [j + 0.5 for j in range(2, n + 1)]  # [0 2.5 ...]
    assert gcat(True if k == 1 else s, 1).tolist() == [[1]] + [[j + 0.5] for j in
                                                              range(2, n + 1)]
    if n > 1:  # another difference stands, named, on every worker
        with pytest.raises(SpmdValueError, match="cannot be combined"):
            gplus(0 if k == 1 else np.ones(2))


def test_broadcast_both_spellings():
    n = spmdSize()
    value = spmdBroadcast(n, "x" if spmdIndex() == n else None)
    assert value == "x"
    assert labBroadcast(1, {"a": 1}) == {"a": 1}


def test_send_receive_probe_any():
    n, k = spmdSize(), spmdIndex()
    right, left = k % n + 1, (k - 2) % n + 1
    spmdSend(k, right)
    assert spmdReceive("any") == left
    labSend(k * 10, right, 5)
    while not labProbe("any", 5):
        pass
    assert spmdProbe(left, 5) is True
    assert labReceive(left, 5) == left * 10
    assert spmdSendReceive(right, left, k) == left
    assert labSendReceive(right, left, k, 3) == left
    # [data, src, tag] = spmdReceive(...): the three-output form by name
    spmdSend([k, "x", k], right, 7)  # a 3-item value: unpacked as the data, never as status
    found, src, tag = spmdProbeStatus("any", 7)
    while not found:
        found, src, tag = spmdProbeStatus("any", 7)
    assert (src, tag) == (left, 7)
    assert spmdReceiveStatus("any") == ([left, "x", left], left, 7)
    spmdBarrier()
    labBarrier()


# -- MATLAB's arithmetic and argument forms ------------------------------------------------


def test_integer_sums_saturate_as_in_matlab():
    from spmdlab.matlab import gplus, spmdPlus, spmdReduce

    n = spmd_size()
    big = np.int32(2 ** 31 - 1)
    assert gplus(big) == big and type(gplus(big)) is np.int32  # held at intmax
    assert spmdPlus(np.int8(-100)) == (np.int8(-128) if n > 1 else np.int8(-100))
    assert spmdReduce("@plus", np.array([250, 1], dtype=np.uint8)).tolist() == \
        [min(255, 250 * n), n]
    assert spmdPlus(np.int64(3)) == 3 * n  # in range: the plain sum
    from spmdlab import spmd_plus

    if n > 1:  # the pythonic API keeps numpy's wrapping
        with np.errstate(over="ignore"):
            assert spmd_plus(np.int32(2 ** 31 - 1)) != big


def test_logical_sums_are_double_counts():
    from spmdlab.matlab import gplus

    n = spmd_size()
    result = gplus(np.array([True, False]))
    assert result.dtype == np.float64 and result.tolist() == [float(n), 0.0]
    assert gplus(True) == float(n) and isinstance(gplus(True), float)


def test_worker_numbers_as_matlab_gives_them():
    from spmdlab.matlab import (gplus, labBroadcast, labReceive, labSend, labSendReceive,
                                numlabs)

    n = spmd_size()
    assert gplus(1.0, float(n)) == (float(n) if spmd_index() == n else None)
    assert labBroadcast(1.0, spmd_index() * 10) == 10
    # MATLAB's [] is "none": a one-way shift of a ring
    right = float(spmd_index() + 1) if spmd_index() < n else []
    left = float(spmd_index() - 1) if spmd_index() > 1 else []
    got = labSendReceive(right, left, spmd_index())
    assert got == (spmd_index() - 1 if spmd_index() > 1 else None)
    # labSend(x, 2:numlabs): nothing to send with one worker
    if spmd_index() == 1:
        labSend("hello", range(2, numlabs() + 1))
    else:
        assert labReceive(1.0) == "hello"


def test_concatenating_reductions_by_name():
    from spmdlab.matlab import gop, spmdReduce

    n = spmd_size()
    row = np.array([[spmd_index(), 0]])
    assert gop("@vertcat", row).shape == (n, 2)
    assert gop("horzcat", row).shape == (1, 2 * n)
    assert spmdReduce(("cat", 3), row).shape == (1, 2, n)
    assert spmdReduce("@max", spmd_index()) == n


def test_send_to_a_numpy_worker_number():
    # a worker number from numpy arithmetic (np.int64) is a worker, not a list to test
    n, k = spmdSize(), spmdIndex()
    right, left = k % n + 1, (k - 2) % n + 1
    spmdSend(k, np.int64(right), np.int32(2))
    assert spmdReceive(np.int64(left), 2) == left


def test_errors_name_the_matlab_function_called():
    # a MATLAB user called spmdSend or gop, not spmd_send or spmd_reduce
    from spmdlab import SpmdError
    n = spmdSize()
    for name, call in (("spmdSend", lambda: spmdSend(1, n + 1)),
                       ("spmdSendReceive", lambda: spmdSendReceive(n + 1, 1, 5)),
                       ("spmdBroadcast", lambda: spmdBroadcast(n + 1, 1)),
                       ("gplus", lambda: gplus("a")),
                       ("gop", lambda: gop(np.add, np.ones(spmdIndex())) if n > 1 else
                        gop(np.add, object(), n + 1))):
        with pytest.raises(SpmdError, match=rf"^{name} \(worker {spmdIndex()} of {n}\)"):
            call()


def test_errors_on_one_worker_name_the_matlab_function_on_every_worker():
    # the others quote the failed worker's message: it names gplus, not spmd_plus, and
    # they wait in gcat, not in spmd_cat (tester G)
    n, k = spmdSize(), spmdIndex()
    bad = k == n
    for name, call in (("gplus", lambda: gplus(1, n + 1 if bad else 1)),
                       ("gcat", lambda: gcat(k, 0 if bad else 2)),
                       ("gop", lambda: gop("mean" if bad else "plus", 1)),
                       ("labBroadcast", lambda: labBroadcast(n + 1 if bad else 1, 3))):
        with pytest.raises(SpmdError) as info:
            call()
        text = str(info.value)
        assert text.startswith(f"{name} (worker {k} of {n}): "), text
        assert "spmd_" not in text and "spmdCat" not in text and "spmdReduce" not in text, text
        if not bad:
            assert f"failed on another worker: worker {n}: {name} (worker {n} of {n}): " \
                in text, text


def test_errors_on_several_workers_name_the_matlab_function_in_every_quote():
    # (tester T3) the others quoted the first failed worker's message with gop's name,
    # the next ones' with spmd_reduce's ("...; worker 3: spmd_reduce (worker 3 of 3)")
    n, k = spmdSize(), spmdIndex()
    if n == 1:
        return  # (worker 1 fails on none)
    for name, call in (("gop", lambda: gop(lambda a, b: 1 / 0 if spmdIndex() > 1 else a, 1.0)),
                       ("gplus", lambda: gplus(1, 0 if k > 1 else 1))):
        with pytest.raises(SpmdError) as info:
            call()
        text = str(info.value)
        assert text.startswith(f"{name} (worker {k} of {n}): "), text
        assert "spmd_" not in text, text
        if k == 1 and n > 2:
            assert f"; worker {n}: {name} (worker {n} of {n}): " in text, text


def test_broadcast_without_data_on_the_source_is_an_error_on_every_worker():
    # labBroadcast(1) on worker 1 gave None to every worker; MATLAB's source must pass X
    n, k = spmdSize(), spmdIndex()
    for call in (labBroadcast, spmdBroadcast):
        with pytest.raises(SpmdValueError, match=rf"^{call.__name__} \(worker {k} of {n}\)"
                                                 rf".*worker 1, must pass X"):
            call(1.0)
    # [] (None) is a value, sent as it is; the others leave X out
    assert (labBroadcast(n, None) if k == n else labBroadcast(n)) is None
    got = spmdBroadcast(1, {"a": [k]}) if k == 1 else spmdBroadcast(1)
    assert got == {"a": [1]}


def test_cat_leaves_empty_parts_out_of_cells_and_structs():
    # MATLAB's [{1}, [], {3}] is {1, 3} and [s1, [], s3] a 1x2 struct: a worker that found
    # nothing passes [] (None or a 0x0 array); the parts were a mismatch (tester G)
    n, k = spmdSize(), spmdIndex()
    odd = [w for w in range(1, n + 1) if w % 2]
    assert gcat([k] if k % 2 else None) == odd
    even = [w for w in range(1, n + 1) if not w % 2]
    assert gcat(None if k % 2 else [k]) == (even or None)   # ([] everywhere: [])
    assert gcat([k, "x"] if k % 2 else np.zeros((0, 0)), 1) == \
        [v for w in odd for v in (w, "x")]
    assert spmdReduce("vertcat", [k] if k % 2 else None) == odd
    assert [s["k"] for s in gcat({"k": k} if k % 2 else None)] == odd
    last = spmdCat([k] if k % 2 else None, 2, n)
    assert last == (odd if k == n else None)
    # a cell beside an array that is not [] is still an error, on every worker
    if n > 1:
        with pytest.raises(SpmdMismatchError, match=rf"^gcat \(worker {k} of {n}\)"):
            gcat([k] if k % 2 else np.ones(1))


def test_max_and_min_of_unlike_classes_and_complex_values_are_matlabs():
    # a worker without data starts from -Inf (a double) beside int8 or single maxima:
    # MATLAB's class of the result, not a mismatch; complex values compare by magnitude,
    # then angle (numpy's fmax by real part: max(3, 1+5i) was 3) (tester G)
    n, k = spmdSize(), spmdIndex()
    got = gop("max", np.int8(-5) if k == 1 else -np.inf)
    assert type(got) is np.int8 and got == -5
    got = gop("max", np.int8(5) if k == 1 else 300.0)
    assert type(got) is np.int8 and got == (5 if n == 1 else 127)
    got = spmdReduce("@min", np.array([1, 2], np.uint8) if k == n else np.array([-3.0, np.nan]))
    assert got.dtype == np.uint8 and got.tolist() == ([1, 2] if n == 1 else [0, 2])
    got = gop("max", np.float32(k) if k == 1 else -np.inf, n)
    assert (type(got) is np.float32 and got == 1) if k == n else got is None
    got = gop("max", 3.0 if k == 1 else 1 + 5j)
    assert got == (3 if n == 1 else 1 + 5j)
    got = gop(max, 1j * k)
    assert got == 1j * n
    got = gop("min", np.array([3.0, -1j * k]) if k % 2 else np.array([1 + 1j, np.nan]))
    assert got.tolist() == ([3, -1j] if n == 1 else [1 + 1j, -1j])
    got = gop("max", np.bool_(True) if k == 1 else 2.0)       # max(true, 2) is 2
    assert got == (1 if n == 1 else 2)
    got = gop("max", np.float32(1) if k == 1 else 1j)
    assert got == (1 if n == 1 else 1j) and np.asarray(got).dtype in (np.float32, np.complex64)


def test_bit_functions_take_whole_doubles_as_matlabs():
    # MATLAB's bitor(1, 2) is 3: error flags kept as doubles, gop(@bitor, flag); numpy's
    # bitwise_or refused floats (tester G)
    n, k = spmdSize(), spmdIndex()
    got = gop("bitor", float(2 ** (k - 1)))
    assert type(got) is float and got == 2 ** n - 1
    got = spmdReduce("@bitand", np.array([7.0, 6.0]) if k == 1 else np.array([3.0, 2.0]))
    assert got.dtype == np.float64 and got.tolist() == ([7, 6] if n == 1 else [3, 2])
    got = gop("bitxor", np.float32(k), 1)
    want = 0
    for w in range(1, n + 1):
        want ^= w
    assert (type(got) is np.float32 and got == want) if k == 1 else got is None
    if n > 1:  # (one worker's value is the result: no bit function runs)
        with pytest.raises(SpmdError, match=rf"^gop \(worker {k} of {n}\)"):
            gop("bitor", 1.5 if k == 2 else 1.0)
        with pytest.raises(SpmdError, match=rf"^gop \(worker {k} of {n}\)"):
            gop("bitor", 1.5)
    assert gplus(1) == n   # still in step


def test_integer_sums_saturate_past_int64_and_check_class_and_size():
    from spmdlab import SpmdError
    from spmdlab.matlab import gplus, spmdReduce

    n, k = spmd_size(), spmd_index()
    top = np.iinfo(np.uint64).max
    assert gplus(np.uint64(top)) == np.uint64(top) and type(gplus(np.uint64(1))) is np.uint64
    low = np.int64(-2 ** 63)
    assert gplus(low) == low
    def fold(values, combine):  # MATLAB's: saturated at each step, in worker order
        total = values[0]
        for v in values[1:]:
            total = min(127, max(-128, combine(total, v)))
        return total

    # ((127 + 1) -> 127) - 1 ...: 126, not 127
    mine = [127, 1] + [-1] * (n - 2)
    assert gplus(np.int8(mine[k - 1])) == fold(mine[:n], lambda a, b: a + b)
    # MATLAB's times on integers saturates as its plus does
    got = spmdReduce("times", np.array([100, -100, 2], dtype=np.int8))
    assert got.dtype == np.int8
    assert got.tolist() == [fold([v] * n, lambda a, b: a * b) for v in (100, -100, 2)]
    if n > 1:  # a class or a size that differs from worker 1's: an error everywhere
        with pytest.raises(SpmdError, match="worker 2 passed int16 of size"):
            gplus(np.ones(2, dtype=np.int16 if k == 2 else np.int8))
        with pytest.raises(SpmdError, match=r"worker 2 passed int8 of size \(3,\)"):
            gplus(np.ones(1 if k == 1 else 3, dtype=np.int8), 1)
        with pytest.raises(SpmdError, match="worker 2 passed uint8"):
            spmdReduce("times", np.uint8(2) if k == 2 else np.int8(2))
    zero_d = gplus(np.array(100, dtype=np.int8))  # a 0-d array stays a 0-d array
    assert type(zero_d) is np.ndarray and zero_d.shape == () and zero_d.dtype == np.int8
    assert zero_d == min(127, 100 * n)
    assert gplus(np.int8(1)) == n  # the job goes on


def test_a_double_beside_an_int64_is_converted_exactly_in_sums_and_cats():
    # gplus(int64(5)) beside 1e19 elsewhere is intmax (1e19 was cast to intmin and the
    # sum wrapped to -9223372036854775803), gop(@max) of them intmax (it was 5), gcat
    # holds 1e19 at intmax; 2^52 + 1 is converted to itself (it was 2^52 + 2)
    n, k = spmd_size(), spmd_index()
    if n == 1:
        return
    top = np.iinfo(np.int64).max
    x = np.int64(5) if k == 1 else 1e19
    assert gplus(x) == top and type(gplus(x)) is np.int64
    assert gop("max", x) == top
    assert gcat(x).tolist() == [5] + [top] * (n - 1)
    y = np.int64(0) if k == 1 else 2.0 ** 52 + 1
    assert gplus(y) == (2 ** 52 + 1) * (n - 1)
    assert gcat(y).tolist() == [0] + [2 ** 52 + 1] * (n - 1)
    # NaN left out of gop(@min): the int64 itself (it went through float64: 2^62)
    z = np.int64(2 ** 62 + 1) if k == 1 else np.nan
    assert gop("min", z) == 2 ** 62 + 1 and gop("max", z) == 2 ** 62 + 1


def test_times_of_logicals_is_a_double_as_plus_counts_them():
    # MATLAB's true .* true is the double 1 (the module says spmdReduce("times") counts
    # logicals as doubles, as spmdPlus does): a logical array gave numpy's bool product
    # (a logical and), a Python bool an int
    n, k = spmd_size(), spmd_index()
    got = gop("times", np.array([True, False, True]) if k == 1 else np.array([True] * 3))
    assert got.dtype == np.float64 and got.tolist() == [1.0, 0.0, 1.0]
    got = spmdReduce("@times", True)
    assert type(got) is float and got == 1.0
    got = gop("times", True if k == 1 else 2.5)  # beside doubles
    assert got == 2.5 ** (n - 1) and isinstance(got, float)
    got = gop("times", np.bool_(True) if k == 1 else np.int8(100), 1)
    if k == 1:  # beside an integer class: that class, saturating
        assert type(got) is (np.int8 if n > 1 else float)
        assert got == (1 if n == 1 else min(127, 100 ** (n - 1)))


def test_integer_counts_beside_doubles_take_the_integer_class():
    # hits = 0; for i = drange(1:2), hits = hits + sum(x < 0.5); end; gplus(hits):
    # np.sum of a mask is an int64, the worker that counted nothing kept the 0 (a
    # double in MATLAB); MATLAB's int64 + double is an int64 (it was "workers made
    # different calls", from the two paths spmdPlus takes)
    from spmdlab.matlab import drange

    n, k = spmd_size(), spmd_index()
    hits = 0
    for _ in drange(1, 2):
        hits = hits + np.sum(np.ones(10) < 2)
    total = gplus(hits)
    assert total == 20 and type(total) is np.int64
    assert gop("@plus", hits) == 20 and type(gop("plus", hits)) is np.int64
    # the integer class wins in any worker order; doubles are rounded, as MATLAB's
    mine = np.int8(100) if k == n else 1.6
    got = gplus(mine)
    expected = 100 if n == 1 else min(127, 100 + int(np.round(1.6 * (n - 1))))
    assert type(got) is np.int8 and got == expected
    # a logical array beside integers: MATLAB's logical + uint8 is uint8
    got = gplus(np.array([True, False]) if k == 1 else np.array([5, 6], np.uint8))
    assert got.dtype == (np.uint8 if n > 1 else np.float64)
    assert got.tolist() == ([1.0, 0.0] if n == 1 else [1 + 5 * (n - 1), 6 * (n - 1)])
    got = gplus(np.arange(3, dtype=np.int32) if k != 2 else np.zeros(3), 1)
    m = max(n - 1, 1)  # the workers that pass the int32 row
    assert (got is None) if k != 1 else (got.dtype == np.int32 and
                                         got.tolist() == [0, m, 2 * m])
    # a single beside doubles is a single, complex beside real complex (MATLAB's class of
    # single(1.5) + 1 and of 1i + 2; they raised a mismatch of types)
    got = gplus(np.float32(1.5) if k == 1 else 1)
    assert type(got) is np.float32 and got == 1.5 + (n - 1)
    got = gplus(np.ones(2, np.float32) if k == n else np.ones(2))
    assert got.dtype == np.float32 and got.tolist() == [n, n]
    got = gplus(1j if k == 1 else 2.0)
    assert got == 1j + 2.0 * (n - 1) and (n == 1 or type(got) is np.complex128)
    # MATLAB's times too: p = 1 on a worker, an integer class elsewhere
    got = spmdReduce("@times", np.int8(100) if k == 2 else 2.0)
    assert type(got) is (np.int8 if n > 1 else float)
    assert got == (2.0 if n == 1 else min(127, 100 * 2 ** (n - 1)))
    assert gop("times", np.int32(3) if k == 1 else 1) == 3
    if n > 1:  # a size that differs, or a second integer class: still an error everywhere
        from spmdlab import SpmdError

        with pytest.raises(SpmdError, match=r"gplus .*integer plus.* size"):
            gplus(np.arange(3, dtype=np.int32) if k != 2 else 0)
        if n > 2:
            with pytest.raises(SpmdError, match="worker 3 passed int16"):
                gplus(np.int8(1) if k == 1 else (np.int16(1) if k == 3 else 0))
        # another call on a worker is not mended: the mismatch stands
        with pytest.raises(SpmdError, match="different calls"):
            gplus(np.int64(1)) if k == 1 else gcat(0)
        with pytest.raises(SpmdError, match="different functions"):
            gop("times", np.int8(2)) if k == 1 else gop("max", 1.0)
    assert gplus(1) == n  # the job goes on


def test_structs_and_cells_sum_as_their_values_alone():
    # gplus(s) of a struct: its int8 field saturated as gplus(int8(100)) is (it wrapped to
    # -56 with numpy's overflow warning), its logical field a double count (it raised
    # "cannot sum bool values"), the same class on every worker
    n, k = spmd_size(), spmd_index()
    top = min(127, 100 * n)
    got = gplus({"n": np.int8(100), "mask": np.array([True, False]), "loss": 0.5})
    assert type(got["n"]) is np.int8 and got["n"] == top
    assert got["mask"].dtype == np.float64 and got["mask"].tolist() == [n, 0]
    assert got["loss"] == 0.5 * n
    cell = spmdPlus([np.int8(100), np.ones(2)])
    assert type(cell) is list and cell[0] == top and cell[1].tolist() == [n, n]
    # count = 0 in a struct on a worker that counted nothing: the int64 class everywhere
    got = gplus({"count": np.int64(k) if k > 1 or n == 1 else 0, "loss": 1.0})
    assert type(got["count"]) is np.int64
    assert got["count"] == n * (n + 1) // 2 - (n > 1)
    if n > 1:
        from spmdlab import SpmdError

        with pytest.raises(SpmdError, match="structure"):
            gplus({"a": np.int8(1)} if k == 1 else {"b": np.int8(1)})
    assert gplus({"a": 1.0})["a"] == n  # the job goes on


def test_max_min_ignore_nan_and_logical_functions_on_numbers():
    from spmdlab.matlab import gop, spmdReduce

    n, k = spmd_size(), spmd_index()
    # MATLAB's max and min omit NaN: max(NaN, 2) is 2
    got = gop("@max", np.array([np.nan if k == 1 else float(k), 1.0]))
    assert got[1] == 1.0 and (np.isnan(got[0]) if n == 1 else got[0] == n)
    low = spmdReduce("min", np.nan if k == n else float(k))
    assert (np.isnan(low) if n == 1 else low == 1.0)
    assert spmdReduce("max", np.int8(k)) == np.int8(n)
    # Python's own max and min, as a port of gop(@max, X) writes them: MATLAB's rules too
    # (Python's max(NaN, 2) is NaN, its max(2, NaN) is 2)
    nan_first = np.nan if k == 1 else float(k)
    assert (np.isnan(gop(max, nan_first)) if n == 1 else gop(max, nan_first) == n)
    assert (np.isnan(gop(min, nan_first)) if n == 1 else gop(min, nan_first) == min(2, n))
    # and, or and xor are logical on numbers (and(1, 2) is true), never bitwise
    pair = np.array([1, 2]) if k % 2 else np.array([2, 1])
    assert spmdReduce("and", pair).tolist() == [True, True]
    assert spmdReduce("@and", k) is True
    assert spmdReduce("or", np.zeros(2)).tolist() == [False, False]
    assert spmdReduce("or", float(k == n)) is True
    assert bool(spmdReduce("xor", np.int8(k))) == (n % 2 == 1)
