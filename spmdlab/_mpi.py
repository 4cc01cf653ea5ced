"""mpi4py's MPI module, imported on first use: importing spmdlab never starts MPI.

A process started by an MPI launcher (mpiexec, srun) is a worker: spmdlab starts MPI
when it is imported there, as ``from mpi4py import MPI`` would. Anywhere else (a plain
``python`` script, a prompt, a notebook) MPI starts at the first call that needs it, so
a client that only drives a pool of workers (``spmdlab.start_pool``) never starts MPI at
all, and a program that imports mpi4py after spmdlab gets MPI started as it expects.

Modules write ``from ._mpi import MPI`` and use ``MPI`` as they would mpi4py's; the first
attribute looked up imports mpi4py.MPI and puts the real module in their place.
"""

import importlib
import os
import sys

# Variables that MPI launchers set in the processes they start (MPICH's hydra and PMI,
# PMIx as Open MPI 5 and Slurm use it, Open MPI's own, Slurm's srun).
_LAUNCHED = ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_FD",
             "MPI_LOCALNRANKS", "SLURM_STEP_ID")


# salloc's shell on a compute node (LaunchParameters=use_interactive_step) is a Slurm step
# of this id (SLURM_INTERACTIVE_STEP): a prompt, not an MPI launch, where a pool's client
# runs
_SLURM_INTERACTIVE_STEP = "4294967290"


def launched():
    """Whether this process was started by an MPI launcher (it is then a worker)."""
    return any(name in os.environ for name in _LAUNCHED
               if not (name == "SLURM_STEP_ID" and
                       os.environ.get(name) == _SLURM_INTERACTIVE_STEP))


_module = None


def module():
    """The real ``mpi4py.MPI`` (importing it starts MPI); spmdlab's modules get it in
    place of the stand-in they hold."""
    global _module, MPI
    if _module is None:
        _module = importlib.import_module("mpi4py.MPI")
        for name, mod in list(sys.modules.items()):
            if name.split(".")[0] == "spmdlab" and getattr(mod, "MPI", None) is _STAND_IN:
                mod.MPI = _module
        MPI = _module  # modules imported from now on get the real one
    return _module


def loaded():
    """Whether MPI is started in this process (by spmdlab or by the program)."""
    return _module is not None or "mpi4py.MPI" in sys.modules


class _StandIn:
    """``MPI`` until MPI is needed: any attribute imports it."""

    def __getattr__(self, name):
        return getattr(module(), name)

    def __repr__(self):
        return "<mpi4py.MPI, not started yet>"


_STAND_IN = MPI = _StandIn()

if launched() or "mpi4py.MPI" in sys.modules:  # a worker: as before, MPI starts now
    module()
