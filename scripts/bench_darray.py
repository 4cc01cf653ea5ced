"""Codistributed arrays against raw mpi4py on the same bytes, in one run.

    python scripts/bench_darray.py                    # at 2 and 4 workers, and at 2x2
    python scripts/bench_darray.py --workers 2 --quick

For square float64 matrices of 64 KiB to 16 MiB in all, interleaved round by round:
- gather: ``D.gather()`` of a matrix split by rows (its blocks follow each other) and by
  columns (every row holds a piece of each block: gathered end to end, then each put in
  place with one strided copy), against a raw ``Allgatherv`` of the same bytes into a
  preallocated buffer, blocks end to end (a program would still have to rearrange the
  column blocks);
- redistribute: rows to columns (``D.redistribute(axis=1)``) and rows to another
  partition of the rows, against a raw ``Alltoallv`` of the same bytes from buffers
  already packed per destination (the data movement alone, no packing);
- element-wise: ``np.sin(D) * 2 + D`` against the same numpy expression on the local
  part (no communication either way).
Each figure is the median over rounds of the mean time per call on worker 1, with the
agreement step every spmdlab call starts with included. Ratio: spmdlab time / raw time
(1.00 is raw speed; above is slower).
"""

import time

from _launch import emit, layout_name, main as bench_main

SIZES = [64 << 10, 1 << 20, 16 << 20]


def worker(args):
    import numpy as np
    from mpi4py import MPI

    import spmdlab.darray as da

    comm = MPI.COMM_WORLD.Dup()
    rank, size = comm.Get_rank(), comm.Get_size()
    layout = layout_name()  # collective: every worker
    rounds = 3 if args.quick else 7

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
            reps[name] = comm.bcast(max(2, min(2000, int(budget / max(once, 1e-7)))))
        samples = {name: [] for name in methods}
        names = list(methods)
        for r in range(rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                samples[name].append(timed(methods[name], reps[name]))
        return {name: float(np.median(v)) for name, v in samples.items()}

    budget = 0.02 if args.quick else 0.06
    rows = []
    for nbytes in SIZES:
        n = int((nbytes // 8) ** 0.5)
        G = np.arange(n * n, dtype=np.float64).reshape(n, n)
        by_rows = da.distribute(G, axis=0)
        by_cols = da.distribute(G, axis=1)
        local = np.ascontiguousarray(by_rows.local)
        counts = [p * n * 8 for p in by_rows.partition]
        displs = [sum(counts[:k]) for k in range(size)]
        staging = np.empty(n * n, dtype=np.float64)

        def raw_gather():
            comm.Allgatherv(local.view(np.uint8), [staging, (counts, displs), MPI.BYTE])

        # the bytes a redistribution moves: to each worker its part of my rows
        target_rows = da.default_partition(n, size)[::-1]  # another partition of rows
        send = np.ascontiguousarray(local).reshape(-1)
        recv = np.empty(by_cols.local.size, dtype=np.float64)
        col_part = by_cols.partition
        sc = [by_rows.local.shape[0] * c * 8 for c in col_part]
        rc = [p * col_part[rank] * 8 for p in by_rows.partition]

        def raw_alltoall_cols():
            comm.Alltoallv([send, (sc, [sum(sc[:k]) for k in range(size)]), MPI.BYTE],
                           [recv, (rc, [sum(rc[:k]) for k in range(size)]), MPI.BYTE])

        mine = by_rows.global_indices()
        starts = np.cumsum((0,) + tuple(target_rows))
        sr = [max(0, min(mine.stop, starts[j + 1]) - max(mine.start, starts[j])) * n * 8
              for j in range(size)]
        theirs = [by_rows.global_indices(worker=j + 1) for j in range(size)]
        rr = [max(0, min(t.stop, starts[rank + 1]) - max(t.start, starts[rank])) * n * 8
              for t in theirs]
        recv_rows = np.empty(target_rows[rank] * n, dtype=np.float64)

        def raw_alltoall_rows():
            comm.Alltoallv([send, (sr, [sum(sr[:k]) for k in range(size)]), MPI.BYTE],
                           [recv_rows, (rr, [sum(rr[:k]) for k in range(size)]), MPI.BYTE])

        keep = {}
        times = race({
            "raw gather": raw_gather,
            "gather rows": lambda: keep.__setitem__("g", by_rows.gather()),
            "gather cols": lambda: keep.__setitem__("g", by_cols.gather()),
            "raw alltoall cols": raw_alltoall_cols,
            "rows to cols": lambda: keep.__setitem__("r", by_rows.redistribute(axis=1)),
            "raw alltoall rows": raw_alltoall_rows,
            "rows to rows": lambda: keep.__setitem__(
                "r", by_rows.redistribute(partition=target_rows)),
            "numpy local": lambda: keep.__setitem__("e", np.sin(local) * 2 + local),
            "element-wise": lambda: keep.__setitem__("e", np.sin(by_rows) * 2 + by_rows),
        }, budget)
        assert np.array_equal(by_cols.gather(), G)
        rows.append({"bytes": nbytes, "n": n, **times})
    if rank == 0:
        emit({"workers": size, "layout": layout, "rows": rows})


def human(nbytes):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def report(res):
    print(f"\n== {res['workers']} workers, layout {res['layout']} (nodes x workers per "
          f"node): times in us per call, ratio = spmdlab / raw (1.00 is raw speed)")
    print(f"{'matrix':>20} {'raw Allgatherv':>14} {'gather rows':>16} {'gather cols':>16} "
          f"{'raw Alltoallv':>14} {'rows->cols':>16} {'rows->rows':>16} "
          f"{'element-wise':>16}")
    for r in res["rows"]:
        def pair(name, base):
            return f"{r[name] * 1e6:9.0f} {r[name] / r[base]:5.2f}x"
        print(f"{r['n']}x{r['n']} ({human(r['bytes'])}):".rjust(20) + " "  # whole, 16 MiB's too
              f"{r['raw gather'] * 1e6:14.0f} {pair('gather rows', 'raw gather'):>16} "
              f"{pair('gather cols', 'raw gather'):>16} {r['raw alltoall cols'] * 1e6:14.0f} "
              f"{pair('rows to cols', 'raw alltoall cols'):>16} "
              f"{pair('rows to rows', 'raw alltoall rows'):>16} "
              f"{pair('element-wise', 'numpy local'):>16}")
    big = res["rows"][-1]
    print(f"{human(big['bytes'])}: gather at {big['gather rows'] / big['raw gather']:.2f}x "
          f"(rows) and {big['gather cols'] / big['raw gather']:.2f}x (columns) a raw "
          f"Allgatherv; rows->columns at {big['rows to cols'] / big['raw alltoall cols']:.2f}x "
          f"a raw Alltoallv of the same bytes")


if __name__ == "__main__":
    bench_main(__file__, __doc__, worker, report, options=[
        ("--quick", dict(action="store_true", help="fewer rounds, for a check"))],
        workers=(2, 4, "2x2"))
