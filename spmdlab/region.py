"""``spmd(n)``: a block that runs on the first n workers only (MATLAB ``spmd(n) ... end``).

    for _ in spmd(2):                      # MATLAB:  spmd(2)
        total = spmd_plus(spmd_index())    #              total = spmdPlus(spmdIndex);
                                           #          end
Inside the block ``spmd_index()``, ``spmd_size()`` and every collective and message are
scoped to those n workers; the other workers skip the block without waiting for it.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Optional, TypeVar

import numpy as np
from ._mpi import MPI

from . import _world
from ._agree import agree
from ._pack import digest
from .errors import SpmdTypeError, SpmdValueError

__all__ = ["spmd"]

R = TypeVar("R")


def spmd(n: Optional[int] = None, most: Optional[int] = None, *extra: Any) -> Region:
    """Run the body of a ``for _ in spmd(n):`` loop once on workers 1..n, never elsewhere.

    Collective on entry: every worker of the current scope must reach the same
    ``spmd(n)`` (the others then skip the body at once). ``n`` None means every worker.
    ``spmd(m, n)`` (MATLAB's form) runs on at least ``m`` and at most ``n`` workers: as
    many as the scope has, up to ``n``, and an error if that is fewer than ``m``.
    ``spmd(n).run(fn, *args)`` calls ``fn`` inside the region and returns its result
    (None on workers outside it).

    Parameters
    ----------
    n
        The number of workers that run the block (the first n); None: every worker. With
        ``most``: the least number of workers.
    most
        With ``n``: the most workers the block runs on (MATLAB's ``spmd(m, n)``).

    Examples
    --------
    >>> for _ in spmd(1):                       # spmd(1) ... end
    ...     print(spmd_size(), spmd_plus(1))
    1 1
    >>> spmd(1).run(lambda: spmd_index() * 10)  # the function form
    10

    MATLAB
    ------
    ``spmd(n) ... end``, ``spmd ... end``, ``spmd(m, n) ... end``
    """
    scope = _world.current()
    call = "spmd"
    error: Optional[Exception] = None
    if extra:
        error = SpmdTypeError(f"{call} ({scope.who()}): takes spmd(), spmd(n) or "
                              f"spmd(m, n), as MATLAB does (got {2 + len(extra)} "
                              f"arguments)")
    elif most is not None:
        n, error = _at_least_at_most(scope, n, most)
    if error is not None:
        pass
    elif n is None:
        n = scope.size
    elif isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        error = SpmdTypeError(f"{call} ({scope.who()}): 'n' must be an int from 1 to "
                              f"{scope.size} (got {n!r} that is a {type(n).__name__})")
    elif not 1 <= n <= scope.size:
        error = SpmdValueError(f"{call} ({scope.who()}): 'n' must be from 1 to "
                               f"{scope.size}, the number of workers (got {n})")
    agree(scope, call, digest((call, int(n) if error is None and n is not None else None)),
          error=error,
          describe=lambda: f"spmd({n!r})" if most is None else f"spmd({n!r}, {most!r})")
    assert n is not None  # every worker has raised otherwise
    n = int(n)
    if n not in scope.regions:
        if n == scope.size:
            scope.regions[n] = scope
        else:
            color = 0 if scope.rank < n else MPI.UNDEFINED
            comm = scope.comm.Split(color, scope.rank)
            if comm == MPI.COMM_NULL:
                scope.regions[n] = None
            else:
                region = scope.regions[n] = _world.Scope(comm, scope.world_ranks[:n])
                # the region's name on every worker: the sizes of the regions it is in
                # (the profiler matches collectives across workers by it)
                region.path = path(scope) + (n,)
                _world.SCOPES.append(region)
    return Region(scope.regions[n])


def _at_least_at_most(scope, least, most):
    """``(n, error)`` for MATLAB's ``spmd(m, n)``: every worker up to ``most``, at least
    ``least`` of them."""
    call = "spmd"
    for name, value in (("m", least), ("n", most)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            return least, SpmdTypeError(
                f"{call}(m, n) ({scope.who()}): {name!r} must be an int (got {value!r} "
                f"that is a {type(value).__name__})")
    if not 1 <= least <= most:
        return least, SpmdValueError(
            f"{call}(m, n) ({scope.who()}): needs 1 <= m <= n (got m={least}, n={most})")
    if least > scope.size:
        return least, SpmdValueError(
            f"{call}({least}, {most}) ({scope.who()}): needs at least {least} workers, "
            f"and there are {scope.size}")
    return min(int(most), scope.size), None


def path(scope: Any) -> tuple:
    """The same name for a scope on each of its workers: ``()`` for the world, then the
    size of each ``spmd(n)`` region entered to reach it (``(3, 2)``: ``spmd(2)`` inside
    ``spmd(3)``). Its place in a worker's list of scopes is no name: a worker outside a
    region makes fewer scopes than its members."""
    return getattr(scope, "path", ())


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
        if self.scope is None:
            return
        _world.push(self.scope)
        try:
            yield self.scope.index
        finally:
            _world.pop(self.scope)

    def run(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> Optional[R]:
        """``fn(*args, **kwargs)`` inside the region; None on workers outside it."""
        for _ in self:
            return fn(*args, **kwargs)
        return None
