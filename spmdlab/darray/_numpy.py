"""numpy's protocols for codistributed arrays: ufuncs, reductions, products, functions.

Element-wise work runs on the local parts, in their family, without communicating. The
output takes the distribution of an operand of its shape; operands split another way
are redistributed to it (one all-to-all each), and operands that broadcast along the
distribution axis are gathered. Reductions along other axes are local; along the
distribution axis each worker reduces its part and the parts are folded in worker
order (``_reduce``), so every worker gets the same bits at every layout.
"""

from __future__ import annotations

import functools
import inspect
import math
import operator
from typing import Any, Callable, Dict

import numpy as np

from .. import _ending, _reduce, _wait
from .._mpi import MPI
from .._backends import BF16_HOST, LOCAL, _torch_dtype, classify
from .._ops import LAND, LOR, MAX, MIN, PROD, SUM
from .._agree import Description, agree
from .._pack import digest
from ..collectives import _cat_arrays, _plain_key
from ..errors import SpmdError, SpmdTypeError, SpmdValueError
from ._array import CodistributedArray, part
from . import _extrema
from ._codistributor import Codistributor, error

_FUNCTIONS: Dict[Any, Callable[..., Any]] = {}


def implements(*functions):
    def register(fn):
        for f in functions:
            _FUNCTIONS[f] = fn
        return fn
    return register


def _name(func):
    module = getattr(func, "__module__", "numpy") or "numpy"
    return f"{module.replace('numpy.linalg._linalg', 'numpy.linalg')}.{func.__name__}"


def array_function(self, func, types, args, kwargs):
    global _outer
    impl = _FUNCTIONS.get(func)
    if impl is None:
        raise error(SpmdTypeError, _name(func), f"not available for a "
                    f"{type(self).__name__}; gather it first (.gather(), collective) or "
                    f"work on this worker's .local")
    if not _outer or func in _ELEMENTWISE:  # (called by another's implementation:
        return impl(*args, **kwargs)         # checked there; element-wise: see below)
    _same_arguments(self, func, args, kwargs)
    _outer = False
    try:
        return impl(*args, **kwargs)
    finally:
        _outer = True


_outer = True  # not inside another numpy function of a codistributed array
# Element-wise work does not communicate, as the ufuncs' (``D * w``): its other
# arguments are not compared (nor are the shape queries')
_ELEMENTWISE = {np.where, np.clip, np.isclose, np.round, np.around, np.real, np.imag,
                np.fix, np.copy, np.shape, np.ndim, np.size}


def _same_arguments(D, func, args, kwargs, call=None):
    """Collective, for a call given more than its codistributed arrays: raise
    SpmdMismatchError on every worker when the workers passed different other arguments
    (``np.percentile(D, q)`` with a ``q`` of each worker's own would mix answers
    silently). Compared: numbers, strings, None, small arrays (their bytes), tuples and
    lists of them; of other objects, their type; of larger arrays, dtype and shape.
    One small agreement (2 us at 1x2); none where every other argument is numpy's
    default (``D.sum()`` passes ``axis=None``: the same call as ``np.sum(D)``).
    ``call``: the name of a method (``func`` None)."""
    params, defaults = _parameters(func) if func is not None else ([], {})
    # by their names in numpy's signature, in its order: ``np.concatenate(a, 0)`` on one
    # worker and ``np.concatenate(a, axis=0)`` (or the keywords in another order, as
    # ``**options`` built from a set may give) on another are the same call
    named = [(params[i] if i < len(params) else f"argument {i + 1}", a)
             for i, a in enumerate(args) if not isinstance(a, CodistributedArray)]
    named += [(k, v) for k, v in kwargs.items() if not isinstance(v, CodistributedArray)]
    named = [(k, v) for k, v in named
             if not (k in defaults and _is_default(k, v, defaults[k]))]
    if not named:
        return
    order = {name: i for i, name in enumerate(params)}
    named.sort(key=lambda item: (order.get(item[0], len(order)), item[0]))
    call = call or _name(func)
    # (``out`` is written, not read: what it held before may differ, as np.empty's does)
    keys = tuple((name, _argument_key(value, written=name == "out"))
                 for name, value in named)
    scope = D._check_scope(call)
    agree(scope, call, digest((call, keys)), describe=lambda: _described(call, named))


_PARAMETERS: Dict[Any, tuple] = {}


def _parameters(func):
    """The names of ``func``'s positional parameters in numpy's signature, and the
    defaults of all its parameters."""
    found = _PARAMETERS.get(func)
    if found is None:
        params, defaults = [], {}
        try:
            positional = True
            for p in inspect.signature(func).parameters.values():
                positional = positional and p.kind in (p.POSITIONAL_ONLY,
                                                       p.POSITIONAL_OR_KEYWORD)
                if positional:
                    params.append(p.name)
                if p.default is not p.empty:
                    defaults[p.name] = p.default
        except (TypeError, ValueError):
            pass
        found = _PARAMETERS[func] = (params, defaults)
    return found


def _is_default(name, value, default):
    """Whether an argument is its parameter's default (None, False, 0, 'C', numpy's
    no-value; ``keepdims=False`` where numpy's default is its no-value), so passing it
    is the same call as leaving it out."""
    if name == "keepdims" and default is np._NoValue and value is False:
        return True
    return value is default or type(value) is type(default) and \
        isinstance(value, (bool, int, float, str)) and value == default


def _described(call, named):
    """The Description of a call's arguments, by their names in numpy's signature."""
    shown = {n: _Shown(v, written=n == "out") for n, v in named}
    text = f"{call}({', '.join(f'{k}={v!r}' for k, v in shown.items())})"
    return Description(text, how="workers passed different arguments", call=call,
                       **{k: repr(v) for k, v in shown.items()})


def _argument_key(value, written=False):
    key = None if written else _plain_key(value)
    if key is not None:
        return key
    if isinstance(value, (tuple, list)) and any(isinstance(v, CodistributedArray)
                                                for v in value):
        # (np.concatenate([D, v]): the others beside the codistributed arrays compared)
        return type(value).__name__, tuple(
            "codistributed" if isinstance(v, CodistributedArray) else _argument_key(v)
            for v in value)
    if isinstance(value, np.ndarray):  # (large, or written: not read)
        return "array", value.dtype.str, value.shape
    if isinstance(value, (np.dtype, type)):  # a dtype: np.float32, np.dtype("f4")
        try:
            return "dtype", np.dtype(value).str
        except TypeError:
            pass
    if type(value).__module__ == "torch" and type(value).__name__ == "dtype":
        return "dtype", repr(value)
    return "object", type(value).__qualname__


class _Shown:
    """An argument as a mismatch message shows it (a large array by dtype and shape, and
    a digest of its contents where they are compared: arrays that differ only there are
    shown different, not as one group of workers that passed the same)."""

    def __init__(self, value, written=False):
        if isinstance(value, np.ndarray) and value.size > 8:
            key = None if written else _plain_key(value)
            contents = f", contents {key[2][:8]}" if key is not None else ""
            self.text = f"<array {value.dtype} {value.shape}{contents}>"
        elif isinstance(value, CodistributedArray):
            self.text = f"<codistributed {value.dtype} {value.shape}>"
        elif isinstance(value, (tuple, list)) and any(isinstance(v, CodistributedArray)
                                                      for v in value):
            # (each element shown short: the one that differs comes after the arrays)
            text = ", ".join(repr(_Shown(v)) for v in value)
            self.text = f"({text},)" if isinstance(value, tuple) and len(value) == 1 else \
                f"({text})" if isinstance(value, tuple) else f"[{text}]"
        else:
            text = repr(value)
            self.text = text if len(text) <= 60 else text[:57] + "..."

    def __repr__(self):
        return self.text


def array_ufunc(self, ufunc, method, inputs, kwargs):
    call = f"numpy.{ufunc.__name__}" + ("" if method == "__call__" else f".{method}")
    if method == "__call__":
        if ufunc is np.matmul:
            options = dict(kwargs)
            out = options.pop("out", None)
            if options:
                raise error(SpmdTypeError, call, f"takes no options here but out (got "
                            f"{sorted(options)})")
            if _outer:  # ``D @ v`` with a ``v`` of each worker's own mixes their answers,
                # as ``np.dot(D, v)`` would: compared as np.dot's arguments are
                ref = next(x for x in inputs if isinstance(x, CodistributedArray))
                _same_arguments(ref, np.matmul, inputs, {})
            result = matmul(call, *inputs)
            return result if out is None else _matmul_into(call, result, out)
        if ufunc.signature is not None:  # numpy 2's vecdot, matvec, vecmat: not
            # element-wise (each worker's parts alone gave a wrong global array)
            return _gufunc(call, ufunc, inputs, kwargs)
        if ufunc is np.power and len(inputs) == 2:
            _check_integer_power(call, *inputs)
        return elementwise(call, inputs, kwargs,
                           lambda fam, args, kw: fam.apply(ufunc, "__call__", args, kw),
                           nout=ufunc.nout)
    if method == "reduce" and ufunc in _UFUNC_REDUCTIONS and len(inputs) == 1:
        options = dict(kwargs)
        axis = options.pop("axis", 0)
        return reduction(call, _UFUNC_REDUCTIONS[ufunc], inputs[0], axis, **options)
    if method == "accumulate" and ufunc in _UFUNC_SCANS and len(inputs) == 1:
        options = dict(kwargs)
        axis = options.pop("axis", 0)
        if axis is None and inputs[0].ndim != 1:  # (numpy's refusal)
            raise error(SpmdValueError, call, f"accumulate does not allow multiple axes "
                        f"(axis=None of an array of {inputs[0].ndim} dimensions)")
        return scan(call, _UFUNC_SCANS[ufunc], inputs[0], axis, **options)
    raise error(SpmdTypeError, call, f"not available for a codistributed array")


def _gufunc(call, ufunc, inputs, kwargs):
    """numpy 2's generalized ufuncs of vectors and matrices, which reduce over a core
    dimension: ``np.vecdot(a, b, axis=-1)`` is the sum of ``conj(a) * b`` along ``axis``
    (the workers' partial sums folded in worker order where it is the split axis: within
    rounding of numpy's); ``np.matvec(A, v)`` and ``np.vecmat(v, A)`` of a matrix and a
    vector are ``A @ v`` and ``conj(v) @ A``. Other generalized ufuncs, stacks of
    matrices and their other options raise SpmdTypeError on every worker."""
    name = ufunc.__name__
    options = dict(kwargs)
    shapes = [x.shape if isinstance(x, CodistributedArray) else np.shape(x)
              for x in inputs]
    conj = lambda x: np.conjugate(x) if _kind(x) == "c" else x  # noqa: E731
    if name == "vecdot" and len(inputs) == 2 and set(options) <= {"axis"}:
        axis = options.get("axis", -1)
        if not isinstance(axis, (int, np.integer)) or isinstance(axis, (bool, np.bool_)):
            raise error(SpmdTypeError, call, f"'axis' must be an int (got {axis!r})")
        a, b = (np.asarray(x) if isinstance(x, (list, tuple)) else x for x in inputs)
        cores = []
        for shape in shapes:
            if not -len(shape) <= axis < len(shape):
                raise error(SpmdValueError, call, f"axis {axis} is out of bounds for an "
                            f"operand of {len(shape)} dimensions (shapes {shapes[0]} and "
                            f"{shapes[1]})")
            cores.append(shape[axis])
        if cores[0] != cores[1]:
            raise error(SpmdValueError, call, f"the vectors' lengths differ along axis "
                        f"{axis}: shapes {shapes[0]} and {shapes[1]} ({cores[0]} != "
                        f"{cores[1]})")
        if _outer:  # a replicated vector of each worker's own would mix the answers
            ref = next(x for x in inputs if isinstance(x, CodistributedArray))
            _same_arguments(ref, None, (a, b), {}, call=call)
        # numpy moves each operand's core axis to the end, then broadcasts the rest
        product = conj(np.moveaxis(a, axis, -1)) * np.moveaxis(b, axis, -1)
        return np.sum(product, axis=-1)
    if name in ("matvec", "vecmat") and len(inputs) == 2 and not options:
        matrix, vector = inputs if name == "matvec" else inputs[::-1]
        if len(np.shape(matrix) if not isinstance(matrix, CodistributedArray)
               else matrix.shape) == 2 and \
                len(np.shape(vector) if not isinstance(vector, CodistributedArray)
                    else vector.shape) == 1:
            return array_ufunc(None, np.matmul, "__call__", (matrix, vector)
                               if name == "matvec" else (conj(vector), matrix), {})
        raise error(SpmdTypeError, call, f"only a matrix and a vector here (shapes "
                    f"{shapes[0]} and {shapes[1]}); stacks of them are not available for "
                    f"codistributed arrays")
    detail = f" with options {sorted(options)}" if options else ""
    raise error(SpmdTypeError, call, f"not available for a codistributed array{detail} "
                f"(a generalized ufunc, signature {ufunc.signature!r}); gather it first")


# -- element-wise ---------------------------------------------------------------------------


def elementwise(call, inputs, kwargs, apply, nout=1):
    """``apply(family, locals, kwargs)`` on the local parts of the operands, aligned to one
    distribution; the result (or ``nout`` results) codistributed like it."""
    if not kwargs and nout == 1:
        same = _same_distribution(call, inputs)
        if same is not None:  # the common case (D * 2 + E), with nothing to align
            ref, args = same
            return ref._new(_applied(call, apply, LOCAL[ref.family], args, {}), ref._codist)
    kwargs = dict(kwargs)
    out = kwargs.pop("out", None)
    outs = () if out is None else (out if isinstance(out, tuple) else (out,))
    if any(o is not None and not isinstance(o, CodistributedArray) for o in outs):
        raise error(SpmdTypeError, call, "'out' must be codistributed arrays")
    # a ufunc's mask (np.divide(A, B, out=C, where=B != 0)) is broadcast with the
    # operands and split as they are (a whole one gave each worker's block the global
    # mask: numpy's bare broadcasting error, or a part of the wrong shape)
    where = kwargs.pop("where", True)
    masks = () if where is True else (where,)
    for name, value in kwargs.items():
        if isinstance(value, CodistributedArray):
            raise error(SpmdTypeError, call, f"'{name}' cannot be a codistributed array "
                        f"here; gather it or pass a plain array")
    arrays = [x for x in inputs + masks if isinstance(x, CodistributedArray)]
    ref = (arrays or [o for o in outs if o is not None])[0]
    for x in arrays + [o for o in outs if o is not None]:
        x._check_scope(call)
        if x.family != ref.family:
            raise error(SpmdTypeError, call, f"the operands' local parts are of different "
                        f"families ({ref.family} and {x.family}); convert one")
    try:
        shape = np.broadcast_shapes(*[np.shape(x) if not isinstance(x, CodistributedArray)
                                      else x.shape for x in inputs + masks])
    except ValueError:
        shapes = ", ".join(str(np.shape(x) if not isinstance(x, CodistributedArray)
                               else x.shape) for x in inputs + masks)
        raise error(SpmdValueError, call, f"operands of shapes {shapes} cannot be "
                    f"broadcast together{' (the last: where)' if masks else ''}") from None
    if outs and outs[0] is not None:
        target = outs[0].codistributor
        if outs[0].shape != shape:
            raise error(SpmdValueError, call, f"'out' has shape {outs[0].shape}, the "
                        f"result {shape}")
    else:
        target = _target(arrays, shape, type(ref))
    family = LOCAL[ref.family]
    args = [_aligned(call, x, target, shape, family, ref.local) for x in inputs]
    if masks:
        kwargs["where"] = _aligned(call, where, target, shape, family, ref.local)
    if outs:
        kwargs["out"] = tuple(_aligned(call, o, target, shape, family, ref.local)
                              for o in outs)
        for o in kwargs["out"]:  # an operand overlapping an output (D[1:] += D[:-1]) is
            args = [family.apart(x, o) for x in args]  # read whole first, as numpy does
    result = _applied(call, apply, family, args, kwargs)
    if outs:  # numpy returns the output array itself (a tuple of them for several)
        return outs[0] if nout == 1 else outs
    make = lambda local: ref._new(local, target)  # noqa: E731
    return tuple(map(make, result)) if nout > 1 else make(result)


def _check_integer_power(call, base, exponent):
    """numpy refuses a negative integer power of integers, but only where a part holds
    one (an empty part passes): the whole exponent is looked at, so every worker
    refuses together. Collective (one small reduction) for a codistributed exponent of
    integers only."""
    if _kind(base) not in "biu" or _kind(exponent) not in "iu":
        return
    if isinstance(exponent, CodistributedArray):
        lowest = int(reduction(call, "min", exponent)) if exponent.size else 0
    else:
        values = _on_host(exponent)
        lowest = int(values.min()) if values.size else 0
    if lowest < 0:
        raise error(SpmdValueError, call, f"integers to negative integer powers are not "
                    f"allowed (numpy's rule; got the exponent {lowest}); make the base "
                    f"float first, as D.astype(float) ** -1")


def _kind(x):
    """numpy's dtype kind of an operand (a Python int is "i", a bool "b")."""
    if isinstance(x, CodistributedArray):
        return LOCAL[x.family].dtype(x.local).kind
    if isinstance(x, (bool, int, float, complex)):
        return np.asarray(x).dtype.kind
    return _on_host(x).dtype.kind


def _on_host(x):
    leaf = classify(x) if not isinstance(x, (list, tuple)) else None
    return np.asarray(leaf.host()) if leaf is not None else np.asarray(x)


def _applied(call, apply, family, args, kwargs):
    """``apply(family, args, kwargs)``, a refusal of the local parts' library (numpy's
    casting rules: ``D += 1.5`` on integers) named as the call and worker's; the local
    parts share their dtype, so every worker refuses alike."""
    try:
        result = apply(family, args, kwargs)
    except TypeError as exc:
        if isinstance(exc, SpmdTypeError):
            raise
        raise error(SpmdTypeError, call, str(exc)) from exc
    except RuntimeError as exc:  # torch's refusals (NotImplementedError is one): dtypes
        if family is not LOCAL["torch"] or isinstance(exc, SpmdError):
            raise
        raise error(SpmdTypeError, call, str(exc)) from exc
    if family is LOCAL["torch"]:  # (a dtype numpy has none for: complex32, float8)
        for local in result if isinstance(result, tuple) else (result,):
            part(call, local)
    return result


def _same_distribution(call, inputs):
    """(the first array, the operands' local parts) when every operand is a Python number
    or a codistributed array of one scope, distribution and kind of local part; else
    None (``elementwise`` then aligns them, or says why it cannot)."""
    ref, args = None, []
    for x in inputs:
        if type(x) in (int, float, bool):
            args.append(x)
        elif isinstance(x, CodistributedArray):
            if ref is None:
                x._check_scope(call)
                ref = x
            elif x._scope is not ref._scope or x._codist != ref._codist or \
                    type(x._local) is not type(ref._local):
                return None
            args.append(x._local)
        else:
            return None
    return None if ref is None else (ref, args)


def _target(arrays, shape, cls):
    """The output's distribution: an operand's of the output's shape; else one that spans
    the output along its distribution axis; else the default."""
    for x in arrays:
        if x.shape == shape:
            return x.codistributor
    for x in arrays:
        axis = x.axis + len(shape) - x.ndim
        if x.shape[x.axis] == shape[axis]:
            return Codistributor(axis, x.partition, shape)
    return Codistributor().complete(shape, default_axis=cls._default_axis)


def _aligned(call, x, target, shape, family, like):
    """``x``'s part of the output's block on this worker, ready for the local operation."""
    shift = len(shape) - np.ndim(x) if not isinstance(x, CodistributedArray) else \
        len(shape) - x.ndim
    axis = target.axis - shift  # the output's distribution axis in x, if x has it
    if isinstance(x, CodistributedArray):
        if x.codistributor == target:
            return x.local
        if axis >= 0 and x.shape[axis] == shape[target.axis]:
            mine = Codistributor(axis, target.partition, x.shape)
            return x._moved(call, mine).local
        x = x.gather()  # broadcast along the distribution axis: every worker needs all
    elif isinstance(x, (list, tuple)):
        x = np.asarray(x)
    if np.ndim(x) == 0:
        return x.item() if isinstance(x, np.generic) and family is LOCAL["torch"] else x
    if axis >= 0 and np.shape(x)[axis] != 1:
        r = target.global_indices()
        x = x[(slice(None),) * axis + (slice(r.start, r.stop),)]
    return family.asarray(x, like)


@implements(np.where)
def _where(condition, x=None, y=None):
    if x is None and y is None:
        # numpy's np.where(condition) is np.nonzero(condition) (MATLAB's [i, j] =
        # find(D), ported as np.where(D > 0)): codistributed index vectors
        return _FUNCTIONS[np.nonzero](condition)
    if x is None or y is None:
        raise error(SpmdValueError, "numpy.where", "either both or neither of x and y "
                    "should be given")
    return elementwise("numpy.where", (condition, x, y), {},
                       lambda fam, a, kw: _family_call(fam, "where", *a))


def _family_call(family, name, *args, **kwargs):
    if family is LOCAL["torch"]:
        import torch

        return getattr(torch, name)(*args, **kwargs)
    return getattr(np, name)(*args, **kwargs)


@implements(np.clip)
def _clip(a, a_min=None, a_max=None, out=None, *, min=None, max=None, **kwargs):
    # numpy 2.1's keywords ``min``/``max`` name the same bounds (never both forms)
    if min is not None:
        if a_min is not None:
            raise error(SpmdTypeError, "numpy.clip", "give 'a_min' or 'min', not both")
        a_min = min
    if max is not None:
        if a_max is not None:
            raise error(SpmdTypeError, "numpy.clip", "give 'a_max' or 'max', not both")
        a_max = max
    if kwargs:
        raise error(SpmdTypeError, "numpy.clip", f"takes no options {sorted(kwargs)} for "
                    f"a codistributed array")
    dtype = getattr(a, "dtype", None)
    if isinstance(dtype, np.dtype) and dtype.kind in "iu":
        # numpy's own rule (NEP 50): a Python int bound beyond the integer dtype's range
        # bounds nothing (np.maximum would raise OverflowError for it)
        info = np.iinfo(dtype)
        if type(a_min) is int and a_min <= info.min:
            a_min = None
        if type(a_max) is int and a_max >= info.max:
            a_max = None
    result = a if a_min is None else np.maximum(a, a_min)
    result = result if a_max is None else np.minimum(result, a_max)
    if out is not None:
        out[...] = result
        return out
    return result if result is not a else a.copy()


@implements(np.isclose)
def _isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    def apply(family, args, kwargs):
        if family is LOCAL["torch"]:
            import torch

            # torch.isclose takes two tensors of one dtype (a number, or an int part
            # beside a float one, was torch's TypeError or RuntimeError): numpy's
            # isclose promotes the two, as torch's result_type does
            like = next(x for x in args if isinstance(x, torch.Tensor))
            dtype = torch.result_type(*args)
            args = [torch.as_tensor(x, dtype=dtype, device=like.device) for x in args]
        return _family_call(family, "isclose", *args, rtol=rtol, atol=atol,
                            equal_nan=equal_nan)

    return elementwise("numpy.isclose", (a, b), {}, apply)


@implements(np.allclose)
def _allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    return bool(_isclose(a, b, rtol, atol, equal_nan).all())


@implements(np.array_equal)
def _array_equal(a1, a2, equal_nan=False):
    if np.shape(a1) != np.shape(a2):
        return False
    return bool(_isclose(a1, a2, 0.0, 0.0, equal_nan).all()) if equal_nan else \
        bool(np.all(np.equal(a1, a2)))


@implements(np.round, np.around)
def _round(a, decimals=0, out=None):
    return elementwise("numpy.round", (a,), {} if out is None else {"out": out},
                       lambda fam, args, kw: _family_call(fam, "round", *args,
                                                          decimals=decimals, **kw))


@implements(np.real)
def _real(val):
    out = elementwise("numpy.real", (val,), {},
                      lambda fam, args, kw: _family_call(fam, "real", *args))
    if getattr(out, "_copies_on_read", False):
        # numpy's (and torch's) real part is a view of the array (the array itself when
        # real); MATLAB's E = real(D); E(1, 1) = 0 leaves D be
        out = out._new(LOCAL[out.family].copy(out.local), out.codistributor)
    return out


@implements(np.imag)
def _imag(val):
    out = elementwise("numpy.imag", (val,), {},
                      lambda fam, args, kw: _family_call(fam, "imag", *args))
    if getattr(out, "_copies_on_read", False):  # (a view, or numpy's read-only zeros)
        out = out._new(LOCAL[out.family].copy(out.local), out.codistributor)
    return out


# -- no communication: shape, copies, like-arrays, transpose --------------------------------


@implements(np.shape)
def _shape(a):
    return a.shape


@implements(np.ndim)
def _ndim(a):
    return a.ndim


@implements(np.size)
def _size(a, axis=None):
    return a.size if axis is None else a.shape[axis]


@implements(np.copy)
def _copy(a, order="K", subok=False):
    return a.copy()


def _like(fill):
    def like(a, dtype=None, order="K", subok=True, shape=None, **kwargs):
        if shape is not None and tuple(np.atleast_1d(shape)) != a.shape:
            raise error(SpmdValueError, "numpy.*_like", "a different 'shape' is not "
                        "available for a codistributed array")
        family = LOCAL[a.family]
        dtype = family.dtype(a.local) if dtype is None else dtype
        local = fill(family, a.local.shape, dtype, a.local, kwargs)
        return a._new(local, a.codistributor)
    return like


_FUNCTIONS[np.zeros_like] = _like(lambda f, s, d, like, kw: f.full(s, 0, d, like))
_FUNCTIONS[np.ones_like] = _like(lambda f, s, d, like, kw: f.full(s, 1, d, like))
_FUNCTIONS[np.empty_like] = _like(lambda f, s, d, like, kw: f.empty(s, d, like))
_FUNCTIONS[np.full_like] = lambda a, fill_value, dtype=None, **kw: _like(
    lambda f, s, d, like, _: f.full(s, fill_value, d, like))(a, dtype, **kw)


@implements(np.transpose)
def transpose(a, axes=None, *, view=False):
    """numpy's ``transpose``: no communication. The snake_case array's is a view of the
    local part, as numpy's; MATLAB's ``codistributed`` (value semantics) gets a copy
    unless ``view`` (spmdlab's own use, on an array it does not hand out)."""
    if axes is None:
        axes = tuple(range(a.ndim - 1, -1, -1))
    try:  # ints only, as numpy's (1.5 or "0" are no axis)
        given = (axes,) if isinstance(axes, (int, np.integer)) else tuple(axes)
        if any(isinstance(x, (bool, np.bool_)) for x in given):
            raise TypeError
        given = tuple(operator.index(x) for x in given)
    except TypeError:
        raise error(SpmdTypeError, "transpose", f"'axes' must be a sequence of ints "
                    f"(got {axes!r})") from None
    axes = tuple(x % a.ndim if -a.ndim <= x < a.ndim else -1 for x in given)
    if sorted(axes) != list(range(a.ndim)):
        raise error(SpmdValueError, "transpose", f"the axes {axes} do not permute the "
                    f"{a.ndim} axes of the array")
    local = LOCAL[a.family].permute(a.local, axes)
    if a._copies_on_read and not view:  # MATLAB's: E = D'; E(1, 1) = 0 leaves D be
        local = LOCAL[a.family].copy(local)
    shape = tuple(a.shape[x] for x in axes)
    return a._new(local, Codistributor(axes.index(a.axis), a.partition, shape))


# -- collective: another shape --------------------------------------------------------------


def new_shape(call, size, shape):
    """numpy's ``shape`` argument of a reshape of ``size`` elements (ints, one of them
    -1 at most) as a tuple; SpmdValueError naming ``call`` when it does not fit."""
    try:
        values = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    except TypeError:  # None, a float, a function: not a sequence
        values = (shape,)
    if any(isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer))
           for v in values):
        raise error(SpmdTypeError, call, f"the new shape must be ints (got {shape!r})")
    values = tuple(int(v) for v in values)
    unknown = [d for d, v in enumerate(values) if v == -1]
    if len(unknown) > 1 or any(v < -1 for v in values):
        raise error(SpmdValueError, call, f"the new shape {values} may hold one -1 and "
                    f"otherwise sizes of at least 0")
    known = math.prod(v for v in values if v != -1)
    if unknown and known and size % known == 0:
        values = values[:unknown[0]] + (size // known,) + values[unknown[0] + 1:]
    if -1 in values or math.prod(values) != size:
        raise error(SpmdValueError, call, f"cannot reshape an array of size {size} into "
                    f"shape {values}")
    return values


def reshaped(call, a, shape, order="C", codistributor=None):
    """``a`` in the new ``shape``, read in numpy's ``order``, split by ``codistributor``
    (default: the default distribution of the new shape for ``a``'s class). Collective:
    one all-to-all; bad arguments raise on every worker."""
    a._check_scope(call)
    target, err = None, None
    try:
        if order not in ("C", "F"):
            raise error(SpmdValueError, call, f"'order' must be 'C' or 'F' here (got "
                        f"{order!r})")
        shape = new_shape(call, a.size, shape)
        target = (codistributor or Codistributor()).complete(
            shape, default_axis=type(a)._default_axis, call=call)
    except SpmdError as exc:
        err = exc
    return a._reshaped(call, target, order, err)


@implements(np.reshape)
def _reshape(a, shape=None, order="C", *, newshape=None, copy=None):
    return reshaped("numpy.reshape", a, newshape if shape is None else shape, order)


@implements(np.ravel)
def _ravel(a, order="C"):
    return reshaped("numpy.ravel", a, (-1,), order)


@implements(np.swapaxes)
def _swapaxes(a, axis1, axis2):
    call = "numpy.swapaxes"
    for name, d in (("axis1", axis1), ("axis2", axis2)):  # (Python's own IndexError or
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)):  # TypeError before)
            raise error(SpmdTypeError, call, f"'{name}' must be an int (got {d!r})")
        if not -a.ndim <= d < a.ndim:
            raise error(SpmdValueError, call, f"{name} {d} is out of bounds for an array "
                        f"of {a.ndim} dimensions")
    axes = list(range(a.ndim))
    axes[axis1], axes[axis2] = axes[axis2], axes[axis1]
    return transpose(a, axes)


# -- reductions -------------------------------------------------------------------------------

_OPS = {"sum": SUM, "prod": PROD, "max": MAX, "min": MIN, "any": LOR, "all": LAND}
_UFUNC_REDUCTIONS = {np.add: "sum", np.multiply: "prod", np.maximum: "max",
                     np.minimum: "min", np.logical_or: "any", np.logical_and: "all"}
_UFUNC_SCANS = {np.add: "cumsum", np.multiply: "cumprod", np.maximum: "cummax",
                np.minimum: "cummin"}


def _axes(call, a, axis):
    if axis is None:
        return tuple(range(a.ndim))
    axes = axis if isinstance(axis, tuple) else (axis,)
    out = []
    for x in axes:
        if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
            raise error(SpmdTypeError, call, f"'axis' must be an int or a tuple of ints "
                        f"(got {axis!r})")
        if not -a.ndim <= x < a.ndim:
            raise error(SpmdValueError, call, f"axis {x} is out of bounds for an array of "
                        f"{a.ndim} dimensions")
        out.append(int(x) % a.ndim)
    if len(set(out)) != len(out):
        raise error(SpmdValueError, call, f"repeated axis in {axis!r}")
    return tuple(sorted(out))


def _unsupported(call, **options):
    for name, value in options.items():
        if value is not None and value is not np._NoValue:
            raise error(SpmdTypeError, call, f"'{name}' is not available for a "
                        f"codistributed array")


def reduction(call, name, a, axis=None, dtype=None, keepdims=False, out=None,
              initial=None, where=None):
    """numpy's reduction ``name`` of codistributed ``a``: local along the other axes,
    folded over the workers in worker order along the distribution axis."""
    _unsupported(call, out=out)
    if initial is not None and initial is not np._NoValue or \
            where is not None and where is not np._NoValue and where is not True:
        return _masked(call, name, a, axis, dtype, keepdims, initial, where)
    keepdims = bool(keepdims) if keepdims is not np._NoValue else False
    a._check_scope(call)
    axes = _axes(call, a, axis)
    family = LOCAL[a.family]
    if dtype is not None:
        _reducible(call, name, family, a.local, dtype)
    if name in ("any", "all") and dtype is None:
        local = a.local if family.dtype(a.local).kind == "b" else a.local != 0
    else:
        local = a.local
    shape = tuple(1 if d in axes else n for d, n in enumerate(a.shape)) if keepdims \
        else tuple(n for d, n in enumerate(a.shape) if d not in axes)
    if name in ("max", "min") and family.dtype(local).kind == "c":
        if any(a.shape[d] == 0 for d in axes):
            raise error(SpmdValueError, call, f"zero-size array to reduction operation "
                        f"{name} which has no identity (shape {a.shape})")
        return _extrema.complex_extremum(call, name, a, axes, keepdims)
    if name in ("max", "min") and any(a.shape[d] == 0 for d in axes):
        raise error(SpmdValueError, call, f"zero-size array to reduction operation {name} "
                    f"which has no identity (shape {a.shape})")
    local = _c_ordered(family, local)
    if a.axis not in axes:  # every worker reduces its own block: no communication
        new_axis = a.axis if keepdims else a.axis - sum(1 for d in axes if d < a.axis)
        if family is LOCAL["numpy"] and local.shape[a.axis] == 1 and a.shape[a.axis] > 1:
            # numpy adds a one-wide block's elements along the reduced axes in another
            # order (pairwise: that axis is now the innermost) than the gathered array's
            # (one after the other); as two wide (a view), it reduces as the whole array
            two = local.shape[:a.axis] + (2,) + local.shape[a.axis + 1:]
            result = family.reduce(name, np.broadcast_to(local, two), axes, keepdims, dtype)
            result = result[(slice(None),) * new_axis + (slice(0, 1),)].copy()
        else:
            result = family.reduce(name, local, axes, keepdims, dtype)
        return a._new(result, Codistributor(new_axis, a.partition, shape))
    bf16 = dtype is None and name in ("sum", "max", "min") and \
        family.dtype(local) == BF16_HOST
    if bf16:  # MPI has no bfloat16 operations: reduced in float32, which holds every
        # bfloat16, and rounded once at the end, as torch's bfloat16 sum rounds (its
        # product rounds each step: refused, as by spmd_reduce)
        local = family.astype(local, np.float32)
    if local.shape[a.axis] == 0 and name in ("max", "min"):
        kept = tuple(1 if d in axes else n for d, n in enumerate(local.shape))
        partial = family.full(kept, _identity(name, family.dtype(local)),
                              family.dtype(local), local)
    else:
        partial = family.reduce(name, local, axes, True, dtype)
    op = _OPS[name]
    if name in ("max", "min", "sum", "prod") and family.dtype(partial).kind == "b":
        # numpy's max or sum of bools (a sum with dtype=bool) is any, min or prod all
        op = LOR if name in ("max", "sum") else LAND
    if name == "prod" and family.dtype(partial).kind == "c" and 0 in a.partition:
        total = _product_of_held(call, a, partial, family)
    else:
        total = _reduce.reduce_op(call, partial, op, None, layout(a))
    if bf16:
        total = family.astype(total, BF16_HOST)
    if not keepdims:
        total = total.reshape(shape)
    return _replicated_result(a, total, shape)


_IDENTITIES = {"sum": 0, "prod": 1, "any": False, "all": True}


def _masked(call, name, a, axis, dtype, keepdims, initial, where):
    """numpy's ``initial=`` and ``where=`` of a reduction: the elements ``where`` leaves
    out replaced by the reduction's identity (``initial`` for max and min, which have
    none), the mask replicated or codistributed, broadcast as numpy does; ``initial``
    then folded into the result (max and min exact; a float sum or product within
    rounding of numpy's, which starts from it)."""
    family = LOCAL[a.family]
    kind = family.dtype(a.local).kind
    if initial is not None and initial is not np._NoValue:
        if name not in ("sum", "prod", "max", "min"):
            raise error(SpmdTypeError, call, f"'initial' is not available for {name}")
        try:  # numpy casts it to the result's class (np.sum(ints, initial=1.5) adds 1;
            # a sum of bools is an int)
            cast = {"b": bool if name in ("max", "min") else int, "i": int, "u": int}
            initial = cast.get(kind, lambda v: v)(initial)
        except (TypeError, ValueError) as exc:
            raise error(SpmdTypeError, call, f"'initial' must be a number (got "
                        f"{initial!r})") from exc
    else:
        initial = None
    if where is not None and where is not np._NoValue and where is not True:
        if name in ("max", "min") and initial is None:
            raise error(SpmdValueError, call, f"reduction operation "
                        f"'{'maximum' if name == 'max' else 'minimum'}' does not have an "
                        f"identity, so to use a where mask one has to specify 'initial'")
        fill = initial if name in ("max", "min") else _IDENTITIES[name]
        masked = _FUNCTIONS[np.where](where, a, fill)
        if masked.shape != a.shape:
            raise error(SpmdValueError, call, f"a where mask of shape {np.shape(where)} "
                        f"does not broadcast to the array's shape {a.shape}")
        a = masked
    axes = _axes(call, a, axis)
    if initial is None:
        return reduction(call, name, a, axis, dtype, keepdims)
    if name in ("max", "min") and any(a.shape[d] == 0 for d in axes):
        shape = tuple(1 if d in axes else n for d, n in enumerate(a.shape)) if keepdims \
            else tuple(n for d, n in enumerate(a.shape) if d not in axes)
        return _replicated_result(a, family.full(shape, initial, family.dtype(a.local),
                                                 a.local), shape)
    total = reduction(call, name, a, axis, dtype, keepdims)
    fold = {"sum": np.add, "prod": np.multiply, "max": np.maximum,
            "min": np.minimum}[name]
    if isinstance(total, CodistributedArray):
        return total._new(family.apply(fold, "__call__", (total.local, initial), {}),
                          total._codist)
    folded = family.apply(fold, "__call__", (total, initial), {})
    return folded[()] if isinstance(folded, np.ndarray) else folded


def layout(a):
    """What the workers reducing their shares of ``a`` must agree on (``reduce_op``'s
    ``layout``): its global shape and partition. Constructors from a shape do not
    communicate, so a worker that made its array another size (``zeros(3, 3 + k,
    "codistributed")``) would fold its share into a sum of another array silently, and
    ``mean`` divide by its own count: instead SpmdMismatchError, on every worker."""
    return _layout_text(a.shape, a.axis, a.partition)


@functools.lru_cache(maxsize=256)
def _layout_text(shape, axis, partition):
    return f"{shape} split along axis {axis} as {list(partition)}"


def _reducible(call, name, family, local, dtype):
    """SpmdTypeError, on every worker, for a ``dtype`` the family cannot reduce ``name``
    in (numpy's unknown dtype name, torch's sum in complex32): tried on one element of
    the local part's dtype, not on the part itself, which may be empty on some workers
    (torch sums no complex32 values, and refuses to sum two)."""
    try:
        family.reduce(name, family.full((1,), 0, family.dtype(local), local), (0,), True,
                      dtype)
    except Exception as exc:
        raise error(SpmdTypeError, call, f"cannot {name} in dtype {dtype!r}: "
                    f"{type(exc).__name__}: {exc}") from exc


def _c_ordered(family, local):
    """A numpy part in C order (a copy where it is not, as ``D.T``'s is not): numpy
    reduces an array in an order that follows its layout, and the gathered array, whose
    bits a reduction's are, is in C order."""
    if family is LOCAL["numpy"] and not local.flags.c_contiguous:
        return np.ascontiguousarray(local)
    return local


def _product_of_held(call, a, partial, family):
    """The product of the workers' complex ``partial`` products (kept along ``a``'s
    split axis) of the workers that hold elements, in worker order: an empty block's
    product, 1+0j, is not neutral ((1+0j) * (inf+0j) is nan+nanj where numpy's product
    of the one element is inf+nanj), so those are left out. Collective: one small
    ``spmd_cat``; the same bits on every worker."""
    scope = a._check_scope(call)
    axis = a.axis
    at = lambda k: (slice(None),) * axis + (slice(k, k + 1),)  # noqa: E731
    totals = _cat_arrays(call, scope, classify(partial), axis, None)
    held = [k for k, n in enumerate(a.partition) if n]
    if not held:  # (no elements: every worker's product is the empty one)
        return partial
    total = totals[at(held[0])]
    for k in held[1:]:
        total = family.apply(np.multiply, "__call__", (total, totals[at(k)]), {})
    return total


def _identity(name, dtype):
    if dtype.kind == "f":
        return -np.inf if name == "max" else np.inf
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return info.min if name == "max" else info.max
    return name == "min"  # bool: False is the identity of max (or), True of min (and)


def _replicated_result(a, total, shape):
    """A result every worker holds whole: a scalar of the family when 0-d, else split
    (without communication) by the default distribution of ``a``'s class."""
    if not shape:
        return total[()] if isinstance(total, np.ndarray) else total.reshape(())
    return split(a, total, shape)


def split(a, whole, shape, axis=None):
    """``whole`` (the same on every worker) as an array of ``a``'s class and scope."""
    target = Codistributor(axis).complete(shape, default_axis=type(a)._default_axis)
    r = target.global_indices()
    local = whole[(slice(None),) * target.axis + (slice(r.start, r.stop),)]
    return a._new(LOCAL[a.family].copy(local), target)


def _reduction(name):
    def fn(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
        return reduction(f"numpy.{name}", name, a, axis, dtype, keepdims, out, initial,
                         where)
    return fn


for _name_, _funcs in {"sum": (np.sum,), "prod": (np.prod,), "any": (np.any,),
                       "all": (np.all,)}.items():
    implements(*_funcs)(_reduction(_name_))


def _extremum(name):
    def fn(a, axis=None, out=None, keepdims=False, initial=None, where=None):
        return reduction(f"numpy.{name}", name, a, axis, None, keepdims, out, initial,
                         where)
    return fn


implements(np.max, np.amax)(_extremum("max"))
implements(np.min, np.amin)(_extremum("min"))


implements(np.argmax)(lambda a, axis=None, out=None, *, keepdims=np._NoValue:
                      _extrema.arg("numpy.argmax", "max", a, axis, out, keepdims))
implements(np.argmin)(lambda a, axis=None, out=None, *, keepdims=np._NoValue:
                      _extrema.arg("numpy.argmin", "min", a, axis, out, keepdims))


def _count(a, axis):
    axes = _axes("numpy.mean", a, axis)
    return math.prod(a.shape[d] for d in axes)


def numpy_dtype(dtype):
    """``dtype`` (None, numpy's or a torch dtype: ``np.mean(D, dtype=torch.float64)``, as
    ``np.sum`` takes it) as a numpy dtype (bfloat16's stand-in for ``torch.bfloat16``); a
    torch dtype numpy has none for as it is (the reduction refuses it, naming it)."""
    if dtype is None or type(dtype).__module__ != "torch":
        return dtype
    import torch

    found = _torch_dtype(torch.empty(0, dtype=dtype))
    return dtype if found is None else found


@implements(np.mean)
def mean(a, axis=None, dtype=None, out=None, keepdims=False, where=None):
    _unsupported("numpy.mean", out=out)
    if where is not None and where is not np._NoValue and where is not True:
        # the sum of the elements ``where`` keeps over their count (each exact in worker
        # order; numpy's mean with a mask, within rounding)
        kept = _FUNCTIONS[np.where](where, _FUNCTIONS[np.ones_like](a, dtype=np.int64), 0)
        if kept.shape != a.shape:
            raise error(SpmdValueError, "numpy.mean", f"a where mask of shape "
                        f"{np.shape(where)} does not broadcast to the array's shape "
                        f"{a.shape}")
        if dtype is None and LOCAL[a.family].dtype(a.local).kind in "biu":
            dtype = np.float64
        total = reduction("numpy.mean", "sum", _FUNCTIONS[np.where](where, a, 0), axis,
                          numpy_dtype(dtype), keepdims)
        # the counts in the sum's real class, as numpy divides (a float32 mean stays one)
        real = np.empty(0, LOCAL[a.family].dtype(a.local) if dtype is None
                        else numpy_dtype(dtype)).real.dtype
        return total / reduction("numpy.mean", "sum", kept, axis, real, keepdims)
    dtype = numpy_dtype(dtype)
    kind = LOCAL[a.family].dtype(a.local)
    if dtype is None and kind.kind in "biu":
        dtype = np.float64
    half = kind if dtype is None and kind in (np.float16, BF16_HOST) else None
    if half is not None:  # numpy sums float16 in float32 (no overflow past 65504), then
        # rounds; so does torch.mean bfloat16 (one rounding: a bfloat16 sum divided would
        # round twice, and MPI has no bfloat16 sum along the split axis)
        dtype = np.float32
    total = reduction("numpy.mean", "sum", a, axis, dtype, keepdims)
    count = _count(a, axis)
    if a.family == "numpy" and np.dtype(total.dtype) == np.complex64:
        # numpy divides by its count as an intp: a complex64 sum in complex128, rounded
        # back (the quotient's bits differ from complex64's division; float32's do not)
        wide = lambda t: (t / np.intp(count)).astype(np.complex64)  # noqa: E731
        return total._new(wide(total.local), total._codist) \
            if isinstance(total, CodistributedArray) else wide(total)
    result = total / count
    if dtype is not None and np.dtype(dtype).kind in "biu":
        # numpy divides into the sum's integer dtype (casting="unsafe"): np.mean(x,
        # dtype=np.int64) is an int64, truncated, not a float64
        if isinstance(result, CodistributedArray):
            return result.astype(dtype)
        return np.dtype(dtype).type(result) if isinstance(result, np.generic) else \
            LOCAL[a.family].astype(result, dtype)
    if half is not None:
        if isinstance(result, CodistributedArray):
            return result.astype(half)
        return result.astype(half) if isinstance(result, np.generic) else \
            LOCAL[a.family].astype(result, half)
    return result


@implements(np.var)
def var(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, where=None,
        mean=None, correction=None, *, call="numpy.var"):
    _unsupported(call, out=out, where=where, mean=mean)
    if correction is not None and correction is not np._NoValue:  # numpy 2's (the
        # array API's) name for ddof
        if ddof != 0:
            raise error(SpmdValueError, call, "ddof and correction can't be provided "
                        "simultaneously")
        ddof = correction
    dtype = numpy_dtype(dtype)
    m = _FUNCTIONS[np.mean](a, axis=axis, dtype=dtype, keepdims=True)
    if LOCAL[a.family].dtype(a.local).kind == "b":  # as numpy (torch cannot subtract bools)
        a = a.astype(np.float64)
    d = a - m
    if LOCAL[a.family].dtype(d.local).kind == "c":
        # numpy's squares of complex values: re * re + im * im (abs(d) squared, rounded
        # twice, has other bits)
        re, im = d.real, d.imag
        squares = re * re + im * im
    else:
        d = np.abs(d)
        squares = d * d
    total = reduction(call, "sum", squares, axis, None, keepdims)
    return total / max(_count(a, axis) - ddof, 0)  # numpy's: nan or inf, never negative


@implements(np.std)
def _std(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, where=None,
         mean=None, correction=None):
    return _sqrt(var(a, axis, dtype, out, ddof, keepdims, where, mean, correction,
                     call="numpy.std"))


@implements(np.count_nonzero)
def _count_nonzero(a, axis=None, *, keepdims=False):
    result = reduction("numpy.count_nonzero", "sum", a != 0, axis, np.int64, keepdims)
    return int(result) if axis is None and not keepdims else result


def scan(call, name, a, axis=None, dtype=None, out=None):
    """numpy's ``cumsum``/``cumprod`` along ``axis``: local along an axis the array is
    not split on; along the split axis, floats are ``_chained`` (numpy's own bits) and
    integers scanned locally, each worker then adding (or multiplying by) the fold of
    the previous workers' totals, in worker order (exact in any order)."""
    _unsupported(call, out=out)
    scope = a._check_scope(call)
    if axis is None:  # numpy's: of the flattened array (C order)
        a, axis = (a if a.ndim == 1 else a.ravel()), 0
    axes = _axes(call, a, axis)
    if len(axes) != 1:
        raise error(SpmdTypeError, call, f"'axis' must be one int (got {axis!r})")
    (axis,) = axes
    family = LOCAL[a.family]
    at = lambda k: (slice(None),) * axis + (slice(k, k + 1),)  # noqa: E731
    # (the library's refusal of a dtype named as the call and worker's, on every worker)
    scanned = lambda x: _applied(call, lambda fam, args, kw: fam.scan(  # noqa: E731
        name, args[0], axis, dtype), family, (x,), {})
    if axis == a.axis:
        probe = scanned(a.local[(slice(None),) * axis + (slice(0, 0),)])
        carry = family.scan_carry(probe, name)
        if carry is not None:
            agree(scope, call, a._key(call, name, str(dtype)),
                  describe=lambda: a._describe(call, axis=axis))
            local = a.local  # (converted to the scan's dtype first: dtype= rounds them)
            try:  # agreed: a local failure (an allocation) would leave the others waiting
                if family.dtype(local) != family.dtype(probe):
                    local = family.astype(local, probe.dtype)
                chain = _chained(call, scope, a, local, name, axis, carry)
            except _wait.AGREED_ERRORS:
                raise
            except Exception:
                _ending.end_committed(scope, call)
            local = family.like(chain, a.local)
            if family.dtype(local) != family.dtype(probe):  # (rounded as the scan rounds)
                local = family.scan_rounded(local, probe.dtype)
            return a._new(local, a.codistributor)
    local = scanned(a.local)
    if axis != a.axis:
        return a._new(local, a.codistributor)
    ufunc = {"cumsum": np.add, "cumprod": np.multiply, "cummax": np.maximum,
             "cummin": np.minimum}[name]
    if local.shape[axis]:
        last = local[at(local.shape[axis] - 1)]
    else:
        kept = local.shape[:axis] + (1,) + local.shape[axis + 1:]
        # (a placeholder: the blocks of workers that hold no elements are left out below)
        last = family.full(kept, 0, family.dtype(local), local)
    totals = _cat_arrays(call, scope, classify(last), axis, None)
    # the previous workers that hold elements, in worker order (an empty block's identity
    # is left out: a complex one is not neutral, 1 * (1-0j) is 1+0j and -inf+0j is the
    # maximum of -inf-1j)
    before = [k for k in range(scope.index - 1) if a.partition[k]]
    if before and name in ("cummax", "cummin"):  # the scan continued from the running
        # extreme (the fold of the totals, as the scan folds them): the scan's own choice
        # between 0.0 and -0.0 and its NaN (np.maximum and torch.maximum choose others)
        rest = lambda x: x[(slice(None),) * axis + (slice(1, None),)]  # noqa: E731
        prefix = family.scan(name, family.cat([totals[at(k)] for k in before], axis),
                             axis)[at(len(before) - 1)]
        local = rest(family.scan(name, family.cat([prefix, local], axis), axis))
    elif before:
        prefix = totals[at(before[0])]
        for k in before[1:]:
            prefix = family.apply(ufunc, "__call__", (prefix, totals[at(k)]), {})
        local = family.apply(ufunc, "__call__", (local, prefix), {})
    return a._new(local, a.codistributor)


def _chained(call, scope, a, local, name, axis, carry):
    """The scan along the split axis with the bits of one process's (numpy's, or torch's
    on the CPU): the workers take turns, each continuing from the running value of the
    worker before it (one broadcast of a slice per worker that holds elements), carried
    in ``carry``, the dtype the family's scan carries it in (``local``: ``a``'s local
    part in the scan's dtype). The turns cost about one worker's scan of the whole
    axis: the price of the same bits at every layout."""
    family = LOCAL[a.family]
    # (converted by the family: a bfloat16 tensor has no numpy dtype to convert from)
    x = np.asarray(family.host(family.astype(local, carry)))
    kept = x.shape[:axis] + (1,) + x.shape[axis + 1:]
    turns = [k for k, n in enumerate(a.partition) if n]
    # the running value of the workers before this one (torch starts from 0 or 1)
    running = np.full(kept, 0 if name == "cumsum" else 1, carry) \
        if family.scan_from_identity else None
    chain = x
    buf = np.empty(kept, carry)
    for k in turns:
        if k == scope.rank:
            chain = getattr(np, name)(x if running is None else np.concatenate(
                (running, x), axis), axis=axis)
            if running is not None:
                chain = chain[(slice(None),) * axis + (slice(1, None),)]
            buf[...] = chain[(slice(None),) * axis + (slice(-1, None),)]
        if k == turns[-1]:
            break
        _wait.wait(scope.comm.Ibcast([buf.reshape(-1).view(np.uint8), MPI.BYTE], root=k),
                   scope, call, keep=buf)
        if k < scope.rank:
            running = buf.copy()
    return chain


implements(np.cumsum)(lambda a, axis=None, dtype=None, out=None:
                      scan("numpy.cumsum", "cumsum", a, axis, dtype, out))
implements(np.cumprod)(lambda a, axis=None, dtype=None, out=None:
                       scan("numpy.cumprod", "cumprod", a, axis, dtype, out))


# -- products ---------------------------------------------------------------------------------


def _matmul_into(call, result, out):
    """``np.matmul(..., out=out)`` and ``D @= M``: ``result`` written into the
    codistributed array ``out`` (moved to its distribution first), numpy's checks:
    the same shape, and a cast numpy's ``same_kind`` rule allows."""
    if isinstance(out, tuple) and len(out) == 1:
        out = out[0]
    if not isinstance(out, CodistributedArray):
        raise error(SpmdTypeError, call, f"'out' must be a codistributed array (got "
                    f"{type(out).__name__})")
    if not isinstance(result, CodistributedArray) or result.shape != out.shape:
        shape = result.shape if isinstance(result, CodistributedArray) else np.shape(result)
        raise error(SpmdValueError, call, f"the product's shape {tuple(shape)} is not "
                    f"'out''s {out.shape}")
    out._check_scope(call)
    if result.family != out.family:
        raise error(SpmdTypeError, call, f"the product's local parts are {result.family}, "
                    f"'out''s {out.family}; convert one")
    if out.family == "numpy" and not np.can_cast(result.dtype, out.dtype, "same_kind"):
        raise error(SpmdTypeError, call, f"cannot cast the product from {result.dtype} to "
                    f"'out''s {out.dtype} (numpy's same_kind rule)")
    if result.codistributor != out.codistributor:
        result = result.redistribute(out.codistributor)
    out._local[...] = result._local
    return out


def matmul(call, a, b):
    """``a @ b`` for 1-D and 2-D operands, either or both codistributed.

    Rows of ``a`` split over the workers: each computes its rows of the result (``b``
    gathered if codistributed). Columns of ``b`` split: each computes its columns
    (``a`` gathered if codistributed). The inner dimension split (``a`` by columns, ``b``
    by rows, redistributed to ``a``'s partition if needed): each computes a partial
    product and the partials are summed in worker order.
    """
    arrays = [x for x in (a, b) if isinstance(x, CodistributedArray)]
    ref = arrays[0]
    for x in arrays:
        x._check_scope(call)
        if x.family != ref.family:
            raise error(SpmdTypeError, call, f"the operands' local parts are of different "
                        f"families ({ref.family} and {x.family}); convert one")
    family = LOCAL[ref.family]
    if isinstance(a, (list, tuple)):
        a = np.asarray(a)
    if isinstance(b, (list, tuple)):
        b = np.asarray(b)
    na, nb = np.ndim(a) if not isinstance(a, CodistributedArray) else a.ndim, \
        np.ndim(b) if not isinstance(b, CodistributedArray) else b.ndim
    shape_a = a.shape if isinstance(a, CodistributedArray) else np.shape(a)
    shape_b = b.shape if isinstance(b, CodistributedArray) else np.shape(b)
    if na == 0 or nb == 0:
        raise error(SpmdValueError, call, "matmul does not take scalars; use * for them")
    if na > 2 or nb > 2:
        raise error(SpmdValueError, call, f"products of arrays of more than 2 dimensions "
                    f"are not available for codistributed arrays (shapes {shape_a} and "
                    f"{shape_b})")
    if shape_a[-1] != shape_b[0]:
        raise error(SpmdValueError, call, f"the inner dimensions differ: shapes {shape_a} "
                    f"and {shape_b} ({shape_a[-1]} != {shape_b[0]})")
    shape = tuple(shape_a[:-1]) + tuple(shape_b[1:])
    conv = lambda x: family.asarray(x, ref.local)  # noqa: E731
    a_rows = isinstance(a, CodistributedArray) and na == 2 and a.axis == 0
    b_cols = isinstance(b, CodistributedArray) and nb == 2 and b.axis == 1
    if a_rows:  # each worker: its rows of a times all of b
        whole_b = b.gather() if isinstance(b, CodistributedArray) else conv(b)
        return a._new(_product(call, family, a.local, whole_b),
                      Codistributor(0, a.partition, shape))
    if b_cols:  # each worker: all of a times its columns of b
        whole_a = a.gather() if isinstance(a, CodistributedArray) else conv(a)
        return b._new(_product(call, family, whole_a, b.local),
                      Codistributor(len(shape) - 1, b.partition, shape))
    # the inner dimension is split: partial products, summed in worker order
    if isinstance(a, CodistributedArray):
        inner = a.codistributor.global_indices()
        if isinstance(b, CodistributedArray):
            b_part = b._moved(call, Codistributor(0, a.partition, b.shape)).local
        else:
            b_part = conv(b[inner.start:inner.stop])
        partial = _product(call, family, a.local, b_part)
    else:
        inner = b.codistributor.global_indices()
        a_part = conv(a[..., inner.start:inner.stop])
        partial = _product(call, family, a_part, b.local)
    partial = _as_array(family, partial, ref.local)
    # bools: numpy's matmul of bools is an OR of ANDs
    op = LOR if family.dtype(partial).kind == "b" else SUM
    total = _reduce.reduce_op(call, partial, op, None, layout(ref))
    return _replicated_result(ref, total, shape)


def _product(call, family, x, y):
    """``x @ y`` of two local operands. torch parts: operands of different dtypes are
    promoted (as torch's element-wise rules and numpy's matmul do; torch's matmul
    refuses them) and bools multiplied as numpy does (an OR of ANDs; torch has no bool
    matmul). torch skips its checks on empty operands, so a worker with an empty part
    tries a one-element product of the same dtypes first: a refusal (an integer matmul
    on CUDA, say) is raised on every worker, not only on those holding elements."""
    if family is LOCAL["torch"]:
        import torch

        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if x.dtype == torch.bool and y.dtype == torch.bool:
                # products of 0 and 1 summed in float are 0 exactly when no pair is true
                return _product(call, family, x.to(torch.float32), y.to(torch.float32)) != 0
            dtype = torch.promote_types(x.dtype, y.dtype)
            x, y = x.to(dtype), y.to(dtype)
    try:
        if family is LOCAL["torch"] and (x.numel() == 0 or y.numel() == 0):
            probe = lambda t: t.new_zeros((1,) * t.dim())  # noqa: E731
            probe(x) @ probe(y)
        return x @ y
    except (TypeError, RuntimeError) as exc:
        if isinstance(exc, SpmdError):
            raise
        raise error(SpmdTypeError, call, f"the local product of {_dtype_of(x)} and "
                    f"{_dtype_of(y)} parts failed: {exc}") from exc


def _dtype_of(x):
    return str(getattr(x, "dtype", type(x).__name__)).replace("torch.", "")


def _as_array(family, value, like):
    """A 0-d result of a local product (a numpy scalar) as a 0-d array of the family."""
    if isinstance(value, np.generic):
        return family.asarray(np.asarray(value), like)
    return value


@implements(np.dot)
def _dot(a, b, out=None):
    _unsupported("numpy.dot", out=out)
    if np.ndim(a) == 0 or np.ndim(b) == 0:
        return np.multiply(a, b)
    return matmul("numpy.dot", a, b)


@implements(np.matmul)
def _matmul(a, b, **kwargs):
    return matmul("numpy.matmul", a, b)


@implements(np.trace)
def _trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    call = "numpy.trace"
    _unsupported(call, out=out)
    if a.ndim != 2 or (axis1, axis2) != (0, 1):
        raise error(SpmdValueError, call, "only the trace of a 2-D array over axes (0, 1) "
                    "is available for a codistributed array")
    a._check_scope(call)
    start = a.codistributor.global_indices().start
    shift = offset + start if a.axis == 0 else offset - start
    family = LOCAL[a.family]
    if family is LOCAL["torch"]:
        local = a.local.diagonal(shift).sum()
    else:
        local = np.asarray(np.trace(a.local, offset=shift, dtype=dtype)) \
            if family is LOCAL["numpy"] else np.trace(a.local, offset=shift, dtype=dtype)
    total = _reduce.reduce_op(call, local, SUM, None, layout(a))
    return total[()] if isinstance(total, np.ndarray) else total


@implements(np.linalg.norm)
def norm(x, ord=None, axis=None, keepdims=False):
    """numpy's vector and matrix norms; the 2-norm, -2 and nuclear norms of a matrix from
    its singular values (a QR of each worker's block, the small R factors gathered)."""
    call = "numpy.linalg.norm"
    x._check_scope(call)
    if LOCAL[x.family].dtype(x.local).kind in "biu":
        # as numpy: integers and bools in float (abs(x)**2 would overflow, and an
        # integer power of a negative order is refused where a part is not empty)
        x = x.astype(np.float64)
    if axis is None and ord is None:
        return _sqrt(reduction(call, "sum", _abs2(x), None, None, keepdims))
    if axis is None:
        if x.ndim == 1:
            axis = 0
        elif x.ndim == 2:
            axis = (0, 1)
        else:
            raise error(SpmdValueError, call, "give 'axis' for an array of more than 2 "
                        "dimensions")
    if isinstance(axis, (int, np.integer)) or (isinstance(axis, tuple) and len(axis) == 1):
        axis = axis if isinstance(axis, (int, np.integer)) else axis[0]
        return _vector_norm(call, x, ord, axis, keepdims)
    if isinstance(axis, tuple) and len(axis) == 2:
        _axes(call, x, axis)  # in range
        return _matrix_norm(call, x, ord, tuple(int(v) % x.ndim for v in axis), keepdims)
    raise error(SpmdValueError, call, f"'axis' must be an int or a pair (got {axis!r})")


def _real_dtype(x):
    """The dtype of numpy's norm of float ``x``: float32 for float32 and complex64 (the
    SVD's and counts' results are cast to it); float64 for torch's bfloat16."""
    dtype = LOCAL[x.family].dtype(x.local)
    return np.finfo(dtype).dtype if dtype.kind in "fc" else np.dtype(np.float64)


def _sqrt(x):
    """The square root of a result: a codistributed array, or a scalar of its family."""
    if type(x).__module__.startswith("torch"):
        return x.sqrt()
    return np.sqrt(x)


def _abs2(x):
    """The squares numpy's norms sum: ``re * re + im * im`` of complex values (``abs``
    squared, rounded twice, has other bits: the norm of ``[4+2j, -3]`` was 1 ulp off)."""
    if LOCAL[x.family].dtype(x.local).kind == "c":
        re, im = x.real, x.imag
        return re * re + im * im
    a = np.abs(x)
    return a * a


def _vector_norm(call, x, ord, axis, keepdims):
    if ord is None or ord == 2:
        return _sqrt(reduction(call, "sum", _abs2(x), axis, None, keepdims))
    if ord == np.inf:  # numpy's is a maximum from 0 (initial=0): 0 of no elements
        empty = math.prod(x.shape[d] for d in _axes(call, x, axis)) == 0
        return reduction(call, "sum" if empty else "max", np.abs(x), axis, None, keepdims)
    if ord == -np.inf:
        return reduction(call, "min", np.abs(x), axis, None, keepdims)
    if ord == 0:  # numpy's count in the real dtype of x (float32 for complex64)
        return reduction(call, "sum", (x != 0).astype(_real_dtype(x)), axis, None,
                         keepdims)
    if ord == 1:
        return reduction(call, "sum", np.abs(x), axis, None, keepdims)
    if isinstance(ord, str):
        raise error(SpmdValueError, call, f"invalid norm order {ord!r} for vectors")
    return reduction(call, "sum", np.abs(x) ** ord, axis, None, keepdims) ** (1.0 / ord)


def _matrix_norm(call, x, ord, axes, keepdims):
    row, col = axes
    if row == col:
        raise error(SpmdValueError, call, "duplicate axes given")
    if ord in (None, "fro"):
        return _sqrt(reduction(call, "sum", _abs2(x), axes, None, keepdims))
    if ord in (1, -1, np.inf, -np.inf):
        if ord in (1, -1):
            inner, outer = row, (col - 1 if col > row else col)
        else:
            inner, outer = col, (row - 1 if row > col else row)
        sums = reduction(call, "sum", np.abs(x), inner, None, False)
        # numpy's 1 and inf norms are maxima from 0 (initial=0): 0 over no rows or columns
        name = "min" if ord < 0 else "sum" if sums.shape[outer] == 0 else "max"
        result = reduction(call, name, sums, outer, None, False)
    elif ord in (2, -2, "nuc"):
        if x.ndim != 2:
            raise error(SpmdValueError, call, "the 2, -2 and nuclear norms are available "
                        "for 2-D codistributed arrays only")
        s = singular_values(call, x)
        if ord == -2 and not s.size:  # numpy's refusal, on every worker alike
            raise error(SpmdValueError, call, f"zero-size array to reduction operation "
                        f"minimum which has no identity (shape {x.shape})")
        # as numpy: the 2 and nuclear norms of an empty matrix are 0
        value = (s.max() if s.size else 0.0) if ord == 2 else s.min() if ord == -2 \
            else s.sum()
        result = LOCAL[x.family].like(np.asarray(value, dtype=_real_dtype(x)), x.local)
        if isinstance(result, np.ndarray):  # a numpy scalar, as numpy's and the others
            result = result[()]
    else:
        raise error(SpmdValueError, call, f"invalid norm order {ord!r} for matrices")
    if keepdims:
        shape = tuple(1 if d in axes else n for d, n in enumerate(x.shape))
        if isinstance(result, CodistributedArray):
            return np.expand_dims(result.gather(), axes)  # rare: batched matrices
        return result.reshape(shape)
    return result


def singular_values(call, x):
    """The singular values of 2-D codistributed ``x``, on every worker (host numpy)."""
    scope = x._check_scope(call)
    block = LOCAL[x.family].host(x.local)
    if x.axis == 1:  # the blocks of the conjugate transpose are row blocks
        block = block.conj().T
    r = np.linalg.qr(np.asarray(block, dtype=np.result_type(block.dtype, np.float64)),
                     mode="r")
    stacked = _cat_arrays(call, scope, classify(np.ascontiguousarray(r)), 0, None)
    return np.linalg.svd(stacked, compute_uv=False) if stacked.size else np.zeros(0)
