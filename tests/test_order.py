"""Worker order and bit-identical results at every size and node layout.

Each reduction strategy (inline, gathered, scattered, shared memory) must fold the
workers' values left to right in worker order and give every worker the same bits. The
suite runs at 1-4 workers on one node and at the 2x2 layout (MPIR_CVAR_NUM_CLIQUES=2),
so these tests cover every layout CI has.
"""

import operator

import numpy as np
import pytest
from mpi4py import MPI

from conftest import expected_fold, left_fold
from spmdlab import _reduce, _shm, _world, spmd_cat, spmd_index, spmd_plus, spmd_reduce, \
    spmd_size

pytestmark = pytest.mark.mpi

# elements of float32: inline (up to 1 KiB), gathered (up to 128 KiB in all), shared
# memory on one node and scattered across nodes (from 64 KiB, when not gathered)
SIZES = [3, 200, 5_000, 50_001]


def inputs(count, dtype=np.float32):
    return [np.random.default_rng(1000 + k).standard_normal(count).astype(dtype)
            for k in range(1, spmd_size() + 1)]


def same_bits_everywhere(result):
    everyone = spmd_cat(np.ascontiguousarray(result).reshape(1, -1))
    raw = np.ascontiguousarray(result).reshape(-1).view(np.uint8)
    return all(np.array_equal(row.view(np.uint8), raw) for row in everyone)


@pytest.mark.parametrize("count", SIZES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_sum_is_the_documented_fold_in_worker_order(count, dtype):
    values = inputs(count, dtype)
    mine = values[spmd_index() - 1]
    before = mine.copy()
    result = spmd_plus(mine)
    assert result.dtype == dtype
    assert np.array_equal(result, expected_fold(values, np.add))
    assert same_bits_everywhere(result)
    assert np.array_equal(mine, before)  # the input is never modified


@pytest.mark.parametrize("count", SIZES)
def test_reduce_to_a_destination_is_the_same_fold(count):
    values = inputs(count)
    for dest in range(1, spmd_size() + 1):
        result = spmd_reduce(operator.add, values[spmd_index() - 1], destination=dest)
        if spmd_index() == dest:
            assert np.array_equal(result, expected_fold(values, np.add))
        else:
            assert result is None


@pytest.mark.parametrize("count", SIZES)
def test_product_and_maximum_in_worker_order(count):
    values = [1 + 0.01 * v for v in inputs(count, np.float64)]
    mine = values[spmd_index() - 1]
    assert np.array_equal(spmd_reduce(np.multiply, mine), expected_fold(values, np.multiply))
    assert np.array_equal(spmd_reduce(max, mine), expected_fold(values, np.maximum))


def test_a_dict_of_mixed_dtypes_and_sizes():
    k = spmd_index()
    big, small = inputs(30_000), inputs(10, np.float64)
    value = {"big": big[k - 1], "small": small[k - 1],
             "ints": np.arange(7_000, dtype=np.int32) * k, "scalar": np.float32(k) / 3}
    result = spmd_plus(value)
    assert np.array_equal(result["big"], expected_fold(big, np.add))
    assert np.array_equal(result["small"], expected_fold(small, np.add))
    n = spmd_size()
    assert np.array_equal(result["ints"], np.arange(7_000, dtype=np.int32) * (n * (n + 1) // 2))
    thirds = [np.array(np.float32(j) / 3) for j in range(1, n + 1)]  # float32 each step
    assert result["scalar"] == expected_fold(thirds, np.add)
    for leaf in ("big", "small", "ints"):
        assert same_bits_everywhere(result[leaf])


def test_gathered_sizes_beyond_those_kept_and_back():
    """A gathered reduction starts a persistent Allgather kept per size (the last 8
    sizes): more sizes than that, twice over, in two dtypes sharing sizes, with
    reductions to a destination (which gather otherwise) between, all fold right."""
    for _ in range(2):
        for count in range(300, 300 + 11 * 37, 37):  # 11 sizes, 2.4-5.3 KB of float64
            for dtype in (np.float64, np.int64):
                values = inputs(count, np.float64)
                if dtype is np.int64:
                    values = [(v * 1000).astype(np.int64) for v in values]
                mine = values[spmd_index() - 1]
                result = spmd_plus(mine)
                assert result.dtype == dtype
                assert np.array_equal(result, expected_fold(values, np.add))
                assert same_bits_everywhere(result)
            to_one = spmd_reduce(operator.add, mine, destination=1)
            if spmd_index() == 1:
                assert np.array_equal(to_one, expected_fold(values, np.add))
            else:
                assert to_one is None


def test_scattered_path_with_fewer_elements_than_workers_on_some_slices():
    # 5 elements over 4 workers: slices of 1 and 2 elements, some workers fold one
    values = inputs(5)
    old = _reduce.GATHER_BYTES
    _reduce.GATHER_BYTES = 0  # on every worker: force the scattered strategy
    try:
        result = spmd_plus(values[spmd_index() - 1])
        expected = expected_fold(values, np.add)  # (among many: by halves along the tree)
    finally:
        _reduce.GATHER_BYTES = old
    assert np.array_equal(result, expected)


def test_no_mpi_reduction_is_used(monkeypatch):
    """MPI's own reductions fold in a layout-dependent order: none may be called."""
    scope = _world.current()

    class NoReductions:
        def __init__(self, comm):
            self.comm = comm

        def __getattr__(self, name):
            if "reduce" in name.lower():
                raise AssertionError(f"MPI {name} called")
            return getattr(self.comm, name)

    monkeypatch.setattr(scope, "comm", NoReductions(scope.comm))
    monkeypatch.setattr(_shm, "MIN_BYTES", 1 << 40)  # every worker: no shared memory
    for count in SIZES:
        values = inputs(count)
        assert np.array_equal(spmd_plus(values[spmd_index() - 1]), expected_fold(values, np.add))


def test_node_layout_is_the_one_asked_for():
    """Under MPIR_CVAR_NUM_CLIQUES=c (MPICH) workers are spread over c nodes."""
    import os

    cliques = int(os.environ.get("MPIR_CVAR_NUM_CLIQUES", "1") or 1)
    if not MPI.Get_library_version().startswith("MPICH") or cliques == 1:
        pytest.skip("one node")
    node = MPI.COMM_WORLD.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        size = node.Get_size()
    finally:
        node.Free()
    assert size < MPI.COMM_WORLD.Get_size() or MPI.COMM_WORLD.Get_size() == 1
