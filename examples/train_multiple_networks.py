"""Train several networks at once, one setting per worker (port of MATLAB's parfor loop).

    mpiexec -n 4 python examples/train_multiple_networks.py
    python examples/train_multiple_networks.py             # one worker trains them all

A small sweep (learning rate x hidden width) of independent trainings, spread over the
workers with ``spmdlab.parfor`` (MATLAB: ``parfor i = 1:numSettings``); every training
runs serially on its worker. The test accuracy of every setting is gathered on worker 1,
which prints them and the best. Data: scikit-learn's digits upscaled to 28x28, split
90/10 per label.
"""

import argparse
import itertools
import time

import numpy as np

from requires import require
require("torch", "sklearn")  # else: stop at once, naming the install command
import torch

from spmdlab import parfor, spmd_index, spmd_size
from spmdlab.training import minibatch_predict, scores2label

from digits_data import digits_28x28, split_per_label


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--learn-rates", type=float, nargs="+", default=[0.003, 0.03],
                        help="SGDM learning rates to try (0.003 0.03)")
    parser.add_argument("--widths", type=int, nargs="+", default=[32, 128],
                        help="hidden-layer widths to try (32 128)")
    parser.add_argument("--epochs", type=int, default=15, help="epochs per training (15)")
    parser.add_argument("--short", action="store_true", help="2 epochs, for CI")
    return parser.parse_args()


def train_one(setting, data, epochs):
    """One complete training on this worker; returns the setting's test accuracy."""
    learn_rate, width = setting
    (x_train, y_train), (x_test, y_test) = data
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, width),
                                torch.nn.BatchNorm1d(width), torch.nn.ReLU(),
                                torch.nn.Linear(width, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=learn_rate, momentum=0.9)
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    for _ in range(epochs):
        order = torch.from_numpy(rng.permutation(len(y_train)))
        for batch in order.split(128):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x_train[batch]), y_train[batch]).backward()
            optimizer.step()
    predicted = scores2label(minibatch_predict(model, x_test))
    accuracy = float((predicted == y_test.numpy()).mean())
    return {"learn_rate": learn_rate, "width": width, "accuracy": accuracy,
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
    results = parfor(lambda s: train_one(s, data, epochs), settings, destination=1)
    if spmd_index() == 1:
        print(f"{len(settings)} trainings on {spmd_size()} worker(s):")
        for r in results:
            print(f"  learn rate {r['learn_rate']:<6g} width {r['width']:<4d} accuracy "
                  f"{r['accuracy']:.4f}  ({r['seconds']:.1f} s on worker {r['worker']})")
        best = max(results, key=lambda r: r["accuracy"])
        print(f"best: learn rate {best['learn_rate']:g}, width {best['width']}")
        print(f"accuracy = {best['accuracy']:.4f}")


if __name__ == "__main__":
    main()
