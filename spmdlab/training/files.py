"""Files that one worker writes for people and for later runs: atomically and safely.

``write_atomic(path, write)`` is what checkpoints and plots go through: the data goes to a
new temporary file beside ``path`` (created exclusively under an unpredictable name, so
a planted file or symbolic link cannot redirect the write), is flushed to disk, renamed
onto ``path``, and the folder is synced so that the rename itself survives a crash.
Temporary files that a killed writer on this host left behind are removed on the next
write to the same folder.
"""

import errno
import os
import secrets
import socket

__all__ = ["write_atomic"]

_TMP = ".spmdlab-tmp-"


def write_atomic(path, write):
    """Call ``write(f)`` with a binary file open for writing; the result becomes ``path``.

    On any error nothing at ``path`` changes and no temporary file is left.
    """
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    _remove_stale(folder)
    host, pid = socket.gethostname(), os.getpid()
    tmp = os.path.join(folder, f"{_TMP}{host}-{pid}-{secrets.token_hex(8)}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(tmp, flags, 0o644)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise
    _sync_folder(folder)
    return path


def _remove_stale(folder):
    """Remove this host's temporary files whose writing process no longer exists."""
    host = socket.gethostname()
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        if not name.startswith(f"{_TMP}{host}-"):
            continue
        try:
            pid = int(name[len(_TMP) + len(host) + 1:].split("-")[0])
        except ValueError:
            continue
        if pid != os.getpid() and not _alive(pid):
            try:
                os.remove(os.path.join(folder, name))
            except OSError:
                pass


def _alive(pid):
    try:
        os.kill(pid, 0)
    except OSError as exc:
        return exc.errno == errno.EPERM
    return True


def _sync_folder(folder):
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # not on every platform
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
