"""The embedded data of the examples: scikit-learn's handwritten digits as 28x28 images.

scikit-learn ships 1,797 real 8x8 digit images (values 0-16). Upscaled bilinearly to
28x28 they stand in for the digit images of MATLAB's examples, with no download.
"""

import os

import numpy as np


def digits_28x28():
    """``(images uint8 (n, 28, 28), labels int64 (n,))``."""
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = (digits.images * (255.0 / 16.0)).astype(np.uint8)
    big = np.stack([np.asarray(Image.fromarray(im).resize((28, 28), Image.BILINEAR))
                    for im in images])
    return big, digits.target.astype(np.int64)


def split_per_label(labels, fraction=0.9, seed=0):
    """Indices ``(train, test)``: ``fraction`` of every label for training."""
    rng = np.random.default_rng(seed)
    train, test = [], []
    for label in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == label))
        cut = int(round(fraction * len(idx)))
        train.extend(idx[:cut])
        test.extend(idx[cut:])
    return np.sort(train), np.sort(test)


def digits_folder(root=None):
    """The digits written once as PNG files, one sub-folder per class; returns the path.

    Under ``root`` (default: ``~/.cache/spmdlab/digits``), written atomically (a
    finished folder is renamed into place), so writers on several nodes that share the
    folder are safe. Call it through ``spmdlab.training.on_each_node`` so that one
    worker per node writes it: nodes need not share a file system.
    """
    import socket

    from PIL import Image

    root = root or os.path.join(os.path.expanduser("~"), ".cache", "spmdlab", "digits")
    if os.path.isdir(root):
        return root
    images, labels = digits_28x28()
    tmp = f"{root}.tmp-{socket.gethostname()}-{os.getpid()}"
    for i, (image, label) in enumerate(zip(images, labels)):
        folder = os.path.join(tmp, str(label))
        os.makedirs(folder, exist_ok=True)
        Image.fromarray(image).save(os.path.join(folder, f"{i:04d}.png"))
    try:
        os.replace(tmp, root)
    except OSError:  # another process finished first
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return root


def report_accuracy(model, test, preprocess):
    """Collective: every worker scores its part of ``test``; worker 1 prints the accuracy.

    ``preprocess(images, labels)`` is the example's mini-batch function.
    """
    from spmdlab import spmd_index, spmd_plus, spmd_size
    from spmdlab.training import minibatch_predict, partition, scores2label

    mine = partition(test, spmd_size(), spmd_index())
    x_test, y_test = preprocess([x for x, _ in mine], [y for _, y in mine])
    predicted = scores2label(minibatch_predict(model, x_test))
    correct = spmd_plus(int((predicted == y_test.numpy()).sum()))
    if spmd_index() == 1:
        from reporting import accuracy_line

        print(accuracy_line(correct, len(test)))
