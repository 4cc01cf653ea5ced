"""The interactive pool against ipyparallel on MPI engines, in the same run.

Measured, for a pool of N workers on this machine:
  - start: from the call until every worker is ready for a block (spmdlab's
    ``start_pool(N)``; ipyparallel's ``Cluster(engines="mpi", n=N)``
    ``.start_and_connect_sync()`` then ``wait_for_engines``);
  - empty block: a cell with nothing in it, run on every worker (``pool.run_cell("pass")``,
    what ``%%spmd`` does; ipyparallel's ``view.execute("pass", block=True)``, what
    ``%%px`` does);
  - 1 MiB back: a block whose result (a 1 MiB float64 array per worker) comes back to the
    client (``pool.spmd(f)[:]``; ``view.apply_sync(f)``).

Usage (ipyparallel only in the benchmark's environment: ``pip install ipyparallel``):
    python scripts/bench_pool.py [--workers 2] [--repeat 50]
Reports the median of ``--repeat`` runs of each block and of three starts, and the
ratio spmdlab / ipyparallel (below 1: spmdlab is faster).
"""

import argparse
import statistics
import sys
import time


def one_mib():
    import numpy as np

    return np.zeros(131072)


def time_blocks(run_empty, run_mib, repeat):
    run_empty()
    run_mib()
    empty, mib = [], []
    for _ in range(repeat):
        t = time.perf_counter()
        run_empty()
        empty.append(time.perf_counter() - t)
        t = time.perf_counter()
        run_mib()
        mib.append(time.perf_counter() - t)
    return statistics.median(empty), statistics.median(mib)


def bench_spmdlab(n, repeat, starts):
    import spmdlab

    start_times = []
    pool = None
    for _ in range(starts):
        t = time.perf_counter()
        pool = spmdlab.start_pool(n)
        start_times.append(time.perf_counter() - t)
        if len(start_times) < starts:
            pool.delete()

    def mib():
        values = pool.spmd(one_mib)[:]
        assert len(values) == n and values[0].nbytes == 1 << 20

    empty, big = time_blocks(lambda: pool.run_cell("pass", {}), mib, repeat)
    pool.delete()
    return statistics.median(start_times), empty, big


def bench_ipyparallel(n, repeat, starts):
    import ipyparallel as ipp

    start_times = []
    for i in range(starts):
        t = time.perf_counter()
        cluster = ipp.Cluster(engines="mpi", n=n, log_level=40)
        rc = cluster.start_and_connect_sync()
        rc.wait_for_engines(n, timeout=120)
        start_times.append(time.perf_counter() - t)
        if i < starts - 1:
            cluster.stop_cluster_sync()
    view = rc[:]

    def mib():
        values = view.apply_sync(one_mib)
        assert len(values) == n and values[0].nbytes == 1 << 20

    empty, big = time_blocks(lambda: view.execute("pass", block=True), mib, repeat)
    cluster.stop_cluster_sync()
    return statistics.median(start_times), empty, big


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--starts", type=int, default=3)
    args = parser.parse_args()
    ours = bench_spmdlab(args.workers, args.repeat, args.starts)
    try:
        import ipyparallel  # noqa: F401
    except ImportError:
        theirs = None
        print("ipyparallel is not installed here (pip install ipyparallel): spmdlab only",
              file=sys.stderr)
    else:
        theirs = bench_ipyparallel(args.workers, args.repeat, args.starts)
    print(f"pool of {args.workers} workers, median of {args.repeat} blocks and "
          f"{args.starts} starts")
    print(f"{'':<14}{'spmdlab':>12}{'ipyparallel':>14}{'ratio':>8}")
    for i, what in enumerate(["start", "empty block", "1 MiB back"]):
        mine = ours[i]
        if theirs is None:
            print(f"{what:<14}{_ms(mine):>12}")
        else:
            print(f"{what:<14}{_ms(mine):>12}{_ms(theirs[i]):>14}"
                  f"{mine / theirs[i]:>7.2f}x")


def _ms(seconds):
    return f"{seconds * 1e3:.2f} ms" if seconds < 1 else f"{seconds:.2f} s"


if __name__ == "__main__":
    main()
