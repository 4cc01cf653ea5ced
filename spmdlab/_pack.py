"""Values as trees of leaves; signatures; packing into one contiguous buffer.

A value is flattened into a *treedef* (its dict / list / tuple structure) and a list of
leaves: ``Leaf`` objects for array-likes (see ``_backends``) and ``Obj`` for anything
else. Collectives compare *signatures* (a deterministic 64-bit digest of structure,
dtypes and shapes) across workers before moving data, and move arrays as raw bytes:
one buffer per dtype for reductions, one byte buffer for everything else.
"""

import functools
import hashlib
import io
import pickle
import struct
import sys
import threading

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


_digests: dict = {}


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


# -- messages: the one framing of point-to-point, queues, broadcast and gathers -----------
#
# A message is the value's *skeleton* (its dict / list / tuple structure, and for each
# array leaf its family, dtype, shape and device; other objects pickled in it) followed
# by every array leaf's raw bytes, each 16-byte aligned. Arrays never go through pickle
# and come back as views of the received buffer (no copy); tensors and CuPy arrays travel
# as host bytes and are rebuilt in their family, dtype and device kind. A skeleton with
# no pickled object depends only on the value's structure, so both sides keep it, found
# by its digest: a struct or an array sent every iteration costs a look-up, not a pickle.
# A message is a bytes-like object (``len`` is its size). Formats, by the first byte:
#   3     [u8 3 | u8 flags | pad | u32 skeleton length | u64 skeleton digest | skeleton |
#          pad to 16 | leaves, each padded to 16]
#   2     a batch of messages: [u8 2 | pad | u32 count | u64 sizes[count] | messages]

_ALIGN = 16
_HEAD = struct.Struct("<BBxxIq")  # format, flags, skeleton length, skeleton digest
_BATCH = struct.Struct("<B3xI")  # format, number of messages
_KEPT = 1  # flag: the skeleton has no pickled object (both sides keep it)
_APART = 2  # flag: the leaves follow as a second message (a large array sent in place)
_SMALL = 1 << 16  # messages up to this size are built by joining bytes


def _aligned(n):
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def _rebuild(info, array):
    from ._backends import FAMILIES

    return FAMILIES[info[0]].wrap(array, info)


class _Pickler(pickle.Pickler):
    """Pickles the objects of a skeleton: a tensor or CuPy array inside an object of the
    user's travels as host bytes and is rebuilt in its family."""

    def reducer_override(self, obj):  # never called for exact ints, strs, lists, ...
        if type(obj).__module__.startswith(("torch", "cupy")):
            leaf = classify(obj)
            if leaf is not None:
                array = leaf.host()
                if not array.flags.c_contiguous:
                    array = array.copy()
                return _rebuild, (leaf.family_info(), array)
        return NotImplemented


def _dumps(obj):
    out = io.BytesIO()
    _Pickler(out, protocol=5).dump(obj)
    return out.getvalue()


_BYTE = np.dtype(np.uint8)
_SCALARS = {float: struct.Struct("<d"), int: struct.Struct("<q"), bool: struct.Struct("<?"),
            complex: struct.Struct("<dd")}
_SCALAR_FAMILIES = {"py-float": _SCALARS[float], "py-int": _SCALARS[int],
                    "py-bool": _SCALARS[bool], "py-complex": _SCALARS[complex]}


def _message_tree(x, leaves):
    """A message's structure, dict order kept; leaves: ``Leaf`` for values sent as raw
    bytes (exact numpy arrays and scalars, Python numbers, tensors, CuPy arrays),
    ``Obj`` for anything else (pickled in the skeleton)."""
    kind = type(x)
    if kind is dict:
        keys = tuple(x)
        return ("dict", kind, keys, tuple(_message_tree(x[k], leaves) for k in keys))
    if kind is list:
        return ("list", kind, len(x), tuple(_message_tree(v, leaves) for v in x))
    if kind is tuple or (isinstance(x, tuple) and hasattr(kind, "_fields")):
        return ("tuple", kind, len(x), tuple(_message_tree(v, leaves) for v in x))
    leaf = classify(x)
    if leaf is None or (leaf.family in ("numpy", "np-scalar") and
                        type(x).__module__ != "numpy"):  # subclasses keep their class
        leaves.append(Obj(x))
    else:
        leaves.append(leaf)
    return None


def _meta(leaf):
    """How a leaf is rebuilt: (family info, dtype, shape, Fortran order)."""
    fortran = leaf.family == "numpy" and leaf.value.ndim > 1 and \
        leaf.value.flags.f_contiguous and not leaf.value.flags.c_contiguous
    return (leaf.family_info(), leaf.dtype, leaf.shape, fortran)


def _prod(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def _layout(metas, start):
    offsets, at = [], start
    for meta in metas:
        offsets.append(at)
        if meta is not None:
            at = _aligned(at + meta[1].itemsize * _prod(meta[2]))
    return offsets, at


class _Skeleton:
    """A message's prefix (header, skeleton, padding), where its leaves go, and, for a
    message of one numpy array or one number, how to read it back in one step."""

    __slots__ = ("prefix", "offsets", "total", "tree", "metas", "objs", "array", "number",
                 "fast")

    def __init__(self, tree, metas, objs, skeleton=None):
        if skeleton is None:
            skeleton = _dumps((tree, metas, objs))
        start = _aligned(_HEAD.size + len(skeleton))
        head = _HEAD.pack(3, 0 if objs else _KEPT, len(skeleton), digest(skeleton))
        self.prefix = head + skeleton + bytes(start - _HEAD.size - len(skeleton))
        self.offsets, self.total = _layout(metas, start)
        self.tree, self.metas, self.objs = tree, metas, objs
        self.array = self.number = None
        if tree is None and metas[0] is not None:
            info, dtype, shape, fortran = metas[0]
            if info[0] == "numpy" or info == ("torch", None):
                self.array = (shape, dtype, start, "F" if fortran else "C", info[0])
            elif info[0] in ("py-float", "py-int"):
                self.number = (_SCALAR_FAMILIES[info[0]], start)
        # a message of one numpy array or one number: its value in one call
        self.fast = None
        if self.array is not None and self.array[4] == "numpy" and not fortran:
            self.fast = functools.partial(np.ndarray, shape, dtype, offset=start)
        elif self.number is not None:
            self.fast = functools.partial(_number, self.number[0].unpack_from,
                                          offset=start)


def _number(unpack, buf, offset):
    return unpack(buf, offset)[0]


_ENCODED: dict = {}  # (tree, metas) -> _Skeleton, for skeletons without objects
_DECODED: dict = {}  # (skeleton digest, skeleton length) -> _Skeleton
_FAST: dict = {}  # skeleton digest -> (length, the value in one call) for one array/number


def _kept(cache, key, make):
    entry = cache.get(key)
    if entry is None:
        if len(cache) > 4096:
            cache.clear()
        entry = cache[key] = make()
    return entry


def _leaf_bytes(leaf, fortran):
    """A leaf's raw bytes (C order, or Fortran order for a Fortran-ordered array)."""
    fmt = _SCALARS.get(type(leaf.value))
    if fmt is not None and leaf.family.startswith("py-"):
        value = leaf.value
        return fmt.pack(value.real, value.imag) if type(value) is complex else fmt.pack(value)
    return leaf.host().tobytes(order="F" if fortran else "C")


def _one_array(x):
    """The skeleton of a message that is one C-ordered numpy array."""
    return _kept(_ENCODED, (x.dtype, x.shape), lambda: _Skeleton(
        None, ((("numpy", None), x.dtype, x.shape, False),), []))


def _plain_tensor(t):
    """A torch CPU tensor that is its own contiguous numpy view (no grad, no conj bit,
    not bfloat16)."""
    import torch

    return type(t) is torch.Tensor and t.device.type == "cpu" and t.is_contiguous() and \
        not t.requires_grad and not t.is_conj() and not t.is_neg() and \
        t.dtype != torch.bfloat16 and t.layout == torch.strided


def _one_tensor(array):
    return _kept(_ENCODED, ("torch", array.dtype, array.shape), lambda: _Skeleton(
        None, ((("torch", None), array.dtype, array.shape, False),), []))


def _one_number(kind, x):
    entry = _ENCODED.get(kind)
    if entry is None:
        entry = _kept(_ENCODED, kind, lambda: _Skeleton(None, (_meta(classify(x)),), []))
    return entry


def encode(value, call):
    """One message holding ``value`` (a bytes-like object, writable where it holds an
    array); raises SpmdTypeError naming ``call`` (a string, or a function that returns
    one: it is made only for the error) when an object in it cannot be pickled."""
    kind = type(value)
    if kind is np.ndarray:  # tobytes gives C order whatever the strides: only a Fortran-
        # ordered array (2-D or more) takes the general way, which keeps its order
        entry = _ENCODED.get((value.dtype, value.shape))
        if entry is not None and entry.total <= _SMALL and (value.ndim < 2 or
                                                            value.flags.c_contiguous):
            return bytearray(entry.prefix) + value.tobytes()
    if kind is np.ndarray and value.flags.c_contiguous and not value.dtype.hasobject:
        entry = _ENCODED.get((value.dtype, value.shape)) or _one_array(value)
        if entry.total <= _SMALL:
            return bytearray(entry.prefix) + value.tobytes()
        message = results.empty(_BYTE, entry.total)  # recycled: no fresh pages to fault in
        start = len(entry.prefix)
        message[:start] = np.frombuffer(entry.prefix, dtype=np.uint8)
        message[start:start + value.nbytes].view(value.dtype).reshape(value.shape)[...] = \
            value
        return message
    if kind.__module__ == "torch" and _plain_tensor(value):
        array = value.numpy()
        entry = _ENCODED.get(("torch", array.dtype, array.shape)) or _one_tensor(array)
        if entry.total <= _SMALL:
            return bytearray(entry.prefix) + array.tobytes()
    fmt = _SCALARS.get(kind)
    if fmt is not None and kind is not complex and (kind is not int or
                                                     -2 ** 63 <= value < 2 ** 63):
        return _one_number(kind, value).prefix + fmt.pack(value)
    leaves = []
    tree = _message_tree(value, leaves)
    metas = tuple(None if type(l) is Obj else _meta(l) for l in leaves)
    objs = [l.value for l in leaves if type(l) is Obj]
    try:
        entry = _Skeleton(tree, metas, objs) if objs else \
            _kept(_ENCODED, (tree, metas), lambda: _Skeleton(tree, metas, objs))
    except Exception as exc:
        call = call() if callable(call) else call
        raise SpmdTypeError(f"{call}: cannot send a value of type {type(value).__name__}: "
                            f"it cannot be pickled ({exc})") from None
    if entry.total <= _SMALL:
        parts = [entry.prefix]
        at = len(entry.prefix)
        for leaf, meta, offset in zip(leaves, metas, entry.offsets):
            if meta is not None:
                if offset > at:
                    parts.append(bytes(offset - at))
                data = _leaf_bytes(leaf, meta[3])
                parts.append(data)
                at = offset + len(data)
        parts.append(bytes(entry.total - at))
        return bytearray(b"".join(parts))
    message = results.empty(_BYTE, entry.total)  # large: one copy of each array
    message[:len(entry.prefix)] = np.frombuffer(entry.prefix, dtype=np.uint8)
    for leaf, meta, offset in zip(leaves, metas, entry.offsets):
        if meta is None:
            continue
        nbytes = meta[1].itemsize * _prod(meta[2])
        if leaf.family.startswith("py-"):
            message[offset:offset + nbytes] = np.frombuffer(_leaf_bytes(leaf, False),
                                                            dtype=np.uint8)
            continue
        host = leaf.host()
        target = message[offset:offset + nbytes].view(host.dtype)
        if meta[3]:
            target.reshape(host.shape[::-1])[...] = host.T
        else:
            target.reshape(host.shape)[...] = host
    return message


def head_apart(x, seq):
    """For a large C-ordered numpy array sent from its own memory: the first message (the
    prefix, flagged "the array's bytes follow as a second message", then ``seq``, the
    number the receiver's clear-to-send answers with)."""
    prefix = (_ENCODED.get((x.dtype, x.shape)) or _one_array(x)).prefix
    return bytes([prefix[0], prefix[1] | _APART]) + prefix[2:] + _SEQ.pack(seq)


_SEQ = struct.Struct("<q")


def apart(buf):
    """``(total, start, seq)`` when ``buf`` is a first message whose array follows apart
    (the whole message's size, where the array starts, the sender's number), else None."""
    _, flags, length, key = _HEAD.unpack_from(buf, 0)
    if not flags & _APART:
        return None
    entry = _DECODED.get((key, length))
    if entry is None:
        skeleton = bytes(memoryview(buf)[_HEAD.size:_HEAD.size + length])
        tree, metas, objs = pickle.loads(skeleton)
        entry = _kept(_DECODED, (key, length), lambda: _Skeleton(tree, metas, objs, skeleton))
    start = len(buf) - _SEQ.size
    return entry.total, start, _SEQ.unpack_from(buf, start)[0]


def decode(buf):
    """The value of one message; arrays are views of ``buf``.

    A kept skeleton is found by its 64-bit BLAKE2 digest and length: two different
    skeletons share both with odds of 1 in 2**64, far below a machine's own error rates.
    """
    fmt, flags, length, key = _HEAD.unpack_from(buf, 0)
    fast = _FAST.get(key)
    if fast is not None and fast[0] == length and fmt == 3:
        return fast[1](buf)
    if fmt != 3:
        raise ValueError(f"not a spmdlab message (format {fmt})")
    entry = _DECODED.get((key, length)) if flags & _KEPT else None
    if entry is None:
        skeleton = bytes(memoryview(buf)[_HEAD.size:_HEAD.size + length])
        tree, metas, objs = pickle.loads(skeleton)
        entry = _Skeleton(tree, metas, objs, skeleton)
        if flags & _KEPT:
            _kept(_DECODED, (key, length), lambda: entry)
            if entry.fast is not None and not flags & _APART:
                _kept(_FAST, key, lambda: (length, entry.fast))
    if entry.array is not None:
        shape, dtype, offset, order, family = entry.array
        array = np.ndarray(shape, dtype, buf, offset, order=order)
        return array if family == "numpy" else _rebuild(("torch", None), array)
    if entry.number is not None:
        return entry.number[0].unpack_from(buf, entry.number[1])[0]
    values = []
    pending = iter(entry.objs)
    for meta, offset in zip(entry.metas, entry.offsets):
        if meta is None:
            values.append(next(pending))
            continue
        info, dtype, shape, fortran = meta
        family = info[0]
        scalar = _SCALAR_FAMILIES.get(family)
        if scalar is not None:
            value = scalar.unpack_from(buf, offset)
            values.append(complex(*value) if family == "py-complex" else
                          bool(value[0]) if family == "py-bool" else value[0])
            continue
        array = np.ndarray(shape, dtype, buf, offset, order="F" if fortran else "C")
        values.append(array if family == "numpy" else _rebuild(info, array))
    if entry.tree is None:
        return values[0]
    return unflatten(entry.tree, values)


def batch(messages):
    """One message carrying several (each stays 16-byte aligned)."""
    sizes = [memoryview(m).nbytes for m in messages]
    start = _aligned(_BATCH.size + 8 * len(sizes))
    out = np.empty(start + sum(_aligned(n) for n in sizes), dtype=np.uint8)
    _BATCH.pack_into(out, 0, 2, len(sizes))
    out[_BATCH.size:_BATCH.size + 8 * len(sizes)].view(np.uint64)[:] = sizes
    for message, size in zip(messages, sizes):
        out[start:start + size] = np.frombuffer(message, dtype=np.uint8)
        start += _aligned(size)
    return out


def messages(buf):
    """The messages in ``buf``: the batch's, or ``buf`` itself."""
    view = memoryview(buf).cast("B")
    if view[0] != 2:
        return [view]
    _, count = _BATCH.unpack_from(view, 0)
    sizes = struct.unpack_from(f"<{count}Q", view, _BATCH.size)
    start = _aligned(_BATCH.size + 8 * count)
    out = []
    for size in sizes:
        out.append(view[start:start + size])
        start += _aligned(size)
    return out


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
