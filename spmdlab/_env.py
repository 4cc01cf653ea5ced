"""Every environment variable spmdlab reads, in one place (README, "Environment variables").

A keyword argument, where one exists, wins over the variable.
"""

import os

PREFIX = "SPMDLAB_"


def get(name, default=None, *, cast=str):
    """The value of ``SPMDLAB_<name>`` cast by ``cast``, or ``default`` when unset or empty."""
    raw = os.environ.get(PREFIX + name, "").strip()
    if not raw:
        return default
    try:
        return cast(raw)
    except ValueError:
        raise ValueError(f"{PREFIX}{name} must be {cast.__name__} (got {raw!r})") from None


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

# Seconds a blocking spmdlab call may wait for other workers before it raises
# SpmdTimeoutError; None waits as long as every worker is still running.
TIMEOUT = get("TIMEOUT", None, cast=float)
# Seconds after which a worker waiting on others at the end of the program says, once,
# which workers it waits for (0: never).
STALL_WARNING = get("STALL_WARNING", 60.0, cast=float)
# Whether the MPI library reads GPU memory itself (None: ask the library at run time).
CUDA_AWARE = get("CUDA_AWARE", None, cast=tristate)
# Payloads up to this many bytes ride inside the agreement record (one MPI call in all);
# None: as many as the record holds (1 KiB among up to 7 workers, less among more).
INLINE_BYTES = get("INLINE_BYTES", None, cast=int)
# 0 leaves uncaught exceptions to Python: the job may then hang at the next collective.
ABORT_ON_ERROR = get("ABORT_ON_ERROR", True, cast=tristate)
# Whether the first worker of each host starts the watcher that names a worker killed
# without a word (see _watchdog): on unless SPMDLAB_WATCHDOG=0.
WATCHDOG = get("WATCHDOG", True, cast=tristate)
