"""Weighted aggregation across workers: gradients, losses and metrics, batch-norm state.

Every function here is a weighted sum ``spmd_plus(w_k * x_k)`` with ``w_k`` the worker's
share of the global mini-batch (local batch / global batch), so uneven shares are exact.
Collective: every worker must call them, in the same order.
"""

from __future__ import annotations

import sys
import weakref
from typing import Any, Iterable, List, Sequence, TypeVar

import numpy as np

from .. import _pack, _world
from .._agree import agree
from .._backends import classify
from .._checks import fail_together, local_work
from ..collectives import spmd_plus
from ..errors import SpmdTypeError

__all__ = ["aggregate_gradients", "aggregate_state", "aggregate_state_values",
           "population_statistics", "weighted_sum"]


def _torch():
    return sys.modules.get("torch")


def _is_module(x):
    torch = _torch()
    return torch is not None and isinstance(x, torch.nn.Module)


def _check_factor(call, factor):
    """The weight as a Python float. A weight that is not a real number raised here and
    on every other worker (each waits in the sum that follows): numpy's error named
    neither the call nor the worker. A float, not the number given: a numpy float32
    weight made a Python float loss float32 (NumPy 2's rules), and a float32 weight on
    one worker with a Python float on the others failed the sum as a mismatch."""
    try:  # numbers, numpy scalars, one-element arrays and tensors
        ok = not isinstance(factor, (bool, str, bytes)) and isinstance(float(factor), float)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        fail_together(call, SpmdTypeError(
            f"{call} ({_world.current().who()}): the weight must be a real number (this "
            f"worker's mini-batch / the global mini-batch; got {factor!r} that is a "
            f"{type(factor).__name__})"))
    return float(factor)


def _scaled(x, factor, call):
    """``x`` with every array or number leaf multiplied by ``factor``. A leaf that is
    not one raises here and on every other worker (they wait in the sum that follows:
    raised here alone, it left them waiting for this worker)."""
    treedef, leaves = _pack.flatten(x)
    out = []
    for leaf in leaves:
        if type(leaf) is _pack.Obj:
            hint = ("; a parameter without a gradient: pass the module, or "
                    "torch.zeros_like(p)") \
                if leaf.value is None and call == "aggregate_gradients" else ""
            fail_together(call, SpmdTypeError(
                f"{call} ({_world.current().who()}): cannot weight a value of type "
                f"{type(leaf.value).__name__}; pass numbers, arrays or tensors{hint}"))
        out.append(leaf.value * factor)
    return _pack.unflatten(treedef, out)


def weighted_sum(x: T, factor: float) -> T:
    """``spmd_plus(factor * x)``: with ``factor`` = local / global batch, a per-worker
    mean (a loss, an accuracy) becomes the mean over the global mini-batch.

    Collective: every worker must call this. ``x`` may be a number, array, tensor or a
    dict / list / tuple of them.

    Parameters
    ----------
    x
        This worker's mean (a number, array, tensor, or a structure of them).
    factor
        This worker's weight: its mini-batch / the global mini-batch.

    Examples
    --------
    A worker with 32 of a global mini-batch of 128 weighs its mean loss by 32/128; the
    weighted sum over the workers is the mean over all 128:

    >>> weighted_sum(0.75, 1.0)      # one worker holds the whole mini-batch
    0.75

    MATLAB
    ------
    ``loss = spmdPlus(factor * extractdata(loss))``
    """
    factor = _check_factor("weighted_sum", factor)
    return spmd_plus(_scaled(x, factor, "weighted_sum"))


class _Flat:
    """A model's gradients as one flat buffer (reused step after step)."""

    def __init__(self, key, params, dtype):
        self.key = key  # (name, shape, dtype) of every parameter
        self.counts = [p.numel() for p in params]
        self.offsets = np.concatenate([[0], np.cumsum(self.counts)]).astype(int)
        self.total = int(self.offsets[-1])
        # the gradients, then one "had a gradient" flag per parameter
        self.buffer = np.zeros(self.total + len(params), dtype=dtype)


T = TypeVar("T")
M = TypeVar("M")  # a torch.nn.Module, or a dict / list of tensors

_flat: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> _Flat


def aggregate_gradients(x: M, factor: float) -> M:
    """The weighted sum over workers of gradients: ``sum_k factor_k * g_k``.

    Collective: every worker must call this, with its ``factor`` (local batch / global
    batch). ``x`` is a ``torch.nn.Module``, whose parameters' ``.grad`` are replaced in
    place (and the module returned), or a list / dict of gradient tensors or arrays,
    returned aggregated. A module's gradients move as one flat buffer in one collective,
    and the buffer is reused across steps (the previous result is the next input, so with
    every worker on one node nothing is copied into shared memory). A parameter without
    a gradient on some worker counts as zero there; one without a gradient anywhere keeps
    ``.grad = None`` everywhere. Raises SpmdMismatchError on every worker when the models'
    parameters (names, order, shapes or dtypes) differ between workers, and SpmdTypeError
    on every worker when a worker's ``factor`` is not a real number.

    Parameters
    ----------
    x
        A ``torch.nn.Module`` (its ``.grad`` are replaced) or a structure of gradients.
    factor
        This worker's weight: its mini-batch / the global mini-batch.

    Examples
    --------
    >>> net = torch.nn.Linear(3, 2)
    >>> net(torch.ones(4, 3)).sum().backward()
    >>> before = net.weight.grad.clone()
    >>> _ = aggregate_gradients(net, 1.0)     # one collective for the whole model
    >>> torch.equal(net.weight.grad, before)
    True

    MATLAB
    ------
    ``gradients.Value = dlupdate(@aggregateGradients, gradients.Value, {factor})``
    """
    factor = _check_factor("aggregate_gradients", factor)
    if not _is_module(x):
        return spmd_plus(_scaled(x, factor, "aggregate_gradients"))
    torch = _torch()
    model: Any = x
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    names = [n for n, _ in named]
    params = [p for _, p in named]
    if not params:  # agreed once too: a worker alone without any returned while the
        flat = _flat.get(model)  # others waited for it in their sum
        if flat is None or flat.key != ():
            _agree_shapes([], [])
            _flat[model] = _Flat((), [], np.float64)
        return model
    dtypes = {p.dtype for p in params}
    dtype = classify(params[0].detach()).dtype  # no copy: the dtype is cached per torch dtype
    if len(dtypes) != 1 or dtype.kind not in "fc":  # mixed, bfloat16 or integer: per leaf
        # keyed by name: a parameter is summed with the one of its name on every worker
        grads = {n: (p.grad if p.grad is not None else torch.zeros_like(p))
                 for n, p in named}
        summed = spmd_plus(_scaled(grads, factor, "aggregate_gradients"))
        for n, p in named:
            p.grad = summed[n]
        return model
    flat = _flat.get(model)
    key = tuple((n, tuple(p.shape), p.dtype) for n, p in named)
    if flat is None or flat.key != key:
        _agree_shapes(names, params)
        flat = _flat[model] = _Flat(key, params, dtype)
    buf = flat.buffer
    flags = buf[flat.total:]
    for i, p in enumerate(params):
        seg = buf[flat.offsets[i]:flat.offsets[i + 1]]
        if p.grad is None:
            seg[...] = 0
            flags[i] = 0
        else:
            grad = p.grad.detach()
            if grad.device.type != "cpu":
                grad = grad.cpu()
            np.multiply(grad.reshape(-1).numpy(), factor, out=seg)
            flags[i] = 1
    result = spmd_plus(buf)
    flat.buffer = result  # next step writes its gradients here: a buffer read in place
    flags = result[flat.total:]
    for i, p in enumerate(params):
        if flags[i] == 0:
            continue  # no worker had a gradient for this parameter
        summed = torch.from_numpy(result[flat.offsets[i]:flat.offsets[i + 1]]).view_as(p)
        if p.grad is None:
            p.grad = summed.to(p.device, copy=True)
        else:
            p.grad.copy_(summed)
    return model


def _agree_shapes(names, params):
    """Collective, once per model layout: every worker has the same parameters, of the
    same names, in the same order, with the same shapes (two layers of one shape
    registered in another order on one worker would otherwise be summed crosswise)."""
    scope = _world.current()
    layout = tuple((n, tuple(p.shape), str(p.dtype)) for n, p in zip(names, params))

    def describe():  # the dtype too: models of one shape but another dtype differ
        if not params:
            return "aggregate_gradients(model with no trainable parameters)"
        shapes = ", ".join(f"{n} {tuple(p.shape)}" for n, p in zip(names[:4], params))
        more = f", ... ({len(params)} in all)" if len(params) > 4 else ""
        dtype = str(params[0].dtype).replace("torch.", "")
        return f"aggregate_gradients(model with {dtype} parameters {shapes}{more})"

    agree(scope, "aggregate_gradients", _pack.digest(("aggregate_gradients", layout)),
          describe=describe)


def _batch_norms(model):
    torch = _torch()
    norm = torch.nn.modules.batchnorm._BatchNorm
    return [m for m in model.modules()
            if isinstance(m, norm) and m.running_mean is not None]


def aggregate_state(x: M, factor: float) -> M:
    """Merge a model's batch-norm statistics (and other floating state) across workers.

    Collective: every worker must call this. For every batch-norm layer the running mean
    and variance become the pooled moments ``mu = sum_k w_k mu_k`` and
    ``var = sum_k w_k (var_k + (mu_k - mu)^2)`` (``w_k`` = ``factor``); other floating
    buffers are averaged with the same weights. All of it in one collective, computed in
    float64 (the sums of ``w (var + mu^2)`` lose no precision a float32 state can hold).
    Returns the module, updated in place. Raises SpmdTypeError on every worker when a
    worker's ``factor`` is not a real number, and SpmdMismatchError on every worker when
    the models' batch-norm layers or floating buffers (names, order, sizes) differ
    between workers (checked once per model layout).

    Parameters
    ----------
    x
        A ``torch.nn.Module`` (its batch-norm statistics and floating buffers are replaced).
    factor
        This worker's weight: its mini-batch / the global mini-batch.

    Examples
    --------
    >>> net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    >>> _ = net(torch.randn(8, 3))
    >>> mean = net[1].running_mean.clone()
    >>> _ = aggregate_state(net, 1.0)
    >>> torch.allclose(net[1].running_mean, mean)
    True

    MATLAB
    ------
    ``state.Value = dlupdate(@aggregateState, state.Value, {factor})``
    """
    factor = _check_factor("aggregate_state", factor)  # else numpy's error, alone
    if not _is_module(x):  # on every worker: the others wait in the sum below
        fail_together("aggregate_state", SpmdTypeError(
            f"aggregate_state ({_world.current().who()}): expects a torch.nn.Module (got "
            f"{type(x).__name__}); for MATLAB-style state values use "
            f"aggregate_state_values"))
    torch = _torch()
    model: Any = x
    norms = _batch_norms(model)
    stats = {id(m.running_mean) for m in norms} | {id(m.running_var) for m in norms}
    named = [(n, b) for n, b in model.named_buffers()
             if b.is_floating_point() and id(b) not in stats]
    others = [b for _, b in named]
    _agree_state_layout(model, norms, named)
    pieces = []
    for m in norms:
        mu = m.running_mean.detach().double().cpu()
        var = m.running_var.detach().double().cpu()
        pieces += [factor * mu, factor * (var + mu * mu)]
    pieces += [factor * b.detach().double().cpu().reshape(-1) for b in others]
    if not pieces:
        return model
    summed = spmd_plus(torch.cat([p.reshape(-1) for p in pieces]).numpy())
    summed = torch.from_numpy(summed)
    offset = 0
    for m in norms:
        n = m.running_mean.numel()
        mu = summed[offset:offset + n]
        second = summed[offset + n:offset + 2 * n]
        offset += 2 * n
        m.running_mean.copy_(mu.to(m.running_mean.dtype))
        m.running_var.copy_((second - mu * mu).clamp_(min=0).to(m.running_var.dtype))
    for b in others:
        n = b.numel()
        b.copy_(summed[offset:offset + n].view_as(b).to(b.dtype))
        offset += n
    return model


_state_layouts: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> layout


def _agree_state_layout(model, norms, named, call="aggregate_state"):
    """Collective, once per layout of ``model``'s state: every worker has the same
    batch-norm layers and floating buffers, by name, in the same order, of the same
    shapes. Else a worker without any returned while the others waited in the sum, and
    two layers of one size in another order on one worker were merged crosswise."""
    # what every worker sees alike (no ids: a skipped agreement must be skipped
    # everywhere), cheap to compare at every call; the layers' names once per layout
    seen = (call, tuple(m.num_features for m in norms),
            tuple((n, tuple(b.shape)) for n, b in named))
    if _state_layouts.get(model) == seen:
        return
    where = {id(m): n for n, m in model.named_modules()}
    layout = tuple((where.get(id(m)) or "(the model)", m.num_features) for m in norms) + \
        seen[2]

    def describe():
        parts = [f"batch norm {n} ({c})" for n, c in layout[:len(norms)]] + \
            [f"buffer {n} {shape}" for n, shape in layout[len(norms):]]
        more = f", ... ({len(parts)} in all)" if len(parts) > 4 else ""
        return (f"{call}(model with {', '.join(parts[:4])}{more})" if parts else
                f"{call}(model without batch-norm statistics or floating buffers)")

    agree(_world.current(), call, _pack.digest((call, layout)), describe=describe)
    _state_layouts[model] = seen


def population_statistics(model: M, batches: Iterable[Any]) -> M:
    """Set every batch-norm layer's running statistics to the moments of all its inputs.

    Collective: every worker must call this, each with its own part of the data.
    MATLAB trainnet's ``BatchNormalizationStatistics="population"`` for a custom loop:
    after training, one pass over ``batches`` (an iterable of input batches, such as a
    ``MiniBatchQueue`` over this worker's partition of the training data) in training
    mode without updates; each layer's inputs are summed per channel in float64, one
    ``spmd_plus`` adds every worker's sums, and the running mean and (unbiased) variance
    become the moments of everything the layer saw, on every worker alike, whatever the
    number of workers. Running statistics (momentum 0.1) lag the network while it still
    changes fast, early in training; these do not. Returns the module (its mode kept).
    Raises SpmdMismatchError on every worker when the models' batch-norm layers (names,
    order, sizes) differ between workers.

    Examples
    --------
    >>> net = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.BatchNorm1d(3))
    >>> batches = [torch.randn(16, 2) for _ in range(4)]
    >>> _ = population_statistics(net, batches)
    >>> outputs = torch.cat([net[0](b) for b in batches]).detach()
    >>> torch.allclose(net[1].running_mean, outputs.mean(0), atol=1e-5)
    True

    MATLAB
    ------
    ``trainingOptions(..., BatchNormalizationStatistics="population")``
    """
    if not _is_module(model):
        raise SpmdTypeError(f"population_statistics: expects a torch.nn.Module (got "
                            f"{type(model).__name__})")
    # the same layers, in the same order, on every worker: else summed crosswise
    _agree_state_layout(model, [m for m in _batch_norms(model) if m.track_running_stats],
                        [], "population_statistics")
    with local_work("population_statistics", "the pass over this worker's batches"):
        sums = batch_norm_moments(model, batches)
    set_batch_norm_moments(model, spmd_plus(sums))
    return model


def batch_norm_moments(model, batches):
    """This worker's per-channel ``[sum x, sum x^2, count]`` (float64) of the inputs of
    every tracking batch-norm layer over ``batches`` (inputs, or tuples whose first item
    is the input); no collective."""
    torch = _torch()
    norms = [m for m in _batch_norms(model) if m.track_running_stats]
    sums = {m: [0.0, 0.0, 0] for m in norms}

    def hook(module, inputs):
        x = inputs[0].detach().double()
        dims = [0] + list(range(2, x.dim()))
        s = sums[module]
        s[0] = s[0] + x.sum(dims).cpu()
        s[1] = s[1] + (x * x).sum(dims).cpu()
        s[2] += x.numel() // x.shape[1]

    handles = [m.register_forward_pre_hook(hook) for m in norms]
    was_training = model.training
    model.train()
    try:
        with torch.no_grad():
            for batch in batches:
                model(batch[0] if isinstance(batch, (tuple, list)) else batch)
    finally:
        model.train(was_training)
        for h in handles:
            h.remove()
    return np.concatenate([np.concatenate([
        np.broadcast_to(np.asarray(s[0], dtype=np.float64), (m.num_features,)),
        np.broadcast_to(np.asarray(s[1], dtype=np.float64), (m.num_features,)), [s[2]]])
        for m, s in sums.items()] or [np.zeros(0)])


def set_batch_norm_moments(model, sums):
    """Running mean and unbiased variance from summed ``batch_norm_moments``."""
    torch = _torch()
    at = 0
    for m in (m for m in _batch_norms(model) if m.track_running_stats):
        c = m.num_features
        s1, s2, n = sums[at:at + c], sums[at + c:at + 2 * c], sums[at + 2 * c]
        at += 2 * c + 1
        if n < 1:
            continue  # the layer saw nothing: its statistics stay
        mean = s1 / n
        var = np.maximum(s2 - n * mean * mean, 0) / max(n - 1, 1)
        m.running_mean.copy_(torch.from_numpy(mean).to(m.running_mean.dtype))
        m.running_var.copy_(torch.from_numpy(var).to(m.running_var.dtype))


def aggregate_state_values(values: Sequence[Any], factor: float, is_mean: Sequence[bool],
                           is_variance: Sequence[bool]) -> List[Any]:
    """MATLAB-style ``aggregateState``: a list of state values with mean / variance masks.

    Collective: every worker must call this. ``values`` is a list of arrays or tensors;
    the j-th value flagged ``is_mean`` pairs with the j-th flagged ``is_variance`` (the
    order of a MATLAB ``net.State`` table); they are merged with the pooled formula,
    every other value is averaged with weight ``factor``. Returns a new list. Raises
    SpmdTypeError on every worker when a worker's ``factor`` is not a real number.

    Examples
    --------
    >>> values = [np.array([1.0, 2.0]), np.array([0.5, 0.5])]   # a mean, a variance
    >>> merged = aggregate_state_values(values, 1.0, [True, False], [False, True])
    >>> [v.tolist() for v in merged]
    [[1.0, 2.0], [0.5, 0.5]]

    MATLAB
    ------
    ``aggregateState(state, factor, isBatchNormalizationStateMean, ...)``
    """
    factor = _check_factor("aggregate_state_values", factor)
    # a bad input raises here and on every other worker (they wait in the sum below)
    call, who = "aggregate_state_values", _world.current().who()
    n = len(values)
    if len(is_mean) != n or len(is_variance) != n:
        fail_together(call, SpmdTypeError(
            f"{call} ({who}): {n} values but {len(is_mean)} mean flags and "
            f"{len(is_variance)} variance flags"))
    means = [i for i in range(n) if is_mean[i]]
    variances = [i for i in range(n) if is_variance[i]]
    if len(means) != len(variances):
        fail_together(call, SpmdTypeError(
            f"{call} ({who}): {len(means)} means but {len(variances)} variances; they "
            f"must pair up"))
    pairs = set(means) | set(variances)
    with local_work(call, "reading the values as float64 arrays"):
        host = [np.asarray(_to_numpy(v), dtype=np.float64) for v in values]
    sends = []
    for i, j in zip(means, variances):
        sends += [factor * host[i], factor * (host[j] + host[i] ** 2)]
    sends += [factor * host[i] for i in range(n) if i not in pairs]
    summed = spmd_plus(sends)
    out = list(values)
    k = 0
    for i, j in zip(means, variances):
        mu, second = summed[k], summed[k + 1]
        k += 2
        out[i] = _like(values[i], mu)
        out[j] = _like(values[j], np.maximum(second - mu * mu, 0))
    for i in range(n):
        if i not in pairs:
            out[i] = _like(values[i], summed[k])
            k += 1
    return out


def _to_numpy(v):
    torch = _torch()
    if torch is not None and isinstance(v, torch.Tensor):
        return v.detach().cpu().numpy()
    return v


def _like(like, array):
    torch = _torch()
    if torch is not None and isinstance(like, torch.Tensor):
        return torch.from_numpy(np.ascontiguousarray(array)).to(like.dtype).to(like.device)
    return np.asarray(array).astype(np.asarray(like).dtype)
