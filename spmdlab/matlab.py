"""MATLAB's names, with MATLAB's argument conventions, for line-by-line ports.

    from spmdlab.matlab import *
    total = spmdPlus(spmdIndex())          # total = spmdPlus(spmdIndex);
    row = spmdCat(spmdIndex())             # row = spmdCat(spmdIndex);   -> [1 2 ... N]
    ok = spmdReduce("and", has_data)       # ok = spmdReduce(@and, hasdata(mbq));

Differences from the snake_case API: ``spmdCat`` takes MATLAB's 1-based ``dim``
(default 2; a 1-D array is a row vector, a scalar is 1x1), ``'any'`` is accepted where
MATLAB accepts it, ``[]`` is ``None``, and reduction functions may be given by MATLAB
name (``"plus"``, ``"times"``, ``"max"``, ``"min"``, ``"and"``, ``"or"``, ``"xor"``,
``"bitand"``, ``"bitor"``, ``"bitxor"``) as well as by Python function.
"""

import operator

import numpy as np

from . import _checks, collectives, p2p
from ._backends import classify
from .errors import SpmdValueError

__all__ = [
    "gcat", "gop", "gplus", "labBarrier", "mpiprofile", "labBroadcast", "labProbe", "labReceive",
    "labSend", "labSendReceive", "labindex", "numlabs", "spmdBarrier", "spmdBroadcast",
    "spmdCat", "spmdIndex", "spmdPlus", "spmdProbe", "spmdReceive", "spmdReduce",
    "spmdSend", "spmdSendReceive", "spmdSize",
]

_FUNCTIONS = {"plus": operator.add, "times": operator.mul, "max": max, "min": min,
              "and": operator.and_, "or": operator.or_, "xor": operator.xor,
              "bitand": np.bitwise_and, "bitor": np.bitwise_or, "bitxor": np.bitwise_xor}


def _any(value):
    """MATLAB's 'any' (and []) as spmdlab's None."""
    if isinstance(value, str) and value.lower() == "any":
        return None
    return value


def _function(fcn):
    if isinstance(fcn, str):
        name = fcn.lstrip("@")
        if name not in _FUNCTIONS:
            raise SpmdValueError(
                f"spmdReduce: unknown MATLAB function name {fcn!r}; use one of "
                f"{', '.join(sorted(_FUNCTIONS))} or pass a Python function")
        return _FUNCTIONS[name]
    return fcn


def spmdIndex():
    """``spmdIndex``: this worker's 1-based number."""
    return collectives.spmd_index()


def spmdSize():
    """``spmdSize``: the number of workers."""
    return collectives.spmd_size()


def spmdPlus(X, destination=None):
    """``spmdPlus(X)``, ``spmdPlus(X, destination)``."""
    return collectives.spmd_plus(X, destination)


def spmdReduce(fcn, X, destination=None):
    """``spmdReduce(fcn, X)``, ``spmdReduce(fcn, X, destination)``; fcn may be a MATLAB name."""
    return collectives.spmd_reduce(_function(fcn), X, destination)


def spmdCat(X, dim=2, destination=None):
    """``spmdCat(X)``, ``spmdCat(X, dim)``, ``spmdCat(X, dim, destination)``.

    ``dim`` is 1-based and defaults to 2, as in MATLAB. Arrays are seen as MATLAB sees
    them: a scalar is 1x1 and a 1-D array a 1xk row, with trailing singleton dimensions
    added when ``dim`` exceeds the array's; a result that is a single row comes back 1-D.
    Structs (dicts) and other objects give a list with one entry per worker.
    """
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
        _checks.fail_together("spmdCat", SpmdValueError(
            f"spmdCat (worker {spmdIndex()} of {spmdSize()}): 'dim' must be a positive int "
            f"(1-based, as in MATLAB; got {dim!r})"))
    leaf = classify(X)
    if leaf is None:
        return collectives.spmd_cat(X, destination=destination)
    ndim = len(leaf.shape)
    shape = (1,) * (2 - ndim) + tuple(leaf.shape) if ndim < 2 else tuple(leaf.shape)
    shape = shape + (1,) * (dim - len(shape))
    value = X if leaf.family not in ("py-bool", "py-int", "py-float", "py-complex",
                                     "np-scalar") else np.asarray(X)
    result = collectives.spmd_cat(value.reshape(shape), axis=dim - 1,
                                  destination=destination)
    if result is None:
        return None
    if ndim < 2 and dim == 2:  # a 1xM row, as MATLAB returns it, is a 1-D array here
        return result.reshape(-1)
    return result


def spmdBroadcast(source, X=None):
    """``spmdBroadcast(source, X)`` on the source, ``spmdBroadcast(source)`` elsewhere."""
    return collectives.spmd_broadcast(source, X)


def spmdBarrier():
    """``spmdBarrier``."""
    collectives.spmd_barrier()


def spmdSend(X, destination, tag=0):
    """``spmdSend(X, destination)``, ``spmdSend(X, destination, tag)``."""
    p2p.spmd_send(X, destination, tag)


def spmdReceive(source=None, tag=None, *, status=False):
    """``spmdReceive``, ``spmdReceive(source)``, ``spmdReceive('any', tag)``, ...

    MATLAB's ``[data, source, tag] = spmdReceive(...)`` is ``status=True``.
    """
    return p2p.spmd_receive(_any(source), tag, status=status)


def spmdSendReceive(destination, source, X, tag=0):
    """``spmdSendReceive(destination, source, X)``; ``[]`` (None) skips that side."""
    return p2p.spmd_send_receive(destination, source, X, tag)


def spmdProbe(source=None, tag=None, *, status=False):
    """``spmdProbe``, ``spmdProbe(source)``, ``spmdProbe('any', tag)``, ..."""
    return p2p.spmd_probe(_any(source), tag, status=status)


# -- the legacy names (R2022b and earlier) ----------------------------------------------

labindex = spmdIndex
numlabs = spmdSize


def gplus(X, targetlab=None):
    """``gplus(X)``, ``gplus(X, targetlab)``."""
    return spmdPlus(X, targetlab)


def gcat(X, dim=2, targetlab=None):
    """``gcat(X)``, ``gcat(X, dim)``, ``gcat(X, dim, targetlab)``."""
    return spmdCat(X, dim, targetlab)


def gop(fcn, X, targetlab=None):
    """``gop(fcn, X)``, ``gop(fcn, X, targetlab)``."""
    return spmdReduce(fcn, X, targetlab)


def labBroadcast(source, X=None):
    """``labBroadcast(source, X)`` / ``labBroadcast(source)``."""
    return spmdBroadcast(source, X)


labBarrier = spmdBarrier
labSend = spmdSend
labReceive = spmdReceive
labSendReceive = spmdSendReceive
labProbe = spmdProbe


_profile = None


def mpiprofile(action="on", path="mpiprofile"):
    """MATLAB's ``mpiprofile``: ``"on"`` starts profiling the collectives (again, from
    zero), ``"off"`` stops, ``"resume"`` goes on recording, ``"reset"`` clears what was
    recorded; ``"info"`` returns the profile (a dict, on worker 1; None on the others)
    and ``"viewer"`` stops, prints the table on worker 1 and saves ``path.json`` and
    ``path.png`` there. ``"info"`` and ``"viewer"`` are collective (every worker)."""
    from .profiler import Profile

    global _profile
    action = str(action).lower()
    if action == "on":
        _profile = Profile().start()
        return None
    if action == "resume":
        _profile = (_profile or Profile()).start()
        return None
    if _profile is None:
        _profile = Profile()
    if action == "off":
        _profile.stop()
        return None
    if action == "reset":
        _profile.records.clear()
        return None
    if action == "info":
        return _profile.summary()
    if action == "viewer":
        _profile.stop()
        summary = _profile.report()
        _profile.save(path)
        return summary
    raise SpmdValueError(f"mpiprofile: the action must be 'on', 'off', 'resume', 'reset', "
                         f"'info' or 'viewer' (got {action!r})")
