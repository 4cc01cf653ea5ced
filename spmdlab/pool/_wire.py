"""The pool's wire: one TCP connection per worker to the client, framed pickles.

A frame is ``[u64 pickle length | u32 buffers | u64 buffer lengths... | pickle |
buffers]``: a cloudpickle (functions and classes defined in a cell or at a prompt
travel too), arrays out of band, sent and received without being copied into the
pickle. A worker proves it belongs to the pool before anything else: the client sends a
random challenge, the worker answers with its HMAC under the pool's secret (which the
client gives the launcher in the workers' environment, never on a command line).

Shared by the client and the workers; imports no MPI.
"""

import contextlib
import hashlib
import hmac
import os
import pickle
import signal
import socket
import struct
import threading

_LENGTHS = struct.Struct("<QI")
_LENGTH = struct.Struct("<Q")
CHALLENGE = 32

# the variables through which the launcher hands a worker its pool
ADDRESS_VARIABLE = "SPMDLAB_POOL"
SECRET_VARIABLE = "SPMDLAB_POOL_SECRET"


class Closed(ConnectionError):
    """The other end has gone."""


_PICKLER = None


def _pickler():
    """cloudpickle's pickler, but a function's code keeps its file: cloudpickle names
    every code object it sends by value (a function of a script's ``__main__``, of a
    cell) ``<dynamic-code>``, so a worker's traceback said ``File "<dynamic-code>",
    line 27`` with no file and no source line instead of the script's own."""
    global _PICKLER
    if _PICKLER is None:
        import collections
        import types

        import cloudpickle  # type: ignore[import-untyped,unused-ignore]

        reduce_code = getattr(getattr(cloudpickle, "cloudpickle", None), "_code_reduce",
                              None)
        if reduce_code is None:  # (a cloudpickle without it: its own names, as before)
            _PICKLER = cloudpickle.Pickler
            return _PICKLER

        def code_reduce(code):
            make, args = reduce_code(code)
            return make, tuple(code.co_filename if a == "<dynamic-code>" else a
                               for a in args)

        class Pickler(cloudpickle.Pickler):  # type: ignore[misc,unused-ignore]
            dispatch_table = collections.ChainMap(
                {types.CodeType: code_reduce}, cloudpickle.Pickler.dispatch_table)

        _PICKLER = Pickler
    return _PICKLER


def _dumps(value, buffer_callback=None):
    import io

    with io.BytesIO() as file:
        _pickler()(file, protocol=5, buffer_callback=buffer_callback).dump(value)
        return file.getvalue()


def dumps(value):
    """``(pickle, [buffers])`` of ``value``."""
    buffers = []
    data = _dumps(value, buffer_callback=buffers.append)
    return data, [b.raw() for b in buffers]


def packed(value):
    """One ``bytes`` pickle of ``value``, its arrays in it: a value travelling inside a
    frame that is unpickled apart, later (a worker's exception, of a class the client
    may not be able to import)."""
    return _dumps(value)


def unpacked(data):
    """The value of :func:`packed`'s ``data``; None when it cannot be read here."""
    try:
        return pickle.loads(data)
    except Exception:
        return None


@contextlib.contextmanager
def interrupts_deferred():
    """In the main thread, a Ctrl-C (SIGINT) that comes inside is handed on at the end
    (what must go whole: a frame; a block that must reach every worker). Python runs a
    signal's handler in the main thread between any two of its instructions, whichever
    thread the signal reached (blocking SIGINT in this thread only sends it to another):
    the handler is swapped for one that notes it. Nested, the inner hands it on to the
    outer, which notes it again."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: noted.append(frame))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if noted and callable(previous):
        previous(signal.SIGINT, noted[0])
    elif noted and previous == signal.SIG_DFL:
        signal.raise_signal(signal.SIGINT)


class Connection:
    """One end of a worker's connection: whole frames in, whole frames out; sends are
    thread-safe (the worker's output threads, its queues and its main loop all send)."""

    def __init__(self, sock):
        self.sock = sock
        self._send_lock = threading.Lock()
        self.closed = False

    def fileno(self):
        return self.sock.fileno()

    def send(self, value):
        """Send one frame, whole: in the main thread, Ctrl-C (or a pool's stop) waits
        until the frame has gone (a frame cut short would leave the other end reading
        the next frames as its rest, for good)."""
        data, buffers = dumps(value)
        head = _LENGTHS.pack(len(data), len(buffers)) + b"".join(
            _LENGTH.pack(b.nbytes) for b in buffers)
        with self._send_lock, interrupts_deferred():
            self._write(head, data, buffers)

    def _write(self, head, data, buffers):
        try:
            self.sock.sendall(head + data if len(data) < 65536 else head)
            if len(data) >= 65536:
                self.sock.sendall(data)
            for buf in buffers:
                self.sock.sendall(buf)
        except OSError as exc:
            self.closed = True
            raise Closed(str(exc)) from None

    def receive(self):
        """The next frame's value (blocking)."""
        nbytes, count = _LENGTHS.unpack(self._exactly(_LENGTHS.size))
        sizes = [_LENGTH.unpack(self._exactly(8))[0] for _ in range(count)]
        data = self._exactly(nbytes)
        buffers = [self._exactly(n) for n in sizes]
        return pickle.loads(data, buffers=buffers)

    def _exactly(self, n):
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            try:
                k = self.sock.recv_into(view[got:])
            except OSError as exc:
                self.closed = True
                raise Closed(str(exc)) from None
            if not k:
                self.closed = True
                raise Closed("the connection was closed")
            got += k
        return buf

    def close(self):
        self.closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def new_secret():
    return os.urandom(32).hex()


def answer(secret, challenge):
    return hmac.new(bytes.fromhex(secret), challenge, hashlib.sha256).digest()


def challenge(conn, secret):
    """Client side: whether the worker on ``conn`` knows the pool's secret."""
    nonce = os.urandom(CHALLENGE)
    conn.sock.sendall(nonce)
    got = conn._exactly(32)
    return hmac.compare_digest(bytes(got), answer(secret, nonce))


def respond(conn, secret):
    """Worker side: answer the client's challenge."""
    nonce = bytes(conn._exactly(CHALLENGE))
    conn.sock.sendall(answer(secret, nonce))
