"""TrainingProgressMonitor: MATLAB's ``trainingProgressMonitor`` for the terminal and
the browser.

Active on worker 1 (the client) and inert on every other worker, so client code ports
without ``if`` guards. It shows a live view in the terminal (a progress bar with the
latest metrics and information; plain lines when the output is not a terminal), draws
every metric against the x label into a PNG image (refreshed during training, saved at
the end), can serve a page with live charts and a Stop button (``web=True``), and lets a
person ask to stop: Ctrl-C, creating the stop file, or the page's Stop button sets
``stop``. Relaying that request to every worker is the program's job (MATLAB's examples
send it through a per-worker queue; see examples/train_digits_custom_loop.py; trainnet
does it itself).
"""

from __future__ import annotations

import math
import numbers
import os
import signal
import sys
import threading
import time
from typing import IO, Any, Iterable, List, Optional, Tuple, Union

from .. import _env, _world
from ..errors import SpmdTypeError, SpmdValueError
from .files import write_atomic

__all__ = ["TrainingProgressMonitor"]

STOP_FILE = _env.get("STOP_FILE", None)


class TrainingProgressMonitor:
    """Training progress on worker 1: metrics, information, progress, stop, status.

    ``metrics`` and ``info`` declare the names that ``record_metrics`` and
    ``update_info`` accept. ``plot_file`` (None: no plot; by default
    ``runs/<run>/training-progress.png``, ``run`` being ``<script>-<date>-<time>``) is
    refreshed at most every ``plot_every`` seconds (and at most 5% of the time: drawing
    stalls worker 1, so every worker) and saved by ``close()``: a panel per
    training metric with its validation metric (``validation_x``, ``val_x``,
    ``ValidationX``) drawn over it, losses on a log axis (``log_scale``: "auto", or the
    metric names to draw so), epoch boundaries (changes of the ``epoch`` information)
    marked, the run's name and worker count in the title. ``log_dir`` writes
    ``metrics.csv`` (a row per ``record_metrics``: every metric and information value)
    and, with the ``tensorboard`` package (the ``logs`` extra), TensorBoard event files.
    ``web`` (True, or a port number; default port: ``SPMDLAB_MONITOR_PORT``, else a free
    one) serves a page from worker 1 on 127.0.0.1 with live charts of every metric
    (validation over training), the information, progress, status and a Stop button, and
    prints ``monitor: http://127.0.0.1:PORT/?token=TOKEN``; only requests with that token
    are answered, and the page stops with ``close()``.
    ``show=False`` keeps the terminal view quiet. ``stop_file`` (default:
    ``SPMDLAB_STOP_FILE``) sets ``stop`` when it exists. Ctrl-C sets ``stop`` the first
    time; a second Ctrl-C interrupts as usual.

    Examples
    --------
    >>> monitor = TrainingProgressMonitor(metrics=["loss"], info=["epoch"],
    ...                                   plot_file=None, show=False)
    >>> for iteration in range(1, 4):
    ...     monitor.record_metrics(iteration, loss=1.0 / iteration)
    ...     monitor.update_info(epoch=1)
    >>> monitor.progress = 100
    >>> monitor.history("loss")[0], monitor.stop
    ([1.0, 2.0, 3.0], False)
    >>> monitor.close()

    MATLAB
    ------
    ``monitor = trainingProgressMonitor(Metrics="Loss", Info="Epoch"); recordMetrics(monitor, i, Loss=loss); monitor.Progress = 100;``
    """

    def __init__(self, metrics: Iterable[str] = (), info: Iterable[str] = (),
                 xlabel: str = "Iteration", *, plot_file: Optional[str] = "default",
                 stop_file: Optional[str] = None, refresh: float = 0.5,
                 plot_every: float = 5.0, stream: Optional[IO[str]] = None,
                 run: Optional[str] = None, log_dir: Optional[str] = None,
                 log_scale: Union[str, Iterable[str]] = "auto", show: bool = True,
                 web: Union[bool, int, None] = None) -> None:
        self.metrics = tuple(_names("metrics", metrics))
        self.info = tuple(_names("info", info))
        self.xlabel = str(xlabel)
        scope = _world.here()  # the client of a pool is its own worker 1
        self.active = scope.index == 1
        client = _world.client()  # the client of a pool draws its workers' progress
        self.workers = client.workers() if client is not None else scope.size
        self.run = run if run is not None else _default_run()
        if plot_file == "default":  # a run folder, git-ignored, never the current folder
            plot_file = os.path.join("runs", self.run, "training-progress.png")
        self.plot_file = plot_file
        self.log_scale = log_scale
        self.show = show
        self._log = _Log(log_dir, self.metrics, self.info) if log_dir and self.active \
            else None
        self._epochs: List[Tuple[float, str]] = []  # (x, epoch text) where the "epoch" info changed
        self.stop_file = stop_file if stop_file is not None else STOP_FILE
        self.refresh = refresh
        self.plot_every = plot_every
        self.stream = stream if stream is not None else sys.stdout
        self.stop = False
        self.status = ""
        self._progress = 0.0
        self._history: dict = {m: ([], []) for m in self.metrics}
        self._records: List[Any] = []  # (step, {metric: value}) in the order recorded: the page's
        self._lock = threading.Lock()  # feed, read from the server's threads
        self._info_values: dict = {}
        self._last_render = self._last_plot = self._plot_cost = 0.0
        # a terminal at the end of the output (directly, or behind mpiexec): a live view
        self._terminal = _terminal_behind(self.stream) if self.active and show else None
        self._live = _LiveView(self.stream, self._terminal) if self._terminal else None
        self._tty = self._terminal is not None and self._live is None
        self._closed = False
        self._stopper = StopRequest(self._on_stop_request, self.stop_file)
        self._web = None
        if web is not None and web is not False:  # 0 is a port (any free one)
            port = _env.get("MONITOR_PORT", 0, cast=int, valid=lambda p: 0 <= p < 65536,
                            meaning="a port number from 0 to 65535") if web is True else web
            if isinstance(port, bool) or not isinstance(port, int) or \
                    not 0 <= port < 65536:  # checked on every worker: the same error
                raise SpmdValueError(f"TrainingProgressMonitor ({scope.who()}): web must "
                                     f"be True or a port number from 0 to 65535 (got "
                                     f"{web!r})")
            if self.active:
                self._start_web(port)

    # -- what a person sees and does -------------------------------------------------

    def _on_stop_request(self, reason):
        if self.active and not self.stop:  # mpiexec delivers Ctrl-C to every worker;
            self.stop = True               # worker 1 decides
            self._line(f"stop requested ({reason}); finishing the current iteration",
                       force=True)

    def _start_web(self, port):
        from ._web import WebMonitor

        try:
            self._web = WebMonitor(self._state, lambda: self._on_stop_request(
                "Stop button in the browser"), port)
        except OSError as e:
            raise SpmdValueError(f"TrainingProgressMonitor (worker 1): cannot serve the "
                                 f"page on 127.0.0.1 port {port}: {e.strerror or e}") from e
        self.stream.write(f"monitor: {self._web.url}\n")
        self.stream.flush()

    @property
    def url(self) -> Optional[str]:
        """The page's address with its token (worker 1, ``web`` on), else None."""
        return self._web.url if self._web is not None else None

    def _state(self, since):
        """What the page shows: the records from the ``since``-th on, and the rest."""
        with self._lock:
            panels = self._panels()
            return {"run": self.run, "workers": self.workers, "xlabel": self.xlabel,
                    "records": self._records[since:], "next": len(self._records),
                    "latest": self._latest(), "panels": list(panels.items()),
                    "log": [base for base in panels if self._log_axis(base, panels)],
                    "info": {k: str(v) for k, v in self._info_values.items()},
                    "progress": self._progress, "status": self.status, "stop": self.stop}

    def _check_stop_file(self):
        if self.active:
            self._stopper.check()

    @property
    def progress(self) -> float:
        """Percent done, 0 to 100 (MATLAB ``monitor.Progress``)."""
        return self._progress

    @progress.setter
    def progress(self, value: float) -> None:
        # any real number (a numpy one, a one-element tensor too), as MATLAB's Progress
        if not _is_real(value) or not 0 <= _as_float(value) <= 100:
            raise SpmdValueError(f"TrainingProgressMonitor.progress "
                                 f"({_world.here().who()}): must be a number from 0 to 100 "
                                 f"(got {_shown(value)})")
        self._progress = _as_float(value)
        self._maybe_render(metric=False)

    def record_metrics(self, step: float, **values: Any) -> None:
        """Record metric values at x = ``step`` (MATLAB ``recordMetrics``).

        ``step`` and the values are real numbers (Python or numpy numbers, one-element
        arrays or tensors); anything else raises SpmdTypeError on every worker (the inert
        ones check too), and nothing of the call is recorded."""
        unknown = [k for k in values if k not in self._history]
        if unknown:
            raise SpmdValueError(f"TrainingProgressMonitor.record_metrics "
                                 f"({_world.here().who()}): {unknown[0]!r} "
                                 f"is not a declared metric (declared: "
                                 f"{', '.join(self.metrics) or 'none'})")
        # checked on every worker without converting (a tensor on a GPU would be copied
        # to the host on every worker): a bad value raises everywhere, not on worker 1
        # only, and nothing is recorded (a step without its value broke the history)
        for what, value in [("step", step)] + [(f"metric {k!r}", v) for k, v in
                                               values.items()]:
            if not _is_real(value):
                raise SpmdTypeError(f"TrainingProgressMonitor.record_metrics "
                                    f"({_world.here().who()}): the {what} must be a real "
                                    f"number (got {_shown(value)})")
        if not self.active:
            return
        x = _as_float(step)
        recorded = {k: _as_float(v) for k, v in values.items()}
        with self._lock:
            for name, value in recorded.items():
                xs, ys = self._history[name]
                xs.append(x)
                ys.append(value)
            self._records.append((x, recorded))
        self._last_step = x
        if self._log is not None:
            self._log.write(step, recorded, self._info_values)  # numbers, not tensors
        self._maybe_render()

    def update_info(self, **values: Any) -> None:
        """Show information values (MATLAB ``updateInfo``)."""
        unknown = [k for k in values if k not in self.info]
        if unknown:
            raise SpmdValueError(f"TrainingProgressMonitor.update_info "
                                 f"({_world.here().who()}): {unknown[0]!r} is "
                                 f"not declared information (declared: "
                                 f"{', '.join(self.info) or 'none'})")
        if self.active:
            epoch = values.get("epoch")
            before = self._info_values.get("epoch")
            if epoch is not None and before is not None and epoch != before and \
                    getattr(self, "_last_step", None) is not None:
                self._epochs.append((self._last_step, str(epoch)))  # a new epoch begins
            with self._lock:
                self._info_values.update(values)
            self._maybe_render(metric=False)

    def history(self, metric: str) -> Tuple[List[float], List[float]]:
        """``(steps, values)`` recorded for ``metric`` on worker 1 (empty elsewhere)."""
        if metric not in self._history:
            raise SpmdValueError(f"TrainingProgressMonitor.history: {metric!r} is not a "
                                 f"declared metric")
        xs, ys = self._history[metric]
        return list(xs), list(ys)

    # -- drawing -------------------------------------------------------------------------

    def _latest(self):
        """``[(metric, its last value)]`` for the metrics recorded so far."""
        return [(name, ys[-1]) for name in self.metrics for ys in [self._history[name][1]]
                if ys]

    def _summary(self):
        parts = [f"{name} {value:.4g}" for name, value in self._latest()]
        parts += [f"{k} {v}" for k, v in self._info_values.items()]
        if self.status:
            parts.append(self.status)
        return " | ".join(parts)

    def _line(self, text, force=False):
        if not self.active or not (self.show or force):  # messages show even then
            return
        if self._live is not None:
            if force:  # a message: printed above the live view
                self._live.message(text)
            return
        if self._tty and not force:
            self.stream.write("\r\033[K" + text)
        else:
            self.stream.write(("\n" if self._tty else "") + text + "\n")
        self.stream.flush()

    def _maybe_render(self, force=False, metric=True):
        self._check_stop_file()
        now = time.monotonic()
        if not self.active or (not force and now - self._last_render < self.refresh):
            return
        if not force and not metric and self._live is None and not self._tty:
            # plain lines (a file, a pipe, a CI log) are never redrawn: a line is written
            # when a metric is recorded, with the progress and information set before it,
            # never half-way through a step's updates (the new epoch beside the old loss)
            return
        if not force and not self._records:
            return  # nothing to show before the first metric (info and progress come first)
        self._last_render = now
        if self._live is not None and self.show:
            self._live.update(self._progress, self._latest(),
                              list(self._info_values.items()), self.status)
        elif self._tty:
            filled = int(round(self._progress / 5))
            bar = "#" * filled + "." * (20 - filled)
            self._line(f"[{bar}] {self._progress:5.1f}% | {self._summary()}")
        else:
            self._line(f"{self._progress:5.1f}% | {self._summary()}")
        # worker 1 is in every collective: drawing must not slow the run down, so the
        # next refresh waits 20 times what the last one cost (5% at most) if that is longer
        if self.plot_file and (force or now - self._last_plot >= max(
                self.plot_every, 20 * self._plot_cost)):
            self.save_plot()
            self._last_plot = time.monotonic()
            self._plot_cost = self._last_plot - now

    def _panels(self):
        """Metrics grouped by panel: a validation metric (``validation_loss``,
        ``ValidationLoss``, ``val_loss``) is drawn over its training metric."""
        panels = {}
        for name in self.metrics:
            if not self._history[name][0]:
                continue
            base = next((b for b in _training_names(name) if b in self._history), name)
            panels.setdefault(base, []).append(name)
        return panels

    def _log_axis(self, base, panels=None):
        """Whether panel ``base`` is drawn on a log axis (``panels``: ``_panels()``)."""
        panels = self._panels() if panels is None else panels
        if self.log_scale == "auto":
            wanted = "loss" in base.lower()
        else:
            wanted = base in (self.log_scale or ())
        return wanted and all(y > 0 for name in panels.get(base, [base])
                              for y in self._history[name][1])

    def save_plot(self, path: Optional[str] = None) -> Optional[str]:
        """Draw the metrics into a PNG (written atomically): one panel per training
        metric with its validation metric over it, a log axis for losses, the run's name
        and worker count in the title, and epoch boundaries marked on an iteration axis.
        """
        path = path or self.plot_file
        if not self.active or not path:
            return None
        try:
            import matplotlib

            matplotlib.use("Agg", force=False)
            import matplotlib.pyplot as plt
        except ImportError:
            return None
        panels = self._panels()
        count = max(1, len(panels))
        fig, axes = plt.subplots(count, 1, figsize=(7.5, 2.8 * count), squeeze=False,
                                 sharex=True)
        for ax, (base, names) in zip(axes[:, 0], panels.items()):
            for name in names:
                xs, ys = self._history[name]
                validation = name != base
                ax.plot(xs, ys, "o--" if validation else "-", markersize=3,
                        label="validation" if validation else "training")
            if len(names) > 1:
                ax.legend(loc="best", fontsize=8)
            if self._log_axis(base, panels):
                ax.set_yscale("log")
            ax.set_ylabel(base)
            ax.grid(True, alpha=0.3)
            for x, epoch in self._epochs:
                ax.axvline(x, color="gray", linewidth=0.6, linestyle=":")
        if self._epochs and self.xlabel.lower() != "epoch":
            top = axes[0, 0].secondary_xaxis("top")
            shown = self._epochs[:: max(1, len(self._epochs) // 12)]
            top.set_xticks([x for x, _ in shown])
            top.set_xticklabels([e.split()[0] for _, e in shown], fontsize=7)
            top.set_xlabel("epoch", fontsize=8)
        elif self.xlabel.lower() == "epoch":
            from matplotlib.ticker import MaxNLocator

            axes[-1, 0].xaxis.set_major_locator(MaxNLocator(integer=True))
        axes[-1, 0].set_xlabel(self.xlabel)
        title = f"{self.run}: {self.workers} worker{'s' if self.workers != 1 else ''}, " \
                f"{self._progress:.0f}%" + (f", {self.status}" if self.status else "")
        fig.suptitle(title, fontsize=10)
        fig.tight_layout()
        folder = os.path.dirname(path)
        if folder:
            os.makedirs(folder, exist_ok=True)
        try:
            write_atomic(path, lambda f: fig.savefig(f, dpi=90, format="png"))
        finally:
            plt.close(fig)
        return path

    def close(self) -> None:
        """Final view and plot; Ctrl-C behaves as before the monitor again."""
        if self._closed:
            return
        self._closed = True
        self._maybe_render(force=True)
        if self._web is not None:
            self._web.close()
        if self._log is not None:
            self._log.close()
        if self._live is not None:
            self._live.stop()
        elif self._tty and self.active:
            self.stream.write("\n")
            self.stream.flush()
        self._stopper.restore()

    def __enter__(self) -> TrainingProgressMonitor:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class StopRequest:
    """A person's request to stop: the first Ctrl-C, or the stop file appearing.

    Calls ``on_request(reason)`` once per request (Ctrl-C from the signal handler, the
    stop file from ``check()``); a second Ctrl-C raises KeyboardInterrupt as usual.
    ``restore()`` puts back the previous Ctrl-C handler. The handler is installed only
    from the main thread (Python allows no other).
    """

    def __init__(self, on_request, stop_file=None):
        self.on_request = on_request
        self.stop_file = stop_file
        self.requested = False
        self._interrupts = 0
        self._previous = None
        if _in_main_thread():
            self._previous = signal.signal(signal.SIGINT, self._on_interrupt)

    def _on_interrupt(self, signum, frame):
        self._interrupts += 1
        if self._interrupts > 1:  # a second Ctrl-C: interrupt for real
            signal.signal(signal.SIGINT, signal.default_int_handler)
            raise KeyboardInterrupt
        self.requested = True
        self.on_request("Ctrl-C")

    def check(self):
        """Whether a stop was requested (looks for the stop file)."""
        if not self.requested and self.stop_file and os.path.exists(self.stop_file):
            self.requested = True
            self.on_request(f"{self.stop_file} exists")
        return self.requested

    def restore(self):
        if self._previous is not None and _in_main_thread():
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None


def _in_main_thread():
    return threading.current_thread() is threading.main_thread()


def _is_real(value):
    """Whether ``value`` is one real number: a Python or numpy number, or an array or
    tensor of one element of a real (or bool) type. Looks at its type and shape only."""
    if isinstance(value, numbers.Real):
        return True
    dtype, shape = getattr(value, "dtype", None), getattr(value, "shape", None)
    try:
        if dtype is None or shape is None or math.prod(shape) != 1:
            return False
        if hasattr(dtype, "is_complex"):  # torch
            return not dtype.is_complex
        import numpy as np

        return np.dtype(dtype).kind in "biuf"
    except TypeError:
        return False


def _as_float(value):
    """A real number of ``_is_real`` as a float (a one-element array or tensor through
    its ``item()``: numpy 2 refuses ``float`` of an array of one or more dimensions)."""
    if isinstance(value, numbers.Real):
        return float(value)
    return float(value.item())


def _shown(value):
    """``value`` for an error message: its repr, or its type and shape for an array."""
    shape = getattr(value, "shape", None)
    if shape is not None and not isinstance(value, numbers.Number):
        return f"a {type(value).__name__} of shape {tuple(shape)}"
    text = repr(value)
    return (text if len(text) <= 60 else text[:57] + "...") + \
        f" that is a {type(value).__name__}"


def _names(kind, names):
    if isinstance(names, str):
        names = [names]
    out = []
    for name in names:
        if not isinstance(name, str) or not name.isidentifier():
            raise SpmdTypeError(f"TrainingProgressMonitor: {kind} names must be identifiers "
                                f"(got {name!r})")
        out.append(name)
    return out


def _default_run():
    """``<script>-<date>-<time>``: the run's name, its folder under ``runs/``."""
    script = os.path.splitext(os.path.basename(sys.argv[0] or "python"))[0] or "python"
    return f"{script}-{time.strftime('%Y%m%d-%H%M%S')}"


def _training_names(name):
    """The names of the training metric a validation metric may go with:
    ``validation_loss`` -> ``loss``; ``ValidationLoss`` -> ``TrainingLoss``, ``loss``."""
    for prefix in ("validation_", "val_", "Validation"):
        if name.startswith(prefix) and len(name) > len(prefix):
            rest = name[len(prefix):]
            if prefix == "Validation":
                return ["Training" + rest, rest, rest[0].lower() + rest[1:]]
            return [rest, "training_" + rest]
    return []


class _Log:
    """``log_dir``: ``metrics.csv`` (every metric and information value, a row per
    ``record_metrics``) and TensorBoard event files when the ``tensorboard`` package is
    installed."""

    def __init__(self, log_dir, metrics, info):
        import csv

        os.makedirs(log_dir, exist_ok=True)
        self.columns = ["step", *metrics, *info]
        path = os.path.join(log_dir, "metrics.csv")
        self.file = open(path, "w", newline="")
        self.csv = csv.DictWriter(self.file, self.columns)
        self.csv.writeheader()
        self.board = None
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:  # no torch, or no tensorboard: the CSV only
            return
        self.board = SummaryWriter(log_dir)

    def write(self, step, values, info):
        row = {"step": step, **values, **{k: v for k, v in info.items()}}
        self.csv.writerow({k: row.get(k, "") for k in self.columns})
        self.file.flush()
        if self.board is not None:
            for name, value in values.items():
                self.board.add_scalar(name, float(value), int(step))

    def close(self):
        self.file.close()
        if self.board is not None:
            self.board.close()


def _terminal_behind(stream):
    """The terminal (its path) that ``stream`` ends on, or None: the stream itself, or,
    for a worker whose output a launcher forwards (mpiexec, Open MPI's prterun), the
    terminal of the launcher that reads this process's pipe. A pipe read by anything
    else (``| tee``, a CI runner) or a file means plain lines. Linux only beyond a
    direct terminal."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None
    if os.isatty(fd) and not _forwarded_pty(os.getpid()):
        return os.ttyname(fd)
    try:
        pid, target = os.getpid(), os.readlink(f"/proc/self/fd/{fd}")
        for _ in range(8):
            forwarded = target.startswith("/dev/pts/") and _forwarded_pty(pid)
            if not target.startswith("pipe:") and not forwarded:
                return target if target.startswith(("/dev/pts/", "/dev/tty")) else None
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])  # the parent
            if pid <= 1 or not (forwarded or _reads(pid, target)):
                return None
            target = os.readlink(f"/proc/{pid}/fd/1")  # where the reader writes
    except (OSError, ValueError, IndexError):
        return None
    return None


def _forwarded_pty(pid):
    """Whether ``pid``'s terminal is a pseudo-terminal its parent made to forward its
    output (Open MPI gives every worker one): the parent holds /dev/ptmx."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            parent = int(f.read().rsplit(")", 1)[1].split()[1])
        if parent <= 1:
            return False
        return any(os.readlink(f"/proc/{parent}/fd/{name}") == "/dev/ptmx"
                   for name in os.listdir(f"/proc/{parent}/fd"))
    except (OSError, ValueError, IndexError):
        return False


def _reads(pid, pipe):
    """Whether process ``pid`` holds the read end of ``pipe`` (``pipe:[inode]``)."""
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{name}") != pipe:
                continue
            with open(f"/proc/{pid}/fdinfo/{name}") as f:
                for line in f:
                    if line.startswith("flags:") and int(line.split()[1], 8) & 3 == 0:
                        return True
        except OSError:
            continue
    return False


class _LiveView:
    """The in-place view (rich's Live): a progress bar, the latest metrics, the
    information. None of it when rich is not installed (the view is one line then)."""

    def __new__(cls, stream, terminal):
        import importlib.util

        if importlib.util.find_spec("rich") is None:
            return None
        return super().__new__(cls)

    def __init__(self, stream, terminal):
        from rich.console import Console
        from rich.live import Live

        width = None
        try:
            fd = os.open(terminal, os.O_RDONLY | os.O_NOCTTY)
            try:
                width = os.get_terminal_size(fd).columns
            finally:
                os.close(fd)
        except OSError:
            pass
        self.console = Console(file=stream, force_terminal=True, width=width)
        self.live = Live(console=self.console, auto_refresh=False, transient=False)
        self.started = False

    def update(self, progress, metrics, info, status):
        from rich.progress_bar import ProgressBar
        from rich.table import Table

        grid = Table.grid(padding=(0, 2))
        grid.add_row(ProgressBar(total=100.0, completed=progress, width=30),
                     f"{progress:5.1f}%" + (f"  {status}" if status else ""))
        if metrics:
            grid.add_row("metrics", "   ".join(f"{k} [bold]{v:.4g}[/]" for k, v in metrics))
        if info:
            grid.add_row("info", "   ".join(f"{k} {v}" for k, v in info))
        if not self.started:
            self.live.start()
            self.started = True
        self.live.update(grid, refresh=True)

    def message(self, text):
        self.console.print(text)

    def stop(self):
        if self.started:
            self.live.stop()
            self.started = False
