"""spmd_plus against raw mpi4py Allreduce and torch.distributed (gloo), in one run.

    python scripts/bench_collectives.py              # at 2 and 4 workers, and at 2x2
    python scripts/bench_collectives.py --workers 2 --quick

2x2 is two nodes of two workers simulated on this machine (MPICH's
MPIR_CVAR_NUM_CLIQUES=2): the traffic between the nodes leaves shared memory.

For each worker count it measures, interleaved round by round on the same buffers:
- a size sweep from 8 B to 64 MiB: ``spmd_plus(x)`` (agreement included, result a new
  array each call) vs raw ``comm.Allreduce(x, out)`` into a preallocated ``out`` vs
  ``dist.all_reduce(t)`` over gloo (in place). 8 B is one float64: ``spmd_plus`` of a
  Python float, against a raw Allreduce of a one-element float64 array;
- up to 4 MiB, ``spmd_cat(x)`` against a raw ``comm.Allgather`` into a preallocated
  buffer, and ``spmd_broadcast(1, x)`` against a raw ``comm.Bcast`` of the buffer;
- a nested dict of 214 float32 arrays (ResNet-50's parameters and batch-norm running
  means at half width): one ``spmd_plus`` vs one raw Allreduce per array vs one gloo
  all_reduce per array.
Each figure is the median over rounds (the order of the methods rotates every round) of
the mean time per call on worker 1. Ratios:
``spmd/raw`` throughput (>1 is faster than raw) and time.

Up to 1 KiB the sweep also runs a *floor*: the least a sum costs through mpi4py that
folds in worker order (bit-identical at every layout) and sees a mismatched call before
using any data, written out in raw mpi4py with no checks: one persistent ``Allgather``
of a 40-byte header and the value, the values read back and added in worker order.
``spmd_plus`` does that and little more (its header is the agreement on the call), so it
cannot be faster than the floor; "floor/raw" says how far above a raw Allreduce the
floor already is.
"""

import struct
import time

SIZES = [8, 64, 1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20,
         64 << 20]
FLOOR_UP_TO = 1 << 10  # the floor runs up to this size

from _launch import emit, init_gloo, layout_name, main as bench_main


def resnet_like(width=0.5):
    """A nested dict of float32 arrays shaped like ResNet-50's parameters (+ BN means)."""
    import numpy as np

    def bn(c):
        return {"weight": np.ones(c, np.float32), "bias": np.zeros(c, np.float32),
                "running_mean": np.zeros(c, np.float32)}

    def conv(o, i, k):
        return {"weight": np.full((o, i, k, k), 0.01, np.float32)}

    w = lambda c: max(8, int(c * width))  # noqa: E731
    net = {"stem": {"conv": conv(w(64), 3, 7), "bn": bn(w(64))}}
    inplanes = w(64)
    for s, (planes, blocks) in enumerate(zip((64, 128, 256, 512), (3, 4, 6, 3)), 1):
        p = w(planes)
        stage = {}
        for b in range(blocks):
            block = {"conv1": conv(p, inplanes, 1), "bn1": bn(p), "conv2": conv(p, p, 3),
                     "bn2": bn(p), "conv3": conv(4 * p, p, 1), "bn3": bn(4 * p)}
            if b == 0:
                block["downsample"] = {"conv": conv(4 * p, inplanes, 1), "bn": bn(4 * p)}
            inplanes = 4 * p
            stage[f"block{b}"] = block
        net[f"layer{s}"] = stage
    net["fc"] = {"weight": np.full((1000, inplanes), 0.01, np.float32),
                 "bias": np.zeros(1000, np.float32)}
    return net


def leaves(tree):
    if isinstance(tree, dict):
        for v in tree.values():
            yield from leaves(v)
    else:
        yield tree


def worker(args):
    import numpy as np
    import torch
    import torch.distributed as dist
    from mpi4py import MPI

    import spmdlab

    comm = MPI.COMM_WORLD.Dup()
    rank, size = comm.Get_rank(), comm.Get_size()
    layout = layout_name()
    init_gloo(comm)
    torch.set_num_threads(1)
    rounds = 3 if args.quick else 9

    def timed(fn, reps):
        comm.Barrier()
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        return (time.perf_counter() - start) / reps

    def race(methods, budget):
        """Median seconds per call of each method, interleaved round by round."""
        reps = {}
        for name, fn in methods.items():
            fn()
            fn()
            once = timed(fn, 1)
            reps[name] = comm.bcast(max(2, min(5000, int(budget / max(once, 1e-7)))))
        samples = {name: [] for name in methods}
        names = list(methods)
        for r in range(rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:  # rotate the order
                samples[name].append(timed(methods[name], reps[name]))
        return {name: float(np.median(v)) for name, v in samples.items()}

    def floor_sum(x, value):
        """The floor (see the docstring) for ``value`` (a Python float, or ``x``)."""
        record = 40 + x.nbytes
        send, recv = bytearray(record), bytearray(record * size)
        request = comm.Allgather_init(send, recv)
        if isinstance(value, float):
            pack, unpack = struct.Struct("<d").pack_into, struct.Struct("<d").unpack_from
            offsets = [k * record + 40 for k in range(size)]

            def step():
                pack(send, 40, value)
                request.Start()
                if not request.Test():
                    request.Wait()
                acc = unpack(recv, offsets[0])[0]
                for o in offsets[1:]:
                    acc += unpack(recv, o)[0]
                return acc
            return step
        rows = np.frombuffer(recv, np.uint8).reshape(size, record)[:, 40:].view(x.dtype)

        def step():
            send[40:] = x.tobytes()
            request.Start()
            if not request.Test():
                request.Wait()
            acc = rows[0] + rows[1] if size > 1 else rows[0].copy()
            for row in rows[2:]:
                acc += row
            return acc
        return step

    budget = 0.02 if args.quick else 0.05
    sweep = []
    for nbytes in SIZES:
        if nbytes == 8:
            x = np.ones(1, np.float64)
            value = 1.5
        else:
            x = np.ones(nbytes // 4, np.float32)
            value = x
        out = np.empty_like(x)
        t = torch.zeros(x.size, dtype=torch.float64 if nbytes == 8 else torch.float32)
        result = {}

        def spmd():
            result["r"] = spmdlab.spmd_plus(value)  # the previous result is dropped here

        methods = {"raw": lambda: comm.Allreduce(x, out, MPI.SUM), "spmd": spmd,
                   "gloo": lambda: dist.all_reduce(t)}
        if nbytes <= FLOOR_UP_TO:
            methods["floor"] = floor_sum(x, value)
        times = race(methods, budget)
        sweep.append({"bytes": nbytes, **times})
        result.clear()
        if nbytes <= (4 << 20):  # spmd_cat and spmd_broadcast on the same buffers
            gathered = np.empty(x.size * size, dtype=x.dtype)
            copy = x.copy()
            others = race({
                "raw cat": lambda: comm.Allgather(x, gathered),
                "spmd cat": lambda: result.__setitem__("c", spmdlab.spmd_cat(value)),
                "raw bcast": lambda: comm.Bcast(copy, root=0),
                "spmd bcast": lambda: result.__setitem__(
                    "b", spmdlab.spmd_broadcast(1, value)),
            }, budget)
            sweep[-1].update(others)
            result.clear()

    net = resnet_like()
    arrays = list(leaves(net))
    outs = [np.empty_like(a) for a in arrays]
    tensors = [torch.zeros(a.shape) for a in arrays]
    holder = {}

    def per_array_raw():
        for a, o in zip(arrays, outs):
            comm.Allreduce(a, o, MPI.SUM)

    def per_array_gloo():
        for t in tensors:
            dist.all_reduce(t)

    def one_spmd():
        holder["r"] = spmdlab.spmd_plus(net)

    nested = race({"raw": per_array_raw, "spmd": one_spmd, "gloo": per_array_gloo},
                  budget * 5)
    nested.update(arrays=len(arrays), floats=int(sum(a.size for a in arrays)))
    dist.destroy_process_group()
    if rank == 0:
        emit({"workers": size, "layout": layout, "sweep": sweep, "nested": nested})


def human(nbytes):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def us(seconds):
    return f"{seconds * 1e6:10.1f}"


def report(res):
    n = res["workers"]
    print(f"\n== {n} workers, layout {res['layout']} (nodes x workers per node): "
          f"spmd_plus vs raw Allreduce (preallocated out) vs gloo "
          f"(times in us per call; ratio = raw time / other time, >1 is faster than raw)")
    print(f"{'size':>8} {'raw':>10} {'spmd_plus':>10} {'gloo':>10} {'spmd/raw':>9} "
          f"{'gloo/raw':>9} {'floor':>10} {'floor/raw':>9}")
    for row in res["sweep"]:
        floor = f" {us(row['floor'])} {row['floor'] / row['raw']:9.2f}x" if "floor" in row \
            else ""
        print(f"{human(row['bytes']):>8} {us(row['raw'])} {us(row['spmd'])} {us(row['gloo'])}"
              f" {row['raw'] / row['spmd']:9.2f} {row['raw'] / row['gloo']:9.2f}{floor}")
    print(f"spmd_cat vs raw Allgather, spmd_broadcast vs raw Bcast (preallocated "
          f"buffers); times in us, ratio = spmdlab time / raw time (above 1 is slower)")
    print(f"{'size':>8} {'raw cat':>10} {'spmd_cat':>10} {'ratio':>6} {'raw bcast':>10} "
          f"{'spmd_bcast':>10} {'ratio':>6}")
    for row in res["sweep"]:
        if "raw cat" in row:
            print(f"{human(row['bytes']):>8} {us(row['raw cat'])} {us(row['spmd cat'])} "
                  f"{row['spmd cat'] / row['raw cat']:6.2f} {us(row['raw bcast'])} "
                  f"{us(row['spmd bcast'])} {row['spmd bcast'] / row['raw bcast']:6.2f}")
    small = [r for r in res["sweep"] if r["bytes"] <= 64 << 10]
    print(f"spmd_plus up to 64 KiB: {min(r['spmd'] / r['raw'] for r in small):.2f}-"
          f"{max(r['spmd'] / r['raw'] for r in small):.2f}x a raw Allreduce's time")
    scalar = res["sweep"][0]
    big = next(r for r in res["sweep"] if r["bytes"] == 16 << 20)
    nested = res["nested"]
    print(f"scalar: spmd_plus costs {scalar['spmd'] / scalar['raw']:.2f}x a raw Allreduce "
          f"of one float64 (agreement included)")
    print(f"16 MiB float32: spmd_plus reaches {big['raw'] / big['spmd']:.2f}x raw "
          f"Allreduce throughput")
    print(f"nested dict of {nested['arrays']} float32 arrays ({nested['floats']:,} floats): "
          f"one spmd_plus {nested['spmd'] * 1e3:.2f} ms, {nested['arrays']} raw Allreduce "
          f"{nested['raw'] * 1e3:.2f} ms ({nested['raw'] / nested['spmd']:.2f}x), "
          f"{nested['arrays']} gloo all_reduce {nested['gloo'] * 1e3:.2f} ms "
          f"({nested['gloo'] / nested['spmd']:.2f}x)")


if __name__ == "__main__":
    bench_main(__file__, __doc__, worker, report, options=[
        ("--quick", dict(action="store_true", help="fewer rounds, for a check"))],
        workers=(2, 4, "2x2"))
