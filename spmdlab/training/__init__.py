"""spmdlab.training: what MATLAB's custom-training-loop examples do by hand, done once.

Built on the core layer (the core never imports this package). This session delivers
the mini-batch split, weighted aggregation of gradients, losses and batch-norm state, and
MATLAB's updates; datastores, the mini-batch queue and the helpers follow.
"""

from .aggregate import (aggregate_gradients, aggregate_state, aggregate_state_values,
                        weighted_sum)
from .minibatch import worker_mini_batch_sizes
from .updates import adam_update, dlupdate, sgdm_update

__all__ = [
    "adam_update",
    "aggregate_gradients",
    "aggregate_state",
    "aggregate_state_values",
    "dlupdate",
    "sgdm_update",
    "weighted_sum",
    "worker_mini_batch_sizes",
]
