"""Values as trees of leaves; signatures; packing into one contiguous buffer.

A value is flattened into a *treedef* (its dict / list / tuple structure) and a list of
leaves: ``Leaf`` objects for array-likes (see ``_backends``) and ``Obj`` for anything
else. Collectives compare *signatures* (a deterministic 64-bit digest of structure,
dtypes and shapes) across workers before moving data, and move arrays as raw bytes:
one buffer per dtype for reductions, one byte buffer for everything else.
"""

import hashlib
import pickle
import sys

import numpy as np

from ._backends import classify
from .errors import SpmdTypeError


class Obj:
    """A leaf that is not an array: moved by pickle where the call allows it."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


def flatten(x):
    """``(treedef, leaves)``; treedef is None when ``x`` is a single leaf."""
    leaf = classify(x)
    if leaf is not None:
        return None, [leaf]
    leaves = []
    treedef = _flatten(x, leaves)
    return treedef, leaves


def _flatten(x, leaves):
    kind = type(x)
    if kind is dict or (isinstance(x, dict) and kind.__module__ == "collections"):
        keys = list(x)
        if all(type(k) is str for k in keys):
            keys.sort()
        return ("dict", kind, tuple(keys), tuple(_flatten(x[k], leaves) for k in keys))
    if kind is list:
        return ("list", kind, len(x), tuple(_flatten(v, leaves) for v in x))
    if kind is tuple or (isinstance(x, tuple) and hasattr(kind, "_fields")):
        return ("tuple", kind, len(x), tuple(_flatten(v, leaves) for v in x))
    leaf = classify(x)
    leaves.append(leaf if leaf is not None else Obj(x))
    return None


def unflatten(treedef, leaves):
    """Rebuild a value from ``treedef`` and an iterable of leaf values."""
    it = iter(leaves)
    return _unflatten(treedef, it)


def _unflatten(treedef, it):
    if treedef is None:
        return next(it)
    tag, kind, keys, children = treedef
    values = [_unflatten(child, it) for child in children]
    if tag == "dict":
        return kind(zip(keys, values))
    if tag == "list":
        return values
    if kind is tuple:
        return tuple(values)
    return kind(*values)


def tree_signature(treedef):
    """A hashable, process-independent form of a treedef (type names, not types)."""
    if treedef is None:
        return None
    tag, kind, keys, children = treedef
    name = kind.__qualname__ if kind not in (dict, list, tuple) else tag
    return (name, keys, tuple(tree_signature(c) for c in children))


def leaf_signature(leaf):
    """``(dtype, shape)`` for an array leaf, ``('object', type name)`` for anything else."""
    if type(leaf) is Obj:
        return ("object", type(leaf.value).__qualname__)
    return (leaf.dtype.str, leaf.shape)


_digests = {}


def digest(sig):
    """A deterministic signed 64-bit digest of a signature tuple (same on every worker)."""
    value = _digests.get(sig)
    if value is None:
        raw = hashlib.blake2b(repr(sig).encode(), digest_size=8).digest()
        value = int.from_bytes(raw, "little", signed=True)
        if len(_digests) > 4096:
            _digests.clear()
        _digests[sig] = value
    return value


def dtype_name(dtype):
    from ._backends import BF16_HOST

    return "bfloat16" if dtype == BF16_HOST else dtype.name


def describe_leaf(leaf):
    """A short human description: ``float32 (2, 3) numpy`` or ``str 'abc'``."""
    if type(leaf) is Obj:
        text = repr(leaf.value)
        if len(text) > 40:
            text = text[:37] + "..."
        return f"{type(leaf.value).__name__} {text}"
    shape = "scalar" if leaf.shape == () else str(leaf.shape)
    return f"{dtype_name(leaf.dtype)} {shape} {leaf.family}"


def describe(treedef, leaves):
    """A short account of a value: ``float32 (3,) numpy``, ``dict {b, w} of ...``."""
    if treedef is None:
        return describe_leaf(leaves[0])
    if len(leaves) <= 3:
        inner = ", ".join(describe_leaf(l) for l in leaves)
    else:
        inner = f"{len(leaves)} leaves"
    if treedef[0] == "dict":
        return f"dict {{{', '.join(map(str, treedef[2]))}}} of {inner}"
    return f"{treedef[0]} of {inner}"


def value_fields(treedef, leaves):
    """What a mismatch message compares between workers, field by field."""
    fields = {"structure": repr(tree_signature(treedef))}
    if treedef is not None and treedef[0] == "dict":
        fields["dict keys"] = ", ".join(map(str, treedef[2]))
    arrays = [l for l in leaves if type(l) is not Obj]
    fields["dtype"] = ", ".join(dtype_name(l.dtype) for l in arrays)
    fields["shape"] = ", ".join(str(l.shape) for l in arrays)
    fields["type"] = ", ".join(type(l.value).__name__ for l in leaves)
    return fields


# -- byte packing: [u64 header length | pickled (treedef, specs) | pad | leaf data] --------

_ALIGN = 16


def _aligned(n):
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def dumps(value, call):
    """Pickle a non-array value, or raise SpmdTypeError naming the call and the value."""
    try:
        return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        raise SpmdTypeError(
            f"{call}: cannot send a value of type {type(value).__name__}: "
            f"it is not an array and cannot be pickled ({exc})") from None


def pack(treedef, leaves, call):
    """One contiguous uint8 buffer holding the layout and every leaf's bytes."""
    specs = []
    arrays = []
    offset = 0
    for leaf in leaves:
        if type(leaf) is Obj:
            specs.append(("obj", dumps(leaf.value, call)))
            continue
        array = leaf.host()
        specs.append((leaf.family_info(), array.dtype, array.shape, offset))
        arrays.append((offset, array))
        offset += _aligned(array.nbytes)
    header = dumps((treedef, specs), call)
    start = _aligned(8 + len(header))
    buf = np.empty(start + offset, dtype=np.uint8)
    buf[:8].view(np.uint64)[0] = len(header)
    buf[8:8 + len(header)] = np.frombuffer(header, dtype=np.uint8)
    for off, array in arrays:
        if array.nbytes:
            dest = buf[start + off:start + off + array.nbytes].view(array.dtype)
            np.copyto(dest.reshape(array.shape), array)
    return buf


def unpack(buf, *, raw=False):
    """Inverse of ``pack``. With ``raw`` leaves stay host numpy arrays (no family rebuild).

    Leaves are views into ``buf``; callers pass a buffer nobody else will reuse.
    """
    from ._backends import FAMILIES

    buf = np.asarray(buf, dtype=np.uint8)
    hlen = int(buf[:8].view(np.uint64)[0])
    treedef, specs = pickle.loads(buf[8:8 + hlen].tobytes())
    start = _aligned(8 + hlen)
    values = []
    for spec in specs:
        if spec[0] == "obj":
            values.append(pickle.loads(spec[1]))
            continue
        info, dtype, shape, off = spec
        count = int(np.prod(shape, dtype=np.int64))
        array = np.frombuffer(buf, dtype=dtype, count=count, offset=start + off)
        array = array.reshape(shape)
        values.append(array if raw else FAMILIES[info[0]].wrap(array, info))
    return treedef, specs, values


# -- result buffers that are recycled once the user has dropped every view of them ----------

_POOL_MIN_BYTES = 1 << 16


def _refcounts_tell_views():
    """Whether ``sys.getrefcount`` counts a live view of an array the way the pools
    assume (3 references when idle, more with a view alive). Checked once at import:
    an interpreter that counts otherwise (borrowed references, a future optimisation)
    turns recycling off instead of handing out memory a result still uses."""
    bases = [np.empty(1)]
    for base in bases:
        idle = sys.getrefcount(base)
    view = bases[0][:]
    for base in bases:
        busy = sys.getrefcount(base)
    del view
    return idle == 3 and busy > 3


RECYCLE = _refcounts_tell_views()


class ResultPool:
    """Host result buffers reused across calls once no result view of them is alive.

    ``g = spmd_plus(g)`` in a loop allocates two buffers and then alternates between
    them: a buffer is handed out again only when ``sys.getrefcount`` shows that no
    array, view or tensor made from it is still alive, so a result is never
    overwritten while the user can see it. Small buffers are not pooled.
    """

    def __init__(self, per_key=3, max_keys=16):
        self._bases = {}
        self._per_key = per_key
        self._max_keys = max_keys

    def empty(self, dtype, count):
        if count * dtype.itemsize < _POOL_MIN_BYTES or not RECYCLE:
            return np.empty(count, dtype=dtype)
        key = (dtype, count)
        bases = self._bases.pop(key, None)
        if bases is None:
            bases = []
            if len(self._bases) >= self._max_keys:
                self._bases.pop(next(iter(self._bases)))
        self._bases[key] = bases  # most recently used last
        for base in bases:
            # references: the list, the loop variable and getrefcount's argument
            if sys.getrefcount(base) == 3:
                return base
        base = np.empty(count, dtype=dtype)
        if len(bases) < self._per_key:
            bases.append(base)
        return base


results = ResultPool()


class Scratch:
    """Send-side staging buffers, never handed to the user, so always reusable."""

    def __init__(self):
        self._bufs = {}

    def empty(self, dtype, count, use=0):
        """A buffer for ``count`` items of ``dtype``; ``use`` keeps apart buffers that
        one call needs at the same time."""
        key = (dtype, count, use)
        buf = self._bufs.get(key)
        if buf is None:
            if len(self._bufs) > 16:
                self._bufs.clear()
            buf = self._bufs[key] = np.empty(count, dtype=dtype)
        return buf


scratch = Scratch()
