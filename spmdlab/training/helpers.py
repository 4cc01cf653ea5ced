"""Helpers of MATLAB's deep-learning loops: GPUs, predictions, labels, one-hot codes."""

from __future__ import annotations

import importlib
import pickle
import sys
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, TypeVar, Union, cast

if TYPE_CHECKING:
    import torch

import numpy as np
from .. import _backends, _world
from .._agree import agree
from .._pack import digest
from ..errors import SpmdTypeError, SpmdValueError

__all__ = ["can_use_gpu", "gpu_device_count", "minibatch_predict", "on_each_node",
           "onehotencode", "scores2label", "select_gpu"]


R = TypeVar("R")


def _torch() -> Any:
    return sys.modules.get("torch")


def gpu_device_count() -> int:
    """The number of CUDA GPUs this process can see (0 without torch or CUDA).

    Examples
    --------
    >>> gpu_device_count() >= 0
    True

    MATLAB
    ------
    ``gpuDeviceCount``
    """
    torch = _torch()
    if torch is None:
        try:
            torch = importlib.import_module("torch")
        except ImportError:
            return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def can_use_gpu() -> bool:
    """Whether a CUDA GPU is usable here (MATLAB ``canUseGPU``).

    Examples
    --------
    >>> environment = "gpu" if can_use_gpu() else "cpu"

    MATLAB
    ------
    ``canUseGPU``
    """
    return gpu_device_count() > 0


def select_gpu(*, set_device: bool = True) -> int:
    """One distinct GPU per worker on each node; returns its index (0-based, CUDA's).

    Collective: every worker must call this. Workers on the same host (found through
    MPI's shared-memory split) take GPUs 0, 1, ... in worker order, and with
    ``set_device`` the current CUDA device is set to it. Raises SpmdValueError on every
    worker when some node has more workers than GPUs (MATLAB: one worker per GPU).

    Examples
    --------
    >>> device = f"cuda:{select_gpu()}" if can_use_gpu() else "cpu"

    MATLAB
    ------
    ``gpuDevice(spmdIndex)`` in each worker of a pool with one worker per GPU
    """
    scope = _world.current()
    local, workers = scope.node.Get_rank(), scope.node.Get_size()
    count = gpu_device_count()
    error = None
    if count < workers:
        error = SpmdValueError(
            f"select_gpu ({scope.who()}): {workers} workers share this node but it has "
            f"{count} GPU(s); start at most one worker per GPU")
    agree(scope, "select_gpu", digest(("select_gpu",)), error=error,
          describe=lambda: "select_gpu()")
    if set_device:
        _torch().cuda.set_device(local)
        _backends.WORKER_GPU = local  # messages' GPU values land here, in every thread
    return local


def on_each_node(fn: Callable[[], R]) -> R:
    """Call ``fn()`` on the first worker of each node; every worker gets that result.

    Collective: every worker must call this. For what each node needs once on its own
    disk (a data cache, an unpacked archive): the nodes of a cluster need not share a
    file system, and the workers of one node should not all write the same files. The
    other workers of the node wait for their first worker; the result (any picklable
    value, such as a path) reaches them from it. If ``fn`` raises on some node, every
    worker raises, naming the worker that failed.

    Examples
    --------
    >>> import tempfile
    >>> folder = on_each_node(lambda: tempfile.mkdtemp(prefix="cache-"))
    >>> os.path.isdir(folder)
    True

    MATLAB
    ------
    none: MATLAB's pools share the client's files
    """
    scope = _world.current()
    node = scope.node
    result, error = None, None
    if node.Get_rank() == 0:
        try:
            result = fn()
            pickle.dumps(result)  # the node's other workers receive it pickled
        except Exception as exc:  # reported on every worker by the agreement
            error = exc
    agree(scope, "on_each_node", digest(("on_each_node",)), error=error,
          describe=lambda: "on_each_node()")
    return node.bcast(result, root=0)


def scores2label(scores: Any, class_names: Optional[Sequence[Any]] = None,
                 axis: int = -1) -> np.ndarray:
    """The class of the highest score along ``axis`` (MATLAB ``scores2label``).

    ``scores`` is an array or tensor; with ``class_names`` (a sequence) the labels are
    those names (a numpy array of them), else the 0-based class indices.

    Examples
    --------
    >>> scores = np.array([[0.1, 0.9], [0.8, 0.2]])
    >>> scores2label(scores).tolist()
    [1, 0]
    >>> scores2label(scores, ["cat", "dog"]).tolist()
    ['dog', 'cat']

    MATLAB
    ------
    ``scores2label(scores, classNames)``
    """
    torch = _torch()
    if torch is not None and isinstance(scores, torch.Tensor):
        scores = scores.detach().cpu().numpy()
    index = np.asarray(scores).argmax(axis=axis)
    if class_names is None:
        return index
    names = np.asarray(class_names)
    if names.ndim != 1 or len(names) != np.asarray(scores).shape[axis]:
        raise SpmdValueError(f"scores2label: {len(names)} class names for "
                             f"{np.asarray(scores).shape[axis]} scores per observation")
    return names[index]


def onehotencode(labels: Any, classes: Union[int, Sequence[Any]],
                 dtype: Any = np.float32) -> np.ndarray:
    """One row per label with a 1 in its class's column (MATLAB ``onehotencode``).

    ``classes`` is the number of classes (labels are 0-based ints) or the sequence of
    class names (labels are names). Returns an array of shape ``(len(labels), C)``.

    Examples
    --------
    >>> onehotencode([0, 2], 3).tolist()
    [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]
    >>> onehotencode(["b"], ["a", "b"]).tolist()
    [[0.0, 1.0]]

    MATLAB
    ------
    ``onehotencode(labels, 2, ClassNames=classes)``
    """
    labels = np.asarray(labels)
    if isinstance(classes, (int, np.integer)) and not isinstance(classes, bool):
        index = labels.astype(np.int64)
        count = int(classes)
        if index.size and (index.min() < 0 or index.max() >= count):
            raise SpmdValueError(f"onehotencode: labels must be 0..{count - 1} "
                                 f"(got {index.min()}..{index.max()})")
    else:
        names = list(cast(Sequence[Any], classes))
        lookup = {name: i for i, name in enumerate(names)}
        missing = [l for l in labels.reshape(-1).tolist() if l not in lookup]
        if missing:
            raise SpmdValueError(f"onehotencode: label {missing[0]!r} is not one of the "
                                 f"classes {names}")
        index = np.array([lookup[l] for l in labels.reshape(-1).tolist()],
                         dtype=np.int64).reshape(labels.shape)
        count = len(names)
    out = np.zeros(index.shape + (count,), dtype=dtype)
    np.put_along_axis(out, index[..., None], 1, axis=-1)
    return out


def minibatch_predict(model: torch.nn.Module, data: Any, mini_batch_size: int = 128,
                      device: Any = None) -> torch.Tensor:
    """The model's outputs for every observation, in mini-batches, in inference mode.

    MATLAB ``minibatchpredict``. ``data`` is an array or tensor whose first dimension
    indexes observations, a datastore (its inputs converted as ``trainnet`` converts
    them: images become ``(N, C, H, W)`` floats, uint8 scaled to [0, 1]; labels are
    ignored), or an iterable of input batches. The model runs under
    ``torch.no_grad()`` in eval mode (its mode is restored after); outputs are
    concatenated into one CPU tensor. No observations (an array of length 0, or an
    empty partition of a datastore: a worker's part of a small test set) give no scores,
    a tensor of length 0.

    Examples
    --------
    >>> net = torch.nn.Linear(4, 3)
    >>> minibatch_predict(net, np.zeros((10, 4), dtype=np.float32), mini_batch_size=4).shape
    torch.Size([10, 3])

    MATLAB
    ------
    ``scores = minibatchpredict(net, data)``
    """
    torch = _torch()
    if torch is None or not isinstance(model, torch.nn.Module):
        raise SpmdTypeError(f"minibatch_predict: expects a torch.nn.Module (got "
                            f"{type(model).__name__})")
    if isinstance(mini_batch_size, bool) or not isinstance(mini_batch_size, int) or \
            mini_batch_size < 1:
        raise SpmdValueError(f"minibatch_predict: 'mini_batch_size' must be a positive "
                             f"int (got {mini_batch_size!r})")
    from .datastores import Datastore

    if isinstance(data, Datastore):  # converted as trainnet converts its training data
        from .minibatch import MiniBatchQueue
        from .netdata import Source

        dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), None)
        empty = len(data) == 0
        if empty:
            # an empty part of a datastore (a worker's partition of a small test set):
            # no scores, shaped as the model's output, from one observation of the
            # datastore's source, so that worker can still take part in what follows
            if getattr(data, "_count", 0) < 1:
                raise SpmdValueError(f"minibatch_predict ({_world.current().who()}): the "
                                     f"datastore is empty")
            data = data._view(np.zeros(1, dtype=np.int64))
        source = Source(data, "minibatch_predict data", dtype=dtype, inputs_only=True)
        data = (batch[0] for batch in MiniBatchQueue(data, mini_batch_size,
                                                     mini_batch_fcn=source.make))
        if empty:
            data = (batch[:0] for batch in data)
    if isinstance(data, np.ndarray):
        data = torch.from_numpy(data)
    if isinstance(data, torch.Tensor):  # no observations: one empty batch, empty scores
        batches = (data[i:i + mini_batch_size]
                   for i in range(0, max(len(data), 1), mini_batch_size))
    else:
        batches = iter(data)
    if device is None:
        device = next((p.device for p in model.parameters()), torch.device("cpu"))
    was_training = model.training
    model.eval()
    outputs = []
    try:
        with torch.no_grad():
            for batch in batches:
                outputs.append(model(batch.to(device)).cpu())
    finally:
        model.train(was_training)
    if not outputs:
        raise SpmdValueError(f"minibatch_predict ({_world.current().who()}): no data")
    return torch.cat(outputs)
