"""Reduction operations: which functions spmdlab folds itself, and the folds.

An operation is a numpy ufunc that folds element-wise, the dtype kinds it is defined
for, and the same fold on Python scalars. Among a few workers every reduction strategy
(``_reduce``, ``_shm``) folds with ``fold``: the workers' values in worker order, left
to right, ``((x1 op x2) op x3) ... op xN``. Among more (``SPMDLAB_TREE_ABOVE``) every
strategy folds with the bracketing of the tree (``tree_fold``, ``_tree``). Either way
the bracketing depends on the worker count alone, so a float sum has the same bits on
every worker and at every node layout.

Every fold of parts of the workers' values runs under ``quiet()``: a sum that overflows
to inf, or meets inf and -inf, gives inf or NaN as MPI's own operations do, without
numpy's RuntimeWarning. Such a warning would name spmdlab's internals, come on some
workers only (those whose merges met the values) and depend on the worker count; under
``warnings.simplefilter("error")`` or pytest's ``-W error`` it became an exception on
those workers mid-collective, while the others waited. (The small folds in which every
worker folds every row, ``_reduce._rows_fold``, run as they are and again under
``quiet()`` only where a warning became an error: they cost less than ``quiet()``.)
"""

import importlib
import operator
from typing import Any, Callable

import numpy as np


class Op:
    """A reduction: its name, its numpy ufunc, its dtype kinds, its scalar fold."""

    def __init__(self, name, ufunc, kinds, pyfold=None):
        self.name = name
        self.ufunc = ufunc
        self.kinds = kinds  # numpy dtype kinds the operation is defined for
        self.pyfold = pyfold or ufunc  # the same fold on Python scalars, without numpy

    def __repr__(self):
        return f"Op({self.name})"


class _Quiet:
    """``with quiet():`` numpy's floating-point warnings off, as ``np.errstate(all=
    "ignore")`` turns them off, for half its cost: numpy's own state is set and reset
    directly (0.4 against 0.8 us on the project's VM, numpy 2.4, where a small
    reduction's whole fold costs about as much; numpy versions without that state use
    ``np.errstate``)."""

    __slots__ = ("token",)

    def __enter__(self):
        self.token = _STATE.set(_IGNORE)

    def __exit__(self, *exc):
        _STATE.reset(self.token)


def _errstate() -> Any:
    """The floating-point state every fold runs in: warnings off (see above)."""
    return np.errstate(all="ignore")


quiet: Callable[[], Any] = _errstate
try:  # numpy's floating-point state (numpy 2: a context variable of its own)
    _STATE = importlib.import_module("numpy._core._ufunc_config")._extobj_contextvar
    _IGNORE = importlib.import_module("numpy._core.umath")._make_extobj(all="ignore")
    quiet = _Quiet
except (ImportError, AttributeError, TypeError):  # pragma: no cover
    pass


_NUMERIC = "iufc"
SUM = Op("sum", np.add, _NUMERIC, operator.add)
PROD = Op("prod", np.multiply, _NUMERIC, operator.mul)
MAX = Op("max", np.maximum, "iuf")
MIN = Op("min", np.minimum, "iuf")


def _fmax(a, b):
    """``numpy.fmax`` on Python scalars: a NaN loses to any number (MATLAB's ``max``)."""
    return a if b != b else b if a != a else max(a, b)


def _fmin(a, b):
    """``numpy.fmin`` on Python scalars: a NaN loses to any number (MATLAB's ``min``)."""
    return a if b != b else b if a != a else min(a, b)


FMAX = Op("fmax", np.fmax, "iuf", _fmax)  # MATLAB's max and min: NaN is ignored
FMIN = Op("fmin", np.fmin, "iuf", _fmin)
LAND = Op("land", np.logical_and, "b", operator.and_)
LOR = Op("lor", np.logical_or, "b", operator.or_)
LXOR = Op("lxor", np.logical_xor, "b", operator.xor)
BAND = Op("band", np.bitwise_and, "iu", operator.and_)
BOR = Op("bor", np.bitwise_or, "iu", operator.or_)
BXOR = Op("bxor", np.bitwise_xor, "iu", operator.xor)

# fcn -> candidate operations; the first whose dtype kinds fit every leaf is used. The
# maximum of bools is their or, the minimum their and (as numpy's, keeping bool)
KNOWN = {
    operator.add: (SUM,), np.add: (SUM,),
    operator.mul: (PROD,), np.multiply: (PROD,),
    max: (MAX, LOR), np.maximum: (MAX, LOR), min: (MIN, LAND), np.minimum: (MIN, LAND),
    np.fmax: (FMAX, LOR), np.fmin: (FMIN, LAND),
    operator.and_: (LAND, BAND), operator.or_: (LOR, BOR),
    operator.xor: (LXOR, BXOR),
    np.logical_and: (LAND,), np.logical_or: (LOR,), np.logical_xor: (LXOR,),
    np.bitwise_and: (BAND,), np.bitwise_or: (BOR,), np.bitwise_xor: (BXOR,),
}
# The scalar fast paths (see ``_reduce.fast_paths``) cover these.
SCALAR_OPS = (SUM, PROD, LAND, LOR, LXOR, BAND, BOR, BXOR)

VERB = {"sum": "sum", "prod": "multiply", "max": "take the maximum of",
        "min": "take the minimum of", "fmax": "take the maximum of",
        "fmin": "take the minimum of"}


def fold(op, sources, out):
    """``out = sources[0] op sources[1] op ...``, left to right (worker order).

    ``sources`` is a sequence of equally shaped arrays (or a 2-D array, one row per
    worker); ``out`` may be one of them only if it is the first.
    """
    n = len(sources)
    if n == 1:
        if out is not sources[0]:
            out[...] = sources[0]
        return out
    with quiet():
        op.ufunc(sources[0], sources[1], out=out)
        for k in range(2, n):
            op.ufunc(out, sources[k], out=out)
    return out


def tree_fold(op, sources, out):
    """``out`` = the sources combined as the tree among many workers brackets them
    (``_tree.schedule``): the first 2(N - P) pair up, P the largest power of two up to N,
    then neighbouring blocks of 1, 2, 4, ... combine, always lower op upper.

    ``sources`` as for ``fold``; ``out`` may not be one of them."""
    n = len(sources)
    if n == 1:
        out[...] = sources[0]
        return out
    with quiet():
        return _tree_fold(op, sources, out, n)


def _tree_fold(op, sources, out, n):
    """``tree_fold`` of ``n`` > 1 sources (under ``quiet``)."""
    top = 1 << (n.bit_length() - 1)
    rem = n - top
    ufunc = op.ufunc
    stack = []  # [level, partial, ours]: a binary counter over the tree's ``top`` leaves
    for i in range(top):
        if i < rem:
            value, ours = ufunc(sources[2 * i], sources[2 * i + 1]), True
        else:
            value, ours = sources[i + rem], False
        level = 0
        while stack and stack[-1][0] == level:
            _, lower, lower_ours = stack.pop()
            if i == top - 1 and not stack:  # the root: straight into ``out``
                value = ufunc(lower, value, out=out)
            elif lower_ours:
                value = ufunc(lower, value, out=lower)
            else:
                value = ufunc(lower, value)
            ours, level = True, level + 1
        stack.append((level, value, ours))
    return out
