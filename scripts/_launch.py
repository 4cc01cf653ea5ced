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


def layout(spec):
    """A ``--workers`` entry: ``N`` (N workers on this node) or ``CxP`` (C simulated nodes
    of P workers: MPICH's MPIR_CVAR_NUM_CLIQUES, workers dealt to the nodes in turn).
    Returns ``(workers, nodes)``."""
    text = str(spec)
    if "x" in text:
        nodes, per = (int(v) for v in text.split("x"))
        return nodes * per, nodes
    return int(text), 1


def layout_name():
    """On a worker: '1x4', '2x2', ... for the layout this job runs in."""
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    node = world.Split_type(MPI.COMM_TYPE_SHARED)
    per = node.Get_size()
    node.Free()
    return f"{world.Get_size() // per}x{per}"


def run_at(script, workers, worker_args, report, env=None, timed=True):
    """``script --worker *worker_args`` under ``mpiexec`` for each entry of ``workers``
    (see ``layout``), with ``env``'s variables added to the environment; ``timed``: say
    that times taken with more workers than cores include scheduling."""
    from mpi4py import MPI

    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if not os.path.exists(mpiexec):
        mpiexec = "mpiexec"
    extra = ["--oversubscribe"] if MPI.Get_library_version().startswith("Open MPI") else []
    layouts = [layout(w) for w in workers]
    if timed and any(n > (os.cpu_count() or 1) for n, _ in layouts):
        print("note: more workers than cores is oversubscribed; times include scheduling")
    if any(nodes > 1 for _, nodes in layouts):
        print("note: CxP layouts are nodes simulated on this machine (MPICH's "
              "MPIR_CVAR_NUM_CLIQUES): traffic between them leaves shared memory")
    for n, nodes in layouts:
        if nodes > 1 and extra:
            sys.exit("simulated nodes (CxP) need MPICH's mpiexec")
        env_n = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1",
                     OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", **(env or {}))
        if nodes > 1:
            env_n["MPIR_CVAR_NUM_CLIQUES"] = str(nodes)
        cmd = [mpiexec, *extra, "-n", str(n), sys.executable, os.path.abspath(script),
               "--worker", *map(str, worker_args)]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env_n)
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
    parser.add_argument("--workers", nargs="+", default=list(workers),
                        help="worker counts, or CxP for C simulated nodes of P workers")
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
