"""How a global array is split over the workers: one axis, one contiguous block each.

A ``Codistributor`` is metadata only: the axis, how many slices of it each worker holds
(the partition, in worker order) and the global shape. Any worker's block is computed
from it without communicating.
"""

from __future__ import annotations

import math
from typing import Callable, Optional, Sequence, Tuple

import numpy as np

from .. import _world
from ..errors import SpmdTypeError, SpmdValueError


def error(kind, call, text):
    """``kind("call (worker k of n): text")``: the form of every error of the arrays (a
    pool's client is "the client": there current() raises its own error, which hid this
    one, named after the function that made it: "refused (the client)")."""
    return kind(f"{call} ({_world.here().who()}): {text}")


def default_partition(n: int, workers: Optional[int] = None) -> Tuple[int, ...]:
    """MATLAB's default partition of ``n`` slices over ``workers`` (default: the workers
    of the current scope): ``n // workers`` each, and one more for the first
    ``n % workers``.

    Examples
    --------
    >>> default_partition(10, 4)      # codistributor1d.defaultPartition(10) at 4 workers
    (3, 3, 2, 2)
    >>> default_partition(2, 4)       # more workers than slices: the last ones hold none
    (1, 1, 0, 0)

    MATLAB
    ------
    ``codistributor1d.defaultPartition(n)``
    """
    call = "default_partition"
    if workers is None:
        workers = _world.current().size
    for name, value, least in (("n", n, 0), ("workers", workers, 1)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise error(SpmdTypeError, call, f"'{name}' must be an int (got {value!r} that "
                        f"is a {type(value).__name__})")
        if value < least:
            raise error(SpmdValueError, call, f"'{name}' must be at least {least} (got "
                        f"{value})")
    base, extra = divmod(int(n), int(workers))
    return tuple(base + 1 if k < extra else base for k in range(int(workers)))


def last_non_singleton(shape: Sequence[int]) -> int:
    """MATLAB's default distribution axis: the last non-singleton one (the last if none)."""
    for axis in range(len(shape) - 1, -1, -1):
        if shape[axis] != 1:
            return axis
    return max(len(shape) - 1, 0)


def first_axis(shape: Sequence[int]) -> int:
    """The snake_case API's default distribution axis: 0 (blocks of rows, contiguous in
    numpy's C order)."""
    return 0


def offsets(partition: Sequence[int]) -> Tuple[int, ...]:
    """Where each worker's block starts along the axis: ``(0, p1, p1 + p2, ...)``."""
    out, total = [], 0
    for count in partition:
        out.append(total)
        total += count
    return tuple(out)


# complete()'s answers (a Codistributor never changes), by what they were made from
_COMPLETED: dict = {}


class Codistributor:
    """How a codistributed array is split: along ``axis`` (0-based), ``partition[k]``
    slices on worker k + 1, for an array of global ``shape``.

    Each of the three may be left out and is then filled in when an array is made with
    it: ``shape`` from the array, ``axis`` by the constructor's rule (axis 0 in
    ``spmdlab.darray``, MATLAB's last non-singleton dimension in ``spmdlab.matlab``) and
    ``partition`` by ``default_partition``. A codistributor with all three is
    *complete*; two are equal when all three are. Making one never communicates.

    Parameters
    ----------
    axis
        The distribution axis, 0-based as numpy's; negative counts from the end.
    partition
        Slices per worker, one entry per worker of the scope, in worker order.
    shape
        The global shape.

    Examples
    --------
    >>> c = Codistributor(1, shape=(4, 10))
    >>> c.complete().partition             # at one worker it holds every column
    (10,)
    >>> c.complete().global_indices()      # this worker's columns
    range(0, 10)

    MATLAB
    ------
    ``codistributor1d(dim, part, gsize)`` (``dim`` is 1-based there)
    """

    __slots__ = ("_axis", "_partition", "_shape")

    def __init__(self, axis: Optional[int] = None, partition: Optional[Sequence[int]] = None,
                 shape: Optional[Sequence[int]] = None) -> None:
        call = "Codistributor"
        if shape is not None:
            shape = check_shape(call, shape)
        if axis is not None:
            if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
                raise error(SpmdTypeError, call, f"'axis' must be an int (got {axis!r} "
                            f"that is a {type(axis).__name__})")
            axis = int(axis)
            if shape is not None:
                axis = check_axis(call, axis, len(shape))
            elif axis < 0:
                raise error(SpmdValueError, call, f"a negative 'axis' ({axis}) needs the "
                            f"shape")
        if partition is not None:
            partition = _check_partition(call, partition)
        self._axis: Optional[int] = axis
        self._partition: Optional[Tuple[int, ...]] = \
            None if partition is None else tuple(partition)
        self._shape: Optional[Tuple[int, ...]] = None if shape is None else tuple(shape)
        if axis is not None and partition is not None and shape is not None:
            _check_sum(call, partition, shape, axis)

    @property
    def axis(self) -> Optional[int]:
        """The distribution axis (0-based), or None when left to the constructor."""
        return self._axis

    @property
    def partition(self) -> Optional[Tuple[int, ...]]:
        """Slices per worker along the axis, in worker order, or None (the default)."""
        return self._partition

    @property
    def shape(self) -> Optional[Tuple[int, ...]]:
        """The global shape, or None when the array is to give it."""
        return self._shape

    @property
    def is_complete(self) -> bool:
        """Whether axis, partition and shape are all known."""
        return None not in (self._axis, self._partition, self._shape)

    def complete(self, shape: Optional[Sequence[int]] = None, *,
                 default_axis: Callable[[Sequence[int]], int] = first_axis,
                 call: str = "Codistributor") -> Codistributor:
        """This codistributor with what it leaves out filled in, for an array of global
        ``shape`` over the current scope's workers (the axis by ``default_axis(shape)``,
        the partition by ``default_partition``). Not collective. Raises SpmdValueError,
        naming ``call``, when the pieces do not fit together."""
        if shape is not None:
            shape = check_shape(call, shape)
            if self._shape is not None and shape != self._shape:
                raise error(SpmdValueError, call, f"the codistributor is for global shape "
                            f"{self._shape}, not {shape}")
        shape = self._shape if shape is None else shape
        workers = _world.current().size
        key = (self._axis, self._partition, shape, default_axis, workers)
        done = _COMPLETED.get(key)
        if done is not None:  # (a loop completes the same few codistributors)
            return done
        if shape is None:
            raise error(SpmdValueError, call, "the global shape is not known; give it")
        if not shape:
            raise error(SpmdValueError, call, "a 0-dimensional array cannot be "
                        "distributed; reshape it to (1,) first")
        axis = default_axis(shape) if self._axis is None else self._axis
        axis = check_axis(call, axis, len(shape))
        partition = self._partition
        if partition is None:
            partition = default_partition(shape[axis], workers)
        elif len(partition) != workers:
            raise error(SpmdValueError, call, f"the partition {list(partition)} has "
                        f"{len(partition)} entries for {workers} worker"
                        f"{'s' if workers != 1 else ''}; give one per worker")
        _check_sum(call, partition, shape, axis)
        if (axis, partition, shape) != (self._axis, self._partition, self._shape):
            done = Codistributor(axis, partition, shape)
        else:
            done = self
        if len(_COMPLETED) > 256:
            _COMPLETED.clear()
        _COMPLETED[key] = done
        return done

    def offsets(self) -> Tuple[int, ...]:
        """Where each worker's block starts along the axis (a complete codistributor)."""
        return offsets(self._complete("Codistributor.offsets")[1])

    def global_indices(self, axis: Optional[int] = None,
                       worker: Optional[int] = None) -> range:
        """The global indices (0-based) along ``axis`` (default: the distribution axis)
        of worker ``worker``'s block (default: this worker's), as a range. Not
        collective; needs a complete codistributor."""
        call = "Codistributor.global_indices"
        dist, partition, shape = self._complete(call)
        k = self._worker(call, worker)
        axis = dist if axis is None else check_axis(call, axis, len(shape))
        if axis != dist:
            return range(shape[axis])
        start = offsets(partition)[k - 1]
        return range(start, start + partition[k - 1])

    def local_shape(self, worker: Optional[int] = None) -> Tuple[int, ...]:
        """The shape of worker ``worker``'s block (default: this worker's)."""
        call = "Codistributor.local_shape"
        axis, partition, shape = self._complete(call)
        k = self._worker(call, worker)
        return shape[:axis] + (partition[k - 1],) + shape[axis + 1:]

    def _complete(self, call):
        if not self.is_complete:
            raise error(SpmdValueError, call, f"{self!r} is not complete: give the axis, "
                        f"the partition and the shape, or take it from an array")
        return self._axis, self._partition, self._shape

    def _worker(self, call, worker):
        if worker is None:
            return _world.current().index
        n = len(self._partition)
        if isinstance(worker, bool) or not isinstance(worker, (int, np.integer)) or \
                not 1 <= worker <= n:
            raise error(SpmdValueError, call, f"'worker' must be a worker number from 1 "
                        f"to {n} (got {worker!r}); worker numbers are 1-based")
        return int(worker)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Codistributor):
            return NotImplemented
        return (self._axis, self._partition, self._shape) == \
            (other._axis, other._partition, other._shape)

    def __hash__(self) -> int:
        return hash((self._axis, self._partition, self._shape))

    def __repr__(self) -> str:
        parts = [f"axis={self._axis}"]
        if self._partition is not None:
            parts.append(f"partition={self._partition}")
        if self._shape is not None:
            parts.append(f"shape={self._shape}")
        return f"Codistributor({', '.join(parts)})"


def check_shape(call, shape):
    """A shape as a tuple of ints (one int is a 1-D shape); SpmdTypeError otherwise."""
    if type(shape) is tuple and all(type(s) is int and 0 <= s <= _MAX_LENGTH for s in shape) \
            and math.prod(s or 1 for s in shape) <= _MAX_LENGTH:
        return shape  # the common case, checked cheaply
    try:  # (a tensor that requires grad, say, refuses np.asarray)
        values = list(np.asarray(shape).reshape(-1)) if np.ndim(shape) else [shape]
        bad = np.ndim(shape) > 1 or any(
            isinstance(v, (bool, np.bool_)) or
            not isinstance(v, (int, np.integer, float, np.floating)) or
            not float(v).is_integer() for v in values)
    except Exception:
        bad = True
    if bad:
        raise error(SpmdTypeError, call, f"'shape' must be an int or a sequence of ints "
                    f"(got {shape!r})")
    out = tuple(int(v) for v in values)
    if any(s < 0 for s in out):
        raise error(SpmdValueError, call, f"'shape' must not be negative (got {out})")
    if any(s > _MAX_LENGTH for s in out):
        raise error(SpmdValueError, call, f"'shape' must not exceed {_MAX_LENGTH} along "
                    f"any axis, numpy's largest (got {out})")
    # numpy's rule (its bare "array is too big" from each block): the sizes other than 0
    # must multiply to a count it can index, even where one of them is 0
    if math.prod(s or 1 for s in out) > _MAX_LENGTH:
        raise error(SpmdValueError, call, f"'shape' {out} is beyond numpy's largest array: "
                    f"its sizes other than 0 multiply to more than {_MAX_LENGTH}")
    return out


_MAX_LENGTH = int(np.iinfo(np.intp).max)


def _check_partition(call, partition):
    if type(partition) is tuple and all(type(p) is int and p >= 0 for p in partition):
        return partition
    values = list(np.asarray(partition).reshape(-1)) if np.ndim(partition) else [partition]
    if any(isinstance(v, (bool, np.bool_)) or
           not isinstance(v, (int, np.integer, float, np.floating)) or
           not float(v).is_integer() or v < 0 for v in values):
        raise error(SpmdValueError, call, f"the partition must hold counts, ints of at "
                    f"least 0 (got {partition!r})")
    return tuple(int(v) for v in values)


# calls made by MATLAB's names (spmdlab.matlab): their errors count dimensions from 1
_MATLAB_CALLS = frozenset({"codistributor1d", "codistributor", "codistributed",
                           "distributed", "globalIndices", "redistribute", "getLocalPart",
                           "getCodistributor", "drange", "gather", "size", "reshape"})


def named_axis(call, axis):
    """How an error of ``call`` names a (0-based, non-negative) axis: MATLAB's
    "dimension 2" for a call by MATLAB's name, numpy's "axis 1" for the others."""
    if call.split(".")[0] in _MATLAB_CALLS:
        return f"dimension {axis + 1}"
    return f"axis {axis}"


def axis_of(call, axis, ndim):
    """A caller's ``axis`` for an array of ``ndim`` dimensions: a negative int counted
    from the end (SpmdValueError naming ``call`` when beyond the array); anything else
    as given (the Codistributor checks it)."""
    if isinstance(axis, (int, np.integer)) and not isinstance(axis, bool) and axis < 0:
        return check_axis(call, int(axis), ndim)
    return axis


def check_axis(call, axis, ndim):
    """``axis`` in ``range(ndim)`` (negative counts from the end); SpmdValueError else."""
    if not -ndim <= axis < ndim:
        where = named_axis(call, axis) if axis >= 0 else f"axis {axis}"
        raise error(SpmdValueError, call, f"{where} is beyond an array of {ndim} "
                    f"dimension{'s' if ndim != 1 else ''}")
    return int(axis) % ndim


def _check_sum(call, partition, shape, axis):
    if sum(partition) != shape[axis]:
        raise error(SpmdValueError, call, f"the partition {list(partition)} adds up to "
                    f"{sum(partition)}, but the array has {shape[axis]} along "
                    f"{named_axis(call, axis)} (global shape {shape})")
