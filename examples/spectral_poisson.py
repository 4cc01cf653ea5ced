"""A periodic Poisson equation solved by FFT on a codistributed grid: MATLAB's spmd port.

    mpiexec -n 4 python examples/spectral_poisson.py        # four workers
    python examples/spectral_poisson.py                     # one worker, same answer

Solves -(u_xx + u_yy) = f on [0, 2 pi)^2 with periodic edges, for the f whose solution
is u = sin(x) sin(2y) + cos(3x), by dividing f's 2-D Fourier transform by the squared
wave numbers. The grid is a codistributed array split by rows; ``fft2`` of it is the
distributed transform (each worker transforms its rows, one all-to-all makes the
columns whole, each worker transforms its columns, one all-to-all moves the result
back), and the division by the wave numbers is local: each worker divides the rows it
holds. The MATLAB program it ports, line by line, is in the comments. Worker 1 checks the
gathered solution against the same steps on the whole grid with numpy (every transform
and division is the same on each row and column, so they agree to the last bit) and
against the exact solution.
"""

import argparse
import time

import numpy as np

from spmdlab.matlab import codistributed, codistributor1d, gather, spmdIndex, spmdSize


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=256, help="grid points per side (256)")
    parser.add_argument("--short", action="store_true", help="a 32-point grid, for CI")
    return parser.parse_args()


def wave_numbers(n):
    """MATLAB's k = [0:n/2-1, -n/2:-1] (n even): the FFT's frequencies on [0, 2 pi)."""
    return np.fft.fftfreq(n, 1.0 / n)


def serial(F, n):
    """The same steps on the whole grid, for the check."""
    k = wave_numbers(n)
    K2 = k[:, None] ** 2 + k[None, :] ** 2
    K2[0, 0] = 1.0
    Uh = np.fft.fft2(F) / K2
    Uh[0, 0] = 0.0
    return np.real(np.fft.ifft2(Uh))


def main():
    args = parse_args()
    n = 32 if args.short else args.n
    k, N = spmdIndex(), spmdSize()
    if n % 2 or n < 4:
        raise SystemExit(f"spectral_poisson: give an even number of points, 4 or more "
                         f"(--n {n})")

    # x = (0:n-1) * 2*pi/n;  [X, Y] = meshgrid(x, x);   (X varies along columns)
    x = np.arange(n) * 2 * np.pi / n
    X, Y = np.meshgrid(x, x)
    exact = np.sin(X) * np.sin(2 * Y) + np.cos(3 * X)
    f = 5 * np.sin(X) * np.sin(2 * Y) + 9 * np.cos(3 * X)   # -(u_xx + u_yy)

    start = time.perf_counter()
    # F = codistributed(f, codistributor1d(1));            % split by rows
    F = codistributed(f, codistributor1d(1))
    # kk = [0:n/2-1, -n/2:-1];  K2 = kk'.^2 + kk.^2;  K2(1, 1) = 1;
    kk = wave_numbers(n)
    K2 = kk[:, None] ** 2 + kk[None, :] ** 2
    K2[0, 0] = 1.0
    # Uh = fft2(F) ./ K2;  Uh(1, 1) = 0;                   % the mean of u is free: 0
    Uh = np.fft.fft2(F) / K2          # each worker divides the rows it holds
    Uh[0, 0] = 0.0                    # written by the worker that holds it
    # U = real(ifft2(Uh));
    U = np.real(np.fft.ifft2(Uh))
    seconds = time.perf_counter() - start

    # Ufull = gather(U);
    Ufull = gather(U)
    error = float(np.max(np.abs(Ufull - exact)))
    if k == 1:
        same = np.array_equal(Ufull, serial(f, n))
        print(f"poisson: {n}x{n} periodic grid on {N} worker{'s' if N > 1 else ''}, "
              f"solved in {seconds * 1e3:.1f} ms, largest error against the exact "
              f"solution {error:.1e}")
        print(f"matches numpy on the whole grid: {same}")


if __name__ == "__main__":
    main()
