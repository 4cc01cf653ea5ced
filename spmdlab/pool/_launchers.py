"""How a pool's workers are started: the command line for MPICH's or Open MPI's
``mpiexec``, or Slurm's ``srun``, found in the environment or chosen by name.

The pool's address and secret travel in the workers' environment (never on a command
line, where ``ps`` would show the secret): MPICH's launcher and ``srun`` pass the whole
environment on; Open MPI's passes the variables named with ``-x``.
"""

import os
import shutil
import subprocess
import sys

from . import _wire

KINDS = ("auto", "mpich", "openmpi", "srun")


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


def spans_hosts(kind):
    """Whether the workers may run on other hosts than the client's (then the client
    listens on every interface, not only on loopback)."""
    if kind == "srun":
        return int(os.environ.get("SLURM_JOB_NUM_NODES", os.environ.get("SLURM_NNODES",
                                                                          "1")) or 1) > 1
    return False


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
    if kind == "srun":
        return [path, "-n", str(n), "--kill-on-bad-exit=1", *args, *worker]
    if kind == "openmpi":
        cmd = [path, "--oversubscribe", "-n", str(n)]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
        for name in (_wire.ADDRESS_VARIABLE, _wire.SECRET_VARIABLE, "PYTHONPATH",
                     "SPMDLAB_POOL_WORKER"):
            cmd += ["-x", name]
        return cmd + list(args) + worker
    return [path, "-n", str(n), *args, *worker]
