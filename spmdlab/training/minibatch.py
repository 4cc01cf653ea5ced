"""Splitting the global mini-batch over the workers."""

from __future__ import annotations

from typing import Any, Callable, Iterator, List, Literal, Optional

import numpy as np

from ..errors import SpmdTypeError, SpmdValueError

__all__ = ["MiniBatchQueue", "worker_mini_batch_sizes"]


def worker_mini_batch_sizes(mini_batch_size: int, num_workers: int) -> List[int]:
    """Each worker's share of a global mini-batch: ``floor(B/N)``, remainder to the first.

    ``worker_mini_batch_sizes(10, 3) == [4, 3, 3]``, as MATLAB's examples compute it.
    Raises SpmdValueError when the mini-batch is smaller than the number of workers (some
    worker would get nothing to train on).

    Parameters
    ----------
    mini_batch_size
        The global mini-batch (every worker's share added up).
    num_workers
        The number of workers (``spmd_size()``).

    Examples
    --------
    >>> worker_mini_batch_sizes(10, 3)
    [4, 3, 3]
    >>> worker_mini_batch_sizes(128, spmd_size())
    [128]

    MATLAB
    ------
    ``workerMiniBatchSize = floor(miniBatchSize ./ repmat(N, 1, N));`` then the remainder,
    one each, to the first workers
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


class MiniBatchQueue:
    """Mini-batches from a datastore (MATLAB ``minibatchqueue``).

    ``mini_batch_fcn(*columns)`` receives one list per part of an observation (inputs,
    labels, ...) and returns the mini-batch (a value or a tuple); by default every
    column is stacked (``numpy.stack``) and made a torch tensor (numpy without torch;
    a column of names, such as an ``ImageDatastore``'s labels, stays a numpy array).
    ``output_environment`` is ``"auto"`` (a GPU if one is usable), ``"cpu"`` or ``"gpu"``
    (the default function's tensors; with ``"gpu"`` also the torch tensors that
    ``mini_batch_fcn`` returns, an error where no GPU is usable);
    ``partial_mini_batch`` ``"return"`` or ``"discard"`` decides the last, short
    mini-batch. With ``dispatch_in_background`` a thread prepares the next mini-batch
    while the model computes. Iterate it (``for x, y in mbq``) or call ``has_data()``
    and ``next()`` as in MATLAB; ``shuffle()`` and ``reset()`` start a new epoch.

    Parameters
    ----------
    datastore
        The observations: a datastore (usually this worker's ``partition``).
    mini_batch_size
        This worker's mini-batch (``worker_mini_batch_sizes(B, N)[k - 1]``).
    mini_batch_fcn
        ``fcn(*columns)`` makes a mini-batch from lists of observations' parts.
    output_environment
        Where mini-batches go: "auto" (a GPU if usable), "cpu" or "gpu".
    partial_mini_batch
        "return" or "discard" the last, short mini-batch.
    dispatch_in_background
        Prepare the next mini-batch in a thread while the model computes.

    Examples
    --------
    >>> ds = ArrayDatastore(np.arange(10.0).reshape(5, 2), np.array([0, 1, 0, 1, 1]))
    >>> mbq = MiniBatchQueue(ds, 2, output_environment="cpu")
    >>> while mbq.has_data():
    ...     x, y = mbq.next()
    ...     print(tuple(x.shape), y.tolist())
    (2, 2) [0, 1]
    (2, 2) [0, 1]
    (1, 2) [1]

    MATLAB
    ------
    ``mbq = minibatchqueue(ds, MiniBatchSize=2, MiniBatchFcn=@fcn); while hasdata(mbq), [X, T] = next(mbq); end``
    """

    def __init__(self, datastore: Any, mini_batch_size: int = 128, *,
                 mini_batch_fcn: Optional[Callable[..., Any]] = None,
                 output_environment: Literal["auto", "cpu", "gpu"] = "auto",
                 partial_mini_batch: Literal["return", "discard"] = "return",
                 dispatch_in_background: bool = False) -> None:
        if isinstance(mini_batch_size, bool) or not isinstance(mini_batch_size, (int, np.integer)) \
                or mini_batch_size < 1:
            raise SpmdValueError(f"MiniBatchQueue: 'mini_batch_size' must be a positive int "
                                 f"(got {mini_batch_size!r})")
        # string values are case-insensitive, as MATLAB's (and training_options')
        if isinstance(output_environment, str):
            output_environment = output_environment.lower()  # type: ignore[assignment]
        if isinstance(partial_mini_batch, str):
            partial_mini_batch = partial_mini_batch.lower()  # type: ignore[assignment]
        if output_environment not in ("auto", "cpu", "gpu"):
            raise SpmdValueError(f"MiniBatchQueue: 'output_environment' must be 'auto', "
                                 f"'cpu' or 'gpu' (got {output_environment!r})")
        if partial_mini_batch not in ("return", "discard"):
            raise SpmdValueError(f"MiniBatchQueue: 'partial_mini_batch' must be 'return' or "
                                 f"'discard' (got {partial_mini_batch!r})")
        if mini_batch_fcn is not None and not callable(mini_batch_fcn):
            raise SpmdTypeError(f"MiniBatchQueue: 'mini_batch_fcn' must be callable "
                                f"(got {mini_batch_fcn!r})")
        self.datastore = datastore
        self.mini_batch_size = int(mini_batch_size)
        self.mini_batch_fcn = mini_batch_fcn
        self.output_environment = output_environment
        self.partial_mini_batch = partial_mini_batch
        self.dispatch_in_background = bool(dispatch_in_background)
        self._device = None
        self.reset()

    def _batches(self):
        n = len(self.datastore)
        size = self.mini_batch_size
        stop = n - n % size if self.partial_mini_batch == "discard" else n
        for start in range(0, stop, size):
            items = [self.datastore[i] for i in range(start, min(start + size, stop))]
            yield self._make(items)

    def _make(self, items):
        columns = list(zip(*items)) if isinstance(items[0], tuple) else [items]
        if self.mini_batch_fcn is not None:
            batch = self.mini_batch_fcn(*[list(c) for c in columns])
            batch = batch if isinstance(batch, tuple) else (batch,)
            if self.output_environment == "gpu":  # asked for: the function's tensors too
                batch = tuple(self._place(b) if hasattr(b, "is_cuda") else b
                              for b in batch)
            return batch
        from .datastores import stack

        return tuple(self._place(stack(c, "MiniBatchQueue")) for c in columns)

    def _place(self, array):
        import sys

        torch = sys.modules.get("torch")
        if torch is None:
            return array
        if isinstance(array, np.ndarray) and array.dtype.kind not in "biufc":
            return array  # labels as names (an ImageDatastore's folders): torch has no str
        tensor = array if isinstance(array, torch.Tensor) else \
            torch.from_numpy(np.ascontiguousarray(array))
        if self._device is None:
            from .helpers import can_use_gpu

            if self.output_environment == "gpu" and not can_use_gpu():
                raise SpmdValueError("MiniBatchQueue: output_environment='gpu' but no GPU "
                                     "is usable here")
            use_gpu = self.output_environment == "gpu" or (
                self.output_environment == "auto" and can_use_gpu())
            self._device = torch.device("cuda") if use_gpu else torch.device("cpu")
        return tensor.to(self._device) if self._device.type != "cpu" else tensor

    def reset(self) -> None:
        """Start again from the first mini-batch (same order)."""
        self._stop_prefetch()
        self._iter = self._batches()
        self._next = None
        self._done = False
        self._failed = None  # the error reading the next mini-batch, raised by next()
        if self.dispatch_in_background:
            self._start_prefetch()
        else:
            self._advance()

    def shuffle(self, seed: Optional[int] = None) -> None:
        """Shuffle the observations and start again (MATLAB ``shuffle(mbq)``)."""
        if not callable(getattr(self.datastore, "shuffle", None)):  # an AttributeError
            raise SpmdTypeError(f"MiniBatchQueue.shuffle: the queue's data is a "
                                f"{type(self.datastore).__name__}, which cannot be "
                                f"shuffled; make the queue of a datastore, such as "
                                f"ArrayDatastore(x, labels)")
        self.datastore = self.datastore.shuffle(seed)
        self.reset()

    def partition(self, n: int, index: int) -> MiniBatchQueue:
        """A queue over part ``index`` (1-based) of ``n`` parts of the datastore."""
        from .datastores import partition

        return MiniBatchQueue(partition(self.datastore, n, index), self.mini_batch_size,
                              mini_batch_fcn=self.mini_batch_fcn,
                              output_environment=self.output_environment,
                              partial_mini_batch=self.partial_mini_batch,
                              dispatch_in_background=self.dispatch_in_background)

    def _advance(self):
        # the next mini-batch is read ahead; an error reading it is raised by the next()
        # that would have returned it, so that it is that mini-batch's error
        try:
            self._next = next(self._iter)
        except StopIteration:
            self._next, self._done = None, True
        except Exception as exc:
            self._next, self._failed = None, exc

    # background dispatch: one thread keeps up to two mini-batches ready
    def _start_prefetch(self):
        import queue
        import threading

        self._ready = queue.Queue(maxsize=2)
        self._quit = threading.Event()
        source, ready, quit_ = self._iter, self._ready, self._quit

        def offer(item):  # False once the consumer has gone (reset, close)
            while not quit_.is_set():
                try:
                    ready.put(item, timeout=0.1)
                    return True
                except queue.Full:
                    continue
            return False

        def work():
            try:
                for batch in source:
                    if not offer(("batch", batch)):
                        return
                offer(("end", None))
            except BaseException as exc:  # handed to the caller of next()
                offer(("error", exc))

        self._thread = threading.Thread(target=work, name="spmdlab-minibatch", daemon=True)
        self._thread.start()
        self._take()

    def _take(self):
        kind, value = self._ready.get()
        if kind == "error":  # raised by the next() that would have returned the batch
            self._next, self._failed = None, value
            return
        self._next, self._done = (value, False) if kind == "batch" else (None, True)

    def _stop_prefetch(self):
        if getattr(self, "_thread", None) is not None:
            self._quit.set()
            self._thread.join()
            self._thread = None

    def close(self) -> None:
        """Stop the background dispatch thread (if any); the queue can be reset() after."""
        self._stop_prefetch()
        self._done = True

    def has_data(self) -> bool:
        """Whether ``next()`` has a mini-batch to return (MATLAB ``hasdata``)."""
        return not self._done

    def next(self) -> Any:
        """The next mini-batch: a tuple with one entry per output (MATLAB ``next``).

        Raises SpmdValueError at the end of the data (``has_data()`` is False).
        """
        if self._done:
            raise SpmdValueError("MiniBatchQueue.next: no more mini-batches; call reset() "
                                 "or shuffle() to start a new epoch")
        if self._failed is not None:
            failed, self._failed, self._done = self._failed, None, True
            raise failed
        batch = self._next
        if self.dispatch_in_background:
            self._take()
        else:
            self._advance()
        return batch

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        return self.next()
