"""A user's typed script: mypy must accept the correct lines and flag each line marked
``# mypy: <error code>`` (tests/test_typing.py runs mypy on this file; it is never run).
"""

import operator
from typing import List

import numpy as np
import torch

import spmdlab.matlab as matlab
from spmdlab import (Composite, DataQueue, PollableDataQueue, parfor, spmd, spmd_cat,
                     spmd_index, spmd_plus, spmd_receive, spmd_reduce, spmd_size)
from spmdlab.training import (ArrayDatastore, MiniBatchQueue, TrainingProgressMonitor,
                              partition, sgdm_update, training_options, trainnet,
                              worker_mini_batch_sizes)

# -- correct code: no error expected --------------------------------------------------

n: int = spmd_size()
k: int = spmd_index()
total: np.ndarray = spmd_plus(np.ones(3))
on_one = spmd_plus(1.0, destination=1)  # Optional[float]: None off worker 1
if on_one is not None:
    print(on_one + 1.0)
ok: bool = spmd_reduce(operator.and_, True)
row = spmd_cat(np.arange(3), axis=0)
value, source, tag = spmd_receive(status=True) if n > 1 else (None, 1, 0)
worker: int = source + 1
sizes: List[int] = worker_mini_batch_sizes(128, n)
squares: List[int] = parfor(lambda s: s * s, [1, 2, 3])
c = Composite(k ** 2)
third = c[3]
present: bool = c.exist(1)
everyone: List[bool] = c.exist()
stops = PollableDataQueue.per_worker()
stop_requested: bool = stops.mine.queue_length > 0
stops[1].send(True)
queue = DataQueue()
queue.after_each(print)
for _ in spmd(2):
    pass
ds = ArrayDatastore(np.zeros((10, 2)), np.arange(10))
mine = partition(ds, n, k)
mbq = MiniBatchQueue(mine, sizes[k - 1], output_environment="cpu")
options = training_options("sgdm", max_epochs=2)
net = torch.nn.Linear(2, 2)
trained, info = trainnet(ds, net, "crossentropy", options)
monitor = TrainingProgressMonitor(metrics=["loss"], web=True)
params, velocity = sgdm_update(net)
matlab_sum = matlab.gplus(np.int32(3), 1.0)  # MATLAB's worker numbers are doubles

# -- mistakes mypy must flag -----------------------------------------------------------

sizes = worker_mini_batch_sizes(128, "4")  # mypy: arg-type
spmd_plus(np.ones(3), destination="2")  # mypy: call-overload
spmd_cat(np.ones(3), dim=2)  # mypy: call-arg
spmd_cat(np.ones(3), axis=1.5)  # mypy: arg-type
MiniBatchQueue(mine, 64, output_environment="tpu")  # mypy: arg-type
name: str = spmd_size()  # mypy: assignment
source.upper()  # mypy: attr-defined
words: List[str] = parfor(lambda s: s * s, [1, 2, 3])  # mypy: arg-type, return-value
trainnet(ds, net, "crossentropy", "sgdm")  # mypy: arg-type
c.exist(1) + "x"  # mypy: operator
total.upper()  # mypy: attr-defined
TrainingProgressMonitor(metrics=["loss"], web="yes")  # mypy: arg-type
spmd("2")  # mypy: call-overload
spmd(1, 2, 3)  # mypy: call-overload
