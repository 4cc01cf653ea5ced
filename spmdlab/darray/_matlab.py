"""MATLAB's names for codistributed arrays, with MATLAB's conventions (re-exported by
``spmdlab.matlab``): 1-based dimensions and worker numbers, the last non-singleton
dimension as the default distribution dimension, MATLAB's argument forms.

Arrays are numpy-shaped underneath, seen as MATLAB sees them (as ``spmdCat`` does): a
1-D array of k elements is a 1-by-k row (its dimension 2 is numpy's axis 0), a scalar
is 1-by-1, and dimensions past an array's last are singletons.
"""

from __future__ import annotations

import math
import sys
from typing import Any, Optional, Sequence, Tuple

import numpy as np

from .. import _world
from .._backends import LOCAL
from ..composite import Composite
from .._agree import agree
from ..errors import SpmdError, SpmdTypeError, SpmdValueError
from . import _factories
from ._array import CodistributedArray
from ._indexing import DRange
from ._codistributor import (_MAX_LENGTH, Codistributor, default_partition, error,
                            last_non_singleton)

_NO_COMMUNICATION = "nocommunication"


def _number(call, name, value):
    """A MATLAB number given for an integer argument (``2``, ``2.0``, a 1x1 array)."""
    if isinstance(value, np.ndarray) and value.size == 1:
        value = value.reshape(()).item()
    if isinstance(value, (bool, np.bool_)) or not isinstance(
            value, (int, float, np.integer, np.floating)) or not float(value).is_integer():
        raise error(SpmdTypeError, call, f"'{name}' must be an integer (got {value!r})")
    return int(value)


def _matlab_size(shape):
    """MATLAB's size vector of a numpy shape: a scalar is 1x1, a vector 1xk, and
    trailing singleton dimensions past the second are dropped (an array of numpy shape
    (4, 4, 1) is 4x4)."""
    if len(shape) == 0:
        return (1, 1)
    if len(shape) == 1:
        return (1, shape[0])
    shape = tuple(shape)
    while len(shape) > 2 and shape[-1] == 1:
        shape = shape[:-1]
    return shape


def _matlab_dim(axis, ndim):
    """MATLAB's (1-based) dimension of numpy axis ``axis`` of an ``ndim``-D array."""
    return 2 if ndim == 1 else axis + 1


class codistributor1d:
    """MATLAB's ``codistributor1d``: distribution along one dimension (1-based).

    ``codistributor1d()`` leaves everything to the array (the last non-singleton
    dimension, the default partition); ``codistributor1d(dim)``,
    ``codistributor1d(dim, part)`` and ``codistributor1d(dim, part, gsize)`` fix more
    (``codistributor1d.unsetDimension`` and ``codistributor1d.unsetPartition`` leave one
    out; with ``gsize`` they are derived at once, as MATLAB does, so the codistributor
    is complete). ``gsize`` is MATLAB's size vector: ``[m, n]`` is an m-by-n (numpy
    (m, n)) array. Not collective.

    Parameters
    ----------
    Dimension
        The distribution dimension, 1-based (0: unset).
    Partition
        Slices per worker (``[]``: unset, the default partition).
    gsize
        The global size (a MATLAB size vector).

    Examples
    --------
    >>> codist = codistributor1d(2, codistributor1d.defaultPartition(10), [4, 10])
    >>> codist.Dimension, codist.Partition, codist.isComplete()
    (2, array([10]), True)
    >>> codist.globalIndices(2)            # this worker's columns, 1-based
    array([ 1,  2,  3,  4,  5,  6,  7,  8,  9, 10])

    MATLAB
    ------
    ``codistributor1d(dim, part, gsize)``, ``codistributor('1d', dim, part)``
    """

    unsetDimension = 0
    unsetPartition: Tuple[int, ...] = ()

    def __init__(self, Dimension: Any = 0, Partition: Any = (), gsize: Any = None) -> None:
        call = "codistributor1d"
        self._dim = _number(call, "Dimension", Dimension)
        if not 0 <= self._dim <= _MAX_DIMS:  # (a larger one is no numpy array's)
            raise error(SpmdValueError, call, f"'Dimension' must be 1 to {_MAX_DIMS}, or "
                        f"codistributor1d.unsetDimension (got {self._dim})")
        unset = Partition is None or np.size(Partition) == 0
        self._part = None if unset else tuple(
            _number(call, "Partition", p) for p in np.asarray(Partition).reshape(-1))
        if self._part is not None and any(p < 0 for p in self._part):
            raise error(SpmdValueError, call, f"the partition must hold counts of at least "
                        f"0 (got {list(self._part)})")
        self._made: dict = {}
        self._gsize = None if gsize is None or np.size(gsize) == 0 else tuple(
            _number(call, "gsize", s) for s in np.asarray(gsize).reshape(-1))
        if self._gsize is not None:  # checks that they fit, and, as MATLAB, derives
            # what the global size leaves unset: the dimension, then the partition
            made = self._codistributor(self._gsize, call)
            self._dim = _matlab_dim(made.axis, len(made.shape))
            self._part = made.partition

    @staticmethod
    def defaultPartition(n: Any) -> np.ndarray:
        """MATLAB's default partition of ``n`` over the workers: ``[3 3 2 2]`` for 10 at 4.

        Examples
        --------
        >>> codistributor1d.defaultPartition(10)
        array([10])

        MATLAB
        ------
        ``codistributor1d.defaultPartition(n)``
        """
        call = "codistributor1d.defaultPartition"
        n = _number(call, "n", n)
        if n < 0:
            raise error(SpmdValueError, call, f"'n' must be at least 0 (got {n})")
        if n > _MAX_LENGTH:  # (no numpy array is longer; np.int64 could not hold it)
            raise error(SpmdValueError, call, f"'n' must not exceed {_MAX_LENGTH}, numpy's "
                        f"largest length (got {n})")
        return np.array(default_partition(n), dtype=np.int64)

    @property
    def Dimension(self) -> int:
        """The distribution dimension (1-based; 0 when unset)."""
        return self._dim

    @property
    def Partition(self) -> np.ndarray:
        """Slices per worker (empty when unset)."""
        return np.array(self._part if self._part is not None else (), dtype=np.int64)

    def isComplete(self) -> bool:
        """Whether the dimension, partition and global size are all set."""
        return bool(self._dim) and self._part is not None and self._gsize is not None

    def globalIndices(self, dim: Any, lab: Any = None, *, nargout: int = 1) -> Any:
        """``globalIndices(codist, dim, lab)``: see ``spmdlab.matlab.globalIndices``."""
        call = "globalIndices"
        if not self.isComplete():
            raise error(SpmdValueError, call, "the codistributor is not complete: give "
                        "codistributor1d(dim, part, gsize), or take one from an array")
        return _global_indices(call, self._codistributor(self._gsize, call), self._gsize,
                               dim, lab, nargout)

    def _codistributor(self, shape, call):
        """spmdlab's Codistributor for an array of numpy ``shape`` (the dimensions this
        codistributor names past the shape's are singletons: the array is reshaped).
        Kept per shape and scope: a codistributor1d never changes."""
        shape = tuple(shape)
        key = (shape, id(_world.current()))
        made = self._made.get(key)
        if made is None:
            made = self._made[key] = self._derive(shape, call)
        return made

    def _derive(self, shape, call):
        if self._gsize is not None and tuple(_matlab_size(shape)) != \
                tuple(_matlab_size(self._gsize)):
            raise error(SpmdValueError, call, f"the codistributor is for a "
                        f"{'x'.join(map(str, self._gsize))} array, not "
                        f"{'x'.join(map(str, _matlab_size(shape)))}")
        axis = None if not self._dim else _axis_of(self._dim, shape)
        if len(shape) > 2:  # MATLAB's size: trailing singletons go, but the one named
            shape = _matlab_size(shape)
        return Codistributor(axis, self._part).complete(
            _shaped_for(self._dim, shape), default_axis=last_non_singleton, call=call)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, codistributor1d):
            return NotImplemented
        return (self._dim, self._part, self._gsize) == (other._dim, other._part,
                                                         other._gsize)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        part = "[]" if self._part is None else "[" + " ".join(map(str, self._part)) + "]"
        size = "" if self._gsize is None else \
            f", size [{' '.join(map(str, self._gsize))}]"
        return f"codistributor1d(Dimension {self._dim}, Partition {part}{size})"


_MAX_DIMS = 32 if np.lib.NumpyVersion(np.__version__) < "2.0.0" else 64  # numpy's limit


def _shaped_for(dim, shape):
    """The numpy shape an array needs so that MATLAB dimension ``dim`` is an axis of it:
    a scalar is 1-by-1, a 1-D array asked for a dimension other than 2 becomes a 1-by-k
    row, and dimensions past the last are added as singletons."""
    shape = tuple(shape) if len(shape) else (1, 1)
    if len(shape) == 1:
        return shape if dim in (0, 2) else (1,) + shape + (1,) * max(0, dim - 2)
    return shape + (1,) * max(0, dim - len(shape))


def _axis_of(dim, shape):
    """numpy's axis of MATLAB dimension ``dim`` in an array of ``_shaped_for(dim, shape)``."""
    return 0 if len(shape) == 1 and dim == 2 else dim - 1


def _to_codistributor(call, codist, X_shape):
    if codist is None:
        codist = codistributor1d()
    if not isinstance(codist, codistributor1d):
        raise error(SpmdTypeError, call, f"the distribution must be a codistributor1d "
                    f"(got {codist!r} that is a {type(codist).__name__})")
    return codist._codistributor(X_shape, call)


def _as_array(call, X):
    X = _factories.as_local(call, _doubles_of_literals(X))
    return X.reshape(1, 1) if X.ndim == 0 else X


def _doubles_of_literals(X):
    """``X``, with Python ints (a number, lists and tuples of them) as doubles: every
    MATLAB number is one, and numpy made ``codistributed([1, 2, 3])`` int64, so that a
    later ``D[1] = 2.5`` stored 2. An array keeps its class; logicals stay logical."""
    if isinstance(X, (int, list, tuple)) and not isinstance(X, bool):
        try:
            values = np.asarray(X)
        except (TypeError, ValueError):  # (not numbers: refused where it is converted)
            return X
        if values.dtype.kind in "iu":
            return values.astype(np.float64)
    return X


def _not_here(name, why):
    """A MATLAB constructor spmdlab has no counterpart of: a classmethod that raises
    SpmdValueError naming it and the way to go instead (a bare AttributeError before)."""
    def refused(cls, *args: Any, **kwargs: Any) -> Any:
        raise error(SpmdValueError, f"{cls.__name__}.{name}", f"not available in spmdlab: "
                    f"{why}")
    refused.__name__ = refused.__qualname__ = name
    refused.__doc__ = f"MATLAB's ``codistributed.{name}``: not available ({why})."
    return classmethod(refused)


_DENSE = ("local parts are dense arrays (numpy, torch, CuPy); make a dense one "
          "(codistributed.zeros) or keep a scipy.sparse matrix of each worker's own rows "
          "beside it")
_CELL = "a cell array is a Python list: make one per worker (its own part), or a Composite"


class codistributed(CodistributedArray):
    """MATLAB's codistributed array, as spmdlab's ``CodistributedArray`` with MATLAB's
    defaults: the last non-singleton dimension, and subscripts (and transposes) that return
    copies.

    ``codistributed(X)`` and ``codistributed(X, codist)`` split a replicated array (no
    communication); ``codistributed(X, lab)`` and ``codistributed(X, lab, codist)``
    scatter worker ``lab``'s array (collective); ``codistributed(C1, codist)`` of a
    codistributed ``C1`` is ``redistribute(C1, codist)``. ``codistributed.build(L, codist)``
    joins every worker's local part (checked; ``"noCommunication"`` skips the check).
    Constructors: ``codistributed.zeros``, ``.ones``, ``.rand``, ``.randn``, ``.eye``,
    ``.colon``, ``.Inf``, ``.NaN``, ``.true``, ``.false``, taking MATLAB's arguments
    (``n``, ``m, n``, ``[m, n]``, a class name, a codistributor, ``"noCommunication"``).
    Subscripts are numpy's (0-based); everything else is as ``CodistributedArray``.

    Examples
    --------
    >>> D = codistributed(np.arange(12.0).reshape(3, 4))
    >>> getCodistributor(D).Dimension      # columns, MATLAB's default
    2
    >>> gather(D * 2)[1]
    array([ 8., 10., 12., 14.])

    MATLAB
    ------
    ``codistributed(X)``, ``codistributed(X, codist)``, ``codistributed.build(L, codist)``
    """

    __slots__ = ()
    _default_axis = staticmethod(last_non_singleton)
    _copies_on_read = True

    def __new__(cls, X: Any, *args: Any) -> "codistributed":
        call = cls.__name__
        lab, codist, scatter = None, None, False
        for a in args:
            if _is_flag(a):
                continue
            if isinstance(a, codistributor1d):
                codist = a
            elif not scatter and codist is None:
                scatter = True
                try:
                    lab = _number(call, "lab", a)
                except SpmdTypeError:  # refused in the scatter, with the other workers
                    lab = a
            else:
                raise error(SpmdTypeError, call, f"unexpected argument {a!r}; use "
                            f"{call}(X), {call}(X, codist), {call}(X, lab) or "
                            f"{call}(X, lab, codist)")
        if isinstance(X, CodistributedArray) and not scatter:
            # MATLAB's codistributed(C1, codist) is redistribute(C1, codist)
            moved = redistribute(X, codist)
            return cls._make(moved.local, moved.codistributor, moved._scope)
        if scatter:
            return _scatter_matlab(cls, call, X, lab, codist)
        X = _as_array(call, X)
        target = _to_codistributor(call, codist, X.shape)
        return _factories.distribute_as(cls, X.reshape(target.shape), target, call=call)

    def __repr__(self) -> str:
        size = "x".join(map(str, _matlab_size(self.shape)))
        r = self.codistributor.global_indices()
        dims = []
        here = _matlab_dim(self.axis, self.ndim) - 1
        for d in range(max(len(_matlab_size(self.shape)), here + 1)):
            dims.append(f"{r.start + 1}:{r.stop}" if d == here else ":")
        return (f"<{type(self).__name__} {size} {str(self.dtype).replace('torch.', '')} "
                f"({self.family}); {self._scope.who()} stores ({','.join(dims)})>")

    __str__ = __repr__

    @classmethod
    def build(cls, L: Any, codist: Any, *flags: str) -> "codistributed":
        """``codistributed.build(L, codist)`` and ``codistributed.build(L, codist,
        "noCommunication")``: every worker's local part ``L`` joined by ``codist``.

        Collective (one small exchange) unless ``"noCommunication"``: local sizes that do
        not add up, a partition that does not sum to the global size, or parts whose
        dtype or other dimensions differ raise on every worker.

        Examples
        --------
        >>> codist = codistributor1d(2, [3], [2, 3])
        >>> D = codistributed.build(np.ones((2, 3)), codist)
        >>> D.shape
        (2, 3)

        MATLAB
        ------
        ``codistributed.build(L, codist)``, ``codistributed.build(L, codist,
        "noCommunication")``
        """
        call = "codistributed.build"
        check = not any(_is_flag(f) for f in flags)
        try:
            for flag in flags:
                if not _is_flag(flag):  # MATLAB's one option: anything else is a typo
                    raise error(SpmdValueError, call, f"unknown option {flag!r}; the "
                                f"only one is \"noCommunication\"")
            L = _factories.as_local(call, L)
            if not isinstance(codist, codistributor1d):
                raise error(SpmdTypeError, call, f"'codist' must be a codistributor1d (got "
                            f"{codist!r} that is a {type(codist).__name__})")
            if codist._gsize is not None:
                target = codist._codistributor(codist._gsize, call)
                if L.ndim != len(target.shape) and \
                        L.size == math.prod(target.local_shape()):
                    L = L.reshape(target.local_shape())  # a 1-D part of a 1-by-n row, say
            elif not codist._dim:
                raise error(SpmdValueError, call, "the codistributor must be complete "
                            "(give codistributor1d(dim, part, gsize)), or name at least "
                            "its dimension")
            else:
                # MATLAB's shape of the part: a scalar is 1-by-1, a 1-D part a 1-by-k
                # row, and the dimension named past the part's last is a singleton
                # (joined along it)
                L = L.reshape(_shaped_for(codist._dim, L.shape))
                target = Codistributor(_axis_of(codist._dim, L.shape), codist._part)
        except SpmdError as exc:
            if check:  # collective: the other workers, waiting in its exchange, raise too
                agree(_world.current(), call, 0, error=exc)
            raise
        return _factories.from_local_as(cls, L, target, check=check, call=call)

    @classmethod
    def zeros(cls, *args: Any) -> "codistributed":
        """``codistributed.zeros(n)``, ``(m, n)``, ``([m, n])``, with a class name, a
        codistributor and ``"noCommunication"`` (no communication in any case).

        Examples
        --------
        >>> codistributed.zeros(3).shape        # 3-by-3, as MATLAB's zeros(3)
        (3, 3)

        MATLAB
        ------
        ``codistributed.zeros(n)``, ``zeros(m, n, codist)``, ``zeros(n, "codistributed")``
        """
        return _construct(cls, "zeros", args)

    @classmethod
    def ones(cls, *args: Any) -> "codistributed":
        """``codistributed.ones(...)``: as ``codistributed.zeros``.

        Examples
        --------
        >>> float(codistributed.ones(2, 3).sum())
        6.0

        MATLAB
        ------
        ``codistributed.ones(n)``, ``ones(n, "codistributed")``
        """
        return _construct(cls, "ones", args)

    @classmethod
    def rand(cls, *args: Any) -> "codistributed":
        """``codistributed.rand(...)``: uniform in (0, 1), from each worker's numpy
        generator (``np.random.seed`` on a worker is MATLAB's ``rng`` there).

        Examples
        --------
        >>> codistributed.rand(2, 5).shape
        (2, 5)

        MATLAB
        ------
        ``codistributed.rand(n)``, ``rand(m, n, "codistributed")``
        """
        return _construct(cls, "rand", args)

    @classmethod
    def randi(cls, r: Any, *args: Any) -> "codistributed":
        """``codistributed.randi(r, ...)``: random integers from 1 to ``r``, or from
        ``r[0]`` to ``r[1]``, in double unless a class is named; as
        ``codistributed.rand``.

        Examples
        --------
        >>> R = codistributed.randi(6, 3, 4)
        >>> R.shape, bool(((R >= 1) & (R <= 6)).all())
        ((3, 4), True)

        MATLAB
        ------
        ``codistributed.randi(imax, n)``, ``randi([lo hi], m, n, "codistributed")``
        """
        client = _world.client()
        if client is not None and cls is distributed:  # made by the pool's workers
            return client.construct(_randi_as, cls, r, args)
        return _randi_as(cls, r, args)

    @classmethod
    def randn(cls, *args: Any) -> "codistributed":
        """``codistributed.randn(...)``: standard normal, as ``codistributed.rand``.

        Examples
        --------
        >>> codistributed.randn(4).shape
        (4, 4)

        MATLAB
        ------
        ``codistributed.randn(n)``, ``randn(m, n, "codistributed")``
        """
        return _construct(cls, "randn", args)

    @classmethod
    def eye(cls, *args: Any) -> "codistributed":
        """``codistributed.eye(n)``, ``eye(m, n)``, with a class name and codistributor.

        Examples
        --------
        >>> float(np.trace(codistributed.eye(4)))
        4.0

        MATLAB
        ------
        ``codistributed.eye(n)``, ``eye(n, "codistributed")``
        """
        return _construct(cls, "eye", args)

    @classmethod
    def Inf(cls, *args: Any) -> "codistributed":
        """``codistributed.Inf(...)``: as ``codistributed.zeros``, filled with Inf.

        Examples
        --------
        >>> float(codistributed.Inf(2).max())
        inf

        MATLAB
        ------
        ``codistributed.Inf(n)``, ``Inf(n, "codistributed")``
        """
        return _construct(cls, "Inf", args)

    @classmethod
    def NaN(cls, *args: Any) -> "codistributed":
        """``codistributed.NaN(...)``: as ``codistributed.zeros``, filled with NaN.

        Examples
        --------
        >>> bool(np.isnan(codistributed.NaN(2)).all())
        True

        MATLAB
        ------
        ``codistributed.NaN(n)``, ``NaN(n, "codistributed")``
        """
        return _construct(cls, "NaN", args)

    @classmethod
    def true(cls, *args: Any) -> "codistributed":
        """``codistributed.true(...)``: logical ones.

        Examples
        --------
        >>> bool(codistributed.true(3).all())
        True

        MATLAB
        ------
        ``codistributed.true(n)``, ``true(n, "codistributed")``
        """
        return _construct(cls, "true", args)

    @classmethod
    def false(cls, *args: Any) -> "codistributed":
        """``codistributed.false(...)``: logical zeros.

        Examples
        --------
        >>> bool(codistributed.false(3).any())
        False

        MATLAB
        ------
        ``codistributed.false(n)``, ``false(n, "codistributed")``
        """
        return _construct(cls, "false", args)

    @classmethod
    def colon(cls, a: Any, *args: Any) -> "codistributed":
        """``codistributed.colon(a, b)`` and ``codistributed.colon(a, d, b)``: the row
        ``a:d:b`` (``b`` included, as MATLAB's colon), split over the workers. Its class is
        MATLAB's: double for Python numbers (so ``C[k] = 0.5`` stores 0.5), the class of
        a numpy integer or single operand.

        Examples
        --------
        >>> gather(codistributed.colon(1, 10))
        array([ 1.,  2.,  3.,  4.,  5.,  6.,  7.,  8.,  9., 10.])

        MATLAB
        ------
        ``codistributed.colon(a, b)``, ``codistributed.colon(a, d, b)``
        """
        client = _world.client()
        if client is not None and cls is distributed:  # made by the pool's workers
            return client.construct(_colon_made, cls, "colon", (a,) + args)
        call = f"{cls.__name__}.colon"
        numbers = [x for x in (a,) + args if not isinstance(x, (codistributor1d, str))]
        codist = next((x for x in args if isinstance(x, codistributor1d)), None)
        if len(numbers) not in (2, 3):
            raise error(SpmdTypeError, call, "takes colon(a, b) or colon(a, d, b)")
        start, step, stop = (numbers[0], 1, numbers[1]) if len(numbers) == 2 else numbers
        dtype = _colon_class(start, step, stop)
        values = _colon(call, start, step, stop, dtype).astype(dtype)
        target = _to_codistributor(call, codist, values.shape)
        values = values.reshape(target.shape)  # a row 1-by-n when split along dimension 1
        return cls._make(_factories.block(values, target).copy(), target, _world.current())

    sparse = _not_here("sparse", _DENSE)
    speye = _not_here("speye", _DENSE)
    sprand = _not_here("sprand", _DENSE)
    sprandn = _not_here("sprandn", _DENSE)
    spalloc = _not_here("spalloc", _DENSE)
    cell = _not_here("cell", _CELL)


def _colon_class(*numbers):
    """MATLAB's class of ``a:d:b``: double for Python numbers (MATLAB's literals), the
    integer class or single of an operand of one (an integer class first)."""
    kinds = [np.asarray(x).dtype for x in numbers if isinstance(x, (np.generic, np.ndarray))]
    for dtype in kinds:
        if dtype.kind in "iu":
            return dtype
    return np.dtype(np.float32) if np.dtype(np.float32) in kinds else np.dtype(np.float64)


def _colon(call, a, d, b, dtype=None):
    """MATLAB's ``a:d:b`` (``b`` included) as a numpy array, by MATLAB's rule (its
    ``colonop``): ``b`` is reached only within 2*eps*max(|a|, |b|), the first half is
    ``a + k*d``, the second ``last - k*d`` (so ``0:0.1:0.3`` ends at 0.3 exactly). The
    operands are taken as Python numbers (``uint8(5):-1:1`` counts down, never wraps),
    and for an integer class ``dtype`` the ends are held at its limits first, as
    MATLAB converts them (``uint8(250):300`` stops at 255)."""
    numbers = []
    for name, value in (("a", a), ("d", d), ("b", b)):
        if isinstance(value, np.ndarray) and value.size == 1:
            value = value.reshape(()).item()
        if isinstance(value, (bool, np.bool_)) or not isinstance(
                value, (int, float, np.integer, np.floating)):
            raise error(SpmdTypeError, call, f"'{name}' must be a real number (got {value!r})")
        if isinstance(value, (float, np.floating)) and not np.isfinite(value):
            raise error(SpmdValueError, call,
                        f"'{name}' must be finite (got {value!r})")
        numbers.append(value.item() if isinstance(value, np.generic) else value)
    a, d, b = numbers
    if dtype is not None and np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        a, b = (min(max(x, info.min), info.max) for x in (a, b))
    if d == 0 or (b - a) / d < 0:
        return np.zeros(0)
    if all(float(v).is_integer() for v in (a, d, b)):
        count = (int(b) - int(a)) // int(d) + 1
        if count > np.iinfo(np.intp).max or not -2 ** 63 <= int(b) < 2 ** 63 or \
                not -2 ** 63 <= int(a) < 2 ** 63:  # (a Python int beyond int64)
            raise error(SpmdValueError, call, f"{a}:{d}:{b} is beyond what an int64 "
                        f"array holds")
        return int(a) + int(d) * np.arange(count)
    a, d, b = float(a), float(d), float(b)
    steps = (b - a) / d
    if not steps < np.iinfo(np.intp).max:  # (inf too: b - a beyond the largest float)
        raise error(SpmdValueError, call, f"{a!r}:{d!r}:{b!r} has more elements than an "
                    f"array holds (about {steps:.3g})")
    n = int(round(steps))
    tol = 2.0 * np.finfo(np.float64).eps * (abs(a) if abs(a) > abs(b) else abs(b))
    sign = 1.0 if d > 0 else -1.0
    if sign * (a + n * d - b) > tol:
        n -= 1
    last = a + n * d
    if sign * (last - b) > -tol:
        last = b
    out = np.empty(n + 1, dtype=np.float64)
    k = np.arange(n // 2 + 1, dtype=np.float64)
    out[:n // 2 + 1] = a + k * d
    out[n - np.arange(n // 2 + 1)] = last - k * d
    if n % 2 == 0:
        out[n // 2] = (a + last) / 2
    return out


class distributed(codistributed):
    """MATLAB's distributed array. In a script every worker runs, the client's view is
    every worker's: ``distributed(X)`` is ``codistributed(X)`` with the default
    distribution, ``distributed.zeros(...)`` and the other constructors as
    ``codistributed``'s, and ``isdistributed`` is true of it.

    Examples
    --------
    >>> D = distributed.rand(3, 4)
    >>> isdistributed(D), iscodistributed(D), D.shape
    (True, True, (3, 4))

    MATLAB
    ------
    ``distributed(X)``, ``distributed.rand(n)``, ``distributed.zeros(m, n)``
    """

    __slots__ = ()

    def __new__(cls, X: Any, *args: Any) -> "distributed":
        client = _world.client()
        if client is not None and not args:  # the client of a pool: spread over it
            return client.distributed(_doubles_of_literals(X))
        if args:
            raise error(SpmdTypeError, "distributed", "takes one argument: "
                        "distributed(X) (use codistributed(X, codist) to choose how)")
        return super().__new__(cls, X)  # type: ignore[return-value]


def _is_flag(value):
    return isinstance(value, str) and value.lower() == _NO_COMMUNICATION


_DTYPES = {"double": np.float64, "single": np.float32, "int8": np.int8, "uint8": np.uint8,
           "int16": np.int16, "uint16": np.uint16, "int32": np.int32, "uint32": np.uint32,
           "int64": np.int64, "uint64": np.uint64, "logical": np.bool_}
_FILLS = {"zeros": 0, "ones": 1, "Inf": np.inf, "NaN": np.nan, "true": True, "false": False}


def _parse(call, args):
    """MATLAB's ``(sz..., [class], [codist | "codistributed"], ["noCommunication"])``:
    returns (numpy shape, dtype or None, codistributor1d or None, like or None, whether
    a distribution was asked for)."""
    sizes, dtype, codist, like, wanted = [], None, None, None, False
    args = list(args)
    i = 0
    while i < len(args):
        a = args[i]
        if isinstance(a, codistributor1d):
            if codist is not None:
                raise error(SpmdTypeError, call, f"give one codistributor (got {codist!r} "
                            f"and {a!r})")
            codist, wanted = a, True
        elif isinstance(a, str):
            word = a.lower()
            if word in ("codistributed", "distributed"):
                wanted = True
            elif word == _NO_COMMUNICATION:
                pass
            elif word == "like":
                if i + 1 >= len(args):
                    raise error(SpmdValueError, call, "'like' needs an array after it")
                like = args[i + 1]
                i += 1
            elif word in _DTYPES:
                dtype = _DTYPES[word]
            else:
                raise error(SpmdValueError, call, f"unknown option {a!r}")
        elif isinstance(a, (list, tuple, np.ndarray)) and np.ndim(a) == 1:
            sizes.extend(_number(call, "size", s) for s in a)
        else:
            sizes.append(_number(call, "size", a))
        i += 1
    if isinstance(like, CodistributedArray):
        wanted = True
    elif like is not None and _factories.local_family(like) is None:
        like = _factories.as_local(call, like)  # MATLAB's p may be a number: 'like', 1.0
    shape = (1, 1) if not sizes else (sizes[0], sizes[0]) if len(sizes) == 1 \
        else tuple(sizes)
    if any(s < 0 for s in shape):
        shape = tuple(max(s, 0) for s in shape)  # MATLAB's negative sizes are 0
    # MATLAB's ones(2, 3, 1) is 2x3: trailing singletons past the second are dropped
    # (a codistributor along a dimension past them adds the one it names back)
    return _matlab_size(shape), dtype, codist, like, wanted


def _colon_made(cls, name, args):
    """(On a pool's workers) ``distributed.colon(*args)`` that the client called."""
    return cls.colon(*args)


def _construct(cls, name, args):
    client = _world.client()
    if client is not None and cls is distributed:  # made by the pool's workers
        return client.construct(_construct, cls, name, args)
    call = f"{cls.__name__}.{name}"
    shape, dtype, codist, like, _ = _parse(call, args)
    return _made(cls, call, name, shape, dtype, codist, like)


def _check_random_class(call, name, dtype, like):
    """MATLAB's rand and randn make single or double values, and Inf and NaN exist only
    in them: an integer or logical class (asked for or taken from 'like') is refused,
    not filled with zeros."""
    if name not in ("rand", "randn", "Inf", "NaN"):
        return
    if dtype is None and like is not None:
        like = like.local if isinstance(like, CodistributedArray) else like
        dtype = LOCAL[_factories.local_family(like) or "numpy"].dtype(like)
    if dtype is not None and np.dtype(dtype).kind not in "fc":
        raise error(SpmdValueError, call, f"{name} makes single or double values (got the "
                    f"class {_class_name(dtype)})")


def _class_name(dtype):
    """MATLAB's class name of a numpy dtype (``logical`` for bool)."""
    dtype = np.dtype(dtype)
    return next((k for k, v in _DTYPES.items() if np.dtype(v) == dtype), dtype.name)


def _made(cls, call, name, shape, dtype, codist, like):
    _check_random_class(call, name, dtype, like)
    target = _to_codistributor(call, codist, shape)
    shape = target.shape
    if isinstance(like, CodistributedArray):
        like = like.local
    kw: dict = dict(codistributor=target, like=like)
    if name == "eye":
        if len(shape) != 2:
            raise error(SpmdValueError, call, f"eye makes 2-D arrays (got size {shape})")
        made = _factories.eye(shape[0], shape[1], 0, dtype, **kw)
    elif name in ("rand", "randn"):
        made = getattr(_factories, name)(shape, dtype, **kw)
    else:
        if name in ("true", "false"):
            dtype = np.bool_
        if dtype is None and like is None:
            dtype = np.float64
        made = _factories.full(shape, _FILLS[name], dtype, **kw)
    return cls._make(made.local, made.codistributor, made._scope)


def _scatter_matlab(cls, call, X, lab, codist):
    """``codistributed(X, lab, codist)``: worker ``lab``'s X, scattered (collective)."""
    from ..collectives import broadcast

    scope = _world.current()
    if scope.index == lab:
        try:
            X = _as_array(call, X)
        except SpmdError as exc:  # the others wait in the broadcast: they raise too
            agree(scope, call, 0, error=exc)
    shape = broadcast(call, lab, tuple(X.shape) if scope.index == lab else None,
                      name="lab")
    target = _to_codistributor(call, codist, shape)
    if scope.index == lab:
        X = X.reshape(target.shape)
    return _factories.distribute_as(cls, X, target, source=lab, call=call)


# -- functions ----------------------------------------------------------------------------------


def getLocalPart(D: CodistributedArray) -> Any:
    """``L = getLocalPart(D)``: this worker's part of ``D`` (not collective).

    A numpy part comes back read-only: MATLAB's ``L`` is a copy, so writing into it
    must not change ``D`` (copy it with ``L.copy()`` to change it, and rebuild with
    ``codistributed.build``). torch and CuPy parts are ``D``'s own: do not write into
    them unless you mean to change ``D``.

    Examples
    --------
    >>> D = codistributed(np.arange(6.0).reshape(2, 3))
    >>> getLocalPart(D)
    array([[0., 1., 2.],
           [3., 4., 5.]])

    MATLAB
    ------
    ``L = getLocalPart(D)``
    """
    D = _check_array("getLocalPart", D)
    local = D.local
    if isinstance(local, np.ndarray):
        local = local.view()
        local.flags.writeable = False
    return local


def getCodistributor(D: CodistributedArray) -> codistributor1d:
    """``codist = getCodistributor(D)``: how ``D`` is split, complete (a
    ``codistributor1d`` with MATLAB's 1-based dimension).

    Examples
    --------
    >>> codist = getCodistributor(codistributed.zeros(4, 6))
    >>> codist.Dimension, codist.Partition
    (2, array([6]))

    MATLAB
    ------
    ``codist = getCodistributor(D)``
    """
    D = _check_array("getCodistributor", D)
    return codistributor1d(_matlab_dim(D.axis, D.ndim), D.partition,
                           list(_matlab_size(D.shape)))


def _check_array(call, D):
    if not isinstance(D, CodistributedArray):
        raise error(SpmdTypeError, call, f"takes a codistributed array (got a "
                    f"{type(D).__name__})")
    # local calls, but a part, a layout or indices of an array of another region would
    # be read as this region's (a gplus over them sums part of the array): refuse them
    # as every collective on the array does, on every worker that runs the line
    D._check_scope(call)
    return D


def globalIndices(D: Any, dim: Any, lab: Any = None, *, nargout: int = 1) -> Any:
    """``K = globalIndices(D, dim)`` (1-based indices along MATLAB dimension ``dim`` of
    this worker's part, or worker ``lab``'s), and MATLAB's two-output form ``[e, f] =
    globalIndices(...)`` as ``e, f = globalIndices(..., nargout=2)``. ``D`` may be a
    codistributed array or a complete ``codistributor1d``. Not collective.

    Examples
    --------
    >>> D = codistributed.zeros(4, 10)
    >>> globalIndices(D, 2)[:3]
    array([1, 2, 3])
    >>> globalIndices(D, 2, nargout=2)          # e, f: first and last
    (1, 10)
    >>> globalIndices(D, 1, 1, nargout=2)       # every row, on worker 1
    (1, 4)

    MATLAB
    ------
    ``K = globalIndices(C, dim)``, ``[E, F] = globalIndices(C, dim, lab)``,
    ``globalIndices(codist, dim, lab)``
    """
    call = "globalIndices"
    if isinstance(D, codistributor1d):
        return D.globalIndices(dim, lab, nargout=nargout)
    D = _check_array(call, D)
    return _global_indices(call, D.codistributor, _matlab_size(D.shape), dim, lab, nargout)


def _global_indices(call, codist, msize, dim, lab, nargout):
    if isinstance(nargout, bool) or nargout not in (1, 2):
        raise error(SpmdValueError, call, f"'nargout' must be 1 or 2 (got {nargout!r})")
    dim = _number(call, "dim", dim)
    if dim < 1:
        raise error(SpmdValueError, call, f"'dim' must be 1 or more (got {dim}); "
                    f"dimensions are 1-based")
    worker = None if lab is None or np.size(lab) == 0 else _number(call, "lab", lab)
    if worker is not None and not 1 <= worker <= len(codist.partition):
        raise error(SpmdValueError, call, f"'lab' must be a worker number from 1 to "
                    f"{len(codist.partition)} (got {worker}); worker numbers are 1-based")
    ndim = len(codist.shape)
    here = _matlab_dim(codist.axis, ndim)
    if dim == here:
        r = codist.global_indices(None, worker)
        first, last = r.start + 1, r.stop
    else:
        codist.global_indices(None, worker)  # checks 'lab'
        extent = msize[dim - 1] if dim <= len(msize) else 1
        first, last = 1, extent
    if nargout == 2:
        return first, last
    return np.arange(first, last + 1, dtype=np.int64)


def redistribute(D: CodistributedArray, codist: Optional[codistributor1d] = None
                 ) -> CodistributedArray:
    """``D = redistribute(D, codist)``: the same array split by ``codist`` (default: the
    default distribution). Collective; each element moves once, in one all-to-all.

    Examples
    --------
    >>> D = codistributed.ones(4, 6)                  # by columns
    >>> getCodistributor(redistribute(D, codistributor1d(1))).Dimension
    1

    MATLAB
    ------
    ``D2 = redistribute(D1, codist)``
    """
    call = "redistribute"
    handle = _on_client(D)
    if handle is not None:  # the client of a pool: moved by the workers
        return handle._on_workers("redistribute", redistribute, D, codist)
    D = _check_array(call, D)
    target, err = None, None
    try:
        # the array as MATLAB sees it (trailing singletons past the second dropped),
        # with the singleton dimension the codistributor names added back, as the
        # constructors do: a 2-D array along dimension 3 becomes (m, n, 1), a 1-D one
        # (MATLAB's 1-by-k row) along dimension 1 becomes (1, k)
        shape = D.shape if D.ndim < 2 else _matlab_size(D.shape)
        target = _to_codistributor(call, codist, shape)
    except SpmdError as exc:
        err = exc
    if target is not None and target.shape != D.shape:  # the same elements, reshaped
        return D._reshaped(call, target, "C", err)
    return D._moved(call, target, err, copy=True)


def size(A: Any, *dims: Any, nargout: int = 1) -> Any:
    """``sz = size(A)``: MATLAB's size vector of ``A`` (codistributed or not) as int64:
    a scalar is 1x1, a 1-D array 1-by-k, None (MATLAB's ``[]``) 0x0, a Composite 1-by-N
    (one element per worker; no communication), and trailing singleton dimensions past
    the second are dropped (``ones(2, 3, 1)`` is 2x3). ``size(A, dim)`` is one size (1
    past the last dimension), ``size(A, dim1, dim2)`` or ``size(A, [dim1 dim2])``
    several; MATLAB's ``[m, n] = size(A)`` is ``m, n = size(A, nargout=2)`` (the last
    output holds the product of the dimensions left). Not collective.

    Examples
    --------
    >>> size(ones(2, 3, 1, "codistributed"))
    array([2, 3])
    >>> size(zeros(4, 4, codistributor1d(3)), 3), size(np.arange(5.0), 1)
    (1, 1)
    >>> size(np.zeros((2, 3, 4)), nargout=2)
    (2, 12)

    MATLAB
    ------
    ``sz = size(A)``, ``szdim = size(A, dim)``, ``[m, n] = size(A)``
    """
    call = "size"
    # None is MATLAB's [] (what gop(fcn, X, lab) and spmdCat(X, dim, lab) leave on the
    # other workers): 0x0, so isempty(res) is true there, as MATLAB's ~isempty(res) tests
    msize = _matlab_size(A.shape if isinstance(A, CodistributedArray) else
                         (0, 0) if A is None else (1, len(A)) if _is_composite(A) else
                         np.shape(A))
    if dims:
        wanted = [_number(call, "dim", d) for x in dims for d in np.ravel(x)]
        if any(d < 1 for d in wanted):
            raise error(SpmdValueError, call, f"dimensions are 1-based: 'dim' must be 1 "
                        f"or more (got {wanted})")
        sizes = [msize[d - 1] if d <= len(msize) else 1 for d in wanted]
        return sizes[0] if len(dims) == 1 and np.ndim(dims[0]) == 0 else \
            np.array(sizes, dtype=np.int64)
    if nargout == 1:
        return np.array(msize, dtype=np.int64)
    if isinstance(nargout, bool) or not isinstance(nargout, int) or nargout < 1:
        raise error(SpmdValueError, call, f"'nargout' must be 1 or more (got {nargout!r})")
    sizes = list(msize[:nargout - 1]) + [int(math.prod(msize[nargout - 1:]))]
    return tuple(sizes + [1] * (nargout - len(sizes)))


def _is_composite(A):
    """Whether ``A`` is a Composite (a script's, or a pool client's): MATLAB's 1-by-N
    array of one element per worker, whose size is its number of workers (numpy's
    shape of it read every worker's element, collectively: length(C) of arrays was
    their length, and of a Composite with no element yet an error)."""
    if isinstance(A, Composite):
        return True
    client = sys.modules.get("spmdlab.pool._client")
    return client is not None and isinstance(A, client.Composite)


def ndims(A: Any) -> int:
    """``n = ndims(A)``: the number of MATLAB dimensions of ``A`` (at least 2; trailing
    singletons past the second do not count). Not collective.

    Examples
    --------
    >>> ndims(np.arange(3.0)), ndims(zeros(2, 3, 1, "codistributed"))
    (2, 2)

    MATLAB
    ------
    ``N = ndims(A)``
    """
    return len(size(A))


def numel(A: Any) -> int:
    """``n = numel(A)``: the number of elements of ``A`` (codistributed or not). Not
    collective.

    Examples
    --------
    >>> numel(zeros(3, 4, "codistributed"))
    12

    MATLAB
    ------
    ``n = numel(A)``
    """
    return int(math.prod(size(A)))


def sortrows(A: Any, *args: Any, nargout: int = 1) -> Any:
    """``B = sortrows(A)``, ``sortrows(A, column)``, ``sortrows(A, "descend")``: MATLAB's
    rows of a matrix in order of their first column, ties by the next (or by the
    1-based ``column`` numbers given; a negative one descending), stable, NaN last
    ascending and first descending; ``[B, I] = sortrows(...)`` is ``nargout=2``, ``I``
    the 1-based rows (``B = A(I, :)``). A codistributed ``A`` is gathered, sorted on
    every worker and split again as it was (no further communication); ``I`` is then a
    codistributed column.

    Examples
    --------
    >>> sortrows(np.array([[3.0, 1.0], [1.0, 2.0], [3.0, 0.0]]))
    array([[1., 2.],
           [3., 0.],
           [3., 1.]])

    MATLAB
    ------
    ``B = sortrows(A)``, ``[B, I] = sortrows(A, column)``, ``sortrows(A, "descend")``
    """
    call = "sortrows"
    handle = _on_client(A)
    if handle is not None:  # the client of a pool: sorted by the workers
        if nargout == 2:  # [B, I]: each comes back on its own
            return tuple(handle._on_workers("sortrows", _sortrows_part, A, args, k)
                         for k in (0, 1))
        return handle._on_workers("sortrows", sortrows, A, *args, nargout=nargout)
    D = A if isinstance(A, CodistributedArray) else None
    family_name = D.family if D is not None else _factories.local_family(A)
    whole: Any = None if D is not None else np.asarray(
        LOCAL[family_name].host(A) if family_name else A)
    shape = D.shape if D is not None else whole.shape
    dtype = np.dtype(LOCAL[D.family].dtype(D.local)) if D is not None else whole.dtype
    err: Optional[SpmdError] = None
    columns: Any = None
    try:
        if nargout not in (1, 2):
            raise error(SpmdValueError, call, f"'nargout' must be 1 or 2 (got {nargout!r})")
        if len(shape) > 2 or dtype.kind not in "biuf":
            raise error(SpmdValueError, call, f"'A' must be a real matrix (got {dtype} of "
                        f"shape {shape})")
        columns = _sort_columns(call, shape[1] if len(shape) == 2 else 1, args)
    except SpmdError as exc:
        if D is None:
            raise
        err = exc
    if D is not None:  # every worker sorts by the same columns, or every worker raises
        agree(D._check_scope(call), call,
              D._key(call, None if err else tuple(columns), nargout), error=err,
              describe=lambda: D._describe(call, columns=str(columns), nargout=nargout))
        whole = np.asarray(LOCAL[D.family].host(D.gather()))
    if whole.ndim < 2:  # (a vector's elements are its rows, a number one row)
        whole = whole.reshape(-1, 1)
    keys = []
    for c in reversed(columns):  # np.lexsort: the last key is the first compared
        x = whole[:, abs(c) - 1]
        if c > 0:
            keys.append(x)
        elif x.dtype.kind == "f":
            keys.extend([-x, ~np.isnan(x)])  # descending, NaN first
        else:
            keys.append(~x)  # (reverses ints, unsigned ints and bools without overflow)
    order = np.lexsort(keys) if keys and len(whole) else np.arange(len(whole))
    sorted_rows = whole[order]
    index = (order + 1).astype(np.float64).reshape(-1, 1)
    if D is None:  # (of A's shape: a vector stays one, as a codistributed one does)
        sorted_rows = sorted_rows.reshape(shape)
        B = sorted_rows if family_name in (None, "numpy") else \
            LOCAL[family_name].like(sorted_rows, A)
        return (B, index) if nargout == 2 else B
    from ._numpy import split

    family = LOCAL[D.family]
    mine = sorted_rows.reshape(D.shape)[D.global_slice()]
    B = D._new(family.copy(family.like(np.ascontiguousarray(mine), D.local)),
               D.codistributor)
    if nargout == 1:
        return B
    return B, split(D, family.like(index, D.local), index.shape)


def _sort_columns(call, ncols, args):
    """The signed 1-based columns ``sortrows`` compares, in order."""
    direction, columns = 1, None
    for a in args:
        if isinstance(a, str):
            if a.lower() not in ("ascend", "descend"):
                raise error(SpmdValueError, call, f"the direction must be 'ascend' or "
                            f"'descend' (got {a!r})")
            direction = 1 if a.lower() == "ascend" else -1
        elif columns is None:
            values = np.ravel(np.asarray(a))
            if values.size == 0 or values.dtype.kind not in "iuf" or \
                    np.any(values != np.round(values)) or np.any(values == 0) or \
                    np.any(np.abs(values) > ncols):
                raise error(SpmdValueError, call, f"'column' must be nonzero column "
                            f"numbers from 1 to {ncols}, negative for descending (got {a!r})")
            columns = [int(v) for v in values]
        else:
            raise error(SpmdValueError, call, f"unexpected argument {a!r}")
    if columns is None:
        columns = list(range(1, ncols + 1))
    return [direction * c for c in columns]


def length(A: Any) -> int:
    """``n = length(A)``: MATLAB's length, the largest dimension of ``A`` (0 when it is
    empty; codistributed or not, MATLAB's sizes: a row vector ``(1, n)`` has length n).
    Not collective.

    Examples
    --------
    >>> length(zeros(3, 7, "codistributed")), length(zeros(0, 4))
    (7, 0)

    MATLAB
    ------
    ``n = length(A)``
    """
    dims = size(A)
    return 0 if 0 in dims else int(max(dims))


def isempty(A: Any) -> bool:
    """``tf = isempty(A)``: whether ``A`` has no elements (codistributed or not; None,
    MATLAB's ``[]``, has none: ``gop(fcn, X, 1)`` leaves it on the other workers). Not
    collective.

    Examples
    --------
    >>> isempty(zeros(0, 3, "codistributed")), isempty(ones(2))
    (True, False)

    MATLAB
    ------
    ``tf = isempty(A)``
    """
    return numel(A) == 0


def reshape(A: Any, *sizes: Any) -> Any:
    """``B = reshape(A, m, n, ...)`` and ``reshape(A, [m n ...])``: the elements of ``A``
    in MATLAB's (column-major) order, in an array of that size (one size may be ``[]``,
    worked out from the others; trailing singletons past the second are dropped, as
    MATLAB's size drops them). A codistributed ``A`` gives a codistributed ``B`` with
    the default distribution of its size (the last non-singleton dimension): collective,
    each element moves once, in one all-to-all. numpy's row-major reshape is
    ``A.reshape(...)`` / ``np.reshape``.

    Examples
    --------
    >>> reshape(np.arange(6.0), 2, 3)              # column by column, as MATLAB's
    array([[0., 2., 4.],
           [1., 3., 5.]])
    >>> gather(reshape(codistributed(np.arange(6.0)), 3, [])).shape
    (3, 2)

    MATLAB
    ------
    ``B = reshape(A, sz)``, ``B = reshape(A, sz1, ..., szN)``
    """
    call = "reshape"
    handle = _on_client(A)
    if handle is not None:  # the client of a pool: reshaped by the workers
        return handle._on_workers("reshape", reshape, A, *sizes)
    count = A.size if isinstance(A, CodistributedArray) else int(np.prod(np.shape(A)))
    shape, err = None, None
    try:
        shape = _reshape_size(call, count, sizes)
    except SpmdError as exc:
        err = exc
    if isinstance(A, CodistributedArray):
        from ._numpy import reshaped

        if err is not None:
            return A._reshaped(call, None, "F", err)
        return reshaped(call, A, shape, "F")
    if err is not None or shape is None:
        raise err or AssertionError(call)
    if hasattr(A, "permute") and not isinstance(A, np.ndarray):  # torch: F order by hand
        rev = tuple(range(len(shape) - 1, -1, -1))
        return A.permute(*range(A.dim() - 1, -1, -1)).reshape(shape[::-1]).permute(*rev)
    return np.reshape(A, shape, order="F")


def _reshape_size(call, count, sizes):
    """MATLAB's size arguments of ``reshape`` as a numpy shape (one ``[]`` filled in)."""
    if len(sizes) == 1 and np.ndim(sizes[0]) == 1:
        values = [_number(call, "size", v) for v in np.ravel(sizes[0])]
    elif len(sizes) >= 2:
        values = [None if isinstance(v, (list, tuple, np.ndarray)) and np.size(v) == 0
                  else _number(call, "size", v) for v in sizes]
    else:
        raise error(SpmdValueError, call, f"give at least two sizes, as reshape(A, m, n) "
                    f"or reshape(A, [m n]) (got {sizes!r})")
    if len(values) < 2 or values.count(None) > 1 or any(v is not None and v < 0
                                                         for v in values):
        raise error(SpmdValueError, call, f"the size must have at least two dimensions "
                    f"of at least 0, one of them [] at most (got {values})")
    if None in values:
        known = int(math.prod(v for v in values if v is not None))
        if not known or count % known:
            raise error(SpmdValueError, call, f"{count} elements do not divide into a "
                        f"size with the others {values}")
        values[values.index(None)] = count // known
    if int(math.prod(values)) != count:
        raise error(SpmdValueError, call, f"the number of elements must not change: "
                    f"{count} elements into size {'x'.join(map(str, values))}")
    return _matlab_size(tuple(values))


def _extremum(name):
    def fn(A: Any, *args: Any, nargout: int = 1) -> Any:
        from ._extrema import matlab

        handle = _on_client(A, *args)
        if handle is not None:  # the client of a pool: found by the workers
            if nargout == 2:  # [M, I]: each comes back on its own
                return tuple(handle._on_workers(name, _extremum_part, name, A, args, k)
                             for k in (0, 1))
            return handle._on_workers(name, _extremum_part, name, A, args, None)
        return matlab(name, A, args, nargout)
    return _named(fn, name)


def _named(fn, name):
    """``fn`` called ``name`` everywhere: its name, qualified name and code name (the
    one messages name the call by, see ``_world._called``)."""
    fn.__name__ = fn.__qualname__ = name
    fn.__code__ = fn.__code__.replace(co_name=name)
    return fn


def _extremum_part(name, A, args, k):
    """(On a pool's worker) MATLAB's max or min, or output ``k`` of ``[M, I]``."""
    from ._extrema import matlab

    return matlab(name, A, args, 1) if k is None else matlab(name, A, args, 2)[k]


def _sortrows_part(A, args, k):
    """(On a pool's worker) output ``k`` of ``[B, I] = sortrows(A, ...)``."""
    return sortrows(A, *args, nargout=2)[k]


def _on_client(*values):
    """On a pool's client, the first distributed array among ``values`` (MATLAB runs a
    function of one on the workers), else None."""
    client = _world.client()
    if client is not None:
        for value in values:
            if client.is_client_array(value):
                return value
    return None


# spmdlab.matlab's max and min (named so here, where Python's max and min are in use)
matlab_max = _extremum("max")
matlab_min = _extremum("min")
matlab_max.__doc__ = """``M = max(A)``, ``max(A, [], dim)``, ``max(A, [], vecdim)`` (over every dimension
listed; ``M`` only), ``max(A, [], "all")``, ``max(A, B)``, with ``"omitnan"`` (the default: NaN left out, NaN only when all are) or ``"includenan"``,
and ``"ComparisonMethod"`` ``"auto"`` / ``"abs"`` / ``"real"``; MATLAB's ``[M, I] =
max(...)`` is ``M, I = max(..., nargout=2)``, ``I`` 1-based (a linear, column-major index
for ``"all"``, and along ``dim`` with ``"linear"``: MATLAB's ``sub2ind``), the first of
equal values. Complex values compare by ``abs``, equal
magnitudes by ``angle``, as MATLAB's. ``max(A, B)`` is in MATLAB's class of the result
(single with double is single, an integer class with double or single is the integer
class, the other rounded and held at its limits; a Python number is a double). ``A``
may be codistributed (collective along its
distribution dimension and for ``"all"``; the result is codistributed, a scalar for a
row or ``"all"``) or not. The default dimension is the first non-singleton one.
Import it by name (``from spmdlab.matlab import max``): ``import *`` leaves Python's
``max`` alone. numpy's ``np.max`` and ``D.max()`` keep numpy's rules.

Examples
--------
>>> max(np.array([-2 + 2j, 4 + 1j, -1 - 3j]))
np.complex128(4+1j)
>>> M, I = max(codistributed(np.array([[2.0, 8, 4], [7, 3, 9]])), nargout=2)
>>> gather(M), gather(I)
(array([[7., 8., 9.]]), array([[2, 1, 2]]))

MATLAB
------
``M = max(A)``, ``[M, I] = max(A, [], dim)``, ``max(A, [], "all")``, ``C = max(A, B)``
"""
matlab_min.__doc__ = """``M = min(A)``, ...: as ``max``, the smallest (complex values by ``abs``,
equal magnitudes by the smaller ``angle``).

Examples
--------
>>> min(np.array([3.0, np.nan, 1.0]))
np.float64(1.0)

MATLAB
------
``M = min(A)``, ``[M, I] = min(A, [], dim)``, ``min(A, [], "all")``, ``C = min(A, B)``
"""


def gather(*args: Any) -> Any:
    """``X = gather(D)``: the whole array on every worker; ``X = gather(D, lab)``: on
    worker ``lab``, an empty 0-by-0 array of the same class on the others (``lab`` as
    MATLAB gives it: ``2``, ``2.0``, a 1x1 array); ``[X1, X2] = gather(D1, D2)`` as
    ``X1, X2 = gather(D1, D2)``. A Composite gives the list of its
    elements (MATLAB's cell); anything else comes back as it is. Collective for
    codistributed arrays and Composites.

    Examples
    --------
    >>> D = codistributed(np.arange(4.0))
    >>> gather(D)
    array([0., 1., 2., 3.])
    >>> gather(5.0)                       # not distributed: unchanged
    5.0

    MATLAB
    ------
    ``X = gather(D)``, ``X = gather(D, lab)``, ``[X1, X2] = gather(D1, D2)``
    """
    if not args:
        raise error(SpmdTypeError, "gather", "takes at least one argument")
    lab = None
    values = list(args)
    if len(values) >= 2 and _is_lab(values[-1]):
        try:
            lab = _number("gather", "lab", values.pop())
        except SpmdError as exc:  # of an array, collective: the others, waiting in it,
            if _world.client() is None and \
                    any(isinstance(v, (CodistributedArray, Composite)) for v in values):
                agree(_world.current(), "gather", 0, error=exc)  # raise too
            raise
    client = _world.client()
    if client is not None:  # the client of a pool: its distributed arrays come back
        out = tuple(client.gather(v, lab) for v in values)
    else:
        out = tuple(_gather_one(v, lab) for v in values)
    return out[0] if len(out) == 1 else out


def _is_lab(value):
    """Whether ``gather``'s last argument is MATLAB's ``lab``: a number, or a 1x1 numeric
    array (``find(...)`` gives one, ``np.array(2.0)`` another), as every MATLAB function
    here takes a worker number; a 1x1 array was gathered as a second value, unchanged,
    and the array gathered on every worker, not on ``lab`` alone."""
    if isinstance(value, np.ndarray):
        return value.size == 1 and value.dtype.kind in "iuf"
    return isinstance(value, (int, float, np.number))


def _gather_one(value, lab):
    if isinstance(value, Composite):
        return value[:]
    if not isinstance(value, CodistributedArray):
        return value
    whole = value.gather(lab)
    if whole is None:
        family = LOCAL[value.family]
        return family.empty((0, 0), family.dtype(value.local), value.local)
    return whole


def iscodistributed(X: Any) -> bool:
    """``tf = iscodistributed(X)``: whether ``X`` is a codistributed array (a
    ``distributed`` one is too: in a script, the client's view is every worker's).

    Examples
    --------
    >>> iscodistributed(codistributed.zeros(2)), iscodistributed(np.zeros(2))
    (True, False)

    MATLAB
    ------
    ``tf = iscodistributed(X)``
    """
    return isinstance(X, CodistributedArray)


def isreplicated(X: Any) -> bool:
    """``tf = isreplicated(X)``: collective, whether ``X`` holds the same value on every
    worker (the same on every worker too). The same means the same type and the same
    bytes (arrays: dtype, shape and every bit; so NaN equals a NaN of the same bits and
    -0.0 differs from 0.0); a codistributed array never is. Every worker sends a digest
    of its value, not the value.

    Examples
    --------
    >>> isreplicated(np.ones(3)), isreplicated(codistributed.ones(4))
    (True, False)

    MATLAB
    ------
    ``tf = isreplicated(X)``
    """
    from .. import _pack
    from ..collectives import gather as gather_values

    call = "isreplicated"
    scope = _world.current()
    if isinstance(X, CodistributedArray):
        mine: Any = ("codistributed",)
    else:
        try:
            message = _pack.encode(X, lambda: f"{call} ({scope.who()})")
            mine = ("digest", type(X).__qualname__,
                    _pack.content_digest(memoryview(message).cast("B")))
        except SpmdError as exc:
            mine, own = ("error", str(exc).partition("): ")[2]), exc
    every = gather_values(call, mine)
    if mine[0] == "error":
        raise own
    failed = [f"worker {k}: {m[1]}" for k, m in enumerate(every, 1) if m[0] == "error"]
    if failed:
        raise error(SpmdTypeError, call, f"failed on another worker: {'; '.join(failed)}")
    return every[0][0] == "digest" and all(m == every[0] for m in every)


def isdistributed(X: Any) -> bool:
    """``tf = isdistributed(X)``: whether ``X`` was made as a ``distributed`` array.

    Examples
    --------
    >>> isdistributed(distributed.zeros(2)), isdistributed(codistributed.zeros(2))
    (True, False)

    MATLAB
    ------
    ``tf = isdistributed(X)``
    """
    client = _world.client()
    return isinstance(X, distributed) or client is not None and client.is_client_array(X)


def drange(*args: Any) -> Sequence[Any]:
    """``for i = drange(1:n)``: this worker's contiguous share of the MATLAB range, by
    the default partition. ``drange(a, b)`` is ``a:b`` (``b`` included),
    ``drange(a, d, b)`` is ``a:d:b``; a Python range, list or array is split as it is.
    Not collective. As in MATLAB, the loop body reaches codistributed arrays only in this
    worker's part: ``D[i - 1, j]`` (``D(i, j)``), with ``i`` on the distribution
    dimension, reads the local part with no communication (a slice there, a plain array
    of this worker's elements), ``D[i - 1, j] = v`` writes it, and an index another
    worker holds raises ``SpmdIndexError`` (a read outside such a loop is collective).

    Examples
    --------
    >>> list(drange(1, 10))        # at 4 workers: 1:3, 4:6, 7:8, 9:10
    [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]

    MATLAB
    ------
    ``for i = drange(1:n)``, ``for i = drange(a:d:b)``
    """
    call = "drange"
    if len(args) == 1 and not np.ndim(args[0]) == 0:
        whole = args[0]
    elif len(args) in (2, 3):
        a, d, b = (args[0], 1, args[1]) if len(args) == 2 else args
        whole = _whole_range(a, d, b)
        if whole is None:
            values = _colon(call, a, d, b)
            whole = range(int(a), int(a) + int(d) * len(values), int(d)) if \
                values.dtype.kind in "iu" and len(values) else values
    else:
        raise error(SpmdTypeError, call, "takes drange(a, b), drange(a, d, b) or a range")
    scope = _world.current()
    partition = default_partition(len(whole), scope.size)
    first = sum(partition[:scope.rank])
    return DRange(whole[first:first + partition[scope.rank]], partition)


def _whole_range(a, d, b):
    """``a:d:b`` of whole numbers within int64 as a range, without making the array
    (``drange(1, 1e9)`` held 8 GB on every worker); None for anything else."""
    values = []
    for v in (a, d, b):
        if isinstance(v, (bool, np.bool_)) or not isinstance(
                v, (int, float, np.integer, np.floating)) or not np.isfinite(float(v)) or \
                not float(v).is_integer() or not -2 ** 63 <= int(v) < 2 ** 63:
            return None
        values.append(int(v))
    a, d, b = values
    if d == 0 or (b - a) * d < 0:
        return None  # (empty: as _colon makes it)
    return range(a, a + d * ((b - a) // d + 1), d)


# -- MATLAB's zeros(..., "codistributed") and friends --------------------------------------------


def _builtin(name, plain):
    def fn(*args: Any) -> Any:
        call = name
        shape, dtype, codist, like, wanted = _parse(call, args)
        if wanted:
            cls = _asked_class(args, like)
            client = _world.client()
            if client is not None and cls is distributed:  # made by the pool's workers
                return client.construct(_builtin_on_workers, cls, name, args)
            return _made(cls, call, name, shape, dtype, codist, like)
        _check_random_class(call, name, dtype, like)
        return plain(shape, dtype, like)
    return _named(fn, name)


def _asked_class(args, like):
    """The class MATLAB's ``zeros(..., "distributed")``, ``zeros(..., "codistributed")``,
    ``zeros(..., codist)`` and ``zeros(..., "like", D)`` make: distributed when named, or
    when ``D`` is and neither ``"codistributed"`` nor a codistributor is named (as
    MATLAB's ``'like'`` takes p's class), else codistributed."""
    words = {a.lower() for a in args if isinstance(a, str)}
    if "distributed" in words:
        return distributed
    named = "codistributed" in words or any(isinstance(a, codistributor1d) for a in args)
    return distributed if isinstance(like, distributed) and not named else codistributed


def _randi_range(call, r):
    """MATLAB's ``imax`` (1 to imax) or ``[imin imax]``: the two ends, checked."""
    ends = np.ravel(np.asarray(r)) if not isinstance(r, str) else None
    if ends is None or ends.size not in (1, 2) or ends.dtype.kind not in "iuf" or \
            not np.all(np.isfinite(ends)) or np.any(ends != np.round(ends)):
        raise error(SpmdValueError, call, f"the range must be an integer imax or a pair "
                    f"[imin, imax] of integers (got {r!r})")
    low, high = (1, int(ends[0])) if ends.size == 1 else (int(ends[0]), int(ends[1]))
    if high < low:
        raise error(SpmdValueError, call, f"the range's end must be at least its start "
                    f"(got {low} to {high})")
    if low < -2 ** 63 or high >= 2 ** 63:  # (numpy's generator draws int64)
        raise error(SpmdValueError, call, f"the range {low} to {high} must lie within "
                    f"int64's, -2^63 to 2^63 - 1")
    return low, high


def _randi_as(cls, r, args):
    call = f"{cls.__name__}.randi" if cls is not None else "randi"
    low, high = _randi_range(call, r)
    shape, dtype, codist, like, wanted = _parse(call, args)
    if dtype is not None and np.dtype(dtype).kind == "b":
        raise error(SpmdValueError, call, "randi makes numbers, not logical values")
    if dtype is not None and np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        if low < info.min or high > info.max:
            raise error(SpmdValueError, call, f"the range {low} to {high} does not fit in "
                        f"the class {np.dtype(dtype).name}")
    if cls is None and not wanted:  # a plain array, of 'like's family if given
        return _plain_like(lambda shape, dtype: np.random.randint(
            low, high + 1, shape, dtype=np.int64).astype(dtype))(shape, dtype, like)
    if cls is None:
        cls = _asked_class(args, like)
        client = _world.client()
        if client is not None and cls is distributed:
            return client.construct(_randi_as, cls, r, args)
    target = _to_codistributor(call, codist, shape)
    made = _factories.random_integers(
        low, high, target.shape, dtype if dtype is not None or like is not None
        else np.float64, codistributor=target,
        like=like.local if isinstance(like, CodistributedArray) else like, call=call)
    return cls._make(made.local, made.codistributor, made._scope)


def randi(r: Any, *args: Any) -> Any:
    """``randi(imax, n)``, ``randi(imax, m, n)``, ``randi([imin imax], sz)``, with a class
    name: MATLAB's uniform random integers (double unless a class is named), from
    numpy's generator; with a codistributor or ``"codistributed"`` a codistributed
    array, as ``codistributed.randi``; with ``"distributed"`` a distributed one.

    Examples
    --------
    >>> x = randi(10, 1, 5)
    >>> x.shape, x.dtype.name, bool(((x >= 1) & (x <= 10)).all())
    ((1, 5), 'float64', True)

    MATLAB
    ------
    ``randi(imax, n)``, ``randi([imin imax], m, n, "int32")``, ``randi(r, n,
    "codistributed")``
    """
    return _randi_as(None, r, args)


def _builtin_on_workers(cls, name, args):
    """(On a pool's worker) MATLAB's ``zeros(..., "distributed")`` and friends."""
    return globals()[name](*args)


def _plain_like(make):
    """``make(shape, dtype)`` (a numpy array) for MATLAB's plain constructors, following
    ``like``: its class when none is named, and its family and device (a torch tensor
    or CuPy array gives one); double when neither is given."""
    def fn(shape, dtype, like):
        name = None if like is None else _factories.local_family(like)
        if dtype is None:
            dtype = np.float64 if like is None else LOCAL[name].dtype(like)
        out = make(shape, np.dtype(dtype))
        return out if name in (None, "numpy") else LOCAL[name].like(out, like)
    return fn


zeros = _builtin("zeros", _plain_like(lambda shape, dtype: np.zeros(shape, dtype)))
ones = _builtin("ones", _plain_like(lambda shape, dtype: np.ones(shape, dtype)))
eye = _builtin("eye", _plain_like(lambda shape, dtype: np.eye(
    shape[0], shape[1] if len(shape) > 1 else None, dtype=dtype)))
rand = _builtin("rand", _plain_like(lambda shape, dtype: np.asarray(
    np.random.random(shape)).astype(dtype)))
randn = _builtin("randn", _plain_like(lambda shape, dtype: np.asarray(
    np.random.standard_normal(shape)).astype(dtype)))

zeros.__doc__ = """``zeros(n)``, ``zeros(m, n)``, ``zeros([m, n])``, with a class name: a
numpy array of zeros as MATLAB makes it (``zeros(3)`` is 3-by-3). With a codistributor or
``"codistributed"`` (``zeros(n, "codistributed")``, ``zeros(m, n, codist)``) a
codistributed array, as ``codistributed.zeros``; with ``"distributed"`` a distributed one.

Examples
--------
>>> zeros(2)
array([[0., 0.],
       [0., 0.]])
>>> zeros(4, "codistributed").shape
(4, 4)

MATLAB
------
``zeros(n)``, ``zeros(m, n, codist)``, ``zeros(n, "codistributed")``
"""
ones.__doc__ = """``ones(...)``: as ``zeros``, with ones.

Examples
--------
>>> ones(1, 3)
array([[1., 1., 1.]])
>>> float(ones(3, "codistributed").sum())
9.0

MATLAB
------
``ones(n)``, ``ones(n, "codistributed")``, ``ones(m, n, codist)``
"""
eye.__doc__ = """``eye(n)``, ``eye(m, n)``: the identity; with a codistributor or
``"codistributed"``, codistributed.

Examples
--------
>>> eye(2)
array([[1., 0.],
       [0., 1.]])
>>> float(np.trace(eye(5, "codistributed")))
5.0

MATLAB
------
``eye(n)``, ``eye(n, "codistributed")``, ``eye(m, n, codist)``
"""
rand.__doc__ = """``rand(...)``: uniform random numbers as MATLAB makes them (``rand(3)``
is 3-by-3), from numpy's generator; with a codistributor or ``"codistributed"``,
codistributed (each worker draws its own part).

Examples
--------
>>> rand(2, 3).shape
(2, 3)
>>> rand(4, "codistributed").shape
(4, 4)

MATLAB
------
``rand(n)``, ``rand(m, n, "codistributed")``, ``rand(n, codist)``
"""
randn.__doc__ = """``randn(...)``: standard normal numbers; as ``rand``.

Examples
--------
>>> randn(3).shape
(3, 3)

MATLAB
------
``randn(n)``, ``randn(m, n, "codistributed")``
"""


def codistributor(kind: str = "1d", dim: Any = 0, part: Any = (), gsize: Any = None
                  ) -> codistributor1d:
    """``codistributor()``, ``codistributor('1d', dim)``, ``codistributor('1d', dim,
    part)``, ``codistributor('1d', dim, part, gsize)`` (complete, as in MATLAB's example
    ``codistributor('1d', 2, [1 2 1 2], [2 6 4])``): a ``codistributor1d``. MATLAB's
    ``'2dbc'`` (block-cyclic) is not available.

    Examples
    --------
    >>> codistributor("1d", 1)
    codistributor1d(Dimension 1, Partition [])

    MATLAB
    ------
    ``codistributor()``, ``codistributor('1d', dim, part)``, ``codistributor('1d', dim,
    part, gsize)``
    """
    if str(kind).lower() != "1d":
        raise error(SpmdValueError, "codistributor", f"only the '1d' distribution is "
                    f"available (got {kind!r}); use codistributor1d")
    return codistributor1d(dim, part, gsize)


MATLAB_NAMES = ["codistributed", "codistributor", "codistributor1d", "distributed", "drange",
                "eye", "gather", "getCodistributor", "getLocalPart", "globalIndices",
                "iscodistributed", "isdistributed", "isempty", "isreplicated", "length",
                "ndims", "numel",
                "ones", "rand", "randi", "randn", "redistribute", "reshape", "size", "sortrows",
                "zeros"]
