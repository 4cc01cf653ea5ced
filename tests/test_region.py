"""spmd(n), spmd(m, n): a block on the first workers, left together as at MATLAB's end."""

import math
import time

import numpy as np
import pytest

import spmdlab.matlab as matlab
from spmdlab import spmd, spmd_barrier, spmd_cat, spmd_index, spmd_plus, spmd_size
from spmdlab import SpmdMismatchError, SpmdTypeError, SpmdValueError

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
    # a keyword argument named fn goes to the function (it clashed with run's own)
    assert spmd().run(lambda fn, n: fn(n), fn=spmd_plus, n=1) == world
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
    with pytest.raises(SpmdValueError, match=r"'n' must be from 0 to .* spmd\(1, "):
        for _ in spmd(spmd_size() + 1):
            pass
    assert spmd_plus(1) == spmd_size()


def test_a_region_used_as_a_context_manager_says_how_to_write_it():
    # `with spmd(1):` was Python's bare TypeError (and could not have skipped its body
    # on the workers outside the region)
    ran = []
    with pytest.raises(SpmdTypeError, match=rf"spmd \(worker {spmd_index()} of "
                                            rf"{spmd_size()}\): a region is a loop, not a "
                                            rf"context manager: write 'for _ in spmd"):
        with spmd(1):
            ran.append(1)
    assert ran == [] and spmd_plus(1) == spmd_size()


@pytest.mark.parametrize("m, n", [(1, 1), (1, 2), (2, 3), (0, 4), (1, math.inf),
                                  (0, 0), (3, 8)])
def test_at_least_m_at_most_n_workers(m, n):
    world, me = spmd_size(), spmd_index()
    if m > world:
        with pytest.raises(SpmdValueError, match=rf"spmd\({m}, {n}\) \(worker {me} of "
                           rf"{world}\): needs at least {m} workers, and there are {world}"):
            spmd(m, n)
        return
    expected = max(1, min(n, world))  # MATLAB: as many as the pool has, up to n
    ran = [spmd_size() for _ in spmd(m, n)]
    assert ran == ([expected] if me <= expected else [])
    assert matlab.spmd(float(m), float(n)).run(matlab.spmdSize) == \
        (expected if me <= expected else None)


def test_spmd_zero_is_the_client():
    # MATLAB's spmd(0) runs the body on the client; in a script the client is worker 1
    ran = [(spmd_index(), spmd_size()) for _ in spmd(0)]
    assert ran == ([(1, 1)] if spmd_index() == 1 else [])


@pytest.mark.parametrize("args, kind, match", [
    ((1, 2, 3), SpmdTypeError, r"spmd\(1, 2, 3\) \(worker \d+ of \d+\): MATLAB's forms "
                               r"are spmd\(\), spmd\(n\) and spmd\(m, n\) \(got 3"),
    ((2, 1), SpmdValueError, r"spmd\(2, 1\) .*: the least number of workers, m = 2, is "
                             r"more than the most, n = 1"),
    ((1.5,), SpmdTypeError, r"spmd\(1.5\) .*'n' must be a number of workers, an int "
                            r"from 0 \(got 1.5 that is a float\)"),
    ((1, "all"), SpmdTypeError, r"'n' must be .* or math.inf \(got 'all' that is a str"),
    ((-1,), SpmdValueError, r"spmd\(-1\) .*'n' must be a number of workers, 0 or more"),
    ((True,), SpmdTypeError, r"'n' must be a number of workers"),
])
def test_forms_matlab_does_not_have_fail_everywhere(args, kind, match):
    with pytest.raises(kind, match=match):
        spmd(*args)
    with pytest.raises(SpmdTypeError, match=r"spmd\(m=1\) .*worker counts are positional"):
        spmd(m=1)
    assert spmd(n=1).run(spmd_size) == (1 if spmd_index() == 1 else None)  # the old keyword
    assert spmd_plus(1) == spmd_size()  # nobody was left waiting


def test_matlab_spmd_takes_matlab_numbers():
    world = spmd_size()
    assert matlab.spmd(np.float64(world)).run(matlab.spmdSize) == world
    assert matlab.spmd().run(matlab.spmdIndex) == spmd_index()
    with pytest.raises(SpmdTypeError, match=r"spmd\(1.5\)"):
        matlab.spmd(1.5)
    with pytest.raises(SpmdTypeError, match=r"spmd\(1, 2, 3\).*MATLAB's forms"):
        matlab.spmd(1, 2, 3)


@pytest.mark.parametrize("n", [None, 2])
def test_the_block_ends_on_every_worker_together(n):
    # MATLAB: the client goes on after `end` only once every worker has finished the
    # block. Workers 2.. sleep at the block's end; worker 1 must not leave before them.
    world = spmd_size()
    k = world if n is None else min(n, world)
    finished = left = 0.0
    for _ in spmd(k):
        if spmd_index() > 1:
            time.sleep(0.3)
        finished = time.monotonic()
    left = time.monotonic()
    times = spmd_cat(np.array([[finished, left]]), axis=0)
    if spmd_index() == 1:
        assert times[0, 1] >= times[:k, 0].max()


def test_run_ends_together_too():
    world = spmd_size()
    started = time.monotonic()
    spmd().run(lambda: time.sleep(0.3) if spmd_index() == world else None)
    assert time.monotonic() - started >= (0.3 if world > 1 else 0.0)


def test_a_collective_one_worker_skips_is_named_at_the_end():
    if spmd_size() < 2:
        pytest.skip("needs 2 workers")
    raised = None
    try:
        for _ in spmd(2):
            if spmd_index() == 2:
                spmd_barrier()
    except SpmdMismatchError as exc:
        raised = str(exc)
    if spmd_index() <= 2:
        assert "the end of an spmd block at" in raised and "spmd_barrier() at" in raised
    else:
        assert raised is None
    spmd_barrier()


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
        with pytest.raises(SpmdValueError, match=r"S = Composite\(\) before the block, "
                                                 r"S.mine = value inside it, S\[k\] after"):
            T[1]
