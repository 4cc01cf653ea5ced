"""Point-to-point messages between workers of the current scope.

Any value spmdlab knows (numbers, arrays, tensors, nested dicts / lists / tuples) or any
picklable object travels as one byte buffer: a small pickled layout followed by the
arrays' raw bytes. Worker numbers are 1-based; tags are non-negative ints.
"""

from __future__ import annotations

from typing import Any, Literal, Optional, Sequence, Tuple, Union, overload

import numpy as np
from mpi4py import MPI

from . import _pack, _world
from ._checks import check_worker
from .errors import SpmdTypeError, SpmdValueError

__all__ = ["spmd_probe", "spmd_receive", "spmd_send", "spmd_send_receive"]

_TAG_UB = MPI.COMM_WORLD.Get_attr(MPI.TAG_UB) or 32767


def _check_tag(call, scope, tag, *, none_ok):
    if tag is None and none_ok:
        return
    if isinstance(tag, bool) or not isinstance(tag, (int, np.integer)):
        raise SpmdTypeError(f"{call} ({scope.who()}): 'tag' must be an int from 0 to "
                            f"{_TAG_UB} (got {tag!r} that is a {type(tag).__name__})")
    if not 0 <= tag <= _TAG_UB:
        raise SpmdValueError(f"{call} ({scope.who()}): 'tag' must be from 0 to {_TAG_UB} "
                             f"(got {tag})")


def _check(call, scope, name, worker, *, none_ok):
    error = check_worker(call, scope, name, worker, none_ok=none_ok)
    if error is not None:
        raise error


def _destinations(call, scope, destination):
    many = isinstance(destination, (list, tuple, range, np.ndarray))
    targets = list(destination) if many else [destination]
    if not targets:
        raise SpmdValueError(f"{call} ({scope.who()}): 'destination' is an empty list")
    for d in targets:
        _check(call, scope, "destination", d, none_ok=False)
    return targets


def spmd_send(x: Any, destination: Union[int, Sequence[int]], tag: int = 0) -> None:
    """Send ``x`` to worker ``destination`` (or to each of a list of workers).

    Returns at once, without waiting for the receiver (MATLAB ``spmdSend``, ``labSend``);
    the message is kept until it is received, and delivered before the program ends.

    Parameters
    ----------
    x
        Any picklable value; arrays and tensors travel as raw bytes.
    destination
        A worker number (1-based), or a list of them (each gets a copy).
    tag
        A non-negative int; ``spmd_receive(tag=...)`` matches it.

    Examples
    --------
    A ring: every worker sends to the next and receives from the previous (at one worker
    it sends to itself).

    >>> n, k = spmd_size(), spmd_index()
    >>> spmd_send(k * 10, k % n + 1)
    >>> spmd_receive((k - 2) % n + 1)
    10

    MATLAB
    ------
    ``spmdSend(X, destination, tag)``, ``labSend(X, destination, tag)``
    """
    call = "spmd_send"
    scope = _world.current()
    targets = _destinations(call, scope, destination)
    _check_tag(call, scope, tag, none_ok=False)
    buf = _pack.encode(x, f"{call} ({scope.who()})")
    for d in targets:
        _isend(scope, buf, d, tag)


def _isend(scope, buf, destination, tag):
    request = scope.comm.Isend([buf, MPI.BYTE], destination - 1, tag)
    _world.SENDS.track(request, buf, scope.world_ranks[destination - 1])
    if destination == scope.index:
        scope.self_sends[tag] = scope.self_sends.get(tag, 0) + 1


def _recv(message, st, scope):
    """Receive a matched message; returns its value."""
    buf = np.empty(st.Get_count(MPI.BYTE), dtype=np.uint8)
    message.Recv([buf, MPI.BYTE])
    if st.Get_source() == scope.rank:
        tag = st.Get_tag()
        scope.self_sends[tag] -= 1
        if not scope.self_sends[tag]:
            del scope.self_sends[tag]
    return _pack.decode(buf)


def _match(call, scope, source, tag):
    """Wait for a matching message; returns ``(mpi message, status)``."""
    status = MPI.Status()
    src = MPI.ANY_SOURCE if source is None else source - 1
    mpi_tag = MPI.ANY_TAG if tag is None else tag
    comm = scope.comm

    def probe():
        return comm.Improbe(src, mpi_tag, status)

    if source == scope.index or (source is None and scope.size == 1):
        # Only this worker can send it: with no such message sent, none ever will be.
        sent = scope.self_sends
        if not (sent.get(tag, 0) if tag is not None else sum(sent.values())):
            raise SpmdValueError(
                f"{call} ({scope.who()}): receiving from this worker itself"
                f"{'' if tag is None else f' with tag {tag}'}, but no such message was "
                f"sent to it, so the receive would wait for ever; send first (spmd_send "
                f"returns at once)")
    if source is None:
        needed = [r for r in scope.world_ranks if r != _world.RANK]
        message = _world.spin(probe, scope, call, needed, any_of=True)
    else:
        message = _world.spin(probe, scope, call, [scope.world_ranks[source - 1]])
    return message, status


@overload
def spmd_receive(source: Optional[int] = None, tag: Optional[int] = None, *,
                 status: Literal[False] = False) -> Any: ...
@overload
def spmd_receive(source: Optional[int] = None, tag: Optional[int] = None, *,
                 status: Literal[True]) -> Tuple[Any, int, int]: ...
@overload
def spmd_receive(source: Optional[int] = None, tag: Optional[int] = None, *,
                 status: bool) -> Any: ...


def spmd_receive(source: Optional[int] = None, tag: Optional[int] = None, *,
                 status: bool = False) -> Any:
    """Wait for a message and return its value (MATLAB ``spmdReceive``, ``labReceive``).

    ``source`` and ``tag`` None match any worker and any tag. With ``status=True`` the
    result is ``(value, source, tag)``. Raises SpmdPeerError instead of waiting forever
    when the worker(s) that could send have finished the program.

    Parameters
    ----------
    source
        The sending worker (1-based); None: any worker.
    tag
        The tag to match; None: any tag.
    status
        True: return ``(value, source, tag)`` instead of the value.

    Examples
    --------
    >>> spmd_send({"step": 1}, spmd_index(), tag=7)
    >>> spmd_receive(tag=7)
    {'step': 1}
    >>> spmd_send("hello", spmd_index())
    >>> data, source, tag = spmd_receive(status=True)   # [data, src, tag] = spmdReceive
    >>> data, source, tag
    ('hello', 1, 0)

    MATLAB
    ------
    ``spmdReceive``, ``spmdReceive(source, tag)``, ``[X, source, tag] = spmdReceive(...)``,
    ``labReceive('any', tag)``
    """
    call = "spmd_receive"
    scope = _world.current()
    _check(call, scope, "source", source, none_ok=True)
    _check_tag(call, scope, tag, none_ok=True)
    message, st = _match(call, scope, source, tag)
    value = _recv(message, st, scope)
    if status:
        return value, st.Get_source() + 1, st.Get_tag()
    return value


@overload
def spmd_probe(source: Optional[int] = None, tag: Optional[int] = None, *,
               status: Literal[False] = False) -> bool: ...
@overload
def spmd_probe(source: Optional[int] = None, tag: Optional[int] = None, *,
               status: Literal[True]) -> Tuple[bool, Optional[int], Optional[int]]: ...
@overload
def spmd_probe(source: Optional[int] = None, tag: Optional[int] = None, *,
               status: bool) -> Any: ...


def spmd_probe(source: Optional[int] = None, tag: Optional[int] = None, *,
               status: bool = False) -> Any:
    """Whether a message from ``source`` with ``tag`` is waiting; consumes nothing.

    MATLAB ``spmdProbe`` / ``labProbe``. None matches any. With ``status=True`` the result
    is ``(found, source, tag)`` (source and tag None when nothing is waiting).

    Parameters
    ----------
    source
        The sending worker (1-based); None: any worker.
    tag
        The tag to match; None: any tag.
    status
        True: return ``(found, source, tag)``.

    Examples
    --------
    >>> spmd_probe()
    False
    >>> spmd_send(1, spmd_index(), tag=3)
    >>> spmd_probe(tag=3), spmd_probe(tag=3, status=True)
    (True, (True, 1, 3))
    >>> spmd_receive(tag=3)
    1

    MATLAB
    ------
    ``tf = spmdProbe(source, tag)``, ``[tf, source, tag] = spmdProbe(...)``, ``labProbe``
    """
    call = "spmd_probe"
    scope = _world.current()
    _check(call, scope, "source", source, none_ok=True)
    _check_tag(call, scope, tag, none_ok=True)
    st = MPI.Status()
    src = MPI.ANY_SOURCE if source is None else source - 1
    found = scope.comm.Iprobe(src, MPI.ANY_TAG if tag is None else tag, st)
    if status:
        return (True, st.Get_source() + 1, st.Get_tag()) if found else (False, None, None)
    return found


def spmd_send_receive(destination: Optional[int], source: Optional[int], x: Any,
                      tag: int = 0) -> Any:
    """Send ``x`` to ``destination`` and receive from ``source`` in one deadlock-free step.

    MATLAB ``spmdSendReceive`` / ``labSendReceive``: every worker of a ring can call it at
    once. ``destination`` None sends nothing; ``source`` None receives nothing and
    returns None.

    Parameters
    ----------
    destination
        The worker to send ``x`` to; None: send nothing.
    source
        The worker to receive from; None: receive nothing (the result is None).
    x
        The value to send (any picklable value).
    tag
        The tag of both the message sent and the one received.

    Examples
    --------
    Shift a value one worker to the right around a ring, without deadlock:

    >>> n, k = spmd_size(), spmd_index()
    >>> spmd_send_receive(k % n + 1, (k - 2) % n + 1, k * 100)
    100

    MATLAB
    ------
    ``B = spmdSendReceive(destination, source, A, tag)``, ``labSendReceive``
    """
    call = "spmd_send_receive"
    scope = _world.current()
    _check(call, scope, "destination", destination, none_ok=True)
    _check(call, scope, "source", source, none_ok=True)
    _check_tag(call, scope, tag, none_ok=False)
    if destination is not None:
        _isend(scope, _pack.encode(x, f"{call} ({scope.who()})"), destination, tag)
    if source is None:
        return None
    message, st = _match(call, scope, source, tag)
    return _recv(message, st, scope)
