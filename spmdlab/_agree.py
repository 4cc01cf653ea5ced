"""The agreement step every collective starts with.

Each worker contributes a fixed-size record and one ``Allgather`` gives every worker all
records. A record holds the call's *key* (a digest of the call, its options and the
value's signature, which must be equal everywhere), an *exact* layout digest, this
worker's payload size, flags, and the payload itself when it is small. So:

- mismatched calls, shapes, dtypes or structures are seen by every worker at once, and
  every worker raises the same error (a second, pickled exchange gathers the readable
  descriptions for the message; it runs only on that error path);
- a worker whose input failed local validation still takes part, flagged, so the others
  raise too instead of waiting for it;
- a small value (up to 1 KiB among a few workers, less among many, see
  ``capacity_for``; ``SPMDLAB_INLINE_BYTES`` lowers it) travels inside the
  record: a scalar ``spmd_plus`` is one MPI call in all, folded locally in worker order;
- larger values know every worker's size before the bulk call (``Allgatherv`` counts).

Because the record has the same size on every worker, the exchange itself can never be
mismatched at the MPI level, whatever the workers passed. After a reduction that
gathered every worker's value the next record has room for such a value
(``Exchange.arm``): that room, too, follows from what every worker agreed on.
"""

import os
import pickle
import struct
import time
from typing import Any

import numpy as np
from ._mpi import MPI

from . import _count, _env, _wait, _world
from ._stall import call_site
from .errors import SpmdError, SpmdMismatchError

HEADER = 40  # int64 key, exact, nbytes, flags, aux
# The record's room for a payload: 1 KiB while every worker's records together stay
# within 8 KiB (a reduction of up to 1 KiB is then one MPI call in all), less with more
# workers, never under 64 bytes; SPMDLAB_INLINE_BYTES lowers it.
_GATHERED_BYTES = 8192
_MAX_CAPACITY, _MIN_CAPACITY = 1024, 64


def capacity_for(size):
    """Inline payload bytes of an agreement record among ``size`` workers (a multiple
    of 8, the same on every worker)."""
    room = _GATHERED_BYTES // max(size, 1) - HEADER
    return max(_MIN_CAPACITY, min(_MAX_CAPACITY, room)) // 8 * 8


def inline_bytes(size):
    """The largest payload that rides inside the record among ``size`` workers."""
    room = capacity_for(size)
    return room if _env.INLINE_BYTES is None else max(0, min(_env.INLINE_BYTES, room))


FLAG_ERROR = 1
FLAG_INLINE = 2

_HEAD = struct.Struct("<qqqqq")
_HEAD_KEY_FLAGS = struct.Struct("<qqqq")  # key, exact, nbytes, flags
_KEY_FLAGS: dict = {}  # a fast header -> its (key, flags)


def pack_header(send, key, exact, nbytes, flags, aux=0):
    """Write the header ``agree`` writes into a record (``send``)."""
    _HEAD.pack_into(send, 0, key, exact, nbytes, flags, aux)


def fast_header(key, nbytes, inline, aux=0):
    """The header a fast path writes: the one ``agree`` writes for the same call."""
    return _HEAD.pack(key, key, nbytes, FLAG_INLINE if inline else 0, aux)


# Faults injected by ``spmdlab.testing.inject_fault``, the running ``spmdlab.profile``, a
# parfor item running (``_world.PARFOR_ITEM``): outside them the fast paths test one
# flag, HOOKED.
FAULTS: list = []
PROFILE: Any = None
HOOKED = False


def hooks_changed():
    global HOOKED
    HOOKED = bool(FAULTS) or PROFILE is not None or _world.PARFOR_ITEM is not None \
        or _count.ON or _world.UNEVEN_LOOP is not None


hooks_changed()  # counting (SPMDLAB_COUNT=1) sends the fast paths the general way


def _inject(call):
    """Fire the faults due at this collective; returns the error to flag, if any."""
    error = None
    for fault in list(FAULTS):
        error = fault.at_collective(call) or error
    return error


class Exchange:
    """Persistent ``Allgather`` of one record per worker on a scope's communicator
    (among a few workers; among more, ``_tree.TreeExchange``)."""

    tree = False

    def __init__(self, comm):
        self.size = comm.Get_size()
        self.record = RECORD = HEADER + capacity_for(self.size)
        self.inline = inline_bytes(self.size)
        self.send = bytearray(RECORD)
        # written through a memoryview: a slice assignment of the same length is a plain
        # copy there, where a bytearray's own checks whether to resize (three times slower)
        self.sendview = memoryview(self.send)
        self.recv = bytearray(RECORD * self.size)
        self.view = memoryview(self.recv)
        self.words = self.view.cast("q")
        self.rows = np.frombuffer(self.recv, dtype=np.uint8).reshape(self.size, RECORD)
        self.comm = comm
        self.calls = 0  # collectives of this scope so far: "collective #17" in messages
        self.last = "none"  # the name of the last one
        # where each worker's inline payload starts in ``recv`` (for the fast paths' loops)
        self.payloads = range(HEADER, RECORD * self.size, RECORD)
        # where each worker's key lies in ``words`` (its flags are 3 words on)
        self.key_words = range(0, RECORD // 8 * self.size, RECORD // 8)
        # where the records of workers 2, 3, ... start in ``recv`` (worker 1's at 0)
        self.later_rows = tuple(range(RECORD, RECORD * self.size, RECORD))
        # every worker's inline payload bytes as one (workers, capacity) view of ``recv``
        self.inline_rows = self.rows[:, HEADER:]
        self._row_views: dict = {}  # (dtype, nbytes) -> each worker's typed view
        try:
            self.request = comm.Allgather_init(self.send, self.recv)
        except (NotImplementedError, MPI.Exception):  # MPI < 4: no persistent collectives
            self.request = None
        # the record exchange's own request: ``request`` is None while the next record
        # has room for a reduction's value (``arm``), so that every fast path goes the
        # general way, through ``run``
        self.persistent = self.request
        self.armed = 0  # the room of the next record (bytes of a value; 0: none)
        # gathered reductions in a row (record exchanges one after the other) that arm
        # it: 1, doubled (up to 64) each time the room went unused (``Wide.took``)
        self.arm_after, self.in_row, self.gathered_at = 1, 0, -2
        # nbytes -> (persistent in-place Allgather, its buffer, dtype -> typed view)
        self._gathers: dict = {}
        self._wide: dict = {}  # room -> a Wide record exchange
        self._last_wide: Any = None

    def gathering(self, nbytes, dtype):
        """A persistent in-place ``Allgather`` of ``nbytes`` per worker and its buffer
        as (workers, items) of ``dtype``, or None without persistent collectives: each
        worker writes its own row, starts the request, and, once it is complete, reads
        every worker's in worker order.

        Made on a size's first use and kept for the 8 sizes used last. Making one is
        collective: only reductions that every worker of the scope has agreed on ask, in
        the same order everywhere, so every worker makes, keeps and drops the same ones.
        Starting one costs 0.7-0.9 us less than an ``Iallgather`` of 2-64 KiB, the copy
        of the worker's own bytes included (1x2, MPICH)."""
        entry = self._gathers.pop(nbytes, None)
        if entry is None:
            if self.persistent is None:
                return None
            if len(self._gathers) >= 8:  # the least recently used: inactive, freed here
                self._gathers.pop(next(iter(self._gathers)))[0].Free()
            rows = np.empty(nbytes * self.size, dtype=np.uint8)
            entry = (self.comm.Allgather_init(MPI.IN_PLACE, rows), rows, {})
        self._gathers[nbytes] = entry  # most recently used last
        request, rows, views = entry
        typed = views.get(dtype)
        if typed is None:
            typed = views[dtype] = rows.view(dtype).reshape(self.size, -1)
        return request, typed

    def arm(self, nbytes):
        """Collective: after every worker of the scope has agreed on a reduction of
        ``nbytes`` that gathers every worker's value (``_reduce.ordered``), the next
        record exchange gets room for such a value, so that a loop of such reductions
        takes one MPI call each instead of two (the record, then the values): a 4 KiB
        ``spmd_plus`` at 1x2 took 7.6-9.8 us in two, 5.2-5.5 us in one (a raw
        ``Allreduce`` 3.5 us).

        The room depends only on what every worker agreed on, so every worker's next
        exchange has the same size: a collective of another kind (or a value that does
        not fit) sends its record in the wide one with no value, and the room is given
        up (``Wide.run``); the one after is the plain record again. A loop that
        alternates (a gradient, then a scalar loss) would pay for the unused room every
        time: each room given up doubles the gathered reductions in a row (whose
        records follow each other, ``calls``: the same count on every worker) it takes
        to arm again."""
        if self.persistent is None:
            return
        if self.gathered_at != self.calls:  # (not another dtype of the same reduction)
            self.in_row = self.in_row + 1 if self.gathered_at == self.calls - 1 else 1
            self.gathered_at = self.calls
        if self.in_row >= self.arm_after:
            self.widen(nbytes)

    def widen(self, nbytes):
        """The next record's room: for ``nbytes``, or the room it has if that fits."""
        room = self.armed
        if not nbytes <= room <= 4 * nbytes:  # (a loop of two sizes keeps the larger)
            room = -(-nbytes // 8) * 8
        self.armed = room
        self.request = None

    def released(self):
        """For an exchange a pool's refresh retires (``_world.refresh``): free each of its
        persistent requests that is inactive (or complete, so made inactive by the
        test); True when none is left active, so that MPI holds neither its buffers nor
        its communicator any more. An active one (a stopped block's, that the other
        workers never started) keeps the exchange, and its buffers, until a later
        refresh finds it complete."""
        active = False
        for request in [self.persistent] + [entry[0] for entry in self._gathers.values()] \
                + [wide.request for wide in self._wide.values()]:
            if request is None or request == MPI.REQUEST_NULL:  # (none, or freed)
                continue
            if request.Test():
                request.Free()
            else:
                active = True
        return not active

    def disarm(self):
        self.armed = 0
        self.request = self.persistent

    def wide(self):
        """The record exchange with room for ``armed`` bytes (made on a room's first
        use, collectively: every worker arms alike; the 4 used last are kept)."""
        room = self.armed
        wide = self._last_wide
        if wide is not None and wide.room == room:
            return wide
        wide = self._wide.pop(room, None)
        if wide is None:
            if len(self._wide) >= 4:
                self._wide.pop(next(iter(self._wide))).request.Free()
            wide = Wide(self, room)
        self._wide[room] = self._last_wide = wide  # most recently used last
        return wide

    def run(self, scope, call):
        self.calls += 1
        self.last = call
        if _world.listener_running:
            _world.refuse_in_listener(call)
        start = time.perf_counter() if PROFILE is not None else 0.0
        if self.armed:
            self.wide().run(scope, call)
        elif self.request is not None:
            self.request.Start()
            _wait.wait_body(self.request, scope, call)
        else:
            _wait.wait_body(self.comm.Iallgather(self.send, self.recv), scope, call)
        if _count.ON:  # then every worker's record is examined
            others = self.record * (self.size - 1)
            _count.collective(others, others, _count.steps(self.size))
            _count.add(records_examined=self.size)
        if PROFILE is not None:
            PROFILE.collective((getattr(scope, "path", ()), self.calls), call, call_site(),
                               time.perf_counter() - start,
                               int.from_bytes(self.send[16:24], "little", signed=True))

    def run_plain(self, scope, call):
        """``run`` where nothing is hooked, no listener runs and the request is
        persistent (the fast paths' case): start it, wait."""
        if self.armed:
            return self.run(scope, call)
        self.calls += 1
        self.last = call
        request = self.request
        try:
            request.Start()
            test = request.Test
            if not (test() or test() or test() or test()):  # (as _reduce.reduce_scalar's)
                _wait.wait(request, scope, call)
        except BaseException as exc:  # (a Ctrl-C before the wait: as one in it)
            _wait.interrupted_fast(request, scope, call, exc)
            raise

    def plain(self, scope, call, key, exact, nbytes, flags, describe, same_flags=True):
        """``agree`` written out for a fast path whose payload is already in ``send``
        (nothing hooked, no listener, a persistent request): the header, one MPI call,
        and the full check (which raises on every worker) only when a worker's key
        differs, or its flags (``same_flags``; else only its error flag). Returns, as
        ``agree``, whether every worker's exact digest is this one's and (meaningful with
        ``same_flags``) whether every worker's payload rode in its record."""
        pack_header(self.send, key, exact, nbytes, flags)
        self.run_plain(scope, call)
        words = self.words
        same_exact = True
        for i in self.key_words:
            if words[i] != key or (words[i + 3] != flags if same_flags
                                   else words[i + 3] & FLAG_ERROR):
                return self.check(scope, call, key, flags, None, describe)[1:]
            if words[i + 1] != exact:
                same_exact = False
        return same_exact, bool(flags & FLAG_INLINE)

    def fast(self, scope, call, header, describe, *args):
        """The exchange of a fast path whose header (``fast_header``) and payload are
        already in ``send``: equal headers everywhere mean agreement; anything else goes
        to the full check, which raises on every worker (``describe(*args)`` then says
        what this worker passed).

        A fast header is fixed by its key and flags (the key is the call's digest over
        the value's dtype and shape, so it fixes the size too), so only those two words
        of each worker's record are compared."""
        self.sendview[:HEADER] = header
        request = self.request
        if HOOKED:  # a fault to inject, a profile running, a parfor item: the general way
            _world.refuse_in_parfor(call, scope)
            _world.refuse_in_uneven_loop(call, scope)
            error = _inject(call) if FAULTS else None
            if error is not None:  # flagged: every worker raises
                _HEAD.pack_into(self.send, 0, 0, 0, 0, FLAG_ERROR, 0)
                self.run(scope, call)
                self.check(scope, call, 0, FLAG_ERROR, error, lambda: describe(*args))
            self.run(scope, call)
        elif request is None or _world.listener_running:
            self.run(scope, call)
        else:
            self.run_plain(scope, call)
        words = self.words
        key_flags = _KEY_FLAGS.get(header)
        if key_flags is None:
            if len(_KEY_FLAGS) > 1024:
                _KEY_FLAGS.clear()
            key_flags = _KEY_FLAGS[header] = _HEAD_KEY_FLAGS.unpack_from(header, 0)[::3][:2]
        key, flags = key_flags
        for i in self.key_words:
            if words[i] != key or words[i + 3] != flags:
                self.check(scope, call, key, flags, None, lambda: describe(*args))
                return

    def row_views(self, dtype, nbytes):
        """Each worker's first ``nbytes`` inline bytes as a 1-D array of ``dtype``: views
        of ``recv``, made once per dtype and size (the buffer never moves)."""
        views = self._row_views.get((dtype, nbytes))
        if views is None:
            if len(self._row_views) > 64:
                self._row_views.clear()
            typed = self.inline_rows[:, :nbytes].view(dtype)
            views = self._row_views[(dtype, nbytes)] = [typed[k] for k in range(self.size)]
        return views

    def put(self, data, offset=0):
        """Write inline payload bytes at ``offset`` of this worker's record."""
        self.sendview[HEADER + offset:HEADER + offset + len(data)] = data

    def put_value(self, fmt, value, offset=0):
        """Write ``value`` packed with the ``struct.Struct`` ``fmt`` as inline payload."""
        fmt.pack_into(self.send, HEADER + offset, value)

    def offsets(self, offset=0):
        """Where each worker's inline payload (from ``offset``) lies in ``view``."""
        return range(HEADER + offset, self.record * self.size, self.record)

    def block(self, offset, nbytes):
        """Every worker's inline bytes ``[offset, offset + nbytes)``: a (size, nbytes) copy."""
        return self.rows[:, HEADER + offset:HEADER + offset + nbytes].copy()

    def check(self, scope, call, key, flags, error, describe):
        """Raise on every worker unless all keys agree and nobody failed; see ``agree``."""
        words = self.words
        step = self.record // 8
        same_exact = inline = True
        exact = words[scope.rank * step + 1]
        for i in range(0, step * self.size, step):
            if words[i] != key or words[i + 3] & FLAG_ERROR:
                _raise_everywhere(scope, call, error, describe)
            if words[i + 1] != exact:
                same_exact = False
            if not words[i + 3] & FLAG_INLINE:
                inline = False
        return self, same_exact, inline

    def field(self, worker, index):
        """Header field ``index`` (0 key, 1 exact, 2 nbytes, 3 flags, 4 aux) of a worker."""
        return self.words[worker * (self.record // 8) + index]

    def payload(self, worker, nbytes):
        start = worker * self.record + HEADER
        return self.view[start:start + nbytes]

    def sizes(self):
        step = self.record // 8
        return [self.words[k * step + 2] for k in range(self.size)]


class Wide:
    """A record exchange with room for a reduction's value after the record
    (``Exchange.arm``): each worker's row is its record, a word that says whether its
    value follows (1) or not (0), and the value's bytes."""

    def __init__(self, ex, room):
        self.ex = ex
        self.room = room
        self.stride = stride = ex.record + 8 + room
        self.send = bytearray(stride)
        self.sendview = memoryview(self.send)
        self.recv = bytearray(stride * ex.size)
        self.words = memoryview(self.recv).cast("q")
        self.rows = np.frombuffer(self.recv, dtype=np.uint8).reshape(ex.size, stride)
        self.key_words = range(0, stride // 8 * ex.size, stride // 8)
        self.request = ex.comm.Allgather_init(self.send, self.recv)
        self._views: dict = {}  # (dtype, nbytes) -> each worker's value, a 1-D view

    def run(self, scope, call):
        """``Exchange.run``'s MPI call for a record with no value: the record goes
        out in the wide row, every worker's comes back into the exchange's own buffer
        as a plain exchange leaves it, and the room is given up."""
        ex = self.ex
        self.sendview[:ex.record] = ex.send
        self.sendview[ex.record:ex.record + 8] = bytes(8)
        self.request.Start()
        _wait.wait_body(self.request, scope, call)
        self.took(scope, call)

    def took(self, scope, call):
        """After the MPI call: every worker's record where a plain exchange puts it;
        the room given up (every worker does: a value is used only if every worker
        sent one, see ``_reduce._wide_fold``)."""
        ex = self.ex
        ex.rows[...] = self.rows[:, :ex.record]
        ex.disarm()
        ex.arm_after = min(2 * ex.arm_after, 64)

    def values(self, dtype, nbytes):
        """Every worker's value: 1-D views of ``recv``, made once per dtype and size
        (the buffer never moves)."""
        views = self._views.get((dtype, nbytes))
        if views is None:
            if len(self._views) > 64:
                self._views.clear()
            start = self.ex.record + 8
            typed = self.rows[:, start:start + nbytes].view(dtype)
            views = self._views[(dtype, nbytes)] = [typed[k] for k in range(self.ex.size)]
        return views


def agree(scope, call, key, *, exact=0, nbytes=0, payload=None, error=None,
          describe=None, aux=0):
    """Collective: exchange records and raise the same error on every worker if needed.

    ``payload`` (bytes-like, at most the exchange's ``inline`` bytes) rides in the
    record. ``error`` is this worker's local validation failure (an exception), reported
    by every worker.
    ``describe()`` gives a readable account of this worker's call for mismatch messages.
    ``aux`` is a free word every worker can read back (``_shm`` says there how it can
    take part in a shared-memory reduction).

    Returns ``(exchange, same_exact, inline)``: whether every worker's exact digest is
    equal, and whether every worker's payload rode in its record.
    """
    _world.refuse_in_parfor(call, scope)
    if _world.UNEVEN_LOOP is not None:
        _world.refuse_in_uneven_loop(call, scope)
    ex = scope.exchange
    flags = 0
    if FAULTS:
        error = _inject(call) or error
    if error is not None:
        flags = FLAG_ERROR
        key = exact = nbytes = 0
    elif payload is not None and not ex.tree:
        flags = FLAG_INLINE
        ex.send[HEADER:HEADER + len(payload)] = payload
    pack_header(ex.send, key, exact, nbytes, flags, aux)
    ex.run(scope, call)
    if ex.size == 1:
        if error is not None:
            raise error
        return ex, True, payload is not None
    return ex.check(scope, call, key, flags, error, describe)


class Description:
    """A worker's account of its call for mismatch messages: its text, and the fields
    (``destination``, ``axis``, ``dtype``, ``dict keys``, ...) compared between workers to
    say what differs."""

    def __init__(self, text, how=None, **fields):
        self.text = text
        self.fields = fields
        self.how = how  # what a mismatch says the workers did (else the usual words)


def describe_call(call, value=None, fields=None, **options):
    """``spmd_plus(float32 (3,) numpy, destination=2)`` as a Description; ``value`` is
    the value's text, ``fields`` its compared fields (``_pack.value_fields``), ``options``
    the call's other arguments (None ones are shown only where another worker's are not).
    """
    shown = [value] if value is not None else []
    shown += [f"{k}={v!r}" for k, v in options.items() if v is not None]
    compared = dict(fields or {})
    compared.update({k: repr(v) for k, v in options.items()})
    compared["call"] = call
    return Description(f"{call}({', '.join(shown)})", **compared)


def _differences(descriptions):
    """The fields that differ between workers' Descriptions, most telling first."""
    fields = [d.fields for d in descriptions if isinstance(d, Description)]
    if len(fields) < len(descriptions):
        return []
    order = ["call", "dict keys", "structure", "type", "dtype", "shape"]
    names = order + sorted({n for f in fields for n in f} - set(order))
    differ = [n for n in names if len({f.get(n) for f in fields}) > 1]
    if "call" in differ:
        return ["call"]
    if "fcn" in differ:  # (then the key's digest of the function differs too)
        return ["fcn"]
    if "dict keys" in differ and all("dict keys" in f for f in fields):
        return ["dict keys"]  # dicts everywhere: then the leaves differ too, the keys say why
    if "structure" in differ:
        return ["structure"]
    return differ


def class_name(kind):
    return f"{kind.__module__}.{kind.__qualname__}"


def _portable(kind):
    """The exception class itself if it can travel to the other workers (a class defined
    inside a function cannot), else None: the others then raise SpmdError naming it."""
    try:
        pickle.loads(pickle.dumps(kind))
        return kind
    except Exception:
        return None


def shared_error(kind, name, text):
    """The error the other workers raise for one worker's failure: of the same class
    where one can be made from the message alone, else an SpmdError that names the
    original class (never a TypeError from making it)."""
    if kind is not None:
        try:
            error = kind(text)
            if isinstance(error, kind) and text in str(error):
                return error
        except Exception:
            pass
    return SpmdError(f"{text} [a {name} there, which cannot be made again here from its "
                     f"message]")


def _raise_everywhere(scope, call, error, describe):
    """Every worker gets here together: gather what each saw and raise one error.

    Each worker reports what it passed and where (``call_site``); the message numbers
    the collective (every worker has made as many in the scope: each is checked)."""
    mine = (None if error is None else (_portable(type(error)), class_name(type(error)),
                                        str(error), call),
            describe() if describe is not None else call, call_site())
    reports = _gathered(scope, call, mine)
    failed = [(k + 1, err, site) for k, (err, _, site) in enumerate(reports)
              if err is not None]
    if failed:
        kind, name, _, theirs = failed[0][1]
        if error is not None:
            raise error
        lines = "; ".join(f"worker {k}: {msg} (at {site})"
                          for k, (_, _, msg, _), site in failed)
        # named after the failed call (trainnet, parfor), and where this worker waited
        who = scope.who() if theirs == call else f"{scope.who()}, waiting in {call}"
        raise shared_error(kind, name, f"{theirs} ({who}): failed on another worker: "
                                       f"{lines}")
    descriptions = [d if isinstance(d, Description) else
                    Description(d, call=d.split("(")[0]) for _, d, _ in reports]
    groups = {}
    for k, (d, (_, _, site)) in enumerate(zip(descriptions, reports), 1):
        groups.setdefault(f"{d.text} at {site}", []).append(k)
    parts = [f"{_workers(ks)}: {text}" for text, ks in groups.items()]
    differ = _differences(descriptions)
    what = f" (they differ in: {', '.join(differ)})" if differ else ""
    how = ("workers made different calls" if differ == ["call"] else
           "workers passed different functions" if differ == ["fcn"] else
           next((d.how for d in descriptions if d.how), None) or
           "workers passed values that cannot be combined")
    number = f"collective #{scope.exchange.calls}"  # the same on every worker here
    error = SpmdMismatchError(
        f"{call} ({scope.who()}): {number} does not match: {how}{what}: " + "; ".join(parts))
    error.differ = tuple(differ)
    # each worker's compared fields, in worker order (a caller that mends a mismatch
    # checks with them that every worker made a call it can mend)
    error.fields = tuple(dict(d.fields) for d in descriptions)
    raise error


def _gathered(scope, call, value):
    """Every worker's ``value`` (picklable), as ``comm.allgather`` gives it, waited for as
    a collective's data is: where the workers' calls had come out of step (a Ctrl-C or
    a timeout caught on some of them, mid-call), a worker that never joins has left, and
    the wait raises SpmdPeerError (or SpmdTimeoutError), where a blocking allgather
    waited inside MPI for ever."""
    data = pickle.dumps(value)
    sizes = np.zeros(scope.comm.Get_size(), dtype=np.int64)
    own = np.array([len(data)], dtype=np.int64)
    _wait.wait_body(scope.comm.Iallgather(own, sizes), scope, call, keep=(own, sizes))
    offsets = np.zeros_like(sizes)
    np.cumsum(sizes[:-1], out=offsets[1:])
    buf = bytearray(int(sizes.sum()))
    _wait.wait_body(scope.comm.Iallgatherv(data, [buf, sizes, offsets, MPI.BYTE]), scope,
                    call, keep=(data, buf, sizes, offsets))
    return [pickle.loads(buf[o:o + n]) for o, n in zip(offsets, sizes)]


def _workers(ks):
    """'worker 3', 'workers 1-4', 'workers 1, 3'."""
    if len(ks) == 1:
        return f"worker {ks[0]}"
    if ks == list(range(ks[0], ks[-1] + 1)):
        return f"workers {ks[0]}-{ks[-1]}"
    return "workers " + ", ".join(map(str, ks))


def exchange_for(comm):
    """The agreement exchange of a scope on ``comm``: gathering among a few workers,
    the tree among more (``SPMDLAB_TREE_ABOVE``)."""
    size = comm.Get_size()
    if size > 1 and size > _env.TREE_ABOVE:
        from ._tree import TreeExchange
        return TreeExchange(comm)
    return Exchange(comm)


_world.Scope.exchange_class = staticmethod(exchange_for)  # a scope makes its exchange on first use
