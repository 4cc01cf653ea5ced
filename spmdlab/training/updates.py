"""MATLAB's optimizer updates: ``sgdmupdate``, ``adamupdate``, ``rmspropupdate``, ``dlupdate``.

Each takes the parameters as a ``torch.nn.Module`` (updated in place, gradients from
``.grad`` unless given) or as a tensor / array or dict / list / tuple of them (a new
structure is returned). Optimizer state (velocity, moving averages) is a dict keyed by
parameter name for a module, or a structure like the parameters; ``None`` means MATLAB's
empty initial state (zeros).
"""

from __future__ import annotations

import math
import reprlib
import sys
from typing import Any, Callable, Tuple

import numpy as np

from .. import _pack
from ..errors import SpmdTypeError, SpmdValueError

__all__ = ["adam_update", "dlupdate", "rmsprop_update", "sgdm_update"]


def _is_module(x):
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.nn.Module)


_NO_GRADS = object()  # dlupdate: no gradients involved


def _entries(call, params, grads, *states):
    """``(names, values, grads, states...)`` lists, and a function that rebuilds."""
    if _is_module(params):
        named = [(n, p) for n, p in params.named_parameters() if p.requires_grad]
        names = [n for n, _ in named]
        values = [p for _, p in named]
        if grads is _NO_GRADS:
            grad_list = None
        elif grads is None:
            grad_list = [p.grad for p in values]
        elif isinstance(grads, dict):
            grad_list = [grads.get(n) for n in names]
        else:
            raise SpmdTypeError(f"{call}: for a module, 'grads' must be None (use .grad) or "
                                f"a dict by parameter name (got {type(grads).__name__})")
        for s in states:
            if s is not None and not isinstance(s, dict):
                raise SpmdTypeError(f"{call}: for a module, the state and extra arguments "
                                    f"must be None or a dict by parameter name, as this "
                                    f"call returns them (got {reprlib.repr(s)} that is a "
                                    f"{type(s).__name__})")
        state_lists = [[None if s is None else s.get(n) for n in names] for s in states]

        def rebuild(new_values, *new_states):
            for p, v in zip(values, new_values):
                if v is not None:
                    p.data.copy_(v)
            return (params,) + tuple(dict(zip(names, s)) for s in new_states)

        return values, grad_list, state_lists, rebuild
    treedef, leaves = _pack.flatten(params)
    values = [_value(call, "params", leaf) for leaf in leaves]
    if grads is None:
        raise SpmdTypeError(f"{call}: 'grads' is required unless 'params' is a module")
    grad_list = None if grads is _NO_GRADS else \
        _like_structure(call, "grads", grads, treedef, len(values))
    state_lists = [[None] * len(values) if s is None else
                   _like_structure(call, "state", s, treedef, len(values)) for s in states]

    def rebuild(new_values, *new_states):
        return (_pack.unflatten(treedef, new_values),) + tuple(
            _pack.unflatten(treedef, s) for s in new_states)

    return values, grad_list, state_lists, rebuild


def _value(call, name, leaf):
    if type(leaf) is _pack.Obj:
        raise SpmdTypeError(f"{call}: '{name}' holds a {type(leaf.value).__name__}; "
                            f"expected tensors or arrays")
    return leaf.value


def _like_structure(call, name, x, treedef, count):
    tree, leaves = _pack.flatten(x)
    if _pack.tree_signature(tree) != _pack.tree_signature(treedef) or len(leaves) != count:
        raise SpmdValueError(f"{call}: '{name}' must have the structure of 'params' "
                             f"({count} arrays)")
    return [_value(call, name, leaf) for leaf in leaves]


def _sqrt(v):
    return v.sqrt() if hasattr(v, "sqrt") else np.sqrt(v)


def _data(v):
    return v.detach() if hasattr(v, "detach") else v


def _apply(params, values, grad_list, states, rule):
    """``rule(p, g, *s) -> (new p, *new s)`` for every parameter with a gradient; one
    without a gradient keeps its value and state. Returns the new values and states."""
    outs = [[] for _ in range(1 + len(states))]
    for p, g, *s in zip(values, grad_list, *states):
        if g is None:
            new = (None if _is_module(params) else p, *s)
        else:
            new = rule(_data(p), _data(g), *s)
        for out, value in zip(outs, new):
            out.append(value)
    return outs


def _check_positive(call, **values):
    for name, value in values.items():
        if not isinstance(value, (int, float, np.floating, np.integer)) or value < 0:
            raise SpmdValueError(f"{call}: '{name}' must be a non-negative number "
                                 f"(got {value!r})")


def sgdm_update(params: Any, grads: Any = None, velocity: Any = None, learn_rate: float = 0.01,
                momentum: float = 0.9) -> Tuple[Any, Any]:
    """SGD with momentum, as MATLAB's ``sgdmupdate``: ``v = momentum*v - learn_rate*g``,
    ``p = p + v``. Returns ``(params, velocity)``; parameters without a gradient are left
    as they are.

    Examples
    --------
    >>> net = torch.nn.Linear(2, 1)
    >>> net(torch.ones(1, 2)).sum().backward()
    >>> net, velocity = sgdm_update(net, velocity=None)   # MATLAB's defaults
    >>> net, velocity = sgdm_update(net, velocity=velocity, learn_rate=0.05)

    MATLAB
    ------
    ``[net, vel] = sgdmupdate(net, grad, vel, learnRate, momentum)``
    """
    call = "sgdm_update"
    _check_positive(call, learn_rate=learn_rate, momentum=momentum)
    values, grad_list, states, rebuild = _entries(call, params, grads, velocity)

    def rule(p, g, v):
        v = -learn_rate * g if v is None else momentum * v - learn_rate * g
        return p + v, v

    return rebuild(*_apply(params, values, grad_list, states, rule))


def adam_update(params: Any, grads: Any = None, average_grad: Any = None,
                average_sq_grad: Any = None, iteration: int = 1, learn_rate: float = 0.001,
                gradient_decay_factor: float = 0.9,
                squared_gradient_decay_factor: float = 0.999,
                epsilon: float = 1e-8) -> Tuple[Any, Any, Any]:
    """Adam, as MATLAB's ``adamupdate`` (``iteration`` is 1-based).

    Returns ``(params, average_grad, average_sq_grad)``.

    Examples
    --------
    >>> params = {"w": np.array([1.0, 2.0])}
    >>> grads = {"w": np.array([0.5, -0.5])}
    >>> params, m, v = adam_update(params, grads, iteration=1)
    >>> params["w"].round(4).tolist()
    [0.999, 2.001]

    MATLAB
    ------
    ``[net, avgG, avgSqG] = adamupdate(net, grad, avgG, avgSqG, iteration)``
    """
    call = "adam_update"
    if isinstance(iteration, bool) or not isinstance(iteration, (int, np.integer)) or \
            iteration < 1:
        raise SpmdValueError(f"{call}: 'iteration' must be an int >= 1, as in MATLAB "
                             f"(got {iteration!r})")
    _check_positive(call, learn_rate=learn_rate, epsilon=epsilon)
    b1, b2 = gradient_decay_factor, squared_gradient_decay_factor
    for name, b in (("gradient_decay_factor", b1), ("squared_gradient_decay_factor", b2)):
        if not 0 <= b < 1:
            raise SpmdValueError(f"{call}: '{name}' must be in [0, 1) (got {b!r})")
    values, grad_list, states, rebuild = _entries(call, params, grads, average_grad,
                                                  average_sq_grad)
    step = learn_rate * math.sqrt(1 - b2 ** iteration) / (1 - b1 ** iteration)

    def rule(p, g, m, v):
        m = (1 - b1) * g if m is None else b1 * m + (1 - b1) * g
        v = (1 - b2) * g * g if v is None else b2 * v + (1 - b2) * g * g
        return p - step * m / (_sqrt(v) + epsilon), m, v

    return rebuild(*_apply(params, values, grad_list, states, rule))


def rmsprop_update(params: Any, grads: Any = None, average_sq_grad: Any = None,
                   learn_rate: float = 0.001, squared_gradient_decay_factor: float = 0.9,
                   epsilon: float = 1e-8) -> Tuple[Any, Any]:
    """RMSProp, as MATLAB's ``rmspropupdate``: ``v = d*v + (1-d)*g^2``,
    ``p = p - learn_rate * g / (sqrt(v) + epsilon)``.

    Returns ``(params, average_sq_grad)``.

    Examples
    --------
    >>> params, avg_sq = rmsprop_update([np.ones(2)], [np.ones(2)])
    >>> params[0].round(4).tolist()
    [0.9968, 0.9968]

    MATLAB
    ------
    ``[net, avgSqG] = rmspropupdate(net, grad, avgSqG)``
    """
    call = "rmsprop_update"
    _check_positive(call, learn_rate=learn_rate, epsilon=epsilon)
    d = squared_gradient_decay_factor
    if not 0 <= d < 1:
        raise SpmdValueError(f"{call}: 'squared_gradient_decay_factor' must be in [0, 1) "
                             f"(got {d!r})")
    values, grad_list, states, rebuild = _entries(call, params, grads, average_sq_grad)

    def rule(p, g, v):
        v = (1 - d) * g * g if v is None else d * v + (1 - d) * g * g
        return p - learn_rate * g / (_sqrt(v) + epsilon), v

    return rebuild(*_apply(params, values, grad_list, states, rule))


def dlupdate(fcn: Callable[..., Any], params: Any, *args: Any) -> Any:
    """``fcn`` applied to every parameter (and the matching entries of ``args``).

    MATLAB's ``dlupdate``. ``fcn(p, *a)`` returns the new value, or a tuple whose first
    element is the new value and whose others are collected into structures like
    ``params``: then the result is ``(params, others...)``.

    Examples
    --------
    >>> dlupdate(lambda p: p * 0.5, {"w": np.array([2.0, 4.0])})["w"].tolist()
    [1.0, 2.0]

    MATLAB
    ------
    ``net = dlupdate(@(w) 0.5 * w, net)``
    """
    call = "dlupdate"
    if not callable(fcn):
        raise SpmdTypeError(f"{call}: 'fcn' must be callable (got {fcn!r})")
    values, _, extra, rebuild = _entries(call, params, _NO_GRADS, *args)
    outputs = []
    for i, p in enumerate(values):
        outputs.append(fcn(_data(p), *(e[i] for e in extra)))
    if outputs and isinstance(outputs[0], tuple):
        firsts = [o[0] for o in outputs]
        others = [[o[k] for o in outputs] for k in range(1, len(outputs[0]))]
        return rebuild(firsts, *others)
    result = rebuild(outputs)
    return result[0]
