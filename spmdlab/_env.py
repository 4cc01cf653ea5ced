"""Every environment variable spmdlab reads, in one place (the guide's page,
docs/guide/environment.md).

A keyword argument, where one exists, wins over the variable.
"""

import os

from .errors import SpmdValueError

PREFIX = "SPMDLAB_"


def get(name, default=None, *, cast=str, valid=None, meaning=None):
    """The value of ``SPMDLAB_<name>`` cast by ``cast``, or ``default`` when unset or empty;
    a value that ``valid`` refuses (NaN, a negative count) raises SpmdValueError (a
    ValueError), naming the variable, the value and ``meaning``: read at import, the
    same on every worker."""
    raw = os.environ.get(PREFIX + name, "").strip()
    if not raw:
        return default
    try:
        value = cast(raw)
    except ValueError:
        raise SpmdValueError(f"{PREFIX}{name} must be {meaning or cast.__name__} (got "
                             f"{raw!r})") from None
    if valid is not None and not valid(value):
        raise SpmdValueError(f"{PREFIX}{name} must be {meaning} (got {raw!r})")
    return value


def positive(value):  # False for NaN
    return value > 0


def at_least_zero(value):  # False for NaN
    return value >= 0


def tristate(raw):
    """'auto' -> None, '1'/'true'/'yes' -> True, '0'/'false'/'no' -> False."""
    value = raw.lower()
    if value == "auto":
        return None
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(raw)


tristate.__name__ = "one of auto, 1, 0"


def switch(raw):
    """'1'/'true'/'yes'/'on' -> True, '0'/'false'/'no'/'off' -> False: a setting that is
    on or off ('auto' is refused, which tristate would take for the default)."""
    value = tristate(raw)
    if value is None:
        raise ValueError(raw)
    return value


switch.__name__ = "1 or 0 (also true/false, yes/no, on/off)"

# Seconds a blocking spmdlab call may wait for other workers before it raises
# SpmdTimeoutError; None waits as long as every worker is still running.
TIMEOUT = get("TIMEOUT", None, cast=float, valid=positive,
              meaning="a number of seconds above 0 (unset: no time limit)")
# Seconds after which a worker waiting on others at the end of the program says, once,
# which workers it waits for (0: never).
STALL_WARNING = get("STALL_WARNING", 60.0, cast=float, valid=at_least_zero,
                    meaning="a number of seconds, 0 or more (0: never)")
# Seconds into a receive after which a worker asks the others whether they all wait for
# each other (a deadlock among living workers: SpmdDeadlockError), then after twice as
# long each time; 0: never.
DEADLOCK_CHECK = get("DEADLOCK_CHECK", 1.0, cast=float, valid=at_least_zero,
                     meaning="a number of seconds, 0 or more (0: never)")
# Whether the MPI library reads GPU memory itself (None: ask the library at run time).
CUDA_AWARE = get("CUDA_AWARE", None, cast=tristate)
# Payloads up to this many bytes ride inside the agreement record (one MPI call in all);
# None: as many as the record holds (1 KiB among up to 7 workers, less among more).
INLINE_BYTES = get("INLINE_BYTES", None, cast=int, valid=at_least_zero,
                   meaning="a number of bytes, 0 or more")
# Scopes of more workers than this agree (and reduce small values) through a fixed tree
# of messages over worker numbers, O(log N) per call, instead of gathering one record
# from every worker (see _tree); 0: always the tree.
TREE_ABOVE = get("TREE_ABOVE", 4, cast=int, valid=at_least_zero,
                 meaning="a number of workers, 0 or more")
# 1: count every worker's messages, bytes, waits and records examined (scripts/
# bench_scale.py reads them; see _count). Off by default: the counting costs time.
COUNT = get("COUNT", False, cast=switch)
# 0 leaves uncaught exceptions to Python: the job may then hang at the next collective.
ABORT_ON_ERROR = get("ABORT_ON_ERROR", True, cast=switch)
# Each line a worker prints starts "Worker k: " (MATLAB's display); lines are whole
# either way (see _output).
LABEL_OUTPUT = get("LABEL_OUTPUT", False, cast=switch)
# Whether the first worker of each host starts the watcher that names a worker killed
# without a word (see _watchdog): on unless SPMDLAB_WATCHDOG=0.
WATCHDOG = get("WATCHDOG", True, cast=switch)
