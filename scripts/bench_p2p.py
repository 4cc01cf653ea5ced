"""Point-to-point messages: spmdlab against raw mpi4py on the same buffers, in one run.

    python scripts/bench_p2p.py                      # at 2 and 4 workers, and at 2x2
    python scripts/bench_p2p.py --workers 2 --quick

Measured, interleaved round by round:
- ping-pong: workers 2k-1 and 2k bounce a message (``spmd_send`` then ``spmd_receive``
  on one side, the reverse on the other) against raw ``comm.Send`` / ``comm.Recv`` of
  the same numpy buffer (preallocated, received in place); at 2x2 each pair spans the
  two nodes;
- ring: every worker calls ``spmd_send_receive(right, left, x)`` against a raw
  ``comm.Sendrecv`` into a preallocated buffer;
for float64 numpy arrays of 8 B to 4 MiB, a small dict of arrays (a MATLAB struct:
two 16-element float64 arrays and an int) against mpi4py's own ``comm.send`` /
``comm.recv`` of the same dict (pickle: how raw mpi4py sends a dict), and a float32 torch
tensor (4 KiB and 1 MiB) against raw ``Send`` / ``Recv`` of its buffer.
Each figure is the median over rounds of the mean one-way time (ping-pong: half a round
trip; ring: one exchange) on worker 1. Ratio: spmdlab time / raw time (1.00 is raw
speed; above is slower).

For numpy arrays up to 64 KiB the ping-pong also runs a *floor*: the least that a send
which returns at once and a receive of a message whose size the receiver does not know
cost through mpi4py, written out in raw mpi4py with no checks (a 16-byte header joined
to the array's bytes, ``Isend`` and ``Test``; an ``Irecv`` into a buffer as large as
any such message and a ``Test`` loop, the array copied back out of it; with more
workers than cores the loop yields the core at each look, as spmdlab's waits do).
spmdlab's messages need both (``spmd_send`` returns at once; ``spmd_receive`` takes
any value), so its ping-pong cannot be faster than the floor; "floor/raw" says how far
above raw that floor already is, and what is left between the floor and spmdlab is
the Python of its calls and checks. For a torch tensor the floor is raw mpi4py that
sends a tensor and gets a tensor back: ``comm.Send(t.numpy())``, and ``comm.Recv`` into
a new array made a tensor by ``torch.from_numpy`` (torch's own costs of each message:
about 0.5 us each way on this VM, which the raw ping-pong of the tensor's buffer pays
neither of). For a torch tensor the run also times raw mpi4py handed the tensors
themselves (``comm.Send(t)``, ``comm.Recv`` into a kept tensor), which mpi4py reads
through DLPack, and prints it on a line of its own.
"""

import os
import time

from _launch import emit, layout_name, main as bench_main

SIZES = [8, 64, 512, 4 << 10, 64 << 10, 1 << 20, 4 << 20]
FLOOR_UP_TO = 64 << 10  # the floor's ping-pong runs for numpy arrays up to this size


def worker(args):
    import numpy as np
    import torch
    from mpi4py import MPI

    import spmdlab

    comm = MPI.COMM_WORLD.Dup()
    rank, size = comm.Get_rank(), comm.Get_size()
    layout = layout_name()  # collective: every worker
    spmdlab.spmd_barrier()  # start spmdlab before timing
    rounds = 3 if args.quick else 9
    me = rank + 1
    partner = me + 1 if me % 2 else me - 1
    if partner > size:
        partner = None
    right, left = me % size + 1, (me - 2) % size + 1

    def timed(fn, reps):
        comm.Barrier()
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        return (time.perf_counter() - start) / reps

    def race(methods, budget):
        reps = {}
        for name, fn in methods.items():
            fn()
            once = timed(fn, 1)
            reps[name] = comm.bcast(max(3, min(3000, int(budget / max(once, 1e-7)))))
        samples = {name: [] for name in methods}
        names = list(methods)
        for r in range(rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                samples[name].append(timed(methods[name], reps[name]))
        return {name: float(np.median(v)) for name, v in samples.items()}

    def ping_pong(send, recv):
        """One round trip between the partners (the odd worker starts); idle otherwise."""
        if partner is None:
            return lambda: None
        if me % 2:
            return lambda: (send(), recv())
        return lambda: (recv(), send())

    budget = 0.02 if args.quick else 0.06
    results = []

    status = MPI.Status()

    def floor_send(x, dest, tag):
        buf = b"\0" * 16 + x.tobytes()
        request = comm.Isend(buf, dest, tag)
        if not request.Test():
            request.Wait()

    oversubscribed = size > (os.cpu_count() or 1)

    inbox = bytearray(FLOOR_UP_TO + 4096)

    def floor_recv(source, tag, dtype):
        request = comm.Irecv(inbox, source, tag)
        while not request.Test(status):  # (yielding the core at each look when
            if oversubscribed:           # oversubscribed, as spmdlab's waits do)
                os.sched_yield()
        return np.frombuffer(inbox[:status.Get_count(MPI.BYTE)], dtype, offset=16)

    def case(label, nbytes, x, raw_buf, raw_out, spmd_value=None, floor_pp=None,
             extra=None):
        value = x if spmd_value is None else spmd_value
        p = partner
        floor = floor_pp is not None or spmd_value is None and nbytes <= FLOOR_UP_TO
        methods = {
            "raw pp": ping_pong(lambda: comm.Send(raw_buf, p - 1, 5),
                                lambda: comm.Recv(raw_out, p - 1, 5)),
            "spmd pp": ping_pong(lambda: spmdlab.spmd_send(value, p, 5),
                                 lambda: spmdlab.spmd_receive(p, 5)),
            "raw ring": lambda: comm.Sendrecv(raw_buf, right - 1, 6, raw_out, left - 1, 6),
            "spmd ring": lambda: spmdlab.spmd_send_receive(right, left, value, 6),
        }
        if floor_pp is not None:
            methods["floor pp"] = ping_pong(*floor_pp)
        elif floor:
            methods["floor pp"] = ping_pong(lambda: floor_send(x, p - 1, 7),
                                            lambda: floor_recv(p - 1, 7, x.dtype))
        methods.update(extra or {})
        times = race(methods, budget)
        results.append({"case": label, "bytes": nbytes,
                        "raw pp": times["raw pp"] / 2, "spmd pp": times["spmd pp"] / 2,
                        "raw ring": times["raw ring"], "spmd ring": times["spmd ring"],
                        "floor pp": times["floor pp"] / 2 if floor else None,
                        "tensor pp": times["tensor pp"] / 2 if extra else None})

    for nbytes in SIZES:
        x = np.arange(nbytes // 8, dtype=np.float64)
        case(f"numpy {nbytes} B", nbytes, x, x, np.empty_like(x))
    struct = {"u": np.ones(16), "v": np.zeros(16), "step": 7}
    p = partner
    methods = {
        "raw pp": ping_pong(lambda: comm.send(struct, p - 1, 5),
                            lambda: comm.recv(source=p - 1, tag=5)),
        "spmd pp": ping_pong(lambda: spmdlab.spmd_send(struct, p, 5),
                             lambda: spmdlab.spmd_receive(p, 5)),
        "raw ring": lambda: comm.sendrecv(struct, right - 1, 6, None, left - 1, 6),
        "spmd ring": lambda: spmdlab.spmd_send_receive(right, left, struct, 6),
    }
    times = race(methods, budget)
    results.append({"case": "dict of 2 arrays + int", "bytes": 264,
                    "raw pp": times["raw pp"] / 2, "spmd pp": times["spmd pp"] / 2,
                    "raw ring": times["raw ring"], "spmd ring": times["spmd ring"]})
    for nbytes in (4 << 10, 1 << 20):
        t = torch.arange(nbytes // 4, dtype=torch.float32)
        buf = t.numpy()

        def tensor_recv(n=len(buf)):  # (a new tensor each time: the user keeps it)
            out = np.empty(n, np.float32)
            comm.Recv(out, partner - 1, 7)
            return torch.from_numpy(out)

        out_t = torch.empty_like(t)
        case(f"torch {nbytes} B", nbytes, buf, buf, np.empty_like(buf), spmd_value=t,
             floor_pp=(lambda t=t: comm.Send(t.numpy(), partner - 1, 7), tensor_recv),
             extra={"tensor pp": ping_pong(lambda t=t: comm.Send(t, partner - 1, 8),
                                           lambda o=out_t: comm.Recv(o, partner - 1, 8))})
    if rank == 0:
        emit({"workers": size, "layout": layout, "rows": results})


def human(nbytes):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def report(res):
    print(f"\n== {res['workers']} workers, layout {res['layout']} (nodes x workers per "
          f"node): one-way times in us; ratio = spmdlab / raw (1.00 is raw speed)")
    print(f"{'message':>24} {'raw pp':>9} {'spmd pp':>9} {'ratio':>6}   {'raw ring':>9} "
          f"{'spmd ring':>9} {'ratio':>6}   {'floor pp':>9} {'floor/raw':>9}")
    worst = {}
    for r in res["rows"]:
        label = r["case"]
        if label.startswith("numpy"):
            label = f"numpy {human(r['bytes'])}"
        elif label.startswith("torch"):
            label = f"torch {human(r['bytes'])}"
        pp, ring = r["spmd pp"] / r["raw pp"], r["spmd ring"] / r["raw ring"]
        kind = "dict" if label.startswith("dict") else "arrays"
        worst[kind] = max(worst.get(kind, 0), pp, ring)
        floor = "" if r.get("floor pp") is None else \
            f"   {r['floor pp'] * 1e6:9.1f} {r['floor pp'] / r['raw pp']:9.2f}"
        print(f"{label:>24} {r['raw pp'] * 1e6:9.1f} {r['spmd pp'] * 1e6:9.1f} {pp:6.2f}   "
              f"{r['raw ring'] * 1e6:9.1f} {r['spmd ring'] * 1e6:9.1f} {ring:6.2f}{floor}")
    print(f"worst ratio: arrays and tensors {worst['arrays']:.2f}x, dict "
          f"{worst['dict']:.2f}x raw")
    for r in res["rows"]:
        if r.get("tensor pp") is not None:
            print(f"torch {human(r['bytes'])}: raw mpi4py handed the tensors themselves "
                  f"(comm.Send(t), comm.Recv(out) into a kept tensor: mpi4py reads them "
                  f"through DLPack) takes {r['tensor pp'] * 1e6:.1f} us one-way; spmdlab's "
                  f"ping-pong is {r['spmd pp'] / r['tensor pp']:.2f}x that")


if __name__ == "__main__":
    bench_main(__file__, __doc__, worker, report, options=[
        ("--quick", dict(action="store_true", help="fewer rounds, for a check"))],
        workers=(2, 4, "2x2"))
