"""Train a network in parallel with a custom training loop (port of MATLAB's example).

    mpiexec -n 4 python examples/train_digits_custom_loop.py
    python examples/train_digits_custom_loop.py            # one worker, same script

Every worker trains on its part of each global mini-batch: the datastore is partitioned
over the workers, a mini-batch of 128 is split 32/32/32/32 (remainder to the first
workers), the loss, the gradients and the batch-norm state are combined with weights
local/global batch, and every worker applies the same SGDM step. Worker 1 (MATLAB's
client) shows progress from a DataQueue (each epoch's mean loss) and can stop the
training (Ctrl-C, the stop file, or the Stop button of ``--monitor web``): the request
reaches every worker through worker 1's per-worker queue. Data:
scikit-learn's digits upscaled to 28x28, split 90/10 per label.
"""

import argparse
import operator

import numpy as np

from requires import require
require("torch", "sklearn")  # else: stop at once, naming the install command
import torch

from spmdlab import (DataQueue, PollableDataQueue, spmd_index, spmd_plus, spmd_reduce,
                     spmd_size)
from spmdlab.training import (ArrayDatastore, MiniBatchQueue, TrainingProgressMonitor,
                              aggregate_gradients, aggregate_state, partition, sgdm_update,
                              weighted_sum, worker_mini_batch_sizes)

from digits_data import digits_28x28, report_accuracy, split_per_label
from reporting import add_monitor_arguments, monitor_options


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=20, help="number of epochs (20)")
    parser.add_argument("--mini-batch-size", type=int, default=128,
                        help="global mini-batch size, split over the workers (128)")
    parser.add_argument("--learn-rate", type=float, default=0.01, help="SGDM (0.01)")
    add_monitor_arguments(parser)
    parser.add_argument("--short", action="store_true", help="2 epochs, for CI")
    return parser.parse_args()


def network(num_classes=10):
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(1, 20, 5), nn.BatchNorm2d(20), nn.ReLU(),              # 28 -> 24
        nn.Conv2d(20, 20, 3, padding=1), nn.BatchNorm2d(20), nn.ReLU(),
        nn.Conv2d(20, 20, 3, padding=1), nn.BatchNorm2d(20), nn.ReLU(),
        nn.Flatten(), nn.Linear(20 * 24 * 24, num_classes))


def preprocess(images, labels):
    """Mini-batch function: images to float tensors in [0, 1] (N, 1, 28, 28)."""
    x = torch.from_numpy(np.stack(images)).float().div_(255).unsqueeze(1)
    return x, torch.as_tensor(np.asarray(labels))


def main():
    args = parse_args()
    epochs = 2 if args.short else args.epochs
    torch.set_num_threads(1)
    torch.manual_seed(0)  # every worker starts from the same network
    n, k = spmd_size(), spmd_index()
    images, labels = digits_28x28()
    train_idx, test_idx = split_per_label(labels)
    train = ArrayDatastore(images[train_idx], labels[train_idx])
    test = ArrayDatastore(images[test_idx], labels[test_idx])

    # MATLAB: workerMiniBatchSize = floor(B/N) + remainder to the first workers
    sizes = worker_mini_batch_sizes(args.mini_batch_size, n)
    mbq = MiniBatchQueue(partition(train, n, k), sizes[k - 1], mini_batch_fcn=preprocess)
    model = network()

    # Progress to the client through a DataQueue; Stop back through per-worker queues.
    monitor = TrainingProgressMonitor(metrics=["loss"], info=["epoch"], xlabel="Epoch",
                                      **monitor_options(args))
    progress = DataQueue()
    stop = PollableDataQueue.per_worker()

    def display(item):  # runs on worker 1 for every item sent to the DataQueue
        epoch, loss = item
        monitor.update_info(epoch=f"{epoch}/{epochs}")
        monitor.progress = 100 * epoch / epochs
        monitor.record_metrics(epoch, loss=loss)
        if monitor.stop:
            stop[1].send(True)

    progress.after_each(display)
    velocity = None
    stopped = False
    for epoch in range(1, epochs + 1):
        mbq.shuffle(seed=1000 * epoch + k)  # MATLAB's shuffle(mbq): its generator starts
        # from one seed in every session, so runs repeat; a worker's own order
        total, iterations = 0.0, 0  # the epoch's loss: the mean over its mini-batches
        # MATLAB: while spmdReduce(@and, hasdata(mbq))
        while spmd_reduce(operator.and_, mbq.has_data()):
            x, y = mbq.next()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            model.zero_grad()
            loss.backward()
            weight = sizes[k - 1] / args.mini_batch_size  # workerNormalizationFactor
            total += weighted_sum(loss.item(), weight)      # gplus(factor * loss)
            iterations += 1
            aggregate_state(model, weight)                   # batch-norm mean and variance
            aggregate_gradients(model, weight)               # gplus(factor * gradients)
            model, velocity = sgdm_update(model, velocity=velocity,
                                          learn_rate=args.learn_rate)
            if monitor.stop:  # worker 1 saw Ctrl-C or the stop file: tell the others
                stop[1].send(True)
            if spmd_plus(stop.mine.queue_length) > 0:
                stopped = True
                break
        if k == 1 and iterations:
            progress.send((epoch, total / iterations))
        if stopped:
            break
    progress.flush(timeout=10)  # the last report is shown before the summary
    monitor.status = "stopped" if stopped else "done"
    monitor.close()

    # Test accuracy: every worker scores its part of the test set; counts are summed.
    report_accuracy(model, test, preprocess)

if __name__ == "__main__":
    main()
