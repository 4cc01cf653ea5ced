"""Codistributed arrays: a global array split over the workers along one axis.

    import spmdlab.darray as da
    D = da.distribute(A)            # every worker holds A; each keeps its block of rows
    E = np.sin(D) * 2 + D           # element-wise: local work, no communication
    total = np.sum(E, axis=0)       # a reduction along the split axis: collective
    A2 = E.gather()                 # the whole array on every worker (one Allgatherv)

MATLAB's names and conventions (``codistributed``, ``codistributor1d``, ``getLocalPart``,
``globalIndices``, ``gather``, ``drange``, ``distributed``, 1-based dimensions) are in
``spmdlab.matlab``; this module is the snake_case API, numpy's 0-based axes, split along
axis 0 unless told otherwise.
"""

from ._array import CodistributedArray
from ._codistributor import Codistributor, default_partition
from ._factories import (arange, distribute, drange, empty, eye, from_local, full, ones,
                         rand, randn, zeros)
from . import _analysis, _indexing, _numpy, _shaping  # noqa: F401  (the protocols)

__all__ = [
    "CodistributedArray",
    "Codistributor",
    "arange",
    "default_partition",
    "distribute",
    "drange",
    "empty",
    "eye",
    "from_local",
    "full",
    "ones",
    "rand",
    "randn",
    "zeros",
]
