"""Values as trees of leaves; signatures; packing into one contiguous buffer.

A value is flattened into a *treedef* (its dict / list / tuple structure) and a list of
leaves: ``Leaf`` objects for array-likes (see ``_backends``) and ``Obj`` for anything
else. Collectives compare *signatures* (a deterministic 64-bit digest of structure,
dtypes and shapes) across workers before moving data, and move arrays as raw bytes:
one buffer per dtype for reductions, one byte buffer for everything else.
"""

import functools
import hashlib
import importlib
import io
import pickle
import struct
import sys
import threading

import numpy as np

from ._backends import BF16_HOST, FAMILIES, _arrival_device, classify
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
    return (dtype_key(leaf.dtype), leaf.shape)


_digests: dict = {}


def digest(sig):
    """A deterministic signed 64-bit digest of a signature tuple (same on every worker).

    Signatures that compare equal get the same digest whatever their numbers' types
    (``1``, ``np.int64(1)``, ``1.0``: see ``_canonical``): the cache finds one by
    another, so a digest made from their different texts would depend on which one
    this worker met first (a worker number as a numpy int after a call with an int
    gave another key than on a worker that had not made that call)."""
    value = _digests.get(sig)
    if value is None:
        raw = hashlib.blake2b(repr(_canonical(sig)).encode(), digest_size=8).digest()
        value = int.from_bytes(raw, "little", signed=True)
        if len(_digests) > 4096:
            _digests.clear()
        _digests[sig] = value
    return value


def content_digest(data):
    """A short text digest of ``data``'s bytes (a bytes-like object), the same on every
    worker: for values compared by their contents, not kept in ``digest``'s cache."""
    return hashlib.blake2b(data, digest_size=8).hexdigest()


def _canonical(sig):
    """``sig`` with every number as the plain Python number it equals (an int where it
    is one), every string, tuple and list as a plain one (a ``np.str_``, a named tuple)
    and every set's members in order, so that equal signatures have the same text."""
    kind = type(sig)
    if kind is str or sig is None:
        return sig
    if isinstance(sig, (tuple, list)):
        return (list if isinstance(sig, list) else tuple)(_canonical(v) for v in sig)
    if isinstance(sig, (str, bytes)):
        return str(sig) if isinstance(sig, str) else bytes(sig)
    if isinstance(sig, (set, frozenset)):  # (their order follows the per-process hashes)
        return ("frozenset", tuple(sorted(repr(_canonical(v)) for v in sig)))
    if isinstance(sig, (complex, np.complexfloating)):
        if sig.imag:
            return complex(sig)
        sig = sig.real  # (1+0j == 1)
    if isinstance(sig, (bool, int, float, np.number, np.bool_)):
        try:
            if sig == int(sig):  # (NaN and infinities raise)
                return int(sig)
        except (ValueError, OverflowError):
            pass
        return float(sig)
    return sig


def dtype_name(dtype):
    if dtype == BF16_HOST:
        return "bfloat16"
    if dtype.fields is not None:  # a structured dtype: its fields (its name is "voidN")
        return str(dtype)
    if dtype.byteorder in "<>":  # (never "<" or ">" for the machine's own order)
        return f"{dtype.name} ({'big' if dtype.byteorder == '>' else 'little'}-endian)"
    return dtype.name


def dtype_key(dtype):
    """What workers compare of a dtype: its ``str``, which for a structured dtype is
    only its size (``|V12``), so its fields too."""
    return dtype.str if dtype.fields is None else repr(dtype.descr)


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
    if not leaves:
        return f"empty {treedef[0]}"
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
# A message is a bytes-like object (``len`` is its size), in one of three formats, told
# apart by the first byte:
#   0x80  a plain pickle: a value with no array in it (the common small item; pickle is
#         C-fast for Python's own types);
#   1     a pickle whose arrays travel out of band, their bytes after it, 16-byte aligned,
#         coming back as views of the received buffer (no copy); tensors and CuPy arrays
#         inside travel as host arrays and are rebuilt in their family, dtype and device:
#         [u8 1 | pad | u32 count | u64 pickle length | u64 sizes[count] | pickle | arrays]
#   3     one array, tensor or number and nothing else (what a halo exchange or a solver
#         sends every iteration): a small header, then its raw bytes. The header describes
#         the leaf (family, dtype, shape) as a pickled *skeleton*; both sides keep it,
#         found by its digest, so sending the same kind of value again costs a look-up:
#         [u8 3 | u8 flags | pad | u32 skeleton length | u64 skeleton digest | skeleton |
#          pad to 16 | the leaf's bytes]
#   2     a batch of messages: [u8 2 | pad | u32 count | u64 sizes[count] | messages]
#   4     point-to-point only: the message is larger than a receiver's inbox (see p2p) and
#         follows, whole, as the next message of the same sender and tag: [u8 4 | pad |
#         u64 its size]

_ALIGN = 16
_HEAD1 = struct.Struct("<B3xIQ")  # format 1: number of arrays, length of the pickle
_HEAD = struct.Struct("<BBxxIq")  # format 3: flags, skeleton length, skeleton digest
_BATCH = struct.Struct("<B3xI")  # format 2: number of messages
_FOLLOWS = struct.Struct("<B7xQ")  # format 4
_APART = 2  # format 3 flag: the leaf's bytes follow as a second message (see p2p)
_SMALL = 1 << 16  # format 3 messages up to this size are built by joining bytes
# (point-to-point's up to this much more: an array of _SMALL bytes with its header, which
# a receiver's inbox holds)
HEADROOM = 4096
_JOIN_VIEW = 1 << 13  # from this size they join the array's memory, not a copy of it
_BYTE = np.dtype(np.uint8)


def _aligned(n):
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def _rebuild(info, array, grad=None):
    return _as_sent(FAMILIES[info[0]].wrap(array, info), grad)


def _grad_of(tensor, torch):
    """What a tensor's pickle must carry besides its data to arrive as it was sent: None
    for a plain tensor without grad, else (whether it is an ``nn.Parameter``, its
    ``requires_grad``)."""
    parameter = isinstance(tensor, torch.nn.Parameter)
    if not parameter and not tensor.requires_grad:
        return None
    return parameter, tensor.requires_grad


def _as_sent(tensor, grad):
    """An arrived tensor as it was sent: an ``nn.Parameter`` again, or requiring grad
    (as torch's own pickle gives it; the graph it came from stays with the sender)."""
    if grad is None:
        return tensor
    parameter, requires_grad = grad
    if parameter:
        return sys.modules["torch"].nn.Parameter(tensor, requires_grad=requires_grad)
    return tensor.requires_grad_(requires_grad)


def wire_info(leaf):
    """A leaf's family as a message carries it: a GPU value arrives on the receiver's
    current GPU (MATLAB's: a gpuArray lands on the worker's selected device), not on
    the sender's device number, which means nothing in another process."""
    info = leaf.family_info()
    return info if info[1] is None else (info[0], "cuda")


def _rebuild_bytes(dtype, shape, device, array, grad=None):
    """A tensor of a dtype numpy has none for, from its bytes (see ``_Pickler``)."""
    torch = sys.modules.get("torch") or importlib.import_module("torch")
    tensor = torch.from_numpy(array).view(getattr(torch, dtype)).reshape(shape)
    # a message's GPU tensor lands on this worker's GPU, as format 3's do
    if device is not None:
        tensor = tensor.to(_arrival_device(("torch", device)))
    return _as_sent(tensor, grad)


def _swapped_back(array, dtype):
    """A byte-swapped array sent in the machine's order (see ``_Pickler``), as it was."""
    return array.astype(dtype)


class _Pickler(pickle.Pickler):
    def reducer_override(self, obj):  # never called for exact ints, strs, lists, ...
        if isinstance(obj, np.ndarray):
            if obj.dtype.byteorder == _SWAPPED:
                # numpy's own pickle gives a byte-swapped array back in the machine's
                # order whenever it does not pass the array's buffer as it is (strided,
                # a datetime, a subclass: a '>f8' view arrived as float64): it travels
                # in the machine's order, and is swapped back on arrival
                return _swapped_back, (obj.astype(obj.dtype.newbyteorder("="), order="A"),
                                       obj.dtype.str)
            return NotImplemented
        if type(obj).__module__.startswith(("torch", "cupy")):
            torch = sys.modules.get("torch")
            tensor = torch is not None and isinstance(obj, torch.Tensor)
            if tensor and obj.layout != torch.strided:
                # a sparse tensor: torch's own pickle (its parts come back here), which
                # drops requires_grad and the Parameter: kept as for a dense one
                grad = _grad_of(obj, torch)
                if grad is None:
                    return NotImplemented
                return _as_sent, (obj.detach(), grad)
            leaf = classify(obj)
            if leaf is not None:
                array = leaf.host()
                if not array.flags.c_contiguous:
                    array = array.copy()
                return _rebuild, (wire_info(leaf), array,
                                  _grad_of(obj, torch) if tensor else None)
            if tensor and not obj.is_quantized and obj.layout == torch.strided and \
                    not obj.is_nested:  # (a nested tensor: torch's own pickle)
                # a dtype numpy has none for (float8, complex32): its bytes, viewed back
                # on arrival (torch's own pickle of a float8 tensor fails to load)
                t = obj.detach().resolve_conj().contiguous().reshape(-1)
                array = t.view(torch.uint8).cpu().numpy()
                device = None if not t.is_cuda else "cuda"
                return _rebuild_bytes, (str(t.dtype).split(".")[-1], tuple(obj.shape),
                                        device, array, _grad_of(obj, torch))
        return NotImplemented


class _Encoder(threading.local):
    """A pickler per thread, reused (making one costs more than pickling a small item)."""

    def __init__(self):
        self.file = io.BytesIO()
        self.buffers = []
        self.pickler = _Pickler(self.file, protocol=5, buffer_callback=self.buffers.append)


_encoder = _Encoder()


def _pickled(value, call):
    """Formats 0x80 and 1."""
    enc = _encoder
    enc.file.seek(0)
    enc.file.truncate()
    enc.buffers.clear()
    enc.pickler.clear_memo()
    try:
        enc.pickler.dump(value)
    except Exception as exc:
        _encoder.__init__()  # a pickler that failed half-way is not reused
        call = call() if callable(call) else call
        raise SpmdTypeError(f"{call}: cannot send a value of type {type(value).__name__}: "
                            f"it cannot be pickled ({exc})") from None
    head = enc.file.getvalue()
    if not enc.buffers:
        return bytearray(head)
    raws = [b.raw() for b in enc.buffers]
    enc.buffers.clear()  # the pickle buffers hold the caller's arrays
    count = len(raws)
    used = _HEAD1.size + 8 * count + len(head)
    parts = [_HEAD1.pack(1, count, len(head)),
             struct.pack(f"<{count}Q", *[r.nbytes for r in raws]), head,
             _PAD[:_aligned(used) - used]]
    for raw in raws:  # (one join: a small dict of arrays costs half of numpy's copies)
        parts.append(raw)
        parts.append(_PAD[:_aligned(raw.nbytes) - raw.nbytes])
    return bytearray().join(parts)


_PAD = bytes(_ALIGN)
_SWAPPED = ">" if sys.byteorder == "little" else "<"  # (a dtype's byteorder)


def _unpickled(view):
    if view[0] != 1:
        return pickle.loads(view)
    _, count, hlen = _HEAD1.unpack_from(view, 0)
    sizes = struct.unpack_from(f"<{count}Q", view, _HEAD1.size)
    head = view[_HEAD1.size + 8 * count:_HEAD1.size + 8 * count + hlen]
    start = _aligned(_HEAD1.size + 8 * count + hlen)
    buffers = []
    for size in sizes:
        buffers.append(view[start:start + size])
        start += _aligned(size)
    return pickle.loads(head, buffers=buffers)


_SCALARS = {float: struct.Struct("<d"), int: struct.Struct("<q"), bool: struct.Struct("<?")}


class _Leaf:
    """The header of a format-3 message (one leaf) and how to read the leaf back: its
    prefix (header, skeleton, padding), the message's size, the value in one call."""

    __slots__ = ("prefix", "total", "read")

    def __init__(self, info, dtype, shape, skeleton=None):
        if skeleton is None:
            skeleton = pickle.dumps((info, dtype, shape), protocol=5)
        start = _aligned(_HEAD.size + len(skeleton))
        head = _HEAD.pack(3, 0, len(skeleton), digest(skeleton))
        self.prefix = head + skeleton + bytes(start - _HEAD.size - len(skeleton))
        self.total = start + dtype.itemsize * _prod(shape)
        family = info[0]
        # (closures: a partial with a keyword argument costs twice as much to call)
        if family == "numpy":
            self.read = lambda buf, nd=np.ndarray: nd(shape, dtype, buf, start)
        elif family in ("py-float", "py-int", "py-bool"):
            unpack = _SCALAR_STRUCTS[family].unpack_from
            self.read = lambda buf: unpack(buf, start)[0]
        elif family == "np-scalar":
            self.read = functools.partial(_np_scalar, dtype, start)
        elif family == "torch" and info[1] is None and dtype != BF16_HOST:
            # a CPU tensor: torch's own view of the buffer (writable: a receive's)
            self.read = functools.partial(_cpu_tensor, importlib.import_module(
                "torch").from_numpy, shape, dtype, start)
        else:  # torch elsewhere, CuPy: rebuilt in the family, on its device kind
            self.read = functools.partial(_in_family, info, shape, dtype, start)


_SCALAR_STRUCTS = {"py-float": _SCALARS[float], "py-int": _SCALARS[int],
                   "py-bool": _SCALARS[bool]}


def _prod(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def _np_scalar(dtype, offset, buf):
    return np.ndarray((), dtype, buf, offset)[()]


def _cpu_tensor(from_numpy, shape, dtype, offset, buf):
    array = np.ndarray(shape, dtype, buf, offset)
    return from_numpy(array if array.flags.writeable else array.copy())


def _in_family(info, shape, dtype, offset, buf):
    return _rebuild(info, np.ndarray(shape, dtype, buf, offset))


_ENCODED: dict = {}  # (kind, dtype, shape) -> _Leaf
_DECODED: dict = {}  # skeleton digest -> (skeleton length, _Leaf)


def _kept(cache, key, make):
    entry = cache.get(key)
    if entry is None:
        if len(cache) > 4096:
            cache.clear()
        entry = cache[key] = make()
    return entry


def _one_array(x, family="numpy"):
    """The header of a message that is one numpy array (or a tensor's numpy view)."""
    return _kept(_ENCODED, (family, x.dtype, x.shape),
                 lambda: _Leaf((family, None), x.dtype, x.shape))


def tensor_array(t):
    """The numpy view of ``t`` when it is a plain torch CPU tensor whose memory is one
    C-ordered numpy array (no grad, no conjugate or negative bit, not bfloat16, dense),
    else None. (Called for objects of torch's module only, so torch is imported.)"""
    if type(t) is not sys.modules["torch"].Tensor or not t.is_cpu or t.requires_grad:
        return None
    try:  # torch refuses the rest (bits, bfloat16, sparse) itself, cheaper than asking
        array = t.numpy()
    except (RuntimeError, TypeError):
        return None
    return array if array.flags.c_contiguous else None


def encode(value, call):
    """One message holding ``value`` (a bytes-like object, writable where it holds an
    array); raises SpmdTypeError naming ``call`` (a string, or a function that returns
    one: it is made only for the error) when it cannot be pickled."""
    kind = type(value)
    if kind is np.ndarray:
        # one array: its raw bytes (tobytes gives C order whatever the strides, so only a
        # Fortran-ordered array, which pickle keeps as it is, and objects take a pickle)
        entry = _ENCODED.get(("numpy", value.dtype, value.shape))
        if entry is None and not value.dtype.hasobject and (
                value.ndim < 2 or value.flags.c_contiguous):
            entry = _one_array(value)
        if entry is not None and (value.ndim < 2 or value.flags.c_contiguous):
            return _array_message(entry, value)
    fmt = _SCALARS.get(kind)
    if fmt is not None and (kind is not int or -2 ** 63 <= value < 2 ** 63):
        entry = _ENCODED.get(kind)
        if entry is None:
            leaf = classify(value)
            entry = _kept(_ENCODED, kind, lambda: _Leaf(leaf.family_info(), leaf.dtype, ()))
        return entry.prefix + fmt.pack(value)
    if kind.__module__ == "numpy" and isinstance(value, np.generic) and \
            not value.dtype.hasobject:
        # (keyed by the dtype too: one scalar type has many, datetime64's units, str_'s
        # lengths, void's fields)
        entry = _kept(_ENCODED, ("np-scalar", value.dtype),
                      lambda: _Leaf(("np-scalar", None), value.dtype, ()))
        return bytearray(entry.prefix) + value.tobytes()
    if kind.__module__ == "torch":
        array = tensor_array(value)
        if array is not None:
            return array_message(array, "torch")
    if kind.__module__.startswith(("torch", "cupy")):
        message = device_message(value, call)
        if message is not None:
            return message
    return _pickled(value, call)


def device_message(value, call):
    """The message (format 3) of a torch CUDA tensor or a CuPy array, its bytes copied
    from the device straight into a recycled message buffer (no pickle, no fresh host
    pages, no second copy: a 16 MiB tensor's broadcast and exchange took 2-3x the same
    staging written by hand when it went by pickle); None for any other value. A copy
    that fails raises SpmdTypeError naming ``call``, as a pickle that fails does (a
    broadcast's source then fails on every worker)."""
    leaf = classify(value)
    if leaf is None or leaf.device is None:
        return None
    try:
        return _device_message(leaf)
    except Exception as exc:
        call = call() if callable(call) else call
        raise SpmdTypeError(f"{call}: copying the {leaf.family} value from its device "
                            f"failed: {type(exc).__name__}: {exc}") from exc


def _device_message(leaf):
    info = wire_info(leaf)
    key = (info, leaf.dtype, leaf.shape)
    entry = _ENCODED.get(key) or _kept(_ENCODED, key,
                                       lambda: _Leaf(info, leaf.dtype, leaf.shape))
    if entry.total <= _SMALL:
        return bytearray(entry.prefix) + leaf.host().tobytes()
    message = results.empty(_BYTE, entry.total)
    start = len(entry.prefix)
    message[:start] = np.frombuffer(entry.prefix, dtype=np.uint8)
    target = message[start:].view(leaf.dtype).reshape(leaf.shape)
    FAMILIES[leaf.family].host_into(leaf, target)
    return message


def array_message(array, family="numpy"):
    """The message of one C-ordered array of plain values (``family`` "torch": a
    tensor's numpy view, received as a tensor)."""
    entry = _ENCODED.get((family, array.dtype, array.shape)) or _one_array(array, family)
    return _array_message(entry, array)


def kept_array_message(array, family="numpy"):
    """The message of a C-ordered numpy array (``family`` "torch": a tensor's numpy
    view) whose header is kept and whose message is built by joining bytes (up to
    _SMALL + HEADROOM), as read-only bytes (for point-to-point), or None: a hot path's
    shortcut (a Fortran-ordered array keeps its order by the general way). The last kind
    asked for is remembered apart (a loop sends one kind: no dtype to hash)."""
    kept_family, dtype, shape, entry = _last_kept
    if array.dtype is not dtype or array.shape != shape or family is not kept_family:
        entry = _ENCODED.get((family, array.dtype, array.shape))
        if entry is None or entry.total > _SMALL + HEADROOM:
            return None
        _remember_kept(family, array.dtype, array.shape, entry)
    if not array.flags.c_contiguous:
        return None
    if entry.total < _JOIN_VIEW:
        return entry.prefix + array.tobytes()
    return entry.prefix + _raw(array)  # (one copy instead of two: faster from 8 KiB)


def _raw(array):
    """The memory of a C-ordered array as a buffer: its own, or, for a dtype numpy
    exports no buffer of (datetimes, some structured dtypes), its bytes' view."""
    try:
        return array.data
    except ValueError:
        return memoryview(array.reshape(-1).view(np.uint8))


def _remember_kept(*last):
    global _last_kept
    _last_kept = last  # (one tuple: a thread reads all of it or none)


_last_kept = (None, None, None, None)


def _array_message(entry, array):
    """The message of one array (C order) behind its kept header ``entry``."""
    contiguous = array.flags.c_contiguous  # (a 1-D array may be strided)
    if entry.total <= _SMALL:
        return bytearray(entry.prefix) + (_raw(array) if contiguous else array.tobytes())
    message = results.empty(_BYTE, entry.total)  # recycled: no fresh pages
    start = len(entry.prefix)
    view = memoryview(message)  # (copies through memoryviews: a third of numpy's cost)
    view[:start] = entry.prefix
    if contiguous:
        view[start:] = _raw(array).cast("B")
    else:
        message[start:].view(array.dtype).reshape(array.shape)[...] = array
    return message


class _NoLeaf:
    prefix = b"\xff"  # no message starts so
    read = None


_last_read = _NoLeaf  # the leaf decode read last (see decode_received)


def decode(buf):
    """The value of one message; arrays are views of ``buf``. ``FOLLOWS`` for the first
    message of a point-to-point one whose bytes follow apart (see ``apart``).

    A kept skeleton is found by its 64-bit BLAKE2 digest and checked by its length: two
    different skeletons share both with odds of 1 in 2**64, far below a machine's own
    error rates."""
    if buf[0] != 3:
        return FOLLOWS if buf[0] == 4 else _unpickled(memoryview(buf).cast("B"))
    _, flags, length, key = _HEAD.unpack_from(buf, 0)
    if flags & _APART:
        return FOLLOWS
    kept = _DECODED.get(key)
    if kept is None or kept[0] != length:
        skeleton = bytes(memoryview(buf)[_HEAD.size:_HEAD.size + length])
        kept = _kept(_DECODED, key, lambda: (length, _Leaf(*pickle.loads(skeleton),
                                                           skeleton=skeleton)))
    global _last_read
    _last_read = kept[1]
    return kept[1].read(buf)


def decode_received(buf):
    """``decode`` of a received bytearray (point-to-point): a message whose header is
    the one decoded last (a loop receives one kind) is known by its first bytes alone,
    with no header to unpack. (The header holds the skeleton's digest, so equal first
    bytes mean the same family, dtype and shape.)"""
    leaf = _last_read
    if buf.startswith(leaf.prefix):
        return leaf.read(buf)
    return decode(buf)


def head_apart(x, seq, family="numpy"):
    """For a large C-ordered numpy array sent from its own memory (``family`` "torch":
    a tensor's numpy view, received as a tensor): the first message (the header, flagged
    "the array's bytes follow as a second message", then ``seq``, the number the
    receiver's clear-to-send answers with)."""
    prefix = (_ENCODED.get((family, x.dtype, x.shape)) or _one_array(x, family)).prefix
    return bytes([prefix[0], prefix[1] | _APART]) + prefix[2:] + _SEQ.pack(seq)


_SEQ = struct.Struct("<q")


def head_follows(size):
    """The first message of a point-to-point message of ``size`` bytes that follows
    whole, as the next message (format 4)."""
    return _FOLLOWS.pack(4, size)


def follows(buf):
    """Whether ``buf`` is the first message of a point-to-point one whose bytes follow
    as a second message (format 4, or format 3 flagged apart), read from its header
    alone (nothing is unpickled)."""
    return len(buf) > 1 and (buf[0] == 4 or (buf[0] == 3 and bool(buf[1] & _APART)))


def apart(buf):
    """``(total, start, seq)`` for a first message whose bytes follow apart: the whole
    message's size, where the bytes that follow start in it, the sender's number (None:
    they follow without being asked for, format 4)."""
    if buf[0] == 4:
        return _FOLLOWS.unpack_from(buf, 0)[1], 0, None
    _, flags, length, key = _HEAD.unpack_from(buf, 0)
    kept = _DECODED.get(key)
    if kept is None or kept[0] != length:
        skeleton = bytes(memoryview(buf)[_HEAD.size:_HEAD.size + length])
        kept = _kept(_DECODED, key, lambda: (length, _Leaf(*pickle.loads(skeleton),
                                                           skeleton=skeleton)))
    start = len(buf) - _SEQ.size
    return kept[1].total, start, _SEQ.unpack_from(buf, start)[0]


def begin_whole(full, head, start):
    """Write the first message ``head`` (its first ``start`` bytes, see ``apart``) into
    the buffer ``full`` of the whole message as its header, flagged whole."""
    memoryview(full)[:start] = memoryview(head)[:start]  # (0.2 us; np.frombuffer's 0.6)
    if start:
        full[1] = head[1] & ~_APART


FOLLOWS = type("FOLLOWS", (), {"__repr__": lambda self: "FOLLOWS", "__slots__": ()})()
"""What ``decode`` returns for the first message of one whose bytes follow apart: an
array sent from its own memory, or a message larger than a receiver's inbox."""


BATCH = 2  # the first byte of a batch


def batch(messages):
    """One message carrying several (each stays 16-byte aligned)."""
    sizes = [memoryview(m).nbytes for m in messages]
    start = _aligned(_BATCH.size + 8 * len(sizes))
    out = np.empty(start + sum(_aligned(n) for n in sizes), dtype=np.uint8)
    _BATCH.pack_into(out, 0, BATCH, len(sizes))
    out[_BATCH.size:_BATCH.size + 8 * len(sizes)].view(np.uint64)[:] = sizes
    for message, size in zip(messages, sizes):
        out[start:start + size] = np.frombuffer(message, dtype=np.uint8)
        start += _aligned(size)
    return out


def messages(buf):
    """The messages in ``buf``: the batch's, or ``buf`` itself."""
    view = memoryview(buf).cast("B")
    if view[0] != BATCH:
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

    def clear(self):
        """Let go of every buffer (a request left active may still use one: the next
        call gets new ones)."""
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
