"""Argument checks that every worker makes the same way, and raising them together."""

import contextlib

import numpy as np

from . import _world
from ._agree import agree, class_name, shared_error
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
def local_work(call, where, together=True):
    """This worker's own work before a collective (reading data, a forward pass).

    An exception here is raised again led by ``call``, this worker and ``where``
    ("trainnet (worker 1 of 2), iteration 6 (epoch 1): OSError: ..."), of its own class
    where one can be made from that message (else the original, unchanged). With
    ``together`` every other worker raises it too (the same class where it can be
    rebuilt there, else an SpmdError naming it) instead of waiting for this worker in
    the next collective."""
    try:
        yield
    except Exception as exc:
        scope = _world.current()
        text = f"{call} ({scope.who()}), {where}: {type(exc).__name__}: {exc}"
        error = shared_error(type(exc), class_name(type(exc)), text)
        error.__cause__ = exc
        if together:
            try:
                fail_together(call, error)
            except Exception:  # the error just made, raised by the agreement
                pass
        if type(error) is type(exc):
            raise error
        raise
