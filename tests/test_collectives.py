"""Collectives at any worker count, over every array backend and dtype.

Run with ``mpiexec -n N python -m pytest --with-mpi`` (N = 1, 2, 3, 4): every worker
runs every test and asserts on its own result.
"""

import operator
import warnings

import numpy as np
import pytest

import spmdlab
from spmdlab import (SpmdTypeError, SpmdValueError, spmd_barrier, spmd_broadcast, spmd_cat,
                     spmd_index, spmd_plus, spmd_reduce, spmd_send_receive, spmd_size)

from conftest import expected_fold, same_family, torch

pytestmark = pytest.mark.mpi

DTYPES = [np.float32, np.float64, np.float16, np.int8, np.int32, np.int64, np.uint8,
          np.complex128]


def local(shape, dtype, k=None):
    """Worker k's data: different on every worker, exactly representable sums."""
    k = spmd_index() if k is None else k
    n = int(np.prod(shape))
    data = (np.arange(n) % 5 + k).reshape(shape)
    return data.astype(dtype)


def expected_sum(shape, dtype):
    total = sum(local(shape, dtype, k).astype(np.complex128)
                for k in range(1, spmd_size() + 1))
    if np.dtype(dtype).kind in "iu":  # an integer sum wraps as numpy's does (16 workers
        # overflow int8)
        return total.real.astype(np.int64).astype(dtype).astype(np.complex128)
    return total


def test_index_and_size():
    from mpi4py import MPI

    assert spmd_size() == MPI.COMM_WORLD.Get_size()
    assert spmd_index() == MPI.COMM_WORLD.Get_rank() + 1


# -- spmd_plus ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(), (3,), (2, 5), (40, 1000)], ids=str)
def test_plus_arrays(backend, dtype, shape):
    data = local(shape, dtype)
    x = backend.make(data)
    before = backend.read(x).copy()
    result = spmd_plus(x)
    same_family(result, x)
    assert tuple(result.shape) == shape
    np.testing.assert_array_equal(backend.read(result).astype(np.complex128),
                                  expected_sum(shape, dtype))
    np.testing.assert_array_equal(backend.read(x), before)  # input unmodified


def test_plus_python_scalars():
    n = spmd_size()
    k = spmd_index()
    total = spmd_plus(1.5)
    assert type(total) is float and total == 1.5 * n
    total = spmd_plus(k)
    assert type(total) is int and total == n * (n + 1) // 2
    count = spmd_plus(k % 2 == 1)
    assert type(count) is int and count == (n + 1) // 2
    z = spmd_plus(1 + 2j)
    assert type(z) is complex and z == n * (1 + 2j)
    assert spmd_plus(2 ** 40) == n * 2 ** 40


@pytest.mark.parametrize("scalar", [np.float64, np.float32, np.int64, np.int32, np.int16,
                                    np.uint64], ids=lambda t: t.__name__)
def test_plus_numpy_scalars(scalar):
    result = spmd_plus(scalar(spmd_index()))
    assert type(result) is scalar
    assert result == scalar(spmd_size() * (spmd_size() + 1) // 2)


def test_plus_float32_scalar_rounds_in_float32():
    # every worker adds 0.1f: the sum is the float32 fold, not the float64 one
    n = spmd_size()
    expected = expected_fold([np.array(np.float32(0.1))] * n, np.add)
    assert expected.dtype == np.float32
    assert spmd_plus(np.float32(0.1)) == expected


def test_plus_nested_structure_keeps_types(backend):
    k = spmd_index()
    n = spmd_size()
    value = {
        "w": backend.make(np.full((3, 4), k, np.float32)),
        "b": backend.make(np.full(4, k, np.float64)),
        "steps": k,
        "loss": float(k),
        "pair": (np.int32(k), [np.ones(2, np.int64) * k]),
    }
    result = spmd_plus(value)
    s = n * (n + 1) // 2
    assert set(result) == set(value)
    same_family(result["w"], value["w"])
    same_family(result["b"], value["b"])
    assert (backend.read(result["w"]) == s).all() and (backend.read(result["b"]) == s).all()
    assert type(result["steps"]) is int and result["steps"] == s
    assert type(result["loss"]) is float and result["loss"] == s
    assert type(result["pair"]) is tuple and type(result["pair"][1]) is list
    assert type(result["pair"][0]) is np.int32 and result["pair"][0] == s
    assert (result["pair"][1][0] == s).all() and result["pair"][1][0].dtype == np.int64


def test_plus_dict_keys_in_any_order():
    k = spmd_index()
    value = {"a": float(k), "b": 10.0 * k} if k % 2 else {"b": 10.0 * k, "a": float(k)}
    result = spmd_plus(value)
    s = spmd_size() * (spmd_size() + 1) / 2
    assert result == {"a": s, "b": 10 * s}


def test_plus_many_arrays_of_one_dtype():
    k = spmd_index()
    grads = {f"layer{i}": np.full((i + 1, 7), k * (i + 1), np.float32) for i in range(50)}
    result = spmd_plus(grads)
    s = spmd_size() * (spmd_size() + 1) // 2
    for i in range(50):
        assert result[f"layer{i}"].shape == (i + 1, 7)
        assert (result[f"layer{i}"] == s * (i + 1)).all()


def test_plus_destination():
    n = spmd_size()
    for dest in range(1, n + 1):
        scalar = spmd_plus(2.0, destination=dest)
        big = spmd_plus(np.ones(100000, np.float32), destination=dest)
        nested = spmd_plus({"a": np.ones(3)}, destination=dest)
        if spmd_index() == dest:
            assert scalar == 2.0 * n
            assert big.dtype == np.float32 and (big == n).all()
            assert (nested["a"] == n).all()
        else:
            assert scalar is None and big is None and nested is None


def test_plus_results_never_share_memory():
    x = np.ones(1 << 16, np.float32) * spmd_index()
    first = spmd_plus(x)
    keep = first[:10]  # a view keeps the first result's buffer alive
    del first
    second = spmd_plus(x * 2)
    third = spmd_plus(x * 3)
    s = spmd_size() * (spmd_size() + 1) // 2
    assert (keep == s).all() and (second == 2 * s).all() and (third == 3 * s).all()


def test_plus_identical_on_every_worker():
    rng = np.random.default_rng(spmd_index())
    x = rng.standard_normal(10000).astype(np.float32)
    result = spmd_plus(x)
    everyone = spmd_cat(result[None, :])
    for row in everyone:
        assert np.array_equal(row.view(np.uint32), result.view(np.uint32))


def test_plus_empty_array():
    result = spmd_plus(np.zeros((0, 3), np.float32))
    assert result.shape == (0, 3) and result.dtype == np.float32


def test_plus_of_structures_without_leaves_gives_them_back():
    """``()``, ``[]``, ``{}`` and ``{"a": [], "b": ()}`` sum to themselves (an IndexError
    inside spmdlab before, at every worker count)."""
    n = spmd_size()
    for value in [(), [], {}, {"a": [], "b": ()}]:
        assert spmd_plus(value) == value
        assert spmd_plus(value, destination=n) == (value if spmd_index() == n else None)
    mixed = spmd_plus({"a": [], "x": np.ones(2) * spmd_index()})
    assert mixed["a"] == [] and mixed["x"].tolist() == [n * (n + 1) / 2] * 2


@pytest.mark.parametrize("size", [1, 3, 100_000], ids=["scalar", "small", "large"])
def test_sums_that_overflow_or_meet_inf_and_minus_inf_do_not_warn(size):
    """inf + -inf is NaN and a float32 overflow inf, as MPI's own sum gives them, with no
    RuntimeWarning from spmdlab's folds: under ``-W error`` such a warning was raised on
    some workers only, mid-collective (at 5 or more workers the others then waited)."""
    k, n = spmd_index(), spmd_size()
    infinite = np.full(size, np.inf if k == 1 else -np.inf)
    huge = np.full(size, np.float32(3e38))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        if size == 1:
            values = [float(infinite[0]), infinite[0], huge[0]]
        else:
            values = [infinite, huge, {"a": infinite, "b": 1}]
        if torch is not None:
            values.append(torch.from_numpy(infinite.copy()))
        results = [spmd_plus(v) for v in values]
        results += [spmd_reduce(np.add, v) for v in values]
        results.append(spmd_reduce(np.multiply, huge))
        results.append(spmd_plus(infinite, destination=n))
    want_inf = np.inf if n == 1 else np.nan
    for r in results[:1] + results[len(values):len(values) + 1]:
        assert np.array_equal(np.asarray(r), np.full(size, want_inf).reshape(np.shape(r)),
                              equal_nan=True), r
    assert n == 1 or np.all(np.isinf(np.asarray(results[2 if size == 1 else 1])))
    assert k != n or np.array_equal(results[-1], np.full(size, want_inf), equal_nan=True)
    assert n == 1 or np.all(np.isinf(np.asarray(results[-2])))


# -- spmd_reduce ---------------------------------------------------------------------------


@pytest.mark.parametrize("fcn", [operator.add, np.add, max, np.maximum, min, np.minimum,
                                 operator.mul], ids=lambda f: getattr(f, "__name__", f))
def test_reduce_known_functions_on_arrays(backend, fcn):
    k = spmd_index()
    n = spmd_size()
    x = backend.make(np.array([k, -k, 2], np.float64))
    result = spmd_reduce(fcn, x)
    same_family(result, x)
    values = [np.array([j, -j, 2], np.float64) for j in range(1, n + 1)]
    expected = values[0]
    for v in values[1:]:
        expected = {max: np.maximum, min: np.minimum}.get(fcn, fcn)(expected, v)
    np.testing.assert_array_equal(backend.read(result), expected)


def test_reduce_logical_and_of_has_data():
    k = spmd_index()
    assert spmd_reduce(operator.and_, True) is True
    assert spmd_reduce(operator.and_, k != 1) is (spmd_size() == 0)
    assert spmd_reduce(operator.or_, k == spmd_size()) is True
    flags = np.array([True, k == 1])
    np.testing.assert_array_equal(spmd_reduce(np.logical_and, flags),
                                  [True, spmd_size() == 1])


def test_reduce_bitwise_on_ints():
    k = spmd_index()
    assert spmd_reduce(operator.or_, 1 << (k - 1)) == (1 << spmd_size()) - 1
    assert spmd_reduce(np.bitwise_and, np.int32(7)) == 7


def test_ints_in_a_list_sum_as_int64_at_every_layout():
    # a lone Python int sums exactly; inside a list, tuple or dict ints are int64, and a
    # sum past 2**63 wraps the same way whether it rides in the agreement's record (a few
    # workers, a short list), goes by arrays (a long list) or through the tree (many)
    n = spmd_size()
    wrapped = (n * (2 ** 63 - 1) + 2 ** 63) % 2 ** 64 - 2 ** 63
    for length in (3, 20000):
        got = spmd_plus([2 ** 63 - 1] * length)
        assert type(got) is list and len(got) == length
        assert all(type(v) is int for v in got[:3])
        assert got[0] == got[-1] == wrapped
    got = spmd_plus({"a": 2 ** 62, "b": (1, 2 ** 62)})
    assert got == {"a": (n * 2 ** 62 + 2 ** 63) % 2 ** 64 - 2 ** 63,
                   "b": (n, (n * 2 ** 62 + 2 ** 63) % 2 ** 64 - 2 ** 63)}
    assert spmd_plus(2 ** 62) == n * 2 ** 62  # alone: exact


def test_reduce_custom_function_in_worker_order():
    # string concatenation is associative but not commutative: order must be 1..N
    result = spmd_reduce(lambda a, b: a + b, str(spmd_index()))
    assert result == "".join(str(k) for k in range(1, spmd_size() + 1))
    lists = spmd_reduce(operator.add, [spmd_index()])
    assert lists == list(range(1, spmd_size() + 1))


def test_reduce_custom_function_on_arrays_and_destination():
    def longer(a, b):
        return a if len(a) >= len(b) else b

    x = np.arange(spmd_index())
    for dest in (None, spmd_size()):
        result = spmd_reduce(longer, x, destination=dest)
        if dest is None or spmd_index() == dest:
            np.testing.assert_array_equal(result, np.arange(spmd_size()))
        else:
            assert result is None


def test_reduce_max_of_python_floats():
    assert spmd_reduce(max, float(spmd_index())) == float(spmd_size())
    assert spmd_reduce(min, spmd_index()) == 1


def test_reduce_max_and_min_of_bools_keep_their_type():
    # the maximum of bools is their or, the minimum their and: a Python bool stays one, a
    # 0-d array a 0-d array, a bool tensor a bool tensor (at any worker count)
    n, k = spmd_size(), spmd_index()
    assert spmd_reduce(max, k == n) is True and spmd_reduce(min, k == n) is (n == 1)
    zero_d = spmd_reduce(np.maximum, np.array(k == 1))
    assert type(zero_d) is np.ndarray and zero_d.shape == () and zero_d.dtype == bool
    assert spmd_reduce(np.fmin, {"a": k == 1}) == {"a": n == 1}
    if torch is not None:
        got = spmd_reduce(max, torch.tensor([k == 1, False]))
        assert got.dtype == torch.bool and got.tolist() == [True, False]



def test_reduce_max_and_min_of_lists_keep_python_meaning():
    # on lists and tuples a function keeps Python's meaning, whatever the worker count:
    # max is the larger sequence as Python compares them, and a list stays a list (the
    # element-wise numpy.maximum gave an array at 2 workers and more)
    n, k = spmd_size(), spmd_index()
    got = spmd_reduce(max, [k, -k])
    assert type(got) is list and got == [n, -n]
    got = spmd_reduce(min, (k, -k))
    assert type(got) is tuple and got == (1, -1)

# -- spmd_cat ------------------------------------------------------------------------------


def test_cat_scalars_give_1d_array():
    n = spmd_size()
    result = spmd_cat(spmd_index())
    assert isinstance(result, np.ndarray) and result.tolist() == list(range(1, n + 1))
    result = spmd_cat(float(spmd_index()))
    assert result.dtype == np.float64 and result.shape == (n,)


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint8], ids=lambda d: d.__name__)
def test_cat_sizes_differ_along_axis(backend, dtype):
    k = spmd_index()
    n = spmd_size()
    x = backend.make(np.full((k, 3), k, dtype))
    before = backend.read(x).copy()
    result = spmd_cat(x)
    same_family(result, x)
    expected = np.concatenate([np.full((j, 3), j, dtype) for j in range(1, n + 1)])
    np.testing.assert_array_equal(backend.read(result), expected)
    np.testing.assert_array_equal(backend.read(x), before)


def test_cat_results_stay_when_the_next_calls_come():
    # small values ride in the agreement's record: the result must be a copy of them
    n, k = spmd_size(), spmd_index()
    first = spmd_cat(np.full(3, k))
    second = spmd_cat(np.full(3, -k, dtype=np.float32))
    spmd_plus(np.ones(4))
    assert first.tolist() == [w for w in range(1, n + 1) for _ in range(3)]
    assert second.tolist() == [-w for w in range(1, n + 1) for _ in range(3)]
    assert second.dtype == np.float32


def test_cat_other_axis_and_negative_axis():
    k = spmd_index()
    n = spmd_size()
    x = np.full((2, k, 2), k, np.float64)
    expected = np.concatenate([np.full((2, j, 2), j, np.float64) for j in range(1, n + 1)],
                              axis=1)
    np.testing.assert_array_equal(spmd_cat(x, axis=1), expected)
    y = np.full((2, 3), k, np.int32)
    np.testing.assert_array_equal(spmd_cat(y, axis=-1),
                                  np.concatenate([np.full((2, 3), j, np.int32)
                                                  for j in range(1, n + 1)], axis=1))


def test_cat_checks_its_arguments_every_call():
    # spmd_cat keeps what it made of (dtype, shape, axis, destination) for the next call:
    # an argument that only looks the same must still be checked (True is not 1).
    k, n = spmd_index(), spmd_size()
    x = np.full((2, 2), k, np.float64)
    expected = np.concatenate([np.full((2, 2), j, np.float64) for j in range(1, n + 1)],
                              axis=1)
    for _ in range(2):
        np.testing.assert_array_equal(spmd_cat(x, axis=1), expected)
        np.testing.assert_array_equal(spmd_cat(x, axis=np.int64(1)), expected)
        with pytest.raises(SpmdTypeError, match="'axis' must be an int"):
            spmd_cat(x, axis=True)
        with pytest.raises(SpmdTypeError, match="'destination' must be a worker number"):
            spmd_cat(x, destination=True)
        with pytest.raises(SpmdValueError, match="axis 2 is out of range"):
            spmd_cat(x, axis=2)
    np.testing.assert_array_equal(spmd_cat(np.zeros((k, 0))), np.zeros((n * (n + 1) // 2, 0)))
    np.testing.assert_array_equal(spmd_cat(np.zeros((2, 0, 3)), axis=1), np.zeros((2, 0, 3)))


@pytest.mark.mpi(min_size=2)
def test_cat_of_structured_dtypes_that_differ_fails_on_every_worker():
    # two structured dtypes of one size share dtype.str ("|V12"): the fields must be
    # compared too, or each worker reads the others' bytes by its own fields
    from spmdlab import SpmdMismatchError

    k = spmd_index()
    first = np.dtype([("x", "i4"), ("y", "f8")])
    other = np.dtype([("y", "f8"), ("x", "i4")]) if k == 2 else first
    with pytest.raises(SpmdMismatchError, match="differ in: dtype"):
        spmd_cat(np.zeros(2, dtype=other))
    with pytest.raises(SpmdMismatchError, match="big-endian"):
        spmd_cat(np.zeros(2, dtype=">f8" if k == 2 else "<f8"))
    got = spmd_cat(np.full(2, k, dtype=first))
    assert got.dtype == first and list(got["x"]) == [j for j in range(1, spmd_size() + 1)
                                                     for _ in range(2)]


def test_byte_swapped_values_keep_their_dtype():
    k, n = spmd_index(), spmd_size()
    got = spmd_plus(np.arange(4, dtype=">f8"))
    assert got.dtype.str == ">f8" and got.tolist() == [n * i for i in range(4)]
    got = spmd_cat(np.full((2, k), k, dtype=">i2"), axis=1)
    assert got.dtype.str == ">i2" and got.shape == (2, n * (n + 1) // 2)
    assert got[0].tolist() == [j for j in range(1, n + 1) for _ in range(j)]


def test_cat_where_only_some_values_fit_the_agreement_record():
    # worker 1's value rides in its record, the others' are too large to: every worker
    # still gets every block, in worker order, along either axis
    k, n = spmd_index(), spmd_size()
    rows = 5 if k == 1 else 800 * k
    expected = np.concatenate([np.full((5 if j == 1 else 800 * j, 2), j, np.float64)
                               for j in range(1, n + 1)])
    np.testing.assert_array_equal(spmd_cat(np.full((rows, 2), k, np.float64)), expected)
    np.testing.assert_array_equal(spmd_cat(np.full((2, rows), k, np.float64), axis=1),
                                  expected.T)
    np.testing.assert_array_equal(spmd_cat(np.full(3, k)), np.repeat(np.arange(1, n + 1), 3))


def test_cat_large_arrays():
    k = spmd_index()
    x = np.full((1000 * k, 20), k, np.float32)
    result = spmd_cat(x)
    assert result.shape == (1000 * spmd_size() * (spmd_size() + 1) // 2, 20)
    assert result[0, 0] == 1 and result[-1, -1] == spmd_size()


def test_cat_dicts_objects_lists():
    k = spmd_index()
    n = spmd_size()
    assert spmd_cat({"worker": k, "w": np.ones(2) * k}) is not None
    structs = spmd_cat({"worker": k, "w": np.ones(2) * k})
    assert [s["worker"] for s in structs] == list(range(1, n + 1))
    assert all((s["w"] == s["worker"]).all() for s in structs)
    assert spmd_cat(f"w{k}") == [f"w{j}" for j in range(1, n + 1)]
    assert spmd_cat([k, k]) == [j for j in range(1, n + 1) for _ in range(2)]
    assert spmd_cat((k,)) == tuple(range(1, n + 1))
    assert spmd_cat(None) == [None] * n


def test_cat_destination():
    for dest in range(1, spmd_size() + 1):
        result = spmd_cat(np.array([spmd_index()]), destination=dest)
        if spmd_index() == dest:
            assert result.tolist() == list(range(1, spmd_size() + 1))
        else:
            assert result is None


# -- spmd_broadcast and spmd_barrier --------------------------------------------------------


def test_broadcast_any_value(backend):
    n = spmd_size()
    for source in range(1, n + 1):
        payload = {"x": backend.make(np.arange(6, dtype=np.float32).reshape(2, 3) * source),
                   "name": f"from {source}", "n": source}
        x = payload if spmd_index() == source else None
        result = spmd_broadcast(source, x)
        assert result["name"] == f"from {source}" and result["n"] == source
        same_family(result["x"], payload["x"])
        np.testing.assert_array_equal(backend.read(result["x"]),
                                      np.arange(6).reshape(2, 3) * source)


def test_broadcast_result_is_a_copy_on_the_source():
    x = np.zeros(4)
    result = spmd_broadcast(1, x)
    result[0] = 5.0
    assert x[0] == 0.0


@pytest.mark.skipif(torch is None or not hasattr(torch, "float8_e4m3fn"),
                    reason="needs torch with float8")
@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
def test_tensors_of_a_dtype_numpy_lacks_travel_and_are_refused_by_reductions():
    # float8 and complex32 have no numpy dtype: messages and broadcasts carry their
    # bytes (they once escaped encode as torch's own TypeError on the source alone,
    # the others waiting in the broadcast); a reduction refuses them on every worker
    k, n = spmd_index(), spmd_size()
    for dtype, wide in ((torch.float8_e4m3fn, torch.float32),
                        (torch.complex32, torch.complex64)):
        x = torch.full((2, 3), float(k)).to(dtype)
        got = spmd_broadcast(1, x if k == 1 else None)
        assert got.dtype == dtype and got.shape == (2, 3)
        assert torch.equal(got.to(wide), torch.ones(2, 3, dtype=wide))
        got = spmd_send_receive(k % n + 1, (k - 2) % n + 1, {"w": x})["w"]
        left = torch.full((2, 3), float((k - 2) % n + 1)).to(wide)
        assert got.dtype == dtype and torch.equal(got.to(wide), left)
        with pytest.raises(SpmdTypeError, match=f"cannot sum a tensor of {dtype}"):
            spmd_plus(x)
        assert spmd_plus(1) == n  # the next call goes on


def test_masked_arrays_keep_their_mask_or_are_refused():
    # a masked array's data alone would be a wrong answer: spmd_plus refuses it, the
    # calls that move values whole (or fold with the user's function) keep the mask
    k, n = spmd_index(), spmd_size()
    m = np.ma.masked_array([1.0, 2.0, 3.0], mask=[False, k == 1, False])
    with pytest.raises(SpmdTypeError, match="cannot sum a value of type MaskedArray"):
        spmd_plus(m)
    total = spmd_reduce(np.add, m)
    assert isinstance(total, np.ma.MaskedArray) and list(total.mask) == [False, True, False]
    assert list(total.filled(0)) == [n, 0, 3 * n]
    got = spmd_broadcast(1, m if k == 1 else None)
    assert isinstance(got, np.ma.MaskedArray) and list(got.mask) == [False, True, False]
    parts = spmd_cat(m)
    assert [bool(p.mask[1]) for p in parts] == [j == 1 for j in range(1, n + 1)]


def test_broadcast_large_array():
    x = np.arange(3_000_000, dtype=np.float64) if spmd_index() == 1 else None
    result = spmd_broadcast(1, x)
    assert result.shape == (3_000_000,) and result[-1] == 2_999_999


def test_barrier():
    spmd_barrier()
    spmd_barrier()


def test_many_calls_in_sequence_stay_matched():
    total = 0.0
    for i in range(300):
        total += spmd_plus(float(i))
    assert total == spmd_size() * sum(range(300))


@pytest.mark.skipif(torch is None, reason="torch not installed")
def test_torch_bfloat16_moves_but_does_not_sum():
    x = torch.ones(3, dtype=torch.bfloat16) * spmd_index()
    result = spmd_cat(x)
    assert result.dtype == torch.bfloat16 and result.shape == (3 * spmd_size(),)
    assert spmd_broadcast(1, x).dtype == torch.bfloat16
    with pytest.raises(spmdlab.SpmdTypeError, match="bfloat16"):
        spmd_plus(x)


def test_workers_mixing_families_agree():
    # fast paths (Python scalars, small numpy arrays) and the general path must compute
    # the same agreement key for the same dtype and shape
    k = spmd_index()
    n = spmd_size()
    scalar = [1.0, np.float64(1.0), np.array(1.0)][k % 3]
    assert spmd_plus(scalar) == n
    small = np.ones(4, np.float32) if k % 2 else (
        torch.ones(4) if torch is not None else {"x": 1}["x"] * np.ones(4, np.float32))
    result = spmd_plus(small)
    assert (np.asarray(result) == n).all()
    medium = np.ones(1000, np.int64) if k % 2 else [np.ones(1000, np.int64)][0].copy()
    assert (spmd_plus(medium) == n).all()
    assert spmd_plus(k % 2 == 0) == n // 2


@pytest.mark.skipif(torch is None, reason="torch not installed")
def test_dicts_mixing_families_differently_on_each_worker():
    # one MPI call per dtype on every worker, whatever family each leaf has there
    k = spmd_index()
    a = np.full(1000, k, np.float32)
    b = np.full(2000, 2 * k, np.float32)
    value = {"a": torch.from_numpy(a) if k % 2 else a, "b": b if k % 2 else torch.from_numpy(b),
             "c": np.full(500, k, np.float64)}
    result = spmd_plus(value)
    s = spmd_size() * (spmd_size() + 1) // 2
    assert (np.asarray(result["a"]) == s).all() and (np.asarray(result["b"]) == 2 * s).all()
    assert type(result["a"]) is type(value["a"]) and (result["c"] == s).all()


@pytest.mark.mpi
def test_small_cpu_tensors_reduce_as_their_arrays_do():
    # a plain CPU tensor takes its numpy view's fast path: the same sum, a tensor of its
    # own memory, and errors that name the tensor on every worker
    if torch is None:
        pytest.skip("needs torch")
    from spmdlab import SpmdMismatchError
    k, n = spmd_index(), spmd_size()
    t = torch.arange(5, dtype=torch.float32) * k
    want = torch.arange(5, dtype=torch.float32) * (n * (n + 1) // 2)
    first = spmd_plus(t)
    assert type(first) is torch.Tensor and first.dtype == torch.float32
    assert torch.equal(first, want)
    first.add_(1)  # its own memory: neither the input nor the next result changes
    assert torch.equal(spmd_plus(t), want) and torch.equal(t, torch.arange(5.0) * k)
    assert torch.equal(spmd_reduce(operator.add, t), want)
    assert torch.equal(spmd_reduce(max, torch.tensor([k, -k])), torch.tensor([n, -1]))
    scalar = spmd_plus(torch.tensor(float(k), dtype=torch.float64))
    assert scalar.shape == () and scalar.item() == n * (n + 1) / 2
    if n > 1:
        with pytest.raises(SpmdMismatchError, match="float64 \\(5,\\) torch"):
            spmd_plus(t.double() if k == 1 else t)
        assert torch.equal(spmd_plus(t), want)  # the next call goes on


def test_loops_of_gathered_reductions_ride_in_the_record_and_meet_anything():
    # after a reduction that gathers every value (over 1 KiB, up to 128 KiB in all) the
    # next record has room for such a value: whatever each worker calls next (the same
    # reduction, another size, another collective, a mismatch, a value the general path
    # takes), every worker gets the same answer or the same error, in worker order
    from spmdlab import SpmdMismatchError

    k, n = spmd_index(), spmd_size()
    rng = np.random.default_rng(k)

    def value(items, dtype=np.float64):
        return rng.standard_normal(items).astype(dtype)

    def check(x, got):
        assert got.dtype == x.dtype and got.shape == x.shape
        want = expected_fold(spmd_cat(x.reshape(1, -1), 0), np.add).reshape(x.shape)
        assert got.tobytes() == want.tobytes()

    for items in [512, 512, 1024, 512, 600, 512, 2048, 300, (30, 40), 512]:
        x = value(items) if isinstance(items, int) else value(1200).reshape(items)
        check(x, spmd_plus(x))
        x = value(700, np.float32)
        check(x, spmd_plus(x))
    x = value(512)
    spmd_plus(x)
    assert spmd_plus(1.5) == 1.5 * n  # another kind of call after a gathered one
    spmd_plus(x)
    assert spmd_broadcast(1, k) == 1 and (spmd_cat(np.array([k])) == np.arange(1, n + 1)).all()
    spmd_plus(x)
    spmd_barrier()
    spmd_plus(x)
    assert (spmd_plus(np.ones(3)) == n).all()
    spmd_plus(x)
    assert (spmd_reduce(max, x) == spmd_cat(x.reshape(1, -1), 0).max(axis=0)).all()
    check(x, spmd_plus(x))  # (a general path on some workers, the same key: a subclass)
    mine = x if k % 2 else x.view(type("Sub", (np.ndarray,), {}))
    got = spmd_plus(mine)
    assert np.asarray(got).tobytes() == np.asarray(spmd_plus(x)).tobytes()
    if n > 1:
        spmd_plus(x)
        with pytest.raises(SpmdMismatchError, match="spmd_plus"):
            spmd_plus(value(512) if k == 1 else value(513))
        spmd_plus(x)
        with pytest.raises(SpmdTypeError, match="str"):
            spmd_plus(x if k == 1 else "text")
    check(x, spmd_plus(x))  # every worker goes on together


def test_a_loop_that_alternates_gathered_and_other_calls_stops_widening(monkeypatch):
    # a gradient then a scalar loss, in a loop: the room made after each gradient goes
    # unused (a wider record for the loss, every time) unless it stops being made
    from spmdlab import _agree

    unused = []
    took = _agree.Wide.took
    monkeypatch.setattr(_agree.Wide, "took", lambda self, *a: unused.append(1) or
                        took(self, *a))
    k, n = spmd_index(), spmd_size()
    grad = np.full(1000, float(k))
    for _ in range(50):
        assert (spmd_plus(grad) == n * (n + 1) / 2).all()
        assert spmd_plus(1.0) == n
    for sizes in ([300, 5000], [2000, 150, 8000]):  # sizes over 4x apart in a loop
        for _ in range(30):
            for items in sizes:
                assert (spmd_plus(np.ones(items)) == n).all()
    assert len(unused) <= 12
    ex = spmdlab._world.current().exchange
    for _ in range(80):  # a loop of one size rides in the record again
        assert (spmd_plus(grad) == n * (n + 1) / 2).all()
    assert len(unused) <= 12 and ex.armed == (grad.nbytes if n > 1 and not ex.tree else 0)
