"""``parfor``: independent tasks spread over the workers (MATLAB ``parfor``).

    results = parfor(train_one, settings)   # every worker: [train_one(s) for s in settings]

Collective: every worker calls it with the same items. Item i runs on worker
``i % N + 1`` (round robin, so neighbouring settings of a sweep land on different
workers); the results come back in item order on every worker, or on ``destination``
only. An exception in any item is raised on every worker, naming the item and worker.
"""

from __future__ import annotations

import traceback
from typing import Any, Callable, Iterable, List, Optional, TypeVar, overload

from . import _world
from .collectives import spmd_cat
from .errors import SpmdError, SpmdValueError

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

    Collective: every worker must call this with the same ``items`` (a sequence). Results
    are returned in item order on every worker (on ``destination`` only, None elsewhere);
    they must be picklable. Raises SpmdError on every worker if ``fn`` raised for any
    item (the message names the item, the worker and the original error).

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
    if not callable(fn):
        raise SpmdValueError(f"parfor ({scope.who()}): 'fn' must be callable (got {fn!r})")
    items = list(items)
    mine: List[Any] = []
    for i in range(scope.rank, len(items), scope.size):
        try:
            mine.append((i, fn(items[i])))
        except Exception as exc:  # reported on every worker below
            mine.append((i, _Failure(i, exc)))
    gathered = spmd_cat(mine, destination=destination)
    if gathered is None:
        return None
    results: List[Any] = [None] * len(items)
    failures = []
    for i, value in gathered:
        if isinstance(value, _Failure):
            failures.append((i, value))
        results[i] = value
    if failures:
        i, failure = failures[0]
        raise SpmdError(
            f"parfor ({scope.who()}): {getattr(fn, '__qualname__', type(fn).__qualname__)}"
            f"(items[{i}]) on worker {i % scope.size + 1} raised "
            f"{failure.kind}" + (f" ({len(failures)} items failed)" if len(failures) > 1
                                 else "") + f":\n{failure.text}")
    return results
