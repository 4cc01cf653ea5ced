"""Array families: one adapter each for Python scalars, numpy, torch and CuPy.

An adapter knows how to expose a value's bytes to MPI (on the host, or on the device
when the MPI library is CUDA-aware), how to synchronize its stream before MPI touches
device memory, and how to wrap a result in the same family, dtype and device.
New families plug in here and nowhere else. torch and CuPy are never imported by
spmdlab: a value is recognised as theirs only if the user's program imported them.
"""

import sys
from typing import Optional

import numpy as np

from . import _env

# Python scalar types and the numpy dtype that carries them on the wire.
_PY_DTYPES = {bool: np.dtype(np.bool_), int: np.dtype(np.int64),
              float: np.dtype(np.float64), complex: np.dtype(np.complex128)}
_INT64_MIN, _INT64_MAX = -(2 ** 63), 2 ** 63 - 1


class Leaf:
    """One array-like value: its family, dtype, shape and how to rebuild it."""

    __slots__ = ("value", "family", "dtype", "shape", "device")

    def __init__(self, value, family, dtype, shape, device=None):
        self.value = value
        self.family = family
        self.dtype = dtype
        self.shape = shape
        self.device = device

    @property
    def nbytes(self):
        return self.dtype.itemsize * _prod(self.shape)

    @property
    def on_gpu(self):
        return self.family in ("cupy", "torch") and self.device is not None

    def host(self):
        """The value as a host numpy array (a view where possible, never modified)."""
        return FAMILIES[self.family].host(self)

    def wrap(self, array):
        """A result of this leaf's family, dtype and device holding ``array``'s data."""
        return FAMILIES[self.family].wrap(array, self.family_info())

    def family_info(self):
        """What a receiver needs to rebuild this family (sent by broadcast and send)."""
        return (self.family, None if self.device is None else str(self.device))


def _prod(shape):
    n = 1
    for s in shape:
        n *= s
    return n


class _Python:
    @staticmethod
    def host(leaf):
        return np.array(leaf.value, dtype=leaf.dtype)

    @staticmethod
    def wrap(array, info):
        if array.shape != ():  # scalars concatenated by spmd_cat: a numpy array
            return array
        kind = info[0]
        if kind == "py-bool" and array.dtype != np.bool_:
            return int(array)
        return _PY_TYPES[kind](array.item())


_PY_TYPES = {"py-bool": bool, "py-int": int, "py-float": float, "py-complex": complex}


class _NumpyScalar:
    @staticmethod
    def host(leaf):
        return np.asarray(leaf.value)

    @staticmethod
    def wrap(array, info):
        return array[()] if array.shape == () else array


class _Numpy:
    @staticmethod
    def host(leaf):
        return leaf.value

    @staticmethod
    def wrap(array, info):
        return array


class _Torch:
    @staticmethod
    def host(leaf):
        t = leaf.value.detach()
        if t.is_cuda:
            sync_device(leaf)
        t = t.cpu().resolve_conj().resolve_neg()
        if str(t.dtype) == "torch.bfloat16":
            return t.view(_torch().int16).numpy().view(BF16_HOST)
        return t.numpy()

    @staticmethod
    def host_into(leaf, target):
        """Copy the tensor into ``target``, a C-ordered host array of its host dtype."""
        torch = _torch()
        t = leaf.value.detach()
        if t.is_cuda:
            sync_device(leaf)
        if target.dtype == BF16_HOST:
            torch.from_numpy(target.view(np.int16)).copy_(t.view(torch.int16))
        else:
            torch.from_numpy(target).copy_(t)

    @staticmethod
    def wrap(array, info):
        torch = _torch()
        if array.dtype == BF16_HOST:
            # (not np.ascontiguousarray, which makes a 0-d array 1-d)
            if not (array.flags.c_contiguous and array.flags.writeable):
                array = array.copy()
            tensor = torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
        else:
            tensor = torch.from_numpy(array if array.flags.writeable else array.copy())
        device = _arrival_device(info)
        if device is not None:
            tensor = tensor.to(torch.device("cuda", device) if type(device) is int
                               else device)
        return tensor


class _Cupy:
    @staticmethod
    def host(leaf):
        sync_device(leaf)
        return _cupy().asnumpy(leaf.value)

    @staticmethod
    def host_into(leaf, target):
        """Copy the array into ``target``, a C-ordered host array of its dtype."""
        sync_device(leaf)
        _cupy().ascontiguousarray(leaf.value).get(out=target)

    @staticmethod
    def wrap(array, info):
        cupy = _cupy()
        device = _arrival_device(info)
        if device == "cuda":  # from a message: on this thread's current device
            return cupy.asarray(array)
        with cupy.cuda.Device(int(device)):
            return cupy.asarray(array)


FAMILIES = {"py-bool": _Python, "py-int": _Python, "py-float": _Python,
            "py-complex": _Python, "np-scalar": _NumpyScalar, "numpy": _Numpy,
            "torch": _Torch, "cupy": _Cupy}

# A numpy stand-in for torch.bfloat16: same size, never summed by numpy (see _Torch).
BF16_HOST = np.dtype([("bfloat16", np.int16)])


def bf16_as_float32(x):
    """A host array of ``BF16_HOST`` as float32, which holds every bfloat16 exactly (its
    bits are a float32's upper half); any other array as it is. numpy would order the
    stand-in by its bits as integers (negative numbers backwards) or refuse to."""
    if not isinstance(x, np.ndarray) or x.dtype != BF16_HOST:
        return x
    return (x.view(np.uint16).astype(np.uint32) << 16).view(np.float32)


def float32_as_bf16(x):
    """float32 values as ``BF16_HOST``, rounded to the nearest bfloat16 (ties to even,
    as torch rounds; NaN stays NaN)."""
    values = np.asarray(x, dtype=np.float32)
    bits = values.view(np.uint32)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    rounded = np.where(np.isnan(values), (bits >> 16) | 0x40, rounded)
    return rounded.astype(np.uint16).view(BF16_HOST)


def _torch():
    return sys.modules["torch"]


def _cupy():
    return sys.modules["cupy"]


_TORCH_DTYPES: dict = {}


def _torch_dtype(tensor):
    """The numpy dtype a tensor's bytes travel as; None for a dtype numpy has none for
    (float8, complex32, quantized): such a tensor is an object to spmdlab (pickled by
    torch, refused by the reductions on every worker)."""
    key = tensor.dtype
    dtype = _TORCH_DTYPES.get(key, _UNKNOWN)
    if dtype is _UNKNOWN:
        if str(key) == "torch.bfloat16":
            dtype = BF16_HOST
        else:
            try:
                dtype = np.dtype(_torch().empty((), dtype=key).numpy().dtype)
            except (TypeError, RuntimeError):  # numpy has no such dtype
                dtype = None
        _TORCH_DTYPES[key] = dtype
    return dtype


_UNKNOWN = object()


def classify(x):
    """A ``Leaf`` for an array-like value, or None for anything else (containers, objects)."""
    kind = type(x)
    dtype = _PY_DTYPES.get(kind)
    if dtype is not None:
        if kind is int and not _INT64_MIN <= x <= _INT64_MAX:
            return None
        return Leaf(x, _PY_NAMES[kind], dtype, ())
    if isinstance(x, np.ndarray):
        if x.dtype.hasobject or kind is not np.ndarray and _masked(x):
            return None  # (a masked array's mask would be lost: it is an object)
        return Leaf(x, "numpy", x.dtype, x.shape)
    if isinstance(x, np.generic):
        if x.dtype.hasobject:
            return None
        return Leaf(x, "np-scalar", x.dtype, ())
    module = kind.__module__
    if module.startswith("torch"):
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(x, torch.Tensor):
            dtype = _torch_dtype(x)
            if dtype is None or x.is_nested:  # (a nested tensor's parts have shapes
                return None                   # of their own: an object, pickled by torch)
            device = x.device if x.is_cuda else None
            return Leaf(x, "torch", dtype, tuple(x.shape), device)
    elif module.startswith("cupy"):
        cupy = sys.modules.get("cupy")
        if cupy is not None and isinstance(x, cupy.ndarray):
            return Leaf(x, "cupy", x.dtype, x.shape, x.device.id)
    return None


def _masked(x):
    ma = sys.modules.get("numpy.ma")
    return ma is not None and isinstance(x, ma.MaskedArray)


_PY_NAMES = {bool: "py-bool", int: "py-int", float: "py-float", complex: "py-complex"}


def sync_device(leaf):
    """Wait for the leaf's current stream so that MPI reads finished data."""
    if leaf.family == "torch":
        _torch().cuda.current_stream(leaf.value.device).synchronize()
    elif leaf.family == "cupy":
        _cupy().cuda.get_current_stream().synchronize()


_cuda_aware = None

# The GPU that ``select_gpu`` gave this worker: where a GPU value from a message lands,
# in every thread (the queues' receiver thread has a current device of its own, 0)
WORKER_GPU: Optional[int] = None


def _arrival_device(info):
    """Where a GPU value rebuilt from ``info`` goes: a message's (device "cuda") to this
    worker's GPU (``WORKER_GPU``, else the current device); a local value's to its own."""
    if info[1] == "cuda" and WORKER_GPU is not None:
        return WORKER_GPU
    return info[1]


def cuda_aware():
    """Whether the MPI library accepts GPU buffers: SPMDLAB_CUDA_AWARE, else asked at run time.

    The run-time check calls ``MPIX_Query_cuda_support`` (MPICH and Open MPI both export
    it when built with CUDA); a library without it is taken as not CUDA-aware and GPU
    values go through host memory.
    """
    global _cuda_aware
    if _env.CUDA_AWARE is not None:
        return _env.CUDA_AWARE
    if _cuda_aware is None:
        _cuda_aware = _query_cuda_support()
    return _cuda_aware


def _query_cuda_support():
    import ctypes

    try:
        query = ctypes.CDLL(None).MPIX_Query_cuda_support
    except (AttributeError, OSError):
        return False
    query.restype = ctypes.c_int
    try:
        return bool(query())
    except Exception:  # a symbol that cannot be called is as good as none
        return False


# -- computing on local arrays (the local parts of codistributed arrays) --------------------
# One adapter per family, numpy's API as the common language: numpy and CuPy speak it
# (numpy's functions dispatch to CuPy through its array protocols); torch is translated.


_EXTREME_SCANS = {"cummax": np.maximum, "cummin": np.minimum}


class _NumpyLocal:
    """numpy arrays; CuPy arrays too, which numpy's functions dispatch to CuPy."""

    xp = np

    @classmethod
    def empty(cls, shape, dtype, like):
        return cls.xp.empty(shape, dtype=np.dtype(dtype))

    @classmethod
    def full(cls, shape, value, dtype, like):
        return cls.xp.full(shape, value, dtype=np.dtype(dtype))

    @classmethod
    def asarray(cls, x, like):
        """``x`` (a number, numpy array or this family's array) in this family."""
        return cls.xp.asarray(x)

    @staticmethod
    def dtype(a):
        return np.dtype(a.dtype)

    @staticmethod
    def apply(ufunc, method, args, kwargs):
        return getattr(ufunc, method)(*args, **kwargs)

    @staticmethod
    def reduce(name, a, axis, keepdims, dtype=None):
        """numpy's ``sum``, ``prod``, ``max``, ``min``, ``any`` or ``all`` of ``a``."""
        extra = {"dtype": dtype} if dtype is not None else {}
        return getattr(np, name)(a, axis=axis, keepdims=keepdims, **extra)

    @staticmethod
    def scan(name, a, axis, dtype=None):
        """numpy's ``cumsum`` or ``cumprod`` of ``a`` along ``axis``; ``cummax`` and
        ``cummin`` (MATLAB's names) are numpy's ``maximum``/``minimum.accumulate``."""
        if name in _EXTREME_SCANS:
            return _EXTREME_SCANS[name].accumulate(a, axis=axis, dtype=dtype)
        return getattr(np, name)(a, axis=axis, dtype=dtype)

    scan_from_identity = False  # numpy's scans start from their first element

    @staticmethod
    def scan_carry(result, name):
        """The host dtype this family's ``scan`` giving ``result`` carries its running
        value in, one element after the other (so a scan continued from another's last
        value has its bits); None where it need not (integers: exact in any order) or
        cannot be followed so (a GPU's parallel scan; a complex product, which numpy
        rounds by the loop it picks for the data's layout)."""
        kind = result.dtype.kind
        if name in _EXTREME_SCANS:  # (exact in any order)
            return None
        return result.dtype if kind == "f" or kind == "c" and name == "cumsum" else None

    @staticmethod
    def scan_rounded(a, dtype):
        """``a`` (a scan's running values, carried wider) rounded to the scan's
        ``dtype``."""
        return a.astype(dtype)

    @staticmethod
    def cat(parts, axis):
        return np.concatenate(parts, axis=axis)

    @staticmethod
    def permute(a, axes):
        return a.transpose(axes)

    @staticmethod
    def copy(a):
        return a.copy()

    @staticmethod
    def apart(a, target):
        """``a``, ready to be read while ``target`` is written (``D[1:] = D[:-1]``, ``out=``):
        numpy's assignments and ufuncs copy an operand that overlaps the target
        themselves, so ``a`` as it is."""
        return a

    @staticmethod
    def astype(a, dtype):
        return a.astype(np.dtype(dtype))

    @staticmethod
    def flip(a, axis):
        return np.flip(a, axis)

    @staticmethod
    def host(a):
        return np.asarray(a)

    @staticmethod
    def like(array, a):
        """A host numpy ``array`` as an array of ``a``'s family and device."""
        return array


class _CupyLocal(_NumpyLocal):
    @classmethod
    def empty(cls, shape, dtype, like):
        cupy = _cupy()
        with cupy.cuda.Device(like.device.id):
            return cupy.empty(shape, dtype=np.dtype(dtype))

    @classmethod
    def full(cls, shape, value, dtype, like):
        cupy = _cupy()
        with cupy.cuda.Device(like.device.id):
            return cupy.full(shape, value, dtype=np.dtype(dtype))

    @classmethod
    def asarray(cls, x, like):
        cupy = _cupy()
        with cupy.cuda.Device(like.device.id):
            return cupy.asarray(x)

    @staticmethod
    def host(a):
        return _cupy().asnumpy(a)

    @staticmethod
    def scan_carry(result, name):
        return None

    @staticmethod
    def like(array, a):
        cupy = _cupy()
        with cupy.cuda.Device(a.device.id):
            return cupy.asarray(array)

    @staticmethod
    def apart(a, target):
        """``a``, or a copy of it where it may overlap ``target`` without being the same
        view of it (the same elements in the same layout: ``D *= D`` reads each element
        before writing it): CuPy's kernels read and write in parallel."""
        cupy = _cupy()
        if isinstance(a, cupy.ndarray) and a.size and cupy.may_share_memory(a, target) and \
                (a.shape, a.strides, a.data.ptr) != \
                (target.shape, target.strides, target.data.ptr):
            return a.copy()
        return a


# numpy ufunc names whose torch function has another name
_TORCH_NAMES = {"power": "pow", "equal": "eq", "not_equal": "ne", "conjugate": "conj",
                "absolute": "abs", "invert": "bitwise_not", "left_shift":
                "bitwise_left_shift", "right_shift": "bitwise_right_shift",
                "arctan2": "atan2", "greater": "gt", "greater_equal": "ge", "less": "lt",
                "less_equal": "le", "fmax": "fmax", "fmin": "fmin", "mod": "remainder"}
# numpy reductions and their torch functions (torch's take ``dim`` and ``keepdim``)
_TORCH_REDUCE = {"sum": "sum", "prod": "prod", "max": "amax", "min": "amin",
                 "any": "any", "all": "all"}


_INT_DIVISIONS = frozenset({"floor_divide", "remainder", "fmod"})


def _integral(torch, x):
    """Whether ``x`` (a tensor or a number) holds integers or bools."""
    if isinstance(x, torch.Tensor):
        return not (x.dtype.is_floating_point or x.dtype.is_complex)
    return isinstance(x, (int, np.integer, bool, np.bool_))


def _promoted(torch, tensor, number):
    """The dtype of ``tensor`` combined with a Python or numpy ``number`` (None, torch's
    default, for what torch cannot type)."""
    try:
        return torch.result_type(tensor, number.item() if isinstance(number, np.generic)
                                 else number)
    except (TypeError, RuntimeError):
        return None


class _TorchLocal:
    @staticmethod
    def _dtype(dtype):
        torch = _torch()
        if isinstance(dtype, torch.dtype):  # D.astype(torch.float32)
            return dtype
        if np.dtype(dtype) == BF16_HOST:  # (the numpy stand-in of a bfloat16 tensor's)
            return torch.bfloat16
        return torch.from_numpy(np.empty(0, dtype=np.dtype(dtype))).dtype

    @classmethod
    def empty(cls, shape, dtype, like):
        return _torch().empty(shape, dtype=cls._dtype(dtype), device=like.device)

    @classmethod
    def full(cls, shape, value, dtype, like):
        return _torch().full(shape, value, dtype=cls._dtype(dtype), device=like.device)

    @classmethod
    def asarray(cls, x, like):
        torch = _torch()
        if isinstance(x, torch.Tensor):
            return x.to(like.device)
        return torch.as_tensor(np.asarray(x), device=like.device)

    @staticmethod
    def dtype(a):
        dtype = _torch_dtype(a)
        if dtype is None:
            raise TypeError(f"a tensor of {a.dtype} has no numpy dtype to move as; "
                            f"convert it first (say, with .float())")
        return dtype

    @staticmethod
    def apply(ufunc, method, args, kwargs):
        """The torch function of the same name where torch has one; otherwise numpy's on
        host copies, the result moved back to the first tensor's device."""
        torch = _torch()
        fn = getattr(torch, _TORCH_NAMES.get(ufunc.__name__, ufunc.__name__), None)
        device = next(a.device for a in args if isinstance(a, torch.Tensor))
        if method == "__call__" and ufunc.__name__ in _INT_DIVISIONS and len(args) == 2 \
                and not kwargs and _integral(torch, args[0]) and _integral(torch, args[1]):
            # numpy's integer division by zero gives 0 (and warns); torch's raises, on the
            # worker that holds the zero alone
            divisor = torch.as_tensor(args[1], device=device)
            zero = divisor == 0
            if bool(zero.any()):
                safe = torch.where(zero, torch.ones_like(divisor), divisor)
                result = _TorchLocal.apply(ufunc, method, (args[0], safe), kwargs)
                return torch.where(zero, torch.zeros((), dtype=result.dtype, device=device),
                                   result)
        if method == "__call__" and fn is not None and ufunc.nout == 1 and \
                set(kwargs) <= {"out"}:
            out = kwargs.get("out")
            extra = {} if out is None else {"out": out[0] if isinstance(out, tuple) else out}
            if ufunc in (np.sign, np.heaviside) and isinstance(args[0], torch.Tensor) \
                    and (args[0].is_floating_point() or args[0].is_complex()):
                # torch.sign and torch.heaviside of NaN are 0 or 1 (numpy's are NaN), and
                # torch.sign refuses complex values (numpy 2's sign is z / |z|, torch.sgn)
                plain = torch.sgn if args[0].is_complex() else fn
                fn = lambda x, *v, **o: torch.where(  # noqa: E731
                    torch.isnan(x), x.to(torch.result_type(x, *v) if v else x.dtype),
                    plain(x, *v), **o)
            try:
                result = fn(*args, **extra)
            except TypeError:  # torch.maximum and others take tensors only: 0-d ones, of
                # the dtype numpy's promotion gives (torch.heaviside refuses unlike dtypes)
                first = next(a for a in args if isinstance(a, torch.Tensor))
                result = fn(*[a if isinstance(a, torch.Tensor) else torch.as_tensor(
                    a, dtype=_promoted(torch, first, a), device=device) for a in args],
                    **extra)
            if out is None and isinstance(result, torch.Tensor):
                # as numpy: a new array, never the operand itself (torch.positive) nor a
                # lazy view of it (torch.conj's conjugate bit)
                if result.is_conj():
                    result = result.resolve_conj()
                elif any(isinstance(a, torch.Tensor) and a.numel() and
                         result.data_ptr() == a.data_ptr() for a in args):
                    result = result.clone()
            return result
        def on_host(a):
            return a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else a

        host = [on_host(a) for a in args]
        kwargs = {k: on_host(v) for k, v in kwargs.items()}  # (a where= mask)
        out = kwargs.pop("out", None)
        outs = () if out is None else out if isinstance(out, tuple) else (out,)
        if outs:  # numpy writes into host copies of the outputs, so that what a where=
            # mask leaves out keeps the outputs' values (not a new array's garbage)
            kwargs["out"] = tuple(np.array(on_host(o)) for o in outs)
        result = getattr(ufunc, method)(*host, **kwargs)
        wrap = lambda r: torch.as_tensor(np.asarray(r), device=device)  # noqa: E731
        result = tuple(map(wrap, result)) if isinstance(result, tuple) else wrap(result)
        if outs:
            for o, r in zip(outs, result if isinstance(result, tuple) else (result,)):
                o.copy_(r)
            return out
        return result

    @staticmethod
    def reduce(name, a, axis, keepdims, dtype=None):
        torch = _torch()
        fn = getattr(torch, _TORCH_REDUCE[name])
        extra = {"dtype": _TorchLocal._dtype(dtype)} if dtype is not None else {}
        if axis is None:
            axis = tuple(range(a.dim()))
        axes = axis if isinstance(axis, tuple) else (axis,)
        if name == "prod":  # one dimension at a time
            out = a
            for d in sorted(axes, reverse=True):
                out = torch.prod(out, dim=d, keepdim=keepdims, **extra)
            return out
        if not axes:
            return a.clone()
        return fn(a, dim=axes, keepdim=keepdims, **extra)

    @staticmethod
    def scan(name, a, axis, dtype=None):
        if name in _EXTREME_SCANS:  # (values and indices: the values)
            a = a if dtype is None else a.to(_TorchLocal._dtype(dtype))
            return getattr(_torch(), name)(a, dim=axis).values
        extra = {"dtype": _TorchLocal._dtype(dtype)} if dtype is not None else {}
        return getattr(_torch(), name)(a, dim=axis, **extra)

    scan_from_identity = True  # (0.0 + -0.0 is 0.0: a scan's first element shows it)

    @staticmethod
    def scan_carry(result, name):
        # torch's CPU scans carry floats in a wider type (its acc_type), rounding each
        # output; on a GPU they are parallel; complex products: see numpy's
        if result.is_cuda or name in _EXTREME_SCANS:
            return None
        torch = _torch()
        kinds = {torch.float16: np.float32, torch.bfloat16: np.float32,
                 torch.float32: np.float64, torch.float64: np.float64}
        if name == "cumsum":
            kinds.update({torch.complex64: np.complex128, torch.complex128: np.complex128})
        kind = kinds.get(result.dtype)
        return None if kind is None else np.dtype(kind)

    @staticmethod
    def scan_rounded(a, dtype):
        """``a`` (a scan's running values, carried wider) rounded to the scan's ``dtype``
        as torch's CPU scans round each output: c10's conversion, which makes every
        NaN the positive quiet one for bfloat16 (``Tensor.to`` keeps the sign)."""
        torch = _torch()
        result = a.to(dtype)
        if dtype == torch.bfloat16:
            result = torch.where(torch.isnan(result), torch.full(
                (), float("nan"), dtype=dtype, device=result.device), result)
        return result

    @staticmethod
    def cat(parts, axis):
        return _torch().cat(parts, dim=axis)

    @staticmethod
    def permute(a, axes):
        return a.permute(*axes)

    @staticmethod
    def copy(a):
        return a.clone()

    @staticmethod
    def apart(a, target):
        """``a``, or a clone of it where it shares ``target``'s storage without being the
        same view of it (``D[1:] = D[:-1]``; ``D *= D`` is safe): torch refuses some such
        overlaps and copies others element by element in place, giving wrong values."""
        torch = _torch()
        if isinstance(a, torch.Tensor) and a.numel() and target.numel() and \
                a.untyped_storage().data_ptr() == target.untyped_storage().data_ptr() and \
                (a.shape, a.stride(), a.data_ptr()) != \
                (target.shape, target.stride(), target.data_ptr()):
            return a.clone()
        return a

    @staticmethod
    def astype(a, dtype):
        return a.to(_TorchLocal._dtype(dtype), copy=True)  # a copy, as numpy's astype

    @staticmethod
    def flip(a, axis):
        return _torch().flip(a, dims=(axis,))

    @staticmethod
    def host(a):
        return _Torch.host(Leaf(a, "torch", _torch_dtype(a), tuple(a.shape),
                                a.device if a.is_cuda else None))

    @staticmethod
    def like(array, a):
        return _Torch.wrap(array, ("torch", str(a.device) if a.is_cuda else None))


LOCAL: dict = {"numpy": _NumpyLocal, "torch": _TorchLocal, "cupy": _CupyLocal}


def local_family(array):
    """The name of ``array``'s family if it can be a local part (a numpy array, a torch
    tensor or a CuPy array), else None."""
    if type(array) is np.ndarray:  # the common case, answered without a Leaf
        return None if array.dtype.hasobject else "numpy"
    leaf = classify(array)
    if leaf is None or leaf.family not in LOCAL:
        return None
    return leaf.family
