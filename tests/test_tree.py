"""The fixed tree over worker numbers that carries agreement and small reductions among
more than SPMDLAB_TREE_ABOVE workers (spmdlab/_tree.py): its schedule, its fixed
bracketing, its error reports and its O(log N) counts."""

import json

import pytest

import numpy as np

from conftest import run_job, tree_fold

pytestmark = pytest.mark.mpi_skip  # jobs of their own

FORCED = {"SPMDLAB_TREE_ABOVE": "0"}  # the tree at any worker count


def simulate(size):
    """Run ``schedule`` for every worker and return what each ends up holding (a set of
    worker numbers) and the expression (nested pairs) it computed."""
    from spmdlab._tree import schedule

    plans = [schedule(size, r) for r in range(size)]
    held = [(frozenset([r]), r) for r in range(size)]
    for r, (pre, _, _) in enumerate(plans):  # pre-pairs: the left neighbour folds in first
        if pre and pre[0] == "recv":
            assert plans[pre[1]][0] == ("send", r)
            held[r] = (held[pre[1]][0] | held[r][0], (held[pre[1]][1], held[r][1]))
    steps = max(len(p[1]) for p in plans)
    for s in range(steps):
        new = list(held)
        for r, (pre, partners, _) in enumerate(plans):
            if pre and pre[0] == "send":
                assert partners == []
                continue
            other, other_is_lower = partners[s]
            assert plans[other][1][s] == (r, not other_is_lower)  # partners agree
            assert (other < r) == other_is_lower
            mine, theirs = held[r], held[other]
            assert not mine[0] & theirs[0]
            lo, hi = (theirs, mine) if other_is_lower else (mine, theirs)
            new[r] = (mine[0] | theirs[0], (lo[1], hi[1]))
        held = new
    for r, (pre, _, post) in enumerate(plans):  # the result goes back to the senders
        if post is not None:
            assert plans[post][0] == ("send", r)
            held[post] = held[r]
    return held, steps


@pytest.mark.parametrize("size", list(range(1, 34)) + [64, 100, 1024])
def test_every_worker_ends_with_the_same_fold_of_all(size):
    held, steps = simulate(size)
    assert steps == (size.bit_length() - 1)  # log2 of the largest power of two up to N
    assert {h[0] for h in held} == {frozenset(range(size))}
    assert len({repr(h[1]) for h in held}) == 1  # one bracketing, on every worker

    def flat(e):
        return [e] if isinstance(e, int) else flat(e[0]) + flat(e[1])
    assert flat(held[0][1]) == list(range(size))  # lower op upper: in worker order


def bracketing(values):
    """The documented bracketing (conftest.tree_fold, written apart from the code)."""
    return float(tree_fold([np.array(v) for v in values], np.add))


SOURCE = """
import json, sys
import numpy as np
from spmdlab import (spmd_plus, spmd_index, spmd_size, spmd_cat, spmd_broadcast,
                     spmd_reduce, spmd_barrier, DataQueue)
from spmdlab import _count, _world
n, k = spmd_size(), spmd_index()
assert _world.current().exchange.tree
out = {}
VALUES = [1e16, 1.0, -1e16, 1.0, 3.0, 1e-3, -2.5, 1e8, 7.0, 0.1, 0.2, 0.3]
x = spmd_plus(VALUES[k - 1])
out["sum"] = x
assert len(set(spmd_cat(np.array([x])).tolist())) == 1  # the same bits everywhere
out["int"] = spmd_plus(2**62 + k)  # exact Python ints past 64 bits
out["array"] = spmd_plus(np.arange(5.0) * k).tolist()
out["max"] = spmd_reduce(max, k)
out["dict"] = spmd_plus({"a": k, "b": np.ones(3) * k})["a"]
out["cat"] = spmd_cat(np.array([k, -k])).tolist()
out["bcast"] = spmd_broadcast(n, {"from": k})
out["big"] = float(spmd_plus(np.ones(100_000) * k)[0])
# over 64 KiB: in shared memory on a node, by halves across nodes: the same bracketing
LARGE = [0.5, 0.25, 0.25, 1e16, -1e16]  # at 5 workers the left fold gives 0, the tree 1
large = spmd_plus(np.full(100_003, LARGE[k - 1]))
assert len(set(large.tolist())) == 1
out["large"] = float(large[0])
out["large_max"] = float(spmd_reduce(np.maximum, np.arange(100_003.0) * k)[-1])
got = []
q = DataQueue()
q.after_each(got.append)
q.send(k)
q.flush_all()
out["queue"] = sorted(got)
try:
    spmd_plus(np.ones(3 if k == n else 4))  # worker n disagrees
except Exception as e:
    out["mismatch"] = [type(e).__name__, str(e)]
_count.ON = True
_count.reset()
for _ in range(10):
    spmd_plus(1.0)
c = _count.snapshot()
_count.ON = False
out["received"] = c["received_bytes"] / 10
out["records"] = c["records_examined"] / 10
print("OUT", k, json.dumps(out), flush=True)
"""


@pytest.mark.parametrize("n, shm", [(3, True), (5, True), (5, False)])
def test_collectives_along_the_tree(n, shm):
    env = dict(FORCED) if shm else dict(FORCED, SPMDLAB_SHM_BYTES="0")  # as across nodes
    job = run_job(SOURCE, n, env=env, timeout=120)
    assert job.returncode == 0, job.stderr
    outs = {int(line.split()[1]): json.loads(line.split(None, 2)[2])
            for line in job.stdout.splitlines() if line.startswith("OUT ")}
    assert sorted(outs) == list(range(1, n + 1)), job.stdout
    values = [1e16, 1.0, -1e16, 1.0, 3.0][:n]
    for k, out in outs.items():
        assert out["sum"] == bracketing(values)  # the fixed tree's bits, documented
        assert out["int"] == n * 2**62 + n * (n + 1) // 2
        assert out["array"] == [i * n * (n + 1) / 2 for i in range(5)]
        assert out["max"] == n and out["dict"] == n * (n + 1) // 2
        assert out["cat"] == [v for j in range(1, n + 1) for v in (j, -j)]
        assert out["bcast"] == {"from": n} and out["big"] == n * (n + 1) / 2
        large = [0.5, 0.25, 0.25, 1e16, -1e16][:n]
        assert out["large"] == bracketing(large), (out["large"], bracketing(large))
        assert out["large_max"] == n * 100_002
        assert out["queue"] == (list(range(1, n + 1)) if k == 1 else [])
        name, text = out["mismatch"]
        assert name == "SpmdMismatchError", text
        assert text.startswith(f"spmd_plus (worker {k} of {n}): collective #"), text
        assert (f"workers 1-{n - 1}: spmd_plus(float64 (4,) numpy) at " in text or
                n == 3 and "workers 1, 2: spmd_plus(float64 (4,) numpy) at " in text), text
        assert f"worker {n}: spmd_plus(float64 (3,) numpy) at " in text, text
        # what a scalar spmd_plus receives: one record per step of the tree, not N
        steps = n.bit_length() - 1 + (1 if n & (n - 1) else 0)
        assert out["received"] <= 64 * steps, out["received"]
        assert out["records"] <= steps, out["records"]


def test_mismatch_names_call_sites_on_every_worker():
    job = run_job("""
from spmdlab import spmd_plus, spmd_cat, spmd_index
if spmd_index() == 2:
    spmd_cat(1)
else:
    spmd_plus(1)
""", 5, env=FORCED, timeout=120)
    assert job.returncode != 0
    text = job.stderr
    for k in range(1, 6):
        assert f"worker {k} of 5" in text, text
    assert "spmd_cat" in text and "spmd_plus" in text, text


@pytest.mark.parametrize("value", ["1.0", "np.ones(100_000)"])
def test_a_finished_worker_is_named_instead_of_a_hang(value):
    job = run_job(f"""
import numpy as np
from spmdlab import spmd_plus, spmd_index
x = spmd_plus(np.ones(100_000))  # by halves, every worker
if spmd_index() != 4:
    spmd_plus({value})
""", 5, env=dict(FORCED, SPMDLAB_SHM_BYTES="0"), timeout=120)
    assert job.returncode != 0
    assert "worker 4 finished the program" in job.stderr, job.stderr


@pytest.mark.parametrize("inline", [None, "0"])
def test_ints_in_a_structure_of_one_leaf_sum_as_int64_along_the_tree(inline):
    # (tester T3) a dict or list of one Python int summed exactly along the tree, past
    # 2**63, where the record's fold (a few workers) and a dict of two ints wrap as int64,
    # as documented (semantics.md); a lone int sums exactly on every path, also where
    # SPMDLAB_INLINE_BYTES=0 keeps the values out of the record
    env = dict(FORCED) if inline is None else dict(FORCED, SPMDLAB_INLINE_BYTES=inline)
    job = run_job("""
from spmdlab import spmd_plus, spmd_size
n = spmd_size()
wrapped = (n * 2 ** 62 + 2 ** 63) % 2 ** 64 - 2 ** 63
assert spmd_plus({"a": 2 ** 62}) == {"a": wrapped}, spmd_plus({"a": 2 ** 62})
assert spmd_plus([2 ** 62]) == [wrapped]
assert spmd_plus({"a": 2 ** 62, "b": 1}) == {"a": wrapped, "b": n}
assert spmd_plus(2 ** 62) == n * 2 ** 62
assert spmd_plus(2 ** 62, destination=1) in (n * 2 ** 62, None)
print("OK")
""", 3, env=dict(env, SPMDLAB_TIMEOUT="30"), timeout=120)
    assert job.returncode == 0, job.stderr
    assert job.stdout.count("OK") == 3, job.stdout


@pytest.mark.parametrize("n, shm", [(3, True), (5, False)])
def test_folds_that_meet_inf_and_minus_inf_raise_no_warning_on_some_workers(n, shm):
    """The tree's merges (in the record, by halves, in shared memory) fold under numpy's
    quiet state: an inf + -inf gives NaN on every worker, and under ``-W error`` no
    worker raises a RuntimeWarning mid-pass (the others then waited for it)."""
    env = dict(FORCED) if shm else dict(FORCED, SPMDLAB_SHM_BYTES="0")
    job = run_job("""
import warnings
import numpy as np
from spmdlab import spmd_plus, spmd_reduce, spmd_index
warnings.simplefilter("error")
k = spmd_index()
for size in (1, 3, 100_003):
    x = np.full(size, np.inf if k == 1 else -np.inf)
    for value in (x, float(x[0]), np.float32(3e38)) if size == 1 else (x,):
        assert np.isnan(spmd_plus(value)).all() or np.isinf(spmd_plus(value)).all()
    assert np.isnan(spmd_reduce(np.add, x)).all()
    assert np.isinf(spmd_reduce(np.multiply, np.full(size, np.float32(3e38)))).all()
print("OK", k)
""", n, env=dict(env, SPMDLAB_TIMEOUT="30"), timeout=120)
    assert job.returncode == 0, job.stderr
    assert "RuntimeWarning" not in job.stderr, job.stderr
    assert job.stdout.count("OK") == n, job.stdout


def test_a_step_left_before_it_completes_keeps_its_requests(monkeypatch):
    # a Ctrl-C caught in a step of the tree dropped its requests, still active in MPI, and
    # their buffers with them (the receive's, and the send's, whose wait never began): the
    # partner's bytes would land in freed memory (as a gather's did, tester N); both are
    # kept until they complete, and the workers' collectives are lost
    import types

    from mpi4py import MPI

    from spmdlab import _tree, _wait

    def interrupted(request, scope, call, *args, **kwargs):
        exc = KeyboardInterrupt()  # a Ctrl-C as the wait begins, as the wait takes it
        _wait.interrupted_wait(request, scope, call, exc, True)
        raise exc

    monkeypatch.setattr(_wait, "wait_body", interrupted)
    monkeypatch.setattr(_wait, "LEFT_ACTIVE", [])
    lost = []
    scope = types.SimpleNamespace(world_ranks=[0, 1], others=[1], lost=lost.append,
                                  who=lambda: "worker 1 of 2")
    comm = MPI.COMM_SELF.Dup()

    class Unmatched:  # a step whose partner has not come yet: neither request completes
        def Irecv(self, buf, peer, tag):
            return comm.Irecv(buf, 0, 101)

        def Isend(self, buf, peer, tag):
            return comm.Issend(buf, 0, 102)

    acc, other = np.ones(16, dtype=np.uint8), np.zeros(16, dtype=np.uint8)
    with pytest.raises(KeyboardInterrupt):
        _tree._exchange(scope, "spmd_plus", Unmatched(), acc, other, 0)
    assert lost and "was interrupted (KeyboardInterrupt)" in str(lost[0])
    (receive, _), (send, _) = _wait.LEFT_ACTIVE  # both kept (each holds its buffer)
    assert not receive.Test() and not send.Test()
    late = np.zeros(16, dtype=np.uint8)
    comm.Send(np.full(16, 7, dtype=np.uint8), 0, 101)  # the partner comes after all
    comm.Recv(late, 0, 102)
    receive.Wait()
    send.Wait()
    assert (other == 7).all() and (late == 1).all()
    comm.Free()
