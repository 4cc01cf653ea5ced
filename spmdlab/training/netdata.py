"""What ``trainnet`` trains on and measures: its data sources, losses and metrics.

A ``Source`` turns a datastore, a MiniBatchQueue or ``(inputs, targets)`` arrays into
mini-batches of tensors (images to ``(N, C, H, W)`` floats, labels to class indices);
``epoch_order`` is the global order of an epoch, the same on every worker. Losses are
means over the mini-batch and metrics means of a per-observation quantity, so the
weighted sum over the workers gives the value of the whole global mini-batch exactly.
"""

import math

import numpy as np

from .. import _world
from ..errors import SpmdTypeError, SpmdValueError
from .datastores import ArrayDatastore, Datastore, stack
from .minibatch import MiniBatchQueue

__all__ = ["Metric", "Source", "call", "epoch_order", "loss_function", "selection_digest"]


def _torch():
    import torch

    return torch


def call():
    """How trainnet's errors name the call and the worker: ``trainnet (worker 2 of 4)``."""
    return f"trainnet ({_world.current().who()})"


# -- losses and metrics ------------------------------------------------------------------


def loss_function(loss):
    """``(name, fn(scores, targets) -> mean loss tensor)``."""
    torch = _torch()
    F = torch.nn.functional
    if callable(loss):
        return getattr(loss, "__name__", "loss"), loss
    if not isinstance(loss, str):
        raise SpmdTypeError(f"{call()}: 'loss' must be 'crossentropy', 'mse' or a function "
                            f"loss(scores, targets) (got {loss!r})")
    name = loss.lower()
    if name in ("crossentropy", "cross-entropy", "index-crossentropy"):
        return "crossentropy", F.cross_entropy
    if name in ("mse", "mean-squared-error", "l2loss"):
        def mse(scores, targets):
            return F.mse_loss(scores, targets.reshape(scores.shape)
                              if targets.numel() == scores.numel() else targets)
        return "mse", mse
    raise SpmdValueError(f"{call()}: unknown loss {loss!r}; use 'crossentropy', 'mse' or a "
                         f"function loss(scores, targets)")


def _predicted_classes(targets):
    return targets if targets.dim() == 1 else targets.argmax(1)


class Metric:
    """A metric as a per-observation mean (exact under weighted sums) and a finish step."""

    def __init__(self, name, fcn):
        self.name = name
        self.fcn = fcn

    def mean(self, scores, targets):
        """The mean over this batch of the per-observation quantity (a float)."""
        # in float64: a float32 mean is off by up to 1e-7 (67.567568 for 25 of 37), so the
        # accuracy differed between layouts in its sixth digit
        if self.fcn == "accuracy":
            return float((scores.argmax(1) == _predicted_classes(targets)).double().mean())
        if self.fcn == "rmse":
            return float(((scores.double() - targets.reshape(scores.shape).double()) ** 2)
                         .mean())
        value = self.fcn(scores, targets)
        return float(value.item() if hasattr(value, "item") else value)

    def finish(self, mean):
        if self.fcn == "accuracy":
            return 100.0 * mean  # percent, as MATLAB reports it
        if self.fcn == "rmse":
            return math.sqrt(max(mean, 0.0))
        return mean


# -- data --------------------------------------------------------------------------------


class Source:
    """A training or validation source: a datastore and a function making mini-batches."""

    def __init__(self, data, what, class_index=None, mini_batch_fcn=None, dtype=None,
                 inputs_only=False):
        if isinstance(data, MiniBatchQueue):
            mini_batch_fcn = mini_batch_fcn or data.mini_batch_fcn
            data = data.datastore
        elif isinstance(data, (tuple, list)) and len(data) == 2:
            inputs, targets = data
            if len(inputs) != len(targets):
                raise SpmdValueError(f"{call()}: {what} has {len(inputs)} inputs but "
                                     f"{len(targets)} targets")
            data = ArrayDatastore(inputs, targets)
        elif not isinstance(data, Datastore):
            raise SpmdTypeError(f"{call()}: {what} must be a datastore, a MiniBatchQueue or "
                                f"a pair (inputs, targets) (got {type(data).__name__})")
        if len(data) == 0:
            raise SpmdValueError(f"{call()}: {what} is empty")
        self.ds = data
        self.images = bool(getattr(data, "_images", False))
        self.class_index = class_index
        self.user_fcn = mini_batch_fcn
        self.dtype = dtype
        self.inputs_only = inputs_only

    @staticmethod
    def class_index_of(ds, class_names=None):
        """``{label: output index}`` for labels that are not integers, else None."""
        if class_names is not None:
            return {name: i for i, name in enumerate(class_names)}
        labels = getattr(ds, "labels", None)
        if labels is None or np.asarray(labels).dtype.kind in "iub" or \
                np.asarray(labels).dtype.kind == "f":
            return None
        return {name: i for i, name in enumerate(ds.class_names)}

    def make(self, *columns):
        """One mini-batch ``(inputs, targets)`` from the observations' columns (a list
        of inputs, a list of labels), as a MiniBatchQueue hands them over."""
        if self.user_fcn is not None:
            batch = self.user_fcn(*columns)
            return batch if isinstance(batch, tuple) else (batch,)
        x = self._inputs(columns[0])
        if len(columns) == 1 or self.inputs_only:
            return (x,)
        return x, self._targets(columns[1])

    def _inputs(self, xs):
        torch = _torch()
        if isinstance(xs[0], torch.Tensor):
            x = torch.stack(xs)
        else:
            x = torch.from_numpy(np.ascontiguousarray(stack(xs, call())))
        if self.images:  # (N, H, W[, C]) as MATLAB reads images -> (N, C, H, W) in [0, 1]
            if x.dim() == 3:
                x = x.unsqueeze(-1)
            scale = 1.0 / 255 if x.dtype == torch.uint8 else 1.0
            x = x.permute(0, 3, 1, 2).to(self.dtype or torch.float32).mul_(scale)
            return x.contiguous()
        if x.is_floating_point() and self.dtype is not None:
            x = x.to(self.dtype)
        return x

    def _targets(self, ys):
        torch = _torch()
        if self.class_index is not None:
            try:
                return torch.tensor([self.class_index[y] for y in ys], dtype=torch.int64)
            except KeyError as exc:
                raise SpmdValueError(f"{call()}: label {exc.args[0]!r} is not one of the "
                                     f"training classes {list(self.class_index)}") from None
        if isinstance(ys[0], torch.Tensor):
            y = torch.stack(ys)
        else:
            y = stack(ys, call())
            if y.dtype.kind not in "biuf":  # names, not numbers: torch has no tensor of them
                raise SpmdValueError(
                    f"{call()}: label {np.asarray(ys[0]).tolist()!r} is not a number and "
                    f"the data names no classes (a transformed datastore keeps no labels); "
                    f"pass class_names=[...] (the order of the network's outputs) or make "
                    f"the labels class indices")
            y = torch.from_numpy(np.ascontiguousarray(y))
        if y.is_floating_point() and self.dtype is not None:
            y = y.to(self.dtype)
        return y

    def queue(self, positions, size):
        """A MiniBatchQueue over ``positions`` (this datastore's order), ``size`` a batch."""
        return MiniBatchQueue(self.ds.subset(positions), size, mini_batch_fcn=self.make,
                              partial_mini_batch="discard", dispatch_in_background=True)


def selection_digest(ds):
    """Which observations ``ds`` selects, in which order (its indices into its source, down
    the chain of views), as a short digest: the same on every worker unless a random
    ``split_each_label`` or ``shuffle`` without ``seed=`` drew differently there."""
    import hashlib

    digest = hashlib.sha1()
    while ds is not None:
        order = getattr(ds, "_order", None)
        if order is not None:
            digest.update(np.ascontiguousarray(order, dtype=np.int64).tobytes())
        digest.update(b"|")
        ds = getattr(ds, "_source", None)
    return digest.hexdigest()[:12]


def epoch_order(seed, shuffle, epoch, count):
    """The global order of the training observations in ``epoch`` (same on every worker)."""
    if shuffle == "never":
        return np.arange(count)
    return np.random.default_rng([seed, 0 if shuffle == "once" else epoch]).permutation(count)
