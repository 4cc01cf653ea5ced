"""Names a worker that ends without a word (SIGKILL, the OOM killer, a crash in C code).

A killed process cannot speak, and MPICH's launcher SIGKILLs every other worker in the
same instant (no signal handler or thread of theirs runs), naming only a pid. So the
first worker of each host starts this small watcher as a separate process (its own
session: the launcher's clean-up does not reach it) with the host's workers and their
pids. It waits on their pidfds. Every worker that ends on purpose writes a line to the
host's goodbye file first (``k exit`` at the normal end, ``k abort`` when spmdlab ends
the job for a failure it has named). When a worker's process ends with no goodbye, and
no worker has yet ended the job for a named failure, the watcher prints on stderr (the
launcher forwards it) which worker it was; deaths after that are the launcher's
clean-up and are not reported.

Run as a script (``python .../_watchdog.py host size goodbye k:pid ...``), never as
part of the package: importing spmdlab would import mpi4py and start MPI.
"""

import os
import select
import sys


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
    reported = False
    while fds or gone:
        dead, gone = gone, []
        if not dead:
            try:
                ready = poller.poll()
            except InterruptedError:
                continue
            for fd, _ in ready:
                dead.append(fds.pop(fd))
                poller.unregister(fd)
                os.close(fd)
        if reported:
            continue
        said = _goodbyes(path)
        if "abort" in said.values():
            reported = True  # a failure spmdlab has named: the rest is clean-up
            continue
        silent = sorted(k for k, _ in dead if k not in said)
        if silent:
            pids = ", ".join(str(pid) for k, pid in sorted(dead) if k in silent)
            # several at once: the watcher woke after the clean-up had begun
            who = (f"worker {silent[0]} of {size}" if len(silent) == 1 else
                   f"one of workers {', '.join(map(str, silent))} of {size}")
            os.write(2, (f"### spmdlab: {who} ({host}, pid {pids}) ended without a word: "
                         f"killed by a signal (SIGKILL, the OOM killer) or crashed in C "
                         f"code; the launcher ends the job\n").encode())
            reported = True
    try:
        os.unlink(path)
    except OSError:
        pass


if __name__ == "__main__":
    main(sys.argv)
