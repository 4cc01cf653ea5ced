"""parfor: independent tasks over the workers."""

import pytest

from spmdlab import SpmdError, parfor, spmd_index, spmd_size

pytestmark = pytest.mark.mpi


def test_results_in_item_order_and_spread_over_workers():
    results = parfor(lambda x: (x * x, spmd_index()), range(10))
    assert [r[0] for r in results] == [x * x for x in range(10)]
    assert [r[1] for r in results] == [i % spmd_size() + 1 for i in range(10)]
    assert parfor(str, []) == []


def test_destination():
    out = parfor(lambda x: x + 1, [1, 2, 3], destination=1)
    assert out == ([2, 3, 4] if spmd_index() == 1 else None)


def test_a_failing_item_raises_on_every_worker():
    def fn(x):
        if x == 3:
            raise ValueError("bad setting")
        return x

    with pytest.raises(SpmdError, match=r"parfor \(worker \d of \d\): test_a_failing_item_"
                                         r"raises_on_every_worker.<locals>.fn\(items\[3\]\)"
                                         r" on worker \d raised ValueError"):
        parfor(fn, range(5))
