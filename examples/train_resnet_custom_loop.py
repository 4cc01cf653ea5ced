"""Train a residual network in parallel with a custom loop and a Stop button (port of
MATLAB's current-API example).

    mpiexec -n 4 python examples/train_resnet_custom_loop.py
    mpiexec -n 4 python examples/train_resnet_custom_loop.py --data flowers/   # your images
    python examples/train_resnet_custom_loop.py                               # one worker

Images come from a folder with one sub-folder per class (default: the embedded digits,
written once as PNG files to ~/.cache/spmdlab/digits), resized by an augmented image
datastore, split 90/10 per label. Each worker reads its partition through a
MiniBatchQueue; every iteration the gradients of the whole network move in one flat
collective and the batch-norm statistics are pooled. Worker 1 (MATLAB's client) shows a
progress monitor fed by a DataQueue; pressing Ctrl-C (or the Stop button of
``--monitor web``, or creating the stop file, ``--stop-file`` / ``SPMDLAB_STOP_FILE``) sends a flag to worker 1's per-worker queue, and
``continue_epoch`` (a ``spmd_cat`` of every worker's has-data and stop flags) brings every
worker to a stop at the same iteration; the model so far is then evaluated.
"""

import argparse

import numpy as np

from requires import require
require("torch", "sklearn")  # else: stop at once, naming the install command
import torch

from spmdlab import DataQueue, PollableDataQueue, spmd_cat, spmd_index, spmd_plus, spmd_size
from spmdlab.training import (AugmentedImageDatastore, ImageDatastore, MiniBatchQueue,
                              TrainingProgressMonitor, aggregate_gradients, aggregate_state,
                              on_each_node, partition, population_statistics, sgdm_update,
                              split_each_label, weighted_sum, worker_mini_batch_sizes)

from digits_data import digits_folder, report_accuracy
from reporting import add_monitor_arguments, monitor_options


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="folder of images, one sub-folder per class "
                        "(default: the embedded digits)")
    parser.add_argument("--image-size", type=int, default=32, help="input size (32)")
    parser.add_argument("--epochs", type=int, default=12, help="number of epochs (12)")
    parser.add_argument("--mini-batch-size", type=int, default=128, help="global (128)")
    parser.add_argument("--learn-rate", type=float, default=0.05, help="SGDM (0.05)")
    parser.add_argument("--stop-file", help="stop when this file exists")
    add_monitor_arguments(parser)
    parser.add_argument("--short", action="store_true", help="3 epochs, for CI")
    return parser.parse_args()


class Residual(torch.nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        nn = torch.nn
        self.body = nn.Sequential(
            nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
            nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout))
        self.skip = (nn.Identity() if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)))

    def forward(self, x):
        return torch.relu(self.body(x) + self.skip(x))


def resnet(channels, num_classes):
    """A small residual network (MATLAB: resnetNetwork): stem, 3 residual stages, pool, FC."""
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(channels, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
        Residual(16, 16, 1), Residual(16, 32, 2), Residual(32, 64, 2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, num_classes))


def main():
    args = parse_args()
    epochs = 3 if args.short else args.epochs
    torch.set_num_threads(1)
    torch.manual_seed(0)
    n, k = spmd_size(), spmd_index()
    folder = args.data
    if folder is None:  # one worker per node writes the cache: nodes need not share a disk
        folder = on_each_node(digits_folder)
    images = ImageDatastore(folder)
    classes = images.class_names
    train_files, test_files = split_each_label(images, 0.9, randomize=True, seed=0)
    size = (args.image_size, args.image_size)
    train = AugmentedImageDatastore(size, train_files, seed=k)
    test = AugmentedImageDatastore(size, test_files)
    channels = np.atleast_3d(train[0][0]).shape[-1]
    index = {name: i for i, name in enumerate(classes)}

    def preprocess(xs, ys):  # MATLAB: MiniBatchFcn, MiniBatchFormat="SSCB"
        x = torch.from_numpy(np.stack([np.atleast_3d(v) for v in xs])).float().div_(255)
        return x.permute(0, 3, 1, 2).contiguous(), torch.tensor([index[y] for y in ys])

    sizes = worker_mini_batch_sizes(args.mini_batch_size, n)
    mbq = MiniBatchQueue(partition(train, n, k), sizes[k - 1], mini_batch_fcn=preprocess,
                         dispatch_in_background=True)
    model = resnet(channels, len(classes))

    monitor = TrainingProgressMonitor(metrics=["loss", "accuracy"],
                                      info=["epoch", "workers"], xlabel="Iteration",
                                      stop_file=args.stop_file, **monitor_options(args))
    stop_queues = PollableDataQueue.per_worker()   # MATLAB: DataQueue made inside spmd
    data_queue = DataQueue()
    iterations = epochs * int(np.ceil(len(train) / args.mini_batch_size))

    def display(item):  # worker 1, for every report sent to data_queue
        epoch, iteration, loss, accuracy = item
        monitor.update_info(epoch=f"{epoch} of {epochs}", workers=n)
        monitor.progress = min(100.0, 100.0 * iteration / iterations)
        monitor.record_metrics(iteration, loss=loss, accuracy=accuracy)
        if monitor.stop:
            stop_queues[1].send(True)

    data_queue.after_each(display)

    def continue_epoch():
        info = {"has_data": mbq.has_data(),
                "stop_requested": stop_queues.mine.queue_length > 0}
        info = spmd_cat(info)   # MATLAB: spmdCat of a struct, one entry per worker
        return not any(i["stop_requested"] for i in info) and all(i["has_data"] for i in info)

    velocity = None
    iteration = 0
    stopped = False
    for epoch in range(1, epochs + 1):
        mbq.shuffle(seed=1000 * epoch + k)  # MATLAB's shuffle(mbq): its generator starts
        # from one seed in every session, so runs repeat; a worker's own order
        while continue_epoch():
            iteration += 1
            x, y = mbq.next()
            scores = model(x)
            loss = torch.nn.functional.cross_entropy(scores, y)
            model.zero_grad()
            loss.backward()
            weight = len(y) / spmd_plus(len(y))
            aggregate_gradients(model, weight)       # one flat collective for all gradients
            aggregate_state(model, weight)           # batch-norm statistics
            model, velocity = sgdm_update(model, velocity=velocity,
                                          learn_rate=args.learn_rate)
            loss, accuracy = weighted_sum(
                [loss.item(), 100.0 * float((scores.argmax(1) == y).float().mean())],
                weight)  # accuracy in percent, as MATLAB's monitors show it
            if k == 1:
                data_queue.send((epoch, iteration, loss, accuracy))
                if monitor.stop:  # Ctrl-C, the Stop button or the stop file (worker 1)
                    stop_queues[1].send(True)
        # the epoch ended: out of data, or asked to stop (every worker decides the same)
        if spmd_plus(stop_queues.mine.queue_length) > 0:
            stopped = True
            break
    data_queue.flush(timeout=10)
    stops = spmd_cat(iteration)
    monitor.status = (f"stopped at iteration {iteration}" if stopped else "done")
    monitor.close()
    if k == 1 and stopped:
        same = "every worker" if (stops == stops[0]).all() else f"workers at {stops}"
        print(f"stopped at epoch {epoch}, iteration {iteration}, on {same}")

    # Batch-norm statistics of the finished network (MATLAB trainnet's "population"
    # statistics): the running ones (momentum 0.1) still lag a network that changed fast
    # over a few dozen iterations, and a plain PyTorch loop of this network lags alike
    # (docs/guide/getting-started.md, Examples). One pass over every worker's part of the
    # training data fixes that.
    population_statistics(model, MiniBatchQueue(partition(train, n, k), 128,
                                                mini_batch_fcn=preprocess))

    # Test accuracy: every worker scores its part of the test set; counts are summed.
    report_accuracy(model, test, preprocess)

if __name__ == "__main__":
    main()
