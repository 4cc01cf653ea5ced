"""What crosses the wire by reference: queues on one side used from the other.

A queue the client made (``DataQueue()`` at the prompt) travels to the workers as a
reference; a worker's ``send`` on it goes back over its connection to the client, where
the queue's listeners run. A queue a worker made inside a block travels to the client as
a reference too; the client's ``send`` on it goes to that worker, into its queue (how a
Stop button reaches every worker). The same pickle means the real queue on its own side
and a reference on the other: ``side`` says which side this process is.
"""

from typing import Any, Dict, Optional

# This process's side: set by the client (``_client``) or by the worker loop (``_worker``).
side: Optional[str] = None  # "client" or "worker"
client_queues: Dict[int, Any] = {}  # on the client: queue id -> the client's queue
connection: Any = None  # on a worker: its connection to the client
client_pool: Any = None  # on the client: the pool the workers' references go to
namespace: Dict[str, Any] = {}  # on a worker: its variables (what the blocks assign)


def variable(name, what):
    """Unpickled on a worker: its own value of the pool's variable ``name`` (a client
    Composite's element, a distributed array's codistributed self)."""
    from ..errors import SpmdTypeError, SpmdValueError

    if side != "worker":  # (pickled or copied on the client: it was a bare RuntimeError)
        raise SpmdTypeError(f"a {what} of a pool can only be sent to that pool's workers: "
                            f"pickle.loads and copy.copy of one on the client are refused "
                            f"(gather it first)")
    if name not in namespace:
        raise SpmdValueError(f"this worker holds no element of the {what} sent to it")
    return namespace[name]


def client_queue(qid, kind, closed=False):
    """Unpickled on the client: the queue itself; on a worker: a reference to it
    (``closed``: whether the client had closed it when it was sent)."""
    if side == "client":
        queue = client_queues.get(qid)
        if queue is not None:
            return queue
    return ClientQueueRef(qid, kind, closed)


class ClientQueueRef:
    """On a worker: the client's queue. ``send`` delivers to the client's listeners (or
    its ``poll``), in the order sent, over this worker's connection."""

    __slots__ = ("qid", "kind", "closed")

    def __init__(self, qid, kind, closed=False):
        self.qid, self.kind, self.closed = qid, kind, closed

    def send(self, data: Any) -> None:
        """Send ``data`` to the client's queue. Raises SpmdValueError when the client had
        closed the queue before sending it here, SpmdTypeError for a value that cannot be
        pickled (as a worker's own queue does)."""
        if connection is None:
            raise RuntimeError("this queue belongs to a pool's client, and this process is "
                               "not one of its workers")
        from .. import _world
        from ._wire import Closed
        from ..errors import SpmdTypeError, SpmdValueError

        call = f"{self.kind}.send ({_world.current().who()})"
        if self.closed:
            raise SpmdValueError(f"{call}: the queue was closed by its owner, the client; "
                                 f"items can no longer be sent to it")
        try:
            connection.send(("queue", self.qid, data))
        except Closed:
            raise
        except Exception as exc:  # the value did not pickle: nothing was written
            raise SpmdTypeError(f"{call}: cannot send a value of type {type(data).__name__}: "
                                f"it cannot be pickled ({exc})") from None

    def after_each(self, fn):
        raise TypeError("after_each: this queue's listeners run on the client; register "
                        "them there")

    def poll(self, timeout: float = 0.0, default: Any = None) -> Any:
        raise TypeError("poll: only the client, which owns this queue, can poll it")

    def __reduce__(self):
        return client_queue, (self.qid, self.kind, self.closed)

    def __repr__(self):
        return f"<the client's {self.kind} #{self.qid}>"


def worker_queue(owner, tag, kind):
    """Unpickled on a worker: its own queue (or, on another worker, an error on use);
    on the client: a reference whose ``send`` goes to the owner."""
    if side == "worker":
        from .. import _world
        from ..queues import _hub

        queue = _hub.channel(_world.WORLD).queues.get(tag)
        if queue is not None:
            return queue
    return WorkerQueueRef(owner, tag, kind, client_pool if side == "client" else None)


class WorkerQueueRef:
    """On the client: a worker's queue (made inside a block). ``send`` puts the item
    into that worker's queue, where its program polls it or its listeners run."""

    __slots__ = ("owner", "tag", "kind", "pool", "generation")

    def __init__(self, owner, tag, kind, pool=None):
        self.owner, self.tag, self.kind, self.pool = owner, tag, kind, pool
        # the pool's workers when it came: a restart's new workers hold no such queue
        self.generation = None if pool is None else pool._generation

    def send(self, data: Any) -> None:
        if side != "client" or self.pool is None:
            raise RuntimeError(f"this queue belongs to worker {self.owner}; send to it "
                               f"from the client or from that worker")
        if self.pool.closed or self.pool._generation != self.generation:
            from ..errors import SpmdError

            # (it used to go to whichever pool was open now, into no queue there)
            what = "deleted" if self.pool.closed else "restarted"
            raise SpmdError(f"{self.kind}.send: worker {self.owner}'s queue belongs to a "
                            f"pool that has been {what} (its workers have ended); make "
                            f"the queues again in a block of the current pool")
        self.pool._to_worker_queue(self.owner, self.tag, data)

    def __reduce__(self):
        return worker_queue, (self.owner, self.tag, self.kind)

    def __repr__(self):
        return f"<worker {self.owner}'s {self.kind} (tag {self.tag})>"
