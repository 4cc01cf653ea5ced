"""``parfor``: independent tasks spread over the workers (MATLAB ``parfor``).

    results = parfor(train_one, settings)   # every worker: [train_one(s) for s in settings]

Collective: every worker calls it with the same function and as many items (checked
before any item runs). Item i runs on worker ``i % N + 1`` (round robin, so
neighbouring settings of a sweep land on different workers); the results come back in
item order on every worker, or on ``destination`` only. An exception in any item, or a
result that cannot be sent, is raised on every worker, naming parfor, the function, the
item and the worker. Items run independently (MATLAB's rule): a collective or a message
between workers inside one is refused where it is called, and so fails that item.
"""

from __future__ import annotations

import pickle
import traceback
from typing import Any, Callable, Iterable, List, Optional, TypeVar, overload

from . import _world
from . import _agree
from ._agree import agree, describe_call
from ._checks import check_worker
from ._pack import digest
from .collectives import spmd_cat
from .errors import SpmdError, SpmdTypeError

__all__ = ["parfor"]

T = TypeVar("T")
R = TypeVar("R")


class _Failure:
    def __init__(self, index, exc):
        self.index = index
        self.kind = type(exc).__name__
        self.text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


@overload
def parfor(fn: Callable[[T], R], items: Iterable[T], destination: None = None) -> List[R]: ...
@overload
def parfor(fn: Callable[[T], R], items: Iterable[T], destination: int) -> Optional[List[R]]: ...


def parfor(fn: Callable[[T], R], items: Iterable[T],
           destination: Optional[int] = None) -> Optional[List[R]]:
    """``[fn(item) for item in items]``, the items shared out over the workers.

    Collective: every worker must call this with the same function and the same number
    of ``items`` (a sequence; checked first, SpmdMismatchError on every worker if not).
    Results are returned in item order on every worker (on ``destination`` only, None
    elsewhere); they must be picklable. Raises SpmdError on every worker if ``fn`` raised
    for any item or returned what cannot be sent (the message names parfor, the
    function, the item, the worker and the original error). Items cannot use
    collectives or messages between workers (MATLAB's rule): those raise in the item.

    Parameters
    ----------
    fn
        ``fn(item)``, called once per item on the worker the item falls to.
    items
        The same sequence on every worker.
    destination
        None: the results on every worker; a worker number: there only (None elsewhere).

    Examples
    --------
    >>> parfor(lambda x: x * x, [1, 2, 3, 4])
    [1, 4, 9, 16]

    MATLAB
    ------
    ``parfor i = 1:n, r(i) = f(x(i)); end``
    """
    scope = _world.current()
    call = "parfor"
    name = _name(fn)
    error: Optional[SpmdError] = None
    if not callable(fn):
        error = SpmdTypeError(f"parfor ({scope.who()}): 'fn' must be callable (got "
                              f"{fn!r} that is a {type(fn).__name__})")
    try:
        items = list(items)
    except TypeError as exc:
        items = []
        error = error or SpmdTypeError(f"parfor ({scope.who()}): 'items' must be a "
                                       f"sequence or an iterable ({exc})")
    except Exception as exc:  # a generator that raised: on every worker, not here alone
        items = []
        error = error or SpmdError(f"parfor ({scope.who()}): reading 'items' raised "
                                   f"{type(exc).__name__}: {exc}")
    error = error or check_worker(call, scope, "destination", destination)
    # before any item runs: the same function and item count on every worker (else items
    # would be lost, or run twice, and the workers leave parfor at different calls)
    count = len(items)
    if error is not None:  # (a bad destination may be unhashable: a list, an array)
        name, destination = None, None
    agree(scope, call, digest((call, name, count, destination)),
          error=error, describe=lambda: describe_call(
              call, f"{name} over {count} items",
              {"function": name, "item count": str(count)}, destination=destination))
    mine: List[Any] = []
    for i in range(scope.rank, len(items), scope.size):
        _world.PARFOR_ITEM = f"parfor item {name}(items[{i}])"
        _agree.hooks_changed()  # the collectives' fast paths check for it now
        try:
            value = fn(items[i])
            _check_sendable(value)
            mine.append((i, value))
        except Exception as exc:  # reported on every worker below
            mine.append((i, _Failure(i, exc)))
        finally:
            _world.PARFOR_ITEM = None
            _agree.hooks_changed()
    gathered = spmd_cat(mine, destination=destination)
    if destination is None:
        failures = [(i, value) for i, value in gathered if isinstance(value, _Failure)]
    else:  # the results go to destination only, but every worker raises: the failures
        # (small: their tracebacks) reach every worker
        failures = spmd_cat([(i, value) for i, value in mine if isinstance(value, _Failure)])
    if failures:
        i, failure = min(failures, key=lambda pair: pair[0])  # the first item that failed
        raise SpmdError(
            f"parfor ({scope.who()}): {name}(items[{i}]) on worker {i % scope.size + 1} "
            f"raised {failure.kind}" + (f" ({len(failures)} items failed)"
                                        if len(failures) > 1 else "") +
            f":\n{failure.text}")
    if gathered is None:
        return None
    results: List[Any] = [None] * len(items)
    for i, value in gathered:
        results[i] = value
    return results


def _name(fn):
    """How the errors name a function: its qualified name and, for a lambda, where it
    is defined (the same on every worker that runs the same script)."""
    qualname = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    code = getattr(fn, "__code__", None)
    if code is not None and qualname.endswith("<lambda>"):
        return f"{qualname} at {code.co_filename}:{code.co_firstlineno}"
    return qualname


def _check_sendable(value):
    """A result must travel to the other workers: pickled here (arrays out of band,
    not copied) so that one that cannot is an item failure naming the item."""
    try:
        pickle.dumps(value, protocol=5, buffer_callback=lambda buffer: None)
    except Exception as exc:
        raise SpmdTypeError(f"its result, a {type(value).__name__}, cannot be sent to the "
                          f"other workers: {type(exc).__name__}: {exc}") from None
