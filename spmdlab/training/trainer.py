"""``trainnet``: MATLAB's one-call training, data-parallel under ``mpiexec``.

With ``execution_environment`` "parallel-auto" / "parallel-cpu" / "parallel-gpu" every
worker of the current scope takes part: each global mini-batch (the same shuffled order on
every worker, from one seed) is split with ``worker_mini_batch_sizes``, each worker
computes the loss and gradients of its share, and the toolkit's weighted aggregation
(one flat collective for the gradients, one for batch-norm state, one for the loss,
metrics and the stop flag) gives every worker the same update, so the replicas never
drift. "auto" / "cpu" / "gpu" train in-process, on the whole mini-batch.
"""

import contextlib
import math
import os
import re
import sys
import time
import warnings

import numpy as np

from .. import _env
from ..collectives import fail_together, spmd_broadcast, spmd_index, spmd_plus, spmd_size
from ..errors import SpmdError, SpmdMismatchError, SpmdTypeError, SpmdValueError
from .aggregate import aggregate_gradients, aggregate_state
from .datastores import ArrayDatastore, Datastore, partition
from .helpers import can_use_gpu, select_gpu
from .minibatch import MiniBatchQueue, worker_mini_batch_sizes
from .monitor import StopRequest, TrainingProgressMonitor
from .options import TrainingOptions
from .updates import adam_update, rmsprop_update, sgdm_update

__all__ = ["TrainingInfo", "trainnet"]

CHECKPOINT_FORMAT = "spmdlab-trainnet-checkpoint-1"
STOP_REASONS = {"max-epochs": "Max epochs completed", "stopped": "Stopped manually",
                "patience": "Met validation criterion"}


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
    """

    def __init__(self):
        self.training_history = []
        self.validation_history = []
        self.stop_reason = None
        self.output_network_iteration = 0
        self.class_names = None
        self.resumed_from = 0
        self.workers = 1

    @property
    def final_validation(self):
        """The last validation record (None without validation data)."""
        return self.validation_history[-1] if self.validation_history else None

    def __repr__(self):
        return (f"TrainingInfo({len(self.training_history)} iterations, "
                f"{len(self.validation_history)} validations, "
                f"stop_reason={self.stop_reason!r}, "
                f"output_network_iteration={self.output_network_iteration})")


# -- losses and metrics ------------------------------------------------------------------


def _torch():
    import torch

    return torch


def _call():
    """How errors name the call and the worker: ``trainnet (worker 2 of 4)``."""
    return f"trainnet (worker {spmd_index()} of {spmd_size()})"


def _loss_function(loss):
    """``(name, fn(scores, targets) -> mean loss tensor)``."""
    torch = _torch()
    F = torch.nn.functional
    if callable(loss):
        return getattr(loss, "__name__", "loss"), loss
    if not isinstance(loss, str):
        raise SpmdTypeError(f"{_call()}: 'loss' must be 'crossentropy', 'mse' or a function "
                            f"loss(scores, targets) (got {loss!r})")
    name = loss.lower()
    if name in ("crossentropy", "cross-entropy", "index-crossentropy"):
        return "crossentropy", F.cross_entropy
    if name in ("mse", "mean-squared-error", "l2loss"):
        def mse(scores, targets):
            return F.mse_loss(scores, targets.reshape(scores.shape)
                              if targets.numel() == scores.numel() else targets)
        return "mse", mse
    raise SpmdValueError(f"{_call()}: unknown loss {loss!r}; use 'crossentropy', 'mse' or a "
                         f"function loss(scores, targets)")


def _predicted_classes(targets):
    return targets if targets.dim() == 1 else targets.argmax(1)


class _Metric:
    """A metric as a per-observation mean (exact under weighted sums) and a finish step."""

    def __init__(self, name, fcn):
        self.name = name
        self.fcn = fcn

    def mean(self, scores, targets):
        """The mean over this batch of the per-observation quantity (a float)."""
        if self.fcn == "accuracy":
            return float((scores.argmax(1) == _predicted_classes(targets)).float().mean())
        if self.fcn == "rmse":
            return float(((scores - targets.reshape(scores.shape)) ** 2).float().mean())
        value = self.fcn(scores, targets)
        return float(value.item() if hasattr(value, "item") else value)

    def finish(self, mean):
        if self.fcn == "accuracy":
            return 100.0 * mean  # percent, as MATLAB reports it
        if self.fcn == "rmse":
            return math.sqrt(max(mean, 0.0))
        return mean


# -- data --------------------------------------------------------------------------------


class _Source:
    """A training or validation source: a datastore and a function making mini-batches."""

    def __init__(self, data, what, class_index=None, mini_batch_fcn=None, dtype=None,
                 inputs_only=False):
        if isinstance(data, MiniBatchQueue):
            mini_batch_fcn = mini_batch_fcn or data.mini_batch_fcn
            data = data.datastore
        elif isinstance(data, (tuple, list)) and len(data) == 2:
            inputs, targets = data
            if len(inputs) != len(targets):
                raise SpmdValueError(f"{_call()}: {what} has {len(inputs)} inputs but "
                                     f"{len(targets)} targets")
            data = ArrayDatastore(inputs, targets)
        elif not isinstance(data, Datastore):
            raise SpmdTypeError(f"{_call()}: {what} must be a datastore, a MiniBatchQueue or "
                                f"a pair (inputs, targets) (got {type(data).__name__})")
        if len(data) == 0:
            raise SpmdValueError(f"{_call()}: {what} is empty")
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
            x = torch.from_numpy(np.ascontiguousarray(np.stack([np.asarray(v) for v in xs])))
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
                raise SpmdValueError(f"{_call()}: label {exc.args[0]!r} is not one of the "
                                     f"training classes {list(self.class_index)}") from None
        if isinstance(ys[0], torch.Tensor):
            y = torch.stack(ys)
        else:
            y = torch.from_numpy(np.ascontiguousarray(np.stack([np.asarray(v) for v in ys])))
        if y.is_floating_point() and self.dtype is not None:
            y = y.to(self.dtype)
        return y

    def queue(self, positions, size):
        """A MiniBatchQueue over ``positions`` (this datastore's order), ``size`` a batch."""
        return MiniBatchQueue(self.ds.subset(positions), size, mini_batch_fcn=self.make,
                              partial_mini_batch="discard", dispatch_in_background=True)


def _order(seed, shuffle, epoch, count):
    """The global order of the training observations in ``epoch`` (same on every worker)."""
    if shuffle == "never":
        return np.arange(count)
    return np.random.default_rng([seed, 0 if shuffle == "once" else epoch]).permutation(count)


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

    @contextlib.contextmanager
    def local(self, where):
        """This worker's own work before a collective (reading data, forward, backward):
        an exception here is re-raised, and every other worker gets an error naming this
        worker and the exception, instead of waiting for it in the next collective."""
        try:
            yield
        except Exception as exc:
            if self.parallel:
                kind = SpmdTypeError if isinstance(exc, TypeError) else SpmdValueError
                try:
                    fail_together("trainnet", kind(f"{_call()}, {where}: "
                                                   f"{type(exc).__name__}: {exc}"))
                except SpmdError:
                    pass
            raise


def _device(environment, group):
    torch = _torch()
    if environment == "cpu" or environment == "parallel-cpu":
        return torch.device("cpu")
    if environment == "gpu":
        if not can_use_gpu():
            raise SpmdValueError(f"{_call()}: execution_environment='gpu' "
                                 f"but no GPU is usable here")
        return torch.device("cuda")
    if environment == "auto":
        return torch.device("cuda" if can_use_gpu() else "cpu")
    with_gpu = group.plus(int(can_use_gpu()))
    if environment == "parallel-gpu" and with_gpu < group.size:
        raise SpmdValueError(f"{_call()}: execution_environment="
                             f"'parallel-gpu' but only {with_gpu} of {group.size} workers "
                             f"can use a GPU")
    if with_gpu == group.size:  # GPUs if every worker can have its own, else CPUs
        try:
            return torch.device("cuda", select_gpu())
        except SpmdValueError:  # more workers than GPUs on a node: on every worker
            if environment == "parallel-gpu":
                raise
    return torch.device("cpu")


# -- checkpoints -------------------------------------------------------------------------

_CHECKPOINT_NAME = re.compile(r"^net_checkpoint__(\d+)__.*\.pt$")


def _write_checkpoint(folder, state):
    """Write ``state`` to a new file in ``folder`` atomically; returns its path.

    The file is written under a temporary name, flushed to disk, then renamed: a crash at
    any point leaves either no new file or a complete one.
    """
    torch = _torch()
    os.makedirs(folder, exist_ok=True)
    stamp = time.strftime("%Y_%m_%d__%H_%M_%S")
    path = os.path.join(folder, f"net_checkpoint__{state['iteration']}__{stamp}.pt")
    tmp = os.path.join(folder, f".net_checkpoint.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return path


def latest_checkpoint(path):
    """``path`` if it is a checkpoint file, else the checkpoint of ``path`` (a folder)
    with the highest iteration. Raises SpmdValueError when there is none."""
    if os.path.isfile(path):
        return path
    if not os.path.isdir(path):
        raise SpmdValueError(f"{_call()}: resume_from={path!r} is neither a checkpoint file "
                             f"nor a folder")
    found = [(int(m.group(1)), name) for name in os.listdir(path)
             for m in [_CHECKPOINT_NAME.match(name)] if m]
    if not found:
        raise SpmdValueError(f"{_call()}: no checkpoint (net_checkpoint__*.pt) in {path!r}")
    return os.path.join(path, max(found)[1])


def _read_checkpoint(path):
    torch = _torch()
    path = latest_checkpoint(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise SpmdValueError(f"{_call()}: cannot read checkpoint {path!r}: {exc}") from None
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise SpmdValueError(f"{_call()}: {path!r} is not a trainnet checkpoint")
    state["path"] = path
    return state


def _cpu(tree):
    """A copy of a dict of tensors (or None) on the CPU."""
    if tree is None:
        return None
    return {k: (v.detach().cpu().clone() if v is not None else None) for k, v in tree.items()}


def _to(tree, device):
    if tree is None:
        return None
    return {k: (v.to(device) if v is not None else None) for k, v in tree.items()}


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
        # MATLAB's L2 factors: weights 1, biases 0, normalisation offsets and scales 1
        self.decayed = []
        for module in net.modules():
            for name, p in module.named_parameters(recurse=False):
                if p.requires_grad and (name != "bias" or isinstance(module, norm_types)):
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
        return {k: _cpu(v) for k, v in self.state.items()}

    def load(self, state, device):
        self.state = {k: _to(v, device) for k, v in state.items()}


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


def trainnet(data, net, loss, options, *, resume_from=None, mini_batch_fcn=None,
             class_names=None):
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
    conversion of observations to tensors.
    """
    torch = _torch()
    if not isinstance(net, torch.nn.Module):
        raise SpmdTypeError(f"{_call()}: 'net' must be a torch.nn.Module (got "
                            f"{type(net).__name__})")
    if not isinstance(options, TrainingOptions):
        raise SpmdTypeError(f"{_call()}: 'options' must come from training_options(...) "
                            f"(got {type(options).__name__})")
    o = options
    group = _Group(o.execution_environment.startswith("parallel"))
    if not group.parallel and spmd_size() > 1 and spmd_index() == 1:
        warnings.warn(f"trainnet: execution_environment={o.execution_environment!r} trains "
                      f"on every one of the {spmd_size()} workers separately; use "
                      f"'parallel-auto' to train one network data-parallel",
                      stacklevel=2)
    # Local set-up; an error on any worker is raised on every worker.
    error = None
    try:
        device = _device(o.execution_environment, group)
        dtype = next((p.dtype for p in net.parameters() if p.is_floating_point()),
                     torch.float32)
        loss_name, loss_fn = _loss_function(loss)
        metrics = [_Metric(name, fcn) for name, fcn in o.metrics]
        train = _Source(data, "the training data", None, mini_batch_fcn, dtype)
        class_index = train.class_index = _Source.class_index_of(train.ds, class_names) \
            if loss_name == "crossentropy" else None
        validation = None if o.validation_data is None else _Source(
            o.validation_data, "validation_data", class_index, mini_batch_fcn, dtype)
        count = len(train.ds)
        batch = o.mini_batch_size
        sizes = worker_mini_batch_sizes(batch, group.size)
        per_epoch = count // batch
        if per_epoch == 0:
            raise SpmdValueError(f"{_call()}: mini_batch_size={batch} is "
                                 f"larger than the {count} training observations; no "
                                 f"complete mini-batch")
        params = [p for p in net.parameters() if p.requires_grad]
        if not params:
            raise SpmdValueError(f"{_call()}: the network has no trainable parameters")
        config = {"solver": o.solver, "mini_batch_size": batch, "observations": count,
                  "max_epochs": o.max_epochs, "loss": loss_name,
                  "parameters": [list(p.shape) for p in params]}
    except (SpmdError, ValueError, TypeError) as exc:
        error = exc
    group.check(error)

    # Worker 1's network, shuffle seed and checkpoint reach every worker.
    seed = int(torch.randint(0, 2 ** 62, ()).item())
    shared = None
    error = None
    if group.leader or not group.parallel:
        try:
            checkpoint = None if resume_from is None else _read_checkpoint(resume_from)
            shared = {"config": config, "seed": seed, "checkpoint": checkpoint,
                      "model": _cpu(net.state_dict())}
        except (SpmdError, OSError) as exc:
            error = exc
    group.check(error)
    shared = group.broadcast(shared)
    checkpoint = shared["checkpoint"]
    mismatch = [f"{k}={config[k]!r} here, {shared['config'][k]!r} on worker 1"
                for k in config if config[k] != shared["config"][k]]
    group.check(SpmdMismatchError(f"{_call()}: the workers disagree: "
                                  f"{'; '.join(mismatch)}") if mismatch else None)
    seed = shared["seed"]
    net.to(device)
    solver = _Solver(net, o)
    info = TrainingInfo()
    info.workers = group.size
    info.class_names = None if class_index is None else list(class_index)
    done = 0          # iterations completed
    best = None       # (validation loss, iteration, state) for output_network
    patience = 0
    elapsed_before = 0.0
    if checkpoint is not None:
        error = None
        for key in ("solver", "mini_batch_size", "observations"):
            if checkpoint[key] != config[key]:
                error = SpmdValueError(
                    f"{_call()}: checkpoint {checkpoint['path']!r} was made "
                    f"with {key}={checkpoint[key]!r}, this run has {config[key]!r}")
        try:
            net.load_state_dict(checkpoint["model"])
        except RuntimeError as exc:  # the same checkpoint and network everywhere
            error = SpmdValueError(f"{_call()}: checkpoint "
                                   f"{checkpoint['path']!r} does not fit this network: {exc}")
        group.check(error)
        solver.load(checkpoint["solver_state"], device)
        seed = checkpoint["seed"]
        done = info.resumed_from = checkpoint["iteration"]
        info.training_history = list(checkpoint["training_history"])
        info.validation_history = list(checkpoint["validation_history"])
        patience = checkpoint["patience"]
        elapsed_before = checkpoint["time_elapsed"]
        if checkpoint["best"] is not None:
            b = checkpoint["best"]
            best = (b["loss"], b["iteration"], b["state"])
    else:
        net.load_state_dict(shared["model"])
    del shared

    output = o.output_network
    if output == "auto":
        output = "best-validation" if validation is not None else "last-iteration"
    if output == "best-validation" and validation is None:
        group.check(SpmdValueError(f"{_call()}: output_network='best-validation' needs "
                                   "validation_data"))
    has_state = any(b.is_floating_point() for b in net.buffers())
    total = o.max_epochs * per_epoch
    display = _Display(group, o, metrics, validation is not None, total)
    monitor = None
    stop_file = _env.get("STOP_FILE", None)
    if o.plots == "training-progress":
        names = ["loss"] + [m.name for m in metrics]
        if validation is not None:
            names += ["validation_loss"] + [f"validation_{m.name}" for m in metrics]
        monitor = TrainingProgressMonitor(metrics=names, info=["epoch", "learn_rate"],
                                          stop_file=stop_file)
        stopper = None
    else:
        stopper = StopRequest(lambda reason: display.line(
            f"trainnet: stop requested ({reason}); finishing the current iteration"),
            stop_file)

    def validate(epoch, iteration):
        sums = np.zeros(2 + len(metrics))  # loss sum, metric sums, observations
        mine = partition(validation.ds, group.size, group.index) if group.parallel \
            else validation.ds
        with group.local(f"validation at iteration {iteration}"), torch.no_grad():
            net.eval()
            for x, y in MiniBatchQueue(mine, batch, mini_batch_fcn=validation.make) \
                    if len(mine) else ():
                x, y = x.to(device), y.to(device)
                scores = net(x)
                n = len(y)
                sums[0] += float(loss_fn(scores, y)) * n
                for i, m in enumerate(metrics):
                    sums[1 + i] += m.mean(scores, y) * n
                sums[-1] += n
            net.train()
        sums = group.plus(sums)
        record = {"iteration": iteration, "epoch": epoch, "loss": float(sums[0] / sums[-1])}
        for i, m in enumerate(metrics):
            record[m.name] = m.finish(float(sums[1 + i] / sums[-1]))
        info.validation_history.append(record)
        return record

    def checkpoint_state(epoch):
        return {"format": CHECKPOINT_FORMAT, "iteration": done, "epoch": epoch,
                "seed": seed, "solver": o.solver, "mini_batch_size": batch,
                "observations": count, "time_elapsed": elapsed_before + time.monotonic()
                - start, "model": _cpu(net.state_dict()),
                "solver_state": solver.state_dict(),
                "training_history": info.training_history,
                "validation_history": info.validation_history, "patience": patience,
                "best": None if best is None else
                {"loss": best[0], "iteration": best[1], "state": best[2]}}

    def save_checkpoint(epoch):
        error = None
        if group.leader:
            try:
                _write_checkpoint(o.checkpoint_path, checkpoint_state(epoch))
            except OSError as exc:
                error = SpmdValueError(f"{_call()}: cannot write a "
                                       f"checkpoint in {o.checkpoint_path!r}: {exc}")
        group.check(error)

    start = time.monotonic()
    reason = "max-epochs"
    offset, mine = sum(sizes[:group.index - 1]), sizes[group.index - 1]
    weight = mine / batch
    display.header(group.size, f"{o.execution_environment}, {device.type}")
    net.train()
    mbq = None
    try:
        for epoch in range(done // per_epoch + 1, o.max_epochs + 1):
            first = done - (epoch - 1) * per_epoch  # iterations of this epoch already done
            order = _order(seed, o.shuffle, epoch, count)[:per_epoch * batch]
            positions = order.reshape(per_epoch, batch)[first:, offset:offset + mine]
            mbq = train.queue(positions.reshape(-1), mine)
            learn_rate = _learn_rate(o, epoch)
            for _ in range(first, per_epoch):
                with group.local(f"iteration {done + 1}"):
                    x, y = mbq.next()
                    x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                    scores = net(x)
                    batch_loss = loss_fn(scores, y)
                    net.zero_grad(set_to_none=True)
                    batch_loss.backward()
                    values = [float(batch_loss.detach())]
                    values += [m.mean(scores.detach(), y) for m in metrics]
                if group.parallel:
                    aggregate_gradients(net, weight)
                    if has_state:
                        aggregate_state(net, weight)
                done += 1
                solver.step(learn_rate, done)
                stop = stopper.check() if stopper is not None else monitor.stop
                sums = np.array(values + [0.0]) * weight
                sums[-1] = float(bool(stop))  # anyone's stop request reaches everyone
                summed = group.plus(sums)
                record = {"iteration": done, "epoch": epoch,
                          "time_elapsed": elapsed_before + time.monotonic() - start,
                          "learn_rate": learn_rate, "loss": float(summed[0])}
                for i, m in enumerate(metrics):
                    record[m.name] = m.finish(float(summed[1 + i]))
                info.training_history.append(record)
                stopping = summed[-1] > 0
                last = stopping or done == total
                val = None
                if validation is not None and (done == 1 or done % o.validation_frequency == 0
                                               or last):
                    val = validate(epoch, done)
                    if best is None or val["loss"] < best[0]:
                        state = _cpu(net.state_dict()) \
                            if output == "best-validation" else None
                        best, patience = (val["loss"], done, state), 0
                    else:
                        patience += 1
                        if patience >= o.validation_patience:
                            reason, stopping = "patience", True
                if done == 1 or done % o.verbose_frequency == 0 or val is not None or last \
                        or stopping:
                    display.row(record, val)
                display.progress(record)
                if monitor is not None:
                    shown = {"loss": record["loss"]}
                    shown.update({m.name: record[m.name] for m in metrics})
                    if val is not None:
                        shown["validation_loss"] = val["loss"]
                        shown.update({f"validation_{m.name}": val[m.name] for m in metrics})
                    monitor.record_metrics(done, **shown)
                    monitor.update_info(epoch=f"{epoch} of {o.max_epochs}",
                                        learn_rate=f"{learn_rate:.4g}")
                    monitor.progress = min(100.0, 100.0 * done / total)
                if o.checkpoint_path and o.checkpoint_frequency_unit == "iteration" and \
                        done % o.checkpoint_frequency == 0:
                    save_checkpoint(epoch)
                if stopping:
                    if summed[-1] > 0:
                        reason = "stopped"
                    break
            mbq.close()
            if reason != "max-epochs":
                break
            if o.checkpoint_path and o.checkpoint_frequency_unit == "epoch" and \
                    epoch % o.checkpoint_frequency == 0:
                save_checkpoint(epoch)
    finally:
        if mbq is not None:
            mbq.close()
        if stopper is not None:
            stopper.restore()
        if monitor is not None:
            monitor.status = STOP_REASONS[reason]
            monitor.close()
    info.stop_reason = STOP_REASONS[reason]
    info.output_network_iteration = done
    if output == "best-validation" and best is not None and best[2] is not None:
        net.load_state_dict(best[2])
        info.output_network_iteration = best[1]
    if o.batch_normalization_statistics == "population" and done > 0:
        _population_statistics(net, train, group, count, batch, offset, mine, device)
    display.line(f"trainnet: {info.stop_reason} after iteration {done} (epoch "
                 f"{max(1, -(-done // per_epoch))}); network of iteration "
                 f"{info.output_network_iteration}")
    net.eval()
    return net, info


def _population_statistics(net, train, group, count, batch, offset, mine, device):
    """MATLAB's "population" batch-norm statistics: after training, one pass over the
    training data (in training mode, no updates) in which every batch-norm layer's inputs
    are summed in float64 per channel; one collective adds every worker's sums, and each
    layer's running mean and (unbiased) variance become the moments of everything it
    saw, on every worker alike, whatever the number of workers."""
    torch = _torch()
    norms = [m for m in net.modules()
             if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and
             m.track_running_stats]
    if not norms:
        return
    sums = {m: [0.0, 0.0, 0] for m in norms}

    def hook(module, inputs):
        x = inputs[0].detach().double()
        dims = [0] + list(range(2, x.dim()))
        s = sums[module]
        s[0] = s[0] + x.sum(dims).cpu()
        s[1] = s[1] + (x * x).sum(dims).cpu()
        s[2] += x.numel() // x.shape[1]

    per_epoch = count // batch
    positions = np.arange(per_epoch * batch).reshape(per_epoch, batch)[:, offset:offset + mine]
    handles = [m.register_forward_pre_hook(hook) for m in norms]
    net.train()
    mbq = train.queue(positions.reshape(-1), mine)
    try:
        with group.local("batch-norm statistics"), torch.no_grad():
            for batch_data in mbq:
                net(batch_data[0].to(device))
    finally:
        mbq.close()
        for h in handles:
            h.remove()
    local = [np.concatenate([np.asarray(s[0]).reshape(-1), np.asarray(s[1]).reshape(-1),
                             [s[2]]]) for s in sums.values()]
    total = group.plus(np.concatenate(local))
    at = 0
    for m in norms:
        c = m.num_features
        s1, s2, n = total[at:at + c], total[at + c:at + 2 * c], total[at + 2 * c]
        at += 2 * c + 1
        mean = s1 / n
        var = np.maximum(s2 - n * mean * mean, 0) / max(n - 1, 1)
        m.running_mean.copy_(torch.from_numpy(mean))
        m.running_var.copy_(torch.from_numpy(var))
