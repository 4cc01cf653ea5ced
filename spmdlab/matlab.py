"""MATLAB's names, with MATLAB's argument conventions, for line-by-line ports.

    from spmdlab.matlab import *
    total = spmdPlus(spmdIndex())          # total = spmdPlus(spmdIndex);
    row = spmdCat(spmdIndex())             # row = spmdCat(spmdIndex);   -> [1 2 ... N]
    ok = spmdReduce("and", has_data)       # ok = spmdReduce(@and, hasdata(mbq));

Where MATLAB and Python differ, these names follow MATLAB (the snake_case API keeps
Python's and numpy's rules):

- ``spmdCat`` takes MATLAB's 1-based ``dim`` (default 2; a 1-D array is a row vector, a
  scalar is 1x1);
- worker numbers come as MATLAB gives them: an integral float (``2.0``) is worker 2,
  ``[]`` is "none" (``labSendReceive([], src, x)``), ``'any'`` is accepted where MATLAB
  accepts it, and ``labSend(x, 2:numlabs)`` with one worker sends nothing;
- ``spmdPlus``/``gplus`` (and ``spmdReduce("plus")``, ``spmdReduce("times")``) saturate
  integer sums at ``intmax``/``intmin`` instead of wrapping, and count logical values as
  doubles; ``spmdReduce("max")``/``"min"`` ignore NaN, compare complex values by
  magnitude, then angle, and take MATLAB's class of the result, and
  ``"and"``/``"or"``/``"xor"`` are logical on any numbers, as MATLAB's;
- ``Composite`` indices may be integral floats (``x{2.0}``) or arrays of worker numbers;
- reduction functions may be given by MATLAB name, with or without ``@`` (``"plus"``,
  ``"times"``, ``"max"``, ``"min"``, ``"and"``, ``"or"``, ``"xor"``, ``"bitand"``,
  ``"bitor"``, ``"bitxor"``, ``"vertcat"``, ``"horzcat"``, ``("cat", dim)``) as well as
  by Python function;
- codistributed arrays (``codistributed``, ``codistributor1d``, ``getLocalPart``,
  ``globalIndices``, ``gather``, ``redistribute``, ``drange``, ``distributed``) take
  1-based dimensions, distribute along the last non-singleton dimension by default, and
  ``zeros``, ``ones``, ``eye``, ``rand``, ``randn`` and ``randi`` are MATLAB's
  (``zeros(3)`` is 3x3; ``zeros(n, "codistributed")`` is codistributed); sizes drop
  trailing singletons past the second (``ones(2, 3, 1)`` is 2x3) and ``size``,
  ``ndims``, ``numel``, ``length``, ``isempty`` and the column-major ``reshape`` are
  MATLAB's; ``max`` and ``min`` are MATLAB's too, imported
  by name (``from spmdlab.matlab import max, min``; ``import *`` keeps Python's).
  Subscripts stay numpy's (0-based).
"""

from __future__ import annotations

import functools
import operator
import re
from typing import Any, Callable, Optional, Sequence, Tuple, TypeVar, Union

import numpy as np

from . import _backslash, _checks, _world, collectives, composite, p2p, region
from ._backends import classify
from .darray._codistributor import error as _darray_error
from .darray._matlab import (codistributed, codistributor, codistributor1d, distributed,
                             drange, eye, gather, getCodistributor, getLocalPart,
                             globalIndices, iscodistributed, isdistributed, isempty,
                             isreplicated, length, ndims, numel,
                             ones, rand, randi, randn, redistribute, reshape, size,
                             sortrows, zeros)
from .darray._matlab import _on_client
from .darray._shaping import _gathered as _darray_gathered, _shaped as _darray_shaped
from .darray._stencil import conv2, filter2
from .errors import SpmdError, SpmdMismatchError, SpmdTypeError, SpmdValueError

__all__ = [
    "codistributed", "codistributor", "codistributor1d", "Composite", "conv2", "delete",
    "distributed", "drange", "eye", "filter2", "gather", "gcat", "gcp", "getCodistributor",
    "getLocalPart", "globalIndices", "gop", "gplus", "iscodistributed", "isdistributed", "isempty",
    "isreplicated", "labBarrier", "labBroadcast", "labindex", "labProbe", "labProbeStatus",
    "labReceive", "labReceiveStatus", "labSend", "labSendReceive", "length", "mldivide",
    "mpiprofile", "ndims", "numel", "numlabs", "ones", "parpool", "rand", "randi", "randn",
    "redistribute", "reshape", "size", "sortrows", "spmd", "spmdBarrier", "spmdBroadcast",
    "spmdCat", "spmdIndex", "spmdPlus", "spmdProbe", "spmdProbeStatus", "spmdReceive",
    "spmdReceiveStatus", "spmdReduce", "spmdSend", "spmdSendReceive", "spmdSize", "zeros"
]

# A worker number as MATLAB code gives it: an int, an integral float (every MATLAB number
# is a double), or [] / None for "none".
Worker = Union[int, float, np.integer, np.floating, Sequence[Any], np.ndarray, None]
# A reduction: a Python function, a MATLAB name ("plus", "@max"), or ("cat", dim)
Reduction = Union[Callable[[Any, Any], Any], str, Tuple[str, Any]]

# MATLAB's max and min ignore NaN (numpy's fmax, fmin); and, or and xor are logical on
# any numbers (and(1, 2) is true), never bitwise
_FUNCTIONS: dict = {"plus": operator.add, "times": operator.mul, "max": np.fmax,
              "min": np.fmin, "and": np.logical_and, "or": np.logical_or,
              "xor": np.logical_xor,
              "bitand": np.bitwise_and, "bitor": np.bitwise_or, "bitxor": np.bitwise_xor}
_LOGICAL = (np.logical_and, np.logical_or, np.logical_xor)
_BITWISE = (np.bitwise_and, np.bitwise_or, np.bitwise_xor)
_PYTHON_NAMES = {max: np.fmax, min: np.fmin}
_BUILTIN = type(max)


def _any(value: Any) -> Any:
    """MATLAB's 'any' (and []) as spmdlab's None; a worker number as MATLAB gives it."""
    if isinstance(value, str) and value.lower() == "any":
        return None
    return _worker(value)


def _worker(value: Any) -> Any:
    """A worker number as MATLAB code passes it: every MATLAB number is a double, so an
    integral float (``2.0``, from ``floor`` or an array) is the worker 2; ``[]`` is
    MATLAB's "none" (None here). Anything else is left to spmdlab's checks."""
    kind = type(value)
    if kind is int or value is None or kind is bool:  # the common cases, cheaply
        return value
    if (kind is list or kind is tuple) and not value:  # MATLAB's []
        return None
    if isinstance(value, np.bool_):
        return value
    if isinstance(value, (list, tuple, np.ndarray)) and np.size(value) == 0:
        return None
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return int(value)
    if isinstance(value, np.ndarray) and value.size == 1 and value.dtype.kind in "fiu":
        return _worker(value.reshape(()).item())
    return value


def _workers(value: Any) -> Any:
    """``labSend``'s destination: one worker, or a list / range / array of them
    (``2:numlabs``); an empty one sends nothing (returns []). A 0-d array is one."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return _worker(value.item())
    if isinstance(value, (list, tuple, range, np.ndarray)):
        return [_worker(v) for v in np.asarray(value).reshape(-1).tolist()] \
            if np.size(value) else []
    return _worker(value)


F = TypeVar("F", bound=Callable[..., Any])
# The calls whose errors a MATLAB function reports as its own: a MATLAB user called
# spmdSend or gop, not spmd_send or spmd_reduce (every worker raises the same text)
_RENAMED = {"spmd_plus", "spmd_reduce", "spmd_cat", "spmd_broadcast", "spmd_barrier",
            "spmd_send", "spmd_receive", "spmd_send_receive", "spmd_probe", "spmdPlus",
            "spmdReduce", "spmdCat", "spmdBroadcast"}
# ... and where the other workers quote the failed workers' messages ("failed on another
# worker: worker 1: spmd_plus (worker 1 of 3): ...; worker 2: spmd_plus (worker 2 of 3):
# ..." from a gplus)
_QUOTED = re.compile(r"([:;] worker \d+: )(?:%s) \(" % "|".join(sorted(_RENAMED)))
_WAITING = re.compile(r"^([^()]*), waiting in (?:%s)\)" % "|".join(sorted(_RENAMED)))


def _as_called(name: str) -> Callable[[F], F]:
    """Errors of the decorated MATLAB function name it (``name``), not the spmdlab call
    it makes."""
    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def called(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except SpmdError as exc:
                text = exc.args[0] if exc.args and isinstance(exc.args[0], str) else ""
                head, sep, rest = text.partition(" (")
                if sep and head in _RENAMED:
                    # the failed worker's own message, quoted by the others, names it too
                    # (and "waiting in spmd_cat", the call inside this one, is this one)
                    rest = _WAITING.sub(r"\1)", _QUOTED.sub(
                        lambda m: m.group(1) + name + " (", rest), count=1)
                    exc.args = (name + sep + rest,) + exc.args[1:]
                raise
        # its code named ``name`` too: a message that names the outermost spmdlab
        # frame's code (``_world._called``: a collective on a pool's client) names it
        called.__code__ = called.__code__.replace(co_name=name)  # type: ignore[attr-defined]
        return called  # type: ignore[return-value]
    return decorate


_CATS = {"vertcat": 1, "horzcat": 2}


def _function(fcn: Any) -> Any:
    if isinstance(fcn, str):
        name = fcn.strip().lstrip("@")
        if name not in _FUNCTIONS:  # (raised on every worker: the others may have a known one)
            _checks.fail_together("spmdReduce", SpmdValueError(
                f"spmdReduce (worker {spmdIndex()} of {spmdSize()}): unknown MATLAB function "
                f"name {fcn!r}; use one of {', '.join(sorted(list(_FUNCTIONS) + list(_CATS)))}"
                f" (with or without '@'), ('cat', dim) or a Python function"
                + (" (cat takes its dim: ('cat', dim))" if name == "cat" else "")))
        return _FUNCTIONS[name]
    # Python's max and min, where a port writes MATLAB's @max and @min: MATLAB's rules
    # (element-wise, NaN ignored), not Python's (the first of two NaN-compared values)
    return _PYTHON_NAMES.get(fcn, fcn) if type(fcn) is _BUILTIN else fcn


def _concatenation(fcn: Any) -> Any:
    """The dim of a concatenating reduction (``"vertcat"``, ``"@horzcat"``,
    ``("cat", dim)``), or None."""
    if isinstance(fcn, str):
        return _CATS.get(fcn.strip().lstrip("@"))
    if isinstance(fcn, tuple) and len(fcn) == 2 and isinstance(fcn[0], str) and \
            fcn[0].strip().lstrip("@") == "cat":
        return fcn[1]
    return None


def _saturating(name, combine):
    """MATLAB's integer ``plus``, ``times``, ``max`` or ``min`` as a fold over the
    workers: each step, in worker order, is held at ``intmax``/``intmin`` of the class
    instead of wrapping (max and min ignore NaN, as MATLAB's, beside integers too).
    MATLAB combines integers only of the same class, and this is element-wise on values
    of one size (as ``spmd_plus``), so a worker whose value differs from worker 1's in
    class or size raises (on every worker: ``spmd_reduce`` agrees on the outcome). A
    double (a Python or numpy float, a Python int, a logical) beside an integer class
    takes that class, as MATLAB's ``int32(5) + 0`` is an int32: converted as MATLAB
    converts (rounded, held at the class's limits, NaN as 0); two doubles add as
    doubles, a single beside them as a single (``_integer_mended``: workers that added
    nothing, beside integer counts). Structs and cells (dicts, lists, tuples) of one
    structure on every worker are folded leaf by leaf."""
    worker = [1]

    def leaf(a, b):
        array = isinstance(a, np.ndarray)  # a 0-d array stays one, a numpy scalar too
        a, b = np.asarray(a), np.asarray(b)
        integers = [x.dtype for x in (a, b) if x.dtype.kind in "iu"]
        if name in ("max", "min") and len(integers) == 1 and a.shape == b.shape:
            # MATLAB's max and min ignore NaN: the other value, not int8(NaN), which is 0
            # (the double converted first: the integer through float64 would round an
            # int64 past 2^53, gop(@min) of int64(2^62 + 1) beside NaN gave 2^62)
            from .darray._extrema import _to_class

            nan = lambda x: np.isnan(x) if x.dtype.kind in "fc" else False  # noqa: E731
            if a.dtype.kind in "iu":
                b = np.where(nan(b), a, _to_class(b, a.dtype))
            else:
                a = np.where(nan(a), b, _to_class(a, b.dtype))
        if a.shape == b.shape and len(integers) < 2:
            if not integers:  # doubles, so far (a logical counts as a double)
                kinds = [x.dtype if x.dtype.kind in "fc" else np.dtype(np.float64)
                         for x in (a, b)]
                single = any(d.itemsize == (4 if d.kind == "f" else 8) for d in kinds)
                target = np.result_type(*kinds)
                if single:  # MATLAB's single + double is a single
                    target = np.dtype(np.complex64 if target.kind == "c" else np.float32)
                out = np.asarray(combine(a.astype(target), b.astype(target)))
                return out[()] if out.ndim == 0 and not array else out
            from .darray._extrema import _to_class

            a, b = _to_class(a, integers[0]), _to_class(b, integers[0])
        if a.dtype != b.dtype or a.shape != b.shape:
            raise SpmdMismatchError(
                f"MATLAB's integer {name} of the workers' values: worker {worker[0]} "
                f"passed {b.dtype} of size {b.shape} where worker 1 passed {a.dtype} of "
                f"size {a.shape} (integers combine only with the same class, and every "
                f"worker must pass the same size)")
        info = np.iinfo(a.dtype)
        wide = np.asarray(combine(a.astype(object), b.astype(object)), dtype=object)
        # exact, whatever the width; np.clip of one Python int past int64 gives an int
        out = np.array(np.clip(wide, info.min, info.max), dtype=object).astype(a.dtype)
        return out[()] if out.ndim == 0 and not array else out

    def walk(a, b):
        if type(a) is dict and type(b) is dict and list(a) == list(b):
            return {key: walk(a[key], b[key]) for key in a}
        if type(a) in (list, tuple) and type(b) is type(a) and len(a) == len(b):
            return type(a)(walk(x, y) for x, y in zip(a, b))
        if any(type(x) in (dict, list, tuple) for x in (a, b)):
            raise SpmdMismatchError(
                f"MATLAB's integer {name} of the workers' values: worker {worker[0]} "
                f"passed a structure (dict keys, list lengths) other than worker 1's")
        return leaf(a, b)

    def fold(a, b):
        worker[0] += 1
        return walk(a, b)

    fold.__name__ = fold.__qualname__ = name
    return fold


def _extremum(pick):
    """MATLAB's ``max`` or ``min`` of two values (``pick``: ``numpy.fmax`` or ``fmin``):
    NaN is ignored, and complex values compare by magnitude, then phase angle (numpy's
    order them by real part, then imaginary part: ``max(3, 1+5i)`` would be 3)."""
    larger = pick is np.fmax

    def extremum(a, b):
        if not (np.iscomplexobj(a) or np.iscomplexobj(b)):
            return pick(a, b)
        x, y = np.asarray(a), np.asarray(b)
        mx, my, ax, ay = np.abs(x), np.abs(y), np.angle(x), np.angle(y)
        other = ((my > mx) | ((my == mx) & (ay > ax))) if larger else \
            ((my < mx) | ((my == mx) & (ay < ax)))
        other = (other & ~np.isnan(y)) | np.isnan(x)
        out = np.where(other, y, x).astype(np.result_type(x, y))
        return out[()] if out.ndim == 0 else out

    extremum.__name__ = extremum.__qualname__ = pick.__name__
    return extremum


def _has_complex(X):
    """Whether a struct or cell (dict, list, tuple) holds a complex number or array."""
    if type(X) is dict:
        return any(_has_complex(v) for v in X.values())
    if type(X) in (list, tuple):
        return any(_has_complex(v) for v in X)
    leaf = classify(X)
    return leaf is not None and leaf.dtype is not None and leaf.dtype.kind == "c"


def _flags(X):
    """A double (a float, a numpy floating array) of whole numbers from 0 to flintmax, as
    MATLAB's ``bitand``, ``bitor`` and ``bitxor`` take them, as uint64 (else None: left
    to numpy, which refuses floats, on every worker)."""
    if type(X) is float or isinstance(X, np.floating) or (
            isinstance(X, np.ndarray) and X.dtype.kind == "f"):
        value = np.asarray(X)
        if np.all((value >= 0) & (value <= 2.0 ** 53) & (value == np.floor(value))):
            out = value.astype(np.uint64)
            return out if isinstance(X, np.ndarray) else out[()]
    return None


def _bits(function, X, destination):
    """``spmd_reduce`` of a bit function, with whole doubles as MATLAB's bit functions
    take them (in their class again after)."""
    flags = _flags(X)
    if flags is None:
        return collectives.spmd_reduce(function, X, destination)
    out = collectives.spmd_reduce(function, flags, destination)
    if out is None:
        return None
    return out.astype(X.dtype) if isinstance(X, np.ndarray) else type(X)(out)


def _has_integers(X):
    """Whether a struct or cell (dict, list, tuple) holds a numpy integer array or scalar."""
    if type(X) is dict:
        return any(_has_integers(v) for v in X.values())
    if type(X) in (list, tuple):
        return any(_has_integers(v) for v in X)
    return _is_integer(X)


def _counts(X, python=False):
    """``X`` with its numpy logical values as doubles (and, with ``python``, its Python
    ints and bools), inside dicts, lists and tuples too: MATLAB's ``plus`` counts
    logicals as doubles."""
    if type(X) is dict:
        return {k: _counts(v, python) for k, v in X.items()}
    if type(X) in (list, tuple):
        return type(X)(_counts(v, python) for v in X)
    if (python and type(X) in (int, bool)) or \
            (isinstance(X, (np.ndarray, np.bool_)) and _is_logical(X)):
        value = np.asarray(X, dtype=np.float64)
        return value if isinstance(X, np.ndarray) else value[()]
    return X


def _doubles(X):
    """``X`` with its Python ints and bools as floats, inside dicts, lists and tuples too:
    every MATLAB number is a double, so ``s = 0`` ported from MATLAB is the double 0."""
    if type(X) in (int, bool):  # (true is 1 in a MATLAB concatenation beside doubles)
        return float(X)
    if type(X) is dict:
        return {k: _doubles(v) for k, v in X.items()}
    if type(X) in (list, tuple):
        return type(X)(_doubles(v) for v in X)
    return X


def _as_doubles(combine, X):
    """``combine(X)``; where the workers' values differ only in type (a Python int on a
    worker that added nothing, ``s = 0``, beside floats elsewhere), MATLAB's doubles:
    every worker is here (a mismatch is raised on every worker) and tries again with
    its Python ints and bools as floats. The mismatch stands where that does not mend
    it."""
    try:
        return combine(X)
    except SpmdMismatchError as mismatch:
        if not mismatch.differ or not set(mismatch.differ) <= {"type", "dtype"}:
            raise
        try:
            return combine(_doubles(X))
        except SpmdMismatchError:
            raise mismatch from None


def _is_integer(X):
    leaf = classify(X)
    return leaf is not None and leaf.family in ("numpy", "np-scalar") and \
        leaf.dtype.kind in "iu"


def _is_logical(X):
    leaf = classify(X)
    return leaf is not None and leaf.dtype.kind == "b"


def spmdIndex() -> int:
    """``spmdIndex``: this worker's 1-based number.

    Examples
    --------
    >>> spmdIndex(), labindex()
    (1, 1)

    MATLAB
    ------
    ``spmdIndex``, ``labindex``
    """
    return collectives.spmd_index()


def spmdSize() -> int:
    """``spmdSize``: the number of workers.

    Examples
    --------
    >>> spmdSize(), numlabs()
    (1, 1)

    MATLAB
    ------
    ``spmdSize``, ``numlabs``
    """
    return collectives.spmd_size()


@_as_called("spmdPlus")
def spmdPlus(X: Any, destination: Worker = None) -> Any:
    """``spmdPlus(X)``, ``spmdPlus(X, destination)``, with MATLAB's arithmetic:
    integer types saturate at ``intmax``/``intmin`` instead of wrapping, and logical
    values sum to a double count (``spmdPlus(true)`` is 2 at two workers), and a Python
    int beside floats on other workers is a double (``s = 0`` on a worker that added
    nothing); a double beside an integer class elsewhere takes that class (``hits = 0``
    beside ``np.sum(mask)``'s int64), and the fields of a struct or cell (dict, list)
    follow the same rules. The pythonic ``spmd_plus`` keeps numpy's rules.

    Parameters
    ----------
    X
        This worker's value; integer types saturate, logical values count as doubles.
    destination
        A worker number as MATLAB gives it (``2``, ``2.0``); ``[]`` or None: every worker.

    Examples
    --------
    >>> spmdPlus(np.array([True, False]))      # a logical sum is a double count
    array([1., 0.])
    >>> spmdPlus(np.int8(100))                 # at 2 workers: 127 (intmax), not -56
    np.int8(100)

    MATLAB
    ------
    ``spmdPlus(X)``, ``spmdPlus(X, destination)``
    """
    dest = _worker(destination)
    if type(X) in (dict, list, tuple):  # a struct or cell: its logicals count, its ints
        X = _counts(X)                  # saturate, as the same values alone
    try:
        if _has_integers(X):
            return collectives.spmd_reduce(_saturating("plus", operator.add), X, dest)
        if _is_logical(X):
            return collectives.spmd_plus(np.asarray(X, dtype=np.float64)
                                         if not isinstance(X, (bool, np.bool_)) else
                                         float(X), dest)
        return _as_doubles(lambda value: collectives.spmd_plus(value, dest), X)
    except SpmdMismatchError as mismatch:
        return _integer_mended(mismatch, X, dest, "plus", operator.add, "spmd_plus")


def _integer_mended(mismatch, X, destination, name, combine, plain):
    """MATLAB's ``plus``, ``times``, ``max`` or ``min`` (``name``, ``combine``) of an
    integer class on some workers and doubles or logicals on the others (``hits = 0`` on
    a worker that counted nothing, ``np.sum(mask)``, an int64, on the others): the two
    took different calls (the integer fold, and ``plain``: the call or the function the
    others made), and the mismatch (raised on every worker, whose calls it shows) says
    that every worker is in this function. Tried again as MATLAB combines them, every worker in the
    integer fold: the integer class wins, the doubles converted to it; so do a single
    beside doubles (a single) and complex values beside real ones. The mismatch stands
    for any other call."""
    fields = mismatch.fields

    def ours(f):
        if f.get("call") == "spmd_reduce" and f"{name} at matlab.py:" in str(f.get("fcn")):
            return True  # the integer fold (``_saturating``)
        return f.get("call") == plain or (f.get("call") == "spmd_reduce" and
                                           str(f.get("fcn")).strip("'\"") in names)

    # (the maximum of logicals is their or, as numpy's: max(true, 2) took that path)
    names = {plain, {"fmax": "lor", "fmin": "land"}.get(plain, plain)}
    # (the two paths; or one path where classes differ: a single beside doubles, complex
    # beside real, which MATLAB adds in the class of the result)
    paths = mismatch.differ in (("call",), ("fcn",)) or \
        (mismatch.differ and set(mismatch.differ) <= {"type", "dtype"}) or \
        (name in ("max", "min") and set(mismatch.differ) <= {"fcn", "type", "dtype"})
    if not paths or not fields or not all(ours(f) for f in fields):
        raise mismatch
    # (integer classes that differ too raise here, on every worker, naming them)
    return collectives.spmd_reduce(_saturating(name, combine), _counts(X, python=True),
                                   destination)


@_as_called("spmdReduce")
def spmdReduce(fcn: Reduction, X: Any, destination: Worker = None) -> Any:
    """``spmdReduce(fcn, X)``, ``spmdReduce(fcn, X, destination)``.

    ``fcn`` may be a MATLAB name, with or without ``@``: ``"plus"`` (saturating on
    integers, a count on logicals, as ``spmdPlus``), ``"times"``, ``"max"``, ``"min"``,
    ``"and"``, ``"or"``, ``"xor"``, ``"bitand"``, ``"bitor"``, ``"bitxor"`` (on integers,
    or doubles of whole numbers, as MATLAB's: ``bitor(1, 2)`` is 3),
    ``"vertcat"``, ``"horzcat"``, or ``("cat", dim)``; or a Python function (Python's
    own ``max`` and ``min``, as a port of ``@max`` writes them, fold as MATLAB's: NaN
    is ignored).

    Parameters
    ----------
    fcn
        A MATLAB name (``"plus"``, ``"@max"``, ``"vertcat"``, ``("cat", dim)``, ...) or a
        Python function of two values.
    X
        This worker's value.
    destination
        A worker number as MATLAB gives it; ``[]`` or None: every worker.

    Examples
    --------
    >>> spmdReduce("@and", True)
    True
    >>> spmdReduce("max", np.array([1, 5]))
    array([1, 5])
    >>> spmdReduce("vertcat", np.array([1, 2]))   # rows stacked: N x 2
    array([[1, 2]])

    MATLAB
    ------
    ``spmdReduce(@and, X)``, ``spmdReduce(@vertcat, X)``, ``spmdReduce(@fcn, X, destination)``
    """
    dest = _worker(destination)
    dim = _concatenation(fcn)
    if dim is not None:
        return spmdCat(X, dim, dest)
    function = _function(fcn)
    if function is operator.add:
        return spmdPlus(X, dest)
    if function is operator.mul:
        # MATLAB's true .* true is the double 1, as spmdPlus counts logicals: a product of
        # logicals was numpy's logical and (a bool array), of Python bools an int
        if _is_logical(X):
            X = float(X) if isinstance(X, (bool, np.bool_)) else np.asarray(X, np.float64)
        try:
            if _is_integer(X):  # saturating, as MATLAB's times
                return collectives.spmd_reduce(_saturating("times", operator.mul), X, dest)
            return _as_doubles(lambda value: collectives.spmd_reduce(function, value, dest),
                               X)
        except SpmdMismatchError as mismatch:
            return _integer_mended(mismatch, X, dest, "times", operator.mul, "prod")
    if function in _LOGICAL and not _is_logical(X):  # and(2, 3) is true in MATLAB
        leaf = classify(X)
        if leaf is not None and leaf.dtype is not None and leaf.dtype.kind in "iufc":
            X = X != 0
    if function in _BITWISE:  # bitor(1, 2) is 3: MATLAB's bit functions take doubles
        return _as_doubles(lambda value: _bits(function, value, dest), X)
    if function not in (np.fmax, np.fmin):
        return _as_doubles(lambda value: collectives.spmd_reduce(function, value, dest), X)
    name, pick = function.__name__[1:], _extremum(function)
    try:
        if _has_complex(X):  # compared by magnitude, then angle: not numpy's fmax
            return collectives.spmd_reduce(_saturating(name, pick), _counts(X, python=True),
                                           dest)
        return _as_doubles(lambda value: collectives.spmd_reduce(function, value, dest), X)
    except SpmdMismatchError as mismatch:
        # MATLAB's max(int8(5), 300) is int8(127), max(single(1), -Inf) a single: the
        # class of the result, as plus and times (a -Inf start on a worker without data)
        return _integer_mended(mismatch, X, dest, name, pick, function.__name__)


@_as_called("spmdCat")
def spmdCat(X: Any, dim: Worker = 2, destination: Worker = None) -> Any:
    """``spmdCat(X)``, ``spmdCat(X, dim)``, ``spmdCat(X, dim, destination)``.

    ``dim`` is 1-based and defaults to 2, as in MATLAB. Arrays are seen as MATLAB sees
    them: a scalar is 1x1 and a 1-D array a 1xk row, with trailing singleton dimensions
    added when ``dim`` exceeds the array's; a result that is a single row comes back 1-D.
    Empty parts (MATLAB's ``[]``: ``None`` or ``np.zeros((0, 0))``, on the workers that
    found nothing) are left out whatever their size, as MATLAB's ``cat`` leaves them out
    (``spmd_cat`` does not: numpy's ``concatenate`` does not). Structs (dicts) and other
    objects give a list with one entry per worker; lists (cells) are joined end to end,
    ``[]`` beside cells or structs is left out, and a list among other arrays is an error.

    Parameters
    ----------
    X
        This worker's value; a scalar is 1x1 and a 1-D array a 1xk row, as in MATLAB.
    dim
        The dimension to concatenate along, 1-based (default 2: side by side).
    destination
        A worker number as MATLAB gives it; ``[]`` or None: every worker.

    Examples
    --------
    >>> spmdCat(spmdIndex())            # 1 x N row
    array([1])
    >>> spmdCat(spmdIndex(), 1).shape   # N x 1 column
    (1, 1)
    >>> spmdCat(np.ones((2, 2)), 3).shape
    (2, 2, 1)

    MATLAB
    ------
    ``spmdCat(X)``, ``spmdCat(X, dim)``, ``spmdCat(X, dim, destination)``
    """
    d, dest = _worker(dim), _worker(destination)
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or not 1 <= d <= 64:
        _checks.fail_together("spmdCat", SpmdValueError(
            f"spmdCat (worker {spmdIndex()} of {spmdSize()}): 'dim' must be a positive int "
            f"up to 64, numpy's most dimensions (1-based, as in MATLAB; got {d!r})"))
    leaf = classify(X)
    if leaf is None:
        try:
            joined = collectives.spmd_cat(X, destination=dest)
            # [] on every worker is [] (None: what every worker passed), as MATLAB's
            return None if X is None and joined is not None and all(
                part is None for part in joined) else joined
        except SpmdMismatchError as mismatch:  # the others may try again: keep in step
            if X is not None:  # (raises where there is nothing to mend)
                return _cat_mended(mismatch, None, 0, 0, dest, X)[0]
            # None is MATLAB's [] (what spmdCat(X, dim, k) left on the other workers):
            # an empty part, shaped as the others' arrays, or left out of cells
            result, ndim = _cat_mended(mismatch, np.zeros((0, 0)), 2, d - 1, dest, None)
    else:
        ndim = len(leaf.shape)
        shape = (1,) * (2 - ndim) + tuple(leaf.shape) if ndim < 2 else tuple(leaf.shape)
        shape = shape + (1,) * (d - len(shape))
        value = X if leaf.family not in ("py-bool", "py-int", "py-float", "py-complex",
                                         "np-scalar") else np.asarray(X)
        try:
            # (a Python int or bool beside doubles elsewhere is a double, as in MATLAB)
            result = _as_doubles(lambda part: collectives.spmd_cat(
                (np.asarray(part) if type(part) in (int, bool, float) else part).reshape(
                    shape), axis=d - 1, destination=dest),
                X if type(X) in (int, bool) else value)
        except SpmdMismatchError as mismatch:
            result, ndim = _cat_mended(mismatch, value.reshape(shape), ndim, d - 1, dest,
                                       value)
    if result is None or ndim is None:  # (ndim None: cells or structs, beside [])
        return result
    if ndim < 2 and d == 2:  # a 1xM row, as MATLAB returns it, is a 1-D array here
        return result.reshape(-1)
    return result


def _cat_mended(mismatch, value, ndim, axis, destination, part):
    """A concatenation that failed on every worker (``mismatch``: every worker is here)
    tried again as MATLAB's ``cat``: its parts in MATLAB's class of the result
    (``_cat_class``), then without its empty parts (``_cat_without_empties``); (the
    result, the number of dimensions of the user's part: None for cells or structs).
    ``value``: this worker's part (None: no array, a list or a struct); ``part``: the
    part the user passed. The mismatch stands where that does not mend it."""
    target = _cat_class(mismatch, value)
    if target is None:
        return _cat_without_empties(mismatch, value, ndim, axis, destination, part)
    from .darray._extrema import _to_class

    value = _to_class(value, target)
    try:
        return collectives.spmd_cat(value, axis=axis, destination=destination), ndim
    except SpmdMismatchError as still:  # (empty parts too, or other shapes)
        if "call" in still.differ:
            raise mismatch from None
        return _cat_without_empties(mismatch, value, ndim, axis, destination, part)


def _cat_class(mismatch, value):
    """MATLAB's class of a concatenation of unlike classes, where the workers' parts
    differ in class (a mismatch raised on every worker, so every worker is here): the
    first integer class in worker order, else single, else double (a logical beside
    them); the class of an empty part has no say. None (no communication where the
    classes cannot differ) where MATLAB's rule does not apply: a part that is not a
    numpy array of logical, integer, floating or complex values, or classes that agree.
    A complex part makes the result complex (``[1i 2]`` is complex), of single where a
    part is single; beside an integer class (MATLAB's complex integers, which numpy
    lacks) the mismatch stands."""
    if not {"dtype", "type"} & set(mismatch.differ):
        return None
    usable = isinstance(value, np.ndarray) and value.dtype.kind in "biufc" and \
        value.dtype != np.float16
    code = ("" if value.size == 0 else value.dtype.str) if usable else "x"
    codes = collectives.spmd_cat([code])
    classes = [np.dtype(c) for c in codes if c and c != "x"]
    if "x" in codes or len(set(classes)) < 2:
        return None
    integers = [c for c in classes if c.kind in "iu"]
    single = any(c in (np.dtype(np.float32), np.dtype(np.complex64)) for c in classes)
    if any(c.kind == "c" for c in classes):
        return None if integers else np.dtype(np.complex64 if single else np.complex128)
    if integers:
        return integers[0]
    return np.dtype(np.float32) if single else np.dtype(np.float64)


def _cat_without_empties(mismatch, value, ndim, axis, destination, part):
    """MATLAB's ``cat`` leaves out empty operands (``[]`` on the workers that found
    nothing), whatever their size: a mismatch (raised on every worker, so every worker
    is here) is tried again with the empty workers' parts shaped as the first nonempty
    worker's, with none of its rows. (The result, and the number of dimensions the
    user gave, of that worker's part.) Beside cells (lists) or structs (dicts), ``[]``
    (None, a 0x0 array) is left out too: ``[{1}, [], {3}]`` is ``{1, 3}`` (the result, and
    None). The mismatch stands where that does not mend it."""
    if "call" in mismatch.differ:
        raise mismatch
    # 0: a nonempty array, 1: an empty one, 2: no array (never mended), 3: a list (a
    # cell), 4: MATLAB's [] (None, a 0x0 array), 5: a dict (a struct)
    code = (3 if type(part) is list else 5 if type(part) is dict else
            4 if part is None or (isinstance(part, np.ndarray) and part.shape == (0, 0)) else
            2 if value is None else int(value.size == 0))
    state = collectives.spmd_cat(np.array([code]))
    if ((state == 3) | (state == 5)).any():  # cells or structs: [] is left out of them
        if not (((state == 3) | (state == 4)).all() or ((state == 5) | (state == 4)).all()):
            raise mismatch
        try:
            return collectives.spmd_cat([] if code == 4 else [part] if code == 5 else part,
                                        destination=destination), None
        except SpmdMismatchError:  # the cells differ too: what the user passed
            raise mismatch from None
    empty = (state == 1) | (state == 4)
    if (state == 2).any() or empty.all() or not empty.any():
        raise mismatch
    first = int(np.argmin(empty)) + 1
    mine = None
    if spmdIndex() == first:
        none = tuple(slice(0, 0) if k == axis else slice(None) for k in range(value.ndim))
        mine = (value[none], ndim)
    like, ndim_like = collectives.spmd_broadcast(first, mine)
    if value.size == 0:
        value, ndim = like, ndim_like
    try:
        return collectives.spmd_cat(value, axis=axis, destination=destination), ndim
    except SpmdMismatchError:  # the nonempty parts differ too: what the user passed
        raise mismatch from None


class _Omitted:
    """``X`` left out of ``spmdBroadcast(source)``: MATLAB's form for the other workers."""

    def __repr__(self) -> str:
        return "<omitted>"


_OMITTED: Any = _Omitted()


@_as_called("spmdBroadcast")
def spmdBroadcast(source: Worker, X: Any = _OMITTED) -> Any:
    """``spmdBroadcast(source, X)`` on the source, ``spmdBroadcast(source)`` elsewhere.

    The source must pass ``X`` (``[]``, None, is a value): ``spmdBroadcast(source)`` on
    the source is an error, on every worker, as MATLAB's.

    Examples
    --------
    >>> spmdBroadcast(1, "from worker 1" if spmdIndex() == 1 else None)
    'from worker 1'
    >>> spmdBroadcast(1.0, 7)            # a worker number as a MATLAB double
    7

    MATLAB
    ------
    ``spmdBroadcast(source, X)``, ``spmdBroadcast(source)``
    """
    if X is _OMITTED:
        X = None
        worker = _worker(source)
        if type(worker) is int and worker == spmdIndex():
            _checks.fail_together("spmdBroadcast", SpmdValueError(
                f"spmdBroadcast (worker {spmdIndex()} of {spmdSize()}): no data to send: "
                f"the source, worker {worker}, must pass X (only the other workers leave "
                f"it out)"))
    return collectives.spmd_broadcast(_worker(source), X)


@_as_called("spmdBarrier")
def spmdBarrier() -> None:
    """``spmdBarrier``.

    Examples
    --------
    >>> spmdBarrier()

    MATLAB
    ------
    ``spmdBarrier``, ``labBarrier``
    """
    collectives.spmd_barrier()


@_as_called("spmdSend")
def spmdSend(X: Any, destination: Union[Worker, range], tag: Worker = 0) -> None:
    """``spmdSend(X, destination)``, ``spmdSend(X, destination, tag)``; ``destination``
    may be a list or range of workers (``2:numlabs``), and an empty one sends nothing.

    Examples
    --------
    >>> spmdSend(42, spmdIndex())
    >>> spmdReceive()
    42
    >>> spmdSend(1, range(2, spmdSize() + 1))   # labSend(x, 2:numlabs): none at 1 worker

    MATLAB
    ------
    ``spmdSend(X, destination)``, ``spmdSend(X, destination, tag)``, ``labSend``
    """
    dest = _workers(destination)
    # (not ``dest == []``: a numpy worker number compares element-wise, to an empty array)
    if dest is None or (type(dest) is list and not dest):
        return
    p2p.spmd_send(X, dest, _worker(tag))


@_as_called("spmdReceive")
def spmdReceive(source: Union[Worker, str] = None, tag: Union[Worker, str] = None, *,
                status: bool = False) -> Any:
    """``spmdReceive``, ``spmdReceive(source)``, ``spmdReceive('any', tag)``, ...

    MATLAB's ``[data, source, tag] = spmdReceive(...)`` is ``status=True``.

    Examples
    --------
    >>> spmdSend([1, 2, 3], 1.0, 4)
    >>> spmdReceive("any", 4)
    [1, 2, 3]

    MATLAB
    ------
    ``X = spmdReceive``, ``spmdReceive(source, tag)``, ``labReceive('any', tag)``
    """
    return p2p.spmd_receive(_any(source), _any(tag), status=status)


def spmdReceiveStatus(source: Union[Worker, str] = None,
                      tag: Union[Worker, str] = None) -> Tuple[Any, int, int]:
    """MATLAB's three-output form ``[data, source, tag] = spmdReceive(...)``:
    ``data, source, tag = spmdReceiveStatus(...)`` (Python cannot see how many outputs the
    caller unpacks, so the form has a name of its own; ``source`` is 1-based).

    Examples
    --------
    >>> spmdSend("x", spmdIndex(), 2)
    >>> data, source, tag = spmdReceiveStatus()
    >>> data, source, tag
    ('x', 1, 2)

    MATLAB
    ------
    ``[data, source, tag] = spmdReceive(...)``
    """
    return spmdReceive(source, tag, status=True)


def spmdProbeStatus(source: Union[Worker, str] = None, tag: Union[Worker, str] = None
                    ) -> Tuple[bool, Optional[int], Optional[int]]:
    """``[tf, source, tag] = spmdProbe(...)``: ``tf, source, tag = spmdProbeStatus(...)``
    (source and tag None when nothing is waiting).

    Examples
    --------
    >>> spmdProbeStatus()
    (False, None, None)

    MATLAB
    ------
    ``[tf, source, tag] = spmdProbe(...)``
    """
    return spmdProbe(source, tag, status=True)


@_as_called("spmdSendReceive")
def spmdSendReceive(destination: Worker, source: Worker, X: Any, tag: Worker = 0) -> Any:
    """``spmdSendReceive(destination, source, X)``; ``[]`` (None) skips that side.

    Examples
    --------
    >>> n, k = spmdSize(), spmdIndex()
    >>> spmdSendReceive(k % n + 1, (k - 2) % n + 1, k)
    1
    >>> print(spmdSendReceive([], [], 5))   # [] skips a side
    None

    MATLAB
    ------
    ``B = spmdSendReceive(destination, source, A)``, ``labSendReceive``
    """
    return p2p.spmd_send_receive(_worker(destination), _worker(source), X, _worker(tag))


@_as_called("spmdProbe")
def spmdProbe(source: Union[Worker, str] = None, tag: Union[Worker, str] = None, *,
              status: bool = False) -> Any:
    """``spmdProbe``, ``spmdProbe(source)``, ``spmdProbe('any', tag)``, ...

    Examples
    --------
    >>> spmdProbe("any")
    False

    MATLAB
    ------
    ``tf = spmdProbe``, ``spmdProbe(source)``, ``spmdProbe('any', tag)``, ``labProbe``
    """
    return p2p.spmd_probe(_any(source), _any(tag), status=status)


def _count(value: Any) -> Any:
    """A number of workers as MATLAB code gives it: a double (``2.0``, ``Inf``)."""
    if isinstance(value, np.ndarray) and value.size == 1 and value.dtype.kind in "fiu":
        value = value.reshape(()).item()
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


def spmd(*counts: Union[int, float, np.integer, np.floating, np.ndarray]) -> region.Region:
    """MATLAB's ``spmd``, ``spmd(n)`` and ``spmd(m, n)``: ``for _ in spmd(m, n):`` runs
    its body on at least m and at most n workers (as many as there are, up to n; ``n``
    may be ``Inf``), ``spmd(n)`` on exactly n, ``spmd(0)`` on the client (worker 1 in a
    script). Counts as MATLAB gives them (doubles: ``2.0``); see ``spmdlab.spmd``.

    Examples
    --------
    >>> for _ in spmd(0.0, float("inf")):   # spmd(0, Inf) ... end
    ...     print(spmdSize())
    1

    MATLAB
    ------
    ``spmd ... end``, ``spmd(n) ... end``, ``spmd(m, n) ... end``
    """
    return region.enter("spmd", counts, {}, _count)


class Composite(composite.Composite):
    """MATLAB's ``Composite``: ``X{k}`` is ``X[k]``, ``X{k} = v`` is ``X[k] = v``,
    ``length(X)`` is ``len(X)`` (or ``length(X)``), ``exist(X, k)`` is ``X.exist(k)``
    (``X.exist([1, 3])`` one per worker); worker numbers as MATLAB gives them
    (``X[2.0]``, ``X[[1, 3]]``). Every worker runs the client's code, so reading and
    setting elements is collective; see ``spmdlab.Composite``.

    Examples
    --------
    >>> x = Composite(float(spmdIndex()) ** 2)
    >>> x[1.0], len(x)
    (1.0, 1)

    MATLAB
    ------
    ``X{k}``, ``X{k} = v``, ``length(X)``, ``exist(X, k)``
    """

    __slots__ = ()

    def _key(self, k: Any) -> Any:
        return _workers(k)


# -- the legacy names (R2022b and earlier) ----------------------------------------------

labindex = spmdIndex
numlabs = spmdSize


@_as_called("gplus")
def gplus(X: Any, targetlab: Worker = None) -> Any:
    """``gplus(X)``, ``gplus(X, targetlab)``.

    Examples
    --------
    >>> gplus(np.array([1, 2]))
    array([1, 2])

    MATLAB
    ------
    ``gplus(X)``, ``gplus(X, targetlab)``
    """
    return spmdPlus(X, targetlab)


@_as_called("gcat")
def gcat(X: Any, dim: Worker = 2, targetlab: Worker = None) -> Any:
    """``gcat(X)``, ``gcat(X, dim)``, ``gcat(X, dim, targetlab)``.

    Examples
    --------
    >>> gcat(np.array([[1, 2]]), 1)
    array([[1, 2]])

    MATLAB
    ------
    ``gcat(X)``, ``gcat(X, dim)``, ``gcat(X, dim, targetlab)``
    """
    return spmdCat(X, dim, targetlab)


@_as_called("gop")
def gop(fcn: Reduction, X: Any, targetlab: Worker = None) -> Any:
    """``gop(fcn, X)``, ``gop(fcn, X, targetlab)``.

    Examples
    --------
    >>> gop("@min", np.array([4, 2]))
    array([4, 2])

    MATLAB
    ------
    ``gop(@fcn, X)``, ``gop(@fcn, X, targetlab)``
    """
    return spmdReduce(fcn, X, targetlab)


@_as_called("labBroadcast")
def labBroadcast(source: Worker, X: Any = _OMITTED) -> Any:
    """``labBroadcast(source, X)`` / ``labBroadcast(source)``.

    Examples
    --------
    >>> labBroadcast(1, {"a": 1})
    {'a': 1}

    MATLAB
    ------
    ``labBroadcast(source, X)``, ``labBroadcast(source)``
    """
    return spmdBroadcast(source, X)


labBarrier = spmdBarrier
labSend = spmdSend
labReceive = spmdReceive
labSendReceive = spmdSendReceive
labProbe = spmdProbe
labReceiveStatus = spmdReceiveStatus
labProbeStatus = spmdProbeStatus


_profile = None


# MATLAB's options of ``mpiprofile on`` (and the values an option takes; None: a number)
_ON_OPTIONS = {"-messagedetail": ("default", "simplified", "off"), "-historysize": None,
               "-history": (), "-nohistory": ()}


def _on_options(args: Sequence[Any]) -> None:
    """Check MATLAB's options of ``mpiprofile('on', ...)``: accepted, with no effect
    (spmdlab records every collective, per call site and worker, whatever they say)."""
    rest = list(args)
    while rest:
        option = rest.pop(0)
        name = option.lower() if isinstance(option, str) else None
        values = _ON_OPTIONS.get(name) if name is not None else ()
        if name not in _ON_OPTIONS:
            raise SpmdValueError(f"mpiprofile: unknown option {option!r} of 'on'; MATLAB's "
                                 f"are {', '.join(_ON_OPTIONS)}")
        if values == ():
            continue
        value = rest.pop(0) if rest else None
        ok = isinstance(value, str) and value.lower() in values if values else \
            not isinstance(value, (bool, str)) and isinstance(value, (int, float, np.number))
        if not ok:
            raise SpmdValueError(f"mpiprofile: the option {option!r} needs "
                                 f"{' or '.join(map(repr, values)) if values else 'a number'} "
                                 f"after it (got {value!r})")


def mpiprofile(action: str = "on", *args: Any, path: str = "mpiprofile") -> Any:
    """MATLAB's ``mpiprofile``: ``"on"`` starts profiling the collectives (again, from
    zero; MATLAB's options, ``"-messagedetail", "simplified"``, ``"-history"``,
    ``"-nohistory"``, ``"-historysize", n``, are accepted and change nothing), ``"off"``
    stops, ``"resume"`` goes on recording, ``"clear"`` and ``"reset"`` clear what was
    recorded, ``"status"`` returns ``{"ProfilerStatus": "on"}`` or ``"off"``; ``"info"``
    returns the profile (a dict, on worker 1; None on the others) and ``"viewer"`` stops,
    prints the table on worker 1 and saves ``path.json`` and ``path.png`` there (``path``
    may come second: ``mpiprofile("viewer", "out")``); ``mpiprofile("viewer", stats)``
    prints the table of ``stats`` from ``"info"`` where it is (worker 1; not collective).
    ``"info"`` and ``"viewer"`` are collective (every worker).

    Examples
    --------
    >>> mpiprofile("on")
    >>> _ = gplus(np.ones(10))
    >>> info = mpiprofile("info")
    >>> info["workers"]
    1
    >>> mpiprofile("status")
    {'ProfilerStatus': 'on'}
    >>> mpiprofile("off")

    MATLAB
    ------
    ``mpiprofile on``, ``mpiprofile off``, ``mpiprofile clear``, ``mpiprofile status``,
    ``stats = mpiprofile('info')``, ``mpiprofile viewer``, ``mpiprofile('viewer', stats)``
    """
    from .profiler import Profile, _running, format_report

    global _profile
    action = str(action).lower()
    if action == "on":
        _on_options(args)
    elif action == "viewer" and len(args) == 1:
        if args[0] is None or type(args[0]) is dict:  # MATLAB's mpiprofile('viewer',
            # stats): the table of stats from 'info' (a dict on worker 1, None elsewhere)
            if args[0] is not None:
                print(format_report(args[0]), flush=True)
            return args[0]
        path = args[0]
    elif args:
        raise SpmdValueError(f"mpiprofile: {action!r} takes no more arguments (got "
                             f"{', '.join(map(repr, args))})")
    if action == "on":
        if _profile is not None:  # mpiprofile's one profile starts again from zero
            _profile.stop()
        _profile = Profile().start()
        return None
    if action == "resume":
        _profile = (_profile or Profile()).start()
        return None
    if action == "status":
        return {"ProfilerStatus": "on" if _profile in _running else "off"}
    if _profile is None:
        _profile = Profile()
    if action == "off":
        _profile.stop()
        return None
    if action in ("reset", "clear"):
        _profile.records.clear()
        return None
    if action == "info":
        return _profile.summary()
    if action == "viewer":
        _profile.stop()
        summary = _profile.report()
        _profile.save(path)
        return summary
    raise SpmdValueError(f"mpiprofile: the action must be 'on', 'off', 'resume', 'clear', "
                         f"'reset', 'status', 'info' or 'viewer' (got {action!r})")


# MATLAB's resources of a pool of processes on this machine (R2022b's 'Processes', the
# 'local' profile before it): a pool here is MPI processes, started by ``launcher``
_RESOURCES = ("processes", "local")


def parpool(*args: Any, **options: Any) -> Any:
    """``pool = parpool(n)``: start a pool of ``n`` workers driven from this process
    (MATLAB's client, which never starts MPI); an error if one is open. ``n`` as MATLAB
    code gives it: a double (``parpool(2.0)``, ``parpool(numel(x) / 2)``) is a number of
    workers where it is whole. MATLAB's ``parpool("Processes", n)`` and
    ``parpool("local", n)`` are ``parpool(n)`` (other resources, a thread pool or a
    cluster profile, and MATLAB's name-value arguments raise ``SpmdValueError``, naming
    them). ``options`` as :class:`spmdlab.Pool`'s (``launcher="mpich"``, ``"openmpi"``,
    ``"srun"``).

    Examples
    --------
    >>> pool = parpool(4)                                             # doctest: +SKIP
    >>> pool.NumWorkers                                               # doctest: +SKIP
    4
    >>> pool = parpool("Processes", 2)                                # doctest: +SKIP
    >>> gcp("nocreate") is None              # no pool open in this process
    True

    MATLAB
    ------
    ``pool = parpool(n)``, ``parpool(resources, n)``, ``parpool(resources)``
    """
    from .pool import _client

    rest = list(args)
    if rest and isinstance(rest[0], str):
        resources = rest.pop(0)
        if resources.lower() not in _RESOURCES:
            raise SpmdValueError(
                f"parpool: the number of workers must be a positive integer (got "
                f"{resources!r}), after the resources if any: the only ones are "
                f"'Processes' (or the 'local' profile), a pool's workers being MPI "
                f"processes started by the launcher (choose it with launcher=)")
    n = rest.pop(0) if rest and not isinstance(rest[0], str) else options.pop("n", None)
    if rest:  # MATLAB's name-value arguments ("SpmdEnabled", true, ...)
        raise SpmdValueError(
            f"parpool: MATLAB's name-value arguments are not available (got "
            f"{', '.join(map(repr, rest))}); the options are spmdlab.Pool's: launcher=, "
            f"timeout=, launcher_args=")
    return _client.parpool(_count(n), **options)


def gcp(option: Optional[str] = None) -> Any:
    """``pool = gcp``: the current pool, started if there is none; ``gcp("nocreate")``
    gives None when there is none.

    Examples
    --------
    >>> gcp("nocreate") is None
    True

    MATLAB
    ------
    ``pool = gcp``, ``pool = gcp("nocreate")``
    """
    from .pool import _client

    return _client.gcp(option)


def mldivide(A: Any, B: Any) -> Any:
    """``A \\ B`` as MATLAB's backslash: for a square ``A`` the solution of ``A @ X = B``
    (LU; a triangular ``A`` by substitution), for a rectangular one MATLAB's *basic*
    least-squares solution (QR with column pivoting: at most ``rank(A)`` nonzero rows,
    not numpy's minimum-norm one); for a scalar (or 1-by-1) ``A``, ``B / A`` (MATLAB's
    ``A .\\ B``). Where MATLAB warns and goes on, so does this (a ``RuntimeWarning``): a
    singular ``A`` gives Inf or NaN ("Matrix is singular to working precision"), a
    rank-deficient one says its rank. Integers count as doubles; single stays single.
    Codistributed operands are gathered and the whole system solved on every worker
    (correct, not parallel); the result is then codistributed (split with no
    communication) in the operands' family.

    Examples
    --------
    >>> D = codistributed(np.array([[2.0, 0.0], [0.0, 4.0]]))
    >>> gather(mldivide(D, np.array([2.0, 8.0])))
    array([1., 2.])
    >>> mldivide(np.array([[2.0, 1.0]]), 1.0)        # [2 1] \\ 1: the basic solution
    array([0.5, 0. ])

    MATLAB
    ------
    ``x = A \\ b``, ``mldivide(A, b)``
    """
    shape = np.shape(A)
    if len(shape) <= 2 and int(np.prod(shape)) == 1:  # MATLAB's a \ B of a scalar: a .\ B
        a = gather(A) if iscodistributed(A) else A
        B = np.asarray(B) if isinstance(B, (list, tuple)) else B
        return B / (a.reshape(()) if hasattr(a, "reshape") else a)
    handle = _on_client(A, B)
    if handle is not None:  # the client of a pool: solved by the workers
        return handle._on_workers("mldivide", mldivide, A, B)
    call = "mldivide"
    ref = None
    if iscodistributed(A) or iscodistributed(B):  # (collective: every worker gathers)
        ref, family, (A, B) = _darray_gathered(call, A, B)
    a, b = np.asarray(A), np.asarray(B)
    if b.ndim == 0:
        b = b.reshape(1)
    if a.ndim != 2 or b.ndim > 2 or b.shape[0] != a.shape[0]:
        rows = f"{b.shape[0]} rows" if b.ndim else "none"
        raise _darray_error(SpmdValueError, call, (
            f"A must be a matrix with as many rows as B (got A of size "
            f"{'x'.join(map(str, a.shape))} and B of {rows})"))
    if a.dtype.kind not in "biufc" or b.dtype.kind not in "biufc":
        raise _darray_error(SpmdTypeError, call, (
            f"A and B must be numbers (got {a.dtype} and {b.dtype})"))
    x = _backslash.solve(a, b, lambda: f"{call} ({_world.here().who()})")
    return x if ref is None else _darray_shaped(ref, family, x)


def delete(obj: Any) -> None:
    """``delete(pool)``: end a pool (its workers end); anything with a ``delete`` or
    ``close`` method is ended the same way.

    Examples
    --------
    >>> delete(gcp("nocreate"))              # nothing to end: no pool open here

    MATLAB
    ------
    ``delete(pool)``, ``delete(gcp("nocreate"))``, ``delete(gcp)`` (the open pool, if any)
    """
    from .pool import _client

    if obj is gcp or obj is _client.gcp or obj is _client.current_pool:
        # MATLAB's delete(gcp) calls gcp; ported as written, it passes the function
        obj = _client.gcp("nocreate")
    if obj is None:
        return
    end = getattr(obj, "delete", None) or getattr(obj, "close", None)
    if end is None:
        raise SpmdValueError(f"delete: cannot delete a {type(obj).__name__}")
    end()


# MATLAB's max and min, by name only (``from spmdlab.matlab import max, min``): they are
# left out of __all__ so that ``from spmdlab.matlab import *`` keeps Python's max and min,
# and they are bound last so that nothing above calls them for Python's
from .darray._matlab import matlab_max as max, matlab_min as min  # noqa: E402, A001
