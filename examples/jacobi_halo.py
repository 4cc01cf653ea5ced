"""A latency-bound MATLAB spmd loop: Jacobi sweeps with labSendReceive halos and a gop test.

    mpiexec -n 4 python examples/jacobi_halo.py          # four workers
    python examples/jacobi_halo.py                       # one worker
    mpiexec -n 4 python examples/jacobi_halo.py --rows 8 --sweeps 2000

Poisson's equation on a square with zero edges and a unit source, solved by Jacobi
sweeps. Each worker holds a strip of rows; every sweep it trades its edge rows with the
workers above and below (``labSendReceive``), updates its strip, and every ``--check``
sweeps the workers agree on the largest change (``gop(@max, ...)``) to decide whether
to stop. With a few rows per worker the loop is all messages and small reductions: its
speed is spmdlab's latency. The program runs the same sweeps a second time written in
raw mpi4py (``Sendrecv``, ``allreduce``) and prints both times per sweep and their
ratio; the two solutions agree to the last bit. The MATLAB program it ports is in the
comments.
"""

import argparse
import time

import numpy as np
from mpi4py import MPI

from spmdlab.matlab import gop, labSendReceive, spmdIndex, spmdSize


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=16, help="rows per worker (16)")
    parser.add_argument("--cols", type=int, default=64, help="grid columns (64)")
    parser.add_argument("--sweeps", type=int, default=3000, help="at most (3000)")
    parser.add_argument("--check", type=int, default=10,
                        help="test convergence every this many sweeps (10)")
    parser.add_argument("--tolerance", type=float, default=1e-6, help="largest change (1e-6)")
    parser.add_argument("--short", action="store_true", help="300 sweeps at most, for CI")
    return parser.parse_args()


def sweep(U, h2):
    """Jacobi on the interior of ``U`` (its first and last rows are the halos)."""
    new = U.copy()
    new[1:-1, 1:-1] = 0.25 * (((U[:-2, 1:-1] + U[2:, 1:-1]) + U[1:-1, :-2]) +
                              U[1:-1, 2:] + h2)
    return new


def solve_spmdlab(args, rows, cols, sweeps):
    k, N = spmdIndex(), spmdSize()
    up = k - 1 if k > 1 else []      # [] : no neighbour (MATLAB's empty)
    down = k + 1 if k < N else []
    U = np.zeros((rows + 2, cols))   # my rows, with a halo row above and below
    h2 = (1.0 / (N * rows + 1)) ** 2
    done = 0
    for it in range(1, sweeps + 1):
        # U(1, :)   = labSendReceive(down, up, U(end-1, :));   % from above
        # U(end, :) = labSendReceive(up, down, U(2, :));       % from below
        above = labSendReceive(down, up, U[-2])
        below = labSendReceive(up, down, U[1])
        if above is not None:
            U[0] = above
        if below is not None:
            U[-1] = below
        new = sweep(U, h2)
        if k == 1:
            new[1] = 0.0                 # the square's top and bottom edges stay 0
        if k == N:
            new[-2] = 0.0
        change = np.abs(new - U).max()
        U = new
        done = it
        # if mod(it, check) == 0 && gop(@max, change) < tol, break; end
        if it % args.check == 0 and gop("max", float(change)) < args.tolerance:
            break
    return U[1:-1], done


def solve_raw(args, rows, cols, sweeps):
    comm = MPI.COMM_WORLD
    k, N = comm.Get_rank() + 1, comm.Get_size()
    up = k - 2 if k > 1 else MPI.PROC_NULL
    down = k if k < N else MPI.PROC_NULL
    U = np.zeros((rows + 2, cols))
    h2 = (1.0 / (N * rows + 1)) ** 2
    above, below = np.empty(cols), np.empty(cols)
    done = 0
    for it in range(1, sweeps + 1):
        comm.Sendrecv(U[-2], down, 1, above, up, 1)
        comm.Sendrecv(U[1], up, 2, below, down, 2)
        if k > 1:
            U[0] = above
        if k < N:
            U[-1] = below
        new = sweep(U, h2)
        if k == 1:
            new[1] = 0.0
        if k == N:
            new[-2] = 0.0
        change = np.abs(new - U).max()
        U = new
        done = it
        if it % args.check == 0 and comm.allreduce(float(change), MPI.MAX) < args.tolerance:
            break
    return U[1:-1], done


def main():
    args = parse_args()
    sweeps = 300 if args.short else args.sweeps
    for name, value in (("--rows", args.rows), ("--sweeps", sweeps),
                        ("--check", args.check)):
        if value < 1:
            raise SystemExit(f"jacobi: {name} must be at least 1 (got {value})")
    k, N = spmdIndex(), spmdSize()
    comm = MPI.COMM_WORLD
    times = {}
    results = {}
    for name, solve in (("spmdlab", solve_spmdlab), ("raw mpi4py", solve_raw)):
        comm.Barrier()
        start = time.perf_counter()
        U, done = solve(args, args.rows, args.cols, sweeps)
        comm.Barrier()
        times[name] = (time.perf_counter() - start) / done
        results[name] = (U, done)
    same = np.array_equal(results["spmdlab"][0], results["raw mpi4py"][0]) and \
        results["spmdlab"][1] == results["raw mpi4py"][1]
    same = comm.allreduce(same, MPI.LAND)
    centre = comm.allreduce(float(results["spmdlab"][0].max()), MPI.MAX)
    if k == 1:
        ours, raw = times["spmdlab"], times["raw mpi4py"]
        print(f"jacobi: {N * args.rows}x{args.cols} grid on {N} worker"
              f"{'s' if N > 1 else ''} ({args.rows} rows each), {results['spmdlab'][1]} "
              f"sweeps, largest value {centre:.6f}")
        print(f"per sweep: spmdlab {ours * 1e6:.1f} us, raw mpi4py {raw * 1e6:.1f} us "
              f"(ratio {ours / raw:.2f})")
        print(f"same solution as raw mpi4py: {same}")


if __name__ == "__main__":
    main()
