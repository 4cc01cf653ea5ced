"""Train several networks at once, one setting per worker (port of MATLAB's parfor loop).

    mpiexec -n 4 python examples/train_multiple_networks.py
    python examples/train_multiple_networks.py             # one worker trains them all

A small sweep (learning rate x hidden width) of independent trainings, spread over the
workers with ``spmdlab.parfor`` (MATLAB: ``parfor i = 1:numSettings``); every training
runs serially on its worker. As in MATLAB's example, each training sends its progress
(epoch, mean loss) through a DataQueue to worker 1, whose monitor draws one curve per
setting; Ctrl-C or the Stop button of ``--monitor web`` ends every training after its
current epoch (worker 1 relays the request to every worker's queue). The test accuracy
of every setting is gathered on worker 1, which prints them and the best. Data: scikit-learn's digits upscaled to 28x28, split
90/10 per label.
"""

import argparse
import itertools
import time

import numpy as np

from requires import require
require("torch", "sklearn")  # else: stop at once, naming the install command
import torch

from spmdlab import DataQueue, PollableDataQueue, parfor, spmd_index, spmd_size
from spmdlab.training import TrainingProgressMonitor, minibatch_predict, scores2label

from digits_data import digits_28x28, split_per_label
from reporting import accuracy_line, add_monitor_arguments, monitor_options


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--learn-rates", type=float, nargs="+", default=[0.003, 0.03],
                        help="SGDM learning rates to try (0.003 0.03)")
    parser.add_argument("--widths", type=int, nargs="+", default=[32, 128],
                        help="hidden-layer widths to try (32 128)")
    parser.add_argument("--epochs", type=int, default=15, help="epochs per training (15)")
    add_monitor_arguments(parser)
    parser.add_argument("--short", action="store_true", help="2 epochs, for CI")
    return parser.parse_args()


def train_one(number, setting, data, epochs, progress, should_stop):
    """One complete training on this worker (or until ``should_stop()``); sends
    ``(number, epoch, mean loss)`` to ``progress`` after every epoch; returns the
    setting's test accuracy."""
    learn_rate, width = setting
    (x_train, y_train), (x_test, y_test) = data
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, width),
                                torch.nn.BatchNorm1d(width), torch.nn.ReLU(),
                                torch.nn.Linear(width, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=learn_rate, momentum=0.9)
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    done = 0
    for epoch in range(1, epochs + 1):
        if should_stop():
            break
        order = torch.from_numpy(rng.permutation(len(y_train)))
        losses = []
        for batch in order.split(128):
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x_train[batch]), y_train[batch])
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        progress.send((number, epoch, float(np.mean(losses))))  # MATLAB: send(D, ...)
        done = epoch
    predicted = scores2label(minibatch_predict(model, x_test))
    correct = int((predicted == y_test.numpy()).sum())
    return {"learn_rate": learn_rate, "width": width, "correct": correct,
            "total": len(y_test), "epochs": done,
            "seconds": time.perf_counter() - start, "worker": spmd_index()}


def main():
    args = parse_args()
    epochs = 2 if args.short else args.epochs
    torch.set_num_threads(1)
    images, labels = digits_28x28()
    train_idx, test_idx = split_per_label(labels)
    as_tensor = lambda idx: (torch.from_numpy(images[idx]).float().div_(255),  # noqa: E731
                             torch.from_numpy(labels[idx]))
    data = (as_tensor(train_idx), as_tensor(test_idx))
    settings = list(itertools.product(args.learn_rates, args.widths))

    # Worker 1 draws every training's loss: one curve (metric) per setting.
    names = [f"loss_{i}" for i in range(1, len(settings) + 1)]
    monitor = TrainingProgressMonitor(metrics=names, info=["finished"], xlabel="Epoch",
                                      **monitor_options(args))
    progress = DataQueue()                 # every training reports to worker 1
    stop = PollableDataQueue.per_worker()  # worker 1 tells every worker to stop
    reports, relayed = [0], [False]

    def display(item):  # worker 1, for every report, while the trainings run
        number, epoch, loss = item
        reports[0] += 1
        monitor.update_info(finished=f"{reports[0]} of {len(settings) * epochs} epochs")
        monitor.progress = min(100.0, 100.0 * reports[0] / (len(settings) * epochs))
        monitor.record_metrics(epoch, **{names[number - 1]: loss})
        if monitor.stop and not relayed[0]:
            relayed[0] = True
            for queue in stop:
                queue.send(True)

    progress.after_each(display)

    def should_stop():
        return stop.mine.queue_length > 0 or monitor.stop  # monitor.stop: worker 1 only

    results = parfor(lambda i: train_one(i + 1, settings[i], data, epochs, progress,
                                         should_stop), range(len(settings)), destination=1)
    progress.flush(timeout=10)
    stopped = spmd_index() == 1 and monitor.stop
    monitor.status = "stopped" if stopped else "done"
    monitor.close()
    if spmd_index() == 1:
        print(f"{len(settings)} trainings on {spmd_size()} worker(s)"
              + (", stopped early:" if stopped else ":"))
        for number, r in enumerate(results, 1):
            print(f"  loss_{number}: learn rate {r['learn_rate']:<6g} width "
                  f"{r['width']:<4d} {r['epochs']} epochs, accuracy "
                  f"{100.0 * r['correct'] / r['total']:6.2f}%  ({r['seconds']:.1f} s on "
                  f"worker {r['worker']})")
        best = max(results, key=lambda r: r["correct"])
        print(f"best: learn rate {best['learn_rate']:g}, width {best['width']}")
        print(accuracy_line(best["correct"], best["total"]))


if __name__ == "__main__":
    main()
