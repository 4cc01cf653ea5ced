"""How a job ends: sends still in flight, the exit handshake, failures, exit statuses.

At the end of the program every worker waits until the messages it sent have been
received, tells every other worker that it has finished (along a tree, ``_world``: a
worker blocked in a call this one will never make then raises instead of hanging,
``_wait``), delivers what its DataQueues still hold, and waits until it knows that
every other worker has finished before MPI finalizes.

An uncaught exception on any worker prints the worker's number and traceback and aborts
the whole MPI job, so the other workers never hang at a later collective or at exit. A
worker's ``sys.exit(k)`` is noted so that the workers failing because of it end the job
with the same status, and ``os._exit`` says who left before MPI notices. The first worker
of each host starts the watcher (``_watchdog``) that names a worker killed without a word.
"""

import atexit
import collections
import faulthandler
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

from . import _env, _mpi, _output, _stall, _world
from ._mpi import MPI
from .errors import SpmdTimeoutError

# -- nonblocking sends still in flight (point-to-point and queues) --------------------------


class Sends:
    """Every nonblocking send of this worker still in flight, with the buffer it reads.

    One tracker for spmd_send and DataQueue items: a buffer is kept alive until its send
    completes, and calling ``in_flight`` (the queues' receiver thread does, often) gives
    MPI the sender-side progress that a message needs (MPI moves a message only inside
    an MPI call of its sender). Thread-safe: a DataQueue listener may send too.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._items = collections.deque()  # (request, buffer, world rank), oldest first

    def track(self, request, buf, world_rank):
        with self._lock:
            self._prune()
            if not request.Test():
                self._items.append((request, buf, world_rank))

    def post(self, comm, parts, destination, tag, world_rank):
        """Send each of ``parts`` to ``destination`` (a rank of ``comm``) in order, each
        request tracked by the same C loop that posts it: a Ctrl-C (raised between two
        of Python's steps) cannot fall between two parts (the receiver took this
        worker's next message for the second) nor between a send and its tracking (its
        request dropped while active: the buffer freed while MPI reads it)."""
        n = len(parts)
        with self._lock:
            self._items.extend(zip(map(comm.Isend, parts, (destination,) * n, (tag,) * n),
                                   parts, (world_rank,) * n))

    def done(self, request):
        """Whether ``request`` (a tracked send) has completed. MPI forbids two threads to
        test one request at once: every test of a tracked send goes through this lock."""
        with self._lock:
            return request.Test()

    def _prune(self):
        items = self._items
        while items and items[0][0].Test():  # sends complete about in order
            items.popleft()

    def in_flight(self):
        """How many sends have not completed (tests the oldest ones)."""
        with self._lock:
            self._prune()
            return len(self._items)

    def awaited(self):
        """The world ranks whose receive some send still waits for (tests them all)."""
        with self._lock:
            self._items = collections.deque(p for p in self._items if not p[0].Test())
            return {p[2] for p in self._items}


SENDS = Sends()
# sends on communicators a refresh left behind (their receives may never be posted):
# their buffers are kept, nothing waits for them
_abandoned: list = []


@_world.at_refresh
def _abandon_sends(world):
    with SENDS._lock:
        _abandoned.extend(SENDS._items)
        SENDS._items.clear()


def _flush_sends():
    """Wait until every message this worker sent has been received.

    A receiver that finishes without receiving a message drains and reports it while it
    waits for the others at exit, so this wait ends unless a receiver never finishes.
    """
    _world.wait_for_workers("spmd_send (at exit): waiting until every message is received",
                            SENDS.awaited, _drain_unreceived)  # two may wait on each other


# -- the end of the program ------------------------------------------------------------------

_hooks_at_exit: list = []


def at_exit(fn):
    """Run ``fn()`` at the end of the program, before the exit handshake (LIFO)."""
    _hooks_at_exit.append(fn)
    return fn


def _at_exit():
    if not _world.started():  # spmdlab was imported but never used on this worker
        return
    # what this worker answers while it waits for the others (no stall report: the
    # waits at the end have their own)
    _stall.waiting_in = ("the end of the program", _world.WORLD, float("inf"), None)
    try:
        _end_of_program()
    except SpmdTimeoutError as exc:  # a worker that never finishes: end the job, say who
        sys.stderr.write(f"### spmdlab: {exc}; ending the job\n")
        sys.stderr.flush()
        time.sleep(0.2)  # let mpiexec forward the message before the job is aborted
        abort(1)
    except BaseException:
        # a Ctrl-C (SIGINT to this worker alone) or another failure while this worker
        # waits for the others at the end: Python only prints what an atexit handler
        # raises and ends the worker with status 0, half-way through the handshake, so
        # the job ended with status 0 and the watcher called it killed without a word
        if _world.SIZE == 1 or _env.ABORT_ON_ERROR is False:
            raise
        etype, value, tb = sys.exc_info()
        excepthook(etype, value, tb, "### spmdlab: the end of the program (waiting for "
                   "the other workers to finish) was interrupted\n")
    _stall.stop_answering()
    _say_goodbye("exit")


def _end_of_program():
    _flush_sends()
    size = _world.SIZE
    if size > 1:
        # Tell everyone this worker is done (through the tree of ``_world``): a worker
        # blocked in a call that this worker will never make then raises instead of
        # hanging.
        _world.finished(_exit_status_byte())
    for fn in reversed(_hooks_at_exit):  # DataQueue: deliver every item still in flight
        fn()
    if size == 1:
        return

    # Wait for the others' notices so that every message is matched before MPI finalizes;
    # meanwhile receive what nobody will, so that a sender waiting on it can finish.
    _world.wait_for_workers("finished the program, waiting for the other workers to finish",
                            _world.still_running, _drain_unreceived)
    _drain_unreceived()  # small messages sent last may land after their sender's notice
    _world.close_notices()


def _drain_unreceived(say=True):
    """Receive and report (unless ``say`` is false) the messages sent to this worker that
    it never received; returns them, as (its number, the number of workers, the sender's
    number, the tag)."""
    from . import _pack
    drained = []
    for scope in _world.SCOPES:
        status = MPI.Status()
        unreceived = []
        for source, tag, message in scope.early:
            if hasattr(message, "request"):  # its bytes still on their way (p2p._Following)
                message.request.Wait()
            unreceived.append((source, tag))
        scope.early.clear()
        while True:
            message = scope.comm.Improbe(MPI.ANY_SOURCE, MPI.ANY_TAG, status)
            if message is None:
                break
            head = bytearray(status.Get_count(MPI.BYTE))
            message.Recv(head)
            source, tag = status.Get_source(), status.Get_tag()
            if _pack.follows(head):  # the head of a message that follows: one message
                message = scope.comm.Mprobe(source, tag, status)
                message.Recv(bytearray(status.Get_count(MPI.BYTE)))
            unreceived.append((source, tag))
        scope.self_sends.clear()
        for source, tag in unreceived:
            drained.append((scope.index, scope.size, source + 1, tag))
            if say:
                sys.stderr.write(
                    f"spmdlab: worker {scope.index} of {scope.size}: a message from worker "
                    f"{source + 1} (tag {tag}) sent with spmd_send or spmd_send_receive was "
                    f"never received\n")
    return drained


# -- failing ----------------------------------------------------------------------------------


def end_committed(scope, call):
    """End the job for a local failure (in an ``except`` clause) between a collective's
    agreement and the end of its data movement.

    Once every worker has agreed to a call, the others are inside it and cannot learn of
    a failure here (an allocation, a device copy): raising would leave them waiting for
    ever, so the failing worker says who and where and ends the job.
    """
    etype, value, tb = sys.exc_info()
    excepthook(etype, value, tb, f"### spmdlab: {call} ({scope.who()}) failed after every "
               f"worker had agreed to it, so the others cannot go on\n")


def abort(status):
    """End the whole job with ``status``. MPICH's MPI_Abort can return to its caller
    (the launcher kills the job a moment later): this never does."""
    _say_goodbye("abort")
    _output.release()
    try:
        _mpi.module().COMM_WORLD.Abort(status)
    finally:
        _os_exit(status)


def excepthook(etype, value, tb, header=""):
    """Print the failure, naming this worker, and end the job."""
    header += (f"### spmdlab: worker {_world.RANK + 1} of {_world.SIZE} "
               f"({socket.gethostname()}, pid {os.getpid()}) failed; ending the job\n")
    # the error itself first, in one line: a launcher that ends the job may cut the
    # forwarding of a long traceback short (seen under Open MPI on a loaded machine)
    summary = "".join(traceback.format_exception_only(etype, value)).strip()
    header += f"### {summary[:2000]}\n"
    try:
        text = "".join(traceback.format_exception(etype, value, tb))
        plugin = sys.modules.get("spmdlab.pytest_plugin")
        capture = getattr(plugin, "CAPTURE", None)
        if capture is not None:  # under pytest: write past its output capture
            with capture.global_and_fixture_disabled():
                sys.stderr.write(header + text)
                sys.stderr.flush()
        else:
            sys.stderr.write(header + text)
            sys.stderr.flush()
        sys.stdout.flush()
        _output.release()
        # mpiexec forwards output asynchronously and stops forwarding once the job is
        # aborted: give it a moment, or this traceback may never reach the terminal
        time.sleep(0.2)
    finally:
        # a worker that ended with sys.exit(k) made this one fail: the job ends with k;
        # so does sys.exit(k) in a thread of spmdlab's (a DataQueue listener)
        status = getattr(value, "status", None)
        if isinstance(value, SystemExit) and type(value.code) is int:
            status = value.code
        abort(status or 1)


# -- the exit status of a worker ------------------------------------------------------------
# Python keeps no record of sys.exit's argument that an atexit handler could read, so a
# worker's sys.exit is wrapped to note it (in the worker process only); the exit notice
# carries it, and workers that fail because of it end the job with the same status.
# (A plain ``raise SystemExit(k)`` passes no function of ours: it is not noted.)

_PID = os.getpid()
_exit_code = None
_noted = None  # the token of the exit whose status _exit_code holds
_os_exit = os._exit


class _NotedExit(SystemExit):
    """The SystemExit of a worker's ``sys.exit``, ``exit`` or ``quit``. One that is
    caught and dropped while the program runs on takes its note back: it is freed with
    a frame of the program below it, whereas the one that ends the program is freed by
    the interpreter's own handling of it, with no frame left."""

    def __init__(self, code=None):
        global _exit_code, _noted
        super().__init__(code)
        self._token = _noted = object()
        _exit_code = code

    def __del__(self):
        global _exit_code, _noted
        if _noted is self._token:
            try:
                sys._getframe(1)
            except ValueError:  # the program's end: the note stands
                return
            _exit_code = _noted = None


def _noting_exit(status=None):
    if threading.current_thread() is not threading.main_thread():
        # it ends the thread alone (which threading drops without a word for SystemExit
        # itself only), or the job from a listener of ours (see excepthook)
        raise SystemExit(status)
    raise _NotedExit(status)


class _NotingQuitter:
    """The builtins ``exit`` and ``quit`` (``site``'s), noting the status as ``sys.exit``
    does: they raise SystemExit themselves, not through ``sys.exit``."""

    def __init__(self, quitter):
        self._quitter = quitter

    def __repr__(self):
        return repr(self._quitter)

    def __call__(self, code=None):
        try:  # as site's do: a prompt reading stdin ends with it
            sys.stdin.close()
        except Exception:
            pass
        _noting_exit(code)


def note_exit_status(status):
    """Note the status the program ends with, where it ends by raising SystemExit without
    ``sys.exit`` (``python -m pytest``'s ``raise SystemExit(main())``: its plugin)."""
    global _exit_code, _noted
    _exit_code, _noted = status, None


def _exit_status_byte():
    code = _exit_code
    if code is None or code is False:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    return 1  # sys.exit("message") exits with status 1


def _vanishing_exit(status):
    """``os._exit`` in a worker: skips every cleanup, so say who left before MPI notices."""
    if os.getpid() == _PID and _world.SIZE > 1:
        sys.stderr.write(f"### spmdlab: worker {_world.RANK + 1} of {_world.SIZE} "
                         f"({socket.gethostname()}, pid {os.getpid()}) called "
                         f"os._exit({status}); ending the job\n")
        sys.stderr.flush()
        time.sleep(0.2)  # let mpiexec forward the line
        abort(status & 0xFF or 1)
    _os_exit(status)


_hooked = False


def _install_hooks():
    """Among several workers: note sys.exit's status, name an os._exit, and end the job
    on an uncaught exception (unless SPMDLAB_ABORT_ON_ERROR=0). Once, as early as the
    number of workers is known: at import in a process an MPI launcher started, else
    when spmdlab starts."""
    global _hooked
    if _hooked or _world.SIZE == 1:
        return
    _hooked = True
    sys.exit = _noting_exit
    os._exit = _vanishing_exit
    import builtins

    for name in ("exit", "quit"):
        if callable(getattr(builtins, name, None)):
            setattr(builtins, name, _NotingQuitter(getattr(builtins, name)))
    if _env.ABORT_ON_ERROR is not False:
        sys.excepthook = excepthook
        sys.unraisablehook = _unraisable_hook


_previous_unraisable_hook = sys.unraisablehook


def _unraisable_hook(unraisable):
    """A spmdlab error raised in an atexit handler of the program's (a collective that
    some workers make at exit only) ends the job as an uncaught one does: Python only
    prints it and ends the worker with status 0, so the job succeeded although a call
    failed. Every other unraisable exception is left to the hook before (a program's
    own atexit handler that fails does not change its exit status under plain Python
    either)."""
    from .errors import SpmdError

    value = unraisable.exc_value
    if isinstance(value, SpmdError) and "atexit" in (unraisable.err_msg or "") and \
            os.getpid() == _PID:
        header = (f"### spmdlab: raised in an atexit handler"
                  f"{'' if unraisable.object is None else f' {unraisable.object!r}'}\n")
        excepthook(type(value), value, unraisable.exc_traceback, header)
    _previous_unraisable_hook(unraisable)


# -- the watcher of a host's workers -----------------------------------------------------------

_goodbye_path = None  # this host's goodbye file, read by the watcher (see _watchdog)


def _start_watchdog(places):
    """The first worker of each host starts the watcher of the host's workers."""
    global _goodbye_path
    if not hasattr(os, "pidfd_open"):  # Linux 5.3 and Python 3.9 or later only
        return
    host = socket.gethostname()
    mine = [(k, pid) for k, (h, pid) in enumerate(places, 1) if h == host]
    folder = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    _goodbye_path = os.path.join(folder, f"spmdlab-{mine[0][1]}.bye")
    _name_my_end()
    if mine[0][0] != _world.RANK + 1:
        return
    try:
        os.close(os.open(_goodbye_path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_watchdog.py")
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("PMI_", "PMIX_", "OMPI_", "HYDRA_", "MPIR_"))}
        if _launcher_kills():
            env["SPMDLAB_WATCHER_CLEANUP"] = "SIGKILL"
        watcher = subprocess.Popen([sys.executable, "-S", script, host, str(_world.SIZE),
                                    _goodbye_path] + [f"{k}:{pid}" for k, pid in mine],
                                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   start_new_session=True, env=env, close_fds=True)
        # it outlives this worker by design (it names how the workers ended): never
        # waited for, so marked done, or Popen's finalizer warns "subprocess N is still
        # running" (ResourceWarning: an error under -W error, shown under python -X dev)
        watcher.returncode = 0
    except OSError:  # no watcher: a killed worker goes unnamed, nothing else changes
        _goodbye_path = None


def _launcher_kills():
    """Whether the launcher ends the other workers with SIGKILL when one ends by a signal:
    MPICH's hydra does (PMI over a file descriptor, no Slurm task around it), which leaves
    no faulthandler report; Open MPI's sends SIGTERM, whose report is a killed worker's."""
    return (MPI.get_vendor()[0] == "MPICH" and "PMI_FD" in os.environ
            and "SLURM_PROCID" not in os.environ)


_crash_file = None  # faulthandler's report of a fatal signal, read by the watcher


def _name_my_end():
    """Let the watcher name how this worker ends when it cannot say so itself: C-level
    handlers (faulthandler's: they run even while the worker waits inside MPI) write the
    Python stack to a file of this worker's, after "Fatal Python error: <signal>" for a
    fatal signal (SIGSEGV, SIGBUS, SIGFPE, SIGABRT, SIGILL), alone for SIGTERM (what
    ``kill`` and a batch system's time limit send), which then ends the worker as it
    would have. A program's own faulthandler or SIGTERM handler is left alone; SIGTERM is
    still named where the program's faulthandler covers the fatal signals only (pytest's
    does: a hung test ended by ``timeout`` was called killed by SIGKILL or the OOM killer,
    with no stack)."""
    global _crash_file
    enabled = faulthandler.is_enabled()
    term = signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    if enabled and not term:
        return
    try:
        _crash_file = open(f"{_goodbye_path}.{_world.RANK + 1}", "w")
    except OSError:
        return
    if not enabled:
        faulthandler.enable(file=_crash_file, all_threads=True)
    if term:
        faulthandler.register(signal.SIGTERM, file=_crash_file, all_threads=True,
                              chain=True)


def _say_goodbye(kind):
    """Tell this host's watcher that this worker ends on purpose (``exit``, ``abort``)."""
    if _goodbye_path is None or os.getpid() != _PID:
        return
    try:
        fd = os.open(_goodbye_path, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, f"{_world.RANK + 1} {kind}\n".encode())
        finally:
            os.close(fd)
    except OSError:
        pass


@_world.at_start
def _started(places):
    _install_hooks()
    _output.install()
    if _world.SIZE > 1 and _env.WATCHDOG is not False:
        _start_watchdog(places)


atexit.register(_at_exit)
_install_hooks()  # a launched worker knows the number of workers now (see _world)
_output.install()  # and writes whole lines from the start
