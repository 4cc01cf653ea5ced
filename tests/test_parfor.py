"""parfor: independent tasks over the workers."""

import pytest

from spmdlab import SpmdError, SpmdTypeError, parfor, spmd_index, spmd_size

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

    with pytest.raises(SpmdError, match=r"parfor \(worker \d+ of \d+\): test_a_failing_item_"
                                         r"raises_on_every_worker.<locals>.fn\(items\[3\]\)"
                                         r" on worker \d raised ValueError"):
        parfor(fn, range(5))


def test_a_failing_item_raises_on_every_worker_with_a_destination():
    # the results go to one worker, the error to all: a worker that returned None while
    # the destination raised would go on as if every item had run
    def fn(x):
        if x in (2, 3):
            raise ValueError("bad setting")
        return x

    for destination in sorted({1, spmd_size()}):
        with pytest.raises(SpmdError, match=r"parfor \(worker \d+ of \d+\): test_a_failing_"
                                             r"item_raises_on_every_worker_with_a_destination"
                                             r".<locals>.fn\(items\[2\]\) on worker \d "
                                             r"raised ValueError \(2 items failed\)"):
            parfor(fn, range(5), destination=destination)
    assert parfor(abs, [-1, -2], destination=spmd_size()) == (
        [1, 2] if spmd_index() == spmd_size() else None)


def test_every_worker_must_give_as_many_items():
    # a different count on one worker would lose items or run some twice: refused
    # before any item runs, on every worker
    ran = []
    with pytest.raises(SpmdError, match=r"parfor .*does not match.*item count"
                       if spmd_size() > 1 else r"never"):
        parfor(ran.append, range(5 + (spmd_index() == spmd_size()) * (spmd_size() > 1)))
        if spmd_size() == 1:
            raise SpmdError("never")
    assert ran == [] or spmd_size() == 1


def test_a_function_or_items_of_the_wrong_type_are_a_type_error_on_every_worker():
    # as spmd_reduce's 'fcn' and after_each's listener: a TypeError, naming the value
    who = rf"parfor \(worker {spmd_index()} of {spmd_size()}\)"
    with pytest.raises(SpmdTypeError, match=rf"{who}: 'fn' must be callable \(got 3 that "
                       rf"is a int\)"):
        parfor(3, range(3))
    with pytest.raises(SpmdTypeError, match=rf"{who}: 'items' must be a sequence"):
        parfor(abs, 5)
    assert parfor(abs, [-1]) == [1]


def test_every_worker_must_give_the_same_function():
    if spmd_size() == 1:
        pytest.skip("needs two workers")
    fns = [abs, str]
    with pytest.raises(SpmdError, match=r"parfor .*does not match.*function"):
        parfor(fns[spmd_index() % 2], range(3))


def test_a_collective_inside_an_item_fails_that_item_on_every_worker():
    from spmdlab import spmd_plus, spmd_receive

    def uses_a_collective(x):
        return spmd_plus(x)

    with pytest.raises(SpmdError, match=r"(?s)parfor \(worker \d+ of \d+\): .*"
                                         r"uses_a_collective\(items\[0\]\).*spmd_plus.*called inside parfor "
                                         r"item"):
        parfor(uses_a_collective, range(4))
    with pytest.raises(SpmdError, match=r"(?s)spmd_receive .*called inside parfor item"):
        parfor(lambda x: spmd_receive(), range(4))
    # the workers stay in step: the next collective pairs with the same call everywhere
    assert spmd_plus(1) == spmd_size()
    assert spmd_plus(spmd_index()) == spmd_size() * (spmd_size() + 1) // 2


def test_an_unsendable_result_names_parfor_and_the_item():
    import threading

    with pytest.raises(SpmdError, match=r"(?s)parfor \(worker \d+ of \d+\): .*<lambda> at .*"
                                         r"\(items\[2\]\) on worker \d raised "
                                         r"SpmdTypeError.*its result, a lock, cannot be "
                                         r"sent"):
        parfor(lambda x: threading.Lock() if x == 2 else x, range(4))
