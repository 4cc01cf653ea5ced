"""Global subscripts of codistributed arrays, with numpy's 0-based meaning.

Every worker indexes its local part with the global key translated to local coordinates
along the distribution axis, so numpy's own rules decide the shape of what it gets; only
the distribution axis needs thought:

- an int there: the one worker that holds it reads the value and broadcasts it (every
  worker gets it; collective); a write is done by that worker alone;
- a slice: each worker keeps the selected slices it holds, with no communication, and
  the result is codistributed with the partition that leaves (a negative step reverses
  the order of the workers, so that result is redistributed, collectively);
- an index array: each worker picks the entries it holds; a read gathers them in the
  array's order (collective, a result every worker holds); a write needs no communication;
- a boolean mask of the array's shape: the selected elements, in numpy's order,
  codistributed along axis 0.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from .. import _agree, _pack, _world
from .._agree import agree
from .._backends import LOCAL
from ..collectives import broadcast, gather
from ..errors import SpmdError, SpmdIndexError, SpmdTypeError, SpmdValueError
from . import _exchange
from ._array import CodistributedArray
from ._codistributor import Codistributor, default_partition, error, offsets


def _call(D, key, suffix=""):
    text = " ".join(repr(key).split()) if not isinstance(key, CodistributedArray) \
        else "mask"  # (on one line: np.ix_'s columns print on several)
    return f"{type(D).__name__}[{text if len(text) <= 40 else text[:37] + '...'}]{suffix}"


# -- the key, axis by axis ----------------------------------------------------------------------


def _normalize(call, D, key):
    """``("mask", mask)`` or ``("axes", [selector per axis])``: each selector an int
    (in range, non-negative), a slice, or a 1-D int64 array (in range, non-negative)."""
    if isinstance(key, tuple) and len(key) == 1 and _bool_shape(key[0]) is not None:
        key = key[0]  # (numpy reads ``D[(mask,)]`` as ``D[mask]``)
    shape = _bool_shape(key)
    if shape == tuple(D.shape):
        return "mask", key
    if shape is not None and (len(shape) > D.ndim or any(
            m != n for m, n in zip(shape, D.shape))):  # numpy's IndexError
        raise error(SpmdIndexError, call, f"a boolean mask of shape {shape} does not "
                    f"match the array's shape {D.shape}")
    if not isinstance(key, tuple):
        key = (key,)
    if sum(k is Ellipsis for k in key) > 1:
        raise error(SpmdIndexError, call, "an index can only have a single ellipsis ('...')")
    if any(k is None for k in key):
        raise error(SpmdTypeError, call, "numpy.newaxis (None) is not available in a "
                    "subscript of a codistributed array")
    real = sum(1 for k in key if k is not Ellipsis)
    if real > D.ndim:
        raise error(SpmdIndexError, call, f"too many indices: {real} for an array of "
                    f"{D.ndim} dimension{'s' if D.ndim != 1 else ''}")
    at = next((i for i, k in enumerate(key) if k is Ellipsis), None)
    if at is not None:  # (not "Ellipsis in key": == on an index array is element-wise)
        key = key[:at] + (slice(None),) * (D.ndim - real) + key[at + 1:]
    key = key + (slice(None),) * (D.ndim - len(key))
    sels, arrays = [], 0
    for d, (k, n) in enumerate(zip(key, D.shape)):
        sel = _selector(call, d, k, n)
        arrays += isinstance(sel, np.ndarray)
        sels.append(sel)
    if arrays > 1:
        raise error(SpmdIndexError, call, "at most one index array (or boolean index of "
                    "one axis) is available in a subscript of a codistributed array")
    return "axes", sels


def _bool_shape(key):
    """The shape of ``key`` when it is one boolean array (codistributed or not), else
    None."""
    if isinstance(key, CodistributedArray):
        kind = np.dtype(LOCAL[key.family].dtype(key.local)).kind
        return key.shape if kind == "b" else None
    if isinstance(key, (tuple, slice, int, np.integer)) or key is Ellipsis or key is None:
        return None
    try:
        array = _host(key)
    except Exception:
        return None
    return array.shape if array.dtype.kind == "b" and array.ndim else None


def _host(x):
    if type(x).__module__.startswith(("torch", "cupy")):
        from .._backends import classify

        return np.asarray(classify(x).host())
    return np.asarray(x)


def _selector(call, d, k, n):
    if isinstance(k, slice):
        for part in (k.start, k.stop, k.step):
            if part is not None and (isinstance(part, bool) or
                                     not isinstance(part, (int, np.integer))):
                raise error(SpmdTypeError, call, f"slice indices must be ints or None "
                            f"(got {k!r})")
        if k.step == 0:
            raise error(SpmdValueError, call, "slice step cannot be zero")
        return k
    if isinstance(k, CodistributedArray):
        if k.ndim != 1:
            raise error(SpmdTypeError, call, f"an index array of one axis is 1-D (got a "
                        f"codistributed array of shape {k.shape} for axis {d})")
        k = k.gather()  # MATLAB's D(D(:, 1) > 0, :): every worker makes the same call
    if isinstance(k, (bool, np.bool_)):
        raise error(SpmdTypeError, call, f"a bool is not an index (got {k!r} for axis {d})")
    if isinstance(k, (int, np.integer)):
        return _in_range(call, d, int(k), n)
    try:
        array = _host(k)
    except Exception:
        array = None
    if isinstance(k, (list, tuple)) and array is not None and array.size == 0:
        array = array.astype(np.intp)  # (numpy's: an empty list picks nothing; not floats)
    if array is None or array.dtype.kind not in "iub" or array.ndim > 1:
        raise error(SpmdTypeError, call, f"only ints, slices, '...', 1-D int or bool "
                    f"arrays and a boolean mask of the array's shape are valid subscripts "
                    f"(got {k!r} for axis {d})")
    if array.dtype.kind == "b":
        if array.shape != (n,):
            raise error(SpmdIndexError, call, f"a boolean index of length {len(array)} "
                        f"does not match axis {d} of size {n}")
        return np.flatnonzero(array)
    if array.ndim == 0:
        return _in_range(call, d, int(array), n)
    array = array.astype(np.int64)
    bad = (array < -n) | (array >= n)
    if bad.any():
        raise error(SpmdIndexError, call, f"index {int(array[bad][0])} is out of bounds "
                    f"for axis {d} with size {n}")
    return np.where(array < 0, array + n, array)


def _in_range(call, d, i, n):
    if not -n <= i < n:
        raise error(SpmdIndexError, call, f"index {i} is out of bounds for axis {d} with "
                    f"size {n}")
    return i % n


def _result_axis(sels, axis):
    """Where axis ``axis`` (not an int subscript) lands in numpy's result of ``sels``."""
    arrays = [d for d, s in enumerate(sels) if isinstance(s, np.ndarray)]
    basic = [d for d, s in enumerate(sels) if isinstance(s, slice)]
    if not arrays:
        return sum(1 for d in basic if d < axis)
    advanced = [d for d, s in enumerate(sels) if not isinstance(s, slice)]
    adjacent = advanced == list(range(advanced[0], advanced[-1] + 1))
    if isinstance(sels[axis], np.ndarray):
        return sum(1 for d in basic if d < advanced[0]) if adjacent else 0
    before = sum(1 for d in basic if d < axis)
    return before + (1 if not adjacent or axis > advanced[0] else 0)


def _result_shape(sels, shape):
    """numpy's shape of the result of ``sels`` on an array of ``shape``."""
    probe = np.broadcast_to(np.empty((), np.uint8), shape)
    return probe[tuple(sels)].shape


def _local_key(sels, axis, local_sel):
    return tuple(local_sel if d == axis else s for d, s in enumerate(sels))


def _read(family, local, key):
    """``local[key]``; for torch, which has no negative steps, the slices taken in
    ascending order and the result flipped along them."""
    key, flips = _ascending(family, local, key)
    out = local[key]
    for at in flips:
        out = family.flip(out, at)
    return out


def _write(family, local, key, value):
    """``local[key] = value``, for torch as ``_read``: the value flipped instead; a value
    that overlaps ``local`` (a slice of the same array: ``D[1:] = D[:-1]``) read whole
    before it is written, as numpy does. torch writes through an index array
    (``D[[0, 2]] = v``, ``D[np.ix_(rows, cols)] = v``) only its own dtype, so a tensor
    value is cast to it first, as numpy's assignments and torch's slice writes cast."""
    value = family.apart(value, local)
    if family is LOCAL["torch"] and hasattr(value, "dtype") and hasattr(value, "to") \
            and value.dtype != local.dtype:
        value = value.to(local.dtype)
    key, flips = _ascending(family, local, key)
    if flips and np.ndim(value):
        shape = _result_shape(list(key), local.shape)
        value = family.asarray(value, local)
        value = value.expand(shape) if hasattr(value, "expand") else value
        for at in flips:
            value = family.flip(value, at)
    local[key] = value


def _ascending(family, local, key):
    if family is not LOCAL["torch"] or not any(
            isinstance(s, slice) and s.step is not None and s.step < 0 for s in key):
        return key, []
    key, flips = list(key), []
    for d, s in enumerate(key):
        if isinstance(s, slice) and s.step is not None and s.step < 0:
            r = range(*s.indices(local.shape[d]))[::-1]
            key[d] = slice(r.start, r.stop, r.step) if len(r) else slice(0, 0)
            if len(r) > 1:
                flips.append(d)
    key = tuple(key)
    return key, [_result_axis(list(key), d) for d in flips]


def _share(r, partition):
    """For a range ``r`` of global indices (either direction) and a partition: each
    worker's ``(j0, j1)``, the positions in ``r`` of the indices it holds."""
    asc = r if r.step > 0 else r[::-1]
    out = []
    for o, c in zip(offsets(partition), partition):
        j0, j1 = _first_at_least(asc, o), _first_at_least(asc, o + c)
        out.append((j0, j1) if r.step > 0 else (len(r) - j1, len(r) - j0))
    return out


def _first_at_least(r, value):
    if not len(r):
        return 0
    j = -((r.start - value) // r.step)  # ceil((value - start) / step)
    return min(max(j, 0), len(r))


def _local_slice(r, j0, j1, start):
    """The slice of the local part (whose first global index is ``start``) that holds
    the indices ``r[j0:j1]``."""
    if j1 <= j0:
        return slice(0, 0)
    part = r[j0:j1]
    first, last = part[0] - start, part[-1] - start
    if r.step > 0:
        return slice(first, last + 1, r.step)
    return slice(first, last - 1 if last > 0 else None, r.step)


# -- reading ------------------------------------------------------------------------------------


def _outer(D, key):
    """``([(axis, 1-D indices), ...], key)`` when ``key`` is numpy's ``np.ix_`` of index
    vectors on adjacent axes, with slices (or ``...``) on the others (MATLAB's
    ``D(rows, cols)`` is ``D[np.ix_(rows, cols)]``), the key returned one entry per axis
    with slices in the vectors' place; else None."""
    if not isinstance(key, tuple) or any(isinstance(k, CodistributedArray) or k is None
                                         for k in key):
        return None
    if sum(k is Ellipsis for k in key) == 1:
        at = next(i for i, k in enumerate(key) if k is Ellipsis)
        key = key[:at] + (slice(None),) * (D.ndim - len(key) + 1) + key[at + 1:]
    if len(key) > D.ndim or any(k is Ellipsis for k in key):
        return None
    key = key + (slice(None),) * (D.ndim - len(key))
    spots = [i for i, k in enumerate(key) if not isinstance(k, slice)]
    m = len(spots)
    if m < 2 or spots != list(range(spots[0], spots[0] + m)):
        return None
    arrays = [_host(key[i]) for i in spots]
    if any(a.ndim != m or a.dtype.kind not in "iu" or any(
            n != 1 for d, n in enumerate(a.shape) if d != j) for j, a in enumerate(arrays)):
        return None
    plain = tuple(slice(None) if i in spots else k for i, k in enumerate(key))
    return [(spots[0] + j, a.reshape(-1)) for j, a in enumerate(arrays)], plain


def getitem(D, key):
    outer = _outer(D, key)
    if outer is not None:
        return _get_outer(D, key, outer)
    call = _call(D, key)
    scope = D._check_scope(call)
    try:
        kind, sels = _normalize(call, D, key)
    except SpmdError as exc:
        if not LOOPS[0] and _collective(D, key):  # the others, waiting in the read, raise
            agree(scope, call, 0, error=exc)     # too
        raise
    if kind == "mask":
        if LOOPS[0]:  # in MATLAB's for-drange: the local part alone, no communication
            values = D.local[_mask_in_loop(call, D, sels, "read")]
            return LOCAL[D.family].copy(values)
        return _get_masked(call, scope, D, sels)
    axis = D.axis
    sel = sels[axis]
    start = D.codistributor.global_indices().start
    if LOOPS[0]:  # in MATLAB's for-drange: the local part alone, no communication
        return _read_in_loop(call, D, sels, start)
    if call.endswith("...]") and not (
            isinstance(sel, slice) and (sel.step is None or sel.step > 0)):
        _same_selection(scope, call, D, sels)  # (a collective read of a long key)
    if isinstance(sel, int):  # one worker holds it: it broadcasts what it reads
        owner = _owner(D.partition, sel)
        value = _read(LOCAL[D.family], D.local, _local_key(sels, axis, sel - start)) \
            if owner == scope.index else None
        return broadcast(call, owner, value)
    if isinstance(sel, np.ndarray):
        return _get_picked(call, scope, D, sels, start)
    r = range(*sel.indices(D.shape[axis]))
    share = _share(r, D.partition)
    j0, j1 = share[scope.rank]
    local = _read(LOCAL[D.family], D.local,
                  _local_key(sels, axis, _local_slice(r, j0, j1, start)))
    if D._copies_on_read:
        local = LOCAL[D.family].copy(local)
    shape = _result_shape(sels, D.shape)
    at = _result_axis(sels, axis)
    if r.step > 0:
        return D._new(local, Codistributor(at, tuple(b - a for a, b in share), shape))
    if scope.size == 1:  # nothing moves, but a copy, as the move makes one at N workers
        if not D._copies_on_read:
            local = LOCAL[D.family].copy(local)
        return D._new(local, Codistributor(at, tuple(b - a for a, b in share), shape))
    # a negative step: the workers' pieces come in reverse worker order; redistribute them
    # to the default partition (collective)
    target = Codistributor(at).complete(shape)
    agree(scope, call, _pack.digest((call, D.shape, str(D.dtype), D.axis, D.partition)),
          describe=lambda: D._describe(call))
    src = _exchange.blocks(at, share, shape)
    return D._new(_exchange.exchange(scope, call, local, shape, src,
                                     _exchange.codist_blocks(target)), target)


# How many for-drange loops (spmdlab.matlab.drange) this worker is inside: there, as in
# MATLAB, ``D(i, j)`` with ``i`` on the distribution dimension reads the local part alone
# (the workers run different iterations, so a collective read could not match)
LOOPS = [0]


def whole_array(fn, *args):
    """``fn(*args)``, a numpy function or ufunc of codistributed arrays: inside a
    for-drange loop its implementation's own subscripts (``np.diff(D)`` takes slices of
    ``D``) are work on the whole array, not the loop body's, so they are not held to
    this worker's part."""
    loops = LOOPS[0]
    if not loops:
        return fn(*args)
    LOOPS[0] = 0
    try:
        return fn(*args)
    finally:
        LOOPS[0] = loops


class DRange(Sequence):
    """This worker's share of a range, as ``spmdlab.matlab.drange`` returns it: a sequence
    of the loop's values; while it is iterated, a subscript on the distribution axis of
    a codistributed array reads this worker's part with no communication (MATLAB's
    for-drange), and one another worker holds is an ``SpmdIndexError``."""

    def __init__(self, part, counts=None):
        self._part = part
        # every worker's number of iterations: where they differ, a collective inside
        # the loop can never pair up, and is refused (_world.UNEVEN_LOOP)
        self._counts = tuple(counts) if counts is not None and len(set(counts)) > 1 \
            else None

    def __len__(self):
        return len(self._part)

    def __getitem__(self, k):
        return self._part[k]

    def __iter__(self):
        LOOPS[0] += 1
        outer = _world.UNEVEN_LOOP
        if self._counts is not None:
            _world.UNEVEN_LOOP = self._counts
            _agree.hooks_changed()
        try:
            yield from self._part
        finally:  # the loop's end, a break or an exception: CPython closes the iterator
            LOOPS[0] -= 1
            if self._counts is not None:
                _world.UNEVEN_LOOP = outer
                _agree.hooks_changed()

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self._part, dtype=dtype)

    def __eq__(self, other):
        return list(self) == list(other) if isinstance(other, (Sequence, np.ndarray)) \
            else NotImplemented

    def __repr__(self):
        return f"drange({list(self._part)!r})"


def _collective(D, key):
    """Whether a read of ``key`` (one this worker could not make sense of) would have
    been collective: something other than a slice of ascending indices along the split
    axis (an int, an index array, a mask: the others, given keys that make sense, wait
    for this worker there)."""
    if not isinstance(key, tuple) or any(k is None for k in key):
        key = (key,)
    if sum(k is Ellipsis for k in key) == 1:
        at = next(i for i, k in enumerate(key) if k is Ellipsis)
        key = key[:at] + (slice(None),) * max(D.ndim - len(key) + 1, 0) + key[at + 1:]
    k = key[D.axis] if D.axis < len(key) else slice(None)
    return not (isinstance(k, slice) and (not isinstance(k.step, (int, np.integer)) or
                                          k.step > 0))


def _same_selection(scope, call, D, sels):
    """For a collective read whose name shows only the start of its key (a long index
    array, many axes): the workers agree on the whole selection first, as the name
    compares a short one (else a worker whose indices differ past the name's end gets
    the others' selection, or its picks are put where the others' go, silently)."""
    def part(s):
        if isinstance(s, np.ndarray):
            return _vector_key(s)
        return (s.start, s.stop, s.step) if isinstance(s, slice) else s

    agree(scope, call, D._key(call, tuple(part(s) for s in sels)),
          describe=lambda: D._describe(call, **{f"axis {d}": " ".join(
              np.array2string(s, threshold=9).split()) + f" (digest {part(s)[1]})"
              if isinstance(s, np.ndarray) else repr(s) for d, s in enumerate(sels)}))


def _get_outer(D, key, outer):
    """``D[np.ix_(rows, cols)]``: one index vector at a time, each along its own axis
    (a pick along the split axis gathers). Every vector is checked first (numpy's
    IndexError, as the writes'); when a pick gathers, the workers first agree on every
    vector (or all raise a worker's error): a pick along another axis is local, and a
    worker's other rows would come back mixed with the ones the others picked."""
    picks, plain = outer
    call = _call(D, key)
    scope = D._check_scope(call)
    err = _out_of_bounds(call, D, picks)
    if any(axis == D.axis for axis, _ in picks) and not LOOPS[0]:  # collective
        # (in a for-drange loop each pick reads this worker's part alone, see getitem)
        picks = [(axis, np.where(p < 0, p + D.shape[axis], p)) for axis, p in picks]
        vectors = None if err else tuple((axis, _vector_key(p)) for axis, p in picks)
        agree(scope, call, D._key(call, vectors, repr(plain)), error=err,
              describe=lambda: D._describe(call, **{f"axis {axis}": " ".join(
                  np.array2string(p, threshold=9).split()) for axis, p in picks}))
    elif err is not None:
        raise err
    for axis, picked in picks:
        D = D[(slice(None),) * axis + (picked,)]
    return D[plain]


def _vector_key(indices):
    """An index vector as a key to agree on: its length and its values' digest."""
    return len(indices), _pack.content_digest(indices.astype(np.int64).tobytes())


def _out_of_bounds(call, D, picks):
    """numpy's IndexError for the first of ``np.ix_``'s index vectors (``picks``: (axis,
    vector) pairs) with an index out of ``D``'s bounds, as SpmdIndexError; else None."""
    for axis, picked in picks:
        bad = (picked < -D.shape[axis]) | (picked >= D.shape[axis])
        if bad.any():
            return error(SpmdIndexError, call, f"index {int(picked[bad][0])} is out of "
                         f"bounds for axis {axis} with size {D.shape[axis]}")
    return None


def _read_in_loop(call, D, sels, start):
    """``D[key]`` inside a for-drange loop: read from this worker's part (a copy, as a
    collective read gives), or SpmdIndexError."""
    value = _read(LOCAL[D.family], D.local, _key_in_loop(call, D, sels, start, "read"))
    return value if isinstance(value, np.generic) else LOCAL[D.family].copy(value)


def _key_in_loop(call, D, sels, start, verb):
    """The local part's key for ``sels`` inside a for-drange loop, where (MATLAB's rule)
    a subscript reaches only this worker's part: the workers run different iterations,
    so a read or write of another worker's elements could not be matched (a slice's
    collective result would mix the rows of different iterations, a write of elements
    this worker does not hold would be dropped). SpmdIndexError where the selection on
    the distribution axis reaches another worker's part."""
    axis, sel = D.axis, sels[D.axis]
    held = D.local.shape[axis]
    if isinstance(sel, int):
        picked = np.array([sel])
    elif isinstance(sel, np.ndarray):
        picked = sel
    else:
        r = range(*sel.indices(D.shape[axis]))
        picked = np.array([r[0], r[-1]] if len(r) else [], dtype=np.int64)
    outside = picked[(picked < start) | (picked >= start + held)]
    if len(outside):
        index = int(outside[0])
        what = "read it before the loop" if verb == "read" else "write it after the loop"
        raise error(SpmdIndexError, call, f"inside a for-drange loop a subscript {verb}s only "
                    f"this worker's part (MATLAB's rule): index {index} of axis {axis} is "
                    f"held by worker {_owner(D.partition, index)}, this worker holds "
                    f"{_held(D)}; {what} (every worker together) or loop over this worker's "
                    f"indices")
    if isinstance(sel, slice):
        sel = _local_slice(r, 0, len(r), start)
    else:
        sel = sel - start
    return _local_key(sels, axis, sel)


def _mask_in_loop(call, D, mask, verb):
    """The part of a boolean ``mask`` over this worker's block inside a for-drange loop,
    where a subscript reaches only this worker's part: the mask must be a replicated
    array whose true elements this worker holds (a codistributed mask's other parts
    are on the other workers, which run other iterations); else SpmdIndexError."""
    what = "read it before the loop" if verb == "read" else "write it after the loop"
    if isinstance(mask, CodistributedArray):
        raise error(SpmdIndexError, call, f"inside a for-drange loop a subscript {verb}s "
                    f"only this worker's part (MATLAB's rule), and a codistributed mask "
                    f"has parts on the other workers, which run other iterations; use "
                    f"getLocalPart of the mask and of the array, or {what} (every "
                    f"worker together)")
    whole = _host(mask)
    mine = whole[D.global_slice()]
    if np.count_nonzero(mine) != np.count_nonzero(whole):  # (the first one elsewhere)
        inside = np.zeros(whole.shape, dtype=bool)
        inside[D.global_slice()] = True
        where = tuple(int(i) for i in np.argwhere(whole & ~inside)[0])
        index = where[D.axis]
        raise error(SpmdIndexError, call, f"inside a for-drange loop a subscript {verb}s "
                    f"only this worker's part (MATLAB's rule): the mask selects element "
                    f"{where}, held by worker {_owner(D.partition, index)}; this worker "
                    f"holds {_held(D)} of axis {D.axis}; {what} (every worker together) "
                    f"or select this worker's elements alone")
    return LOCAL[D.family].asarray(mine, D.local)


def _held(D):
    """'3 to 5' (the global indices of this worker's part on the distribution axis), or
    'none'."""
    start, held = D.codistributor.global_indices().start, D.local.shape[D.axis]
    return f"{start} to {start + held - 1}" if held else "none"


def _owner(partition, index):
    for k, (o, c) in enumerate(zip(offsets(partition), partition), 1):
        if o <= index < o + c:
            return k
    raise AssertionError(index)  # _normalize checked the range


def _get_picked(call, scope, D, sels, start):
    """An index array along the distribution axis: each worker picks what it holds, and
    the pieces are gathered in the array's order (a result every worker holds)."""
    axis, family = D.axis, LOCAL[D.family]
    index = sels[axis]
    mine = np.flatnonzero((index >= start) & (index < start + D.local.shape[axis]))
    values = _read(family, D.local, _local_key(sels, axis, index[mine] - start))
    pieces = gather(call, (mine, values))
    at = _result_axis(sels, axis)
    shape = _result_shape(sels, D.shape)
    out = family.empty(shape, family.dtype(D.local), D.local)
    for positions, part in pieces:
        if len(positions):
            out[(slice(None),) * at + (_index_for(family, positions),)] = part
    return out


def _index_for(family, positions):
    if family is LOCAL["torch"]:
        import torch

        return torch.as_tensor(positions)
    return positions


def _get_masked(call, scope, D, mask):
    """``D[mask]``: the selected elements in numpy's (C) order, codistributed along axis 0
    (arrays split along another axis are redistributed to rows first)."""
    rows = D if D.axis == 0 else D._moved(call, Codistributor(0).complete(D.shape))
    local_mask = _mask_for(call, rows, mask)
    values = rows.local[local_mask]
    counts = gather(call, int(values.shape[0]))
    return D._new(values, Codistributor(0, tuple(counts), (sum(counts),)))


def _mask_for(call, D, mask):
    """The part of ``mask`` (the array's shape) over this worker's block of ``D``."""
    if isinstance(mask, CodistributedArray):
        return mask._moved(call, D.codistributor).local
    part = _host(mask)[D.global_slice()]
    return LOCAL[D.family].asarray(part, D.local)


# -- writing ------------------------------------------------------------------------------------


def setitem(D, key, value):
    outer = _outer(D, key)
    if outer is not None:  # MATLAB's D(rows, cols) = v: a write per index of the first
        _set_outer(D, key, outer, value)
        return None
    call = _call(D, key, " = ...")
    scope = D._check_scope(call)
    kind, sels = _normalize(call, D, key)
    family = LOCAL[D.family]
    if kind == "mask":
        if LOOPS[0]:  # in MATLAB's for-drange: elements this worker holds, or SpmdIndexError
            _set_masked_in_loop(call, D, _mask_in_loop(call, D, sels, "write"), value)
            return None
        return _set_masked(call, scope, D, sels, value)
    axis = D.axis
    sel = sels[axis]
    start = D.codistributor.global_indices().start
    if LOOPS[0]:  # in MATLAB's for-drange: elements this worker holds, or SpmdIndexError
        _key_in_loop(call, D, sels, start, "write")
        _local_value_in_loop(call, value)
    shape = _result_shape(sels, D.shape)
    if isinstance(value, CodistributedArray):
        value._check_scope(call)
        if isinstance(sel, slice) and value.shape == shape:
            r = range(*sel.indices(D.shape[axis]))
            if r.step > 0:
                share = _share(r, D.partition)
                region = Codistributor(_result_axis(sels, axis),
                                       tuple(b - a for a, b in share), shape)
                j0, j1 = share[scope.rank]
                _write(family, D.local, _local_key(sels, axis,
                                                   _local_slice(r, j0, j1, start)),
                       value._moved(call, region).local)
                return
        value = value.gather()  # collective, like the value's distribution
    value = _fitted(call, value, shape)  # checked on every worker, not only the owners
    _probe(call, family, value, D.local)  # a value the dtype cannot hold: every worker
    if isinstance(sel, int):
        if _owner(D.partition, sel) == scope.index:
            _write(family, D.local, _local_key(sels, axis, sel - start),
                   _converted(family, value, D.local))
        return
    at = _result_axis(sels, axis)
    if isinstance(sel, np.ndarray):
        mine = np.flatnonzero((sel >= start) & (sel < start + D.local.shape[axis]))
        if len(mine):
            part = _restricted(value, shape, at, mine)
            _write(family, D.local, _local_key(sels, axis, sel[mine] - start),
                   _converted(family, part, D.local))
        return
    r = range(*sel.indices(D.shape[axis]))
    j0, j1 = _share(r, D.partition)[scope.rank]
    if j1 > j0:
        part = _restricted(value, shape, at, slice(j0, j1))
        _write(family, D.local, _local_key(sels, axis, _local_slice(r, j0, j1, start)),
               _converted(family, part, D.local))


def _set_outer(D, key, outer, value):
    """``D[np.ix_(rows, cols, ...)] = value``: one write for each index of every vector but
    the last, of the last one's elements (each a write with one index vector, no
    communication for a replicated value)."""
    call = _call(D, key, " = ...")
    D._check_scope(call)
    picks, plain = outer
    err = _out_of_bounds(call, D, picks)  # numpy's IndexError, as the reads'
    if err is not None:
        raise err
    if isinstance(value, CodistributedArray):
        value._check_scope(call)
        value = value.gather()
    shape = np.broadcast_to(np.empty((), np.uint8), D.shape)[key].shape
    value = _fitted(call, value, shape)
    # the vectors keep their axes in the selection (they are adjacent); the value's axes
    # are the selection's last ones
    lead = len(shape) - np.ndim(value)
    *fixed, (last, indices) = picks
    for combo in itertools.product(*(range(len(v)) for _, v in fixed)):
        sub, part = list(plain), [slice(None)] * np.ndim(value)
        for (d, v), j in zip(fixed, combo):
            sub[d] = int(v[j])
            if d >= lead:  # (a value without this axis is the same for every index)
                part[d - lead] = j if value.shape[d - lead] != 1 else 0
        sub[last] = indices
        setitem(D, tuple(sub), value[tuple(part)] if np.ndim(value) else value)


def _fitted(call, value, shape):
    """``value`` (the same on every worker) ready to be written into a selection of
    ``shape``: lists as numpy, numpy's leading length-1 axes dropped; SpmdValueError on
    every worker when it does not broadcast to ``shape``."""
    if isinstance(value, (list, tuple)):
        value = np.asarray(value)
    vshape = tuple(np.shape(value))
    while len(vshape) > len(shape) and vshape[0] == 1:
        vshape = vshape[1:]
    try:
        fits = len(vshape) <= len(shape) and np.broadcast_shapes(vshape, shape) == shape
    except ValueError:
        fits = False
    if not fits:
        raise error(SpmdValueError, call, f"could not broadcast a value of shape "
                    f"{tuple(np.shape(value))} into the selection's shape {shape}")
    return value.reshape(vshape) if vshape != tuple(np.shape(value)) else value


def _probe(call, family, value, like):
    """Write (one element of) ``value`` into a scratch element of the local part's family
    and dtype, so that a value the dtype refuses (``D[3] = 300`` of int8, a complex into
    floats) fails on every worker, as the library's own write would, not only on the
    workers that hold selected elements."""
    if np.ndim(value) == 0:
        sample = value
    elif int(np.prod(np.shape(value))) == 0:
        return
    else:
        sample = value.reshape(-1)[:1] if hasattr(value, "reshape") else \
            np.asarray(value).reshape(-1)[:1]
    scratch = family.empty((1,), family.dtype(like), like)
    try:
        _write(family, scratch, (slice(0, 1),), _converted(family, sample, like))
    except Exception as exc:
        raise _unwritable(call, family, like, exc) from exc


def _unwritable(call, family, like, exc):
    kind = SpmdTypeError if isinstance(exc, TypeError) else SpmdValueError
    return error(kind, call, f"the value cannot be written into an array of "
                 f"{family.dtype(like)}: {type(exc).__name__}: {exc}")


def _restricted(value, shape, at, which):
    """The part of ``value`` (broadcast to ``shape``) at positions ``which`` of axis
    ``at``: the elements this worker writes."""
    if isinstance(value, (list, tuple)):
        value = np.asarray(value)
    ndim = np.ndim(value)
    if ndim == 0:
        return value
    if ndim > len(shape):
        raise SpmdValueError(f"could not broadcast a value of shape {np.shape(value)} into "
                             f"shape {shape}")
    local_axis = at - (len(shape) - ndim)
    if local_axis < 0 or np.shape(value)[local_axis] == 1:
        return value
    if np.shape(value)[local_axis] != shape[at]:
        raise SpmdValueError(f"could not broadcast a value of shape {np.shape(value)} into "
                             f"shape {shape}")
    return value[(slice(None),) * local_axis + (which,)]


def _converted(family, value, like):
    if np.ndim(value) == 0 and not hasattr(value, "device"):
        return value.item() if isinstance(value, np.generic) and family is LOCAL["torch"] \
            else value
    return family.asarray(value, like)


def _set_masked(call, scope, D, mask, value):
    """``D[mask] = value``: a scalar everywhere the mask is true (no communication); a
    vector's elements in numpy's (C) order of the selected positions. Each worker learns
    where its own selected elements fall in that order from every worker's count of
    them per index before the split axis (one gather), then takes them from the value
    (replicated) with no more communication. The value's shape rides in that gather, so a
    value of the wrong length on some workers only fails on every worker."""
    local_mask = _mask_for(call, D, mask)
    if isinstance(value, CodistributedArray):
        value = value.gather()
    if _set_masked_scalar(call, D, local_mask, value):
        return
    outer = int(np.prod(D.shape[:D.axis], dtype=np.int64))
    picked = np.asarray(LOCAL[D.family].host(local_mask), dtype=bool)
    picked = picked.reshape(outer, picked.size // outer if outer else 0)
    rows = gather(call, (picked.sum(axis=1), tuple(np.shape(value))))
    counts = np.stack([c for c, _ in rows])  # (workers, outer)
    total = counts.sum(axis=0)
    _same_vector_shape(call, [s for _, s in rows], int(total.sum()))
    value = _masked_vector(call, D, value, int(total.sum()))
    # C order: index by index before the axis; within one, worker by worker
    start = np.cumsum(total) - total + counts[:scope.rank].sum(axis=0)
    where = (start[:, None] + np.cumsum(picked, axis=1) - 1)[picked]
    D.local[local_mask] = value[where]


def _set_masked_in_loop(call, D, local_mask, value):
    """``D[mask] = value`` inside a for-drange loop, the mask held to this worker's part
    (``_mask_in_loop``): no communication; a vector value holds one value per selected
    element, in numpy's (C) order."""
    _local_value_in_loop(call, value)
    if _set_masked_scalar(call, D, local_mask, value):
        return
    count = int(np.count_nonzero(LOCAL[D.family].host(local_mask)))
    D.local[local_mask] = _masked_vector(call, D, value, count)


def _local_value_in_loop(call, value):
    """Inside a for-drange loop a write's value must be this worker's: SpmdValueError for
    a codistributed one (reading its other workers' parts would be collective)."""
    if isinstance(value, CodistributedArray):
        raise error(SpmdValueError, call, "inside a for-drange loop the value written must "
                    "be this worker's (a codistributed value has parts on the other "
                    "workers, which run other iterations): write getLocalPart of it, or "
                    "write it after the loop (every worker together)")


def _set_masked_scalar(call, D, local_mask, value):
    """Write a scalar ``value`` everywhere ``local_mask`` is true (checked on every
    worker, not only where the mask selects); False for a value that is not a scalar."""
    if np.ndim(value) != 0:
        return False
    family = LOCAL[D.family]
    _probe(call, family, value, D.local)
    try:
        D.local[local_mask] = _converted(family, value, D.local)
    except Exception as exc:  # (torch checks a scalar through a mask: everywhere)
        raise _unwritable(call, family, D.local, exc) from exc
    return True


def _same_vector_shape(call, shapes, count):
    """SpmdValueError on every worker when a worker's value (its shape in ``shapes``, in
    worker order) is not one value per selected element (``count``) in a 1-D array."""
    bad = [f"worker {k}: {s}" for k, s in enumerate(shapes, 1) if s != (count,)]
    if bad and all(s == shapes[0] for s in shapes):
        raise error(SpmdValueError, call, f"a value of shape {shapes[0]} for {count} "
                    f"selected elements (numpy's rule: one value per selected element, in "
                    f"a 1-D array)")
    if bad:
        raise error(SpmdValueError, call, f"the value must hold one value per selected "
                    f"element ({count}) in a 1-D array, the same on every worker (numpy's "
                    f"rule); its shape on {', '.join(bad)}")


def _masked_vector(call, D, value, count):
    """``value``, one value per selected element (``count`` of them) in a 1-D array, in
    the local part's family and dtype (torch writes through a mask only its own dtype);
    else SpmdValueError, on every worker (the whole value is checked)."""
    if isinstance(value, (list, tuple)):
        value = np.asarray(value)
    if np.ndim(value) != 1 or np.shape(value)[0] != count:
        raise error(SpmdValueError, call, f"a value of shape {tuple(np.shape(value))} "
                    f"for {count} selected elements (numpy's rule: one value per "
                    f"selected element, in a 1-D array)")
    family = LOCAL[D.family]
    try:
        return family.astype(_converted(family, value, D.local), family.dtype(D.local))
    except Exception as exc:
        raise _unwritable(call, family, D.local, exc) from exc
