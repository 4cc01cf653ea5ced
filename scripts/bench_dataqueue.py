"""DataQueue against raw mpi4py isend/recv, and what an idle queue costs, in one run.

    python scripts/bench_dataqueue.py               # launches itself at 4 and 2 workers
    python scripts/bench_dataqueue.py --workers 4 --items 2000

At each worker count:
- idle cost: a loop of 1,000 ``spmd_plus(1.0)`` before any queue exists and after an
  idle DataQueue (and its receiver thread) exists; median of 41 loops each, ratio;
- throughput: every worker sends ``--items`` small items ``(worker, i)`` to worker 1;
  time until worker 1 holds all of them, checked complete and in order per sender.
  DataQueue (a listener collects them) against raw ``comm.isend`` + ``comm.recv`` loops
  of pickled objects; rounds alternate between the two;
- send cost: microseconds one ``send`` / ``isend`` call takes on the sender;
- latency: a ping-pong between workers 2 and 1 through queues (worker 1's listener
  answers into worker 2's PollableDataQueue) against raw ``send``/``recv``; half the
  round trip.

Before the runs it measures a *floor*: the one-way time of a ping-pong between two
processes that wait by sleeping (a blocking read of a pipe), on this machine, with
nothing else running. A raw ``recv`` spins on its core until the message comes; a queue
that must not burn a core while it waits (a worker waiting for a Stop) sleeps after a
short spin, and a sleeping wait cannot answer faster than the system wakes a process.
"""

import time

from _launch import emit, main as bench_main


def worker(args):
    import numpy as np
    from mpi4py import MPI

    from spmdlab import DataQueue, PollableDataQueue, spmd_barrier, spmd_plus

    comm = MPI.COMM_WORLD.Dup()
    rank, size = comm.Get_rank(), comm.Get_size()
    rounds = args.rounds

    def loop():
        spmd_barrier()
        start = time.perf_counter()
        for _ in range(1000):
            spmd_plus(1.0)
        return comm.bcast(time.perf_counter() - start)

    # idle cost: before any queue exists, then with an idle queue and its thread
    before = [loop() for _ in range(41)]
    idle = DataQueue()
    time.sleep(0.1)
    after = [loop() for _ in range(41)]

    # throughput: every worker sends n items to worker 1
    n = args.items
    q = DataQueue()
    got = []
    q.after_each(got.append)

    def queue_round():
        got.clear()
        spmd_barrier()
        start = time.perf_counter()
        for i in range(n):
            q.send((rank + 1, i))
        if rank == 0:
            while len(got) < n * size:
                time.sleep(0.0002)
            elapsed = time.perf_counter() - start
            ordered = all([i for s, i in got if s == k] == list(range(n))
                          for k in range(1, size + 1))
            result = (elapsed, len(got), ordered)
        else:
            result = None
        return comm.bcast(result)

    def raw_round():
        comm.Barrier()
        start = time.perf_counter()
        requests = [comm.isend((rank + 1, i), dest=0, tag=7) for i in range(n)]
        if rank == 0:
            items = [comm.recv(source=MPI.ANY_SOURCE, tag=7) for _ in range(n * size)]
            elapsed = time.perf_counter() - start
        MPI.Request.waitall(requests)
        return comm.bcast((elapsed, len(items)) if rank == 0 else None)

    queue_runs, raw_runs = [], []
    for _ in range(max(3, rounds // 3)):
        queue_runs.append(queue_round())
        raw_runs.append(raw_round())

    # send cost on the sender
    spmd_barrier()
    sink = DataQueue()
    start = time.perf_counter()
    for i in range(n):
        sink.send(i)
    send_us = (time.perf_counter() - start) / n * 1e6
    start = time.perf_counter()
    requests = [comm.isend(i, dest=0, tag=8) for i in range(n)]
    isend_us = (time.perf_counter() - start) / n * 1e6
    if rank == 0:
        for _ in range(n * size):
            comm.recv(source=MPI.ANY_SOURCE, tag=8)
    MPI.Request.waitall(requests)
    costs = comm.gather((send_us, isend_us), root=0)

    # latency: ping-pong 1 <-> 2 through queues, and raw
    ping = DataQueue()
    pong = PollableDataQueue.per_worker()
    ping.after_each(lambda item: pong[2].send(item))
    hops = 500
    queue_latency = raw_latency = None
    spmd_barrier()
    if rank == 1:
        for i in range(20):
            ping.send(i)
            pong.mine.poll(timeout=10)
        start = time.perf_counter()
        for i in range(hops):
            ping.send(i)
            assert pong.mine.poll(timeout=10) == i
        queue_latency = (time.perf_counter() - start) / hops / 2 * 1e6
    spmd_barrier()
    if rank in (0, 1):
        other = 1 - rank
        for i in range(20 + hops):
            if i == 20:
                start = time.perf_counter()
            if rank == 1:
                comm.send(i, dest=other, tag=9)
                comm.recv(source=other, tag=9)
            else:
                comm.send(comm.recv(source=other, tag=9), dest=other, tag=9)
        raw_latency = (time.perf_counter() - start) / hops / 2 * 1e6
    latencies = comm.gather((queue_latency, raw_latency), root=0)
    if rank == 0:
        emit({
            "workers": size, "items": n,
            "before": float(np.median(before)), "after": float(np.median(after)),
            "queue": queue_runs, "raw": raw_runs, "send_cost": costs,
            "latency": latencies[1]})
    del idle


def report(res):
    n, size = res["items"], res["workers"]
    print(f"\n== {size} workers")
    b, a = res["before"], res["after"]
    print(f"idle queue: 1,000 spmd_plus(1.0) take {b * 1e3:.2f} ms with no queue, "
          f"{a * 1e3:.2f} ms with an idle DataQueue: {100 * (a / b - 1):+.1f}%")
    q_times = sorted(r[0] for r in res["queue"])
    r_times = sorted(r[0] for r in res["raw"])
    q_med, r_med = q_times[len(q_times) // 2], r_times[len(r_times) // 2]
    complete = all(r[1] == n * size and r[2] for r in res["queue"])
    print(f"{size} workers x {n:,} items to worker 1: DataQueue {n * size / q_med:,.0f} "
          f"items/s ({q_med * 1e3:.1f} ms), raw isend/recv {n * size / r_med:,.0f} items/s "
          f"({r_med * 1e3:.1f} ms): ratio {r_med / q_med:.2f}; all {n * size:,} delivered "
          f"in order per sender in every round: {complete}")
    costs = res["send_cost"]
    print("send cost on the sender (us per call, worker 1..N): DataQueue.send "
          + ", ".join(f"{c[0]:.1f}" for c in costs) + "; raw isend "
          + ", ".join(f"{c[1]:.1f}" for c in costs))
    ql, rl = res["latency"]
    print(f"one-way latency (half a ping-pong between workers 2 and 1): DataQueue "
          f"{ql:.1f} us, raw send/recv {rl:.1f} us")


def sleeping_wait_floor(hops=5000):
    """One-way seconds of a ping-pong between two processes blocked in pipe reads."""
    import os

    to_child, from_parent = os.pipe()
    to_parent, from_child = os.pipe()
    pid = os.fork()
    if pid == 0:
        for _ in range(hops + 200):
            os.read(to_child, 1)
            os.write(from_child, b"x")
        os._exit(0)
    for _ in range(200):
        os.write(from_parent, b"x")
        os.read(to_parent, 1)
    start = time.perf_counter()
    for _ in range(hops):
        os.write(from_parent, b"x")
        os.read(to_parent, 1)
    seconds = (time.perf_counter() - start) / hops / 2
    os.waitpid(pid, 0)
    for fd in (to_child, from_parent, to_parent, from_child):
        os.close(fd)
    return seconds


if __name__ == "__main__":
    import sys

    floor = ""
    if "--worker" not in sys.argv:  # (the launcher: measured before any worker starts)
        floors = sorted(sleeping_wait_floor() for _ in range(3))
        floor = (f"\nfloor: a ping-pong between two processes that sleep while they wait "
                 f"(pipe reads) takes {floors[1] * 1e6:.1f} us one-way on this machine "
                 f"(median of 3: {', '.join(f'{f * 1e6:.1f}' for f in floors)})")
    bench_main(__file__, __doc__, worker, report, workers=(4, 2), options=[
        ("--items", dict(type=int, default=10_000)),
        ("--rounds", dict(type=int, default=9))], extra=floor)
