"""Steady-state heat on a square plate, on a codistributed grid: MATLAB's spmd port.

    mpiexec -n 4 python examples/heat_codistributed.py        # four workers
    python examples/heat_codistributed.py                     # one worker, same answer
    mpiexec -n 4 python examples/heat_codistributed.py --plot heat.png

The plate's top edge is held at 100 degrees and the other edges at 0; Jacobi sweeps
replace each interior point by the mean of its four neighbours until no point changes by
more than the tolerance. The grid is a codistributed array split by columns (MATLAB's
default); each sweep trades one boundary column with each neighbour (``labSendReceive``)
and finds the largest change over all workers (``gop(@max, ...)``). The MATLAB program it
ports, line by line, is in the comments. Worker 1 checks the gathered grid against the
same sweeps run serially on the whole plate: every point's update adds the same four
numbers in the same order, so the two agree to the last bit.
"""

import argparse
import time

import numpy as np

from spmdlab.matlab import (codistributed, codistributor1d, gather, getLocalPart, gop,
                            globalIndices, labSendReceive, spmdIndex, spmdSize)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=64, help="grid points per side (64)")
    parser.add_argument("--tolerance", type=float, default=1e-3,
                        help="stop when no point changes by more (1e-3)")
    parser.add_argument("--max-sweeps", type=int, default=20000, help="at most (20000)")
    parser.add_argument("--plot", metavar="PNG", help="save the temperature field here")
    parser.add_argument("--short", action="store_true", help="a 24-point grid, for CI")
    return parser.parse_args()


def sweep(P):
    """One Jacobi sweep of the interior of ``P`` (rows 1..-2, columns 1..-2): the mean
    of the four neighbours, added in the same order wherever it runs."""
    return 0.25 * (((P[:-2, 1:-1] + P[2:, 1:-1]) + P[1:-1, :-2]) + P[1:-1, 2:])


def serial(n, sweeps):
    """The same sweeps on the whole plate, for the check."""
    T = np.zeros((n, n))
    T[0, :] = 100.0
    for _ in range(sweeps):
        T[1:-1, 1:-1] = sweep(T)
    return T


def main():
    args = parse_args()
    n = 24 if args.short else args.n
    tolerance = 1e-2 if args.short else args.tolerance
    k, N = spmdIndex(), spmdSize()
    if n < 2 * N:
        raise SystemExit(f"heat: give at least 2 grid columns per worker (--n {2 * N})")
    if args.max_sweeps < 1:
        raise SystemExit(f"heat: give at least 1 sweep (--max-sweeps {args.max_sweeps})")

    # codist = codistributor1d(2, codistributor1d.defaultPartition(n), [n n]);
    codist = codistributor1d(2, codistributor1d.defaultPartition(n), [n, n])
    # T = codistributed.zeros(n, n, codist);  T(1, :) = 100;
    T = codistributed.zeros(n, n, codist)
    T[0, :] = 100.0  # each worker writes the columns it holds
    # [e, f] = globalIndices(T, 2);
    e, f = globalIndices(T, 2, nargout=2)
    left = k - 1 if k > 1 else []  # [] : no neighbour on that side
    right = k + 1 if k < N else []

    start = time.perf_counter()
    for sweeps in range(1, args.max_sweeps + 1):
        L = getLocalPart(T)
        # fromRight = labSendReceive(left, right, L(:, 1));
        # fromLeft  = labSendReceive(right, left, L(:, end));
        from_right = labSendReceive(left, right, L[:, 0])
        from_left = labSendReceive(right, left, L[:, -1])
        P = np.column_stack([L[:, :1] if from_left is None else from_left, L,
                             L[:, -1:] if from_right is None else from_right])
        new = L.copy()
        first = 1 if e == 1 else 0        # the plate's edge columns stay fixed
        last = new.shape[1] - (1 if f == n else 0)
        new[1:-1, first:last] = sweep(P)[:, first:last]
        # change = gop(@max, max(abs(new(:) - L(:))));
        change = gop("max", float(np.abs(new - L).max()))
        # T = codistributed.build(new, codist, "noCommunication");
        T = codistributed.build(new, codist, "noCommunication")
        if change < tolerance:
            break
    seconds = time.perf_counter() - start

    # Tfull = gather(T);
    Tfull = gather(T)
    centre = float(Tfull[n // 2, n // 2])
    if k == 1:
        same = np.array_equal(Tfull, serial(n, sweeps))
        print(f"heat: {n}x{n} plate on {N} worker{'s' if N > 1 else ''}, "
              f"{sweeps} sweeps ({seconds / sweeps * 1e6:.0f} us each), largest change "
              f"{change:.2g}, centre {centre:.2f} degrees")
        if args.plot:
            save_plot(Tfull, args.plot)
            print(f"heat: the temperature field is in {args.plot}")
        print(f"matches the serial solver: {same}")


def save_plot(T, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 4.2))
    image = ax.imshow(T, cmap="inferno", origin="upper")
    fig.colorbar(image, ax=ax, label="degrees")
    ax.set_title("Steady-state temperature (top edge at 100)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    main()
