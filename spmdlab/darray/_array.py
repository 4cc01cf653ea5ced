"""``CodistributedArray``: a global array split over the workers along one axis.

The array is this worker's local part (a numpy array, torch tensor or CuPy array) and
read-only metadata: the codistributor (axis, partition, global shape) and the scope (the
workers it spans). Element-wise work happens on the local parts without communicating;
what needs other workers' data (gather, redistribute, reductions along the distributed
axis, products, reading an element another worker holds) is collective, agreed on first
so that workers that disagree all raise instead of waiting.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Iterator, Optional, Sequence, Tuple, Union, cast

import numpy as np

from .. import _pack, _world
from .._agree import agree, describe_call
from .._backends import LOCAL, local_family
from .._checks import check_worker
from ..errors import SpmdError, SpmdTypeError, SpmdValueError
from . import _exchange
from ._codistributor import Codistributor, axis_of, error, first_axis

__all__ = ["CodistributedArray"]


class CodistributedArray(np.lib.mixins.NDArrayOperatorsMixin):
    """A global array split over the workers along one axis (MATLAB's codistributed array).

    Worker k holds the slices ``global_indices()`` of the distribution axis: its *local
    part*, in any array family (numpy, torch CPU or CUDA, CuPy). It behaves like a numpy
    array: global 0-based subscripts, element-wise arithmetic and numpy ufuncs,
    reductions, transpose and products (numpy's ``__array_ufunc__`` and
    ``__array_function__``), with results in the local parts' family, dtype and device.

    ``D.T`` is the transpose (no communication: the distribution axis moves with it).
    Make one with ``distribute`` (split an array every worker holds), ``from_local``
    (every worker gives its part) or the constructors of ``spmdlab.darray`` (``zeros``,
    ``rand``, ...); never with ``CodistributedArray(...)``.

    Collective: ``gather``, ``redistribute``, reductions along the distribution axis,
    products, subscripts that read elements of other workers, and operations between
    arrays of different distributions: every worker of the array's scope makes them, in
    the same order. Element-wise operations and everything local are not.

    Examples
    --------
    >>> D = distribute(np.arange(12.0).reshape(3, 4))   # rows split over the workers
    >>> D.shape, D.axis, D.partition
    ((3, 4), 0, (3,))
    >>> E = np.sin(D) * 2 + D                             # local work, no communication
    >>> float(np.sum(D)), D[1, 2], D.gather()[2]
    (66.0, np.float64(6.0), array([ 8.,  9., 10., 11.]))

    MATLAB
    ------
    ``codistributed`` (inside ``spmd``), ``distributed`` (on the client)
    """

    __slots__ = ("_local", "_codist", "_scope")
    _local: Any
    _codist: Codistributor
    _scope: Any
    __array_priority__ = 100
    # MATLAB's classes (spmdlab.matlab.codistributed) choose the last non-singleton axis
    # and, as MATLAB's values, never share data with the array a subscript read from
    _default_axis = staticmethod(first_axis)
    _copies_on_read = False

    def __new__(cls, *args: Any, **kwargs: Any) -> CodistributedArray:
        raise TypeError(f"{cls.__name__}: make one with spmdlab.darray.distribute(x), "
                        f"from_local(local) or a constructor such as zeros(shape)")

    @classmethod
    def _make(cls, local, codist, scope):
        self = object.__new__(cls)
        self._local = local
        self._codist = codist
        self._scope = scope
        return self

    def _new(self, local, codist):
        """An array of this one's class and scope."""
        return type(self)._make(local, codist, self._scope)

    # -- what it is (local: never communicates) ------------------------------------------

    @property
    def local(self) -> Any:
        """This worker's local part: the array itself, not a copy (writing into it writes
        into this array). Not collective."""
        return self._local

    @property
    def codistributor(self) -> Codistributor:
        """How the array is split (complete: axis, partition, shape)."""
        return self._codist

    @property
    def shape(self) -> Tuple[int, ...]:
        """The global shape."""
        return self._codist.shape  # type: ignore[return-value]

    @property
    def axis(self) -> int:
        """The distribution axis (0-based)."""
        return self._codist.axis  # type: ignore[return-value]

    @property
    def partition(self) -> Tuple[int, ...]:
        """Slices of the distribution axis per worker, in worker order."""
        return self._codist.partition  # type: ignore[return-value]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        """The number of elements of the global array (MATLAB ``numel``)."""
        return int(math.prod(self.shape))

    @property
    def dtype(self) -> Any:
        """The local parts' dtype (a numpy dtype, or torch's for tensors)."""
        return self._local.dtype

    @property
    def family(self) -> str:
        """The local parts' array family: ``"numpy"``, ``"torch"`` or ``"cupy"``."""
        return local_family(self._local)

    @property
    def itemsize(self) -> int:
        """The bytes of one element."""
        return int(self._local.itemsize)

    @property
    def nbytes(self) -> int:
        """The bytes of the global array's elements (every worker's together; this
        worker's: ``D.local.nbytes``)."""
        return self.size * self.itemsize

    def __len__(self) -> int:
        return self.shape[0]

    def global_indices(self, axis: Optional[int] = None,
                       worker: Optional[int] = None) -> range:
        """The global indices (0-based) along ``axis`` (default: the distribution axis)
        that worker ``worker`` (default: this one) holds, as a range. Not collective."""
        return self._codist.global_indices(axis, worker)

    def global_slice(self, worker: Optional[int] = None) -> Tuple[slice, ...]:
        """Where worker ``worker``'s (default: this one's) local part lies in the global
        array: ``G[D.global_slice()]`` is ``D.local`` for the gathered ``G``. Hand it to
        a library that writes or reads the global array in parts (h5py, zarr)."""
        r = self._codist.global_indices(None, worker)
        return tuple(slice(r.start, r.stop) if d == self.axis else slice(None)
                     for d in range(self.ndim))

    def __repr__(self) -> str:  # local: a print or a debugger must never communicate
        stores = ", ".join(f"{s.start}:{s.stop}" if s.start is not None else ":"
                           for s in self.global_slice())
        return (f"<{type(self).__name__} {self.shape} {_dtype_name(self.dtype)} "
                f"{self.family}, axis {self.axis}, partition {self.partition}; "
                f"{self._scope.who()} stores [{stores}]>")

    __str__ = __repr__

    # -- collective: the whole array, another distribution ---------------------------------

    def gather(self, destination: Optional[int] = None) -> Any:
        """The global array on every worker (or on worker ``destination`` only; None on
        the others), in the local parts' family, dtype and device. One Allgatherv (or,
        split along a later axis, one all-to-all that puts each block in place).

        Collective: every worker of the array's scope must call this.
        """
        call = f"{type(self).__name__}.gather"
        scope = self._check_scope(call)
        err = check_worker(call, scope, "destination", destination)
        # (a bad destination, a list or an array, may be unhashable: an error agrees as None)
        agree(scope, call, self._key(call, None if err else destination), error=err,
              describe=lambda: self._describe(call, destination=destination))
        return _exchange.gather(scope, call, self._local, self.shape, self.axis,
                                self.partition, destination, self.family)

    def redistribute(self, codistributor: Optional[Codistributor] = None, *,
                     axis: Optional[int] = None,
                     partition: Optional[Sequence[int]] = None) -> CodistributedArray:
        """The same global array split another way: by ``codistributor``, or along
        ``axis`` (default: the class's default axis; with only ``partition``, this
        array's axis) with ``partition`` (default: the default partition). Each element
        moves once, in one all-to-all; always a new array.

        Collective: every worker of the array's scope must call this.
        """
        call = f"{type(self).__name__}.redistribute"
        scope = self._check_scope(call)
        target, err = None, None
        try:
            target = self._target(call, codistributor, axis, partition)
        except SpmdError as exc:
            err = exc
        return self._moved(call, target, err, copy=True)

    def _moved(self, call, target, err=None, copy=False):
        """Collective: this array in the distribution ``target`` (one all-to-all; the array
        itself when it already is, unless ``copy``). ``err``: this worker's own failure,
        raised on every worker."""
        scope = self._check_scope(call)
        agree(scope, call, _pack.digest((self._key(call), None if err else
                                        _codist_key(target))), error=err,
              describe=lambda: self._describe(call, target=target))
        if target == self._codist:
            return self._new(LOCAL[self.family].copy(self._local), target) if copy else self
        local = _exchange.exchange(scope, call, self._local, self.shape,
                                   _exchange.codist_blocks(self._codist),
                                   _exchange.codist_blocks(target), self.family)
        return self._new(local, target)

    def _reshaped(self, call, target, order="C", err=None):
        """Collective: this array's elements, read in numpy's ``order`` ("C": row by row,
        "F": column by column), as an array of the complete codistributor ``target``
        (its shape and split); each element moves once, in one all-to-all. ``err``:
        this worker's own failure, raised on every worker."""
        scope = self._check_scope(call)
        agree(scope, call, _pack.digest((self._key(call), order, None if err else
                                        _codist_key(target))), error=err,
              describe=lambda: self._describe(call, target=target, order=order))
        if order == "F":  # the F order of an array is the C order of its transpose
            inner = Codistributor(len(target.shape) - 1 - target.axis, target.partition,
                                  target.shape[::-1])
            from ._numpy import transpose

            t = transpose(self, view=True)
            local = _exchange.reshape(scope, call, t._local, t._codist, inner, self.family)
            return transpose(self._new(local, inner), view=True)
        local = _exchange.reshape(scope, call, self._local, self._codist, target,
                                  self.family)
        return self._new(local, target)

    def _target(self, call, codistributor, axis, partition):
        if codistributor is not None and (axis is not None or partition is not None):
            raise error(SpmdTypeError, call, "give a codistributor or axis and partition, "
                        "not both")
        if codistributor is None:
            if axis is None and partition is not None:
                axis = self.axis  # a new partition of the same axis
            codistributor = Codistributor(axis_of(call, axis, self.ndim), partition)
        elif not isinstance(codistributor, Codistributor):
            raise error(SpmdTypeError, call, f"'codistributor' must be a Codistributor "
                        f"(got {codistributor!r} that is a {type(codistributor).__name__})")
        return codistributor.complete(self.shape, default_axis=self._default_axis,
                                      call=call)

    # -- helpers shared by the operations ------------------------------------------------

    def _check_scope(self, call):
        """The current scope, if it is the array's; SpmdValueError (on every worker that
        runs the line) if the array was made in another spmd region."""
        scope = _world.current()
        if scope is not self._scope:
            raise SpmdValueError(
                f"{call} ({scope.who()}): this codistributed array was made with "
                f"{self._scope.size} worker{'s' if self._scope.size != 1 else ''} in "
                f"another spmd region; use it there (or gather it there)")
        return scope

    def _key(self, call, *extra):
        return _pack.digest((call, _codist_key(self._codist), _dtype_name(self.dtype),
                             self.family) + extra)

    def _describe(self, call, **options):
        """This worker's account of a call on the array, for mismatch messages."""
        return describe_call(call, f"{_dtype_name(self.dtype)} {self.shape} {self.family}",
                             {"shape": str(self.shape), "dtype": _dtype_name(self.dtype),
                              "axis": str(self.axis), "partition": str(self.partition),
                              "family": self.family}, **options)

    # -- not an array every worker holds ---------------------------------------------------

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        raise SpmdTypeError(
            f"{type(self).__name__}: numpy cannot turn a codistributed array into an "
            f"array implicitly (it would have to gather it); call .gather() (collective) "
            f"for the global array, or use .local for this worker's part")

    def __reduce__(self) -> Any:
        raise SpmdTypeError(
            f"{type(self).__name__} cannot be pickled or sent (its parts live on "
            f"{_workers(self._scope.size)}); send .local, or .gather() it first (a "
            f"pool's block: gather it in the block, or make it in a block of the whole "
            f"pool, whose codistributed arrays come back as distributed arrays)")

    __hash__ = None  # type: ignore[assignment]  # == is element-wise, as numpy's

    def __copy__(self) -> CodistributedArray:
        """``copy.copy(D)`` and ``copy.deepcopy(D)`` (a value copy, MATLAB's ``E = D``):
        ``D.copy()``, each worker its own part (no communication; pickling refuses)."""
        return self.copy()

    def __deepcopy__(self, memo: Any) -> CodistributedArray:
        return self.copy()

    # the numpy protocols and the rest of the array's behaviour: _numpy and _indexing

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        from ._indexing import whole_array
        from ._numpy import array_ufunc

        return whole_array(array_ufunc, self, ufunc, method, inputs, kwargs)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        from ._indexing import whole_array
        from ._numpy import array_function

        return whole_array(array_function, self, func, types, args, kwargs)

    def __pow__(self, other: Any) -> Any:
        return self._fast_power(other)(self, other)

    def __ipow__(self, other: Any) -> Any:
        # (numpy's A **= k takes A ** k's fast path too, into A: D **= 2 of complex
        # values has np.square's bits, not np.power's)
        return self._fast_power(other)(self, other, out=(self,))

    def _fast_power(self, other):
        """The ufunc that numpy's ndarray ``**`` (and ``**=``) applies for ``other``, as
        a function of (self, other, **kwargs).

        numpy takes a fast path for three Python numbers: ** 2 is np.square (bool ** 2
        is int8, np.power's int64; complex values have square's bits), ** 0.5 of floats
        np.sqrt, ** -1 of floats np.reciprocal; numpy parts give A ** k's result."""
        if self.family == "numpy":
            kind = self.dtype.kind
            fast = None
            if type(other) is int and other == 2 and kind in "biufc":
                fast = np.square
            elif kind in "fc" and (type(other) is float and other == 0.5):
                fast = np.sqrt
            elif kind in "fc" and type(other) is int and other == -1:
                fast = np.reciprocal
            if fast is not None:
                return lambda a, _, **kwargs: fast(a, **kwargs)
        return np.power

    def __getitem__(self, key: Any) -> Any:
        from ._indexing import getitem

        return getitem(self, key)

    def __setitem__(self, key: Any, value: Any) -> None:
        from ._indexing import setitem

        setitem(self, key, value)

    def __contains__(self, value: Any) -> bool:
        """numpy's ``value in D``: ``(D == value).any()`` (collective, a reduction; the
        rows ``__iter__`` gives would be compared as arrays, which have no truth
        value)."""
        return bool((self == value).any())

    def __iter__(self) -> Iterator[Any]:
        for i in range(len(self)):
            yield self[i]

    def _scalar(self, convert, call):
        if self.size != 1:
            raise error(SpmdValueError, f"{type(self).__name__}.{call}", f"only an array "
                        f"of one element converts to a Python number (shape {self.shape})")
        return convert(self[(0,) * self.ndim])

    def __bool__(self) -> bool:
        return self._scalar(bool, "__bool__")

    def __float__(self) -> float:
        return self._scalar(float, "__float__")

    def __int__(self) -> int:
        return self._scalar(int, "__int__")

    def __complex__(self) -> complex:
        return self._scalar(complex, "__complex__")

    def __round__(self, ndigits: Optional[int] = None) -> CodistributedArray:
        """Python's ``round(D)``, ``round(D, n)``: numpy's ``np.round`` (an array, as
        numpy's ``round`` of an array gives; half to even)."""
        return cast(CodistributedArray, np.round(self, 0 if ndigits is None else ndigits))

    # -- numpy's methods -----------------------------------------------------------------

    @property
    def T(self) -> CodistributedArray:
        """The transpose: no communication (the distribution axis moves with it)."""
        return self.transpose()

    def transpose(self, *axes: Any) -> CodistributedArray:
        """The axes permuted (reversed by default): no communication."""
        from ._numpy import _same_arguments, transpose

        if len(axes) == 1 and axes[0] is None:  # numpy's a.transpose(None): reversed
            axes = ()
        order = axes[0] if len(axes) == 1 and axes[0] is not None and np.ndim(axes[0]) \
            else (axes or None)
        _same_arguments(self, np.transpose, (self, order), {})  # (collective if given)
        return transpose(self, order)

    def swapaxes(self, axis1: int, axis2: int) -> CodistributedArray:
        """Two axes exchanged (numpy's ``ndarray.swapaxes``): no communication."""
        return cast(CodistributedArray, np.swapaxes(self, axis1, axis2))

    @property
    def mT(self) -> CodistributedArray:
        """The last two axes exchanged (numpy's ``ndarray.mT``, a stack of matrices each
        transposed): no communication."""
        if self.ndim < 2:
            raise error(SpmdValueError, "CodistributedArray.mT", f"matrix transpose with "
                        f"ndim < 2 is undefined (the array has {self.ndim})")
        return self.swapaxes(-2, -1)

    def conj(self) -> Any:
        """The complex conjugate (no communication): ``D.conj().T`` is MATLAB's ``D'``. Of
        real values, a copy in their dtype, as numpy's ``ndarray.conj`` keeps it (the
        ufunc ``np.conjugate`` makes bools int8; MATLAB's ``mask'`` is logical)."""
        if LOCAL[self.family].dtype(self._local).kind != "c":
            return self.copy()
        return np.conjugate(self)

    conjugate = conj

    @property
    def real(self) -> CodistributedArray:
        """The real part (no communication)."""
        return np.real(self)

    @property
    def imag(self) -> CodistributedArray:
        """The imaginary part (no communication)."""
        return np.imag(self)

    def round(self, decimals: int = 0) -> CodistributedArray:
        """Rounded to ``decimals`` places, halves to even as numpy (no communication)."""
        return cast(CodistributedArray, np.round(self, decimals))

    def clip(self, min: Any = None, max: Any = None) -> CodistributedArray:
        """Limited to ``[min, max]`` (no communication)."""
        return cast(CodistributedArray, np.clip(self, min, max))

    def fill(self, value: Any) -> None:
        """Set every element to ``value``, in place (no communication)."""
        call = "CodistributedArray.fill"
        self._check_scope(call)
        try:
            self._local[...] = value
        except Exception as exc:  # (the same value everywhere: alike; numpy's overflow
            # of an int is an OverflowError, torch's a RuntimeError)
            raise error(SpmdTypeError if isinstance(exc, TypeError) else SpmdValueError,
                        call, f"cannot fill {self.family} parts of "
                        f"{_dtype_name(self.dtype)} with {value!r}: {exc}") from exc

    def copy(self) -> CodistributedArray:
        """A copy with the same distribution (no communication)."""
        return self._new(LOCAL[self.family].copy(self._local), self._codist)

    def astype(self, dtype: Any) -> CodistributedArray:
        """The array converted to ``dtype`` (a numpy dtype, or a torch dtype for torch
        parts; one small agreement that every worker asks for the same dtype)."""
        from ._numpy import _same_arguments

        _same_arguments(self, None, (), {"dtype": dtype}, call=f"{type(self).__name__}.astype")
        try:
            local = LOCAL[self.family].astype(self._local, dtype)
        except TypeError as exc:
            raise error(SpmdTypeError, f"{type(self).__name__}.astype", f"cannot convert "
                        f"{self.family} parts of {_dtype_name(self.dtype)} to {dtype!r}: "
                        f"{exc}") from exc
        return self._new(part(f"{type(self).__name__}.astype", local), self._codist)

    def sum(self, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Any:
        return np.sum(self, axis=axis, dtype=dtype, keepdims=keepdims)

    def prod(self, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Any:
        return np.prod(self, axis=axis, dtype=dtype, keepdims=keepdims)

    def mean(self, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Any:
        return np.mean(self, axis=axis, dtype=dtype, keepdims=keepdims)

    def max(self, axis: Any = None, keepdims: bool = False) -> Any:
        return np.max(self, axis=axis, keepdims=keepdims)

    def min(self, axis: Any = None, keepdims: bool = False) -> Any:
        return np.min(self, axis=axis, keepdims=keepdims)

    def any(self, axis: Any = None, keepdims: bool = False) -> Any:
        return np.any(self, axis=axis, keepdims=keepdims)

    def all(self, axis: Any = None, keepdims: bool = False) -> Any:
        return np.all(self, axis=axis, keepdims=keepdims)

    def std(self, axis: Any = None, ddof: int = 0, keepdims: bool = False) -> Any:
        return np.std(self, axis=axis, ddof=ddof, keepdims=keepdims)

    def var(self, axis: Any = None, ddof: int = 0, keepdims: bool = False) -> Any:
        return np.var(self, axis=axis, ddof=ddof, keepdims=keepdims)

    def cumsum(self, axis: Any = None, dtype: Any = None) -> Any:
        """numpy's ``cumsum`` (collective along the distribution axis)."""
        return np.cumsum(self, axis=axis, dtype=dtype)

    def cumprod(self, axis: Any = None, dtype: Any = None) -> Any:
        """numpy's ``cumprod`` (collective along the distribution axis)."""
        return np.cumprod(self, axis=axis, dtype=dtype)

    def dot(self, other: Any) -> Any:
        return np.dot(self, other)

    def sort(self, axis: int = -1, kind: Any = None) -> None:
        """Sorted in place along ``axis``, as numpy's ``ndarray.sort`` (collective along
        the distribution axis: see ``numpy.sort`` on a codistributed array)."""
        done = cast(CodistributedArray, np.sort(self, axis=axis, kind=kind))
        self._local[...] = done.redistribute(self._codist)._local

    def argsort(self, axis: int = -1, kind: Any = None) -> Any:
        """numpy's ``argsort`` (collective along the distribution axis)."""
        return np.argsort(self, axis=axis, kind=kind)

    def nonzero(self) -> Any:
        """numpy's ``nonzero``: codistributed index vectors (collective)."""
        return np.nonzero(self)

    def diagonal(self, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Any:
        """numpy's ``diagonal`` of a 2-D array (no communication)."""
        return np.diagonal(self, offset, axis1, axis2)

    def trace(self, offset: int = 0) -> Any:
        """numpy's ``trace`` of a 2-D array (collective)."""
        return np.trace(self, offset)

    def squeeze(self, axis: Any = None) -> Any:
        """numpy's ``squeeze`` (collective only when the distribution axis goes)."""
        return np.squeeze(self, axis)

    def item(self) -> Any:
        """The one element of an array of one element, as a Python number (collective:
        its holder broadcasts it)."""
        if self.size != 1:
            raise error(SpmdValueError, f"{type(self).__name__}.item", f"can only convert "
                        f"an array of size 1 to a Python scalar (shape {self.shape})")
        value = self[(0,) * self.ndim]
        return value.item() if hasattr(value, "item") else value

    def tolist(self) -> Any:
        """The global array as nested Python lists, on every worker (collective: a
        gather)."""
        return self.gather().tolist()

    def take(self, indices: Any, axis: Any = None) -> Any:
        """numpy's ``take`` (see ``numpy.take`` on a codistributed array; collective)."""
        return np.take(self, indices, axis=axis)

    def repeat(self, repeats: Any, axis: Any = None) -> Any:
        """numpy's ``repeat`` (see ``numpy.repeat`` on a codistributed array;
        collective)."""
        return np.repeat(self, repeats, axis=axis)

    def argmax(self, axis: Any = None, keepdims: bool = False) -> Any:
        """numpy's ``argmax`` of the global array: see ``numpy.argmax`` on a
        codistributed array (collective along the distribution axis or over all)."""
        return np.argmax(self, axis=axis, keepdims=keepdims)

    def argmin(self, axis: Any = None, keepdims: bool = False) -> Any:
        """numpy's ``argmin`` of the global array, as ``argmax``."""
        return np.argmin(self, axis=axis, keepdims=keepdims)

    def reshape(self, *shape: Any, order: str = "C") -> CodistributedArray:
        """The global array in another shape, read in numpy's ``order`` ("C" or "F"),
        split by the default distribution of the new shape (the class's default axis,
        the default partition). Collective: each element moves once, in one all-to-all;
        always a new array."""
        from ._numpy import reshaped

        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = shape[0]
        return reshaped(f"{type(self).__name__}.reshape", self, shape, order)

    def ravel(self, order: str = "C") -> CodistributedArray:
        """The global array as a vector, in numpy's ``order``, split by the default
        partition. Collective, as ``reshape``; always a new array."""
        from ._numpy import reshaped

        return reshaped(f"{type(self).__name__}.ravel", self, (-1,), order)

    def flatten(self, order: str = "C") -> CodistributedArray:
        """As ``ravel`` (always a copy)."""
        from ._numpy import reshaped

        return reshaped(f"{type(self).__name__}.flatten", self, (-1,), order)


def _codist_key(codist):
    return None if codist is None else (codist.axis, codist.partition, codist.shape)


@functools.lru_cache(maxsize=None)
def _dtype_name(dtype):
    return str(dtype).replace("torch.", "")


def part(call, local):
    """``local``, a result computed on this worker's local part, if it can be a local part;
    else SpmdTypeError. torch makes tensors of dtypes numpy has none for (complex32 from
    ``1j + D`` of float16 parts, float8 from ``astype``), which no collective can move:
    refused here, where the result is made (the parts share their dtype, so every worker
    refuses alike), not by a later ``gather`` or reduction."""
    if type(local) is np.ndarray or local_family(local) is not None:
        return local
    raise error(SpmdTypeError, call, f"the result's local parts would be "
                f"{type(local).__name__}s of {_dtype_name(getattr(local, 'dtype', '?'))}, "
                f"which numpy has no dtype for, so they cannot be moved between workers; "
                f"convert the operands first (say, to complex64 or float32)")


def is_codistributed(x: Any) -> bool:
    return isinstance(x, CodistributedArray)


Local = Union[np.ndarray, Any]


def _workers(n: int) -> str:
    return "1 worker" if n == 1 else f"{n} workers"
