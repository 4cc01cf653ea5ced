"""Exceptions raised by spmdlab.

Every class subclasses a built-in, so ``except ValueError`` keeps working in ported code.
Messages name the call, the worker (1-based), the rule that was broken and the value.
"""

__all__ = [
    "SpmdError",
    "SpmdMismatchError",
    "SpmdPeerError",
    "SpmdTimeoutError",
    "SpmdTypeError",
    "SpmdValueError",
]


class SpmdError(Exception):
    """Base class of every spmdlab error."""


class SpmdValueError(SpmdError, ValueError):
    """An argument has the right type but a bad value (out-of-range worker, negative tag)."""


class SpmdTypeError(SpmdError, TypeError):
    """A value of a type the call cannot handle (a string to sum, an unpicklable object)."""


class SpmdMismatchError(SpmdValueError):
    """Workers passed values that a collective cannot combine (shapes, dtypes, structure)."""


class SpmdPeerError(SpmdError, RuntimeError):
    """A collective or receive can never complete because a worker has left the program."""


class SpmdTimeoutError(SpmdError, TimeoutError):
    """A wait exceeded ``SPMDLAB_TIMEOUT`` seconds."""
