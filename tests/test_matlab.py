"""MATLAB names and argument conventions (spmdlab.matlab)."""

import operator

import numpy as np
import pytest

from spmdlab.matlab import (gcat, gop, gplus, labBarrier, labBroadcast, labindex,
                            labProbe, labReceive, labSend, labSendReceive, numlabs,
                            spmdBarrier, spmdBroadcast, spmdCat, spmdIndex, spmdPlus,
                            spmdProbe, spmdReceive, spmdReduce, spmdSend, spmdSendReceive,
                            spmdSize)
from spmdlab import SpmdValueError

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
    spmdBarrier()
    labBarrier()
