"""``Composite``: MATLAB's one-value-per-worker container, for a program every worker runs.

In MATLAB a variable set inside ``spmd`` is a Composite on the client, read there as
``X{k}`` and set as ``X{k} = v``. With spmdlab the client's code runs on every worker
(worker 1 plays the client), so reading worker k's value is collective: every worker
runs ``c[k]`` and every worker gets the value. Setting ``c[k] = v`` gives worker k the
client's ``v`` (worker 1's), as MATLAB's client assignment does.
"""

from __future__ import annotations

from typing import Any, Iterator, List, Optional, Sequence, Union, overload

import numpy as np

from . import _world
from ._checks import check_worker, fail_together
from .collectives import broadcast, gather
from .errors import SpmdTypeError, SpmdValueError

__all__ = ["Composite"]

_UNSET = object()  # no value on this worker (MATLAB: the element does not exist)


class Composite:
    """One value per worker, read and set by worker number as MATLAB's client does.

    ``Composite(value)`` holds ``value`` as this worker's element; ``Composite()`` holds
    none yet. Reading or setting an element by number is collective; ``mine`` is this
    worker's own element and is not.

    Collective: every worker of the scope the Composite was made in must index it the
    same way, in the same order (``c[k]``, ``c[k] = v``, ``c[:]``, ``list(c)``,
    ``c.exist()``).

    Parameters
    ----------
    value
        This worker's element; omitted: none yet (MATLAB ``Composite()``).

    Examples
    --------
    MATLAB's ``spmd, x = spmdIndex^2; end; disp(x{1}); x{1} = -1;``, here at one worker
    (at four, ``x[:]`` is ``[-1, 4, 9, 16]``):

    >>> x = Composite(spmd_index() ** 2)
    >>> x[1], len(x)
    (1, 1)
    >>> x[1] = -1             # worker 1's element becomes the client's -1
    >>> x[:], x.mine, x.exist()
    ([-1], -1, [True])

    MATLAB's ``spmd(2), S = spmdIndex; end; S{1}`` in a script, where the workers outside
    the block never run its lines: the Composite is made on every worker before the
    block, filled inside, read after it (here at one worker; at four, ``S.exist()`` is
    ``[True, True, False, False]``, as MATLAB's ``exist(S, k)``):

    >>> S = Composite()
    >>> for _ in spmd(1):
    ...     S.mine = spmd_index() * 10
    >>> S[1], S.exist()
    (10, [True])

    MATLAB
    ------
    ``X{k}``, ``X{k} = v``, ``length(X)``, ``exist(X, k)``, ``Composite()``
    """

    __slots__ = ("_scope", "_value")

    def __new__(cls, value: Any = _UNSET) -> "Composite":
        client = _world.client()
        if client is not None:  # the client of a pool: a Composite over its workers
            return client.composite(None if value is _UNSET else value)
        return object.__new__(cls)

    def __init__(self, value: Any = _UNSET) -> None:
        self._scope = _world.current()
        self._value = value

    # -- this worker's element (local) --------------------------------------------------

    @property
    def mine(self) -> Any:
        """This worker's element (not collective); SpmdValueError when it holds none."""
        if self._value is _UNSET:
            raise SpmdValueError(f"Composite.mine ({self._scope.who()}): this worker holds "
                                 f"no value; set it with c.mine = value or c[k] = value")
        return self._value

    @mine.setter
    def mine(self, value: Any) -> None:
        self._value = value

    # -- collective access by worker number ----------------------------------------------

    def __len__(self) -> int:
        """The number of workers (MATLAB ``length(c)``), not collective."""
        return self._scope.size

    @overload
    def __getitem__(self, k: int) -> Any: ...
    @overload
    def __getitem__(self, k: Union[slice, Sequence[int], np.ndarray]) -> List[Any]: ...

    def __getitem__(self, k: Any) -> Any:
        """``c[k]``: worker k's element on every worker (collective). ``c[:]`` or a list
        or range of worker numbers gives a list of those workers' elements."""
        call = f"Composite[{_shown(k)}]"
        scope = self._in_scope(call)
        k = self._key(k)
        if isinstance(k, (slice, list, tuple, range, np.ndarray)):
            workers = self._numbers(call, scope, k)
            held = gather(call, self._held())
            return [self._element(call, scope, w, held[w - 1]) for w in workers]
        return self._element(call, scope, k, broadcast(call, k, self._held(), name="k"))

    def __setitem__(self, k: int, value: Any) -> None:
        """``c[k] = value``: worker k's element becomes the client's (worker 1's)
        ``value`` (collective; ``value`` is ignored on the other workers)."""
        call = f"Composite[{_shown(k)}] = ..."
        scope = self._in_scope(call)
        k = self._key(k)
        error = check_worker(call, scope, "k", k, none_ok=False)
        if error is not None:
            fail_together(call, error)
        value = broadcast(call, 1, value)
        if scope.index == k:
            self._value = value

    def __iter__(self) -> Iterator[Any]:
        """Every worker's element, in worker order (collective: one exchange)."""
        return iter(self[:])

    @overload
    def exist(self, k: None = None) -> List[bool]: ...
    @overload
    def exist(self, k: int) -> bool: ...
    @overload
    def exist(self, k: Union[Sequence[int], np.ndarray]) -> List[bool]: ...

    def exist(self, k: Any = None) -> Union[bool, List[bool]]:
        """Whether worker ``k`` holds an element (MATLAB ``exist(c, k)``), on every
        worker; with no ``k`` a list of bools, one per worker (``exist(c)``), and with a
        list, range or array of worker numbers one per number (MATLAB's ``exist(c, [1
        3])``). Collective.
        """
        here = self._value is not _UNSET
        call = "Composite.exist()" if k is None else f"Composite.exist({_shown(k)})"
        scope = self._in_scope(call)
        if k is None:
            return gather(call, here)
        k = self._key(k)
        if isinstance(k, (list, tuple, range, np.ndarray)):
            workers = self._numbers(call, scope, k)
            held = gather(call, here)
            return [bool(held[w - 1]) for w in workers]
        return bool(broadcast(call, k, here, name="k"))

    def __repr__(self) -> str:  # local: a debugger or a print must never start a collective
        held = "no value" if self._value is _UNSET else type(self._value).__name__
        return f"<Composite of {len(self)} workers; {self._scope.who()} holds {held}>"

    # -- helpers --------------------------------------------------------------------------

    def _key(self, k: Any) -> Any:
        """A worker number (or list of them) as the caller spelled it (a 0-d array is
        one number, as numpy indexes with it); ``spmdlab.matlab`` reads MATLAB's
        spellings here."""
        return k.item() if isinstance(k, np.ndarray) and k.ndim == 0 else k

    def _held(self):
        return (False, None) if self._value is _UNSET else (True, self._value)

    def _in_scope(self, call):
        scope = _world.current()
        if scope is self._scope:
            return scope
        # the same on every worker that runs this line: each raises, none waits
        made = self._scope.size
        if made > scope.size:  # regions nest on fewer workers: made outside this block
            raise SpmdValueError(
                f"{call} ({scope.who()}): this Composite was made outside this spmd "
                f"block, with {made} workers; inside the block set this worker's element "
                f"with c.mine = value, and index it after the block")
        raise SpmdValueError(
            f"{call} ({scope.who()}): this Composite was made inside an spmd block of "
            f"{made} workers, which has ended, and the other workers never ran the line "
            f"that made it. Make it on every worker before the block and fill it inside: "
            f"S = Composite() before the block, S.mine = value inside it, S[k] after it "
            f"(MATLAB's spmd({made}), S = value; end, S{{k}}); or index it in the next "
            f"spmd({made}) block")

    def _numbers(self, call, scope, k):
        if isinstance(k, slice):
            if k != slice(None):
                fail_together(call, SpmdTypeError(
                    f"{call} ({scope.who()}): only c[:] slices a Composite; pick workers "
                    f"with a list or range of worker numbers (1-based), such as "
                    f"c[range(2, {scope.size + 1})]"))
            return list(range(1, scope.size + 1))
        workers = list(np.asarray(k).reshape(-1).tolist()) if isinstance(k, np.ndarray) \
            else list(k)
        for w in workers:
            error = check_worker(call, scope, "k", w, none_ok=False)
            if error is not None:
                fail_together(call, error)
        return workers

    @staticmethod
    def _element(call, scope, k, held):
        has, value = held
        if not has:
            raise SpmdValueError(f"{call} ({scope.who()}): worker {k} holds no value; "
                                 f"set it with c[{k}] = value, or there with c.mine = value")
        return value


def _shown(k):
    return ":" if isinstance(k, slice) and k == slice(None) else repr(k)
