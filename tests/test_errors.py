"""Bad input raises a clear error on every worker, and the next call still works.

Each test makes the workers disagree (or one worker pass something invalid) and checks
that every worker raises, naming the call, the workers and the values; then that a
following collective gives the right answer (nothing is left half-matched).
"""

import numpy as np
import pytest
from conftest import line_of

from spmdlab import (SpmdMismatchError, SpmdTypeError, SpmdValueError, spmd_barrier,
                     spmd_broadcast, spmd_cat, spmd_index, spmd_plus, spmd_receive,
                     spmd_reduce, spmd_send, spmd_send_receive, spmd_size, spmd_probe)

pytestmark = pytest.mark.mpi

needs2 = pytest.mark.skipif("spmd_size() < 2", reason="needs two or more workers")


@pytest.fixture(autouse=True)
def still_in_step():
    yield
    assert spmd_plus(1) == spmd_size()  # every worker left the failed call together


@needs2
def test_shapes_differ():
    with pytest.raises(SpmdMismatchError) as info:
        spmd_plus(np.ones(spmd_index(), np.float32))
    msg = str(info.value)
    assert msg.startswith(f"spmd_plus (worker {spmd_index()} of {spmd_size()})")
    assert "worker 1: spmd_plus(float32 (1,) numpy)" in msg
    assert "worker 2: spmd_plus(float32 (2,) numpy)" in msg


@needs2
def test_dtypes_differ():
    dtype = np.float32 if spmd_index() == 1 else np.float64
    with pytest.raises(SpmdMismatchError, match=r"worker 1: .*float32.*; workers? 2.*float64"):
        spmd_plus(np.ones(3, dtype))


@needs2
def test_large_arrays_that_differ_never_reach_mpi():
    n = 100_000 + spmd_index()
    with pytest.raises(SpmdMismatchError, match="cannot be combined"):
        spmd_plus(np.ones(n))


@needs2
def test_structures_differ():
    value = {"a": 1.0} if spmd_index() == 1 else {"a": 1.0, "b": 2.0}
    with pytest.raises(SpmdMismatchError, match=r"differ in: dict keys\).*dict \{a\} of "
                                                r"float64 scalar py-float"):
        spmd_plus(value)
    value = [1.0] if spmd_index() == 1 else [1.0, 2.0]
    with pytest.raises(SpmdMismatchError, match="differ in: structure"):
        spmd_plus(value)
    # a dict on one worker, a list on another: their structures differ (it said "dict keys")
    value = {"a": 1.0} if spmd_index() == 1 else [1.0]
    with pytest.raises(SpmdMismatchError, match=r"differ in: structure\): worker 1: "
                                                r"spmd_plus\(dict \{a\} of"):
        spmd_plus(value)


@needs2
def test_different_calls():
    with pytest.raises(SpmdMismatchError) as info:
        if spmd_index() == 1:
            spmd_plus(1.0)
        else:
            spmd_cat(1.0)
    assert "worker 1: spmd_plus(" in str(info.value)
    assert "spmd_cat(" in str(info.value)


@needs2
def test_cat_sizes_differ_outside_axis():
    with pytest.raises(SpmdMismatchError, match="spmd_cat"):
        spmd_cat(np.ones((2, spmd_index())), axis=0)


def test_destination_out_of_range_everywhere():
    with pytest.raises(SpmdValueError, match=rf"'destination' must be a worker number from 1 "
                                             rf"to {spmd_size()} \(got 0\); worker numbers "
                                             rf"are 1-based"):
        spmd_plus(1.0, destination=0)


@needs2
def test_destination_out_of_range_on_one_worker():
    dest = spmd_size() + 1 if spmd_index() == 2 else 1
    with pytest.raises(SpmdValueError) as info:
        spmd_plus(np.ones(3), destination=dest)
    assert "worker 2" in str(info.value) and f"got {spmd_size() + 1}" in str(info.value)


def test_destination_wrong_type():
    with pytest.raises(SpmdTypeError, match="'destination' must be a worker number.*str"):
        spmd_cat(1, destination="1")


def test_broadcast_source_out_of_range():
    with pytest.raises(SpmdValueError, match="spmd_broadcast.*'source'.*got 0"):
        spmd_broadcast(0, 1)
    with pytest.raises(SpmdTypeError, match="spmd_broadcast.*'source'.*None"):
        spmd_broadcast(None, 1)


@needs2
def test_value_that_cannot_be_summed_on_one_worker():
    value = "abc" if spmd_index() == 2 else 1.0
    with pytest.raises(SpmdTypeError) as info:
        spmd_plus(value)
    assert "cannot sum a value of type str" in str(info.value)
    assert "worker 2" in str(info.value)


def test_value_that_cannot_be_summed_everywhere():
    with pytest.raises(SpmdTypeError, match="spmd_plus.*cannot sum a value of type dict_keys"):
        spmd_plus({"a": {}.keys()})
    with pytest.raises(SpmdTypeError, match="cannot sum bool values.*astype"):
        spmd_plus(np.array([True, False]))
    with pytest.raises(SpmdTypeError, match="spmd_reduce.*'fcn' must be callable"):
        spmd_reduce("plus", 1)


@needs2
def test_unpicklable_object_in_a_collective():
    value = (lambda: 0) if spmd_index() == spmd_size() else 1
    with pytest.raises(SpmdTypeError) as info:
        spmd_cat(value)
    assert f"worker {spmd_size()}" in str(info.value)
    assert "cannot be pickled" in str(info.value)
    with pytest.raises(SpmdTypeError, match="cannot be pickled"):
        spmd_broadcast(spmd_size(), value)


@needs2
def test_broadcast_with_different_sources_fails_on_every_worker():
    # every worker names another source: no value may come back, every worker raises
    with pytest.raises(SpmdMismatchError, match="spmd_broadcast"):
        spmd_broadcast(spmd_index(), np.ones(2) * spmd_index())
    with pytest.raises(SpmdMismatchError):  # a worker in another call altogether
        spmd_broadcast(1, 2.5) if spmd_index() > 1 else spmd_plus(2.5)
    assert spmd_broadcast(spmd_size(), spmd_index()) == spmd_size()  # and it goes on


def test_axis_out_of_range():
    with pytest.raises(SpmdValueError, match="spmd_cat.*axis 2 is out of range"):
        spmd_cat(np.ones((2, 2)), axis=2)


def test_point_to_point_bad_arguments():
    # not collective: only the calling worker raises, and nothing is sent
    with pytest.raises(SpmdValueError, match="spmd_send.*'destination'.*got 0"):
        spmd_send(1, 0)
    with pytest.raises(SpmdValueError, match=r"spmd_send.*'tag' must be from 0.*got -1"):
        spmd_send(1, 1, tag=-1)
    with pytest.raises(SpmdValueError, match="spmd_receive.*'source'.*got 99"):
        spmd_receive(99)
    with pytest.raises(SpmdValueError, match="spmd_receive.*'tag'.*got -5"):
        spmd_receive(1, -5)
    with pytest.raises(SpmdTypeError, match="spmd_probe.*'source'.*str"):
        spmd_probe("any")
    with pytest.raises(SpmdValueError, match="spmd_send_receive.*'destination'"):
        spmd_send_receive(spmd_size() + 1, 1, 0)
    with pytest.raises(SpmdValueError, match="'destination' is an empty list"):
        spmd_send(1, [])
    spmd_barrier()


@needs2
@pytest.mark.parametrize("destination", [None, 1, 2])
def test_reduction_function_failing_on_one_worker_fails_everywhere(destination):
    """A function that raises on worker 2 only: every worker raises, naming worker 2."""
    me = spmd_index()

    def picky(a, b):
        if spmd_index() == 2:  # (not a value read from outside: ``me`` would differ)
            raise ZeroDivisionError("not on this worker")
        return a + b

    if destination is not None and destination != 2:  # only the destination folds
        result = spmd_reduce(picky, [me], destination=destination)
        assert result == (list(range(1, spmd_size() + 1)) if me == destination else None)
        return
    from spmdlab import SpmdError

    with pytest.raises(SpmdError) as info:
        spmd_reduce(picky, [me], destination=destination)
    text = str(info.value)
    assert "picky raised ZeroDivisionError: not on this worker" in text
    assert "worker 2" in text


def test_an_int_beyond_64_bits_is_named_as_such():
    with pytest.raises(SpmdValueError, match=r"the int 1180591620717411303424 does not fit "
                                             r"in 64 bits"):
        spmd_plus(2 ** 70)
    with pytest.raises(SpmdValueError, match="does not fit in 64 bits"):
        spmd_plus({"n": -2 ** 64})


@needs2
def test_mismatch_names_the_dict_keys():
    a = np.ones(3, np.float32)
    value = {"w": a, "b": a} if spmd_index() == 1 else {"w": a, "c": a}
    with pytest.raises(SpmdMismatchError) as info:
        spmd_plus(value)
    text = str(info.value)
    assert "they differ in: dict keys" in text
    assert "dict {b, w}" in text and "dict {c, w}" in text


@needs2
def test_mismatch_names_a_differing_destination_and_axis():
    x = np.ones(300, np.float32)
    with pytest.raises(SpmdMismatchError) as info:
        spmd_plus(x, destination=spmd_index())
    assert "they differ in: destination" in str(info.value)
    assert "destination=1" in str(info.value) and "destination=2" in str(info.value)
    with pytest.raises(SpmdMismatchError) as info:
        spmd_cat(np.ones((2, 2)), axis=spmd_index() % 2)
    assert "they differ in: axis" in str(info.value)
    with pytest.raises(SpmdMismatchError, match="they differ in: type, dtype"):
        spmd_plus(1.0 if spmd_index() == 1 else np.float32(1))


@needs2
def test_lone_python_int_does_not_meet_an_int64_in_a_sum_or_product():
    # a lone Python int is summed exactly, an int64 wraps: mixed, the workers would get
    # different sums past 2**63 (13835058055282163712 here, -4611686018427387904 there)
    import operator
    big = 2 ** 62
    for other in (np.int64(big), np.array(big)):
        x = big if spmd_index() == 1 else other
        for call in (lambda: spmd_plus(x), lambda: spmd_plus(x, destination=2),
                     lambda: spmd_reduce(operator.mul, x)):
            with pytest.raises(SpmdMismatchError, match="they differ in: type") as info:
                call()
            assert "worker 1: spmd_" in str(info.value) and "py-int" in str(info.value)
    assert spmd_plus(big) == spmd_size() * big  # Python ints alone: exact
    assert spmd_plus(np.int64(1)) == spmd_size() and spmd_reduce(max, big) == big


@needs2
def test_mismatch_names_differing_reduction_functions():
    # max on worker 1, min on the others: the message says the functions differ
    fcn = max if spmd_index() == 1 else min
    for value in (spmd_index(), np.ones(3), {"a": np.ones(2), "b": 1.0}):
        with pytest.raises(SpmdMismatchError, match="they differ in: fcn") as info:
            spmd_reduce(fcn, value)
        assert "fcn='max'" in str(info.value) and "fcn='min'" in str(info.value)


@needs2
def test_mismatch_of_one_function_on_values_of_two_classes_names_the_values():
    # operator.add of True (Python's own fold) beside 1 (folded by spmdlab): the same
    # function, so the message names the values' classes, not "different functions"
    import operator
    with pytest.raises(SpmdMismatchError, match=r"values that cannot be combined "
                       r"\(they differ in: type, dtype\)") as info:
        spmd_reduce(operator.add, True if spmd_index() == 1 else 1)
    assert str(info.value).count("fcn='sum'") == 2, str(info.value)


@needs2
def test_mismatch_names_differing_lambdas():
    # two lambdas (both '<lambda>') would each fold with its own: their code tells
    # them apart, and the message says where each is; the same lambda still works
    fcn = (lambda a, b: a + b) if spmd_index() == 1 else (lambda a, b: a * b)
    with pytest.raises(SpmdMismatchError, match="workers passed different functions "
                       r"\(they differ in: fcn\)") as info:
        spmd_reduce(fcn, 2)
    import re
    columns = re.findall(r"<lambda> at test_errors.py:\d+:(\d+)'", str(info.value))
    assert len(set(columns)) == 2, str(info.value)  # where each lambda's body starts
    same = lambda a, b: a if b in {"s", "t"} else a + b  # noqa: E731  (a frozenset const)
    assert spmd_reduce(same, 1) == spmd_size()


@needs2
def test_spmd_reduce_with_a_function_reading_each_workers_own_values_raises():
    # one lambda that reads a value of each worker's own (a closure's, a default's, a
    # module global's) would fold to a different answer on each worker
    w = float(spmd_index())
    with pytest.raises(SpmdMismatchError, match=r"workers passed different functions.*"
                       r"<lambda> at test_errors.py:\d+:\d+ with w=1.0'.*"
                       r"<lambda> at test_errors.py:\d+:\d+ with w=2.0'"):
        spmd_reduce(lambda a, b: a + w * b, np.ones(2))
    with pytest.raises(SpmdMismatchError, match=r"with scale=array of float64 \(3,\)"):
        spmd_reduce(lambda a, b, scale=np.full(3, w): a + scale * b, np.ones(3))
    global _EACH
    _EACH = (spmd_index(), "k")
    with pytest.raises(SpmdMismatchError, match=r"with _EACH=\(1, 'k'\)"):
        spmd_reduce(lambda a, b: a + b * _EACH[0], 1)
    _EACH = (1, "k")  # the same everywhere: folded as usual
    assert spmd_reduce(lambda a, b: a + b * _EACH[0], 1) == spmd_size()
    rank = w - spmd_index()  # 0.0 everywhere
    assert spmd_reduce(lambda a, b: a + b + rank, 2.0) == 2.0 * spmd_size()
    # only the destination folds: its function, whatever the others read
    total = spmd_reduce(lambda a, b: a + w * b, 1.0, destination=2)
    assert total == (1.0 + 2.0 * (spmd_size() - 1) if spmd_index() == 2 else None)


_EACH: tuple = ()


@needs2
def test_spmd_reduce_reads_globals_not_attributes_and_partials_bound_values():
    # ``a.start`` is an attribute, not the module global ``start`` of each worker's own
    global start
    start = 10 * spmd_index()
    merged = spmd_reduce(lambda a, b: range(min(a.start, b.start), max(a.stop, b.stop)),
                         range(start, start + 10))
    assert merged == range(10, 10 * spmd_size() + 10)
    # the values a functools.partial binds are read, as a closure's
    import functools

    def add(a, b, w):
        return a + w * b

    with pytest.raises(SpmdMismatchError, match=r"partial at test_errors.py:\d+ with w=1'"):
        spmd_reduce(functools.partial(add, w=spmd_index()), 1)
    assert spmd_reduce(functools.partial(add, w=2), 1) == 2 * spmd_size() - 1


start = 0


@needs2
def test_spmd_reduce_with_a_function_that_gives_each_worker_its_own_result_raises():
    # a function that calls spmd_index() (or draws random numbers) as it runs folds the
    # same values to a different result on each worker: each kept its own, silently
    n = spmd_size()
    with pytest.raises(SpmdMismatchError, match=rf"the reduction function gave the workers "
                       rf"different results from the same values .*\(they differ in: "
                       rf"result\): worker 1: spmd_reduce\(\S*<lambda>\) gave {n - 1}.0 "
                       rf"at .*; worker 2: spmd_reduce\(\S*<lambda>\) gave {2 * n - 2}.0"):
        spmd_reduce(lambda a, b: a + b + spmd_index(), 0.0)
    with pytest.raises(SpmdMismatchError, match=r"worker 1: spmd_reduce\(\S*<lambda>\) "
                       r"gave <array float64 \(10,\), contents \w+>"):
        spmd_reduce(lambda a, b: a + b * spmd_index(), np.ones(10))
    # the same result everywhere, a result not compared (a dict) and a destination's fold
    assert spmd_reduce(lambda a, b: a + b + spmd_size(), 0.0) == spmd_size() * (
        spmd_size() - 1)
    assert spmd_reduce(lambda a, b: {"n": a["n"] + b["n"]}, {"n": 1}) == {"n": spmd_size()}
    total = spmd_reduce(lambda a, b: a + b + spmd_index(), 0.0, destination=2)
    assert total == (2.0 * (spmd_size() - 1) if spmd_index() == 2 else None)


def test_small_arrays_compared_by_bytes_are_not_kept_by_the_digest_cache():
    # a 64 KiB argument each call (np.dot(D, v), a function reading it) would otherwise
    # keep up to 4096 such copies
    from spmdlab import _pack
    from spmdlab.collectives import _plain_key

    assert _plain_key(np.full(8192, 0.5)) == _plain_key(np.full(8192, 0.5))
    assert _plain_key(np.full(8192, 0.5)) != _plain_key(np.full(8192, 0.25))
    assert np.full(8192, 0.5).tobytes() not in _pack._digests



def test_a_list_that_holds_itself_is_walked_once_per_level():
    # each element of each level would be walked (64 ** 4 of them: 40 s a call)
    from spmdlab.collectives import _plain_key

    walks = []

    class Walked(list):
        def __iter__(self):
            walks.append(1)
            return super().__iter__()

    held = Walked()
    held.extend([held] * 8)
    assert _plain_key(held) is None and len(walks) <= 4


def _line_of(marker):
    return line_of(__file__, marker)


@needs2
def test_a_mismatch_names_each_workers_call_site_and_the_collective_number():
    from spmdlab import _world

    before = _world.current().exchange.calls
    with pytest.raises(SpmdMismatchError) as info:
        if spmd_index() == 1:
            spmd_plus(np.ones(10, np.float32))  # site: plus
        else:
            spmd_cat(np.ones(10, np.float32), axis=0)  # site: cat
    msg = str(info.value)
    here = "tests/test_errors.py"
    assert f"collective #{before + 1} does not match: workers made different calls" in msg
    assert "(they differ in: call)" in msg
    assert f"worker 1: spmd_plus(float32 (10,) numpy) at {here}:{_line_of('# site: plus')}" \
        in msg
    others = "worker 2" if spmd_size() == 2 else f"workers 2-{spmd_size()}"
    assert (f"{others}: spmd_cat(float32 (10,) numpy, axis=0) at "
            f"{here}:{_line_of('# site: cat')}") in msg


@needs2
def test_a_collective_one_worker_added_is_named_with_its_line():
    if spmd_index() == 2:
        with pytest.raises(SpmdMismatchError) as info:
            spmd_barrier()  # site: extra barrier
    else:
        with pytest.raises(SpmdMismatchError) as info:
            spmd_plus(1.0)  # site: lone plus
    msg = str(info.value)
    here = "tests/test_errors.py"
    assert f"worker 2: spmd_barrier() at {here}:{_line_of('# site: extra')}" in msg
    assert f"spmd_plus(float64 scalar py-float) at {here}:{_line_of('# site: lone plus')}" in msg



@needs2
def test_a_worker_number_as_a_numpy_int_keys_the_call_as_the_int_does():
    # the digest cache finds ("spmd_broadcast", np.int64(1)) by ("spmd_broadcast", 1):
    # a worker whose first look-up was the other type used to get another key, so every
    # later broadcast from worker 1 failed as a mismatch of equal calls
    k = spmd_index()
    with pytest.raises(SpmdTypeError, match="'source'.*got nan"):
        spmd_broadcast(float("nan") if k == 1 else 1, k)
    assert spmd_broadcast(np.int64(1), k) == 1
    assert spmd_broadcast(1, k) == 1
    assert spmd_broadcast(np.int64(2), k) == 2
    # and a destination given as a numpy int on one worker, an int on the others
    total = spmd_plus(np.ones(2), destination=np.int64(1) if k == 1 else 1)
    assert total.tolist() == [spmd_size()] * 2 if k == 1 else total is None
    joined = spmd_cat(np.ones(2), destination=np.int64(2) if k == 2 else 2)
    assert joined.shape == (2 * spmd_size(),) if k == 2 else joined is None


@needs2
@pytest.mark.parametrize("destination", [[1], np.array(1), np.array([1])])
def test_an_unhashable_destination_on_one_worker_fails_everywhere(destination):
    # spmd_reduce with a function of the user's gathers the values: its key hashed the
    # destination before the error was agreed on, so worker 1 raised TypeError alone
    mine = destination if spmd_index() == 1 else None
    with pytest.raises(SpmdTypeError, match=r"spmd_reduce .*'destination' must be a "
                                            r"worker number"):
        spmd_reduce(lambda a, b: a + b, np.ones(2), mine)


def test_a_zero_dimensional_array_as_a_destination_is_refused_clearly():
    with pytest.raises(SpmdTypeError, match=r"spmd_send \(worker .*'destination' must be "
                                            r"a worker number .*got array\(1\)"):
        spmd_send(1, np.array(1))
    spmd_send(7, np.array([spmd_index()]))  # a 1-D array is a list of workers
    assert spmd_receive(spmd_index()) == 7


@needs2
def test_an_unknown_matlab_function_name_on_one_worker_fails_everywhere():
    from spmdlab.matlab import gop, spmdReduce
    k = spmd_index()
    with pytest.raises(SpmdValueError, match=r"spmdReduce \(worker 1 of .*unknown MATLAB "
                                             r"function name 'plux'"):
        spmdReduce("plux" if k == 1 else "plus", np.ones(2))
    with pytest.raises(SpmdValueError, match=rf"gop \(worker {k} of .*'frob'"):
        gop("frob", 1.0)


def test_equal_signatures_have_one_digest_whichever_comes_first():
    import collections

    from spmdlab import _pack

    pair = collections.namedtuple("pair", "a b")
    for first, second in [(("c", 1), ("c", np.int64(1))), (("c", 2.0), ("c", 2)),
                          (("c", True), ("c", 1)), (("c", 1 + 0j), ("c", 1)),
                          (("c", np.str_("x")), ("c", "x")), ((pair(1, 2),), ((1, 2),)),
                          (("c", frozenset("ab")), ("c", frozenset("ba")))]:
        _pack._digests.clear()
        one = _pack.digest(first)
        _pack._digests.clear()
        assert _pack.digest(second) == one, (first, second)
        assert _pack.digest(first) == one  # (found by the other in the cache)
    assert _pack.digest(("c", 1)) != _pack.digest(("c", 1.5)) != _pack.digest(("c", "1"))
