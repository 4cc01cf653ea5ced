"""Bad input to public functions (found by tester Z, fuzzing every argument): an spmdlab
error naming the call and the worker, raised on every worker, the workers still in step
afterwards; and the results that numpy gives where the input is odd but valid.
"""

import operator
import sys
import threading
import time

import numpy as np
import pytest

import spmdlab.darray as da
from spmdlab import (SpmdError, SpmdTypeError, SpmdValueError, drange, parfor, spmd,
                     spmd_cat, spmd_index, spmd_plus, spmd_reduce, spmd_size)
from spmdlab.testing import inject_fault

from conftest import torch

pytestmark = pytest.mark.mpi


def in_step():
    """Every worker got here: the next collective matches."""
    assert spmd_plus(1) == spmd_size()


def raises_here(kind, call, fn):
    """``fn()`` raises ``kind`` naming ``call`` and this worker; then the workers agree."""
    with pytest.raises(kind) as info:
        fn()
    assert f"{call} (worker {spmd_index()} of {spmd_size()})" in str(info.value), info.value
    in_step()
    return str(info.value)


def test_max_and_min_of_a_dict_of_python_ints():
    # was OverflowError from deep inside on every worker (numpy's int64 in Python's wrap)
    k, n = spmd_index(), spmd_size()
    for fcn, pick in ((max, max), (min, min), (np.maximum, max), (np.fmin, min)):
        got = spmd_reduce(fcn, {"a": k, "b": -k, "c": {"d": 3 * k % 5, "e": float(k)}})
        every = range(1, n + 1)
        assert got == {"a": pick(every), "b": pick(-j for j in every),
                       "c": {"d": pick(3 * j % 5 for j in every),
                             "e": float(pick(every))}}
        assert type(got["a"]) is int and type(got["c"]["e"]) is float
    in_step()


def test_arange_has_numpys_dtype_and_refuses_what_it_cannot_count():
    # arange(2.5) was int64 [0, 1, 2] (numpy: float64): stop's type was left out
    for args in ((2.5,), (0, 2.5), (0, 2.5, 1), (np.float32(2.5),), (3.0,), (0, 5, 2),
                 (5, 0, -2), (0.5, 3), (spmd_size() + 1,)):
        got, expected = np.asarray(da.arange(*args).gather()), np.arange(*args)
        assert got.dtype == expected.dtype and np.array_equal(got, expected), args
    raises_here(SpmdValueError, "arange", lambda: da.arange(float("nan")))
    raises_here(SpmdValueError, "arange", lambda: da.arange(0, float("inf")))
    raises_here(SpmdTypeError, "arange", lambda: da.arange("abc"))
    raises_here(SpmdTypeError, "arange", lambda: da.arange(None))


def test_full_broadcasts_an_array_fill_value_to_the_global_shape():
    # the fill was broadcast to each local part: a wrong array at some layouts, an error
    # on some workers only (the others hung in the next collective) at others
    n = spmd_size()
    shape = (n + 1, 3)
    for fill in (np.arange(3.0), np.arange(n + 1).reshape(n + 1, 1), [[7, 8, 9]]):
        for axis in (0, 1):
            got = np.asarray(da.full(shape, fill, axis=axis).gather())
            expected = np.full(shape, fill)
            assert got.dtype == expected.dtype and np.array_equal(got, expected)
    if torch is not None:
        got = da.full(shape, np.arange(3.0), like=torch.zeros(1)).gather()
        assert np.array_equal(got.numpy(), np.full(shape, np.arange(3.0)))
    raises_here(SpmdValueError, "full", lambda: da.full((2 * n + 2,), [1, 2]))


def test_shapes_beyond_numpys_and_odd_shape_values():
    raises_here(SpmdValueError, "zeros", lambda: da.zeros(2 ** 63))
    raises_here(SpmdValueError, "rand", lambda: da.rand((3, 10 ** 30)))
    raises_here(SpmdValueError, "eye", lambda: da.eye(2 ** 64))
    if torch is not None:  # np.asarray of a tensor that requires grad raised RuntimeError
        raises_here(SpmdTypeError, "zeros", lambda: da.zeros(torch.ones(2, requires_grad=True)))
    # eye(2.0) raised a bare TypeError where zeros(2.0) is taken
    assert np.array_equal(np.asarray(da.eye(2.0).gather()), np.eye(2))
    assert np.array_equal(np.asarray(da.eye(3, 2.0, 1).gather()), np.eye(3, 2, 1))
    raises_here(SpmdTypeError, "eye", lambda: da.eye(3, k=1.5))


def test_drange_refuses_what_range_refuses_and_splits_huge_ranges():
    raises_here(SpmdTypeError, "drange", lambda: drange("a"))
    raises_here(SpmdTypeError, "drange", lambda: drange(1.5))
    raises_here(SpmdValueError, "drange", lambda: drange(1, 5, 0))
    n = 10 ** 30  # len(range(n)) raises OverflowError
    for whole in (range(n), range(n, 0, -3)):
        mine = drange(whole.start, whole.stop, whole.step)
        pieces = spmd_cat([(mine[0], mine[-1])])  # (each share is huge at any count)
        assert pieces[0][0] == whole[0] and pieces[-1][1] == whole[-1]
        assert all(a[1] + whole.step == b[0] for a, b in zip(pieces, pieces[1:]))
    in_step()


def test_parfor_bad_destination_and_items_that_raise_on_one_worker():
    # an unhashable destination raised a bare TypeError (hashing it for the agreement)
    raises_here(SpmdTypeError, "parfor", lambda: parfor(abs, [1, 2], destination=[1]))
    raises_here(SpmdTypeError, "parfor",
                lambda: parfor(abs, [1, 2], destination=np.array([1])))

    def items():  # raised on the last worker only, the others hung in parfor
        yield 1
        if spmd_index() == spmd_size():
            raise RuntimeError("no more items")
        yield 2

    text = raises_here(SpmdError, "parfor", lambda: parfor(abs, items()))
    assert "RuntimeError: no more items" in text


def test_inject_fault_refuses_an_array_action():
    # a bare "truth value of an array is ambiguous" ValueError
    def enter():
        with inject_fault(1, action=np.array(["raise", "exit"])):
            pass
    raises_here(SpmdValueError, "inject_fault", enter)


def test_region_run_refuses_a_non_callable_on_every_worker():
    # the region's workers raised a bare TypeError and the others went on
    raises_here(SpmdTypeError, "spmd(...).run", lambda: spmd(1).run("not a function"))
    raises_here(SpmdTypeError, "spmd(...).run", lambda: spmd().run(None))


def test_transpose_axes_are_ints_and_reshape_shape_a_sequence():
    n = spmd_size()
    a = np.arange(3.0 * (n + 1)).reshape(n + 1, 3)
    D = da.distribute(a)
    # transpose((1.5, 0)) was taken as (1, 0); "ab" or None raised ValueError or TypeError
    raises_here(SpmdTypeError, "transpose", lambda: D.transpose((1.5, 0)))
    raises_here(SpmdTypeError, "transpose", lambda: np.transpose(D, (1.0, 0)))
    raises_here(SpmdTypeError, "transpose", lambda: D.transpose("ab"))
    raises_here(SpmdTypeError, "transpose", lambda: D.transpose(True, False))
    assert np.array_equal(np.asarray(D.transpose(None).gather()), a.transpose(None))
    assert np.array_equal(np.asarray(D.transpose(np.array([1, 0])).gather()), a.T)
    for bad in (None, 1.5, operator.add):
        raises_here(SpmdTypeError, "CodistributedArray.reshape", lambda: D.reshape(bad))


def test_matlab_dimensions_and_ranges_beyond_numpys():
    import spmdlab.matlab as M

    # each was a bare OverflowError or TypeError from numpy
    raises_here(SpmdValueError, "codistributor1d", lambda: M.codistributor1d(10 ** 30))
    raises_here(SpmdValueError, "gcat", lambda: M.gcat(np.ones((2, 2)), 10 ** 30))
    raises_here(SpmdValueError, "spmdCat", lambda: M.spmdCat(np.ones((2, 2)), 65))
    raises_here(SpmdValueError, "drange", lambda: M.drange(1, 10 ** 30))
    assert M.gcat(np.ones((2, 2)), 3).shape == (2, 2, spmd_size())
    # drange(1, n) made the whole 1:n on every worker (8 GB at n = 1e9), then split it
    mine = M.drange(1, 10 ** 12)
    pieces = spmd_cat([(mine[0], mine[-1])])
    assert pieces[0][0] == 1 and pieces[-1][1] == 10 ** 12
    assert all(p[1] + 1 == q[0] for p, q in zip(pieces, pieces[1:]))
    parts = spmd_cat([list(M.drange(-2 ** 63, -2 ** 63 + 2 * spmd_size()))])
    assert sum(parts, []) == list(range(-2 ** 63, -2 ** 63 + 2 * spmd_size() + 1))


def test_a_wait_in_threading_is_shown_at_the_users_line():
    # a stall report showed a worker in PollableDataQueue.poll "at threading.py:331"
    from spmdlab import _stall

    sites = []

    def spy(frame, event, arg):
        if event == "call" and frame.f_code.co_filename == threading.__file__:
            sites.append(_stall.call_site_of(frame))

    condition = threading.Condition()
    with condition:
        sys.setprofile(spy)
        try:
            line = sys._getframe().f_lineno + 1
            condition.wait(0.001)
        finally:
            sys.setprofile(None)
    assert sites and all(site.endswith(f"test_bad_input.py:{line}") for site in sites), sites


def test_a_worker_waiting_on_a_lock_outside_spmdlab_is_shown_at_its_line():
    # "worker 1 is at .../threading.py:331 in wait(), not in a spmdlab call"
    from spmdlab import _stall

    if threading.get_ident() != _stall.PROGRAM:
        pytest.skip("runs in the thread that imported spmdlab")
    condition = threading.Condition()
    answers = []

    def ask():
        time.sleep(0.2)  # while the program thread waits below
        answers.append(_stall._where())
        with condition:
            condition.notify()

    asker = threading.Thread(target=ask)
    with condition:
        asker.start()
        line = sys._getframe().f_lineno + 1
        condition.wait(10)
    asker.join()
    assert f"test_bad_input.py:{line} in " in answers[0], answers


def test_profile_save_refuses_a_path_that_is_no_path():
    # save(None) wrote "None.json" and "None.png" into the current folder
    from spmdlab import profile

    with profile() as prof:
        spmd_plus(1)
    for bad in (None, 3, ["a"]):
        raises_here(SpmdTypeError, "Profile.save", lambda: prof.save(bad))


def test_send_to_a_2d_array_of_workers_names_the_array():
    # named one of its rows ("got array([1]) that is a ndarray"), not what was passed
    from spmdlab import spmd_send

    text = raises_here(SpmdTypeError, "spmd_send",
                       lambda: spmd_send(1, np.array([[1, spmd_size()]])))
    assert f"2-D array [[1, {spmd_size()}]]" in text, text


def test_build_refuses_an_unknown_option_on_every_worker():
    # (tester H) build(L, codist, "foo") and build(L, codist, 5) were accepted silently
    # as a build with its check; one worker's typo now fails on every worker, together
    from spmdlab.matlab import codistributed, codistributor1d

    n, k = spmd_size(), spmd_index()
    codist = codistributor1d(2, [2] * n, [3, 2 * n])
    L = np.full((3, 2), float(k))
    for flags in (("foo",), (5,), ("noCommunication", "nocomm")):
        text = raises_here(SpmdValueError, "codistributed.build",
                           lambda: codistributed.build(L, codist, *flags))
        assert repr(flags[-1]) in text, text
    if n > 1:  # a typo on worker 2 only: its exchange makes the others raise too
        text = raises_here(SpmdValueError, "codistributed.build",
                           lambda: codistributed.build(L, codist, *(["foo"] if k == 2 else [])))
        assert "worker 2" in text and "'foo'" in text, text
    for flags in ((), ("noCommunication",), ("NOCOMMUNICATION",)):
        D = codistributed.build(L, codist, *flags)
        assert np.array_equal(D.gather(), np.repeat(np.arange(1.0, n + 1), 2)[None].repeat(3, 0))
    in_step()


def test_odd_seeds_nargouts_partitions_and_codistributors_of_the_matlab_layer():
    # (tester H) each was silently accepted or a bare error from numpy: rand(seed="x") a
    # ValueError from int(), seed=1.5 taken as 1, a negative seed numpy's ValueError;
    # globalIndices(..., nargout=3) gave the indices; defaultPartition(10**30) an
    # OverflowError; zeros(3, 3, codist1, codist2) took the second codistributor
    import spmdlab.matlab as M

    raises_here(SpmdTypeError, "rand", lambda: da.rand(4, seed="x"))
    raises_here(SpmdTypeError, "rand", lambda: da.rand(4, seed=1.5))
    raises_here(SpmdTypeError, "randn", lambda: da.randn(4, seed=True))
    raises_here(SpmdValueError, "randn", lambda: da.randn(4, seed=-1))
    raises_here(SpmdTypeError, "randi",
                lambda: da._factories.random_integers(1, 5, 3, seed="x"))
    a, b = da.rand(4, seed=np.int64(3)).gather(), da.rand(4, seed=3).gather()
    assert np.array_equal(a, b)
    D = M.codistributed.zeros(3, 2 * spmd_size())
    for bad in (0, 3, True, "2"):
        raises_here(SpmdValueError, "globalIndices", lambda: M.globalIndices(D, 2, nargout=bad))
        raises_here(SpmdValueError, "globalIndices",
                    lambda: M.globalIndices(M.getCodistributor(D), 2, nargout=bad))
    assert M.globalIndices(D, 2, nargout=2) == (2 * spmd_index() - 1, 2 * spmd_index())
    raises_here(SpmdValueError, "codistributor1d.defaultPartition",
                lambda: M.codistributor1d.defaultPartition(10 ** 30))
    text = raises_here(SpmdTypeError, "zeros", lambda: M.zeros(
        3, 3, M.codistributor1d(1), M.codistributor1d(2)))
    assert "give one codistributor" in text, text
    assert M.zeros(3, 3, M.codistributor1d(1)).shape == (3, 3)
    # sizes each within numpy's limit whose product is not: numpy's bare ValueError
    # ("array is too big") from each worker's block
    for call, make in (("zeros", lambda: da.zeros((2 ** 62, 2 ** 62))),
                       ("ones", lambda: da.ones((0, 2 ** 40, 2 ** 40))),
                       ("zeros", lambda: M.zeros(10 ** 12, 10 ** 12, "codistributed"))):
        text = raises_here(SpmdValueError, call, make)
        assert "beyond numpy's largest array" in text, text
    raises_here(SpmdValueError, "Codistributor",
                lambda: da.Codistributor(0, shape=(2 ** 40, 2 ** 40)))
    assert da.zeros((0, 2 ** 40)).shape == (0, 2 ** 40)


def test_a_colon_range_of_more_elements_than_an_array_holds():
    # (tester H) a tiny step was numpy's bare ValueError ("Maximum allowed dimension
    # exceeded") from deep inside, and a span beyond the largest float an OverflowError
    import spmdlab.matlab as M

    for a, d, b in ((1, 1e-300, 3), (-1e308, 1e-10, 1e308), (0.5, 1e-290, 1.5)):
        text = raises_here(SpmdValueError, "codistributed.colon",
                           lambda: M.codistributed.colon(a, d, b))
        assert "more elements than an array holds" in text, text
        raises_here(SpmdValueError, "drange", lambda: M.drange(a, d, b))
    assert M.gather(M.codistributed.colon(3, -0.5, 1)).tolist() == [3.0, 2.5, 2.0, 1.5, 1.0]


class OnlyOnWorker1:
    """A value that can be made again on worker 1 only (as an instance of a class that
    only worker 1 defined, or whose ``__setstate__`` needs a file only it has)."""

    def __setstate__(self, state):
        if spmd_index() != 1:
            raise ValueError("cannot be made here")
        self.__dict__.update(state)


def test_a_value_that_cannot_be_unpickled_names_the_call_the_worker_and_its_owner():
    # (tester T3) spmd_broadcast, spmd_cat of objects and Composite indexing raised the
    # unpickler's bare ValueError (AttributeError for a class this worker lacks), naming
    # no call and no worker; spmd_reduce with a function of the user's left worker 1
    # waiting in the fold's agreement while the others raised it
    import spmdlab.matlab as M
    from spmdlab import Composite, spmd_broadcast

    k, n = spmd_index(), spmd_size()
    value = OnlyOnWorker1()
    value.data = [1, 2]  # (a state to set: pickle calls no __setstate__ for none)
    cannot = "the value of worker 1 cannot be unpickled here: ValueError: cannot be made here"
    for call, fn in (("spmd_broadcast", lambda: spmd_broadcast(1, value)),
                     ("spmd_cat", lambda: spmd_cat(value)),
                     ("Composite[1]", lambda: Composite(value)[1]),
                     ("spmdBroadcast", lambda: M.spmdBroadcast(1, value))):
        if k == 1:
            got = fn()
            assert type(got) is OnlyOnWorker1 or type(got[0]) is OnlyOnWorker1, got
            in_step()
        else:
            assert cannot in raises_here(SpmdTypeError, call, fn)
    for call, fn in (("spmd_reduce", lambda: spmd_reduce(lambda a, b: a, value)),
                     ("gop", lambda: M.gop(lambda a, b: a, value))):
        if n == 1:
            assert type(fn()) is OnlyOnWorker1
            continue
        text = raises_here(SpmdTypeError, call, fn)  # on every worker
        assert cannot in text, text
