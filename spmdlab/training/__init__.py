"""spmdlab.training: what MATLAB's custom-training-loop examples do by hand, done once.

Built on the core layer (the core never imports this package). This session delivers
the mini-batch split, weighted aggregation of gradients, losses and batch-norm state,
MATLAB's updates, the helpers, datastores, the mini-batch queue, the progress monitor,
and ``trainnet`` with ``training_options`` on top of all of them.
"""

from .aggregate import (aggregate_gradients, aggregate_state, aggregate_state_values,
                        population_statistics, weighted_sum)
from .helpers import (can_use_gpu, gpu_device_count, minibatch_predict, on_each_node,
                      onehotencode, scores2label, select_gpu)
from .datastores import (ArrayDatastore, AugmentedImageDatastore, Datastore,
                         ImageDatastore, count_each_label, partition, read_all,
                         split_each_label)
from .minibatch import MiniBatchQueue, worker_mini_batch_sizes
from .monitor import TrainingProgressMonitor
from .options import TrainingOptions, training_options
from .trainer import TrainingInfo, trainnet
from .updates import adam_update, dlupdate, rmsprop_update, sgdm_update

__all__ = [
    "ArrayDatastore",
    "AugmentedImageDatastore",
    "Datastore",
    "ImageDatastore",
    "MiniBatchQueue",
    "TrainingInfo",
    "TrainingOptions",
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
    "on_each_node",
    "onehotencode",
    "partition",
    "population_statistics",
    "read_all",
    "rmsprop_update",
    "scores2label",
    "select_gpu",
    "sgdm_update",
    "split_each_label",
    "training_options",
    "trainnet",
    "weighted_sum",
    "worker_mini_batch_sizes",
]
