"""Data-parallel training on handwritten digits with spmdlab's primitives only.

    mpiexec -n 4 python examples/digits_spmd.py          # four workers
    python examples/digits_spmd.py                       # one worker, same answer shape

Each worker holds a contiguous part of the training set, computes the gradient of a
softmax classifier on its share of every global mini-batch, and the shares are combined
with a weighted ``spmd_plus`` (weights = local batch / global batch), exactly as
MATLAB's custom-training-loop examples do, so every step applies the gradient of the
whole global mini-batch, however it is split. Worker 1 shows the progress (a live view
in the terminal, a plot, and with ``--monitor web`` a browser page whose Stop button,
like Ctrl-C, stops every worker after the same step). Embedded data: scikit-learn's
8x8 handwritten digits, split 90/10 per label.
"""

import argparse
import operator
import time

import numpy as np

from spmdlab import (spmd_broadcast, spmd_cat, spmd_index, spmd_plus, spmd_reduce,
                     spmd_size)
from spmdlab.training import TrainingProgressMonitor

from reporting import accuracy_line, add_monitor_arguments, monitor_options


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=30, help="passes over the data (30)")
    parser.add_argument("--mini-batch-size", type=int, default=128,
                        help="global mini-batch, split over the workers (128)")
    parser.add_argument("--learn-rate", type=float, default=0.5, help="SGD step (0.5)")
    parser.add_argument("--momentum", type=float, default=0.9, help="SGD momentum (0.9)")
    add_monitor_arguments(parser)
    parser.add_argument("--short", action="store_true", help="3 epochs, for CI")
    return parser.parse_args()


def load_digits_split(seed=0):
    """Digits as (features in [0, 1], labels), split 90/10 within every label."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = digits.data.astype(np.float32) / 16.0
    y = digits.target.astype(np.int64)
    rng = np.random.default_rng(seed)
    train, test = [], []
    for label in range(10):
        idx = rng.permutation(np.flatnonzero(y == label))
        cut = int(round(0.9 * len(idx)))
        train.extend(idx[:cut])
        test.extend(idx[cut:])
    train = rng.permutation(train)
    return (x[train], y[train]), (x[test], y[test])


def part(n_items, workers, index):
    """Contiguous part ``index`` (1-based) of ``n_items``; remainder to the first parts."""
    base, extra = divmod(n_items, workers)
    start = (index - 1) * base + min(index - 1, extra)
    return slice(start, start + base + (index <= extra))


def loss_and_gradients(params, x, y):
    """Mean cross-entropy of a softmax classifier and its gradients on (x, y)."""
    logits = x @ params["W"] + params["b"]
    logits -= logits.max(axis=1, keepdims=True)
    prob = np.exp(logits)
    prob /= prob.sum(axis=1, keepdims=True)
    n = max(len(y), 1)
    loss = -np.log(prob[np.arange(len(y)), y] + 1e-12).sum() / n
    prob[np.arange(len(y)), y] -= 1.0
    return loss, {"W": x.T @ prob / n, "b": prob.sum(axis=0) / n}


def main():
    args = parse_args()
    epochs = 3 if args.short else args.epochs
    k, n = spmd_index(), spmd_size()
    (x_train, y_train), (x_test, y_test) = load_digits_split()
    mine = part(len(y_train), n, k)
    x_local, y_local = x_train[mine], y_train[mine]

    # Worker 1 initializes; everyone starts from its weights (MATLAB: spmdBroadcast).
    init = None
    if k == 1:
        rng = np.random.default_rng(1)
        init = {"W": rng.normal(0, 0.01, (64, 10)).astype(np.float32),
                "b": np.zeros(10, np.float32)}
    params = spmd_broadcast(1, init)
    velocity = {name: np.zeros_like(p) for name, p in params.items()}
    sizes = spmd_cat(len(y_local))
    if k == 1:
        print(f"{n} worker(s); training examples per worker: {sizes.tolist()}")

    global_batch = args.mini_batch_size
    local_batch = global_batch // n + (k <= global_batch % n)
    steps_per_epoch = int(np.ceil(len(y_local) / local_batch))
    # Worker 1 shows the progress; every other worker's monitor does nothing.
    monitor = TrainingProgressMonitor(metrics=["loss"], info=["epoch", "seconds"],
                                      xlabel="Epoch", **monitor_options(args))
    start = time.perf_counter()
    stopped = False
    for epoch in range(1, epochs + 1):
        order = np.random.default_rng(epoch * 1000 + k).permutation(len(y_local))
        step = 0
        total_loss = 0.0
        # Every worker keeps going while all of them have data (MATLAB: spmdReduce(@and, ...)).
        while spmd_reduce(operator.and_, step < steps_per_epoch):
            batch = order[step * local_batch:(step + 1) * local_batch]
            loss, grads = loss_and_gradients(params, x_local[batch], y_local[batch])
            # Weighted aggregation: exact for uneven shares of the global mini-batch.
            weight = len(batch) / spmd_plus(len(batch))
            grads = spmd_plus({name: g * weight for name, g in grads.items()})
            # the weighted loss, and worker 1's stop request (Ctrl-C, Stop), in one sum
            loss_part, stop = spmd_plus(np.array([loss * weight, float(monitor.stop)]))
            total_loss += loss_part
            for name in params:
                velocity[name] = args.momentum * velocity[name] - args.learn_rate * grads[name]
                params[name] = params[name] + velocity[name]
            step += 1
            if stop:
                stopped = True
                break
        monitor.update_info(epoch=f"{epoch} of {epochs}",
                            seconds=f"{time.perf_counter() - start:.1f}")
        monitor.progress = 100.0 * epoch / epochs
        monitor.record_metrics(epoch, loss=total_loss / step)
        if stopped:
            break
    monitor.status = f"stopped in epoch {epoch}" if stopped else "done"
    monitor.close()

    # Test accuracy: each worker scores its part of the test set; counts are summed.
    mine = part(len(y_test), n, k)
    logits = x_test[mine] @ params["W"] + params["b"]
    correct = spmd_plus(int((logits.argmax(axis=1) == y_test[mine]).sum()))
    if k == 1:
        print(accuracy_line(correct, len(y_test)))


if __name__ == "__main__":
    main()
