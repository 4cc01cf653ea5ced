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


def test_at_least_m_at_most_n_workers():
    # MATLAB's spmd(m, n): every worker up to n, and at least m of them
    size = spmd_size()
    for _ in spmd(1, 2):
        assert spmd_size() == min(2, size)
    ran = spmd(1, 100).run(spmd_size)
    assert ran == size
    with pytest.raises(SpmdValueError, match=rf"spmd\({size + 1}, {size + 2}\) \(worker "
                                             rf"\d of \d\): needs at least {size + 1} "
                                             rf"workers, and there are {size}"):
        for _ in spmd(size + 1, size + 2):
            pass
    with pytest.raises(SpmdValueError, match=r"needs 1 <= m <= n \(got m=3, n=2\)"):
        spmd(3, 2)
    from spmdlab import SpmdTypeError
    with pytest.raises(SpmdTypeError, match=r"takes spmd\(\), spmd\(n\) or spmd\(m, n\), "
                                            r"as MATLAB does \(got 3 arguments\)"):
        spmd(1, 2, 3)
    with pytest.raises(SpmdTypeError, match=r"'n' must be an int"):
        spmd(1, "2")
    assert spmd_plus(1) == size  # still in step


def test_a_composite_filled_in_a_region_is_read_after_it():
    # MATLAB: spmd(2) S = spmdIndex * 10; end; S{1}, exist(S, 3): the script's spelling
    from spmdlab import Composite

    S = Composite()
    for _ in spmd(min(2, spmd_size())):
        S.mine = spmd_index() * 10
    n = min(2, spmd_size())
    assert S[1] == 10
    assert S.exist() == [k <= n for k in range(1, spmd_size() + 1)]
    # made inside a region of fewer workers instead: indexing it after says how to
    # write it (a region of every worker is the world itself)
    if spmd_size() == 1:
        return
    for _ in spmd(1):
        T = Composite(spmd_index())
    if spmd_index() == 1:
        with pytest.raises(SpmdValueError, match=r"`S = Composite\(\)` before the region, "
                                                 r"`S.mine = ...` inside it, `S\[i\]` after"):
            T[1]
