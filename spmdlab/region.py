"""``spmd``: a block on the first workers only (MATLAB ``spmd(n) ... end``, ``spmd(m, n)``).

    for _ in spmd(2):                      # MATLAB:  spmd(2)
        total = spmd_plus(spmd_index())    #              total = spmdPlus(spmdIndex);
                                           #          end
Inside the block ``spmd_index()``, ``spmd_size()`` and every collective and message are
scoped to its workers; the other workers skip the block without waiting for it. As at
MATLAB's ``end``, the block's workers leave it together: worker 1, the client, goes on
only once every worker of the block has finished it.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterator, Optional, Tuple, TypeVar, Union, overload

import numpy as np
from ._mpi import MPI

from . import _world
from ._agree import agree
from ._pack import digest
from .errors import SpmdTypeError, SpmdValueError

__all__ = ["spmd"]

R = TypeVar("R")


@overload
def spmd(n: Optional[int] = None, /) -> Region: ...
@overload
def spmd(m: int, n: Union[int, float], /) -> Region: ...


def spmd(*counts: Any, **named: Any) -> Region:
    """Run the body of a ``for _ in spmd(n):`` loop once on workers 1..n, never elsewhere.

    Collective on entry: every worker of the current scope must reach the same
    ``spmd(...)`` (the others then skip the body at once). The block's workers leave it
    together, as at MATLAB's ``end``: the loop ends on each of them once all of them
    have run the body to its end (a ``break`` or ``return`` inside it skips that wait,
    so it must leave the body on every worker of the block or on none).
    ``spmd(n).run(fn, *args)`` calls ``fn`` inside the region and returns its result
    (None on workers outside it).

    Parameters
    ----------
    m, n
        ``spmd()``: every worker. ``spmd(n)``: exactly n workers (the first n); ``0`` is
        MATLAB's "on the client", which in a script is worker 1 alone. ``spmd(m, n)``: at
        least m and at most n workers (``n`` may be ``math.inf``): as many as the scope
        has, up to n; SpmdValueError on every worker when it has fewer than m.

    Examples
    --------
    >>> for _ in spmd(1):                       # spmd(1) ... end
    ...     print(spmd_size(), spmd_plus(1))
    1 1
    >>> spmd(1).run(lambda: spmd_index() * 10)  # the function form
    10
    >>> spmd(1, 8).run(spmd_size)               # spmd(1, 8): one worker here
    1

    MATLAB
    ------
    ``spmd ... end``, ``spmd(n) ... end``, ``spmd(m, n) ... end``
    """
    return enter("spmd", counts, named, _plain)


def _plain(value: Any) -> Any:
    return value


def enter(call: str, counts: Tuple[Any, ...], named: dict,
          number: Callable[[Any], Any]) -> Region:
    """``spmd(*counts)`` (``spmdlab.matlab.spmd`` passes ``number``, which reads MATLAB's
    numbers): agree on the number of workers, make or reuse the region's scope."""
    scope = _world.current()
    error: Optional[Exception] = None
    k = 0
    shown = ", ".join(map(repr, counts))
    if named:
        if set(named) == {"n"} and not counts:  # spmd(n=2): the one-argument form
            counts = (named["n"],)
            shown = f"n={named['n']!r}"
        else:
            shown = ", ".join([shown] * bool(counts) +
                              [f"{k}={v!r}" for k, v in named.items()])
            error = SpmdTypeError(f"{call}({shown}) ({scope.who()}): MATLAB's forms are "
                                  f"{call}(), {call}(n) and {call}(m, n); worker counts "
                                  f"are positional")
    if error is None:
        k, error = _workers(call, shown, scope, tuple(number(c) for c in counts))
    agree(scope, call, digest((call, k if error is None else None)), error=error,
          describe=lambda: f"{call}({shown})")
    if k not in scope.regions:
        if k == scope.size:
            scope.regions[k] = scope
        else:
            color = 0 if scope.rank < k else MPI.UNDEFINED
            comm = scope.comm.Split(color, scope.rank)
            if comm == MPI.COMM_NULL:
                scope.regions[k] = None
            else:
                region = scope.regions[k] = _world.Scope(comm, scope.world_ranks[:k])
                # the region's name on every worker: the sizes of the regions it is in
                # (the profiler matches collectives across workers by it)
                region.path = path(scope) + (k,)
                _world.SCOPES.append(region)
    return Region(scope.regions[k])


def path(scope: Any) -> tuple:
    """The same name for a scope on each of its workers: ``()`` for the world, then the
    size of each ``spmd(n)`` region entered to reach it (``(3, 2)``: ``spmd(2)`` inside
    ``spmd(3)``). Its place in a worker's list of scopes is no name: a worker outside a
    region makes fewer scopes than its members."""
    return getattr(scope, "path", ())


def _workers(call, shown, scope, counts):
    """The number of workers ``spmd(*counts)`` runs on here, or the error to raise."""
    where = f"{call}({shown}) ({scope.who()})"
    if len(counts) > 2:
        return 0, SpmdTypeError(f"{where}: MATLAB's forms are {call}(), {call}(n) and "
                                f"{call}(m, n) (got {len(counts)} arguments)")
    if not counts or (len(counts) == 1 and counts[0] is None):
        return scope.size, None
    names = ("n",) if len(counts) == 1 else ("m", "n")
    for name, value in zip(names, counts):
        infinite = name == "n" and len(counts) == 2 and isinstance(value, float) and \
            value == math.inf
        if not infinite and (isinstance(value, bool) or
                             not isinstance(value, (int, np.integer))):
            also = ", or math.inf" if name == "n" and len(counts) == 2 else ""
            return 0, SpmdTypeError(f"{where}: '{name}' must be a number of workers, an "
                                    f"int from 0{also} (got {value!r} that is a "
                                    f"{type(value).__name__})")
        if value < 0:
            return 0, SpmdValueError(f"{where}: '{name}' must be a number of workers, "
                                     f"0 or more (got {value})")
    if len(counts) == 1:
        n = int(counts[0])
        if n > scope.size:
            return 0, SpmdValueError(f"{where}: 'n' must be from 0 to {scope.size}, the "
                                     f"number of workers (got {n}); {call}(1, {n}) runs "
                                     f"on as many as there are, up to {n}")
        return max(n, 1), None  # spmd(0): on the client, worker 1 in a script
    m, n = counts
    if m > n:
        return 0, SpmdValueError(f"{where}: the least number of workers, m = {m}, is more "
                                 f"than the most, n = {n}")
    if m > scope.size:
        return 0, SpmdValueError(f"{where}: needs at least {m} workers, and there are "
                                 f"{scope.size}")
    return max(int(min(n, scope.size)), 1), None


class Region:
    """The value of ``spmd(n)``: iterate it once (members) or not at all (the others).

    Examples
    --------
    >>> region = spmd(1)
    >>> region.member
    True

    MATLAB
    ------
    none: MATLAB's ``spmd(n)`` is a block, not a value
    """

    def __init__(self, scope: Optional[_world.Scope]) -> None:
        self.scope = scope

    @property
    def member(self) -> bool:
        """Whether this worker runs the block."""
        return self.scope is not None

    def __iter__(self) -> Iterator[int]:
        scope = self.scope
        if scope is None:
            return
        _world.push(scope)
        try:
            yield scope.index
            # The body ran to its end (an exception, a break or a return closes the
            # loop without coming back here): MATLAB's end, which the client passes
            # once every worker of the block has finished it.
            if scope.size > 1:
                agree(scope, "the end of spmd", digest(("the end of spmd",)),
                      describe=lambda: "the end of an spmd block")
        finally:
            _world.pop(scope)

    def __enter__(self) -> None:
        # ``with spmd(2):`` cannot skip its body on the workers outside the region (a
        # context manager has no way to), so it is refused, on every worker, with the form
        raise SpmdTypeError(
            f"spmd ({_world.current().who()}): a region is a loop, not a context manager: "
            f"write 'for _ in spmd(...):' (its body runs on the region's workers only), "
            f"or spmd(...).run(fn) (MATLAB's spmd(n) ... end)")

    def __exit__(self, *exc: Any) -> None:  # (never reached: __enter__ raises)
        return None

    def run(self, fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> Optional[R]:
        """``fn(*args, **kwargs)`` inside the region; None on workers outside it."""
        if not callable(fn):  # on every worker, the ones outside the region too
            raise SpmdTypeError(f"spmd(...).run ({_world.current().who()}): 'fn' must be "
                                f"callable (got {fn!r} that is a {type(fn).__name__})")
        result = None
        for _ in self:
            result = fn(*args, **kwargs)
        return result
