"""MATLAB's interactive pool: workers started from a Python prompt, a script or a
notebook (the client, which never starts MPI), spmd blocks sent to them, results read
back as Composites, the client's DataQueues fed by the workers.

``_client`` is the client's side and ``_worker`` the workers' (neither imports the
other: each uses ``_wire``, the framed and authenticated connection, and ``_shared``,
what travels by reference between them); ``_launchers`` makes the command lines,
``_cells`` reads what a cell reads and assigns, ``_magics`` is the ``%%spmd`` magic.
The client's names are imported on first use, so a worker never loads them.
"""

from typing import Any

__all__ = ["Pool", "Composite", "Distributed", "start_pool", "current_pool", "parpool",
           "gcp"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import _client

        return getattr(_client, name)
    raise AttributeError(f"module 'spmdlab.pool' has no attribute {name!r}")
