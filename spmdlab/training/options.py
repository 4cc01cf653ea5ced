"""``training_options``: MATLAB's ``trainingOptions`` with its names in snake_case.

Every option is checked when it is given (and when it is set on the object later, as
``options.MaxEpochs = 5`` works in MATLAB), so a typo or a bad value fails at once with
the option's name, not deep inside ``trainnet``.
"""

from __future__ import annotations

import difflib
import math
import os
import re
from typing import Any, Dict

import numpy as np

from ..collectives import spmd_index, spmd_size
from ..errors import SpmdTypeError, SpmdValueError

__all__ = ["TrainingOptions", "training_options"]

SOLVERS = ("sgdm", "adam", "rmsprop")
ENVIRONMENTS = ("auto", "cpu", "gpu", "parallel-auto", "parallel-cpu", "parallel-gpu")
METRICS = ("accuracy", "rmse")

# options every solver has, with MATLAB's defaults (None: depends on the solver)
_COMMON = {
    "max_epochs": 30,
    "mini_batch_size": 128,
    "initial_learn_rate": None,
    "learn_rate_schedule": "none",
    "learn_rate_drop_factor": 0.1,
    "learn_rate_drop_period": 10,
    "l2_regularization": 1e-4,
    "gradient_threshold": math.inf,
    "gradient_threshold_method": "l2norm",
    "shuffle": "once",
    "validation_data": None,
    "validation_frequency": 50,
    "validation_patience": math.inf,
    "output_network": "auto",
    "batch_normalization_statistics": "population",
    "plots": "none",
    "monitor_web": False,
    "metrics": (),
    "verbose": True,
    "verbose_frequency": 50,
    "execution_environment": "auto",
    "checkpoint_path": None,
    "log_dir": None,
    "checkpoint_frequency": 1,
    "checkpoint_frequency_unit": "epoch",
}
_SOLVER = {
    "sgdm": {"initial_learn_rate": 0.01, "momentum": 0.9},
    "adam": {"initial_learn_rate": 0.001, "gradient_decay_factor": 0.9,
             "squared_gradient_decay_factor": 0.999, "epsilon": 1e-8},
    "rmsprop": {"initial_learn_rate": 0.001, "squared_gradient_decay_factor": 0.9,
                "epsilon": 1e-8},
}
_CHOICES = {
    "learn_rate_schedule": ("none", "piecewise"),
    "gradient_threshold_method": ("l2norm", "global-l2norm", "absolute-value"),
    "shuffle": ("once", "never", "every-epoch"),
    "output_network": ("auto", "last-iteration", "best-validation"),
    "batch_normalization_statistics": ("population", "moving"),
    "plots": ("none", "training-progress"),
    "execution_environment": ENVIRONMENTS,
    "checkpoint_frequency_unit": ("epoch", "iteration"),
}
_ALIASES = {("output_network", "best-validation-loss"): "best-validation"}
_POSITIVE_INTS = ("max_epochs", "mini_batch_size", "learn_rate_drop_period",
                  "validation_frequency", "verbose_frequency", "checkpoint_frequency")


def _call():
    """How errors name the call and the worker: ``training_options (worker 2 of 4)``."""
    return f"training_options (worker {spmd_index()} of {spmd_size()})"


def _snake(name):
    """``MaxEpochs`` -> ``max_epochs``; snake_case names are returned as they are."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower() if name[:1].isupper() else name


def _number(value):
    return isinstance(value, (int, float, np.integer, np.floating)) and \
        not isinstance(value, bool)


def _check(solver, name, value):
    """The option's value, normalised; raises naming the option and the value."""
    call = _call()
    known = dict(_COMMON, **_SOLVER[solver])
    if name not in known:
        owners = [s for s in SOLVERS if name in _SOLVER[s]]
        if owners:
            raise SpmdValueError(f"{call}: '{name}' is not an option of solver "
                                 f"'{solver}' (it belongs to {', '.join(owners)})")
        close = difflib.get_close_matches(name, list(known), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise SpmdValueError(f"{call}: unknown option '{name}' for solver '{solver}'{hint}")

    def bad(rule):
        return SpmdValueError(f"{call}: '{name}' must be {rule} (got {value!r})")

    if name in _CHOICES:
        choices = _CHOICES[name]
        if not isinstance(value, str) or _ALIASES.get((name, value.lower()),
                                                      value.lower()) not in choices:
            raise bad("one of " + ", ".join(repr(c) for c in choices))
        return _ALIASES.get((name, value.lower()), value.lower())
    if name in _POSITIVE_INTS:
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
            raise bad("a positive int")
        return int(value)
    if name == "validation_patience":
        if value == math.inf:
            return math.inf
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
            raise bad("a positive int or math.inf")
        return int(value)
    if name in ("initial_learn_rate", "epsilon", "gradient_threshold"):
        if not _number(value) or not value > 0 or \
                (name != "gradient_threshold" and not math.isfinite(value)):
            raise bad("a positive number" + (" (math.inf for none)"
                                             if name == "gradient_threshold" else ""))
        return float(value)
    if name == "l2_regularization":
        if not _number(value) or not 0 <= value < math.inf:
            raise bad("a finite number >= 0")
        return float(value)
    if name in ("momentum", "learn_rate_drop_factor"):
        if not _number(value) or not 0 <= value <= 1:
            raise bad("a number from 0 to 1")
        return float(value)
    if name in ("gradient_decay_factor", "squared_gradient_decay_factor"):
        if not _number(value) or not 0 <= value < 1:
            raise bad("a number in [0, 1)")
        return float(value)
    if name == "verbose":
        if not isinstance(value, (bool, np.bool_)) and value not in (0, 1):
            raise bad("True or False")
        return bool(value)
    if name == "monitor_web":
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
        if not isinstance(value, (int, np.integer)) or not 0 <= value < 65536:
            raise bad("True, False or a port number from 0 to 65535")
        return int(value)
    if name == "metrics":
        return _check_metrics(value)
    if name in ("checkpoint_path", "log_dir"):
        if value is None or value == "":
            return None
        if not isinstance(value, (str, os.PathLike)):
            raise SpmdTypeError(f"{call}: '{name}' must be a folder path or None "
                                f"(got {value!r})")
        return os.fspath(value)
    if name == "validation_data":
        return _check_validation_data(value)
    raise AssertionError(name)  # every known option is handled above


def _check_metrics(value):
    items = [value] if isinstance(value, str) or callable(value) else value
    if isinstance(items, dict):
        items = list(items.items())
    try:
        items = list(items)
    except TypeError:
        raise SpmdTypeError(f"{_call()}: 'metrics' must be a name, a function or a "
                            f"list of them (got {value!r})") from None
    out, names = [], set()
    for item in items:
        name, fcn = item if isinstance(item, tuple) else (None, item)
        if isinstance(fcn, str):
            if fcn.lower() not in METRICS:
                raise SpmdValueError(f"{_call()}: unknown metric {fcn!r}; built in: "
                                     f"{', '.join(METRICS)}, or pass a function "
                                     f"f(scores, targets) -> number")
            fcn = fcn.lower()
            name = name or fcn
        elif callable(fcn):
            name = name or getattr(fcn, "__name__", "")
            if not name.isidentifier():
                name = f"metric{len(out) + 1}"
        else:
            raise SpmdTypeError(f"{_call()}: a metric must be a name or a function "
                                f"(got {fcn!r})")
        if name in names or name == "loss":
            raise SpmdValueError(f"{_call()}: metric name {name!r} is used twice")
        names.add(name)
        out.append((name, fcn))
    return tuple(out)


def _check_validation_data(value):
    from .datastores import Datastore
    from .minibatch import MiniBatchQueue

    if value is None or isinstance(value, (Datastore, MiniBatchQueue)):
        return value
    if isinstance(value, (tuple, list)) and len(value) == 2:
        try:
            lengths = len(value[0]), len(value[1])
        except TypeError:  # a number, not observations
            lengths = None
        if lengths is not None and lengths[0] == lengths[1]:
            return tuple(value)
        raise SpmdTypeError(f"{_call()}: 'validation_data' as a pair must be (inputs, "
                            f"targets) of equal length (got " + (
                                f"{lengths[0]} inputs and {lengths[1]} targets)"
                                if lengths is not None else
                                f"({type(value[0]).__name__}, {type(value[1]).__name__}))"))
    raise SpmdTypeError(f"{_call()}: 'validation_data' must be a datastore, a "
                        f"MiniBatchQueue or a pair (inputs, targets) of equal length (got "
                        f"{type(value).__name__})")


class TrainingOptions:
    """Options of ``trainnet`` (MATLAB ``trainingOptions``); see ``training_options``.

    Read and set options as attributes (``options.max_epochs = 5``); every value set is
    checked. ``replace(**changes)`` returns a changed copy.

    Examples
    --------
    >>> options = training_options("adam", max_epochs=5)
    >>> options.max_epochs, options.solver
    (5, 'adam')
    >>> options.replace(MiniBatchSize=64).mini_batch_size
    64

    MATLAB
    ------
    ``options = trainingOptions("adam", MaxEpochs=5); options.MiniBatchSize = 64;``
    """

    def __init__(self, solver: str, values: Dict[str, Any]) -> None:
        object.__setattr__(self, "_solver", solver)
        object.__setattr__(self, "_values", values)

    @property
    def solver(self) -> str:
        """"sgdm", "adam" or "rmsprop"."""
        return self._solver

    def __getattr__(self, name: str) -> Any:
        values = self.__dict__.get("_values", {})
        key = _snake(name)
        if key in values:
            return values[key]
        raise AttributeError(f"TrainingOptions for '{self.__dict__.get('_solver')}' has no "
                             f"option '{name}'")

    def __setattr__(self, name: str, value: Any) -> None:
        key = _snake(name)
        self._values[key] = _check(self._solver, key, value)

    def replace(self, **changes: Any) -> TrainingOptions:
        """A copy with ``changes`` applied (checked like ``training_options``)."""
        values = dict(self._values)
        for name, value in changes.items():
            values[_snake(name)] = _check(self._solver, _snake(name), value)
        return TrainingOptions(self._solver, values)

    def as_dict(self) -> Dict[str, Any]:
        """Every option and its value (``solver`` included)."""
        return dict(solver=self._solver, **self._values)

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={'<data>' if k == 'validation_data' and v is not None else v!r}"
                          for k, v in self._values.items())
        return f"TrainingOptions({self._solver!r}, {shown})"


def training_options(solver: str, **options: Any) -> TrainingOptions:
    """Options for ``trainnet``: MATLAB's ``trainingOptions(solver, Name=Value, ...)``.

    ``solver`` is ``"sgdm"``, ``"adam"`` or ``"rmsprop"``. Options take MATLAB's names in
    snake_case (``max_epochs``) or as in MATLAB (``MaxEpochs``), and MATLAB's defaults:

    ``max_epochs`` 30, ``mini_batch_size`` 128 (the global mini-batch, split over the
    workers), ``initial_learn_rate`` 0.01 (sgdm) or 0.001 (adam, rmsprop), ``momentum``
    0.9 (sgdm), ``gradient_decay_factor`` 0.9 and ``squared_gradient_decay_factor`` 0.999
    (adam; 0.9 for rmsprop), ``epsilon`` 1e-8, ``learn_rate_schedule`` "none" or
    "piecewise" (multiply by ``learn_rate_drop_factor`` 0.1 every
    ``learn_rate_drop_period`` 10 epochs), ``l2_regularization`` 1e-4,
    ``gradient_threshold`` inf with ``gradient_threshold_method`` "l2norm",
    "global-l2norm" or "absolute-value", ``shuffle`` "once", "never" or "every-epoch",
    ``validation_data`` (a datastore or ``(inputs, targets)``), ``validation_frequency``
    50 iterations, ``validation_patience`` inf, ``output_network`` "auto",
    "last-iteration" or "best-validation", ``batch_normalization_statistics``
    "population" or "moving", ``plots`` "none" or "training-progress", ``monitor_web``
    False (True or a port: a page on 127.0.0.1 with live charts and a Stop button, whose
    address worker 1 prints; see TrainingProgressMonitor's ``web``), ``metrics``
    ("accuracy", "rmse", functions ``f(scores, targets)``), ``verbose`` True,
    ``verbose_frequency`` 50, ``execution_environment`` "auto", "cpu", "gpu",
    "parallel-auto", "parallel-cpu" or "parallel-gpu", ``checkpoint_path`` None,
    ``checkpoint_frequency`` 1 and ``checkpoint_frequency_unit`` "epoch" or "iteration",
    ``log_dir`` None (a folder: ``metrics.csv`` of every metric per iteration, and
    TensorBoard event files with the ``logs`` extra).

    String values are case-insensitive. An unknown option, an option of another solver
    or a bad value raises SpmdValueError (or SpmdTypeError) naming it.

    Parameters
    ----------
    solver
        ``"sgdm"``, ``"adam"`` or ``"rmsprop"``.
    **options
        MATLAB's options, in snake_case or as MATLAB spells them (see above).

    Examples
    --------
    >>> options = training_options("sgdm", MaxEpochs=20, InitialLearnRate=0.05,
    ...                            ExecutionEnvironment="parallel-auto")
    >>> options.initial_learn_rate, options.momentum
    (0.05, 0.9)

    MATLAB
    ------
    ``trainingOptions("sgdm", MaxEpochs=20, InitialLearnRate=0.05, ExecutionEnvironment="parallel-auto")``
    """
    if not isinstance(solver, str) or solver.lower() not in SOLVERS:
        raise SpmdValueError(f"{_call()}: 'solver' must be one of "
                             f"{', '.join(repr(s) for s in SOLVERS)} (got {solver!r})")
    solver = solver.lower()
    values = dict(_COMMON, **_SOLVER[solver])
    for name, value in options.items():
        key = _snake(name)
        values[key] = _check(solver, key, value)
    if values["output_network"] == "best-validation" and values["validation_data"] is None:
        raise SpmdValueError(f"{_call()}: output_network='best-validation' needs "
                             "'validation_data'")
    return TrainingOptions(solver, values)
