"""Point-to-point messages at any worker count."""

import numpy as np
import pytest

import threading
import time

from spmdlab import (DataQueue, SpmdDeadlockError, spmd_barrier, spmd_index, spmd_probe,
                     spmd_receive, spmd_send, spmd_send_receive, spmd_size)

from conftest import interrupt_the_next_message_count, same_family

pytestmark = pytest.mark.mpi


def right():
    return spmd_index() % spmd_size() + 1


def left():
    return (spmd_index() - 2) % spmd_size() + 1


def test_ring_send_receive_with_status(backend):
    x = backend.make(np.full((2, 3), spmd_index(), np.float32))
    spmd_send({"x": x, "from": spmd_index()}, right(), tag=7)
    value, source, tag = spmd_receive(left(), 7, status=True)
    assert source == left() and tag == 7 and value["from"] == left()
    same_family(value["x"], x)
    assert (backend.read(value["x"]) == left()).all()
    assert (backend.read(x) == spmd_index()).all()  # input unmodified


def test_receive_any_source_and_tag():
    for arrived_first in (False, True):  # (MPICH at 2x2: a late receive never matched)
        if spmd_index() != 1:
            spmd_send(spmd_index(), 1, tag=spmd_index())
        if arrived_first:
            spmd_barrier()
        if spmd_index() == 1:
            got = sorted(spmd_receive(status=True) for _ in range(spmd_size() - 1))
            assert got == [(k, k, k) for k in range(2, spmd_size() + 1)]
        spmd_barrier()


def test_send_to_a_list_of_workers():
    if spmd_index() == 1:
        spmd_send("hello", list(range(1, spmd_size() + 1)), tag=3)
    assert spmd_receive(1, 3) == "hello"


def test_messages_from_one_sender_arrive_in_order():
    if spmd_index() == 1:
        for i in range(200):
            spmd_send(i, spmd_size(), tag=1)
    if spmd_index() == spmd_size():
        assert [spmd_receive(1, 1) for _ in range(200)] == list(range(200))
    spmd_barrier()


def test_large_message_does_not_block_the_sender():
    # both workers send 8 MB first and receive after: only works if sends never block
    data = np.full(1_000_000, spmd_index(), np.float64)
    spmd_send(data, right(), tag=2)
    got = spmd_receive(left(), 2)
    assert got.shape == data.shape and (got == left()).all()


def test_probe_consumes_nothing():
    spmd_barrier()
    assert spmd_probe(tag=9) is False
    assert spmd_probe(status=True) == (False, None, None)
    spmd_barrier()  # nobody sends before everyone has probed
    spmd_send([1, 2], right(), tag=9)
    while not spmd_probe(left(), 9):
        pass
    assert spmd_probe(status=True) == (True, left(), 9)
    assert spmd_receive(left(), 9) == [1, 2]
    spmd_barrier()


def test_probe_sees_a_message_sent_to_oneself_at_once():
    # spmdSend(x, spmdIndex()); spmdProbe(...) is true, as at one worker, for every
    # form of the probe and every message size
    k = spmd_index()
    for size in (1, 100_000):
        spmd_send(np.ones(size), k, tag=11)
        assert spmd_probe(None, 11) and spmd_probe(k, 11) and spmd_probe()
        assert spmd_probe(None, None, status=True) == (True, k, 11)
        assert spmd_receive(k, 11).shape == (size,)
    assert spmd_probe(k) is False
    spmd_barrier()


def test_send_receive_ring_is_deadlock_free():
    for size in (10, 2_000_000):
        x = np.full(size, spmd_index(), np.int32)
        got = spmd_send_receive(right(), left(), x, tag=4)
        assert got.shape == (size,) and (got == left()).all()


def test_send_receive_with_empty_sides():
    first, last = 1, spmd_size()
    dest = right() if spmd_index() != last else None
    src = left() if spmd_index() != first else None
    got = spmd_send_receive(dest, src, spmd_index())
    if src is None:
        assert got is None
    else:
        assert got == left()


def test_an_unpicklable_value_fails_its_send_and_the_receive_it_was_for():
    # the sender raised, and its receiver waited on: a caught error then left every
    # later send and receive of the pair one apart (each exchange on the receiver
    # returned the previous round's value, silently). A marker goes in its place
    from spmdlab import SpmdError, SpmdTypeError, spmd_size

    k, n = spmd_index(), spmd_size()
    with pytest.raises(SpmdTypeError, match="spmd_send.*cannot be pickled"):
        spmd_send(lambda: 0, right())
    with pytest.raises(SpmdError, match=rf"spmd_receive \(worker {k} of {n}\): worker "
                                        rf"{left()} could not send the value this receive "
                                        rf"would have taken, and raised there: "
                                        rf"SpmdTypeError: .*cannot be pickled"):
        spmd_receive(left())
    # a ring in which the last worker's value cannot be sent: it and its right-hand
    # neighbour raise, and the next exchanges are in step everywhere
    value = (lambda: 0) if k == n else k
    try:
        got = spmd_send_receive(right(), left(), value)
    except SpmdTypeError:
        got = "own" if k == n else "?"
    except SpmdError as exc:
        got = "left" if f"worker {n} could not send" in str(exc) else str(exc)
    assert got == ("own" if k == n else "left" if k == 1 else left()), got
    for r in range(3):
        assert spmd_send_receive(right(), left(), 10 * k + r) == 10 * left() + r
    # a struct holding something unpicklable, with a tag: the receive of that tag raises
    with pytest.raises(SpmdTypeError):
        spmd_send({"f": lambda: 0}, right(), tag=5)
    with pytest.raises(SpmdError, match=rf"worker {left()} could not send .* \(tag 5\)"):
        spmd_receive(left(), tag=5)
    assert spmd_send_receive(right(), left(), k) == left()


def test_receive_from_oneself_with_nothing_sent_raises_at_once():
    from spmdlab import SpmdValueError

    with pytest.raises(SpmdValueError, match="receiving from this worker itself"):
        spmd_receive(source=spmd_index())
    with pytest.raises(SpmdValueError, match="with tag 5"):
        spmd_receive(source=spmd_index(), tag=5)
    spmd_send({"me": spmd_index()}, spmd_index(), tag=5)  # sent first: received at once
    with pytest.raises(SpmdValueError, match="with tag 4"):
        spmd_receive(source=spmd_index(), tag=4)
    assert spmd_receive(source=spmd_index(), tag=5) == {"me": spmd_index()}
    if spmd_size() == 1:  # nobody else could send
        with pytest.raises(SpmdValueError, match="receiving from this worker itself"):
            spmd_receive()



@pytest.mark.parametrize("size", [10, 300_000])
def test_send_receive_from_oneself_with_nothing_sent_raises_at_once(size):
    # a large array (one that leaves by rendezvous) waited for ever, then timed out
    # naming "no message from workers 1, 2"; a small one raised at once, after sending
    from spmdlab import SpmdValueError

    if spmd_size() == 1:
        pytest.skip("at one worker the message sent is the one received")
    k, x = spmd_index(), np.full(size, float(spmd_index()))
    with pytest.raises(SpmdValueError, match="receiving from this worker itself with tag 6"):
        spmd_send_receive(right(), k, x, tag=6)
    spmd_barrier()
    assert not spmd_probe(tag=6)  # nothing was sent
    spmd_barrier()  # (before anyone sends)
    spmd_send(-x, k, tag=6)  # sent first: received at once, whatever goes the other way
    assert (spmd_send_receive(right(), k, x, tag=6) == -x).all()
    assert (spmd_receive(left(), tag=6) == left()).all()
    spmd_send(x, right(), tag=7)
    got = spmd_send_receive(k, left(), x, tag=7)  # to oneself, from the left
    assert (got == left()).all() and (spmd_receive(k, tag=7) == x).all()
    spmd_barrier()

# -- large arrays: sent from their own memory when the receiver is ready (a rendezvous),
# as a copy when it is not; either way the receiver gets the values sent

BIG = 300_000  # float64 elements: 2.4 MB, well past the size sent in one message


def test_a_large_array_changed_after_sending_arrives_as_sent():
    k, n = spmd_index(), spmd_size()
    x = np.full(BIG, float(k))
    spmd_send(x, right(), tag=3)
    x[:] = -1.0  # spmd_send has returned: the message must not see this
    got = spmd_receive(left(), tag=3)
    assert got.shape == (BIG,) and (got == float(left())).all()
    spmd_barrier()


def test_large_arrays_head_to_head_and_to_a_busy_receiver():
    import time

    k, n = spmd_index(), spmd_size()
    # everyone sends first, then receives: nobody is ready when the sends start
    for rounds in range(3):
        spmd_send(np.full(BIG, k + rounds, dtype=np.int64), right(), tag=4)
        if k == 1:
            time.sleep(0.05)  # a receiver busy elsewhere for a while
        got = spmd_receive(left(), tag=4)
        assert (got == left() + rounds).all()
    # a receiver that already waits: the array leaves from the sender's memory
    if n > 1:
        if k == 1:
            spmd_send(np.arange(BIG, dtype=np.float32), 2, tag=5)
        elif k == 2:
            assert (spmd_receive(1, tag=5) == np.arange(BIG, dtype=np.float32)).all()
    spmd_barrier()


def test_large_ring_exchange_and_mixed_sizes():
    k = spmd_index()
    for size in (10, BIG, 70_000, 8192, BIG):  # (8192 float64: 64 KiB, one message)
        x = np.full(size, float(k))
        got = spmd_send_receive(right(), left(), x, tag=6)
        assert got.shape == (size,) and (got == left()).all()
        assert (x == k).all()  # the input is untouched
    # a large array one way, a small value the other way, and the receive side alone
    got = spmd_send_receive(right(), left(), np.full(BIG, k) if k % 2 else k, tag=8)
    assert np.all(got == left())
    spmd_barrier()


def test_large_messages_with_tags_received_out_of_order():
    k = spmd_index()
    spmd_send(np.full(BIG, 1.0), right(), tag=11)
    spmd_send(np.full(BIG, 2.0), right(), tag=12)
    assert (spmd_receive(left(), tag=12) == 2.0).all()  # the later one first
    assert (spmd_receive(left(), tag=11) == 1.0).all()
    spmd_barrier()


def test_small_tensors_of_every_kind_arrive_as_sent():
    """Plain CPU tensors travel as their numpy view's bytes; the rest (bfloat16, a
    conjugate or negative bit, strided views, grad, a subclass) by another way: each
    arrives with its class, dtype, shape, values and requires_grad, writable, its own
    memory."""
    torch = pytest.importorskip("torch")
    def values(k):
        base = torch.arange(12, dtype=torch.float32).reshape(3, 4) + k
        return {
            "plain": base,
            "scalar": torch.tensor(2.5 * k, dtype=torch.float64),
            "bfloat16": base.to(torch.bfloat16),
            "int": base.to(torch.int64),
            "conj": torch.complex(base, -base).conj(),
            "neg": torch._neg_view(base.to(torch.complex64)),
            "transposed": base.t(),
            "grad": base.clone().requires_grad_(True),
            "parameter": torch.nn.Parameter(base.clone()),
            "empty": torch.zeros(0, k),
        }

    sent, expected = values(spmd_index()), values(left())
    for i, (name, x) in enumerate(sent.items()):
        got = spmd_send_receive(right(), left(), x, tag=30 + i)
        # an nn.Parameter arrives as one, a tensor that requires grad requires it (a
        # leaf: its graph stays with the sender), as torch's own pickle gives them
        assert type(got) is type(expected[name]), (name, type(got))
        assert got.requires_grad == expected[name].requires_grad, name
        want = expected[name].detach().resolve_conj().resolve_neg()
        assert got.dtype == want.dtype and got.shape == want.shape, name
        assert torch.equal(got.detach().resolve_conj().resolve_neg(), want), name
        got.detach().zero_()  # writable, and not the sender's memory
    assert torch.equal(sent["plain"], values(spmd_index())["plain"])
    spmd_barrier()


def test_tensors_of_the_kind_sent_last_that_are_not_plain_arrive_as_sent():
    """A tensor of the dtype and shape sent last is read at its address, when it is
    plain: a transposed view, one with a conjugate or negative bit, one that requires
    grad, a Parameter or a sparse tensor of that same dtype and shape must not be, and a
    contiguous slice of a larger tensor is read from where it starts."""
    torch = pytest.importorskip("torch")
    for dtype in (torch.float32, torch.complex64):
        def plain(k):
            real = torch.arange(16, dtype=torch.float32).reshape(4, 4) + 10 * k
            return torch.complex(real, 100 - real) if dtype.is_complex else real

        def kinds(k):
            base = plain(k)
            odd = {"transposed": base.t(), "grad": base.clone().requires_grad_(True),
                   "parameter": torch.nn.Parameter(base.clone(), requires_grad=False),
                   "sparse": base.to_sparse(),
                   "slice": torch.cat([base.reshape(-1), base.reshape(-1)])[16:].view(4, 4)}
            if dtype.is_complex:
                odd["conj"] = base.conj()
                odd["neg"] = torch._neg_view(base)
            else:  # (the imaginary part of a conjugate view: a real tensor, negative bit)
                odd["neg"] = torch.complex(base, base + 1).conj().imag
            return odd

        sent, expected = kinds(spmd_index()), kinds(left())
        for i, name in enumerate(sent):
            for _ in range(2):  # the plain kind is the last sent before each odd one
                assert torch.equal(spmd_send_receive(right(), left(), plain(spmd_index()),
                                                     tag=70), plain(left()))
            got = spmd_send_receive(right(), left(), sent[name], tag=71 + i)
            want = expected[name]
            assert type(got) is type(want), (dtype, name, type(got))
            assert got.requires_grad == want.requires_grad, (dtype, name)
            assert got.layout == want.layout, (dtype, name)
            want = want.detach().resolve_conj().resolve_neg()
            got = got.detach().resolve_conj().resolve_neg()
            if want.layout != torch.strided:
                want, got = want.to_dense(), got.to_dense()
            assert got.dtype == want.dtype and got.shape == want.shape, (dtype, name)
            assert torch.equal(got, want), (dtype, name, got, want)
    spmd_barrier()


def test_a_tensor_without_storage_of_the_kind_sent_last_is_refused_by_name():
    """Inside ``torch.func.vmap`` a tensor has no storage of its own: after tensors of
    its dtype and shape were sent, its send still raises spmdlab's error (not torch's
    RuntimeError from its address), and the receiver is told."""
    torch = pytest.importorskip("torch")
    from torch.func import vmap

    from spmdlab import SpmdError, SpmdTypeError

    for _ in range(3):
        spmd_send_receive(right(), left(), torch.arange(4.0), tag=80)
    errors = []

    def step(x):
        with pytest.raises(SpmdTypeError, match="cannot be pickled") as sent:
            spmd_send(x, right(), tag=81)
        with pytest.raises(SpmdError, match=f"worker {left()} could not send") as got:
            spmd_receive(left(), tag=81)
        errors.append((sent.value, got.value))
        return x

    vmap(step)(torch.arange(8.0).reshape(2, 4))
    assert len(errors) == 1
    spmd_barrier()


def test_nested_tensors_arrive_as_sent():
    """A nested tensor (its parts' shapes differ: it has no shape of its own) travels by
    torch's pickle, also where a plain tensor of its dtype was sent last (the short way
    that reads such a tensor at its address asked for its shape): it raised torch's
    RuntimeError on the sender, and its receiver was left waiting."""
    torch = pytest.importorskip("torch")
    import warnings

    def nested(k, **kw):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (nested tensors are a prototype: a warning)
            return torch.nested.nested_tensor([torch.ones(2) * k, torch.arange(3.0) + k],
                                              **kw)

    for kw in ({}, {"layout": torch.jagged}, {"requires_grad": True}):
        for exchange in (False, True):
            for _ in range(2):  # a plain float32 tensor is the kind sent last
                spmd_send(torch.ones(4), right(), tag=80)
                assert torch.equal(spmd_receive(left(), 80), torch.ones(4))
            if exchange:
                got = spmd_send_receive(right(), left(), nested(spmd_index(), **kw), tag=81)
            else:
                spmd_send(nested(spmd_index(), **kw), right(), tag=81)
                got = spmd_receive(left(), 81)
            want = nested(left(), **kw)
            assert got.is_nested and got.layout == want.layout, (kw, got)
            assert got.requires_grad == want.requires_grad, kw
            assert all(torch.equal(a.detach(), b.detach())
                       for a, b in zip(got.unbind(), want.unbind())), (kw, got)
    spmd_barrier()


def test_large_arrays_whose_header_does_not_fit_an_inbox_arrive():
    """A large array of a structured dtype of thousands of fields: its header (the
    dtype's pickle) is larger than a receiver's inbox, so its first message by
    rendezvous was cut by MPI there ("Message truncated", the job ended): it is sent
    whole, its head first, as any message larger than an inbox is."""
    dtype = np.dtype([(f"a_rather_long_field_name_{i:05d}", "u1") for i in range(4000)])

    def value(k, count):
        x = np.zeros(count, dtype)
        x.view(np.uint8)[:] = (np.arange(x.nbytes) + k) % 251
        return x

    for count in (1, 30, 300):  # 4 KB, 120 KB, 1.2 MB
        for way in ("from left", "from any", "exchange"):
            if way == "exchange":
                got = spmd_send_receive(right(), left(), value(spmd_index(), count), tag=82)
            else:
                spmd_send(value(spmd_index(), count), right(), tag=82)
                got = spmd_receive(left() if way == "from left" else None, 82)
                spmd_barrier()  # (from any: the next round's must not be taken for this)
            want = value(left(), count)
            assert got.dtype == dtype and got.shape == want.shape, (count, way)
            assert got.tobytes() == want.tobytes(), (count, way)
    spmd_barrier()


def test_sends_from_two_threads_to_one_worker_and_tag_arrive_whole():
    """Two threads send to the same worker with the same tag, large arrays (by
    rendezvous: a head, then the array once the receiver is ready) and large dicts (a
    head, then the message) between small ones: the receiver takes the next message of
    that sender and tag as a head's bytes, so another thread's message that left between
    them was taken for them (MPI's "Message truncated" ended the job, or wrong values)."""
    if spmd_size() == 1:
        pytest.skip("at one worker a receive from itself may come before the threads send")
    rounds = 24

    def value(thread, i, way):
        array = np.full(120_000 if i % 2 == 0 else 3, thread * 1000 + i, np.float64)
        return array if way == "array" else {"a": array}

    for way in ("array", "dict"):
        threads = [threading.Thread(target=lambda t=t: [
            spmd_send(value(t, i, way), right(), tag=83) for i in range(rounds)])
            for t in (1, 2)]
        for t in threads:
            t.start()
        seen = {1: [], 2: []}
        for _ in range(2 * rounds):
            got = spmd_receive(left(), 83)
            array = got if way == "array" else got["a"]
            thread, i = divmod(int(array[0]), 1000)
            assert array.size == (120_000 if i % 2 == 0 else 3), (way, thread, i)
            assert (array == thread * 1000 + i).all(), (way, thread, i)
            seen[thread].append(i)
        for t in threads:
            t.join()
        assert seen == {1: list(range(rounds)), 2: list(range(rounds))}, way
        spmd_barrier()


@pytest.mark.parametrize("call", ["spmd_send", "spmd_send_receive"])
def test_a_large_send_interrupted_after_its_head_leaves_its_array_whole(monkeypatch, call):
    """A large array's send (its head, then its bytes once the receiver is ready)
    interrupted between the two (a Ctrl-C caught, SPMDLAB_TIMEOUT): the receiver takes
    the next message of that sender and tag as the bytes that follow the head, so the
    next small message sent took their place (the array's values wrong, silently, and
    that message lost). The array leaves as a copy before the error propagates."""
    if spmd_size() == 1:
        pytest.skip("a message to oneself is one message")
    from spmdlab import p2p

    big = np.arange(200_000, dtype=np.float64) + spmd_index()
    step = p2p._Rendezvous.step

    def interrupted(self):
        monkeypatch.setattr(p2p._Rendezvous, "step", step)
        raise KeyboardInterrupt

    monkeypatch.setattr(p2p._Rendezvous, "step", interrupted)
    with pytest.raises(KeyboardInterrupt):
        if call == "spmd_send":
            spmd_send(big, right(), tag=84)
        else:
            spmd_send_receive(right(), left(), big, tag=84)
    spmd_send(np.array([7, 8, 9]), right(), tag=84)
    spmd_send("after", right(), tag=84)
    got = spmd_receive(left(), 84)
    assert got.shape == big.shape and (got == big - spmd_index() + left()).all(), call
    assert spmd_receive(left(), 84).tolist() == [7, 8, 9]
    assert spmd_receive(left(), 84) == "after"
    spmd_barrier()


def test_a_send_in_two_parts_interrupted_between_them_sends_neither(monkeypatch):
    """A large pickled message goes as a head and then its bytes: a Ctrl-C that fell
    between the two sends (here: in the message count after the head's send) left the
    head alone, and the receiver took the next message for its bytes (an unpickling
    error, "Message truncated", or wrong values). Both now leave in one step or not at
    all."""
    if spmd_size() == 1:
        pytest.skip("a message to oneself is one message")
    interrupt_the_next_message_count(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        spmd_send({"a": np.arange(100_000.0)}, right(), tag=85)
    spmd_send({"b": np.arange(90_000.0) + spmd_index()}, right(), tag=85)
    spmd_send("after", right(), tag=85)
    got = spmd_receive(left(), 85)
    assert list(got) == ["b"] and (got["b"] == np.arange(90_000.0) + left()).all()
    assert spmd_receive(left(), 85) == "after"
    spmd_barrier()


def test_a_message_interrupted_as_it_is_posted_arrives_whole(monkeypatch):
    """A Ctrl-C raised as a message's send had been posted (here: in the message count
    after it): the request was dropped while active and its buffer freed, and MPI read
    the freed memory as it sent (56 KB: the receiver got other bytes, or an unpickling
    error). Its buffer is kept now."""
    if spmd_size() == 1:
        pytest.skip("a message to oneself is not sent through MPI")
    import gc

    interrupt_the_next_message_count(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        spmd_send(np.arange(7000.0) * spmd_index(), right(), tag=88)
    gc.collect()
    junk = [np.full(7016, -1.0).tobytes() for _ in range(100)]  # (the freed memory reused)
    spmd_barrier()
    got = spmd_receive(left(), 88)
    assert got.shape == (7000,) and (got == np.arange(7000.0) * left()).all()
    del junk
    spmd_barrier()


@pytest.mark.parametrize("first", [True, False])
def test_a_receive_interrupted_as_it_is_posted_loses_nothing(monkeypatch, first):
    """A Ctrl-C raised as a receive had been posted (here: as the start of the inbox's
    receive returned; ``first``: the receive from that worker is a new one): the receive
    was left active unrecorded, so it took the message nobody then received, and the
    next receive from that worker found it active (MPI's error) or waited for ever."""
    if spmd_size() == 1:
        pytest.skip("a message to oneself")
    from spmdlab import p2p

    started = p2p._Inbox.started

    def interrupted(self, comm, source, tag):
        request = started(self, comm, source, tag)
        monkeypatch.setattr(p2p._Inbox, "started", started)
        raise KeyboardInterrupt

    if first:  # (a fresh tag: the inbox's receive for it is made now)
        tag = 90
    else:
        tag = 91
        spmd_send("warm", right(), tag)
        assert spmd_receive(left(), tag) == "warm"
    monkeypatch.setattr(p2p._Inbox, "started", interrupted)
    with pytest.raises(KeyboardInterrupt):
        spmd_receive(left(), tag)
    spmd_barrier()
    spmd_send(np.arange(5) + spmd_index(), right(), tag)
    spmd_send("second", right(), tag)
    assert (spmd_receive(left(), tag) == np.arange(5) + left()).all()
    assert spmd_receive(left(), tag) == "second"
    spmd_barrier()


def _interrupt_after(monkeypatch, module, name, times=1):
    """Patch ``module.name`` so that its next call does its work and then raises
    KeyboardInterrupt (a Ctrl-C raised as a call returns, before its value is kept)."""
    real = getattr(module, name)

    def interrupted(*args, **kwargs):
        monkeypatch.setattr(module, name, real)
        real(*args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(module, name, interrupted)


def test_a_receive_from_any_worker_interrupted_as_its_probe_matched_loses_nothing(
        monkeypatch):
    """A receive from any worker finds its message with a matching probe (MPI's
    Improbe): a Ctrl-C raised as the probe returned (here: as the wait for it returned)
    dropped the matched message, which MPI hands to nobody else, and the next receive
    got the message after it. (A Ctrl-C raised once it is matched, as its size is read:
    test_a_receive_interrupted_as_it_reads_its_message_size_loses_nothing.)"""
    if spmd_size() == 1:
        pytest.skip("a message to oneself")
    from spmdlab import _wait

    spmd_barrier()
    if spmd_index() == 2:  # (once worker 1 waits for it)
        time.sleep(0.3)
        spmd_send("first", 1, tag=92)
        spmd_send("second", 1, tag=92)
    if spmd_index() == 1:
        _interrupt_after(monkeypatch, _wait, "spin")
        with pytest.raises(KeyboardInterrupt):
            spmd_receive(tag=92)
        assert spmd_probe(2, 92)
        assert spmd_receive(status=True) == ("first", 2, 92)
        assert spmd_receive(2, 92) == "second"
    spmd_barrier()


@pytest.mark.parametrize("source", ["given", "any"])
def test_a_receive_interrupted_once_its_message_came_loses_nothing(monkeypatch, source):
    """A Ctrl-C raised after a receive completed, before its value was made (here: in
    the message count): the message was dropped, and the next receive got the one after
    it."""
    if spmd_size() == 1:
        pytest.skip("a message to oneself")
    spmd_send(np.arange(3) + spmd_index(), right(), tag=93)
    spmd_send("second", right(), tag=93)
    spmd_barrier()
    interrupt_the_next_message_count(monkeypatch)
    src = left() if source == "given" else None
    with pytest.raises(KeyboardInterrupt):
        spmd_receive(src, 93)
    got, sender, tag = spmd_receive(src, 93, status=True)
    assert (sender, tag) == (left(), 93) and (got == np.arange(3) + left()).all()
    assert spmd_receive(left(), 93) == "second"
    spmd_barrier()


@pytest.mark.parametrize("source", ["given", "any"])
def test_a_receive_interrupted_as_it_reads_its_message_size_loses_nothing(monkeypatch,
                                                                          source):
    """A Ctrl-C raised as the size of a message received (or matched, from any worker)
    was read (MPI's Get_count) dropped the message: the next receive got the one after
    it."""
    if spmd_size() == 1:
        pytest.skip("a message to oneself")
    from mpi4py import MPI

    from spmdlab import p2p

    armed = [True]

    class Status(MPI.Status):
        def Get_count(self, datatype=MPI.BYTE):
            count = super().Get_count(datatype)
            if armed:
                armed.clear()
                raise KeyboardInterrupt
            return count

    class Proxy:  # spmdlab's MPI, its receives' status read as above
        def __getattr__(self, name):
            return Status if name == "Status" else getattr(MPI, name)

    spmd_send(("first", spmd_index()), right(), tag=96)
    spmd_send("second", right(), tag=96)
    spmd_barrier()
    src = left() if source == "given" else None
    monkeypatch.setattr(p2p, "MPI", Proxy())
    with pytest.raises(KeyboardInterrupt):
        spmd_receive(src, 96)
    monkeypatch.undo()
    assert spmd_receive(src, 96) == ("first", left())
    assert spmd_receive(left(), 96) == "second"
    spmd_barrier()


@pytest.mark.parametrize("where", ["before", "after"])
@pytest.mark.parametrize("kind", ["pickled", "array"])
def test_a_receive_interrupted_as_it_posts_the_bytes_that_follow_loses_nothing(
        monkeypatch, where, kind):
    """A message larger than the inbox comes as a head, then its bytes (``kind``: a
    large pickled value, sent whole; a large array, by rendezvous), which the receiver
    posts a receive for once it has the head. A Ctrl-C raised ``before`` that receive
    was posted: nothing took the bytes, and the next receive from that worker took them
    for its message ("Message truncated", or wrong values); raised ``after`` it (as
    Irecv returned): the request was dropped while active, the bytes went into a
    buffer recycled for a later result, and the message was lost."""
    if spmd_size() == 1:
        pytest.skip("a message to oneself is one message")
    from spmdlab import _pack, p2p

    big = np.arange(200_000, dtype=np.float64) + spmd_index()
    value = {"a": big} if kind == "pickled" else big
    spmd_send(value, right(), tag=94)
    spmd_send("second", right(), tag=94)
    spmd_barrier()
    if where == "before":
        _interrupt_after(monkeypatch, _pack, "begin_whole")
    else:  # (the receive is posted just before the clear-to-send answer, or the return)
        _interrupt_after(monkeypatch, p2p, "_Following")
    with pytest.raises(KeyboardInterrupt):
        spmd_receive(left(), 94)
    got = spmd_receive(left(), 94)
    array = got["a"] if kind == "pickled" else got
    assert (array == big - spmd_index() + left()).all()
    assert spmd_receive(left(), 94) == "second"
    spmd_barrier()


def test_an_exchange_interrupted_once_its_message_came_loses_nothing(monkeypatch):
    """``spmd_send_receive`` of a large array probes for its message while its own
    leaves: a Ctrl-C raised once the message came (here: as its value was made) dropped
    it, and the next receive got the one after it."""
    if spmd_size() == 1:
        pytest.skip("a message to oneself is one message")
    from spmdlab import _pack

    big = np.arange(1 << 17, dtype=np.float64) + spmd_index()
    spmd_send(("first", spmd_index()), right(), tag=95)
    spmd_send("second", right(), tag=95)
    spmd_barrier()
    _interrupt_after(monkeypatch, _pack, "decode")
    with pytest.raises(KeyboardInterrupt):
        spmd_send_receive(right(), left(), big, tag=95)
    assert spmd_receive(left(), 95) == ("first", left())
    assert spmd_receive(left(), 95) == "second"
    assert (spmd_receive(left(), 95) == big - spmd_index() + left()).all()
    spmd_barrier()


@pytest.mark.parametrize("size", [3, 100_000])
def test_a_ctrl_c_while_waiting_for_the_send_lock_does_not_keep_it(size):
    """A Ctrl-C that comes while the program thread waits for the send lock (another
    thread's message is leaving) is raised as the lock is taken: it was raised outside
    the ``try`` that releases it, and the lock was held for ever (every later send of
    another thread hung)."""
    import signal

    from spmdlab import p2p

    taken, go = threading.Event(), threading.Event()

    def holder():
        with p2p._SENDING:
            taken.set()
            go.wait(10)

    other = threading.Thread(target=holder)
    other.start()
    taken.wait(10)

    def interrupt():  # (to the other thread: this one's wait for the lock goes on)
        time.sleep(0.1)
        signal.pthread_kill(other.ident, signal.SIGINT)
        time.sleep(0.1)
        go.set()

    # Python's own Ctrl-C (an earlier test's training monitor may have left its handler,
    # which asks the loop to stop instead of raising)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Thread(target=interrupt).start()
        x = np.full(size, spmd_index(), np.float64)
        with pytest.raises(KeyboardInterrupt):
            spmd_send(x, right(), tag=86)
            time.sleep(5)  # (the send went: the interrupt is raised here)
    finally:
        signal.signal(signal.SIGINT, previous)
    other.join()
    assert not p2p._SENDING._is_owned()
    sender = threading.Thread(target=spmd_send, args=(x + 100, right(), 86))
    sender.start()
    sender.join(10)
    assert not sender.is_alive(), "another thread's send waits for the lock"
    got = spmd_receive(left(), 86)
    if got.size == size and (got == left()).all():  # (the interrupted send may have gone)
        got = spmd_receive(left(), 86)
    assert got.size == size and (got == left() + 100).all()
    spmd_barrier()


def test_one_kind_in_two_families_alternately_keeps_each_family():
    """A numpy array and a tensor of the same dtype and shape, sent in turn: each short
    way that remembers the last kind sent or received (by dtype and shape) tells the
    families apart; arrays past 8 KiB join their own memory into the message, and a
    change after sending does not reach the receiver."""
    torch = pytest.importorskip("torch")
    for n in (4, 3000):
        for round_ in range(3):
            for family in ("numpy", "torch", "numpy"):
                x = np.arange(n, dtype=np.float32) + 10 * spmd_index() + round_
                sent = torch.from_numpy(x) if family == "torch" else x
                spmd_send(sent, right(), tag=90)
                x += 1000  # after the send: the message keeps the value sent
                got = spmd_receive(left(), 90)
                assert isinstance(got, torch.Tensor) == (family == "torch"), (n, family)
                want = np.arange(n, dtype=np.float32) + 10 * left() + round_
                assert (np.asarray(got) == want).all() and got.shape == (n,), (n, family)
    spmd_barrier()


class Tagged(np.ndarray):
    """An ndarray subclass (it must keep its class through a message)."""


def test_small_arrays_of_one_kind_in_every_layout_arrive_as_sent():
    """A kind of array sent before takes a shorter way (its kept header): a strided or
    Fortran-ordered view, a byte-swapped dtype, a subclass and a message to oneself of
    the same dtype and shape each still arrive with their values, dtype and shape."""
    base = np.arange(24.0).reshape(4, 6) + spmd_index()
    want = np.arange(24.0).reshape(4, 6) + left()
    cases = {
        "plain": (base, want),
        "strided": (base[::2, ::2].copy(), want[::2, ::2]),  # (4, 6) -> (2, 3), kept next
        "view of that kind": (base[:2, :3], want[:2, :3]),  # C order, not contiguous
        "fortran": (np.asfortranarray(base), want),
        "byte-swapped": (base.astype(">f8"), want.astype(">f8")),
        "subclass": (base.view(Tagged), want.view(Tagged)),
    }
    for round_ in range(2):  # the second round finds each kind's header kept
        for i, (name, (x, expected)) in enumerate(cases.items()):
            got = spmd_send_receive(right(), left(), x, tag=50 + i)
            assert type(got) is type(expected), (name, type(got))
            assert got.dtype == expected.dtype and got.shape == expected.shape, name
            assert (np.asarray(got) == np.asarray(expected)).all(), name
            assert got.flags.f_contiguous == (name == "fortran"), name  # its order kept
            spmd_send(x, right(), tag=60 + i)
            got = spmd_receive(left(), 60 + i)
            assert got.dtype == expected.dtype and (np.asarray(got) == expected).all(), name
            assert got.flags.f_contiguous == (name == "fortran"), name
            spmd_send(x, spmd_index(), tag=70 + i)  # to oneself
            assert (np.asarray(spmd_receive(spmd_index(), 70 + i)) == x).all(), name
    spmd_barrier()


def test_large_arrays_and_tensors_keep_family_dtype_and_shape(backend):
    """Large values go by rendezvous (numpy arrays and plain CPU tensors, from their own
    memory), by a copy to oneself, or pickled (a tensor that is not its own numpy view):
    each arrives as what was sent, unchanged by writes after the send."""
    k = spmd_index()
    for dtype in (np.float32, np.int64):
        x = backend.make(np.full((600, 500), k, dtype=dtype))
        spmd_send(x, right(), tag=21)
        x[...] = -1  # spmd_send has returned: the message must not see this
        got = spmd_receive(left(), tag=21)
        same_family(got, x)
        assert tuple(got.shape) == (600, 500) and (backend.read(got) == left()).all()
        mine = spmd_send_receive(k, k, backend.make(np.full(BIG, k, dtype=dtype)), tag=22)
        assert (backend.read(mine) == k).all()  # to oneself
        ring = spmd_send_receive(right(), left(), backend.make(np.full(BIG, k, dtype=dtype)),
                                 tag=23)
        same_family(ring, x)
        assert (backend.read(ring) == left()).all()
    transposed = backend.make(np.arange(600 * 500, dtype=np.float64).reshape(600, 500) + k).T
    got = spmd_send_receive(right(), left(), transposed, tag=24)
    same_family(got, transposed)
    expected = (np.arange(600 * 500, dtype=np.float64).reshape(600, 500) + left()).T
    assert np.array_equal(backend.read(got), expected)
    spmd_barrier()


def test_arrays_of_32_to_64_kib_arrive_as_sent_with_every_worker_sending_first(backend):
    """Arrays of 32 KiB up to an inbox's 64 KiB, sent by every worker before any receives
    (so no send may wait for its receiver: MPI sends these by rendezvous; sent from the
    array's own memory, each send waited for the other's receive, a deadlock, tried and
    dropped 2026-11-28): each arrives as sent, in its family, unchanged by writes after
    the send, with tags out of order, in a ring, and to a receive from any worker."""
    k, n = spmd_index(), spmd_size()
    for i, count in enumerate((4096, 6000, 8192)):  # float64: 32 KiB, 47 KiB, 64 KiB
        x = backend.make(np.arange(count, dtype=np.float64) + k)
        spmd_send(x, right(), tag=31)
        x[...] = -1  # spmd_send has returned: the message must not see this
        spmd_send(backend.make(np.full(count, float(k))), right(), tag=32)
        later = spmd_receive(left(), tag=32)  # the later one first
        got = spmd_receive(left(), tag=31)
        same_family(got, x)
        assert np.array_equal(backend.read(got), np.arange(count, dtype=np.float64) + left())
        assert (backend.read(later) == left()).all()
        ring = spmd_send_receive(right(), left(), backend.make(np.full(count, float(k))),
                                 tag=33)
        assert (backend.read(ring) == left()).all()
        if n > 1:  # every other worker sends to worker 1, which receives from any
            # (a tag of each round's own: a worker ahead may send the next round's already)
            if k != 1:
                spmd_send(backend.make(np.full(count, float(k))), 1, tag=34 + i)
            else:
                seen = sorted(int(backend.read(spmd_receive(tag=34 + i))[0])
                              for _ in range(n - 1))
                assert seen == list(range(2, n + 1))
    spmd_barrier()


# -- a receive lands in a buffer of a fixed size (its inbox): a message larger than that
# travels as a head that says so, then itself; a message that comes as a receive gives
# up is kept for the next one

def test_messages_larger_than_an_inbox_arrive_whole_and_in_order():
    from spmdlab import p2p

    k, n = spmd_index(), spmd_size()
    big = {"rows": [list(range(i, i + 50)) for i in range(2000)], "from": k}  # pickled
    assert len(p2p._message(big, None, "", None)) > p2p._INBOX
    for i in range(3):  # a large one between small ones, same tag: order kept
        spmd_send(i, right(), tag=31)
        spmd_send(big, right(), tag=31)
    for i in range(3):
        assert spmd_receive(left(), 31) == i
        got = spmd_receive(left(), 31)
        assert got["from"] == left() and got["rows"][1999][49] == 1999 + 49
    spmd_send(big, k, tag=32)  # to oneself, received from any worker with any tag
    got, source, tag = spmd_receive(status=True) if n == 1 else \
        spmd_receive(k, status=True)
    assert (got["from"], source, tag) == (k, k, 32)
    # oversubscribed or not, an array between the inbox and the rendezvous size, and one
    # in a ring exchange
    x = np.full(40_000, float(k))  # 320 kB
    got = spmd_send_receive(right(), left(), {"x": x}, tag=33)
    assert (got["x"] == left()).all()
    spmd_barrier()


def test_a_message_that_comes_as_a_receive_gives_up_is_received_next(monkeypatch):
    """A receive whose wait raises (a timeout, a Ctrl-C) cancels its posted receive; one
    that had already taken a message keeps it for the next receive and probe, in order."""
    from spmdlab import _wait, p2p

    k, n = spmd_index(), spmd_size()
    if n == 1:
        pytest.skip("needs a sender other than this worker")
    if k == 2:
        spmd_send("first", 1, tag=41)
        spmd_send("second", 1, tag=41)
    spmd_barrier()  # both are waiting at worker 1: its next receive takes one at once
    if k == 1:
        def gives_up(*args, **kwargs):
            raise TimeoutError("given up")

        monkeypatch.setattr(p2p, "_QUICK_TESTS", 0)
        monkeypatch.setattr(_wait, "spin", gives_up)
        with pytest.raises(TimeoutError):
            spmd_receive(2, 41)
        monkeypatch.undo()
        assert spmd_probe(2, 41, status=True) == (True, 2, 41)
        assert spmd_receive(status=True) == ("first", 2, 41)
        assert spmd_receive(2, 41) == "second"
        with pytest.raises(TimeoutError):  # nothing there: the receive is cancelled
            monkeypatch.setattr(p2p, "_QUICK_TESTS", 0)
            monkeypatch.setattr(_wait, "spin", gives_up)
            spmd_receive(2, 42)
        monkeypatch.undo()
        assert not spmd_probe(2, 42)
    spmd_barrier()
    if k == 2:
        spmd_send("third", 1, tag=42)
    if k == 1:
        assert spmd_receive(2, 42) == "third"
    spmd_barrier()


def test_a_receive_that_timed_out_takes_nothing_from_the_next(monkeypatch):
    """A program may catch SpmdTimeoutError and receive again: the receive that gave up
    is withdrawn, so the message goes to the next one (it would wait for ever else)."""
    from spmdlab import SpmdTimeoutError, _env

    k, n = spmd_index(), spmd_size()
    if n == 1:
        pytest.skip("needs a sender other than this worker")
    if k == 1:
        monkeypatch.setattr(_env, "TIMEOUT", 0.3)
        with pytest.raises(SpmdTimeoutError, match="no message from worker 2"):
            spmd_receive(2, 43)
        monkeypatch.setattr(_env, "TIMEOUT", 20.0)  # (a failure, not a hang)
    spmd_barrier()
    if k == 2:
        spmd_send("after", 1, tag=43)
    if k == 1:
        assert spmd_receive(2, 43) == "after"
    spmd_barrier()


def test_a_receive_that_gives_up_as_a_large_message_follows_keeps_it(monkeypatch):
    """A receive whose wait raises (a timeout, a Ctrl-C) once a large message's first
    part has come, its bytes still on their way, keeps the message for the next receive:
    it was lost, the next receive took the sender's next message instead (tester C)."""
    from spmdlab import _wait

    k, n = spmd_index(), spmd_size()
    if n == 1:
        pytest.skip("needs a sender other than this worker")
    expected = np.arange(1 << 20, dtype=np.float64)
    for x in (expected, {"x": expected}):  # (by rendezvous; a head, then the rest)
        if k == 2:
            spmd_send(x, 1, tag=44)
            spmd_send("next", 1, tag=44)
        spmd_barrier()  # both first parts wait at worker 1
        if k == 1:
            def gives_up(*args, **kwargs):
                raise TimeoutError("given up")

            monkeypatch.setattr(_wait, "wait_body", gives_up)  # (the rest's wait)
            with pytest.raises(TimeoutError):
                spmd_receive(2, 44)
            monkeypatch.undo()
            assert spmd_probe(2, 44, status=True) == (True, 2, 44)
            got = spmd_receive(2, 44)
            assert np.array_equal(got["x"] if isinstance(x, dict) else got, expected)
            assert spmd_receive(2, 44) == "next"
        spmd_barrier()


def test_numpy_scalars_of_one_type_and_other_dtypes_arrive_as_sent():
    # one scalar type holds many dtypes (datetime64's units, str_'s lengths, void's
    # fields): a kept header must be found by the dtype, not the type alone
    values = [np.datetime64("2020-01-01"), np.datetime64("2020-01-01T12:34:56"),
              np.timedelta64(5, "D"), np.timedelta64(5, "s"), np.str_("ab"),
              np.str_("abcdef"), np.bytes_(b"a"), np.bytes_(b"abc"),
              np.array([(1, 2.0)], dtype=[("a", "i4"), ("b", "f8")])[0],
              np.array([(1, 2.0, 3)], dtype=[("a", "i4"), ("b", "f8"), ("c", "u1")])[0]]
    for _ in range(2):
        for x in values:
            spmd_send(x, right(), tag=4)
            got = spmd_receive(left(), tag=4)
            assert type(got) is type(x) and got.dtype == x.dtype and got == x
            got = spmd_send_receive(right(), left(), x, tag=5)
            assert type(got) is type(x) and got.dtype == x.dtype and got == x


def test_arrays_of_dtypes_numpy_exports_no_buffer_of_arrive_as_sent_at_every_size():
    # a datetime or structured array sent twice (the second time by the kept header's
    # way, which joins the array's own memory from 8 KiB: numpy exports no buffer of a
    # datetime's), at sizes either side of 8 KiB and of one inbox's 64 KiB
    for dtype in ("M8[D]", "m8[s]", [("x", "i4"), ("y", "f8")], ">f8"):
        for n in (3, 1000, 1100, 8190, 8192, 8200):
            x = np.arange(n).astype(dtype)
            for _ in range(2):
                spmd_send(x, right(), tag=8)
                got = spmd_receive(left(), tag=8)
                assert got.dtype == x.dtype and got.shape == x.shape and (got == x).all()
    spmd_barrier()


def test_large_arrays_of_dtypes_mpi_has_no_type_for_arrive_as_sent():
    # a byte-swapped, datetime or structured array large enough to leave from its own
    # memory (MPI's buffer interface refuses their formats)
    for dtype in (">f8", ">i4", "M8[s]", [("x", "i4"), ("y", "f8")]):
        x = np.arange(BIG).astype(dtype)
        spmd_send(x, right(), tag=6)
        got = spmd_receive(left(), tag=6)
        assert got.dtype == x.dtype and got.shape == x.shape and (got == x).all()
        got = spmd_send_receive(right(), left(), x, tag=7)
        assert got.dtype == x.dtype and (got == x).all()
    spmd_barrier()


def _swapped_values(k):
    swapped = (np.arange(24.0).reshape(4, 6) + k).astype(">f8")
    return {
        "strided 2-D": swapped[:, ::2],
        "strided in a dict": {"a": (np.arange(12) + k).astype(">i8")[::3]},
        "datetime in a list": [(np.arange(6) + k).astype(">M8[s]").reshape(2, 3)],
        "transposed complex": (np.arange(12) + k).astype(">c8").reshape(3, 4)[::2, ::-1].T,
        "strings": np.array([["ab", "cd"], ["ef", str(k)]], dtype=">U3")[:, ::-1],
        "subclass": (np.arange(6) + k).astype(">f4").reshape(2, 3).view(Tagged),
        "masked": np.ma.masked_array((np.arange(3) + k).astype(">i4"), mask=[0, 1, 0]),
        "fortran": np.asfortranarray(swapped),
    }


def _the_array(x):
    return x["a"] if type(x) is dict else x[0] if type(x) is list else x


def test_byte_swapped_arrays_that_travel_by_pickle_keep_their_byte_order():
    # numpy's own pickle gives a byte-swapped array back in the machine's order unless it
    # passes the array's buffer as it is: a strided 2-D view, one inside a dict or list,
    # a datetime, a subclass arrived as float64, datetime64, ... (the values were right)
    k = spmd_index()
    mine, theirs = _swapped_values(k), _swapped_values(left())
    for i, (name, x) in enumerate(mine.items()):
        spmd_send(x, k, tag=100 + i)  # to oneself
        for got, want in ((spmd_send_receive(right(), left(), x, tag=90 + i), theirs[name]),
                          (spmd_receive(k, 100 + i), x)):
            assert type(got) is type(want), name
            got, want = _the_array(got), _the_array(want)
            assert type(got) is type(want), name
            assert want.dtype.byteorder == ">", name
            assert got.dtype.str == want.dtype.str, (name, got.dtype, want.dtype)
            assert got.shape == want.shape and (got == want).all(), name
            assert got.flags.f_contiguous == want.flags.f_contiguous or want.ndim < 2, name
            if name == "masked":
                assert (got.mask == want.mask).all()
    spmd_barrier()


def test_sparse_tensors_arrive_as_sent():
    # torch pickles a sparse tensor, but the message refused it ("cannot be pickled:
    # can't convert Sparse layout tensor to numpy"); torch's own pickle also drops its
    # requires_grad and its Parameter, which a dense tensor keeps
    torch = pytest.importorskip("torch")

    def values(k):
        dense = torch.eye(4) * k
        return [dense.to_sparse(), {"w": dense.to_sparse().requires_grad_()},
                torch.nn.Parameter(dense.to_sparse()),
                dense.to(torch.bfloat16).to_sparse()]

    for i, (x, want) in enumerate(zip(values(spmd_index()), values(left()))):
        got = spmd_send_receive(right(), left(), x, tag=110 + i)
        assert type(got) is type(want)
        got, want = (got["w"], want["w"]) if type(want) is dict else (got, want)
        assert type(got) is type(want) and got.layout == want.layout
        assert got.dtype == want.dtype and got.requires_grad == want.requires_grad
        assert torch.equal(got.detach().to_dense(), want.detach().to_dense())
    spmd_barrier()


def test_receives_that_wait_for_each_other_raise_a_deadlock_on_every_worker():
    if spmd_size() == 1:
        pytest.skip("a receive from oneself with nothing sent raises at once")
    with pytest.raises(SpmdDeadlockError) as info:
        spmd_receive(left(), tag=11)  # every worker receives first: nobody sends
    text = str(info.value)
    assert f"spmd_receive (worker {spmd_index()} of {spmd_size()}): deadlock" in text
    assert f"worker {spmd_index()} (this one) waits in spmd_receive at " in text
    assert f"for a message from worker {left()} (tag 11)" in text
    spmd_barrier()
    spmd_send(spmd_index(), right(), tag=11)  # nothing was taken from the next messages
    assert spmd_receive(left(), tag=11) == left()


def test_a_receive_from_a_worker_waiting_in_a_collective_is_a_deadlock():
    if spmd_size() == 1:
        pytest.skip("needs a second worker")
    if spmd_index() == 1:
        spmd_barrier()  # the others join it once their receives have raised
        return
    others = "worker 2" if spmd_size() == 2 else "workers 2"
    with pytest.raises(SpmdDeadlockError, match=f"worker 1 waits in spmd_barrier at .* "
                                                f"for {others}.* to join it"):
        spmd_receive(1)
    spmd_barrier()


def test_a_receive_from_a_worker_that_computes_is_no_deadlock():
    # worker 1 computes for 3 s (the receivers look 1 and 2 s into their waits) while,
    # among 3 workers or more, worker 2 waits in the barrier
    if spmd_size() == 1:
        pytest.skip("needs a second worker")
    receivers = [2] if spmd_size() == 2 else list(range(3, spmd_size() + 1))
    if spmd_index() == 1:
        time.sleep(3.0)
        spmd_send("late", receivers)
    elif spmd_index() in receivers:
        assert spmd_receive(1) == "late"
    spmd_barrier()


def test_a_receive_from_a_worker_whose_daemon_thread_sends_is_no_deadlock():
    # worker 1 receives from worker 2, which waits for what a daemon thread of worker 1
    # sends 3 s later (the receivers look 1 and 2 s into their waits)
    if spmd_size() == 1:
        pytest.skip("needs a second worker")
    if spmd_index() == 1:
        def later():
            time.sleep(3.0)
            spmd_send("late", 2, tag=12)

        thread = threading.Thread(target=later, daemon=True)
        thread.start()
        assert spmd_receive(2, tag=13) == "answer"
        thread.join()
    elif spmd_index() == 2:
        assert spmd_receive(1, tag=12) == "late"
        spmd_send("answer", 1, tag=13)
    spmd_barrier()


def test_a_receive_from_a_worker_whose_listener_sends_is_no_deadlock():
    # as above, but what worker 1 sends is sent by its DataQueue listener when worker 3
    # sends an item, 3 s later
    if spmd_size() < 3:
        pytest.skip("needs a third worker")
    q = DataQueue()
    listener = q.after_each(lambda item: spmd_send(item, 2, tag=14))
    try:
        if spmd_index() == 1:
            assert spmd_receive(2, tag=15) == "item"
        elif spmd_index() == 2:
            spmd_send(spmd_receive(1, tag=14), 1, tag=15)
        elif spmd_index() == 3:
            time.sleep(3.0)
            q.send("item")
        spmd_barrier()
    finally:
        listener.remove()


@pytest.mark.mpi(min_size=4)
def test_a_worker_that_looks_for_a_deadlock_still_receives(monkeypatch):
    # worker 2 looks 0.5 s into its receive, and waits for an answer from worker 3, whose
    # C call holds the GIL for 3 s; meanwhile worker 1 (told by worker 4) sends to worker
    # 2, then waits for its reply, and looks 0.2 and 0.4 s into that wait
    import ctypes
    from spmdlab import _env

    k = spmd_index()
    monkeypatch.setattr(_env, "DEADLOCK_CHECK", {1: 60.0, 2: 0.5}.get(k, 1.0))
    spmd_barrier()
    if k == 1:
        assert spmd_receive(tag=20) == "go"
        spmd_send("first", 2, tag=21)
        monkeypatch.setattr(_env, "DEADLOCK_CHECK", 0.2)
        assert spmd_receive(2, tag=22) == "reply"
    elif k == 2:
        assert spmd_receive(1, tag=21) == "first"
        spmd_send("reply", 1, tag=22)
    elif k == 3:
        ctypes.PyDLL(None).sleep(3)
    elif k == 4:
        time.sleep(0.8)
        spmd_send("go", 1, tag=20)
    spmd_barrier()


def test_the_deadlock_rule_sees_only_waits_that_no_worker_can_end():
    from spmdlab._stall import _stuck

    def recv(*ranks, count=2):  # (count: the collectives of workers 1-3 so far)
        return f"waits|spmd_receive|0|f.py:1|1.0|recv:{','.join(map(str, ranks))}:*|" \
            f"0-2={count}"

    coll = "waits|spmd_barrier|3|f.py:2|2.0|coll:0-2:3|0-2=3"  # collective #3
    runs = "runs|f.py:9 in main()|3|spmd_plus"
    assert _stuck({0: recv(1), 1: recv(0)}) == {0, 1}
    assert _stuck({0: recv(1), 1: runs}) == set()  # worker 1 may still send
    assert _stuck({0: recv(1), 1: ""}) == set()  # (no answer: it may still send)
    assert _stuck({0: coll, 1: coll, 2: coll}) == set()  # all there: data on its way
    assert _stuck({0: coll, 1: recv(0), 2: recv(0)}) == {0, 1, 2}
    # workers that have done their part of collective #3 (the root of a broadcast) and
    # receive: the data reaches worker 1 without them
    assert _stuck({0: coll, 1: recv(0, count=3), 2: recv(0, count=3)}) == set()
    # worker 2 can never join: it waits for worker 1, which waits in the collective
    assert _stuck({0: coll, 1: recv(0), 2: runs}) == {0, 1}
    assert _stuck({0: coll, 1: recv(2), 2: runs}) == set()  # worker 3 may send to 2
    assert _stuck({0: recv(1, 2), 1: recv(0), 2: runs}) == set()  # (any of them)
    sending = "waits|spmd_send|0|f.py:4|3.0|-"  # a large send: the receiver sees it
    assert _stuck({0: recv(1), 1: sending}) == set()
    # worker 2 waits in a collective of workers 1 and 2 that worker 1, waiting in one of
    # workers 1-3 it has reached, cannot join (nor worker 3: it waits for worker 2)
    inner = "waits|spmd_barrier|1|f.py:5|4.0|coll:0-1:1|0-2=2;0-1=1"
    outer = "waits|spmd_barrier|3|f.py:2|2.0|coll:0-2:3|0-2=3;0-1=0"
    assert _stuck({0: outer, 1: inner, 2: coll}) == {0, 1, 2}
