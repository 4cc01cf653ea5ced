"""DataQueue and PollableDataQueue at any worker count."""

import re
import time

import numpy as np
import pytest

from spmdlab import (DataQueue, PollableDataQueue, SpmdTypeError, SpmdValueError,
                     spmd_barrier, spmd_cat, spmd_index, spmd_plus, spmd_probe,
                     spmd_receive, spmd_send, spmd_size)


pytestmark = pytest.mark.mpi


def wait_for(condition, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for queue items"
        time.sleep(0.001)


def test_every_item_arrives_in_order_per_sender():
    q = DataQueue()
    got = []
    q.after_each(got.append)
    per_worker = 10_000
    for i in range(per_worker):
        q.send((spmd_index(), i))
    if spmd_index() == 1:
        wait_for(lambda: len(got) == per_worker * spmd_size())
        for k in range(1, spmd_size() + 1):
            assert [i for s, i in got if s == k] == list(range(per_worker))
    else:
        assert got == []  # the listener is inert away from the owner
    spmd_barrier()


def test_items_wait_for_the_first_listener_and_all_listeners_run():
    q = DataQueue(owner=spmd_size())
    q.send(spmd_index())
    spmd_barrier()
    owner = spmd_index() == spmd_size()
    if owner:
        wait_for(lambda: q.queue_length == spmd_size())
    else:
        assert q.queue_length == 0
    first, second = [], []
    handle = q.after_each(first.append)  # waiting items are handed over at once
    q.after_each(second.append)
    if owner:
        assert sorted(first) == list(range(1, spmd_size() + 1)) and q.queue_length == 0
    spmd_barrier()
    q.send(100 + spmd_index())
    if owner:  # the second listener joined after the waiting items were handed over
        wait_for(lambda: len(second) == spmd_size())
        assert len(first) == 2 * spmd_size()
    handle.remove()
    spmd_barrier()
    q.send(-1)
    if owner:
        wait_for(lambda: len(second) == 2 * spmd_size())
        assert len(first) == 2 * spmd_size()  # removed: no more calls
    spmd_barrier()


def test_poll_with_timeout_and_default():
    q = PollableDataQueue()
    assert q.poll() is None and q.poll(0.01, default="none") == "none"
    spmd_barrier()  # nobody sends before everyone has polled an empty queue
    if spmd_index() == spmd_size():
        q.send({"x": np.arange(3)})
    if spmd_index() == 1:
        item = q.poll(timeout=30)
        assert (item["x"] == np.arange(3)).all()
        assert q.queue_length == 0
    else:
        assert q.poll(timeout=0.01, default=7) == 7  # not the owner: inert
    spmd_barrier()


def test_poll_and_flush_timeouts_infinite_or_refused():
    # math.inf waits until an item comes (Condition.wait(inf) raised OverflowError); NaN
    # waited for ever; None, a bool, a string are refused on every worker
    q = PollableDataQueue()
    if spmd_index() == spmd_size():
        q.send("late")
    if spmd_index() == 1:
        assert q.poll(float("inf")) == "late"
    for bad in (float("nan"), None, True, "1"):
        with pytest.raises(SpmdValueError, match="'timeout' must be seconds"):
            q.poll(bad)
    d = DataQueue()
    seen = []
    d.after_each(seen.append)
    if spmd_index() == 1:
        d.send(1)
    assert d.flush(float("inf")) is True
    assert seen == ([1] if spmd_index() == 1 else [])
    for bad in (float("nan"), -1, -0.5):  # (flush_all refuses a negative one too)
        with pytest.raises(SpmdValueError, match=r"'timeout' must be None or seconds, 0 "
                                                 r"or more \(got "):
            d.flush(bad)
    spmd_barrier()


def test_a_0d_bfloat16_tensor_stays_0d():
    torch = pytest.importorskip("torch")
    q = PollableDataQueue()
    x = torch.tensor(1.5, dtype=torch.bfloat16)
    q.send(x)
    q.send({"x": x})
    if spmd_index() == 1:
        for _ in range(2 * spmd_size()):
            y = q.poll(timeout=30)
            y = y["x"] if isinstance(y, dict) else y
            assert y.shape == () and y.dtype == torch.bfloat16 and y.item() == 1.5
    spmd_barrier()


def test_a_poller_and_the_receiver_thread_keep_each_senders_order():
    # The owner's poll takes its queue's messages itself while it waits; the receiver
    # thread takes them too (between polls, and in bursts that are batched): whoever
    # takes them, each sender's items come out in the order sent, none twice or lost.
    q = PollableDataQueue()
    spmd_barrier()
    n = min(5000, max(1000, 15_000 // max(1, spmd_size() - 1)))  # per sender
    if spmd_index() != 1:
        for i in range(n):
            q.send((spmd_index(), i))
            if i % 7 == 0:
                time.sleep(0.00003)  # short gaps: some items travel alone, some batched
    if spmd_index() == 1:
        got = []
        while len(got) < n * (spmd_size() - 1):
            item = q.poll(timeout=30)
            assert item is not None, f"only {len(got)} items arrived"
            got.append(item)
        for k in range(2, spmd_size() + 1):
            assert [i for s, i in got if s == k] == list(range(n)), f"worker {k}"
        assert q.poll() is None
    spmd_barrier()


def test_ping_pong_through_a_listener_and_a_poll():
    # What bench_dataqueue times: worker 1's listener answers into worker 2's queue,
    # which worker 2 polls; every answer is the one asked for.
    if spmd_size() < 2:
        pytest.skip("needs two workers")
    ping = DataQueue()
    pong = PollableDataQueue.per_worker()
    ping.after_each(lambda item: pong[2].send(("pong", item)))
    if spmd_index() == 2:
        for i in range(300):
            ping.send(i)
            assert pong.mine.poll(timeout=30) == ("pong", i)
            if i % 100 == 0:
                time.sleep(0.02)  # both sides fall back to sleeping, then wake
    spmd_barrier()


def test_an_answer_is_never_held_as_a_burst(monkeypatch):
    # Sends closer together than _BURST_GAP are held and batched (a flood), but a send
    # after a delivery is an answer: a ping-pong faster than the gap (any fast machine;
    # here the gap is made 10 s) must not wait for the batch window at every other hop.
    from spmdlab import queues
    if spmd_size() < 2:
        pytest.skip("needs two workers")
    monkeypatch.setattr(queues, "_BURST_GAP", 10.0)
    ping = DataQueue()
    pong = PollableDataQueue.per_worker()
    held = []
    listener = ping.after_each(
        lambda item: (pong[2].send(item), held.append(len(queues._hub.held))))
    if spmd_index() == 2:
        for i in range(50):
            ping.send(i)
            assert not queues._hub.held
            assert pong.mine.poll(timeout=30) == i
    spmd_barrier()
    if spmd_index() == 1:  # (the last answer is on its way before its count is noted)
        wait_for(lambda: len(held) == 50)
        assert held == [0] * 50
    listener.remove()  # (a listener pins its queue, and this one's closure the pongs)


def test_an_item_interrupted_as_it_is_posted_arrives_once_and_whole(monkeypatch):
    """A Ctrl-C raised as an item's message had been posted (here: in the message count
    after it): the request was dropped while active (MPI read the freed buffer), and the
    item, still held, left again with the next one (the owner got it twice)."""
    import gc

    from conftest import interrupt_the_next_message_count
    if spmd_size() < 2:
        pytest.skip("the owner's own items are not sent through MPI")
    q = PollableDataQueue()
    if spmd_index() == 2:
        interrupt_the_next_message_count(monkeypatch)
        with pytest.raises(KeyboardInterrupt):
            q.send(np.arange(7000.0))
        gc.collect()
        junk = [np.full(7016, -1.0).tobytes() for _ in range(100)]  # (freed memory reused)
        q.send("next")
        del junk
    spmd_barrier()
    if spmd_index() == 1:
        first = q.poll(timeout=30)
        assert isinstance(first, np.ndarray) and (first == np.arange(7000.0)).all()
        assert q.poll(timeout=30) == "next"
        assert q.poll(timeout=0.5) is None
    spmd_barrier()


@pytest.mark.parametrize("when", ["matched", "received"])
def test_a_poll_interrupted_as_it_takes_its_item_loses_nothing(monkeypatch, when):
    """A poll that waits takes its queue's messages itself (MPI's Improbe, then the
    receive): a Ctrl-C raised once the message was matched (here: as its buffer was
    made) or received (here: in its count) dropped it, and its items with it (MPI gives
    a matched message to nobody else)."""
    import builtins
    import threading

    from spmdlab import _count, queues
    if spmd_size() < 2:
        pytest.skip("the owner's own items are not sent through MPI")
    q = PollableDataQueue()
    if spmd_index() == 1:
        program, raised = threading.get_ident(), []

        def interrupted(real):
            def call(*args, **kwargs):
                if threading.get_ident() == program and not raised:
                    raised.append(True)
                    real(*args, **kwargs)
                    raise KeyboardInterrupt
                return real(*args, **kwargs)
            return call

        # the poller takes the messages itself: the receiver thread takes none, and the
        # poller waits for them as long as it takes
        monkeypatch.setattr(queues._hub, "_take", lambda status: False)
        monkeypatch.setattr(queues, "_SPIN", 30.0)
        if when == "matched":
            monkeypatch.setattr(queues, "bytearray", interrupted(builtins.bytearray),
                                raising=False)
        else:
            monkeypatch.setattr(_count, "p2p", interrupted(_count.p2p))
            monkeypatch.setattr(_count, "ON", True)
    spmd_barrier()
    if spmd_index() == 2:
        q.send("first")
        q.send("second")
    if spmd_index() == 1:
        with pytest.raises(KeyboardInterrupt):
            q.poll(timeout=30)
        monkeypatch.undo()
        assert q.poll(timeout=30) == "first"
        assert q.poll(timeout=30) == "second"
        assert q.poll(timeout=0.5) is None
    spmd_barrier()


@pytest.mark.parametrize("waits", [False, True])
def test_a_poll_interrupted_as_it_releases_its_lock_keeps_its_item(waits):
    """A Ctrl-C raised as the lock is released, once the item was popped (Python raises
    it as a call returns), lost the item: the next poll gave the one after it. Polled
    where the items wait already, and where the poll waits for them."""
    import threading

    q = PollableDataQueue()
    if spmd_index() == 1:
        def send():
            if waits:
                time.sleep(0.3)
            q.send("first")
            q.send("second")

        real, raised, items = q._cond, [], q._items
        program, arrived = threading.get_ident(), [] if waits else [True]

        class Interrupted:  # raises once, as the poll lets the lock go with "first" taken
            def __enter__(self):
                return real.__enter__()

            def __exit__(self, *exc):
                real.__exit__(*exc)
                if "first" in items:
                    arrived.append(True)
                elif arrived and not raised and threading.get_ident() == program:
                    raised.append(True)
                    raise KeyboardInterrupt

            def __getattr__(self, name):
                return getattr(real, name)

        sender = threading.Thread(target=send)
        if not waits:
            send()
            deadline = time.monotonic() + 30
            while len(items) < 2 and time.monotonic() < deadline:  # (handed over)
                time.sleep(0.001)
        q._cond = Interrupted()
        if waits:
            sender.start()
        with pytest.raises(KeyboardInterrupt):
            q.poll(timeout=30)
        q._cond = real
        if waits:
            sender.join()
        assert q.poll(timeout=30) == "first"
        assert q.poll(timeout=30) == "second"
        assert q.poll() is None
    spmd_barrier()


def test_per_worker_queues():
    qs = PollableDataQueue.per_worker()
    assert len(qs) == spmd_size() and qs.mine is qs[spmd_index()]
    right = spmd_index() % spmd_size() + 1
    qs[right].send(spmd_index())
    left = (spmd_index() - 2) % spmd_size() + 1
    assert qs.mine.poll(timeout=30) == left
    with pytest.raises(SpmdValueError, match="workers are numbered 1 to"):
        qs[0]
    # the error names the worker and the value, as every other bad worker number does
    who = rf"\(worker {spmd_index()} of {spmd_size()}\)"
    with pytest.raises(SpmdValueError, match=rf"QueueSet\[{spmd_size() + 1}\] {who}: "
                       rf"workers are numbered 1 to {spmd_size()} \(got {spmd_size() + 1}\)"):
        qs[spmd_size() + 1]
    with pytest.raises(SpmdTypeError, match=rf"QueueSet\[1.0\] {who}: .*\(got 1.0 that is "
                       rf"a float\)"):
        qs[1.0]
    spmd_barrier()


def test_large_payload():
    q = PollableDataQueue()
    if spmd_index() == spmd_size():
        q.send(np.full(100 * 2 ** 20 // 8, 3.0))  # 100 MB
    if spmd_index() == 1:
        item = q.poll(timeout=60)
        assert item.nbytes == 100 * 2 ** 20 and (item == 3.0).all()
    spmd_barrier()


def test_close():
    q = PollableDataQueue()
    q.send(spmd_index())
    spmd_barrier()
    if spmd_index() == 1:
        wait_for(lambda: q.queue_length == spmd_size())
        q.close()
        with pytest.raises(SpmdValueError, match="closed by this worker"):
            q.send(0)
        assert sorted(q.poll() for _ in range(spmd_size())) == \
            list(range(1, spmd_size() + 1))  # what was sent can still be polled
    else:
        wait_for(lambda: q.closed)
        with pytest.raises(SpmdValueError, match=r"PollableDataQueue.send \(worker \d+ of "
                                                 r"\d+\): the queue was closed by its owner"):
            q.send(0)
    spmd_barrier()


def test_bad_input():
    with pytest.raises(SpmdValueError, match="DataQueue .*'owner' must be a worker number"):
        DataQueue(owner=spmd_size() + 1)
    q = DataQueue()
    with pytest.raises(SpmdTypeError, match="after_each .*listener must be callable"):
        q.after_each("print")
    with pytest.raises(SpmdTypeError, match=r"DataQueue.send \(worker \d+ of \d+\): .*cannot be pickled"):
        q.send(lambda: 0)
    spmd_barrier()


def test_queue_traffic_is_invisible_to_messages():
    q = PollableDataQueue()
    for i in range(50):
        q.send(i)
    spmd_barrier()
    assert spmd_probe() is False  # queue items are not user messages
    spmd_barrier()
    right = spmd_index() % spmd_size() + 1
    spmd_send("user", right, tag=1)
    assert spmd_receive(tag=1) == "user"
    if spmd_index() == 1:
        wait_for(lambda: q.queue_length == 50 * spmd_size())
    spmd_barrier()


def test_seed_003_stop_relay_stops_everyone_at_the_same_iteration():
    # worker 1 reports [epoch, loss, iteration]; the client's listener decides to stop and
    # tells worker 1's per-worker queue; every worker sees it through spmd_plus
    progress = DataQueue()
    stop = PollableDataQueue.per_worker()
    seen = []

    def monitor(item):
        seen.append(item)
        if item[2] == 20:  # a person pressed Stop after iteration 20
            stop[1].send(True)

    progress.after_each(monitor)
    iteration = 0
    while iteration < 100_000:
        iteration += 1
        time.sleep(0.0005)  # a training step
        if spmd_index() == 1:
            progress.send([1, 1.0 / iteration, iteration])
        if spmd_plus(stop.mine.queue_length) > 0:
            break
    stopped = spmd_cat(iteration)
    assert (stopped == stopped[0]).all() and 20 <= stopped[0] < 100_000
    if spmd_index() == 1:
        assert seen[0] == [1, 1.0, 1]


def test_items_arriving_before_this_worker_made_the_queue_wait_for_it():
    # another worker can be past the creating agreement and sending while this worker has
    # not yet registered the queue: simulate such an early item on the owner
    from spmdlab import _pack, _world, queues

    scope = _world.current()
    chan = queues._hub.channel(scope)
    tag = scope.next_queue_tag
    if spmd_index() == 1:
        queues._hub._deliver(chan, 0, tag, _pack.encode("early", "test"))
    q = PollableDataQueue()
    q.send("later")
    if spmd_index() == 1:
        assert q.poll(timeout=30) == "early"
        got = [q.poll(timeout=30) for _ in range(spmd_size())]
        assert got == ["later"] * spmd_size()
    spmd_barrier()


def test_flush_waits_for_the_owners_own_items():
    q = DataQueue()
    got = []
    q.after_each(got.append)
    if spmd_index() == 1:
        for i in range(100):
            q.send(i)
        assert q.flush(timeout=30) and got == list(range(100))
    else:
        assert q.flush() is True
    spmd_barrier()


@pytest.mark.parametrize("where", ["everywhere", "worker 1"])
def test_queues_need_mpi_thread_multiple(monkeypatch, where):
    from mpi4py import MPI

    from spmdlab import SpmdError, queues, spmd_index

    if where == "everywhere" or spmd_index() == 1:
        monkeypatch.setattr(queues, "thread_level", lambda: MPI.THREAD_SERIALIZED)
    with pytest.raises(SpmdError, match="queues need MPI_THREAD_MULTIPLE.*"
                                        "MPI_THREAD_SERIALIZED|failed on another worker"):
        DataQueue()
    with pytest.raises(SpmdError):
        PollableDataQueue.per_worker()
    monkeypatch.undo()
    q = DataQueue()  # the next queue works: every worker left the failed call together
    q.send(1)


def test_flush_without_a_listener_does_not_claim_success():
    from spmdlab import spmd_index

    q = DataQueue()
    if spmd_index() == 1:
        q.send("mine")
        with pytest.raises(SpmdValueError, match="no listener.*wait for ever"):
            q.flush()
        assert q.flush(timeout=0.2) is False  # arrived, but handed to nobody
        got = []
        q.after_each(got.append)
        assert q.flush() is True and got == ["mine"]
    else:
        assert q.flush() is True  # not the owner: nothing to wait for


def test_a_queue_per_epoch_for_many_epochs():
    """Queues made and dropped in a loop are collected (their tags are not reused, and
    items sent to a dropped queue are discarded); a queue with a listener is kept."""
    import gc

    from spmdlab import queues, spmd_barrier, spmd_index

    gc.collect()
    chan = next(iter(queues._hub.channels.values()), None)
    before = 0 if chan is None else len(chan.queues)  # (earlier tests' pinned queues)
    kept = []
    q = DataQueue()
    q.after_each(kept.append)  # no reference kept to q below: the listener pins it
    q.send(spmd_index())
    del q
    for epoch in range(2000):
        q = PollableDataQueue()
        q.send(epoch)  # reaches a queue dropped by then, or not: either way nothing piles up
    del q
    spmd_barrier()
    gc.collect()
    chan = next(iter(queues._hub.channels.values()))
    assert len(chan.queues) - before < 50  # not 2,000
    import time
    deadline = time.monotonic() + 10
    while spmd_index() == 1 and len(kept) < spmd_size() and time.monotonic() < deadline:
        time.sleep(0.01)
    if spmd_index() == 1:
        assert sorted(kept) == list(range(1, spmd_size() + 1))


def test_running_out_of_tags_is_a_clear_error(monkeypatch):
    from spmdlab import _world

    monkeypatch.setattr(_world, "TAG_UB", 3)  # every worker
    with pytest.raises(SpmdValueError, match="as many as MPI has tags"):
        for _ in range(10):
            DataQueue()


def _values():
    """Values of every kind the one message framing must carry unchanged."""
    values = [
        (1, 2.5, "s", None, True), 2 ** 70, {"w": np.arange(6.0).reshape(2, 3), "k": [1]},
        np.asfortranarray(np.arange(12, dtype=np.int32).reshape(3, 4)),
        np.arange(10)[::3], np.float32(1.5), np.array(3.0), np.zeros((0, 4)),
        np.array(["a", None], dtype=object)]
    try:
        import torch
    except ImportError:
        return values
    return values + [torch.arange(4.0).reshape(2, 2), torch.tensor(7),
                     torch.ones(3, dtype=torch.bfloat16), {"t": (torch.zeros(2),)}]


def _same(a, b):
    assert type(a) is type(b), (a, b)
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        return all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        return all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert np.array_equal(a, b) if a.dtype != object else list(a) == list(b)
        return True
    if type(a).__module__.startswith("torch"):
        assert a.dtype == b.dtype and a.shape == b.shape and a.device == b.device
        assert bool((a == b).all())
        return True
    assert a == b
    return True


def test_messages_and_queue_items_share_one_framing():
    # point-to-point and queues once framed values differently (and a small message
    # cost 44 us to pack, 122 us to unpack); now both use _pack.encode: every kind of
    # value arrives unchanged, in type, dtype, shape and device, either way
    q = PollableDataQueue()
    values = _values()
    for v in values:
        q.send((spmd_index(), v))
    if spmd_size() > 1:
        right = spmd_index() % spmd_size() + 1
        left = (spmd_index() - 2) % spmd_size() + 1
        for v in values:
            spmd_send(v, right, tag=5)
        for v in values:
            assert _same(v, spmd_receive(left, tag=5))
    if spmd_index() == 1:
        got = [q.poll(timeout=30) for _ in range(len(values) * spmd_size())]
        for k in range(1, spmd_size() + 1):  # in order per sender
            from_k = [v for sender, v in got if sender == k]
            assert len(from_k) == len(values)
            for v, g in zip(values, from_k):
                assert _same(v, g)
    spmd_barrier()


def test_sends_of_messages_and_queues_are_tracked_together():
    from spmdlab import _ending

    q = DataQueue()
    spmd_send(np.ones(200_000), spmd_index(), tag=9)  # to itself: in flight until received
    q.send(np.ones(10))
    assert _ending.SENDS.in_flight() >= 1
    spmd_receive(spmd_index(), tag=9)
    wait_for(lambda: _ending.SENDS.in_flight() == 0)
    spmd_barrier()


@pytest.mark.mpi
@pytest.mark.parametrize("kind", ["DataQueue", "PollableDataQueue"])
def test_flush_all_waits_for_every_workers_items(kind):
    # the owner uses every item of a phase before it goes on: no polling with a deadline
    import time

    from spmdlab import DataQueue, PollableDataQueue, spmd_index, spmd_size

    owner = spmd_size()
    q = (DataQueue if kind == "DataQueue" else PollableDataQueue)(owner=owner)
    got = []
    if kind == "DataQueue" and spmd_index() == owner:
        q.after_each(lambda item: (time.sleep(0.0005), got.append(item)))
    for i in range(200):
        q.send((spmd_index(), i))
    assert q.flush_all() is True
    if spmd_index() == owner:
        if kind == "PollableDataQueue":
            got = [q.poll() for _ in range(q.queue_length)]
        # (the others went on at once: items of their next phase may be here already)
        first = [item for item in got if item[0] != "again"]
        assert sorted(first) == sorted((k, i) for k in range(1, spmd_size() + 1)
                                       for i in range(200))
        got = [item for item in got if item[0] == "again"]
    # a second phase counts only what was sent since
    q.send(("again", spmd_index()))
    assert q.flush_all(timeout=30) is True
    if spmd_index() == owner:
        if kind == "PollableDataQueue":
            got += [q.poll() for _ in range(q.queue_length)]
            assert sorted(got) == [("again", k) for k in range(1, spmd_size() + 1)]
        else:
            assert sum(1 for item in got if item[0] == "again") == spmd_size()


@pytest.mark.mpi
def test_flush_all_without_a_listener_is_refused_on_every_worker():
    from spmdlab import DataQueue, SpmdValueError, spmd_size

    q = DataQueue(owner=spmd_size())
    with pytest.raises(SpmdValueError, match="no listener"):
        q.flush_all()


@pytest.mark.mpi
def test_flush_all_with_a_timeout_says_false_while_a_listener_holds_items():
    import threading

    from spmdlab import DataQueue, spmd_barrier, spmd_index

    go = threading.Event()
    q = DataQueue()
    q.after_each(lambda item: go.wait(30))
    spmd_barrier()  # no item comes before the listener (after_each would run it here)
    q.send(spmd_index())
    assert q.flush_all(timeout=0.2) is (spmd_index() != 1)  # the owner: not handed over
    go.set()
    assert q.flush_all() is True


@pytest.mark.mpi
@pytest.mark.parametrize("timeout", [-1, "soon", float("nan")])
def test_flush_all_bad_timeout_fails_on_every_worker(timeout):
    from spmdlab import DataQueue, SpmdValueError, spmd_size

    q = DataQueue(owner=spmd_size())
    q.after_each(lambda item: None)
    with pytest.raises(SpmdValueError, match=r"'timeout' must be None or seconds, 0 or "
                                             r"more \(got "):
        q.flush_all(timeout=timeout)
    q.send(1)
    assert q.flush_all() is True


def test_numpy_scalars_of_one_type_and_other_dtypes_arrive_as_sent():
    # (one header per scalar type, not per dtype, gave the first one's unit or length)
    q = PollableDataQueue()
    values = [np.datetime64("2020-01-01"), np.datetime64("2020-01-01T12:34:56"),
              np.str_("ab"), np.str_("abcdef")]
    for x in values:
        q.send(x)
    q.flush_all()
    if spmd_index() == 1:
        got = [q.poll(30.0) for _ in range(len(values) * spmd_size())]
        for x in values:
            same = [g for g in got if g.dtype == x.dtype and g == x]
            assert len(same) == spmd_size(), (x, got)


def test_an_owner_given_as_a_numpy_int_is_kept_as_an_int():
    q = PollableDataQueue(owner=np.int64(spmd_size()))
    assert type(q.owner) is int and type(q.is_owner) is bool
    assert q.is_owner == (spmd_index() == spmd_size())
    q.send(spmd_index())
    if q.is_owner:
        got = sorted(q.poll(30.0) for _ in range(spmd_size()))
        assert got == list(range(1, spmd_size() + 1))
    spmd_barrier()


def test_polls_without_end_that_wait_for_each_other_raise_a_deadlock_on_every_worker():
    # every worker waits for an item of its own queue and nobody sends: poll(math.inf)
    # would wait for ever (the deadlock check looks 1 s into the wait)
    if spmd_size() == 1:
        pytest.skip("a poll with no other worker raises once the program is alone")
    import math
    from spmdlab import SpmdDeadlockError
    queues = PollableDataQueue.per_worker()
    with pytest.raises(SpmdDeadlockError) as info:
        queues.mine.poll(math.inf)
    text = str(info.value)
    assert f"PollableDataQueue.poll (worker {spmd_index()} of {spmd_size()}): deadlock: " \
           f"no item can ever come" in text, text
    assert f"worker {spmd_index()} (this one) waits in PollableDataQueue.poll at " in text
    assert "test_queues.py:" in text, text
    assert "for an item from worker" in text, text
    spmd_barrier()
    queues[spmd_index() % spmd_size() + 1].send("after")  # the queues still work
    assert queues.mine.poll(math.inf) == "after"
    spmd_barrier()


def test_a_poll_without_end_beside_a_receive_that_waits_for_it_is_a_deadlock():
    if spmd_size() == 1:
        pytest.skip("needs a second worker")
    import math
    from spmdlab import SpmdDeadlockError
    queues = PollableDataQueue.per_worker()
    if spmd_index() == 1:
        with pytest.raises(SpmdDeadlockError, match=r"waits in spmd_receive at .* for a "
                                                    r"message from worker 1 \(tag 12\)"):
            queues.mine.poll(math.inf)
        spmd_send("unblocked", list(range(2, spmd_size() + 1)), tag=12)
    else:  # (the receives see the deadlock too, unless worker 1 saw it first and sent)
        try:
            got = spmd_receive(1, tag=12)
        except SpmdDeadlockError as exc:
            assert "waits in PollableDataQueue.poll at" in str(exc), str(exc)
            got = spmd_receive(1, tag=12)
        assert got == "unblocked"
    spmd_barrier()


def test_a_poll_without_end_for_a_worker_that_computes_is_no_deadlock():
    # worker 2 computes for 3 s (worker 1 looks 1 and 2 s into its wait), then sends
    if spmd_size() == 1:
        pytest.skip("needs a second worker")
    import math
    queues = PollableDataQueue.per_worker()
    if spmd_index() == 2:
        time.sleep(3.0)
        queues[1].send("late")
    elif spmd_index() == 1:
        assert queues.mine.poll(math.inf) == "late"
    spmd_barrier()


def test_a_listener_that_polls_with_a_timeout_is_refused():
    # the listener runs in the thread that delivers the items: its poll(2) returned None
    # 2 s later whatever came meanwhile (its poll(math.inf) waited for ever)
    from spmdlab import SpmdError
    asks, answers = DataQueue(), PollableDataQueue()
    seen = []

    def listener(item):
        for timeout in (2.0, 0.25):
            try:
                answers.poll(timeout)
            except SpmdError as exc:
                seen.append(str(exc))
        seen.append(answers.poll())  # what has arrived: allowed

    asks.after_each(listener)
    spmd_barrier()  # no item comes before the listener (after_each would run it here)
    if spmd_index() == spmd_size():
        answers.send("answer")
        asks.send("ask")
    asks.flush_all()
    if spmd_index() == 1:
        who = rf"PollableDataQueue.poll \(worker 1 of {spmd_size()}\)"
        assert len(seen) == 3, seen
        for text, shown in zip(seen, ["2 s", "0.25 s"]):
            assert re.match(rf"{who}: called with a timeout \({shown}\) from a listener, "
                            rf"which runs in the thread that delivers the items", text), text
        assert seen[2] in ("answer", None)  # (sent first: there, unless still on its way)
    else:
        assert seen == []
