"""Names a worker that ends without a word (SIGKILL, the OOM killer, a crash in C code).

A killed process cannot speak, and MPICH's launcher SIGKILLs every other worker in the
same instant (no signal handler or thread of theirs runs), naming only a pid. So the
first worker of each host starts this small watcher as a separate process (its own
session: the launcher's clean-up does not reach it) with the host's workers and their
pids. It waits on their pidfds (and says so with an empty file, the goodbye file's
name and ``.watching``). Every worker that ends on purpose writes a line to the
host's goodbye file first (``k exit`` at the normal end, ``k abort`` when spmdlab ends
the job for a failure it has named). When a worker's process ends with no goodbye, and
no worker has yet ended the job for a named failure, the watcher prints on stderr (the
launcher forwards it) which worker it was and, where it can know, how it ended: each
worker has faulthandler write to a file of its own on SIGTERM and on a fatal signal
(SIGSEGV, SIGBUS, ...), with the Python stack then; nothing there means SIGKILL (which
nothing can catch) or a crash faulthandler did not see. Deaths after the first are the
launcher's clean-up and are not reported; where the watcher wakes only after the clean-up
began, the reports tell the first apart from the workers the clean-up ended (with
SIGKILL under MPICH's hydra, which the workers tell the watcher: no report).

Run as a script (``python .../_watchdog.py host size goodbye k:pid ...``), never as
part of the package: importing spmdlab would import mpi4py and start MPI.
"""

import os
import select
import sys
import time


def _goodbyes(path):
    said = {}
    try:
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2 and parts[0].isdigit():
                    said[int(parts[0])] = parts[1]
    except OSError:
        pass
    return said


def main(argv):
    host, size, path = argv[1], int(argv[2]), argv[3]
    try:  # wake before the launcher's clean-up kills the others (allowed to root only)
        os.nice(-10)
    except OSError:
        pass
    workers = [tuple(int(v) for v in a.split(":")) for a in argv[4:]]
    poller = select.poll()
    fds = {}
    gone = []  # ended before this watcher started (it starts late on a loaded machine)
    for k, pid in workers:
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            gone.append((k, pid))
            continue
        fds[fd] = (k, pid)
        poller.register(fd, select.POLLIN)
    try:  # "watching": for whoever must know that a death from now on gets named
        os.close(os.open(f"{path}.watching", os.O_CREAT | os.O_WRONLY, 0o600))
    except OSError:
        pass
    reported = False
    while fds or gone:
        dead, gone = gone, []
        if not dead:
            dead = _take(poller, fds)
        if reported:
            continue
        said = _goodbyes(path)
        if "abort" in said.values():
            reported = True  # a failure spmdlab has named: the rest is clean-up
            continue
        silent = sorted(k for k, _ in dead if k not in said)
        if len(silent) > 1 and fds:
            # Woken after the launcher's clean-up began: the first to die may still be
            # ending (a thread of a killed process can outlive the socket whose closing
            # made the launcher kill the rest). Which one was first cannot be told now:
            # take every death of a short moment, so that the list holds it.
            dead += _deaths_within(poller, fds, 0.5)
            said = _goodbyes(path)
            silent = sorted(k for k, _ in dead if k not in said)
        silent = _culprits(silent, path)
        if silent:
            pids = ", ".join(str(pid) for k, pid in sorted(dead) if k in silent)
            # several at once: the watcher woke after the clean-up had begun (one report
            # only: a launcher may end the others with SIGTERM, Open MPI's does, and
            # those are its clean-up, not how the job ended)
            who = (f"worker {silent[0]} of {size}" if len(silent) == 1 else
                   f"one of workers {', '.join(map(str, sorted(silent)))} of {size}")
            how, stack = _how_it_ended(silent, said, path)
            then = "; its Python stack then:" if stack else ""
            _write(f"### spmdlab: {who} ({host}, pid {pids}) {how}; the launcher ends the "
                   f"job{then}\n{stack}")
            reported = True
    for name in [path, f"{path}.watching"] + [f"{path}.{k}" for k, _ in workers]:
        try:
            os.unlink(name)
        except OSError:
            pass


def _write(text):
    try:
        os.write(2, text.encode())
    except OSError:  # the launcher has gone: nobody reads any more
        pass


def _ending(pid):
    """Whether process ``pid`` has begun to end (its leader thread is exiting or a
    zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return _exiting(f.read())
    except OSError:
        return False


_PF_EXITING = 0x4  # the kernel's flag of a thread in exit (include/linux/sched.h)


def _exiting(stat):
    """Whether a ``/proc/<pid>/stat`` line is a thread that has begun to exit: a zombie
    or dead, or still tearing itself down. A SIGKILLed worker closes its sockets while it
    tears down, before its leader is a zombie: the launcher may kill, and this watcher
    see end, a worker of its clean-up first (the watcher once named worker 1 for the
    SIGKILLed worker 2)."""
    fields = stat.rpartition(")")[2].split()
    try:
        return fields[0] in ("Z", "X") or bool(int(fields[6]) & _PF_EXITING)
    except (IndexError, ValueError):
        return False


def _take(poller, fds, timeout=None):
    """Poll once (``timeout`` in ms; None: until one ends): the watched workers (k, pid)
    that have ended, taken out of ``fds``. A killed worker's process can still be ending
    (its leader thread exiting or a zombie, another thread not yet gone) when the
    launcher has already killed, and this watcher seen, the rest: it counts as ended
    too."""
    try:
        ready = [fd for fd, _ in poller.poll(timeout)]
    except InterruptedError:
        return []
    ready += [fd for fd, (_, pid) in fds.items() if fd not in ready and _ending(pid)]
    ended = []
    for fd in ready:
        ended.append(fds.pop(fd))
        poller.unregister(fd)
        os.close(fd)
    return ended


def _deaths_within(poller, fds, seconds):
    """The watched workers (k, pid) that end within ``seconds`` (taken out of ``fds``)."""
    ended = []
    deadline = time.monotonic() + seconds
    while fds:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        ended += _take(poller, fds, left * 1000)
    return ended


def _culprits(silent, path):
    """The workers of ``silent`` to name, the likeliest first. Where several ended at once
    (the watcher woke after the launcher's clean-up began), one whose faulthandler report
    shows a fatal signal crashed by itself: the clean-up sends SIGKILL or SIGTERM, which
    leave no such report. Where the clean-up is known to send SIGKILL, which leaves no
    report at all (MPICH's hydra: the workers set ``SPMDLAB_WATCHER_CLEANUP=SIGKILL``),
    one with a report of SIGTERM was sent it from outside too (not so under Open MPI,
    whose clean-up sends SIGTERM). Only those are named then; else every one of
    ``silent``. The file written first leads: its report (none: SIGKILL) says how the
    job ended (at 3 or 4 workers, worker 2's kill -TERM was named "one of workers 1, 2,
    3 ... ended without a word", read from worker 1's empty file)."""
    if len(silent) < 2:
        return silent
    reports = {k: _report(path, k) for k in silent}
    crashed = [k for k in silent if "Fatal Python error: " in reports[k]]
    if not crashed and os.environ.get("SPMDLAB_WATCHER_CLEANUP") == "SIGKILL":
        crashed = [k for k in silent if reports[k]]
    return sorted(crashed or silent, key=lambda k: _written(path, k))


def _written(path, k):
    """When worker ``k``'s faulthandler file was last written (ns; 0: unknown)."""
    try:
        return os.stat(f"{path}.{k}").st_mtime_ns
    except OSError:
        return 0


def _report(path, k):
    """What faulthandler wrote for worker ``k`` (empty: nothing)."""
    try:
        with open(f"{path}.{k}") as f:
            return f.read().strip()
    except OSError:
        return ""


def _how_it_ended(silent, said, path):
    """``(words, stack)``: the signal that ended the first of ``silent``, as far as this
    host can know it: faulthandler's report of SIGTERM or of a fatal signal (with the
    Python stack then), else a SIGKILL (nothing can catch it) or a crash in C code."""
    k = silent[0]
    report = _report(path, k)
    if report and "Fatal Python error: " not in report:  # faulthandler's SIGTERM
        stack = "".join(f"    {line}\n" for line in report.splitlines() if line)
        return ("ended by SIGTERM (sent by kill, by a batch system at its time limit, or "
                "by a launcher)"), stack
    for line in report.splitlines():
        if line.startswith("Fatal Python error: "):
            what = line[len("Fatal Python error: "):].strip()
            signame = {"Segmentation fault": "SIGSEGV", "Bus error": "SIGBUS",
                       "Floating-point exception": "SIGFPE", "Aborted": "SIGABRT",
                       "Illegal instruction": "SIGILL"}.get(what, "a fatal signal")
            stack = "".join(f"    {line}\n" for line in report.splitlines()[1:] if line)
            return f"crashed: {what} ({signame})", stack
    return ("ended without a word: killed by a signal (SIGKILL, the OOM killer) or "
            "crashed in C code"), ""


if __name__ == "__main__":
    main(sys.argv)
