"""Composite: one value per worker, read and set collectively by worker number.

Runs at any worker count (``mpiexec -n N python -m pytest --with-mpi``); every worker
asserts on its own result.
"""

import numpy as np
import pytest

import spmdlab.matlab as matlab
from spmdlab import (Composite, SpmdMismatchError, SpmdTypeError, SpmdValueError, spmd,
                     spmd_barrier, spmd_index, spmd_size)

from conftest import torch

pytestmark = pytest.mark.mpi


def test_read_every_worker_value_everywhere():
    n, k = spmd_size(), spmd_index()
    c = Composite(k ** 2)
    assert len(c) == n
    assert c.mine == k ** 2
    for j in range(1, n + 1):
        assert c[j] == j ** 2
    assert c[np.int64(n)] == n ** 2
    assert c[np.array(n)] == n ** 2  # a 0-d array is one number ([n ** 2] before)
    assert matlab.Composite(k)[np.array(float(n))] == n
    assert c.exist(np.array(1)) is True
    assert list(c) == [j ** 2 for j in range(1, n + 1)]
    assert c[:] == [j ** 2 for j in range(1, n + 1)]
    assert c[[n, 1]] == [n ** 2, 1]
    assert c[range(1, n + 1, 2)] == [j ** 2 for j in range(1, n + 1, 2)]


def test_arrays_keep_family_and_come_back_as_copies():
    n, k = spmd_size(), spmd_index()
    mine = np.full((2, 3), k, dtype=np.float32)
    c = Composite(mine)
    last = c[n]
    assert isinstance(last, np.ndarray) and last.dtype == np.float32
    assert (last == n).all()
    last += 100  # a copy, never this worker's element
    assert (c.mine == k).all() and (c[n] == n).all()
    if torch is not None:
        t = Composite(torch.full((3,), float(k), dtype=torch.float64))
        first = t[1]
        assert isinstance(first, torch.Tensor) and first.dtype == torch.float64
        assert first.tolist() == [1.0, 1.0, 1.0]


def test_assignment_sets_worker_k_to_the_clients_value():
    n, k = spmd_size(), spmd_index()
    c = Composite(k)
    # MATLAB's client assigns X{n} = v: here the client is worker 1, so its v counts
    c[n] = {"from": "client"} if k == 1 else {"from": f"worker {k}"}
    expected = {"from": "client"} if k == n else k
    assert c.mine == expected
    assert c[n] == {"from": "client"}
    assert c[:] == [j for j in range(1, n)] + [{"from": "client"}]


def test_empty_composite_and_exist():
    n, k = spmd_size(), spmd_index()
    c = Composite()
    assert c.exist() == [False] * n
    with pytest.raises(SpmdValueError, match="this worker holds no value"):
        c.mine
    c[1] = "a"
    assert c.exist(1) is True
    assert c.exist() == [True] + [False] * (n - 1)
    if n > 1:
        assert c.exist(n) is False
    c.mine = k  # this worker's own element: no communication
    assert c.exist() == [True] * n and c[:] == list(range(1, n + 1))


def test_exist_of_several_workers_as_matlabs_exist_of_an_array():
    # MATLAB's exist(c, [1 3]) gives one logical per worker number; a list, range or
    # array was "'k' must be a worker number (got [1] that is a list)"
    n, k = spmd_size(), spmd_index()
    c = Composite(k) if k == n else Composite()
    assert c.exist([n, 1]) == [True, n == 1]
    assert c.exist(range(1, n + 1)) == [False] * (n - 1) + [True]
    assert c.exist(np.array([n])) == [True]
    m = matlab.Composite(k) if k == 1 else matlab.Composite()
    assert m.exist(np.array([1.0, float(n)])) == [True, n == 1]
    assert m.exist([]) == []
    with pytest.raises(SpmdValueError, match=rf"Composite.exist\(\[1, {n + 1}\]\) "
                       rf"\(worker {k} of {n}\): 'k' must be a worker number from 1 to {n}"):
        c.exist([1, n + 1])


def test_missing_value_fails_on_every_worker():
    n, k = spmd_size(), spmd_index()
    c = Composite(k if k != n else None)
    c2 = Composite() if k == n else Composite(k)
    assert c[n] is None  # None is a value
    with pytest.raises(SpmdValueError, match=rf"Composite\[{n}\] \(worker {k} of {n}\): "
                                             rf"worker {n} holds no value"):
        c2[n]
    with pytest.raises(SpmdValueError, match=f"worker {n} holds no value"):
        list(c2)


@pytest.mark.parametrize("bad, error, text", [
    (0, SpmdValueError, "'k' must be a worker number from 1 to"),
    (99, SpmdValueError, r"got 99\); worker numbers are 1-based"),
    ("1", SpmdTypeError, "got '1' that is a str"),
    (2.0, SpmdTypeError, "got 2.0 that is a float"),
])
def test_bad_index_fails_on_every_worker(bad, error, text):
    c = Composite(spmd_index())
    with pytest.raises(error, match=text):
        c[bad]
    with pytest.raises(error, match=text):
        c[bad] = 1
    with pytest.raises(error, match=text):
        c[[1, bad]]
    assert c[1] == 1  # the Composite and the workers are still in step


def test_index_bad_on_one_worker_or_differing_fails_everywhere():
    n, k = spmd_size(), spmd_index()
    c = Composite(k)
    with pytest.raises(SpmdValueError):
        c[0 if k == n else 1]  # bad on the last worker only: all raise, none waits
    if n > 1:
        with pytest.raises(SpmdMismatchError, match="Composite"):
            c[1 if k == 1 else 2]
        with pytest.raises(SpmdMismatchError):
            c[1 if k == 1 else 2] = 5
    assert c[:] == list(range(1, n + 1))


def test_partial_slices_are_refused_with_the_way_to_pick_workers():
    c = Composite(spmd_index())
    with pytest.raises(SpmdTypeError, match=r"only c\[:\] slices a Composite.*range"):
        c[1:]


def test_repr_is_local():
    k = spmd_index()
    c = Composite(np.zeros(3))
    if k == 1:  # a collective here would leave worker 1 waiting for the others
        assert "holds ndarray" in repr(c)
    assert "holds no value" in repr(Composite())
    spmd_barrier()


def test_region_composites_belong_to_their_region():
    n, k = spmd_size(), spmd_index()
    world = Composite(k)
    for _ in spmd(1):
        inner = Composite("only")
        assert len(inner) == 1 and inner[1] == "only"
        if n > 1:  # spmd(n) on all n workers is the world itself
            with pytest.raises(SpmdValueError, match=r"Composite\[1\] \(worker 1 of 1\): "
                               r"this Composite was made outside this spmd block, with "
                               rf"{n} workers; inside the block set this worker's element "
                               r"with c.mine = value"):
                world[1]
            with pytest.raises(SpmdValueError, match="made outside this spmd block"):
                world.exist()
    assert world[n] == n


def test_made_inside_a_block_read_after_it_shows_the_spelling():
    n, k = spmd_size(), spmd_index()
    inner = None
    for _ in spmd(1):
        inner = Composite("only")
    if n > 1 and k == 1:  # only worker 1 has it: the others never ran the line
        with pytest.raises(SpmdValueError, match=(
                r"Composite\[1\] \(worker 1 of \d\): this Composite was made inside an "
                r"spmd block of 1 workers, which has ended.*S = Composite\(\) before the "
                r"block, S.mine = value inside it, S\[k\] after it \(MATLAB's spmd\(1\), "
                r"S = value; end, S\{k\}\)")):
            inner[1]
    for _ in spmd(1):  # the next block of the same workers reads it
        assert inner[1] == "only"
    spmd_barrier()


@pytest.mark.parametrize("m", [1, 2, 3])
def test_matlab_composite_of_a_block_of_fewer_workers(m):
    # MATLAB: spmd(m), S = spmdIndex * 10; end; S{1}, exist(S, k)
    n, k = spmd_size(), spmd_index()
    m = min(m, n)
    S = Composite()
    for _ in spmd(m):
        S.mine = spmd_index() * 10
    assert S.exist() == [w <= m for w in range(1, n + 1)]
    assert [S.exist(w) for w in range(1, n + 1)] == [w <= m for w in range(1, n + 1)]
    assert S[1] == 10 and S[range(1, m + 1)] == [10 * w for w in range(1, m + 1)]
    assert len(S) == n
    if m < n:
        with pytest.raises(SpmdValueError, match=rf"worker {m + 1} holds no value"):
            S[m + 1]
    S2 = matlab.Composite()
    for _ in matlab.spmd(float(m)):
        S2.mine = matlab.spmdIndex()
    assert S2[float(m)] == m and S2.exist(float(n)) is (m == n)


def test_matlab_composite_takes_matlab_worker_numbers():
    n, k = spmd_size(), spmd_index()
    x = matlab.Composite(float(k))
    assert x[float(n)] == float(n)
    assert x[np.array([1.0, n])] == [1.0, float(n)]
    assert x[[]] == []
    x[1.0] = "set"
    assert x[1] == "set"
    assert x.exist(1.0) is True
    assert isinstance(x, Composite)
