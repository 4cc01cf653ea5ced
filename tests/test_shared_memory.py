"""Reductions through node shared memory (spmdlab._shm): results stay the user's.

Sizes here are above SPMDLAB_SHM_MIN_BYTES (64 KiB) so that, with two or more workers on
one node, the shared-memory path runs; at one worker they check the plain path.
"""

import numpy as np
import pytest

from spmdlab import _shm, spmd_cat, spmd_index, spmd_plus, spmd_reduce, spmd_size

from conftest import expected_fold, torch

pytestmark = pytest.mark.mpi

BIG = 50_000  # float32 elements: 200 KB


def tri():
    n = spmd_size()
    return n * (n + 1) // 2


def test_results_kept_alive_are_never_overwritten():
    x = np.ones(BIG, np.float32) * spmd_index()
    kept = [spmd_plus(x * (i + 1)) for i in range(2 * _shm.SLOTS + 1)]
    for i, result in enumerate(kept):
        assert (result == tri() * (i + 1)).all(), i
    del kept[::2]  # free some slots, keep the others
    more = [spmd_plus(x * 100) for _ in range(3)]
    for i, result in zip(range(1, 2 * _shm.SLOTS + 1, 2), kept):
        assert (result == tri() * (i + 1)).all()
    assert all((m == 100 * tri()).all() for m in more)


def test_repeated_reduction_of_the_previous_result():
    g = np.full(BIG, spmd_index(), np.float64)
    expected = float(tri())
    for _ in range(6):
        g = spmd_plus(g)  # the input is the previous result: read where it lies
        assert (g == expected).all()
        expected *= spmd_size()
    g2 = spmd_plus(g[: BIG // 2])  # a slice of a result: not at the slot's start
    assert (g2 == expected).all()


def test_one_worker_with_every_slot_busy():
    x = np.ones(BIG, np.float32)
    hoard = []
    if spmd_index() == 1:  # worker 1 keeps every result; the others do not
        hoard = [spmd_plus(x) for _ in range(_shm.SLOTS)]
    else:
        for _ in range(_shm.SLOTS):
            spmd_plus(x)
    result = spmd_plus(x * 2)
    assert (result == 2 * spmd_size()).all()
    assert all((h == spmd_size()).all() for h in hoard)


def test_mixed_dtypes_and_many_leaves():
    k = spmd_index()
    value = {"a": np.full((100, 300), k, np.float32), "b": np.full(20_000, k, np.float64),
             "c": [np.full((7, 9), k, np.int32) for _ in range(30)],
             "d": np.full(3, k, np.int8)}
    before = {"a": value["a"].copy(), "b": value["b"].copy()}
    result = spmd_plus(value)
    s = tri()
    assert result["a"].dtype == np.float32 and (result["a"] == s).all()
    assert result["b"].dtype == np.float64 and (result["b"] == s).all()
    assert all(c.dtype == np.int32 and c.shape == (7, 9) and (c == s).all()
               for c in result["c"])
    wrapped = np.array(s).astype(np.int64).astype(np.int8)  # 16 workers overflow int8
    assert result["d"].dtype == np.int8 and (result["d"] == wrapped).all()
    assert (value["a"] == before["a"]).all() and (value["b"] == before["b"]).all()


def test_non_contiguous_input():
    x = np.arange(400 * 300, dtype=np.float32).reshape(400, 300) * spmd_index()
    result = spmd_plus(x.T)
    assert result.shape == (300, 400)
    np.testing.assert_array_equal(result, (np.arange(400 * 300, dtype=np.float32)
                                           .reshape(400, 300) * tri()).T)


def test_editing_a_result_changes_nobody_else():
    x = np.ones(BIG, np.float32)
    first = spmd_plus(x)
    first[:] = -spmd_index()  # the user owns the result
    second = spmd_plus(x)
    assert (second == spmd_size()).all()
    assert (first == -spmd_index()).all()


def test_bit_identical_on_every_worker_and_worker_order():
    rng = np.random.default_rng(spmd_index())
    x = rng.standard_normal(BIG).astype(np.float32)
    result = spmd_plus(x)
    everyone = spmd_cat(result[None, :])
    assert all(np.array_equal(row.view(np.uint32), result.view(np.uint32))
               for row in everyone)
    # the fold is in worker order, x1 + x2 + ... + xN left to right in float32 (among
    # more than SPMDLAB_TREE_ABOVE workers, the tree's bracketing: conftest.expected_fold)
    inputs = [np.random.default_rng(k).standard_normal(BIG).astype(np.float32)
              for k in range(1, spmd_size() + 1)]
    assert np.array_equal(result, expected_fold(inputs, np.add))


def test_maximum_and_logical_operations():
    x = np.full(BIG, spmd_index(), np.int64)
    assert (spmd_reduce(np.maximum, x) == spmd_size()).all()
    flags = np.ones(BIG, bool)
    flags[0] = spmd_index() != 1
    both = spmd_reduce(np.logical_and, flags)
    assert both.dtype == bool and not both[0] and both[1:].all()


@pytest.mark.skipif(torch is None, reason="torch not installed")
def test_torch_tensors():
    t = torch.full((250, 200), float(spmd_index()))
    result = spmd_plus({"w": t, "b": torch.ones(BIG, dtype=torch.float64)})
    assert result["w"].dtype == torch.float32 and (result["w"] == tri()).all()
    assert result["b"].dtype == torch.float64 and (result["b"] == spmd_size()).all()


def test_shared_memory_turned_off(monkeypatch):
    monkeypatch.setattr(_shm, "MIN_BYTES", 1 << 40)  # on every worker, as the env var would
    x = np.ones(BIG, np.float32)
    assert (spmd_plus(x) == spmd_size()).all()


def test_without_reliable_reference_counts_nothing_is_recycled(monkeypatch):
    """Where sys.getrefcount cannot tell a live view (checked at import), every result
    gets memory of its own: the pools fail safe."""
    from spmdlab import _pack

    monkeypatch.setattr(_pack, "RECYCLE", False)  # on every worker
    monkeypatch.setattr(_shm, "RECYCLE", False)
    x = np.ones(BIG, np.float32) * spmd_index()
    kept = [spmd_plus(x * (i + 1)) for i in range(2 * _shm.SLOTS + 1)]
    for i, result in enumerate(kept):
        assert (result == tri() * (i + 1)).all(), i
    assert len({r.__array_interface__["data"][0] for r in kept}) == len(kept)
