"""MATLAB's backslash, ``x = A \\ B``, on host numpy arrays (``spmdlab.matlab.mldivide``).

numpy has the pieces but not MATLAB's choices, which a port must keep:

- a square ``A`` is solved by LU with partial pivoting (``np.linalg.solve``); where it is
  singular to working precision (a zero pivot), MATLAB warns and solves anyway, so the
  answer holds Inf or NaN (numpy raises instead); a triangular ``A`` is solved by
  substitution, as MATLAB does;
- a rectangular ``A`` gets MATLAB's *basic* solution: QR with column pivoting (the
  column of largest remaining norm first, Businger and Golub, as LAPACK's xGEQP3), its
  rank ``r`` the number of diagonal entries of R above ``max(m, n) * eps * |R[0, 0]|``,
  and ``x`` nonzero at the ``r`` pivot columns only (``[2 1] \\ 1`` is ``[0.5; 0]``;
  ``np.linalg.lstsq`` gives the minimum-norm ``[0.4; 0.2]``), with MATLAB's "Rank
  deficient" warning when ``r < min(m, n)``.

MATLAB's warnings are Python's (a ``RuntimeWarning`` whose text starts with the call and
the worker: ``warnings.filterwarnings("ignore", "mldivide")`` is MATLAB's
``warning('off', ...)``).
"""

from __future__ import annotations

import warnings
from typing import Callable

import numpy as np


def dtype_of(a: np.dtype, b: np.dtype) -> np.dtype:
    """MATLAB's class of ``A \\ B``: single if either is single, else double (complex if
    either is); integers and logicals count as doubles (a ported literal is one)."""
    kinds = [d for d in (a, b) if d.kind in "fc"]
    single = any(d.itemsize == (4 if d.kind == "f" else 8) for d in kinds)
    complex_ = any(d.kind == "c" for d in kinds)
    if single:
        return np.dtype(np.complex64 if complex_ else np.float32)
    return np.dtype(np.complex128 if complex_ else np.float64)


def solve(A: np.ndarray, B: np.ndarray, where: Callable[[], str]) -> np.ndarray:
    """``A \\ B`` for a 2-D ``A`` (m-by-n) and a ``B`` of m rows (1-D: one column; the
    result is then 1-D too). ``where()``: "mldivide (worker k of n)", for warnings."""
    m, n = A.shape
    dtype = dtype_of(A.dtype, B.dtype)
    vector = B.ndim == 1
    b = B.reshape(m, 1) if vector else B
    A, b = A.astype(dtype, copy=False), b.astype(dtype, copy=False)
    if A.size == 0 or b.shape[1] == 0:  # MATLAB: zeros(n, k), nothing to solve
        x = np.zeros((n, b.shape[1]), dtype)
    elif m == n:
        x = _square(A, b, where)
    else:
        x = _basic(A, b, where)
    return x.reshape(n) if vector else x


def _square(A, b, where):
    lower = _triangular(A)
    if lower is not None:  # substitution, as MATLAB (a zero on the diagonal: singular)
        if not np.all(np.diagonal(A)):
            _warn(where, "Matrix is singular to working precision.")
        return _substituted(A, b, lower)
    try:
        return np.linalg.solve(A, b)
    except np.linalg.LinAlgError:  # a zero pivot: MATLAB warns and goes on
        _warn(where, "Matrix is singular to working precision.")
    L, U, perm = _lu(A)
    return _substituted(U, _substituted(L, b[perm], lower=True), lower=False)


def _triangular(A):
    """True: lower triangular; False: upper (a diagonal matrix is upper); None: neither."""
    if np.array_equal(A, np.triu(A)):
        return False
    if np.array_equal(A, np.tril(A)):
        return True
    return None


def _substituted(T, b, lower):
    """``T \\ b`` for a triangular ``T`` by substitution, row by row (IEEE arithmetic: a
    zero on the diagonal gives Inf or NaN, as MATLAB's)."""
    n = T.shape[0]
    x = np.empty_like(b)
    rows = range(n) if lower else range(n - 1, -1, -1)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for i in rows:
            done = slice(0, i) if lower else slice(i + 1, n)
            x[i] = (b[i] - T[i, done] @ x[done]) / T[i, i]
    return x


def _lu(A):
    """``(L, U, perm)`` with ``A[perm] = L @ U``: LU with partial pivoting, the first
    largest magnitude of each column as its pivot (LAPACK's xGETRF); a column with no
    nonzero pivot is passed over, as xGETRF does (U keeps its zero)."""
    n = A.shape[0]
    U, L, perm = A.copy(), np.eye(n, dtype=A.dtype), np.arange(n)
    for k in range(n - 1):
        p = k + int(np.argmax(np.abs(U[k:, k])))
        if U[p, k] == 0:
            continue
        if p != k:
            U[[k, p]] = U[[p, k]]
            L[[k, p], :k] = L[[p, k], :k]
            perm[[k, p]] = perm[[p, k]]
        L[k + 1:, k] = U[k + 1:, k] / U[k, k]
        U[k + 1:, k:] -= np.outer(L[k + 1:, k], U[k, k:])
        U[k + 1:, k] = 0
    return L, U, perm


def _basic(A, b, where):
    """MATLAB's basic solution of a rectangular system (see the module's notes)."""
    m, n = A.shape
    R, qtb, cols = A.copy(), b.copy(), np.arange(n)
    steps = min(m, n)
    for k in range(steps):
        norms = np.linalg.norm(R[k:, k:], axis=0)
        j = k + int(np.argmax(norms))
        if j != k:
            R[:, [k, j]] = R[:, [j, k]]
            cols[[k, j]] = cols[[j, k]]
        v, beta = _householder(R[k:, k])
        if beta:
            R[k:, k:] -= beta * np.outer(v, v.conj() @ R[k:, k:])
            qtb[k:] -= beta * np.outer(v, v.conj() @ qtb[k:])
        R[k + 1:, k] = 0
    diag = np.abs(np.diagonal(R))
    tol = max(m, n) * np.finfo(R.real.dtype).eps * (diag[0] if diag.size else 0.0)
    rank = int(np.sum(diag > tol))
    if rank < steps:
        _warn(where, f"Rank deficient, rank = {rank}, tol = {tol:e}.")
    x = np.zeros((n, b.shape[1]), A.dtype)
    if rank:
        x[cols[:rank]] = _substituted(R[:rank, :rank], qtb[:rank], lower=False)
    return x


def _householder(x):
    """``(v, beta)`` with ``(I - beta v v^H) x = alpha e1`` (``|alpha| = ||x||``, its
    sign against x[0]'s so nothing cancels); beta 0 when x is already zero."""
    norm = np.linalg.norm(x)
    if norm == 0:
        return x, 0.0
    v = x.copy()
    phase = x[0] / abs(x[0]) if x[0] != 0 else 1.0
    v[0] += phase * norm
    return v, 2.0 / np.real(v.conj() @ v)


def _warn(where, text):
    warnings.warn(f"{where()}: {text}", RuntimeWarning, stacklevel=5)  # (mldivide's caller)
