"""A pool's worker: ``python -m spmdlab.pool._worker``, started by the pool's launcher.

Every worker connects to the client, proves it belongs to the pool, starts spmdlab
(every worker together, before any code of the user's), and then runs what the client
sends: blocks (a cell's code, or a function), in a namespace that persists from one
block to the next, with spmdlab's primitives as in a script; requests for a variable's
value (a Composite element), to set or drop one; a distributed array's parts.

Its output (file descriptors 1 and 2, so C code's and subprocesses' output too) goes to
the client as it is written. A block that fails reports its error and traceback; the
client then stops the others, which may be waiting for it in a collective: a stop request
(the client's interrupt too) sets a flag that spmdlab's waits check as they poll
(``_wait.interrupted``) and sends the program thread SIGINT, which ends user code and
system calls. After a stopped block the workers give the world new communicators
(``_world.refresh``) before the next. A worker whose client has gone (its connection
closed: the client exited, was killed, its kernel restarted) ends at once.
"""

import builtins
import codecs
import linecache
import os
import queue as queues_
import signal
import socket
import sys
import threading
import time
import traceback
import types

from . import _cells, _shared, _wire

_MARK = b"\x00\x1fspmdlab-sync-"  # written to stdout/stderr to know all before it left


class Stopped(BaseException):
    """The block was stopped: an error on another worker, or the client's interrupt."""


class _Worker:
    def __init__(self, conn):
        from .. import _world

        self.conn = conn
        self.index = _world.RANK + 1
        self.size = _world.SIZE
        import spmdlab

        # spmdlab's primitives are there as after ``from spmdlab import *`` in a script
        self.ns = {"__name__": "__main__", "__builtins__": builtins}
        self.ns.update((name, getattr(spmdlab, name)) for name in spmdlab.__all__
                       if name not in spmdlab._POOL_NAMES)
        _shared.namespace = self.ns  # what the client's Composites refer to
        self.commands = queues_.Queue()
        self.block = None  # the id of the block running now
        self.stopped = 0  # the last block the client stopped
        self.started = 0  # the last block this worker started
        self.finished = {}  # block -> world ranks that ended it before this worker began
        self.lock = threading.Lock()
        self.stop_requested = False
        self.program = threading.get_ident()
        self.synced = {1: threading.Event(), 2: threading.Event()}
        self.sync_count = 0
        # the bindings the last block's assigned names had before it, until the next
        # block: put back for codistributed arrays if it was stopped or failed (refresh)
        self.before = {}
        # name -> source: the client's handles a cell read under another name (D sent as
        # its D): deleted with the source's value, that the alias would keep for good
        self.aliases = {}
        self.shown = None  # the text of the running block's last value, if it shows one

    # -- output ----------------------------------------------------------------------------

    def capture_output(self):
        """File descriptors 1 and 2 become pipes whose contents go to the client."""
        for fd, name in ((1, "stdout"), (2, "stderr")):
            read, write = os.pipe()
            os.dup2(write, fd)
            os.close(write)
            threading.Thread(target=self._forward, args=(read, fd, name), daemon=True,
                             name=f"spmdlab-{name}").start()
        sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="replace",
                          closefd=False)
        sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="replace",
                          closefd=False)

    def _forward(self, fd, number, name):
        # a character's bytes may come in two reads (a write larger than the pipe):
        # decoded as they come, not read by read, or both halves were lost to "\ufffd"
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        pending = b""
        while True:
            try:
                data = os.read(fd, 65536)
            except OSError:
                return
            if not data:
                return
            pending += data
            while True:
                at = pending.find(_MARK)
                if at < 0:
                    break
                end = pending.find(b"\x00", at + len(_MARK))
                if end < 0:
                    break
                self._out(name, decoder.decode(pending[:at]))
                pending = pending[end + 1:]
                self.synced[number].set()
            keep = len(pending) - len(_MARK) if _MARK[:1] in pending[-len(_MARK):] else \
                len(pending)
            keep = max(0, keep)
            self._out(name, decoder.decode(pending[:keep]))
            pending = pending[keep:]

    def _out(self, name, text):
        if text:
            try:
                self.conn.send(("out", self.index, name, text))
            except _wire.Closed:
                os._exit(0)

    def show(self, value):
        """The displayhook while a cell's last value is shown: its text is kept, to go
        to the client with the block's outcome (printed there in worker order, as
        MATLAB prints each worker's unsuppressed result, not as the workers finish)."""
        if value is None:
            return
        builtins._ = value  # (as Python's own displayhook)
        self.shown = repr(value)

    def sync_output(self):
        """Wait until everything written to stdout and stderr so far has gone."""
        sys.stdout.flush()
        sys.stderr.flush()
        self.sync_count += 1
        mark = _MARK + str(self.sync_count).encode() + b"\x00"
        for fd in (1, 2):
            self.synced[fd].clear()
            os.write(fd, mark)
        for fd in (1, 2):
            self.synced[fd].wait(10)

    # -- the connection ----------------------------------------------------------------------

    def listen(self):
        """The control thread: requests that act at once (stop, items for this worker's
        queues) are handled here; the rest go to the program thread in order."""
        while True:
            try:
                message = self.conn.receive()
            except _wire.Closed:
                self.client_gone()
                return
            except Exception as exc:  # the frame was read whole, but its value cannot
                # be made here: the client fails the block or request it waits for
                # (a block this worker cannot read never runs here: the refresh that
                # follows its failure must not undo the last block that did run)
                self.commands.put(("unread",))
                info = describe(exc, self.index)
                if isinstance(exc, (ImportError, AttributeError)):  # as the client says
                    # of what it cannot read: the client's sys.path is not the workers'
                    info["message"] += (f" (the client sent worker {self.index} a value it "
                                        f"cannot read: is the module that defines it "
                                        f"importable on the workers?)")
                try:
                    self.conn.send(("unreadable_request", self.index, info))
                except _wire.Closed:
                    self.client_gone()
                    return
                continue
            kind = message[0]
            if kind == "stop":
                with self.lock:  # a stop may come before its block has started
                    self.stopped = max(self.stopped, message[1])
                    if message[1] == self.block and not self.stop_requested:
                        self.stop_requested = True  # (one signal a block)
                        signal.pthread_kill(self.program, signal.SIGINT)
            elif kind == "finished":  # a worker has ended the block: waits for it fail
                self.block_finished(message[1], message[2])
            elif kind == "queue_item":
                self.deliver(message[1], message[2])
            else:
                self.commands.put(message)

    def block_finished(self, block, index):
        from .. import _wait

        with self.lock:  # (it may come before this worker has begun that block)
            if block == self.block:
                _wait.finished_block.add(index - 1)
            elif block > self.started:
                self.finished.setdefault(block, set()).add(index - 1)

    def client_gone(self):
        """The client has gone: nobody will ever read this worker's results. End now,
        without the exit handshake (the other workers are ending the same way)."""
        os._exit(0)

    def say_who_leaves(self):
        """``os._exit`` in a block ends every worker (the launcher ends the job), and the
        client sees their connections close in the launcher's order, not this worker's:
        it is told first who called it, so that it names that worker (it named worker 1)."""
        leave = os._exit

        def leaving(status=0):
            if not self.conn.closed:  # (not when the client has gone)
                say = threading.Thread(target=self._say_leaving, args=(status,),
                                       daemon=True)
                say.start()
                say.join(1)  # never held up by a client that no longer reads
            leave(status)

        os._exit = leaving

    def _say_leaving(self, status):
        try:
            self.conn.send(("leaving", self.index, status))
        except Exception:
            pass

    def deliver(self, tag, item):
        from .. import _world
        from ..queues import _hub

        queue = _hub.channel(_world.WORLD).queues.get(tag)
        if queue is not None:
            queue._arrive([item])

    def check_stop(self):
        if self.stop_requested:
            raise Stopped()

    def on_interrupt(self, signum, frame):
        """SIGINT, which only a stop sends: it ends the block it was sent to. Python runs
        this handler when the program thread next runs Python code, which may be after
        that block has ended (it stopped at a wait's check first, or finished): then
        the signal is dropped, so that it never cuts short the work that comes next (a
        block's result, the refresh after a stopped block)."""
        if self.block is not None and self.stop_requested:
            raise KeyboardInterrupt()

    # -- the loop ----------------------------------------------------------------------------

    def serve(self):
        from .. import _wait

        _wait.interrupted = self.check_stop
        while True:
            message = self.commands.get()
            kind = message[0]
            if kind == "run":
                self.before = {}
                self.run(message[1], message[2])
            elif kind == "unread":  # nothing of the last block is to be put back
                self.before = {}
            elif kind == "get":
                self.reply(message[1], self.get, message[2])
            elif kind == "set":
                self.reply(message[1], self.set, message[2], message[3])
            elif kind == "del":
                self.delete(message[1])
            elif kind == "refresh":
                self.reply(message[1], self.refresh, *message[2:])
            elif kind == "distribute":
                self.reply(message[1], self.distribute, *message[2:])
            elif kind == "part":
                self.reply(message[1], self.part, message[2])
            elif kind == "shape":
                self.reply(message[1], lambda name: tuple(self.ns[name].shape), message[2])
            elif kind == "exit":
                return

    def reply(self, request, fn, *args):
        try:
            value = ("ok", fn(*args))
        except BaseException as exc:  # noqa: B902 - the client raises it
            value = ("failed", describe(exc, self.index))
        try:
            self.conn.send(("reply", request, self.index, value))
        except _wire.Closed:
            self.client_gone()
        except Exception as exc:  # the value itself cannot travel
            self.conn.send(("reply", request, self.index,
                            ("failed", describe(exc, self.index))))

    def get(self, name):
        if name not in self.ns:
            return (False, None)
        return (True, self.ns[name])

    def set(self, name, value):
        self.ns[name] = value

    def delete(self, names):
        """The client dropped its handles of ``names``: their values go, with the names a
        cell read them under (unless a cell has bound those to something else since)."""
        for name in names:
            value = self.ns.pop(name, _MISSING)
            self.aliases.pop(name, None)
            for alias, source in list(self.aliases.items()):
                if source == name:
                    del self.aliases[alias]
                    if value is not _MISSING and self.ns.get(alias, _MISSING) is value:
                        del self.ns[alias]

    def refresh(self, restore=False):
        """New communicators after a stopped block (``restore``: it was stopped or
        failed: its codistributed arrays are put back as they were first)."""
        from .. import _world

        if restore:
            self.restore()
        _world.refresh()

    def restore(self):
        """A stopped or failed block's assignments of codistributed arrays undone: each
        worker stopped at its own point, so a loop that rebinds one (``D =
        redistribute(D, ...)``, ``D = D * 2``) left each worker holding another version of
        it (parts that did not fit together, or data of different steps, gathered as one
        array); every worker takes back the binding it had before the block. Other values
        are each worker's own (a Composite's elements) and stay as the block left them."""
        from ..darray import CodistributedArray

        before, self.before = self.before, {}
        for name, old in before.items():
            new = self.ns.get(name, _MISSING)
            if new is old or not (isinstance(new, CodistributedArray) or
                                  isinstance(old, CodistributedArray)):
                continue
            if old is _MISSING:
                self.ns.pop(name, None)
            else:
                self.ns[name] = old

    def distribute(self, name, local, axis, partition, shape, matlab):
        """Make the codistributed array ``name`` from this worker's part (no
        communication: the client has split it)."""
        from ..darray import _factories
        from ..darray._codistributor import Codistributor

        cls = None
        if matlab:
            from ..darray._matlab import distributed as cls
        else:
            from ..darray import CodistributedArray as cls
        codist = Codistributor(axis, partition, shape)
        self.ns[name] = _factories.from_local_as(cls, local, codist, check=False)

    def part(self, name):
        array = self.ns[name]
        return (array.local, array.axis, array.codistributor.global_indices(),
                tuple(array.shape), tuple(array.partition))

    def run(self, block, spec):
        """Run a block; reply done (with the names it assigned that this worker holds),
        failed (the error and its traceback) or stopped."""
        from .. import _stall, _wait, _world

        with self.lock:
            self.block, self.stop_requested = block, self.stopped >= block
            self.started = block
            _wait.finished_block = self.finished.pop(block, set())
            self.finished.clear()
        outcome = ("stopped", None)
        self.shown = None
        try:
            outcome = self.execute(spec)
        except KeyboardInterrupt:  # the stop's signal, handled as the block ended
            pass
        finally:
            # first, with no call before it (Python handles a signal at a call): from
            # here on a stop's signal is dropped (there is one a block)
            self.block = None
            _stall.block_site = None
            with self.lock:
                self.stop_requested = False
                _wait.finished_block = set()
            while len(_world._stack) > 1:  # a block stopped inside spmd(n)
                _world._stack.pop()
        if outcome[0] == "done" and any(isinstance(s._exchange, _world._Lost)
                                        for s in _world.SCOPES):
            # a collective's SpmdPeerError was caught (a worker had ended the block): its
            # requests are still active, so the world needs new communicators
            outcome = outcome + ("lost",)
        try:
            self.sync_output()
            if self.shown is not None:  # (before the outcome: the client has it then)
                self.conn.send(("shown", block, self.index, self.shown))
            self.conn.send(("result", block, self.index, outcome))
        except _wire.Closed:
            self.client_gone()

    def execute(self, spec):
        """Run a block's code: its outcome."""
        from .. import _stall
        from ..region import spmd

        self.before = {name: self.ns.get(name, _MISSING) for name in spec["assigned"]}
        try:
            self.check_stop()
            for name, value in spec["vars"].items():
                self.ns[name] = value
            for name, source in spec["aliases"].items():
                if source in self.ns:
                    self.ns[name] = self.ns[source]
                    if name != source:
                        self.aliases[name] = source
                else:
                    self.ns.pop(name, None)
            code = spec.get("code")
            if code is not None:
                linecache.cache[spec["filename"]] = (len(code), None,
                                                     code.splitlines(True),
                                                     spec["filename"])
                compiled, shown = _cells.compiled(code, spec["filename"])
                # the end of spmd(n), which this loop makes, is at the cell's end (it
                # was said to be at "<frozen runpy>:88")
                _stall.block_site = f"{spec['filename']}:{len(code.splitlines())}"
            elif hasattr(spec["fn"], "__code__"):  # (the end of a function's block: its
                made = spec["fn"].__code__  # definition)
                _stall.block_site = f"{_stall._relative(made.co_filename)}:" \
                    f"{made.co_firstlineno}"
            n = spec.get("n")
            region = spmd(n) if n is not None else None
            for _ in (region if region is not None else [None]):
                if code is not None:
                    exec(compiled, self.ns)
                    if shown is not None:  # the cell's last value, shown (see show)
                        hook, sys.displayhook = sys.displayhook, self.show
                        try:
                            exec(shown, self.ns)
                        finally:
                            sys.displayhook = hook
                else:
                    self.ns[spec["result"]] = spec["fn"](*spec["args"], **spec["kwargs"])
            names = spec["assigned"] + ([spec["result"]] if spec.get("result") else [])
            for name in spec["assigned"]:  # the client holds a handle of its own of these
                self.aliases.pop(name, None)
            return ("done", {name: _kind(self.ns, name) for name in names})
        except (Stopped, KeyboardInterrupt) as exc:
            keep_requests(exc)
            # raised by the block's own code (no stop had come): the client names this
            # worker, as for an error
            own = isinstance(exc, KeyboardInterrupt) and not self.stop_requested
            return ("stopped", {"worker": self.index} if own else None)
        except BaseException as exc:  # noqa: B902 - SystemExit in a cell is an error too
            keep_requests(exc)
            return ("failed", describe(exc, self.index, spec.get("filename")))


def keep_requests(exc):
    """Keep alive the MPI requests that the calls ``exc`` left behind (a block stopped
    in a wait) are still active on, and their buffers: dropped with their frames, their
    buffers were freed while MPI still read and wrote them (another worker reading a
    large send's memory across nodes aborted, as "process_vm_readv ... Bad address",
    and took the pool down). Found in the locals of spmdlab's frames in the traceback (a
    user's own are left alone), in their containers and in spmdlab's objects among them;
    kept, with every local of the frame they were found in, until they complete (looked
    at here, after each stopped or failed block), never waited for. (An mpi4py request
    holds its own buffers, but not an ``MPI.IN_PLACE`` call's: a large ``spmd_plus``
    stopped in its ``Iallgatherv`` at 3 workers freed its result while MPI still wrote
    the sums into it, and a worker crashed in MPICH a moment later.) The locals of the
    spmdlab frames of the last few stopped blocks are kept too, requests found or not:
    an interrupt can come as a call that posts a request returns, before the request is
    stored anywhere (MPI writes the buffers of such a lost request a moment later, as
    the next calls move it on, or never if another worker never posted its part)."""
    from .._mpi import MPI

    _kept[:] = [(r, keep) for r, keep in _kept if not _completed(r)]  # (their buffers go)

    seen = set()
    found = []

    def look(value, depth):
        if id(value) in seen:
            return
        seen.add(id(value))
        if isinstance(value, MPI.Request):
            if value != MPI.REQUEST_NULL:
                found.append(value)
            return
        if depth == 0:
            return
        try:  # (an object's own attribute lookup may raise: a lost scope's exchange)
            items = _contents(value)
        except Exception:
            return
        for item in items:
            look(item, depth - 1)

    chained = set()
    frames: list = []
    _recent.append(frames)
    del _recent[:-_RECENT]
    try:
        while exc is not None and id(exc) not in chained:
            chained.add(id(exc))
            tb = exc.__traceback__
            while tb is not None:
                if tb.tb_frame.f_globals.get("__name__", "").startswith("spmdlab."):
                    values = list(tb.tb_frame.f_locals.values())
                    if tb.tb_frame.f_globals["__name__"] != __name__:  # (not the block's
                        frames.append(values)                          # arguments here)
                    before = len(found)
                    for value in values:
                        look(value, 3)
                    _kept.extend((r, values) for r in found[before:])
                tb = tb.tb_next
            exc = exc.__cause__ or exc.__context__
    except Exception:  # (never at the cost of the block's outcome)
        pass


def _contents(value):
    """What ``keep_requests`` looks into: a container's items, a bound method's object
    (a request's test, which a wait holds), an spmdlab object's own attributes (read
    without its ``__getattr__``)."""
    if isinstance(value, dict):
        return list(value.values())
    if isinstance(value, (list, tuple, set, frozenset)):
        return list(value)
    if isinstance(value, (types.MethodType, types.BuiltinMethodType)):
        return [value.__self__]
    if not type(value).__module__.startswith("spmdlab."):
        return []
    found = []
    try:
        found.extend(object.__getattribute__(value, "__dict__").values())
    except AttributeError:
        pass
    for cls in type(value).__mro__:
        slots = vars(cls).get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            try:
                found.append(object.__getattribute__(value, name))
            except AttributeError:
                pass
    return found


_kept: list = []  # (request, its frame's locals): left active by stopped blocks (keep_requests)
_recent: list = []  # the spmdlab frames' locals of the last _RECENT stopped blocks
_RECENT = 4
_MISSING = object()  # (a name a block assigned that was not bound before it)


def _completed(request):
    try:
        return request.Test()
    except Exception:  # (an MPI error: it has ended all the same)
        return True


def _kind(ns, name):
    """What the client makes of a block's variable: ``"codistributed"`` (a distributed
    array there), True (a Composite element), False (none on this worker)."""
    if name not in ns:
        return False
    from ..darray import CodistributedArray

    return "codistributed" if isinstance(ns[name], CodistributedArray) else True


def describe(exc, index, filename=None):
    """An error as the client shows it: its class, its text, the traceback from the
    cell's own lines (spmdlab's frames left out), and the exception itself, pickled
    apart, if it can travel (the client chains it if it can read it)."""
    frames = traceback.extract_tb(exc.__traceback__)
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    kept = [f for f in frames if not f.filename.startswith(package)] or frames
    shown = type(exc)
    while shown.__name__.startswith("_") and shown.__module__.startswith("spmdlab."):
        shown = shown.__base__  # spmdlab's own kind of a built-in: sys.exit's SystemExit
    if shown is not type(exc):
        exc = shown(*exc.args).with_traceback(exc.__traceback__)
    lines = ["Traceback (most recent call last):\n"] + traceback.format_list(kept) + \
        traceback.format_exception_only(shown, exc)
    # the exceptions it was raised from (raise ... from e, or in an except block), as
    # Python shows them: raise RuntimeError("could not load") from e showed no trace of
    # the KeyError, nor of the lines it came from. Not spmdlab's own (every frame in
    # spmdlab: an internal error it replaced with a better one)
    seen, chained = {id(exc)}, exc
    while True:
        if chained.__cause__ is not None:
            chained, link = chained.__cause__, "The above exception was the direct " \
                "cause of the following exception:"
        elif chained.__context__ is not None and not chained.__suppress_context__:
            chained, link = chained.__context__, "During handling of the above " \
                "exception, another exception occurred:"
        else:
            break
        frames = traceback.extract_tb(chained.__traceback__)
        outside = [f for f in frames if not f.filename.startswith(package)]
        if id(chained) in seen or frames and not outside:
            break
        seen.add(id(chained))
        lines[:0] = (["Traceback (most recent call last):\n"] * bool(frames) +
                     traceback.format_list(outside) +
                     traceback.format_exception_only(type(chained), chained) +
                     [f"\n{link}\n\n"])
    try:
        message = str(exc)
    except Exception:  # (raised out of here, it ended the worker, and the pool with it)
        message = "<exception str() failed>"  # as Python's traceback says it
    try:  # pickled apart: one the client cannot read (its class in a module only the
        # workers import) left the whole outcome unreadable there, and the error lost
        carried = _wire.packed(exc)
    except Exception:
        carried = None
    return {"type": f"{shown.__module__}.{shown.__qualname__}",
            "name": shown.__name__, "message": message,
            "traceback": "".join(lines), "exception": carried, "worker": index}


def _connect(address, secret):
    host, port = address.rsplit(":", 1)
    deadline = time.monotonic() + 30
    while True:
        try:
            sock = socket.create_connection((host, int(port)), timeout=10)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    sock.settimeout(None)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn = _wire.Connection(sock)
    _wire.respond(conn, secret)
    return conn


def main():
    address = os.environ.pop(_wire.ADDRESS_VARIABLE, None)
    secret = os.environ.pop(_wire.SECRET_VARIABLE, None)
    if address is None or secret is None:
        sys.exit(f"spmdlab.pool._worker: {_wire.ADDRESS_VARIABLE} and "
                 f"{_wire.SECRET_VARIABLE} are not in this worker's environment: a pool's "
                 f"workers are started by its client (spmdlab.start_pool), whose launcher "
                 f"must pass the client's environment on (not srun --export=NONE)")
    conn = _connect(address, secret)
    from .. import _world

    _shared.side, _shared.connection = "worker", conn
    _world.QUEUE_REFERENCE = _shared.worker_queue
    worker = _Worker(conn)
    signal.signal(signal.SIGINT, worker.on_interrupt)
    conn.send(("hello", worker.index, worker.size, socket.gethostname(), os.getpid()))
    # every worker starts spmdlab now, before any code of the user's (its host's watcher
    # keeps the launcher's stderr, so a killed worker is still named)
    _world.current()
    worker.say_who_leaves()
    # nothing to read: the client's keyboard is not the workers' (input() on a worker
    # is at its end at once, as in a batch job). Under MPICH's mpiexec every worker's
    # stdin was a pipe that never ended: input() on worker 2 waited for ever
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    worker.capture_output()
    threading.Thread(target=worker.listen, daemon=True, name="spmdlab-pool").start()
    conn.send(("ready", worker.index))
    worker.serve()


if __name__ == "__main__":
    main()
