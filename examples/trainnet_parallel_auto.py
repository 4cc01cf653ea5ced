"""Train a network with trainnet and execution_environment="parallel-auto" (port of
MATLAB's "Train Network in the Cloud Using Automatic Parallel Support").

    mpiexec -n 4 python examples/trainnet_parallel_auto.py
    mpiexec -n 4 python examples/trainnet_parallel_auto.py --data cifar10/train
    python examples/trainnet_parallel_auto.py                          # one worker

There is no parallel code in the training: the one call to ``trainnet`` with
``execution_environment="parallel-auto"`` splits every global mini-batch over the workers
``mpiexec`` started (GPUs when every worker has one, else CPUs) and keeps their networks
identical. Images come from a folder with one sub-folder per class (default: the
embedded digits, written once as PNG files to ~/.cache/spmdlab/digits), split 90/10 per
label; the test part is the validation data, as in MATLAB's example. Worker 1 shows
the training progress (a live view in the terminal and a plot; ``--monitor web`` adds a
browser page with a Stop button). Ctrl-C, the Stop button or the ``SPMDLAB_STOP_FILE``
file stops training on every worker at the same iteration and the network so far is
tested. ``--checkpoint-path DIR`` saves a checkpoint every epoch; ``--resume DIR``
continues from the latest one.
"""

import argparse

import numpy as np

from requires import require
require("torch", "sklearn")  # else: stop at once, naming the install command
import torch

from spmdlab import spmd_index, spmd_plus, spmd_size
from spmdlab.training import (AugmentedImageDatastore, ImageDatastore, count_each_label,
                              minibatch_predict, on_each_node, partition, scores2label, split_each_label,
                              trainnet, training_options)

from digits_data import digits_folder
from reporting import accuracy_line, add_monitor_arguments


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="folder of images, one sub-folder per class "
                        "(default: the embedded digits)")
    parser.add_argument("--test-data", help="folder of test images (default: 10%% of "
                        "--data, per label)")
    parser.add_argument("--epochs", type=int, default=14, help="max epochs (14)")
    parser.add_argument("--mini-batch-size", type=int, default=128,
                        help="global mini-batch (128)")
    parser.add_argument("--net-width", type=int, default=16, help="filters of the first "
                        "block (16; MATLAB's example: 32)")
    parser.add_argument("--block-depth", type=int, default=2, help="conv-BN-ReLU layers "
                        "per block (2; MATLAB's example: 4)")
    parser.add_argument("--environment", default="parallel-auto",
                        help="execution_environment (parallel-auto)")
    parser.add_argument("--reflection", choices=["auto", "on", "off"], default="auto",
                        help="random left-right reflection (auto: on for --data images, "
                        "off for the digits, which are not mirror-symmetric)")
    parser.add_argument("--checkpoint-path", help="save a checkpoint here every epoch")
    parser.add_argument("--resume", help="continue from this checkpoint (file or folder)")
    parser.add_argument("--no-plots", action="store_true", help="no training-progress "
                        "view and plot (plots='none'; default: 'training-progress', a "
                        "live view and runs/<script>-<date>-<time>/training-progress.png)")
    add_monitor_arguments(parser, plot=False)
    parser.add_argument("--verbose", action="store_true", help="print the training table")
    parser.add_argument("--short", action="store_true", help="4 epochs, for CI")
    return parser.parse_args()


def convolutional_block(in_channels, num_filters, num_conv_blocks):
    """MATLAB's convolutionalBlock: conv 3x3 "same" - batch norm - ReLU, repeated."""
    nn = torch.nn
    layers = []
    for i in range(num_conv_blocks):
        layers += [nn.Conv2d(in_channels if i == 0 else num_filters, num_filters, 3,
                             padding=1),
                   nn.BatchNorm2d(num_filters), nn.ReLU()]
    return layers


def network(channels, num_classes, net_width, block_depth):
    nn = torch.nn
    return nn.Sequential(
        *convolutional_block(channels, net_width, block_depth),
        nn.MaxPool2d(2, stride=2),
        *convolutional_block(net_width, 2 * net_width, block_depth),
        nn.MaxPool2d(2, stride=2),
        *convolutional_block(2 * net_width, 4 * net_width, block_depth),
        nn.AdaptiveAvgPool2d(1),  # MATLAB: averagePooling2dLayer(8) over the 8x8 maps
        nn.Flatten(),
        nn.Linear(4 * net_width, num_classes))  # softmax is part of the crossentropy loss


def main():
    args = parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    folder = args.data
    if folder is None:  # one worker per node writes the cache: nodes need not share a disk
        folder = on_each_node(digits_folder)
    images = ImageDatastore(folder)
    if args.test_data:
        imds_train, imds_test = images, ImageDatastore(args.test_data)
    else:
        imds_train, imds_test = split_each_label(images, 0.9, randomize=True, seed=0)
    classes = imds_train.class_names
    label_count = count_each_label(imds_train)
    image = np.atleast_3d(imds_train[0][0])
    image_size = image.shape
    if spmd_index() == 1:
        print(f"{len(imds_train)} training images of {image_size}, {len(classes)} classes "
              f"({min(label_count.values())}-{max(label_count.values())} per class); "
              f"{spmd_size()} worker{'s' if spmd_size() > 1 else ''}")

    # Random reflection, +-4 pixel translation, random crop to the input size.
    reflection = args.reflection == "on" or (args.reflection == "auto" and args.data)
    augmented_train = AugmentedImageDatastore(
        image_size[:2], imds_train, random_x_reflection=bool(reflection),
        random_x_translation=(-4, 4), random_y_translation=(-4, 4),
        output_size_mode="randcrop")

    layers = network(image_size[2], len(classes), args.net_width, args.block_depth)

    mini_batch_size = args.mini_batch_size
    initial_learn_rate = 1e-1 * mini_batch_size / 256
    epochs = 4 if args.short else args.epochs
    options = training_options(
        "sgdm",
        max_epochs=epochs,
        execution_environment=args.environment,
        initial_learn_rate=initial_learn_rate,
        learn_rate_schedule="piecewise",
        learn_rate_drop_factor=0.1,
        learn_rate_drop_period=max(1, round(0.8 * epochs)),
        l2_regularization=1e-4,
        mini_batch_size=mini_batch_size,
        shuffle="every-epoch",
        validation_data=imds_test,
        validation_frequency=len(imds_train) // mini_batch_size,
        plots="none" if args.no_plots else "training-progress", log_dir=args.log_dir,
        monitor_web=args.monitor_port if args.monitor == "web" else False,
        metrics="accuracy",
        verbose=args.verbose,
        checkpoint_path=args.checkpoint_path)

    net, info = trainnet(augmented_train, layers, "crossentropy", options,
                         resume_from=args.resume)

    # Every worker holds the trained network: each scores its part of the test set.
    mine = partition(imds_test, spmd_size(), spmd_index())
    scores = minibatch_predict(net, mine)
    y_test = scores2label(scores, classes)
    correct = spmd_plus(int(np.sum(y_test == mine.labels)))
    if spmd_index() == 1:  # the test images are the validation data: one accuracy
        last = info.training_history[-1] if info.training_history else None
        if last is not None:
            print(f"{info.stop_reason} at iteration {last['iteration']} (epoch "
                  f"{last['epoch']})")
        print(accuracy_line(correct, len(imds_test)))


if __name__ == "__main__":
    main()
