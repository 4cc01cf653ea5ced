"""Counting what each worker's calls cost, for the scaling model (scripts/bench_scale.py).

With ``SPMDLAB_COUNT=1`` the collectives, messages and waits add here, per worker: the
MPI messages and bytes it sends and receives (a collective counted as the bytes its
buffers give to and take from the other workers), the requests its waits test, the
agreement records it examines, and the exit notices of the whole program. The fast
paths then take the general path (where the counting is), so counts are of the same
work at another speed. Off, nothing counts.
"""

from . import _env

ON = bool(_env.COUNT)

COUNTS = dict(sent_bytes=0, received_bytes=0, sent_messages=0, received_messages=0,
              waits=0, requests_tested=0, records_examined=0)
# The exit notices (``_world``) over the whole program, from its start to its end: the
# receives posted for them, the notices sent and received. Never reset (``reset`` is for
# calls).
NOTICES = dict(posted=0, sent=0, received=0)


def add(**counts):
    for name, value in counts.items():
        COUNTS[name] += value


def reset():
    for name in COUNTS:
        COUNTS[name] = 0


def snapshot():
    return dict(COUNTS)


def collective(sent, received, messages=1):
    """A collective moved ``sent`` bytes of this worker's to others and ``received`` to
    it, in ``messages`` exchanges each way (as its buffers say; MPI's own algorithm may
    forward the same bytes more than once inside)."""
    COUNTS["sent_bytes"] += sent
    COUNTS["received_bytes"] += received
    COUNTS["sent_messages"] += messages
    COUNTS["received_messages"] += messages


def waited():
    """A wait that did not end at once: it watches its own request and the exit notices
    of this worker's neighbours in the notices' tree (``_world``: three at most)."""
    from . import _world
    from ._mpi import MPI
    COUNTS["waits"] += 1
    COUNTS["requests_tested"] += 1 + sum(1 for r in _world.notice_requests()
                                         if r != MPI.REQUEST_NULL)


def p2p(sent=0, received=0):
    """A point-to-point message of this many bytes sent or received."""
    if sent:
        COUNTS["sent_bytes"] += sent
        COUNTS["sent_messages"] += 1
    if received:
        COUNTS["received_bytes"] += received
        COUNTS["received_messages"] += 1


def steps(size):
    """ceil(log2 size): the rounds of MPI's recursive-doubling and tree algorithms."""
    return max(size - 1, 0).bit_length()
