"""What the benchmark scripts share: run themselves under mpiexec, one run per worker count.

A benchmark script's launcher calls ``run_at``; its worker side (``--worker``) measures
and has worker 1 call ``emit`` with a JSON-able result, which ``run_at`` hands to the
script's ``report``.
"""

import json
import os
import socket
import subprocess
import sys
import time


def header(name, extra=""):
    """The first line of a benchmark: machine, cores, MPI library, date."""
    from mpi4py import MPI

    print(f"{name}: {socket.gethostname()}, {os.cpu_count()} cores, "
          f"{MPI.Get_library_version().splitlines()[0].strip()}, "
          f"{time.strftime('%Y-%m-%d %H:%M')}{extra}")


def run_at(script, workers, worker_args, report):
    """``script --worker *worker_args`` under ``mpiexec -n N`` for each N in ``workers``."""
    from mpi4py import MPI

    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if not os.path.exists(mpiexec):
        mpiexec = "mpiexec"
    extra = ["--oversubscribe"] if MPI.Get_library_version().startswith("Open MPI") else []
    if any(n > (os.cpu_count() or 1) for n in workers):
        print("note: more workers than cores is oversubscribed; times include scheduling")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    for n in workers:
        cmd = [mpiexec, *extra, "-n", str(n), sys.executable, os.path.abspath(script),
               "--worker", *map(str, worker_args)]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
        lines = [l for l in out.stdout.splitlines() if l.startswith("RESULT ")]
        if out.returncode != 0 or not lines:
            sys.exit(f"benchmark at {n} workers failed:\n{out.stdout}\n{out.stderr}")
        report(json.loads(lines[-1][len("RESULT "):]))


def main(script, doc, worker, report, *, workers=(2, 4), options=(), extra=""):
    """A benchmark's command line. The launcher takes ``--workers`` and ``options``
    (``(flag, argparse keywords)`` pairs), prints the header and runs ``script`` under
    mpiexec at each worker count, forwarding ``options``; ``--worker`` runs ``worker``."""
    import argparse

    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=list(workers))
    for flag, kwargs in options:
        parser.add_argument(flag, **kwargs)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    forwarded = []
    for flag, kwargs in options:
        value = getattr(args, flag[2:].replace("-", "_"))
        if kwargs.get("action") == "store_true":
            forwarded += [flag] if value else []
        else:
            forwarded += [flag, value]
    header(os.path.splitext(os.path.basename(script))[0], extra)
    run_at(script, args.workers, forwarded, report)


def emit(result):
    """On worker 1: hand ``result`` to the launcher."""
    print("RESULT " + json.dumps(result), flush=True)


def init_gloo(comm):
    """torch.distributed over gloo on the same workers as ``comm`` (a free local port)."""
    import torch.distributed as dist

    port = None
    if comm.Get_rank() == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    port = comm.bcast(port, root=0)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=comm.Get_rank(), world_size=comm.Get_size())


def interleaved(comm, runs, rounds, calls=1):
    """Median seconds per call of each of ``runs`` (name -> function), timed between
    barriers ``calls`` calls at a time, round by round with the order rotating."""
    import statistics

    samples = {name: [] for name in runs}
    names = list(runs)
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            comm.Barrier()
            start = time.perf_counter()
            for _ in range(calls):
                runs[name]()
            comm.Barrier()
            samples[name].append((time.perf_counter() - start) / calls)
    return {name: float(statistics.median(v)) for name, v in samples.items()}
