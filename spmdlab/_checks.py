"""Argument checks that every worker makes the same way, and raising them together."""

import contextlib

import numpy as np

from . import _world
from ._agree import agree
from .errors import SpmdError, SpmdTypeError, SpmdValueError


def check_worker(call, scope, name, value, *, none_ok=True):
    """None, or the error for a worker number outside 1..size (an exception, not raised)."""
    if value is None and none_ok:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        return SpmdTypeError(
            f"{call} ({scope.who()}): '{name}' must be a worker number from 1 to "
            f"{scope.size} (got {value!r} that is a {type(value).__name__})")
    if not 1 <= value <= scope.size:
        return SpmdValueError(
            f"{call} ({scope.who()}): '{name}' must be a worker number from 1 to "
            f"{scope.size} (got {value}); worker numbers are 1-based")
    return None


def fail_together(call, error):
    """Collective: raise ``error`` here and a matching error on every other worker."""
    agree(_world.current(), call, 0, error=error)


@contextlib.contextmanager
def local_work(call, where):
    """This worker's own work before a collective (reading data, a forward pass): an
    exception here is re-raised, and every other worker gets an error naming ``call``,
    this worker, ``where`` and the exception, instead of waiting for it in the next
    collective."""
    try:
        yield
    except Exception as exc:
        kind = SpmdTypeError if isinstance(exc, TypeError) else SpmdValueError
        try:
            fail_together(call, kind(f"{call} ({_world.current().who()}), {where}: "
                                     f"{type(exc).__name__}: {exc}"))
        except SpmdError:
            pass
        raise
