"""Whole lines from each worker: a worker's stdout and stderr write every line in one
system call, so the launcher never interleaves two workers' output in mid-line (with
``PYTHONUNBUFFERED=1``, ``print`` would write a line's text and its newline apart); with
``SPMDLAB_LABEL_OUTPUT=1`` each line starts ``Worker k: `` as MATLAB shows it.

Installed on every launched worker of a job of two or more; a stream the program has
replaced already (pytest's capture, a pool worker's pipes) is left alone.
"""

import atexit
import io
import os
import sys
import threading

from . import _env, _world


class WholeLines(io.TextIOBase):
    """A text stream over a file descriptor that writes complete lines, each in one
    ``os.write``. A partial line waits for its newline: ``flush()`` writes it at once only
    if it redraws a line (a progress bar's ``\\r``), else after ``HOLD`` seconds without
    its newline (a prompt shows), or at exit; a ``print(..., end="", flush=True)``
    finished soon after therefore reaches the terminal whole."""

    HOLD = 1.0

    def __init__(self, stream, label=""):
        super().__init__()
        self._stream = stream
        self._fd = stream.fileno()
        self._label = label
        self._pending = ""
        self._lock = threading.Lock()
        self._at_line_start = True
        self._timer = None  # at most one: writes a held partial line after HOLD seconds
        atexit.register(self.close)

    @property
    def encoding(self):
        return getattr(self._stream, "encoding", "utf-8") or "utf-8"

    @property
    def errors(self):
        return getattr(self._stream, "errors", "strict") or "strict"

    def fileno(self):
        return self._fd

    def isatty(self):
        return self._stream.isatty()

    def writable(self):
        return True

    def write(self, text):
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        with self._lock:
            self._pending += text
            end = self._pending.rfind("\n")
            if end >= 0:
                lines, self._pending = self._pending[:end + 1], self._pending[end + 1:]
                self._emit(lines)
        return len(text)

    def flush(self):
        with self._lock:
            if not self._pending:
                return
            if "\r" in self._pending:
                self._emit_pending()
                return
            if self._timer is not None:
                return
            self._timer = threading.Timer(self.HOLD, self._write_held)
            self._timer.name = "spmdlab-output"  # (it sends nothing: see _stall._needs)
            self._timer.daemon = True
            self._timer.start()

    def _write_held(self):
        with self._lock:
            self._timer = None
            if self._pending:
                self._emit_pending()

    def close(self):
        """Writes what is pending (at exit: a last line without its newline)."""
        with self._lock:
            if self._pending:
                self._emit_pending()

    def _emit_pending(self):
        text, self._pending = self._pending, ""
        self._emit(text)

    def _emit(self, text):
        if self._label:
            parts = text.split("\n")
            out = []
            for i, part in enumerate(parts):
                if i == len(parts) - 1 and not part:
                    break
                prefix = self._label if self._at_line_start else ""
                out.append(prefix + part + ("\n" if i < len(parts) - 1 else ""))
                self._at_line_start = i < len(parts) - 1
            text = "".join(out)
        data = text.encode(self.encoding, self.errors)
        view = memoryview(data)
        while view:
            try:
                written = os.write(self._fd, view)
            except InterruptedError:
                continue
            view = view[written:]


def install():
    """Whole lines (and labels, if asked) on this worker's stdout and stderr."""
    if _world.SIZE < 2 or os.environ.get("SPMDLAB_POOL_WORKER"):
        return
    label = f"Worker {_world.RANK + 1}: " if _env.LABEL_OUTPUT else ""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is None or stream is not getattr(sys, f"__{name}__"):
            continue  # replaced by the program (or pytest): its own business
        try:
            stream.flush()
            stream.fileno()
        except (OSError, ValueError, AttributeError):
            continue
        setattr(sys, name, WholeLines(stream, label))


def release():
    """Writes every held partial line now (a job about to end: no atexit will run)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name, None)
        if isinstance(stream, WholeLines):
            stream.close()
