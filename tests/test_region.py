"""spmd(n): a block on the first n workers."""

import pytest

from spmdlab import spmd, spmd_barrier, spmd_cat, spmd_index, spmd_plus, spmd_size
from spmdlab import SpmdValueError

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_region_scopes_index_size_and_collectives(n):
    world = spmd_size()
    if n > world:
        pytest.skip(f"needs {n} workers")
    me = spmd_index()
    ran = []
    for index in spmd(n):
        ran.append(index)
        assert spmd_index() == me and spmd_size() == n
        assert spmd_plus(1) == n
        assert spmd_cat(spmd_index()).tolist() == list(range(1, n + 1))
    assert ran == ([me] if me <= n else [])
    assert spmd_size() == world  # scope restored
    assert spmd_plus(1) == world


def test_region_run_and_nesting():
    world = spmd_size()
    result = spmd(max(1, world - 1)).run(lambda: spmd_plus(10))
    if spmd_index() <= max(1, world - 1):
        assert result == 10 * max(1, world - 1)
    else:
        assert result is None
    for _ in spmd():
        for _ in spmd(1):
            assert spmd_size() == 1 and spmd_plus(5) == 5
        assert spmd_size() == world


def test_region_scope_restored_after_exception():
    world = spmd_size()
    raised = False
    try:
        for _ in spmd(1):
            1 / 0
    except ZeroDivisionError:
        raised = True
    assert raised == (spmd_index() == 1)
    assert spmd_size() == world
    spmd_barrier()
    assert spmd_plus(1) == spmd_size()


def test_region_too_large_fails_everywhere():
    with pytest.raises(SpmdValueError, match="'n' must be from 1 to"):
        for _ in spmd(spmd_size() + 1):
            pass
