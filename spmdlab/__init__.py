"""spmdlab: MATLAB's spmd programming model for Python, over MPI.

Run ``mpiexec -n 4 python script.py``: every process runs the whole script as one worker
(worker k is MPI rank k-1) and gets MATLAB's primitives. Run as plain ``python
script.py`` it is one worker and every collective returns its input.
"""

from typing import Any

from .collectives import (spmd_barrier, spmd_broadcast, spmd_cat, spmd_index, spmd_plus,
                          spmd_reduce, spmd_size)
from .composite import Composite
from .darray import CodistributedArray, Codistributor, distribute, drange, from_local
from .errors import (SpmdDeadlockError, SpmdError, SpmdIndexError, SpmdMismatchError,
                     SpmdPeerError, SpmdTimeoutError, SpmdTypeError, SpmdValueError)
from .p2p import spmd_probe, spmd_receive, spmd_send, spmd_send_receive
from .parfor import parfor
from .profiler import Profile, profile
from .queues import DataQueue, PollableDataQueue, QueueSet
from .region import spmd

__version__ = "0.1.0"

_POOL_NAMES = ("Pool", "current_pool", "start_pool")  # the client's: imported on first use

__all__ = [
    "CodistributedArray",
    "Codistributor",
    "Composite",
    "DataQueue",
    "PollableDataQueue",
    "Pool",
    "Profile",
    "QueueSet",
    "SpmdDeadlockError",
    "SpmdError",
    "SpmdIndexError",
    "SpmdMismatchError",
    "SpmdPeerError",
    "SpmdTimeoutError",
    "SpmdTypeError",
    "SpmdValueError",
    "current_pool",
    "distribute",
    "drange",
    "from_local",
    "parfor",
    "profile",
    "spmd",
    "spmd_barrier",
    "spmd_broadcast",
    "spmd_cat",
    "spmd_index",
    "spmd_plus",
    "spmd_probe",
    "spmd_receive",
    "spmd_reduce",
    "spmd_send",
    "spmd_send_receive",
    "spmd_size",
    "start_pool",
]


def __getattr__(name: str) -> Any:
    if name in _POOL_NAMES:
        from .pool import _client

        return getattr(_client, name)
    raise AttributeError(f"module 'spmdlab' has no attribute {name!r}")


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext spmdlab``: the ``%%spmd`` cell magic (runs a cell on the pool)."""
    from .pool import _magics

    _magics.load(ipython)
