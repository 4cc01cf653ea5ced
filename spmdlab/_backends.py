"""Array families: one adapter each for Python scalars, numpy, torch and CuPy.

An adapter knows how to expose a value's bytes to MPI (on the host, or on the device
when the MPI library is CUDA-aware), how to synchronize its stream before MPI touches
device memory, and how to wrap a result in the same family, dtype and device.
New families plug in here and nowhere else. torch and CuPy are never imported by
spmdlab: a value is recognised as theirs only if the user's program imported them.
"""

import sys

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
    def wrap(array, info):
        torch = _torch()
        if array.dtype == BF16_HOST:
            tensor = torch.from_numpy(np.ascontiguousarray(array).view(np.int16))
            tensor = tensor.view(torch.bfloat16)
        else:
            tensor = torch.from_numpy(array if array.flags.writeable else array.copy())
        device = info[1]
        if device is not None:
            tensor = tensor.to(device)
        return tensor


class _Cupy:
    @staticmethod
    def host(leaf):
        sync_device(leaf)
        return _cupy().asnumpy(leaf.value)

    @staticmethod
    def wrap(array, info):
        cupy = _cupy()
        with cupy.cuda.Device(int(info[1])):
            return cupy.asarray(array)


FAMILIES = {"py-bool": _Python, "py-int": _Python, "py-float": _Python,
            "py-complex": _Python, "np-scalar": _NumpyScalar, "numpy": _Numpy,
            "torch": _Torch, "cupy": _Cupy}

# A numpy stand-in for torch.bfloat16: same size, never summed by numpy (see _Torch).
BF16_HOST = np.dtype([("bfloat16", np.int16)])


def _torch():
    return sys.modules["torch"]


def _cupy():
    return sys.modules["cupy"]


_TORCH_DTYPES: dict = {}


def _torch_dtype(tensor):
    key = tensor.dtype
    dtype = _TORCH_DTYPES.get(key)
    if dtype is None:
        if str(key) == "torch.bfloat16":
            dtype = BF16_HOST
        else:
            dtype = np.dtype(_torch().empty((), dtype=key).numpy().dtype)
        _TORCH_DTYPES[key] = dtype
    return dtype


def classify(x):
    """A ``Leaf`` for an array-like value, or None for anything else (containers, objects)."""
    kind = type(x)
    dtype = _PY_DTYPES.get(kind)
    if dtype is not None:
        if kind is int and not _INT64_MIN <= x <= _INT64_MAX:
            return None
        return Leaf(x, _PY_NAMES[kind], dtype, ())
    if isinstance(x, np.ndarray):
        if x.dtype.hasobject:
            return None
        return Leaf(x, "numpy", x.dtype, x.shape)
    if isinstance(x, np.generic):
        if x.dtype.hasobject:
            return None
        return Leaf(x, "np-scalar", x.dtype, ())
    module = kind.__module__
    if module.startswith("torch"):
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(x, torch.Tensor):
            device = x.device if x.is_cuda else None
            return Leaf(x, "torch", _torch_dtype(x), tuple(x.shape), device)
    elif module.startswith("cupy"):
        cupy = sys.modules.get("cupy")
        if cupy is not None and isinstance(x, cupy.ndarray):
            return Leaf(x, "cupy", x.dtype, x.shape, x.device.id)
    return None


_PY_NAMES = {bool: "py-bool", int: "py-int", float: "py-float", complex: "py-complex"}


def sync_device(leaf):
    """Wait for the leaf's current stream so that MPI reads finished data."""
    if leaf.family == "torch":
        _torch().cuda.current_stream(leaf.value.device).synchronize()
    elif leaf.family == "cupy":
        _cupy().cuda.get_current_stream().synchronize()


_cuda_aware = None


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
