"""How long a job takes to end after one worker fails, and whether the failure is named.

    python scripts/time_failures.py            # 4 workers, each failure mode 3 times
    python scripts/time_failures.py --workers 2 --repeat 1

Worker 2 fails at the 20th iteration of a loop of collectives (10 ms apart) while the
others keep calling; the time is from the failure (the worker writes a timestamp just
before it) to the end of mpiexec, measured here in the launcher. Modes: an uncaught
exception, sys.exit(3), os._exit(4), SIGKILL (from outside: kill -9 of the worker's pid)
and SIGINT to mpiexec (Ctrl-C). Prints the median, the exit status and whether the
output names worker 2.
"""

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

SCRIPT = """
import os, sys, time
from spmdlab import spmd_index, spmd_plus
mode, stamp = sys.argv[1], sys.argv[2]
if spmd_index() == 2:
    with open(stamp + ".pid", "w") as f:
        f.write(str(os.getpid()))
for i in range(100000):
    if spmd_index() == 2 and i == 20:
        with open(stamp, "w") as f:
            f.write(repr(time.time()))
        if mode == "exception":
            raise RuntimeError("worker 2 fails")
        if mode == "sys.exit":
            sys.exit(3)
        if mode == "os._exit":
            os._exit(4)
        if mode in ("SIGKILL", "SIGINT"):
            time.sleep(60)  # the launcher sends the signal
    spmd_plus(1.0)
    time.sleep(0.01)
"""

MODES = ["exception", "sys.exit", "os._exit", "SIGKILL", "SIGINT"]


def run(mode, workers, folder):
    script = os.path.join(folder, "job.py")
    stamp = os.path.join(folder, f"stamp-{mode}")
    for path in (stamp, stamp + ".pid"):
        if os.path.exists(path):
            os.remove(path)
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    proc = subprocess.Popen([mpiexec, "-n", str(workers), sys.executable, script, mode,
                             stamp], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env, start_new_session=True)
    while not os.path.exists(stamp):
        time.sleep(0.01)
        if proc.poll() is not None:
            break
    time.sleep(0.05)
    if mode == "SIGKILL":
        with open(stamp + ".pid") as f:
            os.kill(int(f.read()), signal.SIGKILL)
    elif mode == "SIGINT":
        proc.send_signal(signal.SIGINT)
    try:
        out, _ = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        return None, None, False
    end = time.time()
    with open(stamp) as f:
        failed_at = float(f.read())
    return end - failed_at, proc.returncode, "worker 2" in out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    from mpi4py import MPI

    print(f"time_failures: {os.uname().nodename}, {os.cpu_count()} cores, "
          f"{MPI.Get_library_version().splitlines()[0].strip()}, {args.workers} workers, "
          f"{time.strftime('%Y-%m-%d %H:%M')}")
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "job.py"), "w") as f:
            f.write(SCRIPT)
        print(f"{'failure':>10} {'median s':>9} {'max s':>6} {'status':>7} named")
        for mode in MODES:
            runs = [run(mode, args.workers, folder) for _ in range(args.repeat)]
            times = [t for t, _, _ in runs if t is not None]
            if not times:
                print(f"{mode:>10} {'hung':>9}")
                continue
            print(f"{mode:>10} {statistics.median(times):9.2f} {max(times):6.2f} "
                  f"{runs[-1][1]:>7} {'yes' if all(n for _, _, n in runs) else 'no'}")


if __name__ == "__main__":
    main()
