"""What one call costs each worker as the worker count N grows: counted, not timed.

    python scripts/bench_scale.py                          # 2, 4, 8, 16, 32, 64 workers
    python scripts/bench_scale.py --workers 2 4 8 --reps 5

Each worker count runs twice in the same run under ``SPMDLAB_COUNT=1``: with the
gathering exchange at every N (``SPMDLAB_TREE_ABOVE`` above N: what spmdlab did before
the tree, and still does at 4 workers or fewer) and with the default (the tree above 4
workers). ``SPMDLAB_SHM_BYTES=0`` keeps every worker's data on MPI, as when each worker
is on a node of its own. For each call it counts, per call and per worker (the largest
over the workers):

- ``bytes``: bytes sent plus received (a collective counted by its buffers, in MPI's
  recursive doubling; the agreement's records included);
- ``msgs``: messages sent plus received;
- ``req/wait``: the MPI requests a wait watches (its own, and the exit notices it
  listens for), for the waits that did not end at once;
- ``records``: agreement records and values this worker examines.

The calls: a scalar ``spmd_plus``, a 64 KiB ``spmd_plus``, ``spmd_cat`` of one value per
worker, a point-to-point message (a ring: each worker sends to the next and receives from
the previous) and a ``DataQueue`` item (every worker sends items to worker 1; counted per
item at its sender and at worker 1). Each count is fitted over N >= 8 as ``a N^k`` (the
exponent ``k`` printed: 1 is linear, near 0 constant or logarithmic) and extrapolated to
1,024 and 4,096 workers by whichever fits better of ``a + b N`` and ``a + b log2 N``.
More workers than cores is fine: the counts do not depend on timing (waits aside). A
second table counts the exit notices of the whole program on each worker (written at its
very end): the receives it posted for them, the notices it sent and received (these do
depend on when the workers end).
"""

import json
import math
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _launch import emit, header, run_at  # noqa: E402

CALLS = ["spmd_plus(scalar)", "spmd_plus(64 KiB)", "spmd_cat(one value)",
         "spmd_send/receive", "DataQueue item"]
METRICS = ["bytes", "msgs", "req/wait", "records"]
MODES = {"gathering": {"SPMDLAB_TREE_ABOVE": "1000000000"}, "default": {}}


def worker(args):
    ends = os.environ.get("SPMDLAB_BENCH_ENDS")
    if ends:  # registered before spmdlab is imported, so it runs after spmdlab's own end
        import atexit
        import json

        def write_ends():
            from spmdlab import _count, _world
            with open(os.path.join(ends, f"{_world.RANK}.json"), "w") as f:
                json.dump(_count.NOTICES, f)
        atexit.register(write_ends)

    import numpy as np

    from spmdlab import (DataQueue, spmd_barrier, spmd_cat, spmd_index, spmd_plus,
                         spmd_receive, spmd_send, spmd_size)
    from spmdlab import _count

    if not _count.ON:
        sys.exit("bench_scale's workers run with SPMDLAB_COUNT=1")
    reps = args.reps
    n, k = spmd_size(), spmd_index()
    big = np.full(8192, float(k))  # 64 KiB of float64
    queue = DataQueue()
    got = []
    queue.after_each(got.append)

    def measure(body, per=1, settle=None):
        body()  # once before counting: first-call set-up is not a call's cost
        if settle:
            settle()
        spmd_barrier()
        _count.reset()
        for _ in range(reps):
            body()
        if settle:
            settle()
        c = _count.snapshot()
        _count.ON = False  # gathering the counts is not counted
        waits = c["waits"]
        mine = np.array([(c["sent_bytes"] + c["received_bytes"]) / (reps * per),
                         (c["sent_messages"] + c["received_messages"]) / (reps * per),
                         c["requests_tested"] / waits if waits else 0.0,
                         c["records_examined"] / (reps * per)])
        everyone = spmd_cat(mine[None, :])
        _count.ON = True
        return [float(v) for v in everyone.max(axis=0)]

    def ring():
        spmd_send(k, k % n + 1)
        assert spmd_receive((k - 2) % n + 1) == (k - 2) % n + 1

    def item():
        if k > 1:
            queue.send(k)

    def all_items_in():  # worker 1 holds every item sent so far (not a spmdlab wait)
        expected = len(sent) * (n * (n + 1) // 2 - 1)
        while k == 1 and sum(got) < expected:
            time.sleep(0.001)

    sent = []
    results = {}
    results["spmd_plus(scalar)"] = measure(lambda: spmd_plus(1.0))
    results["spmd_plus(64 KiB)"] = measure(lambda: spmd_plus(big))
    results["spmd_cat(one value)"] = measure(lambda: spmd_cat(k))
    results["spmd_send/receive"] = measure(ring)
    # per item: one sent at each other worker, n - 1 received at worker 1
    results["DataQueue item"] = measure(lambda: (item(), sent.append(1)),
                                        per=n - 1 if k == 1 else 1, settle=all_items_in)
    if k == 1:
        emit({"workers": n, "results": results})


def fit(ns, values):
    """(exponent k of a N^k over N >= 8, predict(N) of the better of a + bN, a + b log2 N)."""
    pts = [(x, y) for x, y in zip(ns, values) if x >= 8]
    if len(pts) < 2:
        pts = list(zip(ns, values))
    if len(pts) < 2:
        return float("nan"), lambda x: values[-1]
    positive = [(x, y) for x, y in pts if y > 0]
    if len(positive) >= 2:
        lx = [math.log(x) for x, _ in positive]
        ly = [math.log(y) for _, y in positive]
        mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
        sxx = sum((a - mx) ** 2 for a in lx)
        exponent = sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sxx if sxx else 0.0
    else:
        exponent = 0.0
    best = None
    for transform in (lambda x: x, lambda x: math.log2(x)):
        xs = [transform(x) for x, _ in pts]
        ys = [y for _, y in pts]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        sxx = sum((a - mx) ** 2 for a in xs)
        b = sum((a - mx) * (c - my) for a, c in zip(xs, ys)) / sxx if sxx else 0.0
        a = my - b * mx
        residual = sum((a + b * x - y) ** 2 for x, y in zip(xs, ys))
        if best is None or residual < best[0] - 1e-9:
            best = (residual, a, b, transform)
    _, a, b, transform = best
    return exponent, lambda x: max(a + b * transform(x), 0.0)


def human(value):
    for unit, scale in (("M", 1e6), ("k", 1e3)):
        if value >= 10 * scale:
            return f"{value / scale:.0f}{unit}"
    return f"{value:.0f}" if value >= 10 or value == int(value) else f"{value:.1f}"


def table(runs):
    ns = sorted(runs["default"])
    heads = ["call", "count", "mode"] + [f"N={n}" for n in ns] + ["k", "N=1,024",
                                                                   "N=4,096"]
    rows = []
    for call in CALLS:
        for m, metric in enumerate(METRICS):
            for mode in MODES:
                values = [runs[mode][n][call][m] for n in ns]
                exponent, predict = fit(ns, values)
                rows.append([call, metric, mode] + [human(v) for v in values] +
                            [f"{exponent:.2f}", human(predict(1024)), human(predict(4096))])
    print("| " + " | ".join(heads) + " |")
    print("|" + "---|" * len(heads))
    for row in rows:
        print("| " + " | ".join(row) + " |")


NOTICE_COUNTS = ["posted", "sent", "received"]


def notice_table(notices):
    ns = sorted(notices)
    heads = ["count"] + [f"N={n}" for n in ns] + ["k", "N=1,024", "N=4,096"]
    print("| " + " | ".join(heads) + " |")
    print("|" + "---|" * len(heads))
    for key in NOTICE_COUNTS:
        values = [notices[n][key] for n in ns]
        exponent, predict = fit(ns, values)
        print("| " + " | ".join([key] + [human(v) for v in values] + [
            f"{exponent:.2f}", human(predict(1024)), human(predict(4096))]) + " |")


def main():
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", nargs="+", type=int, default=[2, 4, 8, 16, 32, 64])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    header("bench_scale", " (counts, not times)")
    if max(args.workers) > (os.cpu_count() or 1):
        print("note: more workers than cores is oversubscribed; the counts do not mind")
    runs = {mode: {} for mode in MODES}
    notices = {}
    with tempfile.TemporaryDirectory() as ends:
        for mode, env in MODES.items():
            def keep(result, mode=mode):
                n = result["workers"]
                runs[mode][n] = result["results"]
                counts = []
                for name in os.listdir(ends):
                    with open(os.path.join(ends, name)) as f:
                        counts.append(json.load(f))
                    os.unlink(os.path.join(ends, name))
                if len(counts) != n:
                    sys.exit(f"bench_scale: {len(counts)} of {n} workers wrote their "
                             f"exit-notice counts")
                notices[n] = {key: max(c[key] for c in counts) for key in NOTICE_COUNTS}
                print(f"  {mode} exchange at {n} workers: counted", flush=True)
            run_at(__file__, args.workers, ["--reps", args.reps], keep,
                   env=dict(env, SPMDLAB_COUNT="1", SPMDLAB_SHM_BYTES="0",
                            SPMDLAB_BENCH_ENDS=ends), timed=False)
    print("\nper call and per worker (the largest over the workers); k: the fitted "
          "exponent of a N^k over N >= 8\n")
    table(runs)
    print("\nexit notices over the whole program, per worker (the largest over the "
          "workers; the last run's): receives posted, notices sent and received; every "
          "worker to every other, before the tree, was N - 1 of each\n")
    notice_table(notices)


if __name__ == "__main__":
    main()
