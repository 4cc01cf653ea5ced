"""The client of a pool: MATLAB's desktop side of ``parpool`` and ``spmd``.

The client never starts MPI. It starts the workers under a launcher (``_launchers``),
listens for their connections (loopback only unless the workers may run on other
hosts), checks that each knows the pool's secret, and then drives them: a block (a
cell's code, or a function) goes to every worker; while it runs, the client's main
thread prints the workers' output as it comes (``Worker k: ...``), runs the listeners
of the client's queues, and collects each worker's outcome. An error on one worker
stops the others (wherever they wait) and raises SpmdError here; Ctrl-C stops every
worker; after either, the workers give their world new communicators and the pool runs
the next block. A worker that cannot be stopped within a few seconds gets the pool
restarted.

The worker side (``_worker``) never imports this module.
"""

import atexit
import collections
import itertools
import operator
import os
import queue as queues_
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
import weakref
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from numpy.lib.mixins import NDArrayOperatorsMixin as _OperatorsMixin

from .. import _world
from ..errors import SpmdError, SpmdTypeError, SpmdValueError
from . import _cells, _launchers, _shared, _wire

__all__ = ["Pool", "Composite", "Distributed", "parpool", "gcp", "current_pool",
           "start_pool"]

STOP_GRACE = 5.0  # seconds a stopped block has to end on every worker before a restart
_current: Optional["Pool"] = None
_opened: List["Pool"] = []  # the pools started here, oldest first (see delete)
_block_ids = itertools.count(1)
_request_ids = itertools.count(1)
_names = itertools.count(1)


def _cores():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


class _Output:
    """A worker's output, printed line by line as ``Worker k: line``."""

    def __init__(self):
        self.pending: Dict[tuple, str] = {}

    def add(self, index, stream, text):
        key = (index, stream)
        text = self.pending.pop(key, "") + text
        *lines, rest = text.split("\n")
        if rest:
            self.pending[key] = rest
        if lines:
            self._write(stream, "".join(_labelled(index, line) for line in lines))

    def flush(self):
        for (index, stream), rest in sorted(self.pending.items()):
            self._write(stream, _labelled(index, rest))
        self.pending.clear()

    @staticmethod
    def _write(stream, text):
        out = sys.stdout if stream == "stdout" else sys.stderr
        out.write(text)
        out.flush()


def _labelled(index: int, line: str) -> str:
    """``Worker k: line``. A progress bar's ``\\r`` goes back to the start of the line and
    draws over it: each of its redraws gets the label again (the bar overwrote it); a
    line's own ``\\r\\n`` ending is one newline."""
    label = f"Worker {index}: "
    return label + line.rstrip("\r").replace("\r", "\r" + label) + "\n"


def _checked_options(call: str, n: Any, launcher: Any, timeout: Any,
                     launcher_args: Any) -> Tuple[int, List[str]]:
    """The number of workers (this machine's cores for None) and the launcher's arguments
    as a list, once every argument of ``Pool(n, ...)`` has been checked: a bad one raises
    before anything starts or ends (``start_pool`` checks them before it reuses or
    deletes the open pool)."""
    if n is None:
        n = _cores()
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise SpmdValueError(f"{call}: the number of workers must be a positive "
                             f"integer (got {n!r})")
    if launcher not in _launchers.KINDS:
        raise SpmdValueError(f"{call}({n}): launcher must be one of "
                             f"{', '.join(map(repr, _launchers.KINDS))} (got "
                             f"{launcher!r})")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or \
            not timeout > 0:
        raise SpmdValueError(f"{call}({n}): timeout must be a positive number of "
                             f"seconds (got {timeout!r})")
    # a string is a sequence of its characters: "-hosts a" became "- h o s t s  a"
    args: Optional[List[str]]
    try:
        args = None if isinstance(launcher_args, (str, bytes)) else list(launcher_args)
    except TypeError:
        args = None
    if args is None or not all(isinstance(a, str) for a in args):
        raise SpmdTypeError(f"{call}({n}): launcher_args must be a list of strings, one "
                            f"per argument, such as ['-hosts', 'a,b'] (got "
                            f"{launcher_args!r})")
    return n, args


class Pool:
    """A pool of workers driven from this process: MATLAB's ``parpool``.

    ``Pool(n)`` starts ``n`` workers under an MPI launcher (``launcher="auto"``: ``srun``
    inside a Slurm allocation, else the ``mpiexec`` beside this Python or on PATH,
    MPICH's or Open MPI's; or ``"mpich"``, ``"openmpi"``, ``"srun"``). This process
    stays MPI-free: it is MATLAB's client. Blocks run on the workers with
    :meth:`spmd` (a function) or the ``%%spmd`` cell magic (``%load_ext spmdlab``);
    their variables persist from one block to the next. ``delete()`` ends the pool (so
    does the end of this process, whatever ends it).

    Parameters
    ----------
    n
        The number of workers (default: this machine's cores).
    launcher
        ``"auto"``, ``"mpich"``, ``"openmpi"`` or ``"srun"``.
    timeout
        Seconds to wait for every worker to start.
    launcher_args
        More arguments for the launcher (``["-hosts", "a,b"]``, ``["-N", "2"]``).

    Examples
    --------
    >>> pool = Pool(4)                                                # doctest: +SKIP
    >>> squares = pool.spmd(lambda: spmd_index() ** 2)                # doctest: +SKIP
    >>> squares[:], squares[2]                                        # doctest: +SKIP
    ([1, 4, 9, 16], 4)
    >>> pool.delete()                                                 # doctest: +SKIP
    >>> current_pool(create=False) is None      # no pool open in this process
    True

    MATLAB
    ------
    ``pool = parpool(n)``, ``pool.NumWorkers``, ``delete(pool)``
    """

    def __init__(self, n: Optional[int] = None, *, launcher: str = "auto",
                 timeout: float = 120.0, launcher_args: Sequence[str] = ()) -> None:
        call = "parpool"
        n, args = _checked_options(call, n, launcher, timeout, launcher_args)
        if _world.started():
            raise SpmdError(f"{call}: this process is an MPI worker (spmdlab has started "
                            f"MPI here); open a pool from a client: a Python prompt, a "
                            f"notebook or a script run without mpiexec")
        self.size = n
        self._launcher = launcher
        self._timeout = timeout
        self._launcher_args = args
        self._conns: Dict[int, _wire.Connection] = {}
        self._inbox: "queues_.Queue[tuple]" = queues_.Queue()
        self._results: Dict[int, Dict[int, tuple]] = {}
        # block -> the workers whose outcome has come, noted by the reading threads: the
        # main thread may still be printing the output that came before it
        self._arrived: Dict[int, set] = {}
        self._replies: Dict[int, Dict[int, tuple]] = {}
        # block -> worker -> the text of the cell's last value, shown as the block ends
        self._shown: Dict[int, Dict[int, str]] = {}
        self._output = _Output()
        self._composites: "weakref.WeakValueDictionary[str, Composite]" = \
            weakref.WeakValueDictionary()
        # the distributed arrays the cells assigned, by name (as _composites): the last
        # reference to one frees the workers' array
        self._arrays: "weakref.WeakValueDictionary[str, Distributed]" = \
            weakref.WeakValueDictionary()
        self._busy = False
        self._waiting: Optional[Tuple[str, int]] = None  # the block or reply awaited
        self._dropped: List[str] = []  # workers' variables whose handles the client dropped
        self._unreadable: Dict[int, dict] = {}  # a block's first value the client could
        # not read (a queue's item of a class only the workers can import)
        self._ended: Optional[str] = None  # how the pool ended, if a worker's end ended it
        self._leaving: Optional[Tuple[int, Any]] = None  # (worker, status): the first
        # worker that called os._exit, which ends every worker (see _lost)
        self._proc: Optional[subprocess.Popen] = None
        self._launcher_lines: collections.deque = collections.deque(maxlen=200)
        self.hosts: List[str] = []
        self.pids: List[int] = []
        self.closed = True
        self._generation = 0  # bumped by a restart: what the old workers held is gone
        self._start()

    # -- starting and ending -----------------------------------------------------------------

    def _start(self):
        global _current
        kind, path = _launchers.choose(self._launcher)
        self.launcher = kind
        wide = _launchers.spans_hosts(kind)
        server = socket.create_server(("0.0.0.0" if wide else "127.0.0.1", 0))
        server.settimeout(0.1)
        host = socket.getfqdn() if wide else "127.0.0.1"
        secret = _wire.new_secret()
        env = dict(os.environ)
        env[_wire.ADDRESS_VARIABLE] = f"{host}:{server.getsockname()[1]}"
        env[_wire.SECRET_VARIABLE] = secret
        env["SPMDLAB_POOL_WORKER"] = "1"
        package_root = os.path.dirname(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__))))
        env["PYTHONPATH"] = os.pathsep.join(
            [package_root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        started = time.monotonic()
        try:
            for tries_left in (2, 1, 0):
                self._launch(_launchers.command(kind, path, self.size, self._launcher_args),
                             env)
                try:
                    self._accept(server, secret, started)
                    break
                except SpmdError:
                    if not (tries_left and not self._conns and
                            _launchers.failed_to_start(self._launcher_output())):
                        raise
                    self._kill()
        except BaseException:
            self._kill()
            raise
        finally:
            server.close()
        self.closed = False
        self.start_seconds = time.monotonic() - started
        _current = self
        if self not in _opened:  # (a restart: still one of them)
            _opened.append(self)
        _install_client()
        _shared.client_pool = self

    def _launch(self, argv, env):
        self._argv = argv
        self._proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      start_new_session=True)
        self._launcher_lines.clear()
        threading.Thread(target=self._read_launcher, args=(self._proc, self._inbox),
                         daemon=True, name="spmdlab-pool-launcher").start()

    def _read_launcher(self, proc, inbox):
        for raw in iter(proc.stdout.readline, b""):
            line = raw.decode("utf-8", errors="replace").rstrip("\n")
            self._launcher_lines.append(line)
            if not self.closed and proc is self._proc:  # after the start: the launcher's
                inbox.put(("launcher", line))  # own words (a killed worker named)

    def _launcher_output(self):
        text = "\n".join(self._launcher_lines).strip()
        return text or "(nothing)"

    def _start_failed(self, why):
        time.sleep(0.2)  # the launcher's last words
        return SpmdError(f"parpool({self.size}): the pool could not start: {why}\n"
                         f"The launcher's command: {' '.join(self._argv)}\n"
                         f"Its output:\n{self._launcher_output()}")

    def _accept(self, server, secret, started):
        """Every worker's connection, secret and readiness, or an error that says why."""
        deadline = started + self._timeout
        hellos: Dict[int, tuple] = {}
        while len(hellos) < self.size:
            if self._proc.poll() is not None:
                raise self._start_failed(f"the launcher ended (exit status "
                                         f"{self._proc.returncode}) after "
                                         f"{len(hellos)} of {self.size} workers connected")
            if time.monotonic() > deadline:
                raise self._start_failed(f"only {len(hellos)} of {self.size} workers "
                                         f"connected within {self._timeout:g} s")
            try:
                sock, _ = server.accept()
            except socket.timeout:
                continue
            sock.settimeout(10)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _wire.Connection(sock)
            try:
                if not _wire.challenge(conn, secret):
                    conn.close()
                    continue
                hello = conn.receive()
            except (OSError, _wire.Closed, ValueError, EOFError):
                conn.close()
                continue
            if hello[0] != "hello" or hello[2] != self.size or hello[1] in hellos:
                conn.close()
                hint = ("is srun's --mpi plugin the one this Python's MPI speaks (`srun "
                        "--mpi=list`; give it with launcher_args=['--mpi=...'])?"
                        if self.launcher == "srun" else
                        "is another MPI's launcher starting this Python's workers?")
                raise self._start_failed(f"a worker said {hello!r}, not one of "
                                         f"{self.size} workers: {hint}")
            sock.settimeout(None)
            hellos[hello[1]] = hello
            self._conns[hello[1]] = conn
        self.hosts = [hellos[k][3] for k in range(1, self.size + 1)]
        self.pids = [hellos[k][4] for k in range(1, self.size + 1)]
        for index, conn in self._conns.items():
            threading.Thread(target=self._read, args=(index, conn, self._inbox), daemon=True,
                             name=f"spmdlab-pool-{index}").start()
        ready = set()
        while len(ready) < self.size:
            try:
                message = self._inbox.get(timeout=max(0.05, deadline - time.monotonic()))
            except queues_.Empty:
                raise self._start_failed(f"{self.size - len(ready)} workers did not start "
                                         f"spmdlab within {self._timeout:g} s") from None
            if message[0] == "ready":
                ready.add(message[1])
            elif message[0] == "closed":
                raise self._start_failed(f"worker {message[1]} ended while starting")
            elif message[0] == "out":
                self._output.add(*message[1:])

    def _read(self, index, conn, inbox):
        """A worker's messages, in order, into the inbox of the pool it started in."""
        while True:
            try:
                message = conn.receive()
            except (_wire.Closed, EOFError):
                inbox.put(("closed", index))
                return
            except Exception as exc:  # a value the client cannot unpickle
                inbox.put(("unreadable", index, exc))
                continue
            if message[0] == "result":
                self._arrived.setdefault(message[1], set()).add(message[2])
            inbox.put(message)

    def delete(self) -> None:
        """End the pool: every worker ends (MATLAB ``delete(pool)``). Its Composites and
        distributed arrays can no longer be read."""
        self._forget()
        if self.closed:
            return
        self.closed = True
        for conn in self._conns.values():
            try:
                conn.send(("exit",))
            except _wire.Closed:
                pass
        try:
            if self._proc is not None:
                self._proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        self._kill()

    close = delete

    def _forget(self):
        """This pool is no longer one of the open ones (deleted, or ended: a worker
        killed or gone with os._exit); if it was the current one, the last one started
        that is still open becomes current again (gcp), as when it is deleted."""
        global _current
        while self in _opened:  # (a restarted pool was appended again)
            _opened.remove(self)
        if _current is self:  # another pool still open becomes the current one (gcp)
            _current = next((p for p in reversed(_opened) if not p.closed), None)
            if _shared.client_pool is self:
                _shared.client_pool = _current

    def _kill(self):
        for conn in self._conns.values():
            conn.close()
        self._conns = {}
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, 3), (signal.SIGKILL, 3)):
            try:
                os.killpg(proc.pid, sig)
            except OSError:
                pass
            try:
                proc.wait(wait)
                return
            except subprocess.TimeoutExpired:
                continue

    def _restart(self, why):
        """A new pool of the same size in place of this one (its variables are lost);
        the current pool stays the current one (it became this one)."""
        global _current
        current, client_pool = _current, _shared.client_pool
        self.closed = True
        self._kill()
        self._composites.clear()
        self._arrays.clear()
        self._generation += 1
        self._inbox = queues_.Queue()  # the old workers' last notices stay in the old
        sys.stderr.write(f"spmdlab: {why}; the pool was restarted with {self.size} "
                         f"workers (the workers' variables are lost)\n")
        self._results.clear()
        self._arrived.clear()
        self._replies.clear()
        self._shown.clear()
        self._dropped = []
        self._unreadable.clear()
        self._leaving = None
        self._output = _Output()
        self._start()
        if current is not self and current is not None and not current.closed:
            _current, _shared.client_pool = current, client_pool

    def __enter__(self) -> "Pool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.delete()

    @property
    def NumWorkers(self) -> int:  # noqa: N802 - MATLAB's property name
        """MATLAB ``pool.NumWorkers``."""
        return self.size

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{self.size} workers ({self.launcher})"
        return f"<spmdlab Pool: {state}>"

    # -- the client's loop -------------------------------------------------------------------

    def _check_open(self, call):
        if self.closed:
            if self._ended is not None:  # not deleted: a worker's end ended it
                raise SpmdError(f"{call}: the pool has ended ({self._ended}); start a "
                                f"new one with parpool({self.size})")
            raise SpmdError(f"{call}: the pool has been deleted; start a new one with "
                            f"parpool(n)")
        if self._busy:
            raise SpmdError(f"{call}: the pool is running a block (a queue's listener "
                            f"cannot use the pool; do it after the block)")
        self._send_dropped()

    def _drop(self, name):
        """(A handle's ``__del__``) the workers' ``name`` is to go: sent before the next
        block or request, never from ``__del__`` itself, which runs wherever the last
        reference went (a Ctrl-C raised in it would be lost, and the message sent to only
        some of the workers)."""
        self._dropped.append(name)

    def _send_dropped(self):
        names = list(self._dropped)
        if names:
            with _wire.interrupts_deferred():
                for k in range(1, self.size + 1):
                    self._send(k, ("del", names))
                del self._dropped[:len(names)]

    def _send(self, index, message):
        try:
            self._conns[index].send(message)
        except _wire.Closed:
            self._inbox.put(("closed", index))

    @staticmethod
    def _check_sendable(call, named):
        """SpmdTypeError naming the call and the value, for the first of ``named``
        (``(what, value)`` pairs) that cannot be sent to the workers."""
        for what, value in named:
            try:
                _wire.dumps(value)
            except Exception as exc:
                raise SpmdTypeError(f"{call}: {what} (a {type(value).__name__}) cannot be "
                                    f"sent to the workers: {type(exc).__name__}: "
                                    f"{exc}") from None

    def _handle(self, message):
        """One message from a worker or the launcher."""
        kind = message[0]
        if kind == "out":
            self._output.add(message[1], message[2], message[3])
        elif kind == "queue":
            queue = _shared.client_queues.get(message[1])
            if queue is not None:
                try:
                    queue._arrive(message[2])
                except Exception:  # as MATLAB: a failing afterEach function warns
                    self._output.flush()
                    sys.stderr.write("spmdlab: a DataQueue listener on the client "
                                     "failed (the block goes on):\n" +
                                     traceback.format_exc())
        elif kind == "result":
            self._results.setdefault(message[1], {})[message[2]] = message[3]
        elif kind == "shown":  # a cell's last value: printed as the block ends (_run)
            self._shown.setdefault(message[1], {})[message[2]] = message[3]
        elif kind == "reply":
            # only the request being waited for: the late replies of one given up (Ctrl-C,
            # a timeout) would otherwise be kept for good (a Composite's large values)
            if self._waiting == ("reply", message[1]):
                self._replies.setdefault(message[1], {})[message[2]] = message[3]
        elif kind == "launcher":
            self._output.flush()
            sys.stderr.write(message[1] + "\n")
        elif kind == "leaving":  # os._exit on a worker: the job ends (see _lost)
            if self._leaving is None:
                self._leaving = (message[1], message[2])
        elif kind == "closed":
            self._lost(message[1])
        elif kind == "unreadable_request":
            # a worker could not read what the client sent it (a Composite element or
            # distributed array it does not hold, a class it cannot import): the block
            # or request being waited on failed on that worker
            waiting = self._waiting
            if waiting is not None:
                table = self._results if waiting[0] == "run" else self._replies
                table.setdefault(waiting[1], {}).setdefault(message[1],
                                                            ("failed", message[2]))
        elif kind == "unreadable":
            # it fails the block or request being waited on, as an error on that worker
            # does (raised here, it used to leave the block running on the workers and
            # the others' copies to fail the next, unrelated call)
            index, exc = message[1], message[2]
            text = (f"{exc} (worker {index} sent a value this client cannot read: is the "
                    f"module that defines it importable here?)")
            info = {"worker": index, "name": type(exc).__name__, "message": text,
                    "traceback": "value could not be read on the client\n",
                    "type": f"{type(exc).__module__}.{type(exc).__qualname__}",
                    "exception": exc}
            waiting = self._waiting
            if waiting is None:  # between calls (a worker's thread): said, not raised
                self._output.flush()
                sys.stderr.write(f"spmdlab: worker {index}: {type(exc).__name__}: "
                                 f"{text}\n")
            elif waiting[0] == "run":
                self._unreadable.setdefault(waiting[1], info)
            else:
                self._replies.setdefault(waiting[1], {}).setdefault(index, ("failed", info))

    def _lost(self, index):
        """A worker's connection closed while the pool was open: the pool has ended."""
        self._output.flush()
        time.sleep(0.5)  # the launcher's report (a watcher names a killed worker)
        try:
            while True:
                message = self._inbox.get_nowait()
                if message[0] in ("launcher", "leaving"):
                    self._handle(message)
        except queues_.Empty:
            pass
        self.closed = True
        self._forget()
        self._kill()
        named = _watcher_words(self._launcher_lines)
        if self._leaving is not None:  # its connection closes in the launcher's order
            index, status = self._leaving
            why = f"worker {index} of {self.size} called os._exit({status})"
            said = f"{why}, which ends every worker"
        elif named is not None:  # the host's watcher named the worker and how it ended
            why = said = f"worker {named[0]} of {self.size} {named[1]}"
        else:
            why = said = (f"worker {index} of {self.size} ended (killed, or the launcher "
                          f"ended the job)")
        self._ended = why  # (what a later call on the pool says, see _check_open)
        raise SpmdError(f"{said}: the pool has ended; start a new one with "
                        f"parpool({self.size})")

    def _pump(self, timeout):
        """Handle one message within ``timeout`` seconds, if one comes."""
        try:
            message = self._inbox.get(timeout=timeout)
        except queues_.Empty:
            if self._proc is not None and self._proc.poll() is not None and not self.closed:
                self._lost(min(self._conns) if self._conns else 1)
            return
        self._handle(message)

    def _request(self, call, workers, kind, *args, within=None):
        """Send a request to ``workers`` and return ``{k: value}`` of their replies
        (``within``: seconds they have to reply, else TimeoutError)."""
        self._check_open(call)
        if not workers:  # (c[[]]: nothing to ask)
            return {}
        rid = next(_request_ids)
        self._waiting = ("reply", rid)
        try:
            # a Ctrl-C while the request is sent waits until every worker has it: a
            # refresh sent to some only left them waiting in its collective for the
            # others, which ran the next block (stopped, it restarted the pool)
            with _wire.interrupts_deferred():
                for k in workers:
                    try:
                        self._send(k, (kind, rid) + args)
                    except _wire.Closed:
                        raise
                    except Exception:  # nothing has gone: the frame is made before it
                        self._check_sendable(call,  # is sent
                                             [("the value", a) for a in args])
                        raise
            deadline = None if within is None else time.monotonic() + within
            while len(self._replies.get(rid, ())) < len(workers):
                if deadline is not None and time.monotonic() > deadline:
                    self._replies.pop(rid, None)
                    raise TimeoutError(f"{call}: no reply to {kind!r} within {within:g} s")
                self._pump(0.1)
        except BaseException:  # Ctrl-C: the replies that came before it (a gather's parts,
            self._replies.pop(rid, None)  # a Composite's large elements) are not kept
            raise
        finally:
            self._waiting = None
        replies = self._replies.pop(rid)
        for k in sorted(replies):
            status, value = replies[k]
            if status == "failed":
                raise _remote_error(call, value, self.size)
        return {k: replies[k][1] for k in replies}

    def _run(self, spec, call):
        """Run a block on every worker; return ``{k: outcome}``."""
        self._check_open(call)
        block = next(_block_ids)
        self._waiting = ("run", block)
        interrupted = False  # Ctrl-C here: raised even if every worker had ended the block
        try:
            # the workers that skip a block of spmd(n) are sent no function, arguments nor
            # client variables: they never call it, a Composite among them that they hold
            # no element of (the result of an earlier spmd(n)) failed to unpickle there,
            # and a cell's variables stored there came back as elements they never had
            # (%%spmd 2 of t = t + 1: t[3] was the client's t). A cell's Composites read
            # under another name are theirs still: y = y * 2 leaves them their y
            n = spec.get("n")
            # (the workers its messages speak of: "worker 2 of 2" in spmd(2), MATLAB's)
            runs = self.size if n is None else max(n, 1)  # spmd(0): 1
            skipped = dict(spec, fn=None, args=(), kwargs={}, vars={})
            # a Ctrl-C while the block is sent waits until every worker has it: sent to
            # some only, it would wait for the others in its first collective, and meet
            # the next block's collectives there
            with _wire.interrupts_deferred():
                for k in range(1, self.size + 1):
                    try:
                        self._send(k, ("run", block, spec if k <= runs else skipped))
                    except Exception:  # nothing has gone (the frame is made first)
                        self._waiting = None
                        if k > 1:
                            raise
                        args = spec.get("args", ())
                        # (a distributed array's operation: its operands, not the
                        # arguments of the function that runs it)
                        self._check_sendable(
                            call, [(f"argument {i + 1}" if call == "spmd" else "an operand",
                                    a) for i, a in enumerate(args)] +
                            [(f"argument {name!r}", a)
                             for name, a in spec.get("kwargs", {}).items()] +
                            [("the function", spec.get("fn"))])
                        raise
        except KeyboardInterrupt:
            interrupted = True
        self._busy = True
        stopped_at = None
        failed = None
        unstoppable = None
        ended: Dict[int, float] = {}  # workers that ended the block -> when they were seen
        try:
            if interrupted:
                for k in range(1, self.size + 1):
                    self._send(k, ("stop", block))
                stopped_at = time.monotonic()
            while len(self._results.get(block, ())) < self.size:
                try:
                    if stopped_at is not None and time.monotonic() - stopped_at > STOP_GRACE:
                        # those whose outcome has not come: one that has come waits
                        # behind the output the workers wrote before it, still being
                        # printed here (a block that prints a lot): they have stopped
                        unstoppable = sorted(set(range(1, self.size + 1)) -
                                             set(self._results.get(block, ())) -
                                             self._arrived.get(block, set()))
                        if unstoppable:
                            break
                    self._pump(0.05)
                    outcomes = self._results.get(block, {}).values()
                    if failed is None:
                        failed = next((o[1] for o in outcomes if o[0] == "failed"),
                                      self._unreadable.get(block))  # the first to arrive
                    # a worker failed, or stopped by itself (a KeyboardInterrupt in the
                    # block's code): stop the others wherever they wait
                    if stopped_at is None and (failed is not None or
                                               any(o[0] == "stopped" for o in outcomes)):
                        for k in range(1, self.size + 1):
                            self._send(k, ("stop", block))
                        stopped_at = time.monotonic()
                    if stopped_at is None:
                        self._tell_ended(block, ended)
                except KeyboardInterrupt:
                    if self.closed:
                        raise
                    interrupted = True
                    if stopped_at is not None and failed is None:  # a second Ctrl-C
                        stopped_at = -STOP_GRACE
                        continue
                    for k in range(1, self.size + 1):
                        self._send(k, ("stop", block))
                    stopped_at = time.monotonic()
        finally:
            self._busy = False
            self._waiting = None
            self._arrived.pop(block, None)
            self._output.flush()
            # a cell's last value, each worker's in worker order (MATLAB's order), once
            # every worker has ended the block: in the order they ended, it came as
            # Worker 4, 1, 3, 2
            for k, text in sorted(self._shown.pop(block, {}).items()):
                self._output.add(k, "stdout", text + "\n")
        if unstoppable:
            self._restart(f"worker(s) {', '.join(map(str, unstoppable))} did not stop "
                          f"within {STOP_GRACE:g} s")
            if failed is not None:
                raise _remote_error(call, failed, runs)
            raise KeyboardInterrupt("the block was stopped; the pool was restarted")
        outcomes = self._results.pop(block)
        unreadable = self._unreadable.pop(block, None)
        if any(o[0] != "done" for o in outcomes.values()):
            self._refresh(restore=True)
            failures = sorted((k, o[1]) for k, o in outcomes.items() if o[0] == "failed")
            if failures or failed is not None:
                first = failed if failed is not None else failures[0][1]
                raise _remote_error(call, first, runs,
                                    others=[k for k, _ in failures if k != first["worker"]])
            own = sorted(k for k, o in outcomes.items() if o[0] == "stopped" and o[1])
            if own and not interrupted:  # not the user's Ctrl-C: the block's own code's
                raise KeyboardInterrupt(f"{call}: worker {own[0]} of {runs} raised "
                                        f"KeyboardInterrupt: the block was stopped on "
                                        f"every worker")
            raise KeyboardInterrupt("the block was stopped on every worker")
        if any(o[2:] == ("lost",) for o in outcomes.values()):
            self._refresh()  # a worker caught a collective's SpmdPeerError (see _worker.run)
        if unreadable is not None:  # every worker ended the block before its stop came
            raise _remote_error(call, unreadable, runs)
        if interrupted:  # the block had ended everywhere before the stop came: the
            # interrupt is still the user's (a loop of short blocks must stop)
            raise KeyboardInterrupt("the block had ended on every worker")
        return outcomes

    def _tell_ended(self, block, ended):
        """The workers still in a block are told which have ended it (a moment after
        they did: most blocks end everywhere at once): their waits for those fail, as
        a wait for a worker that finished the program does, instead of waiting for
        ever (MATLAB: the other worker became idle)."""
        now = time.monotonic()
        results = self._results.get(block, {})
        for k, outcome in results.items():
            if outcome[0] == "done" and k not in ended:
                ended[k] = now
        for k, since in ended.items():
            if 0 <= since < now - 0.25:  # (told: marked with -1)
                ended[k] = -1.0
                for j in range(1, self.size + 1):
                    if j not in results:
                        self._send(j, ("finished", block, k))

    def _refresh(self, restore=False):
        """After a stopped block: new communicators on every worker (``restore``: the
        block was stopped or failed, and its assignments of codistributed arrays are
        undone on every worker, see ``_worker.restore``)."""
        try:
            self._request("spmd", range(1, self.size + 1), "refresh", restore,
                          within=STOP_GRACE)
        except (SpmdError, TimeoutError):
            self._restart("the workers could not recover from a stopped block")

    # -- blocks ------------------------------------------------------------------------------

    def spmd(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> "Composite":
        """Run ``fn(*args, **kwargs)`` on every worker, as a block of a script (spmdlab's
        primitives work in it); returns a Composite of the results (a codistributed
        array that every worker returns: the distributed array, as MATLAB's client sees
        it after ``spmd``). ``fn`` is positional only: ``kwargs`` may hold any name
        (``pool.spmd(make, n=10)``).

        Examples
        --------
        >>> pool = parpool(2)                                         # doctest: +SKIP
        >>> pool.spmd(lambda: spmd_index() ** 2)[:]                   # doctest: +SKIP
        [1, 4]
        """
        return self.spmd_on(None, fn, *args, **kwargs)

    def spmd_on(self, n: Optional[int], fn: Callable[..., Any], /, *args: Any,
                **kwargs: Any) -> "Composite":
        """``spmd`` on the first ``n`` workers (MATLAB ``spmd(n)``): the others skip the
        block and hold no element of the result."""
        return self._block("spmd", n, fn, args, kwargs)

    def _block(self, call: str, n: Optional[int], fn: Callable[..., Any], args: tuple,
               kwargs: Dict[str, Any]) -> "Composite":
        """``spmd_on``, its failures named as ``call`` (a distributed array's operation
        on the client names itself: "D[:] = ...: worker 2 of 2 failed", not "spmd")."""
        name = f"_spmdlab_result_{next(_names)}"
        n = self._check_n("spmd", n)
        if not callable(fn):
            raise SpmdTypeError(f"spmd: the block must be a function to run on every "
                                f"worker (got {fn!r} that is a {type(fn).__name__})")
        self._check_handles(call, list(args) + list(kwargs.values()))
        self._check_elements(n, [(f"argument {i + 1}", a) for i, a in enumerate(args)] +
                             [(f"argument {key!r}", a) for key, a in kwargs.items()])
        spec: Dict[str, Any] = {"vars": {}, "aliases": {}, "fn": fn, "args": args,
                                "kwargs": kwargs, "result": name, "assigned": [], "n": n}
        try:
            outcomes = self._run(spec, call)
            if all(outcomes[k][1].get(name) == "codistributed" for k in outcomes):
                return Distributed(self, name)  # type: ignore[return-value]
            return self._result(name, outcomes, owned=True)
        except BaseException:  # the workers that ended the block hold a result no
            self._drop(name)  # handle will ever free
            raise

    def _check_handles(self, call, values):
        """A Composite or distributed array of another (deleted) pool is refused here,
        at the client: this pool's workers hold nothing of it."""
        for value in values:
            inner = value.values() if isinstance(value, dict) else value \
                if isinstance(value, (list, tuple)) else (value,)
            for v in inner:
                if not isinstance(v, (Composite, Distributed)):
                    continue
                if v._pool is not self:
                    what = "Composite" if isinstance(v, Composite) else \
                        "distributed array"
                    where = _other_pool(v._pool) + ("," if v._pool.closed else "")
                    raise SpmdValueError(f"{call}: a {what} of another pool{where} cannot "
                                         f"be sent to this pool's workers")
                v._check_current(call)

    def _check_elements(self, n, named):
        """A Composite argument of a block must have an element on every worker that runs
        it (each is sent its own): else SpmdValueError here, naming the argument and the
        workers (it failed on those workers, with their internal traceback)."""
        running = range(1, (self.size if n is None else max(n, 1)) + 1)  # spmd(0): worker 1
        for what, value in named:
            inner = value.values() if isinstance(value, dict) else value \
                if isinstance(value, (list, tuple)) else (value,)
            for v in inner:
                if not isinstance(v, Composite):
                    continue
                missing = [k for k in running if not v._present.get(k)]
                if missing:
                    where = "no worker" if not any(v._present.values()) else \
                        "worker(s) " + _ranges(sorted(k for k in v._present
                                                      if v._present[k]))
                    raise SpmdValueError(f"spmd: {what}, a Composite, has no element on "
                                         f"worker(s) {_ranges(missing)} of the block (it "
                                         f"has elements on {where})")

    def _check_n(self, call, n):
        if n is None:
            return None
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= self.size:
            raise SpmdValueError(f"{call}({n!r}): the number of workers must be an integer "
                                 f"from 0 to the pool's {self.size}")
        return n

    def run_cell(self, code: str, namespace: Dict[str, Any], n: Optional[int] = None,
                 filename: Optional[str] = None) -> List[str]:
        """Run a cell's code on the workers with MATLAB's transparency: the names of
        ``namespace`` the code reads go to the workers (a Composite as each worker's own
        element, a distributed array as its codistributed self); the names it assigns
        come back into ``namespace`` as Composites (codistributed arrays as
        distributed). Returns the names assigned."""
        call = "spmd"
        n = self._check_n(call, n)
        filename = filename or f"<spmd cell {next(_names)}>"
        assigned, definitions, loaded = _cells.names(code, filename)
        send: Dict[str, Any] = {}
        aliases: Dict[str, str] = {}
        for name in sorted(loaded):
            if name not in namespace or _cells.is_prompt_name(name):
                continue
            value = namespace[name]
            if isinstance(value, (Composite, Distributed)):
                if value._pool is not self:
                    raise SpmdValueError(f"{call}: {name} belongs to another pool"
                                         f"{_other_pool(value._pool)}")
                value._check_current(f"{call}: {name}")
                aliases[name] = value._name
            else:
                send[name] = value
        self._check_sendable(call, [(f"the client's variable {name!r}", value)
                                    for name, value in send.items()])
        returned = [a for a in assigned if a not in definitions]
        spec = {"vars": send, "aliases": aliases, "code": code, "filename": filename,
                "assigned": returned, "n": n}
        outcomes = self._run(spec, call)
        for name in returned:
            present = {k: outcomes[k][1].get(name) for k in outcomes}
            if not any(present.values()):
                composite = self._composites.get(name)
                if composite is not None:  # del x on every worker: x holds no element
                    composite._present = {k: False for k in present}
                value = namespace.get(name)
                if isinstance(value, Distributed) and value._pool is self and \
                        value._name == name:  # del D of a cell's D: its data is gone
                    del namespace[name]  # (one made here keeps its own, under its name)
                continue
            if all(p == "codistributed" for p in present.values()):
                namespace[name] = self._array(name)
            else:
                namespace[name] = self._result(name, outcomes, owned=True)
        return returned

    def _array(self, name):
        """A cell's codistributed ``name`` as the client's distributed array (the one it
        has already, if any): dropping its last reference frees the workers' array. A
        Composite of that name from an earlier cell no longer frees it (its last
        reference deleted the array that had replaced its elements)."""
        composite = self._composites.pop(name, None)
        if composite is not None:
            composite._owned = False
        array = self._arrays.get(name)
        if array is None:
            array = Distributed(self, name)
            array._owned = True
            self._arrays[name] = array
        else:  # the cell may have bound another array to the name (D = D[0:2, :]): its
            array._shape = None  # shape is asked again (len(D) and D.shape were the old)
        return array

    def _result(self, name, outcomes, owned):
        present = {k: bool(outcomes[k][1].get(name)) for k in outcomes}
        array = self._arrays.pop(name, None)  # a distributed array of an earlier cell: its
        if array is not None:  # last reference would delete the elements that replaced it
            array._owned = False
        composite = self._composites.get(name)
        if composite is None:
            composite = Composite._on(self, name, present, owned)
        else:
            composite._present = present
        return composite

    # -- queues ------------------------------------------------------------------------------

    def _to_worker_queue(self, owner, tag, data):
        if self.closed:  # a listener may send while a block runs: that is what it is for
            raise SpmdError("send: the queue's pool has been deleted")
        if not 1 <= owner <= self.size:
            raise SpmdValueError(f"send: the queue's owner, worker {owner}, is not in the "
                                 f"pool of {self.size}")
        self._send(owner, ("queue_item", tag, data))

    # -- distributed arrays ------------------------------------------------------------------

    def distribute(self, x: Any) -> "Distributed":
        """Spread ``x`` over the workers (MATLAB ``distributed(X)``): split along MATLAB's
        default dimension here, each worker sent its part. Inside a block it is a
        codistributed array; ``gather`` brings it back."""
        from .._backends import LOCAL, local_family
        from ..darray._codistributor import Codistributor, default_partition, offsets
        from ..darray._factories import as_local
        from ..darray._matlab import distributed

        call = "distributed"
        self._check_open(call)
        if isinstance(x, Distributed):  # as codistributed(C1) in a block: a copy with
            self._check_handles(call, [x])  # the default distribution
            return self.spmd(distributed, x)  # type: ignore[return-value]
        # refused here, not by every worker after its part was sent: objects (a dict, an
        # object array, a ragged list raised numpy's own ValueError, an unpicklable
        # element a bare TypeError)
        x = as_local(call, x)
        if x.ndim == 0:
            x = x.reshape(1, 1)
        family = local_family(x)
        axis = distributed._default_axis(x.shape)
        partition = default_partition(x.shape[axis], self.size)
        codist = Codistributor(axis, partition, tuple(x.shape))
        name = f"_spmdlab_distributed_{next(_names)}"
        starts = offsets(partition)
        rid = next(_request_ids)
        self._waiting = ("reply", rid)
        try:
            for k in range(1, self.size + 1):
                index = [slice(None)] * x.ndim
                index[axis] = slice(starts[k - 1], starts[k - 1] + partition[k - 1])
                part = x[tuple(index)]
                if family not in (None, "numpy"):  # a torch view: sent with its whole storage
                    part = LOCAL[family].copy(part)  # (each worker held all of x)
                self._send(k, ("distribute", rid, name, part, axis, partition,
                               tuple(x.shape), True))
            while len(self._replies.get(rid, ())) < self.size:
                self._pump(0.1)
        except BaseException:  # Ctrl-C: the parts some workers were sent are freed
            self._replies.pop(rid, None)
            self._drop(name)
            raise
        finally:
            self._waiting = None
        for k, (status, value) in sorted(self._replies.pop(rid).items()):
            if status == "failed":
                raise _remote_error(call, value, self.size)
        return Distributed(self, name)

    def _gather(self, handle):
        from .._backends import LOCAL, local_family

        parts = self._request("gather", range(1, self.size + 1), "part", handle._name)
        views = {k: (parts[k][1], parts[k][3], parts[k][4]) for k in parts}
        if len(set(views.values())) > 1:  # a block assigned it on some workers only
            shown = "; ".join(f"worker {k}: shape {shape}, axis {axis}, partition "
                              f"{list(partition)}"
                              for k, (axis, shape, partition) in sorted(views.items()))
            raise SpmdValueError(f"gather: the workers hold different arrays under this "
                                 f"distributed array's name ({shown}): a block assigned it "
                                 f"on some workers only; make it again on every worker")
        # joined in the parts' family (a torch tensor's, as gather in a block gives)
        family = LOCAL[local_family(parts[1][0]) or "numpy"]
        return family.cat([parts[k][0] for k in range(1, self.size + 1)], parts[1][1])


def _watcher_words(lines):
    """``(k, how)`` from the host watcher's line among the launcher's ``lines`` ("###
    spmdlab: worker 2 of 3 (host, pid 7) ended by SIGTERM (...); the launcher ends the
    job"): which worker ended and how; None where no watcher named one worker."""
    for line in list(lines):
        match = re.match(r"### spmdlab: worker (\d+) of \d+ \([^()]*\) (.+?); the "
                         r"launcher ends the job", line)
        if match:
            return int(match.group(1)), match.group(2)
    return None


def _other_pool(pool):
    """How an error names another pool than the one called: deleted, or still open
    beside it (``Pool(n)`` made while another was open)."""
    if pool.closed:
        return ", which has been deleted"
    return f" (of {pool.size} workers, still open beside this one)"


def _remote_error(call, info, size, others=()):
    """SpmdError naming the worker, with its traceback (the cell's own lines)."""
    also = ""
    if others:
        also = f" (worker{'s' if len(others) > 1 else ''} " \
               f"{', '.join(map(str, others))} failed too)"
    text = (f"{call}: worker {info['worker']} of {size} failed{also}: {info['name']}: "
            f"{info['message']}\n\nWorker {info['worker']}'s "
            f"{info['traceback'].rstrip()}")
    error = SpmdError(text)
    error.worker = info["worker"]
    error.remote_traceback = info["traceback"]
    error.remote_type = info["type"]
    cause = info.get("exception")
    if isinstance(cause, bytes):  # (a worker's, pickled apart: see _worker.describe)
        cause = _wire.unpacked(cause)
    if isinstance(cause, BaseException):
        error.__cause__ = cause
        error.__suppress_context__ = True
    return error


# -- Composite on the client ------------------------------------------------------------------

class Composite:
    """On the client, one value per worker of a pool: MATLAB's Composite.

    ``c[k]`` reads worker k's element, ``c[:]`` all of them, ``c[k] = v`` sends ``v``
    to worker k; ``len(c)`` is the pool's size, ``c.exist(k)`` whether worker k holds an
    element. Printing it fetches nothing. Deleting the client's last reference frees
    the workers' values. Made by a block's assignments (``%%spmd``), by
    :meth:`Pool.spmd`, or on the client by ``Composite()`` (this class,
    ``spmdlab.Composite`` or ``spmdlab.matlab.Composite``): empty, over the current pool
    (started as ``gcp`` starts one) or over ``pool``; ``Composite(value)`` gives every
    worker ``value``.

    Examples
    --------
    >>> pool = start_pool(2)                                          # doctest: +SKIP
    >>> c = pool.spmd(lambda: spmd_index() * 10)                      # doctest: +SKIP
    >>> c                                                             # doctest: +SKIP
    <Composite on a pool of 2: elements on workers 1-2; c[k] reads worker k's>
    >>> c[2], c[:], len(c)                                            # doctest: +SKIP
    (20, [10, 20], 2)
    >>> c[1] = "from the client"                                      # doctest: +SKIP
    >>> Composite.__module__
    'spmdlab.pool._client'

    MATLAB
    ------
    ``X{k}``, ``X(:)``, ``X{k} = v``, ``length(X)``, ``exist(X, k)``, ``Composite()``
    """

    __slots__ = ("_pool", "_name", "_present", "_owned", "_generation", "__weakref__")
    _pool: Pool
    _name: str
    _present: Dict[int, bool]
    _owned: bool

    def __new__(cls, value: Any = None, pool: Optional[Pool] = None) -> "Composite":
        if pool is not None and not isinstance(pool, Pool):
            raise SpmdTypeError(f"Composite(): 'pool' must be a Pool or None (got "
                                f"{type(pool).__name__})")
        return _new_composite(current_pool() if pool is None else pool, value)

    def __init__(self, value: Any = None, pool: Optional[Pool] = None) -> None:
        pass  # made by __new__ (or by _on, which a pool's blocks use)

    @classmethod
    def _on(cls, pool, name, present, owned):
        self = object.__new__(cls)
        self._pool, self._name, self._present, self._owned = pool, name, present, owned
        self._generation = pool._generation
        pool._composites[name] = self
        return self

    def _check_current(self, call):
        _check_current(self, call, "Composite")

    def __len__(self) -> int:
        return self._pool.size

    def __reduce__(self):
        """Sent to the pool's workers (an argument of ``pool.spmd``): each worker's own
        element there."""
        return _shared.variable, (self._name, "Composite")

    def _numbers(self, call, k):
        import numpy as np

        size = self._pool.size
        if isinstance(k, slice):  # as a Composite in a script: c[1:2] would be Python's
            # slice of the list of workers, worker 2 alone
            if k != slice(None):
                raise SpmdTypeError(f"Composite[{_shown_key(k)}]: only c[:] slices a "
                                    f"Composite; pick workers with a list or range of "
                                    f"worker numbers (1-based), such as "
                                    f"c[range(2, {size + 1})]")
            return list(range(1, size + 1))
        if isinstance(k, np.ndarray):  # (a 0-d one is one number, as numpy indexes)
            k = k.reshape(-1).tolist() if k.ndim else k.item()
        if isinstance(k, (list, tuple, range)):
            return [self._number(call, v) for v in k]
        return self._number(call, k)

    def _number(self, call, k):
        import numpy as np

        size = self._pool.size
        # a whole float is a worker number as MATLAB writes it (x{2} with 2 a double)
        whole = isinstance(k, (float, np.floating)) and float(k).is_integer()
        if isinstance(k, bool) or not (isinstance(k, (int, np.integer)) or whole) or \
                not 1 <= k <= size:
            raise SpmdValueError(f"{call}: workers are numbered 1 to {size} (got {k!r})")
        return int(k)

    def __getitem__(self, k: Any) -> Any:
        call = f"Composite[{_shown_key(k)}]"
        numbers = self._numbers(call, k)
        many = isinstance(numbers, list)
        wanted = numbers if many else [numbers]
        self._check_current(call)
        for j in wanted:
            if not self._present.get(j):
                raise SpmdValueError(f"Composite[{j}]: worker {j} holds no element of "
                                     f"{self._shown()}")
        # each worker asked once: c[[1, 1]] waited for ever for a second reply from worker 1
        values = self._pool._request(call, sorted(set(wanted)), "get", self._name)
        for j in wanted:
            if not values[j][0]:  # dropped on the worker since (a stopped block's restart)
                self._present[j] = False
                raise SpmdValueError(f"Composite[{j}]: worker {j} holds no element of "
                                     f"{self._shown()}")
        result = [values[j][1] for j in wanted]
        return result if many else result[0]

    def __setitem__(self, k: Any, value: Any) -> None:
        call = f"Composite[{_shown_key(k)}] ="
        numbers = self._numbers(call, k)
        self._check_current(call)
        # checked here, not on the worker: a distributed array stored as one worker's
        # element could never be read back (its parts live on every worker), and one of
        # another pool failed on the worker, with the worker's internal traceback
        if isinstance(value, Distributed):
            raise SpmdTypeError(f"{call}: a distributed array cannot be one worker's "
                                f"element (its parts live on every worker): gather(D) it "
                                f"first, or pass it to a block")
        self._pool._check_handles(call, [value])
        for j in numbers if isinstance(numbers, list) else [numbers]:
            self._pool._request(f"Composite[{j}] =", [j], "set", self._name, value)
            self._present[j] = True

    def __iter__(self) -> Iterator[Any]:
        return iter(self[:])

    def exist(self, k: Any = None) -> Union[bool, List[bool]]:
        """Whether worker ``k`` holds an element (all workers when ``k`` is None; one
        bool per worker of a list, range or array of them)."""
        if k is None:
            return [self._held(j) for j in range(1, self._pool.size + 1)]
        numbers = self._numbers("Composite.exist", k)
        if isinstance(numbers, list):
            return [self._held(j) for j in numbers]
        return self._held(numbers)

    def _held(self, j):
        """Whether worker ``j`` holds an element: none does once the pool was deleted or
        restarted (the workers' values were lost; exist said True while c[j] failed)."""
        pool = self._pool
        return bool(self._present.get(j)) and not pool.closed and \
            self._generation == pool._generation

    def _shown(self):
        return self._name if not self._name.startswith("_spmdlab") else "this Composite"

    def __repr__(self) -> str:
        held = [j for j in range(1, self._pool.size + 1) if self._held(j)]
        where = "no worker" if not held else f"worker{'s' if len(held) > 1 else ''} " + \
            _ranges(held)
        name = "" if self._name.startswith("_spmdlab") else f" {self._name!r}"
        return (f"<Composite{name} on a pool of {self._pool.size}: elements on {where}; "
                f"c[k] reads worker k's>")

    def __del__(self):
        try:
            pool = self._pool
            if self._owned and not pool.closed and pool._composites.get(self._name) in \
                    (None, self) and self._generation == pool._generation:
                pool._drop(self._name)
        except Exception:
            pass


def _shown_key(k):
    """A Composite's subscript as written: ``:``, ``1:3``, ``2``, ``[1, 3]``."""
    if isinstance(k, slice):
        text = ":".join("" if v is None else repr(v) for v in (k.start, k.stop, k.step))
        return text[:-1] if k.step is None else text
    return repr(k)


def _check_current(handle, call, what):
    """A handle made before its pool was restarted refers to values that are gone."""
    pool = handle._pool
    if not pool.closed and handle._generation != pool._generation:
        raise SpmdValueError(f"{call}: this {what} was made before the pool was restarted "
                             f"(a block that could not be stopped): the workers' values "
                             f"were lost")


def _ranges(numbers):
    parts, start = [], None
    for i, k in enumerate(numbers):
        if start is None:
            start = k
        if i + 1 == len(numbers) or numbers[i + 1] != k + 1:
            parts.append(str(start) if start == k else f"{start}-{k}")
            start = None
    return ", ".join(parts)


class Distributed(_OperatorsMixin):
    """On the client, an array spread over a pool's workers: MATLAB's distributed
    array. Inside a block it is each worker's codistributed array; ``gather(D)`` (or
    ``D.gather()``) brings it back whole. As MATLAB's client does, the client computes
    with it: arithmetic, comparisons, numpy's functions (``np.sin(D)``,
    ``np.sum(D, axis=0)``), subscripts (``D[1, :]``, ``D[0, 0] = 5``), ``D.T`` and the
    codistributed array's methods (``D.sum()``, ``D.astype(...)``) run on the workers;
    a codistributed result comes back as a distributed array (a tuple of them, as from
    ``np.nonzero(D)``, as a tuple of distributed arrays), any other (a sum, an element)
    as its value.

    Examples
    --------
    >>> from spmdlab.matlab import distributed, gather
    >>> pool = start_pool(2)                                          # doctest: +SKIP
    >>> D = distributed(np.arange(6.0))      # on the client: spread over the pool
    ... # doctest: +SKIP
    >>> pool.spmd(lambda D: D.local, D)[:]   # each worker's part    # doctest: +SKIP
    [array([0., 1., 2.]), array([3., 4., 5.])]
    >>> gather(D)                                                     # doctest: +SKIP
    array([0., 1., 2., 3., 4., 5.])
    >>> gather(np.arange(2))                 # not distributed: unchanged
    array([0, 1])

    MATLAB
    ------
    ``D = distributed(X)``, ``spmd, L = getLocalPart(D); end``, ``X = gather(D)``
    """

    __slots__ = ("_pool", "_name", "_shape", "_generation", "_owned", "__weakref__")
    __hash__ = object.__hash__  # (the operators' __eq__ is element-wise)

    def __init__(self, pool: Pool, name: str) -> None:
        self._pool, self._name = pool, name
        self._shape: Optional[Tuple[int, ...]] = None
        self._generation = pool._generation
        # whether its last reference frees the workers' array: the pool's own names; a
        # cell's name is the one its pool keeps (Pool._array)
        self._owned = name.startswith("_spmdlab")

    def _check_current(self, call):
        _check_current(self, call, "distributed array")

    def _on_workers(self, call: str, fn: Callable[..., Any], /, *args: Any,
                    **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` run by every worker (its failures named as ``call``,
        the array written ``D``), each distributed array among the
        arguments its codistributed array there: a codistributed result comes back as a
        distributed array, any other as worker 1's (the value of an operation on a
        codistributed array is the same on every worker). A tuple that holds
        codistributed arrays (``np.nonzero(D)``, ``np.divmod(D, 3)``) comes back as a
        tuple, each of them a distributed array (worker 1 could not send it whole)."""
        prefix = f"_spmdlab_part_{next(_names)}"
        try:
            result = self._pool._block(call, None, _apart, (prefix, fn) + args, kwargs)
        except BaseException:  # failed or stopped: the workers that had ended the block
            # kept their arrays of a tuple (np.nonzero(D) stopped by Ctrl-C), which no
            # handle would ever free. As many as numpy's dimensions: a tuple of arrays
            # (np.nonzero's, np.meshgrid's) has no more
            for i in range(_MAX_PARTS):
                self._pool._drop(f"{prefix}_{i}")
            raise
        if isinstance(result, Distributed):
            return result
        value = result[1]
        if isinstance(value, _Parts):
            return tuple(v if name is None else Distributed(self._pool, name)
                         for name, v in value.items)
        return value

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        out = kwargs.get("out")
        if isinstance(out, tuple) and out and \
                all(isinstance(o, Distributed) for o in out):
            # written into copies of ``out`` first, then copied into its arrays in a block
            # a Ctrl-C waits for: each worker stops at its own point, and D += 1 stopped
            # on the workers' own arrays left some parts added to and the others not
            # (restore undoes bindings, not writes into an array)
            call = _ufunc_name(ufunc, method)
            copies = self._on_workers(call, _ufunc_into_copies, ufunc, method, inputs,
                                      kwargs)
            with _wire.interrupts_deferred():
                self._pool._block(call, None, _write_into, (out, copies if isinstance(
                    copies, tuple) else (copies,)), {})
            # numpy gives ``out`` itself (the workers wrote into its arrays): D += 1 made
            # D another handle of the same array, and np.add(D, 1, out=D) is D was False
            return out[0] if len(out) == 1 else out
        return self._on_workers(_ufunc_name(ufunc, method), _ufunc_call, ufunc, method,
                                inputs, kwargs)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        module = getattr(func, "__module__", None) or "numpy"
        return self._on_workers(f"{module}.{getattr(func, '__name__', func)} of D", func,
                                *args, **kwargs)

    def __getitem__(self, key: Any) -> Any:
        return self._on_workers(f"D[{_subscript(key)}]", operator.getitem, self, key)

    def __setitem__(self, key: Any, value: Any) -> None:
        # all or nothing, as the in-place operators (see __array_ufunc__): written into a
        # copy first, then copied into D's arrays in a block a Ctrl-C waits for. D[:] = C
        # that failed on one worker (an element its part could not take) had written
        # the others' parts
        call = f"D[{_subscript(key)}] = ..."
        copy = self._on_workers(call, _setitem_into_copy, self, key, value)
        with _wire.interrupts_deferred():
            self._pool._block(call, None, _write_into, ((self,), (copy,)), {})

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d distributed array")
        return self.shape[0]

    def __contains__(self, value: Any) -> bool:  # (D == value).any(), as the workers'
        return bool(self._on_workers("... in D", operator.contains, self, value))

    def __iter__(self) -> Iterator[Any]:
        for i in range(len(self)):
            yield self[i]

    def __bool__(self) -> bool:
        return bool(self._on_workers("bool(D)", bool, self))

    # a number of one element, as the codistributed array's own (an error, on the
    # workers, naming the call, for more elements)
    def __float__(self) -> float:
        return float(self._on_workers("float(D)", float, self))

    def __int__(self) -> int:
        return int(self._on_workers("int(D)", int, self))

    def __complex__(self) -> complex:
        return complex(self._on_workers("complex(D)", complex, self))

    def __round__(self, ndigits: Optional[int] = None) -> Any:
        return self._on_workers("round(D)", round, self, ndigits)

    @property
    def T(self) -> Any:
        return self._on_workers("D.T", operator.attrgetter("T"), self)

    @property
    def dtype(self) -> Any:
        return self._on_workers("D.dtype", operator.attrgetter("dtype"), self)

    @property
    def size(self) -> int:
        count = 1
        for n in self.shape:
            count *= n
        return count

    def __getattr__(self, name: str) -> Any:
        # the codistributed array's other methods and properties, run on the workers
        from ..darray._array import CodistributedArray

        if name in _PER_WORKER:
            raise AttributeError(f"D.{name} is each worker's own: read it inside a block "
                                 f"(pool.spmd, %%spmd)")
        found = getattr(CodistributedArray, name, None) if not name.startswith("_") \
            else None
        if found is None:
            raise AttributeError(f"a distributed array on the client has no {name!r}")
        if callable(found):
            return lambda *args, **kwargs: self._on_workers(f"D.{name}(...)", _method_call,
                                                            self, name, args, kwargs)
        return self._on_workers(f"D.{name}", operator.attrgetter(name), self)

    def gather(self) -> Any:
        """The whole array on the client."""
        self._check_current("gather")
        return self._pool._gather(self)

    @property
    def shape(self) -> Tuple[int, ...]:
        """The global array's shape (asked of worker 1 once), so that MATLAB's ``size``,
        ``numel`` and ``ndims`` of it on the client are the array's."""
        if self._shape is None:
            self._check_current("size")
            self._shape = self._pool._request("size", [1], "shape", self._name)[1]
        return self._shape

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        # numpy would otherwise wrap the handle in an object array: np.sum(D) was D
        raise SpmdTypeError("a distributed array on the client is not a numpy array: "
                            "gather(D) it first (numpy's functions and operators on it "
                            "run on the workers)")

    def __reduce__(self):
        """Sent to the pool's workers: each worker's codistributed array."""
        return _shared.variable, (self._name, "distributed array")

    def __repr__(self) -> str:
        return f"<distributed array on a pool of {self._pool.size} (gather(D) reads it)>"

    def __del__(self):
        try:
            pool = self._pool
            held = pool._arrays.get(self._name)  # (not `in`: == is element-wise here)
            if self._owned and not pool.closed and (held is None or held is self) and \
                    self._generation == pool._generation:
                pool._drop(self._name)
        except Exception:
            pass


# the most codistributed arrays a client's operation gives (in a tuple): numpy's dimensions
_MAX_PARTS = 64

# a codistributed array's attributes that differ from worker to worker
_PER_WORKER = frozenset(("local", "global_indices", "global_slice"))


class _Parts:
    """(From a worker) a tuple of results that holds codistributed arrays: ``items``,
    ``(name, None)`` for one (kept on the worker under ``name``), ``(None, value)`` for
    any other."""

    __slots__ = ("items",)

    def __init__(self, items):
        self.items = items


def _apart(prefix, fn, /, *args, **kwargs):
    """(On a worker) ``fn(*args, **kwargs)`` for the client's operations on distributed
    arrays; a tuple holding codistributed arrays is returned as :class:`_Parts`, its
    arrays kept here under names from ``prefix``."""
    from ..darray import CodistributedArray

    result = fn(*args, **kwargs)
    if not isinstance(result, tuple) or \
            not any(isinstance(v, CodistributedArray) for v in result):
        return result
    items = []
    for i, v in enumerate(result):
        if isinstance(v, CodistributedArray):
            _shared.namespace[f"{prefix}_{i}"] = v
            items.append((f"{prefix}_{i}", None))
        else:
            items.append((None, v))
    return _Parts(items)


def _ufunc_call(ufunc, method, inputs, kwargs):
    """(On a worker) a ufunc applied as numpy's protocol asked on the client."""
    return getattr(ufunc, method)(*inputs, **kwargs)


def _ufunc_into_copies(ufunc, method, inputs, kwargs):
    """(On a worker) a ufunc whose ``out`` are codistributed arrays, written into copies
    of them (numpy's casting and ``where`` as into ``out`` itself): returned, for the
    client to copy into ``out`` once every worker has them."""
    copies = tuple(o.copy() for o in kwargs["out"])
    getattr(ufunc, method)(*inputs, **dict(kwargs, out=copies))
    return copies if len(copies) > 1 else copies[0]


def _ufunc_name(ufunc, method):
    """How a ufunc's failure on the workers is named: ``numpy.add of D``,
    ``numpy.add.reduce of D``."""
    name = getattr(ufunc, "__name__", repr(ufunc))
    return f"numpy.{name}{'' if method == '__call__' else '.' + method} of D"


def _subscript(key):
    """A distributed array's subscript as written: ``0:2, 1``, ``:``, ``[0, 2]``."""
    parts = key if isinstance(key, tuple) else (key,)
    return ", ".join("..." if p is Ellipsis else _shown_key(p) if isinstance(p, slice)
                     else "<array>" if hasattr(p, "shape") and getattr(p, "ndim", 0)
                     else repr(p) for p in parts) if parts else "()"


def _setitem_into_copy(D, key, value):
    """(On a worker) ``D[key] = value`` written into a copy of ``D``, returned for the
    client to copy into ``D`` once every worker has it."""
    copy = D.copy()
    copy[key] = value
    return copy


def _write_into(out, parts):
    """(On a worker) each of ``parts`` written into the array of ``out`` it was copied
    from (no communication: the same distribution)."""
    for o, p in zip(out, parts):
        o.local[...] = p.local


def _method_call(D, name, args, kwargs):
    """(On a worker) a codistributed array's method."""
    return getattr(D, name)(*args, **kwargs)


# -- queues on the client ---------------------------------------------------------------------

_queue_ids = itertools.count(1)


class _ClientQueue:
    _kind = "DataQueue"

    def __init__(self):
        self._qid = next(_queue_ids)
        self._items: collections.deque = collections.deque()
        self._closed = False
        _shared.client_queues[self._qid] = self

    def __reduce__(self):
        # closed: the workers' sends are refused there (one racing with a close that a
        # listener makes while the block runs is kept, as a worker's queue keeps it)
        return _shared.client_queue, (self._qid, self._kind, self._closed)

    def _who(self, call):
        return f"{self._kind}.{call} (the client)"

    def _arrive(self, item):
        raise NotImplementedError

    is_owner = True
    owner = 1

    @property
    def queue_length(self) -> int:
        return len(self._items)

    def send(self, data: Any) -> None:
        if self._closed:
            raise SpmdValueError(f"{self._kind}.send (the client): the queue is closed")
        self._arrive(data)

    def close(self) -> None:
        self._closed = True

    @property
    def closed(self) -> bool:
        return self._closed

    def flush(self, timeout: Optional[float] = None) -> bool:
        from ..queues import _seconds

        _seconds(self, "flush", timeout, none_ok=True)  # SpmdValueError for a bad one
        return True


class ClientDataQueue(_ClientQueue):
    """A DataQueue made on the client: workers' ``send`` runs its ``after_each``
    listeners here, in the client's main thread, while the block runs."""

    def __init__(self) -> None:
        super().__init__()
        self._listeners: List[Callable[[Any], Any]] = []

    def after_each(self, fn: Callable[[Any], Any]) -> Any:
        if not callable(fn):
            raise SpmdTypeError(f"DataQueue.after_each (the client): fn must be callable "
                                f"(got {fn!r})")
        self._listeners.append(fn)
        queue = self

        class _Handle:
            def remove(self_inner):
                if fn in queue._listeners:
                    queue._listeners.remove(fn)
        items, self._items = list(self._items), collections.deque()
        for item in items:
            fn(item)
        return _Handle()

    def _arrive(self, item):
        if not self._listeners:
            self._items.append(item)
            return
        for fn in list(self._listeners):
            fn(item)


class ClientPollableDataQueue(_ClientQueue):
    """A PollableDataQueue made on the client: ``poll`` takes the workers' items in
    the order sent (waiting for them while no block runs)."""

    _kind = "PollableDataQueue"

    def _arrive(self, item):
        self._items.append(item)

    def poll(self, timeout: float = 0.0, default: Any = None) -> Any:
        from ..queues import _seconds

        # as a worker's queue: SpmdValueError for NaN, None, a bool; math.inf: no end
        timeout = _seconds(self, "poll", timeout, none_ok=False)
        deadline = time.monotonic() + (float("inf") if timeout is None else max(0.0, timeout))
        pool = _current
        while not self._items:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return default
            if pool is not None and not pool.closed and not pool._busy:
                pool._pump(min(remaining, 0.05))
            else:
                time.sleep(min(remaining, 0.01))
        return self._items.popleft()


# -- the pool's entry points ------------------------------------------------------------------

def start_pool(n: Optional[int] = None, **options: Any) -> Pool:
    """Start a pool of ``n`` workers and make it the current one (``Pool(n)``); an open
    current pool of another size is deleted first, one of the same size is returned. Bad
    arguments raise before either (the open pool stays open).

    Examples
    --------
    >>> pool = start_pool(4)                                          # doctest: +SKIP
    >>> start_pool(4) is pool                                         # doctest: +SKIP
    True
    >>> current_pool(create=False) is None
    True

    MATLAB
    ------
    ``pool = parpool(n)`` (reusing an open pool of that size)
    """
    unknown = sorted(set(options) - {"launcher", "timeout", "launcher_args"})
    if unknown:
        raise SpmdTypeError(f"start_pool() got an unexpected keyword argument "
                            f"{unknown[0]!r} (it takes launcher, timeout, launcher_args)")
    _checked_options("parpool", 1 if n is None else n, options.get("launcher", "auto"),
                     options.get("timeout", 120.0), options.get("launcher_args", ()))
    pool = _current
    if pool is not None and not pool.closed:
        if n is None or n == pool.size:
            return pool
        pool.delete()
    return Pool(n, **options)


def current_pool(create: bool = True) -> Optional[Pool]:
    """The current pool; with ``create`` (the default) a new one of the default size
    when there is none (MATLAB ``gcp``; ``gcp("nocreate")`` is ``create=False``).

    Examples
    --------
    >>> current_pool(create=False) is None
    True
    >>> current_pool().size                  # starts one at this machine's size
    ... # doctest: +SKIP
    8

    MATLAB
    ------
    ``pool = gcp``, ``pool = gcp("nocreate")``
    """
    pool = _current
    if pool is not None and not pool.closed:
        return pool
    return Pool() if create else None


def parpool(n: Optional[int] = None, **options: Any) -> Pool:
    """MATLAB ``parpool(n)``: start a pool of ``n`` workers (an error if one is open,
    as in MATLAB). The same as ``spmdlab.matlab.parpool``.

    Examples
    --------
    >>> pool = parpool(2)                                             # doctest: +SKIP
    >>> pool.NumWorkers                                               # doctest: +SKIP
    2
    >>> gcp("nocreate") is None
    True

    MATLAB
    ------
    ``pool = parpool(n)``
    """
    pool = _current
    if pool is not None and not pool.closed:
        raise SpmdError(f"parpool: a pool of {pool.size} workers is already open; "
                        f"delete(gcp) first")
    return Pool(n, **options)


def gcp(option: Optional[str] = None) -> Optional[Pool]:
    """MATLAB ``gcp``: the current pool, started if there is none; ``gcp("nocreate")``
    returns None instead. The same as ``spmdlab.matlab.gcp``.

    Examples
    --------
    >>> gcp("nocreate") is None
    True

    MATLAB
    ------
    ``pool = gcp``, ``pool = gcp("nocreate")``
    """
    if option is not None and (not isinstance(option, str) or option.lower() != "nocreate"):
        raise SpmdValueError(f"gcp: the option must be 'nocreate' (got {option!r})")
    return current_pool(create=option is None)


def _new_composite(pool, value):
    """``Composite()`` on the client: a Composite over ``pool`` with no element, or with
    ``value`` sent to every worker."""
    pool._check_open("Composite()")
    name = f"_spmdlab_composite_{next(_names)}"
    present = {k: False for k in range(1, pool.size + 1)}
    composite = Composite._on(pool, name, present, owned=True)
    if value is not None:
        for k in range(1, pool.size + 1):
            composite[k] = value
    return composite


# -- the client's kinds of DataQueue, Composite and distributed (see _world.CLIENT) ------------

class _ClientKinds:
    """What ``DataQueue()``, ``Composite()`` and ``distributed(X)`` make on a client."""

    @staticmethod
    def data_queue(kind):
        return ClientPollableDataQueue() if kind == "PollableDataQueue" else \
            ClientDataQueue()

    @staticmethod
    def composite(value):
        return _new_composite(current_pool(), value)

    @staticmethod
    def distributed(x):
        return current_pool().distribute(x)

    @staticmethod
    def construct(make, cls, name, args):
        pool = current_pool()
        return pool.spmd(make, cls, name, args)  # a codistributed result: distributed

    @staticmethod
    def gather(value, lab=None):
        """``gather(value)`` on the client, which gets the whole array (``lab``: MATLAB's
        destination, checked to be a worker of the value's pool)."""
        if lab is not None and isinstance(value, (Distributed, Composite)) and \
                not 1 <= lab <= value._pool.size:
            raise SpmdValueError(f"gather (the client): 'lab' must be a worker number from "
                                 f"1 to {value._pool.size} (got {lab}); worker numbers are "
                                 f"1-based")
        if isinstance(value, Distributed):
            return value.gather()
        if isinstance(value, Composite):
            return value[:]
        return value

    @staticmethod
    def workers():
        pool = _current
        return pool.size if pool is not None and not pool.closed else 1

    @staticmethod
    def is_client_array(x):
        return isinstance(x, Distributed)


def _install_client():
    if _world.CLIENT is None:
        _world.CLIENT = _ClientKinds
        _shared.side = "client"
        atexit.register(_at_exit)


def _at_exit():
    pool = _current
    if pool is not None:
        try:
            pool.delete()
        except Exception:
            pass
