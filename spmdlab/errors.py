"""Exceptions raised by spmdlab.

Every class subclasses a built-in, so ``except ValueError`` keeps working in ported code.
Messages name the call, the worker (1-based), the rule that was broken and the value.
"""

__all__ = [
    "SpmdDeadlockError",
    "SpmdError",
    "SpmdIndexError",
    "SpmdMismatchError",
    "SpmdPeerError",
    "SpmdTimeoutError",
    "SpmdTypeError",
    "SpmdValueError",
]


class SpmdError(Exception):
    """Base class of every spmdlab error.

    Examples
    --------
    >>> try:
    ...     spmd_plus("text")
    ... except SpmdError as error:
    ...     print(type(error).__name__)
    SpmdTypeError

    MATLAB
    ------
    an ``MException`` raised on the workers of an ``spmd`` block
    """


class SpmdValueError(SpmdError, ValueError):
    """An argument has the right type but a bad value (out-of-range worker, negative tag).

    Examples
    --------
    >>> spmd_plus(1.0, destination=5)
    Traceback (most recent call last):
        ...
    spmdlab.errors.SpmdValueError: spmd_plus (worker 1 of 1): 'destination' must be a worker number from 1 to 1 (got 5); worker numbers are 1-based

    MATLAB
    ------
    MATLAB's error for a destination outside ``1:spmdSize``
    """


class SpmdTypeError(SpmdError, TypeError):
    """A value of a type the call cannot handle (a string to sum, an unpicklable object).

    Examples
    --------
    >>> isinstance(SpmdTypeError("x"), TypeError)
    True
    >>> spmd_broadcast(1.5, 0)
    Traceback (most recent call last):
        ...
    spmdlab.errors.SpmdTypeError: spmd_broadcast (worker 1 of 1): 'source' must be a worker number from 1 to 1 (got 1.5 that is a float)

    MATLAB
    ------
    MATLAB's error for an argument of the wrong class
    """


class SpmdIndexError(SpmdError, IndexError):
    """A subscript outside the array (a global index of a codistributed array).

    Examples
    --------
    >>> D = distribute(np.zeros((3, 4)))
    >>> D[3, 0]
    Traceback (most recent call last):
        ...
    spmdlab.errors.SpmdIndexError: CodistributedArray[(3, 0)] (worker 1 of 1): index 3 is out of bounds for axis 0 with size 3
    >>> issubclass(SpmdIndexError, IndexError)
    True

    MATLAB
    ------
    MATLAB's "Index exceeds the number of array elements" for a codistributed array
    """


class SpmdMismatchError(SpmdValueError):
    """Workers passed values that a collective cannot combine (shapes, dtypes, structure).

    Examples
    --------
    Workers whose values cannot be combined (here worker 1's shape differs from the
    others') all raise it; at one worker there is nothing to differ:

    >>> shape = (2,) if spmd_index() == 1 else (3,)
    >>> spmd_plus(np.zeros(shape)).shape
    (2,)
    >>> issubclass(SpmdMismatchError, ValueError)
    True

    MATLAB
    ------
    MATLAB's error for ``spmdPlus`` of arrays whose sizes differ between workers
    """

    #: What differs between the workers' calls, most telling first (``"call"`` when
    #: they made different calls; else fields such as ``"dtype"``, ``"shape"``).
    differ: tuple = ()

    #: Each worker's compared fields (``"call"``, ``"dtype"``, ``"fcn"``, ...), in worker
    #: order; empty where the mismatch was not found in an exchange of descriptions.
    fields: tuple = ()


class SpmdPeerError(SpmdError, RuntimeError):
    """A collective or receive can never complete because a worker has left the program.

    Examples
    --------
    >>> issubclass(SpmdPeerError, RuntimeError)
    True

    MATLAB
    ------
    MATLAB's error when a worker of the pool has shut down
    """


class SpmdDeadlockError(SpmdPeerError):
    """A receive can never complete: the workers it waits for all wait themselves, for
    each other (a receive whose senders wait, a collective that one of them has not
    joined). Raised by the receive, on every worker whose receive is part of it, after
    ``SPMDLAB_DEADLOCK_CHECK`` seconds (1 by default) and a second look.

    Examples
    --------
    Two workers that each wait for the other's message first:

    >>> issubclass(SpmdDeadlockError, SpmdPeerError)
    True

    MATLAB
    ------
    none: MATLAB's ``spmdReceive`` waits for ever
    """


class SpmdTimeoutError(SpmdError, TimeoutError):
    """A wait exceeded ``SPMDLAB_TIMEOUT`` seconds.

    Examples
    --------
    With ``SPMDLAB_TIMEOUT=30`` a collective that waits 30 s for a worker raises it:

    >>> issubclass(SpmdTimeoutError, TimeoutError)
    True

    MATLAB
    ------
    none: a MATLAB spmd block waits without limit
    """
