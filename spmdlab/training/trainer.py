"""``trainnet``: MATLAB's one-call training, data-parallel under ``mpiexec``.

With ``execution_environment`` "parallel-auto" / "parallel-cpu" / "parallel-gpu" every
worker of the current scope takes part: each global mini-batch (the same shuffled order on
every worker, from one seed) is split with ``worker_mini_batch_sizes``, each worker
computes the loss and gradients of its share, and the toolkit's weighted aggregation
(one flat collective for the gradients, one for batch-norm state, one for the loss,
metrics and the stop flag) gives every worker the same update, so the replicas never
drift. "auto" / "cpu" / "gpu" train in-process, on the whole mini-batch.
"""

from __future__ import annotations

import itertools
import math
import os
import sys
import time
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, TypeVar, Union

import numpy as np

from .. import _env
from .._checks import fail_together, local_work
from ..collectives import spmd_broadcast, spmd_index, spmd_plus, spmd_size
from ..errors import SpmdMismatchError, SpmdTypeError, SpmdValueError
from .aggregate import (aggregate_gradients, aggregate_state, batch_norm_moments,
                        set_batch_norm_moments)
from .checkpoints import (CHECKPOINT_FORMAT, cpu_copy, read_checkpoint, to_device,
                          write_checkpoint)
from .datastores import partition
from .helpers import can_use_gpu, select_gpu
from .minibatch import MiniBatchQueue, worker_mini_batch_sizes
from .monitor import StopRequest, TrainingProgressMonitor
from .netdata import (Metric, Source, _torch, call, epoch_order, loss_function,
                      selection_digest)
from .options import TrainingOptions
from .updates import adam_update, rmsprop_update, sgdm_update

__all__ = ["TrainingInfo", "trainnet"]

STOP_REASONS = {"max-epochs": "Max epochs completed", "stopped": "Stopped manually",
                "patience": "Met validation criterion", "nan-loss": "Training loss is NaN",
                "inf-loss": "Training loss is infinite"}


N = TypeVar("N")  # the network: a torch.nn.Module

# options that only change what worker 1 shows or writes for people: they may differ
_SHOWN_ONLY = ("plots", "monitor_web", "verbose", "verbose_frequency", "log_dir")


class TrainingInfo:
    """What ``trainnet`` returns beside the network (MATLAB ``TrainingInfo``).

    ``training_history``: one dict per iteration (``iteration``, ``epoch``,
    ``time_elapsed`` seconds, ``learn_rate``, ``loss`` and each metric, all over the
    global mini-batch). ``validation_history``: one dict per validation (``iteration``,
    ``epoch``, ``loss``, metrics). ``stop_reason`` ("Max epochs completed", "Stopped
    manually", "Met validation criterion"), ``output_network_iteration``,
    ``class_names`` (the order of the network's outputs for class labels that are not
    integers), ``resumed_from`` (the iteration a resumed run started after), ``workers``.
    Identical on every worker, except ``time_elapsed``.

    Examples
    --------
    >>> x = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    >>> y = (x[:, 0] > 0).astype(np.int64)
    >>> net, info = trainnet((x, y), torch.nn.Linear(4, 2), "crossentropy",
    ...                      training_options("adam", max_epochs=2, mini_batch_size=16,
    ...                                       verbose=False))
    >>> info.stop_reason, len(info.training_history)
    ('Max epochs completed', 8)

    MATLAB
    ------
    ``[net, info] = trainnet(...); info.TrainingHistory``
    """

    def __init__(self) -> None:
        self.training_history: List[Dict[str, Any]] = []
        self.validation_history: List[Dict[str, Any]] = []
        self.stop_reason: Optional[str] = None
        self.output_network_iteration = 0
        self.class_names: Optional[List[Any]] = None
        self.resumed_from = 0
        self.workers = 1
        self._final: Optional[Dict[str, Any]] = None

    @property
    def final_validation(self) -> Optional[Dict[str, Any]]:
        """The validation of the network ``trainnet`` returns, taken after its last step
        (the best-validation state loaded, batch-norm population statistics computed):
        ``iteration`` is ``output_network_iteration``. None without validation data."""
        if self._final is not None:
            return self._final
        return self.validation_history[-1] if self.validation_history else None

    def __repr__(self) -> str:
        return (f"TrainingInfo({len(self.training_history)} iterations, "
                f"{len(self.validation_history)} validations, "
                f"stop_reason={self.stop_reason!r}, "
                f"output_network_iteration={self.output_network_iteration})")



# -- parallel or serial ------------------------------------------------------------------


class _Group:
    """The workers training together: every worker of the scope, or this process alone."""

    def __init__(self, parallel):
        self.parallel = parallel
        self.size = spmd_size() if parallel else 1
        self.index = spmd_index() if parallel else 1
        self.leader = spmd_index() == 1  # prints, plots and writes checkpoints

    def plus(self, x):
        return spmd_plus(x) if self.parallel else x

    def broadcast(self, x):
        return spmd_broadcast(1, x) if self.parallel else x

    def check(self, error):
        """Raise ``error`` here, and an error on every worker if any worker has one."""
        if self.parallel:
            fail_together("trainnet", error)
        elif error is not None:
            raise error

    def local(self, where):
        """This worker's own work before a collective: its exception reaches every
        worker (``_checks.local_work``)."""
        return local_work("trainnet", where, together=self.parallel)


def _device(environment, group):
    torch = _torch()
    if environment == "cpu" or environment == "parallel-cpu":
        return torch.device("cpu")
    if environment == "gpu":
        if not can_use_gpu():
            raise SpmdValueError(f"{call()}: execution_environment='gpu' "
                                 f"but no GPU is usable here")
        return torch.device("cuda")
    if environment == "auto":
        return torch.device("cuda" if can_use_gpu() else "cpu")
    with_gpu = group.plus(int(can_use_gpu()))
    if environment == "parallel-gpu" and with_gpu < group.size:
        raise SpmdValueError(f"{call()}: execution_environment="
                             f"'parallel-gpu' but only {with_gpu} of {group.size} workers "
                             f"can use a GPU")
    if with_gpu == group.size:  # GPUs if every worker can have its own, else CPUs
        try:
            return torch.device("cuda", select_gpu())
        except SpmdValueError:  # more workers than GPUs on a node: on every worker
            if environment == "parallel-gpu":
                raise
    return torch.device("cpu")



# -- the solver --------------------------------------------------------------------------


class _Solver:
    """The update of ``options.solver`` with its state, L2 regularisation and clipping."""

    def __init__(self, net, options):
        torch = _torch()
        self.net = net
        self.options = options
        self.state = {}
        norm_types = (torch.nn.modules.batchnorm._BatchNorm, torch.nn.GroupNorm,
                      torch.nn.LayerNorm, torch.nn.modules.instancenorm._InstanceNorm)
        # MATLAB's L2 factors: weights 1, biases 0, normalisation offsets and scales 1;
        # a parameter shared by two layers (tied weights) decays once, not once per layer
        self.decayed, seen = [], set()
        for module in net.modules():
            for name, p in module.named_parameters(recurse=False):
                if p.requires_grad and (name != "bias" or isinstance(module, norm_types)) \
                        and id(p) not in seen:
                    seen.add(id(p))
                    self.decayed.append(p)

    def step(self, learn_rate, iteration):
        torch = _torch()
        o = self.options
        params = [p for p in self.net.parameters() if p.requires_grad and p.grad is not None]
        if o.l2_regularization:
            for p in self.decayed:
                if p.grad is not None:
                    p.grad.add_(p.detach(), alpha=o.l2_regularization)
        threshold = o.gradient_threshold
        if math.isfinite(threshold) and params:
            method = o.gradient_threshold_method
            if method == "absolute-value":
                for p in params:
                    p.grad.clamp_(-threshold, threshold)
            elif method == "l2norm":
                for p in params:
                    norm = float(p.grad.norm())
                    if norm > threshold:
                        p.grad.mul_(threshold / norm)
            else:
                norm = float(torch.sqrt(sum((p.grad.double() ** 2).sum() for p in params)))
                if norm > threshold:
                    for p in params:
                        p.grad.mul_(threshold / norm)
        s = self.state
        if o.solver == "sgdm":
            _, s["velocity"] = sgdm_update(self.net, velocity=s.get("velocity"),
                                           learn_rate=learn_rate, momentum=o.momentum)
        elif o.solver == "adam":
            _, s["average_grad"], s["average_sq_grad"] = adam_update(
                self.net, average_grad=s.get("average_grad"),
                average_sq_grad=s.get("average_sq_grad"), iteration=iteration,
                learn_rate=learn_rate, gradient_decay_factor=o.gradient_decay_factor,
                squared_gradient_decay_factor=o.squared_gradient_decay_factor,
                epsilon=o.epsilon)
        else:
            _, s["average_sq_grad"] = rmsprop_update(
                self.net, average_sq_grad=s.get("average_sq_grad"), learn_rate=learn_rate,
                squared_gradient_decay_factor=o.squared_gradient_decay_factor,
                epsilon=o.epsilon)

    def state_dict(self):
        return {k: cpu_copy(v) for k, v in self.state.items()}

    def load(self, state, device):
        self.state = {k: to_device(v, device) for k, v in state.items()}


def _learn_rate(options, epoch):
    if options.learn_rate_schedule == "piecewise":
        drops = (epoch - 1) // options.learn_rate_drop_period
        return options.initial_learn_rate * options.learn_rate_drop_factor ** drops
    return options.initial_learn_rate


# -- what a person sees ------------------------------------------------------------------


class _Display:
    """The verbose table (MATLAB's columns) and, on a terminal, a progress bar; worker 1."""

    def __init__(self, group, options, metrics, validating, total, stream=None):
        self.stream = stream if stream is not None else sys.stdout
        self.on = group.leader and options.verbose
        self.frequency = options.verbose_frequency
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.bar = self.tty
        self.total = total
        names = ["Iteration", "Epoch", "TimeElapsed", "LearnRate", "TrainingLoss"]
        if validating:
            names.append("ValidationLoss")
        for m in metrics:
            label = m.name[:1].upper() + m.name[1:]
            names.append("Training" + label)
            if validating:
                names.append("Validation" + label)
        self.names = names
        self.widths = [max(len(n), 9) for n in names]
        self.metrics = metrics
        self.validating = validating
        self._last_bar = 0.0

    def _write(self, text):
        self.stream.write(("\r\033[K" if self.bar else "") + text + "\n")
        self.stream.flush()

    def header(self, workers, environment):
        if not self.on:
            return
        self._write(f"trainnet: {self.total} iterations on {workers} worker"
                    f"{'s' if workers != 1 else ''} ({environment})")
        self._write("  ".join(n.rjust(w) for n, w in zip(self.names, self.widths)))
        self._write("  ".join("_" * w for w in self.widths))

    def row(self, record, validation):
        if not self.on:
            return
        elapsed = int(record["time_elapsed"])
        cells = [str(record["iteration"]), str(record["epoch"]),
                 f"{elapsed // 3600:02d}:{elapsed // 60 % 60:02d}:{elapsed % 60:02d}",
                 f"{record['learn_rate']:.4g}", f"{record['loss']:.4f}"]
        if self.validating:
            cells.append(f"{validation['loss']:.4f}" if validation else "")
        for m in self.metrics:
            cells.append(f"{record[m.name]:.4g}")
            if self.validating:
                cells.append(f"{validation[m.name]:.4g}" if validation else "")
        self._write("  ".join(c.rjust(w) for c, w in zip(cells, self.widths)))

    def progress(self, record):
        if not (self.on and self.bar):
            return
        now = time.monotonic()
        if now - self._last_bar < 0.2 and record["iteration"] != self.total:
            return
        self._last_bar = now
        done = record["iteration"] / max(1, self.total)
        filled = int(round(20 * done))
        extra = "".join(f" | {m.name} {record[m.name]:.4g}" for m in self.metrics)
        self.stream.write(f"\r\033[K[{'#' * filled}{'.' * (20 - filled)}] "
                          f"{100 * done:5.1f}% | epoch {record['epoch']} | iteration "
                          f"{record['iteration']}/{self.total} | loss "
                          f"{record['loss']:.4f}{extra}")
        self.stream.flush()

    def line(self, text):
        if self.on:
            self._write(text)


# -- trainnet ----------------------------------------------------------------------------


def trainnet(data: Any, net: N, loss: Union[str, Callable[[Any, Any], Any]],
             options: TrainingOptions, *, resume_from: Optional[str] = None,
             mini_batch_fcn: Optional[Callable[..., Any]] = None,
             class_names: Optional[Sequence[Any]] = None) -> Tuple[N, TrainingInfo]:
    """Train ``net`` (a ``torch.nn.Module``) and return ``(net, info)``: MATLAB ``trainnet``.

    ``data``: a datastore of ``(input, label)`` observations (image datastores give
    ``(height, width[, channels])`` images, made ``(N, C, H, W)`` float tensors with
    uint8 scaled to [0, 1]), a ``MiniBatchQueue`` (its datastore and mini-batch
    function; the mini-batch size comes from ``options``), or ``(inputs, targets)``
    arrays or tensors indexed by observation along the first dimension. ``loss``:
    ``"crossentropy"`` (the network outputs unnormalised scores; targets are class
    labels, made indices in ``class_names`` order unless they are integers, or class
    probabilities), ``"mse"`` (mean over every element) or ``loss(scores, targets)``
    returning the mean over the mini-batch. ``options``: ``training_options(...)``.

    ``execution_environment`` "parallel-auto" (GPUs when every worker has one, else
    CPUs), "parallel-cpu" or "parallel-gpu" trains data-parallel over every worker of
    the current scope (collective: every worker calls trainnet with the same data and
    options); with one worker it is the serial computation. "auto", "cpu" and "gpu"
    train in this process only. Each epoch has ``floor(observations / mini_batch_size)``
    iterations: a partial last mini-batch is discarded, as MATLAB does.

    The network is trained in place (and returned in eval mode): every worker ends with
    the same parameters and state. Ctrl-C (or the ``SPMDLAB_STOP_FILE`` file) stops every
    worker after the same iteration and returns the network so far. With
    ``checkpoint_path`` worker 1 saves the network, the solver state and the position
    every ``checkpoint_frequency`` epochs (or iterations), atomically;
    ``resume_from=`` a checkpoint file or folder (its latest checkpoint) continues from
    there, to ``max_epochs``. ``mini_batch_fcn(inputs, labels)`` replaces the default
    conversion of observations to tensors. An error on any worker is raised on every
    worker.

    Parameters
    ----------
    data
        A datastore of ``(input, label)``, a ``MiniBatchQueue``, or ``(inputs, targets)``.
    net
        The ``torch.nn.Module`` to train (in place).
    loss
        ``"crossentropy"``, ``"mse"`` or ``loss(scores, targets)``.
    options
        ``training_options(...)``.
    resume_from
        A checkpoint file, or a folder whose latest checkpoint to continue from.
    mini_batch_fcn
        ``fcn(inputs, labels)`` in place of the default conversion to tensors.
    class_names
        The order of the network's outputs for class labels that are not integers.

    Examples
    --------
    >>> x = np.random.default_rng(0).normal(size=(256, 2)).astype(np.float32)
    >>> y = (x[:, 0] + x[:, 1] > 0).astype(np.int64)
    >>> options = training_options("sgdm", max_epochs=10, mini_batch_size=32,
    ...                            initial_learn_rate=0.1, verbose=False,
    ...                            execution_environment="parallel-auto")
    >>> net, info = trainnet((x, y), torch.nn.Linear(2, 2), "crossentropy", options)
    >>> accuracy = (scores2label(minibatch_predict(net, x)) == y).mean()
    >>> bool(accuracy > 0.9)
    True

    MATLAB
    ------
    ``net = trainnet(data, net, "crossentropy", options)``
    """
    run = _Run(data, net, loss, options, mini_batch_fcn, class_names)
    run.begin(resume_from)
    run.train()
    return run.finish()


class _Run:
    """One trainnet call: set-up, epochs and iterations, validation, checkpoints, result."""

    def __init__(self, data, net, loss, options, mini_batch_fcn, class_names):
        torch = _torch()
        if not isinstance(net, torch.nn.Module):
            raise SpmdTypeError(f"{call()}: 'net' must be a torch.nn.Module (got "
                                f"{type(net).__name__})")
        if not isinstance(options, TrainingOptions):
            raise SpmdTypeError(f"{call()}: 'options' must come from training_options(...) "
                                f"(got {type(options).__name__})")
        self.net, self.o = net, options
        self.group = _Group(options.execution_environment.startswith("parallel"))
        if not self.group.parallel and spmd_size() > 1 and spmd_index() == 1:
            warnings.warn(f"trainnet: execution_environment="
                          f"{options.execution_environment!r} trains on every one of the "
                          f"{spmd_size()} workers separately; use 'parallel-auto' to train "
                          f"one network data-parallel", stacklevel=3)
        error = None
        try:  # local checks; an error on any worker is raised on every worker
            self._prepare(data, loss, mini_batch_fcn, class_names)
        except Exception as exc:  # any kind: the others must not wait for this worker
            error = exc
        self.group.check(error)

    def _prepare(self, data, loss, mini_batch_fcn, class_names):
        torch, o, group = _torch(), self.o, self.group
        self.device = _device(o.execution_environment, group)
        dtype = next((p.dtype for p in self.net.parameters() if p.is_floating_point()),
                     torch.float32)
        loss_name, self.loss_fn = loss_function(loss)
        self.metrics = [Metric(name, fcn) for name, fcn in o.metrics]
        self.train_data = Source(data, "the training data", None, mini_batch_fcn, dtype)
        self.class_index = self.train_data.class_index = \
            Source.class_index_of(self.train_data.ds, class_names) \
            if loss_name == "crossentropy" else None
        self.validation = None if o.validation_data is None else Source(
            o.validation_data, "validation_data", self.class_index, mini_batch_fcn, dtype)
        self.count = len(self.train_data.ds)
        self.batch = o.mini_batch_size
        if self.batch < group.size:
            raise SpmdValueError(f"{call()}: mini_batch_size={self.batch} cannot be split "
                                 f"over {group.size} workers (each needs at least one "
                                 f"observation of every mini-batch); use a mini_batch_size "
                                 f"of at least {group.size}")
        sizes = worker_mini_batch_sizes(self.batch, group.size)
        self.offset, self.mine = sum(sizes[:group.index - 1]), sizes[group.index - 1]
        self.per_epoch = self.count // self.batch
        if self.per_epoch == 0:
            raise SpmdValueError(f"{call()}: mini_batch_size={self.batch} is larger than the "
                                 f"{self.count} training observations; no complete "
                                 f"mini-batch")
        params = [p for p in self.net.parameters() if p.requires_grad]
        if not params:
            raise SpmdValueError(f"{call()}: the network has no trainable parameters")
        self.config = {"solver": o.solver, "mini_batch_size": self.batch,
                       "observations": self.count, "max_epochs": o.max_epochs,
                       "loss": loss_name, "parameters": [list(p.shape) for p in params],
                       "parameter_dtypes": sorted({str(p.dtype).replace("torch.", "")
                                                   for p in params}),
                       "buffers": [list(b.shape) for b in self.net.buffers()],
                       "class_names": None if self.class_index is None
                       else list(self.class_index)}
        # every option that decides the computation (or a collective) must agree, else
        # the replicas drift apart silently; what only worker 1 shows is left out
        for name, value in o.as_dict().items():
            if name not in self.config and name not in _SHOWN_ONLY:
                self.config[name] = value
        self.config["metrics"] = [name for name, _ in o.metrics]
        self.config["validation_data"] = None if self.validation is None \
            else f"{len(self.validation.ds)} observations"
        # the same observations, not just as many: a random split or shuffle drawn on
        # each worker (no seed=) gave every worker its own training and validation sets
        self.config["training_selection"] = selection_digest(self.train_data.ds)
        self.config["validation_selection"] = None if self.validation is None \
            else selection_digest(self.validation.ds)
        self.config["checkpoint_path"] = "set" if o.checkpoint_path else None
        self.output = o.output_network
        if self.output == "auto":
            self.output = "best-validation" if self.validation else "last-iteration"
        if self.output == "best-validation" and self.validation is None:
            raise SpmdValueError(f"{call()}: output_network='best-validation' needs "
                                 f"validation_data")

    def begin(self, resume_from):
        """Worker 1's network, shuffle seed and checkpoint reach every worker."""
        torch, group, net = _torch(), self.group, self.net
        seed = int(torch.randint(0, 2 ** 62, ()).item())  # drawn everywhere, worker 1's used
        shared, error = None, None
        if group.leader or not group.parallel:
            try:
                folder = self.o.checkpoint_path  # worker 1 writes: its folder, at once
                if folder and os.path.exists(folder) and not os.path.isdir(folder):
                    raise SpmdValueError(f"{call()}: checkpoint_path={folder!r} is not a "
                                         f"folder")
                shared = {"config": self.config, "seed": seed, "model": cpu_copy(
                    net.state_dict()), "checkpoint": None if resume_from is None
                    else read_checkpoint(resume_from)}
            except Exception as exc:  # any kind: the others wait in the broadcast below
                error = exc
        group.check(error)
        shared = group.broadcast(shared)
        mismatch = [f"{k}={v!r} here, {shared['config'][k]!r} on worker 1"
                    for k, v in self.config.items() if v != shared["config"][k]]
        if any(k.endswith("_selection") and v != shared["config"][k]
               for k, v in self.config.items()):
            mismatch.append("the datastores select other observations (or another order) "
                            "on different workers: pass seed= to split_each_label(..., "
                            "randomize=True) and shuffle(), so that every worker draws the "
                            "same")
        group.check(SpmdMismatchError(f"{call()}: the workers disagree: "
                                      f"{'; '.join(mismatch)}") if mismatch else None)
        if self.o.checkpoint_path:  # one that cannot be written fails now, not epochs later
            error = None
            if group.leader:
                try:
                    _check_writable(self.o.checkpoint_path)
                except SpmdValueError as exc:
                    error = exc
            group.check(error)
        self.seed = shared["seed"]
        net.to(self.device)
        self.has_state = any(b.is_floating_point() for b in net.buffers())  # batch norm
        self.solver = _Solver(net, self.o)
        self.info = TrainingInfo()
        self.info.workers = group.size
        self.info.class_names = None if self.class_index is None else list(self.class_index)
        self.done = 0            # iterations completed
        self.best = None         # (validation loss, iteration, network state or None)
        self.patience = 0        # validations since the best one
        self.elapsed_before = 0.0
        checkpoint = shared["checkpoint"]
        if checkpoint is None:
            error = None
            try:  # a network of another layout (same parameters) fails on every worker
                net.load_state_dict(shared["model"])
            except Exception as exc:  # any kind: the others wait in the check below
                error = SpmdMismatchError(f"{call()}: worker 1's network does not fit this "
                                          f"worker's (every worker must pass the same "
                                          f"network): {type(exc).__name__}: "
                                          f"{' '.join(str(exc).split())}")  # one line
            group.check(error)
        else:
            self._resume(checkpoint)

    def _resume(self, checkpoint):
        error = None
        for key in ("solver", "mini_batch_size", "observations"):
            if checkpoint[key] != self.config[key]:
                error = SpmdValueError(
                    f"{call()}: checkpoint {checkpoint['path']!r} was made with "
                    f"{key}={checkpoint[key]!r}, this run has {self.config[key]!r}")
        try:
            self.net.load_state_dict(checkpoint["model"])
        except RuntimeError as exc:  # the same checkpoint and network everywhere
            error = SpmdValueError(f"{call()}: checkpoint {checkpoint['path']!r} does not "
                                   f"fit this network: {exc}")
        self.group.check(error)
        self.solver.load(checkpoint["solver_state"], self.device)
        self.seed = checkpoint["seed"]
        self.done = self.info.resumed_from = checkpoint["iteration"]
        self.info.training_history = list(checkpoint["training_history"])
        self.info.validation_history = list(checkpoint["validation_history"])
        self.patience = checkpoint["patience"]
        self.elapsed_before = checkpoint["time_elapsed"]
        best = checkpoint["best"]
        if best is not None:
            self.best = (best["loss"], best["iteration"], best["state"])

    # -- the loop ------------------------------------------------------------------------

    def train(self):
        """Every remaining epoch, until max_epochs or a stop; sets ``self.reason``."""
        o, group = self.o, self.group
        self.total = o.max_epochs * self.per_epoch
        self.display = _Display(group, o, self.metrics, self.validation is not None,
                                self.total)
        stop_file = _env.get("STOP_FILE", None)
        self.monitor = self.stopper = None
        if o.plots == "training-progress" or o.log_dir or o.monitor_web is not False:
            names = ["loss"] + [m.name for m in self.metrics]
            if self.validation is not None:
                names += ["validation_loss"] + [f"validation_{m.name}" for m in self.metrics]
            self.monitor = TrainingProgressMonitor(
                metrics=names, info=["epoch", "learn_rate"], stop_file=stop_file,
                log_dir=o.log_dir, show=o.plots == "training-progress",
                plot_file="default" if o.plots == "training-progress" else None,
                web=o.monitor_web if o.monitor_web is not False else None)
        else:
            self.stopper = StopRequest(lambda reason: self.display.line(
                f"trainnet: stop requested ({reason}); finishing the current iteration"),
                stop_file)
        self.reason = "max-epochs"
        self.start = time.monotonic()
        self.display.header(group.size, f"{o.execution_environment}, {self.device.type}")
        self.net.train()
        mbq = None
        try:
            for epoch in range(self.done // self.per_epoch + 1, o.max_epochs + 1):
                first = self.done - (epoch - 1) * self.per_epoch  # done in this epoch
                order = epoch_order(self.seed, o.shuffle, epoch, self.count)
                positions = order[:self.per_epoch * self.batch].reshape(
                    self.per_epoch, self.batch)[first:, self.offset:self.offset + self.mine]
                mbq = self.train_data.queue(positions.reshape(-1), self.mine)
                learn_rate = _learn_rate(o, epoch)
                for _ in range(first, self.per_epoch):
                    if self._iteration(mbq, epoch, learn_rate):
                        return
                mbq.close()
                if o.checkpoint_path and o.checkpoint_frequency_unit == "epoch" and \
                        epoch % o.checkpoint_frequency == 0:
                    self._save_checkpoint(epoch)
        finally:
            if mbq is not None:
                mbq.close()
            if self.stopper is not None:
                self.stopper.restore()
            if self.monitor is not None:
                self.monitor.status = STOP_REASONS[self.reason]
                self.monitor.close()

    def _iteration(self, mbq, epoch, learn_rate):
        """One iteration on every worker; returns whether training stops after it."""
        o, group, net = self.o, self.group, self.net
        with group.local(f"iteration {self.done + 1} (epoch {epoch})"):
            # batch-norm statistics before this mini-batch: put back if its loss is NaN
            kept = [b.detach().clone() for b in net.buffers() if b.is_floating_point()] \
                if self.has_state else None
            x, y = mbq.next()
            x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
            scores = net(x)
            batch_loss = self.loss_fn(scores, y)
            net.zero_grad(set_to_none=True)
            batch_loss.backward()
            values = [float(batch_loss.detach())]
            values += [m.mean(scores.detach(), y) for m in self.metrics]
        if group.parallel:
            weight = self.mine / self.batch
            aggregate_gradients(net, weight)
            if self.has_state:
                aggregate_state(net, weight)
        self.done += 1
        stop = self.stopper.check() if self.stopper is not None else self.monitor.stop
        sums = np.array(values + [0.0]) * (self.mine / self.batch)
        sums[-1] = float(bool(stop))  # anyone's stop request reaches everyone
        summed = group.plus(sums)  # the same bits on every worker: one decision
        finite = math.isfinite(summed[0])
        if finite:
            self.solver.step(learn_rate, self.done)
        else:  # MATLAB stops ("Training loss is NaN"); the network stays as it was
            if kept is not None:
                for b, old in zip([b for b in net.buffers() if b.is_floating_point()], kept):
                    b.copy_(old)
            self.reason = "nan-loss" if math.isnan(summed[0]) else "inf-loss"
        record = {"iteration": self.done, "epoch": epoch, "time_elapsed":
                  self.elapsed_before + time.monotonic() - self.start,
                  "learn_rate": learn_rate, "loss": float(summed[0])}
        for i, m in enumerate(self.metrics):
            record[m.name] = m.finish(float(summed[1 + i]))
        self.info.training_history.append(record)
        stopping = summed[-1] > 0 or not finite
        if summed[-1] > 0 and finite:
            self.reason = "stopped"
        validation = None
        if self.validation is not None and (self.done in (1, self.total) or stopping or
                                            self.done % o.validation_frequency == 0):
            validation = self._validate(epoch)
            if self.best is None or validation["loss"] < self.best[0]:
                state = cpu_copy(net.state_dict()) \
                    if self.output == "best-validation" else None
                self.best, self.patience = (validation["loss"], self.done, state), 0
            else:
                self.patience += 1
                if self.patience >= o.validation_patience and not stopping:
                    self.reason, stopping = "patience", True
        self._show(record, validation, epoch, learn_rate, stopping)
        if o.checkpoint_path and o.checkpoint_frequency_unit == "iteration" and \
                self.done % o.checkpoint_frequency == 0:
            self._save_checkpoint(epoch)
        return stopping

    def _show(self, record, validation, epoch, learn_rate, stopping):
        done, display = self.done, self.display
        if done == 1 or done % self.o.verbose_frequency == 0 or validation is not None or \
                done == self.total or stopping:
            display.row(record, validation)
        display.progress(record)
        if self.monitor is not None:
            shown = {"loss": record["loss"]}
            shown.update({m.name: record[m.name] for m in self.metrics})
            if validation is not None:
                shown["validation_loss"] = validation["loss"]
                shown.update({f"validation_{m.name}": validation[m.name]
                              for m in self.metrics})
            # the information and progress first: the row (metrics.csv, a log line) that
            # record_metrics writes carries this iteration's epoch and learn rate
            self.monitor.update_info(epoch=f"{epoch} of {self.o.max_epochs}",
                                     learn_rate=f"{learn_rate:.4g}")
            self.monitor.progress = min(100.0, 100.0 * done / self.total)
            self.monitor.record_metrics(done, **shown)

    def _validate(self, epoch, history=True):
        """Loss and metrics of the whole validation set: each worker scores its part."""
        torch, group, net = _torch(), self.group, self.net
        sums = np.zeros(2 + len(self.metrics))  # loss sum, metric sums, observations
        mine = partition(self.validation.ds, group.size, group.index) if group.parallel \
            else self.validation.ds
        with group.local(f"validation at iteration {self.done} (epoch {epoch})"), \
                torch.no_grad():
            net.eval()
            for x, y in MiniBatchQueue(mine, self.batch,
                                       mini_batch_fcn=self.validation.make) \
                    if len(mine) else ():
                x, y = x.to(self.device), y.to(self.device)
                scores = net(x)
                n = len(y)
                sums[0] += float(self.loss_fn(scores, y)) * n
                for i, m in enumerate(self.metrics):
                    sums[1 + i] += m.mean(scores, y) * n
                sums[-1] += n
            net.train()
        sums = group.plus(sums)
        record = {"iteration": self.done, "epoch": epoch,
                  "loss": float(sums[0] / sums[-1])}
        for i, m in enumerate(self.metrics):
            record[m.name] = m.finish(float(sums[1 + i] / sums[-1]))
        if history:
            self.info.validation_history.append(record)
        return record

    def _save_checkpoint(self, epoch):
        """Worker 1 writes; a failure is raised on every worker."""
        error = None
        if self.group.leader:
            best = self.best
            state = {
                "format": CHECKPOINT_FORMAT, "iteration": self.done, "epoch": epoch,
                "seed": self.seed, "solver": self.o.solver, "mini_batch_size": self.batch,
                "observations": self.count,
                "time_elapsed": self.elapsed_before + time.monotonic() - self.start,
                "model": cpu_copy(self.net.state_dict()),
                "solver_state": self.solver.state_dict(),
                "training_history": self.info.training_history,
                "validation_history": self.info.validation_history,
                "patience": self.patience,
                "best": None if best is None else
                {"loss": best[0], "iteration": best[1], "state": best[2]}}
            try:
                write_checkpoint(self.o.checkpoint_path, state)
            except Exception as exc:  # any kind: the others wait in the check below
                error = SpmdValueError(f"{call()}: cannot write a checkpoint in "
                                       f"{self.o.checkpoint_path!r}: "
                                       f"{type(exc).__name__}: {exc}")
                error.__cause__ = exc
        self.group.check(error)

    # -- the result ----------------------------------------------------------------------

    def finish(self):
        """The output network (with population statistics) and the info, on every worker."""
        info, net = self.info, self.net
        info.stop_reason = STOP_REASONS[self.reason]
        info.output_network_iteration = self.done
        if self.output == "best-validation" and self.best is not None and \
                self.best[2] is not None:
            net.load_state_dict(self.best[2])
            info.output_network_iteration = self.best[1]
        kept_running = ""
        if self.o.batch_normalization_statistics == "population" and self.done > 0 and \
                not _population_statistics(net, self.train_data, self.group, self.count,
                                           self.batch, self.offset, self.mine, self.device):
            kept_running = ("; the population batch-norm statistics are not finite (NaN or "
                            "infinite values in the training data?): the network keeps its "
                            "running statistics")
        epoch = max(1, -(-self.done // self.per_epoch))
        final = ""
        if self.validation is not None and self.done > 0:
            # MATLAB reports the validation of the finished network: after the best state
            # is loaded and the population statistics are in (not the running ones)
            record = self._validate(epoch, history=False)
            record["iteration"] = info.output_network_iteration
            info._final = record
            final = f"; its validation loss {record['loss']:.4f}" + "".join(
                f", {m.name} {record[m.name]:.4g}" for m in self.metrics)
        self.display.line(f"trainnet: {info.stop_reason} after iteration {self.done} (epoch "
                          f"{epoch}); network of iteration "
                          f"{info.output_network_iteration}{final}{kept_running}")
        net.eval()
        return net, info


def _check_writable(folder):
    """Make ``folder`` (as a checkpoint would) and write a file in it; raise naming it."""
    import tempfile

    try:
        os.makedirs(folder, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise SpmdValueError(f"{call()}: checkpoint_path={folder!r} cannot be written: "
                             f"{type(exc).__name__}: {exc}") from exc


def _population_statistics(net, train, group, count, batch, offset, mine, device):
    """MATLAB's "population" batch-norm statistics over the training data: one pass over
    this worker's part of every full global mini-batch and of the observations after
    the last (every observation once, over the group), summed over the group. Returns
    False, the network unchanged, where they are not finite (NaN or infinite data)."""
    kept = [b.detach().clone() for b in net.buffers() if b.is_floating_point()]
    per_epoch = count // batch
    positions = np.arange(per_epoch * batch).reshape(per_epoch, batch)[:, offset:offset + mine]
    # the count % batch observations no full mini-batch of this order holds are training
    # data too (shuffled epochs train on them): split over the workers, each worker's
    # share joins its last batch (a batch of one would fail a batch-norm layer)
    rest = np.arange(per_epoch * batch, count)
    base, extra = divmod(len(rest), group.size)
    k = group.index - 1
    start = k * base + min(k, extra)
    last = np.concatenate([positions[-1], rest[start:start + base + (k < extra)]])
    queues = [train.queue(positions[:-1].reshape(-1), mine), train.queue(last, len(last))]
    try:
        with group.local("batch-norm statistics"):
            sums = batch_norm_moments(net, (b[0].to(device)
                                            for b in itertools.chain(*queues)))
    finally:
        for mbq in queues:
            mbq.close()
    sums = group.plus(sums)
    if not np.isfinite(sums).all():  # the same on every worker: the sums are
        with _torch().no_grad():  # the pass ran the layers in training mode
            for b, old in zip([b for b in net.buffers() if b.is_floating_point()], kept):
                b.copy_(old)
        return False
    set_batch_norm_moments(net, sums)
    return True
