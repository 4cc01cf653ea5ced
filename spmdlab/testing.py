"""Fault injection, to test how a program's collective code handles a failing worker.

::

    from spmdlab.testing import inject_fault

    with inject_fault(worker=2, call="spmd_plus", at=3, action="raise"):
        train()   # worker 2 raises at its 3rd spmd_plus inside the block

Under pytest-mpi the ``spmd_fault`` fixture (from spmdlab's pytest plugin) gives the same
function. Every worker enters the block (the program is the same everywhere); the fault
fires on ``worker`` only, just before the chosen collective's agreement step, so the
other workers are already waiting in that collective, as they would be for a real fault:

- ``"raise"``: the collective fails on every worker: ``worker`` raises ``exception``
  (default ``InjectedFault``, a RuntimeError) and the others the same type, saying
  "failed on another worker: worker k: ..." (as for a bad input on one worker), so a
  test can catch it and assert on every worker;
- ``"crash"``: ``worker`` raises ``exception`` before the collective, on its own (a bug
  in its code): the others wait in the collective; uncaught, it ends the job (and a
  test run under pytest-mpi) like any exception;
- ``"exit"``: ``sys.exit(status)`` (default 1): the others raise SpmdPeerError naming
  this worker and its status;
- ``"hang"``: sleep until the job is ended (by SPMDLAB_TIMEOUT on the others, or the
  launcher), or raise SpmdTimeoutError itself 5 s past SPMDLAB_TIMEOUT (so that a job
  of one worker ends too): to test timeouts and the stall report;
- ``"slow"``: sleep ``seconds`` (default 5), then make the call: a slow worker.

``call`` is a collective's name (``"spmd_plus"``, ``"spmd_cat"``, ``"spmd_barrier"``,
``"aggregate_gradients"``, ...; None: any collective); ``at`` counts those calls on the
faulty worker from the start of the block, 1 for the first. ``site="train.py:42"`` (the
end of a ``file:line``) chooses calls made from that line only.
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Iterator, Optional

from . import _agree, _env, _stall, _world
from .errors import SpmdTimeoutError, SpmdValueError

__all__ = ["InjectedFault", "inject_fault"]

_ACTIONS = ("raise", "crash", "exit", "hang", "slow")


class InjectedFault(RuntimeError):
    """The default exception of ``inject_fault(action="raise")``.

    Examples
    --------
    >>> from spmdlab.testing import inject_fault
    >>> with inject_fault(1, "spmd_plus"):
    ...     try:
    ...         spmd_plus(1)
    ...     except InjectedFault as fault:
    ...         print("caught")
    caught

    MATLAB
    ------
    none
    """


class _Fault:
    def __init__(self, worker, call, at, action, site, exception, status, seconds):
        self.worker, self.call, self.at, self.action = worker, call, at, action
        self.site, self.exception, self.status, self.seconds = site, exception, status, seconds
        self.seen = 0
        self.fired = False
        self.calls: dict = {}  # on the faulty worker: the collectives made in the block

    def at_collective(self, call):
        """Called before every collective's agreement; returns the error to flag there."""
        if self.fired or _world.RANK + 1 != self.worker:
            return None
        self.calls[call] = self.calls.get(call, 0) + 1
        if self.call is not None and call != self.call:
            return None
        if self.site is not None and not _stall.call_site_of(
                sys._getframe(1)).endswith(self.site):
            return None
        self.seen += 1
        if self.seen != self.at:
            return None
        self.fired = True
        what = f"{call} (worker {self.worker}, call {self.at}"
        what += f" at {self.site})" if self.site else ")"
        if self.action in ("raise", "crash"):
            exc = self.exception
            if exc is None:
                exc = InjectedFault(f"fault injected by spmdlab.testing at {what}")
            if self.action == "raise":
                return exc  # flagged in the agreement: every worker raises
            raise exc
        if self.action == "exit":
            sys.exit(self.status)
        if self.action == "slow":
            time.sleep(self.seconds)
            return None
        # "hang": until the job ends; past SPMDLAB_TIMEOUT (and the others' reports of
        # it, _HANG_GRACE later) the hanging worker raises too, so a job of one ends
        started = time.monotonic()
        while _env.TIMEOUT is None or \
                time.monotonic() - started <= _env.TIMEOUT + _HANG_GRACE:
            time.sleep(0.2)
        raise SpmdTimeoutError(f"{what}: hung by spmdlab.testing's injected fault, past "
                               f"SPMDLAB_TIMEOUT={_env.TIMEOUT:g} s")


_HANG_GRACE = 5.0


@contextlib.contextmanager
def inject_fault(worker: int, call: Optional[str] = None, at: int = 1, action: str = "raise",
                 *, site: Optional[str] = None, exception: Optional[BaseException] = None,
                 status: int = 1, seconds: float = 5.0,
                 optional: bool = False) -> Iterator[_Fault]:
    """Within the block, make ``worker`` (1-based, world numbering) fail at the ``at``-th
    call of collective ``call``: ``action`` is "raise", "crash", "exit", "hang" or "slow"
    (see the module's help). Every worker must enter the block; nothing happens elsewhere.
    A fault that never fired (``at`` beyond the calls made, a misspelt ``call``, a
    ``site`` never reached) is an error on ``worker`` when the block ends, listing the
    collectives it made there, unless ``optional`` is true: a test that passes because
    its fault never happened passes for the wrong reason.

    Examples
    --------
    >>> with inject_fault(1, "spmd_barrier", action="raise"):
    ...     try:
    ...         spmd_barrier()
    ...     except InjectedFault as fault:
    ...         print(fault)
    fault injected by spmdlab.testing at spmd_barrier (worker 1, call 1)

    MATLAB
    ------
    none
    """
    size = _world.SIZE
    who = f"inject_fault (worker {_world.RANK + 1} of {size})"
    if not isinstance(action, str) or action not in _ACTIONS:  # (an array: no bare error)
        raise SpmdValueError(f"{who}: 'action' must be one of {', '.join(_ACTIONS)} "
                             f"(got {action!r})")
    if isinstance(worker, bool) or not isinstance(worker, int) or not 1 <= worker <= size:
        raise SpmdValueError(f"{who}: 'worker' must be a worker number from 1 to "
                             f"{size} (got {worker!r})")
    if isinstance(at, bool) or not isinstance(at, int) or at < 1:
        raise SpmdValueError(f"{who}: 'at' must be a count from 1 (got {at!r})")
    if call is not None and (not isinstance(call, str) or not call.isidentifier() and
                             not call.replace(".", "_").isidentifier()):
        raise SpmdValueError(f"{who}: 'call' must be a collective's name such as "
                             f"'spmd_plus' (got {call!r})")
    if site is not None and (not isinstance(site, str) or ":" not in site or
                             not site.rsplit(":", 1)[1].isdigit()):
        raise SpmdValueError(f"{who}: 'site' must be 'file:line' such as "
                             f"'train.py:42' (got {site!r})")
    fault = _Fault(worker, call, at, action, site, exception, status, seconds)
    _agree.FAULTS.append(fault)
    _agree.hooks_changed()
    try:
        yield fault
    finally:
        _agree.FAULTS.remove(fault)
        _agree.hooks_changed()
    if not fault.fired and not optional and _world.RANK + 1 == worker:
        made = ", ".join(f"{name} x{count}" for name, count in fault.calls.items()) or \
            "none"
        where = f" from {site}" if site else ""
        raise SpmdValueError(
            f"inject_fault (worker {worker}): the fault never fired: it was to {action} "
            f"at call {at} of {call or 'any collective'}{where}, and the collectives "
            f"worker {worker} made in the block were: {made} (optional=True allows a "
            f"fault that may not fire)")
