"""Splitting the global mini-batch over the workers."""

import numpy as np

from ..errors import SpmdTypeError, SpmdValueError

__all__ = ["worker_mini_batch_sizes"]


def worker_mini_batch_sizes(mini_batch_size, num_workers):
    """Each worker's share of a global mini-batch: ``floor(B/N)``, remainder to the first.

    ``worker_mini_batch_sizes(10, 3) == [4, 3, 3]``, as MATLAB's examples compute it.
    Raises SpmdValueError when the mini-batch is smaller than the number of workers (some
    worker would get nothing to train on).
    """
    for name, value in (("mini_batch_size", mini_batch_size), ("num_workers", num_workers)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise SpmdTypeError(f"worker_mini_batch_sizes: '{name}' must be an int (got "
                                f"{value!r} that is a {type(value).__name__})")
        if value < 1:
            raise SpmdValueError(f"worker_mini_batch_sizes: '{name}' must be at least 1 "
                                 f"(got {value})")
    if mini_batch_size < num_workers:
        raise SpmdValueError(
            f"worker_mini_batch_sizes: a mini-batch of {mini_batch_size} cannot be split "
            f"over {num_workers} workers (each needs at least one observation); use a "
            f"mini-batch of at least {num_workers}")
    base, extra = divmod(int(mini_batch_size), int(num_workers))
    return [base + 1 if k < extra else base for k in range(int(num_workers))]
