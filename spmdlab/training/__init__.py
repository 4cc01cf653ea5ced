"""spmdlab.training: what MATLAB's custom-training-loop examples do by hand, done once.

Built on the core layer (the core never imports this package). This session delivers
the mini-batch split, weighted aggregation of gradients, losses and batch-norm state,
MATLAB's updates, the helpers, datastores and the mini-batch queue.
"""

from .aggregate import (aggregate_gradients, aggregate_state, aggregate_state_values,
                        weighted_sum)
from .helpers import (can_use_gpu, gpu_device_count, minibatch_predict, onehotencode,
                      scores2label, select_gpu)
from .datastores import (ArrayDatastore, AugmentedImageDatastore, Datastore,
                         ImageDatastore, count_each_label, partition, read_all,
                         split_each_label)
from .minibatch import MiniBatchQueue, worker_mini_batch_sizes
from .monitor import TrainingProgressMonitor
from .updates import adam_update, dlupdate, sgdm_update

__all__ = [
    "ArrayDatastore",
    "AugmentedImageDatastore",
    "Datastore",
    "ImageDatastore",
    "MiniBatchQueue",
    "TrainingProgressMonitor",
    "adam_update",
    "aggregate_gradients",
    "aggregate_state",
    "aggregate_state_values",
    "can_use_gpu",
    "count_each_label",
    "dlupdate",
    "gpu_device_count",
    "minibatch_predict",
    "onehotencode",
    "partition",
    "read_all",
    "scores2label",
    "select_gpu",
    "sgdm_update",
    "split_each_label",
    "weighted_sum",
    "worker_mini_batch_sizes",
]
