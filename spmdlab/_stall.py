"""Where every worker is now: call sites, the answering thread, stall reports.

A thread of spmdlab's on every worker answers "where are you?" from the others: the
program thread's current line (or the spmdlab call it waits in) and its last
collective. A collective that has waited SPMDLAB_STALL_WARNING seconds asks, and says
who has not arrived and where each of them is; a SPMDLAB_TIMEOUT error carries the same
report (``_wait``). The questions and answers travel on ``_world.CTL``.
"""

import contextlib
import itertools
import os
import runpy
import struct
import sys
import threading
import time

import numpy as np

from . import _env, _world
from ._mpi import MPI

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
_SKIPPED = (_PACKAGE, os.path.dirname(os.path.abspath(np.__file__)) + os.sep)
# (runpy's: a pool's worker, python -m spmdlab.pool._worker, has no user's frame below
# the block's; neither has python -m pkg under mpiexec below the module's)
_SKIPPED_FILES = (contextlib.__file__, threading.__file__, runpy.__file__, "<frozen runpy>")
# (on a pool's worker, while a block runs) where its code is, ``name:line``: the site of
# a call made outside it (the end of spmd(n), which the worker's loop makes)
block_site = None
PROGRAM = threading.get_ident()  # the program thread (the one that imported spmdlab)
# (call, scope, since, kind) while the program thread waits in a spmdlab call (``_wait``
# sets it): what this worker answers, and what the answering thread reports when it
# stalls. ``kind``: what the wait needs, for the deadlock check (``deadlock``):
# ("recv", world ranks of the senders, tag or None) for a receive, COLLECTIVE for a
# collective of ``scope``, None for anything else (a send, data on its way).
waiting_in = None
COLLECTIVE = ("coll",)


# -- call sites -------------------------------------------------------------------------------


def call_site():
    """``file:line`` of the user's code that made the current spmdlab call: the first
    frame outside spmdlab, its path relative to the current folder where it lies below it.
    """
    return call_site_of(sys._getframe(1))


def call_site_of(frame):
    """``call_site`` from ``frame`` outwards (the top frame of another thread, say)."""
    # spmdlab's frames, contextlib's that its context managers run in, threading's that
    # it waits in (``PollableDataQueue.poll``), and numpy's that hand a codistributed
    # array's operation over (``np.linalg.norm(D)``: the user's line)
    while frame is not None and (frame.f_code.co_filename.startswith(_SKIPPED) or
                                 frame.f_code.co_filename in _SKIPPED_FILES):
        frame = frame.f_back
    if frame is None:
        return block_site or "?"
    return f"{_relative(frame.f_code.co_filename)}:{frame.f_lineno}"


def _relative(path):
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return path
    return path if relative.startswith(os.pardir) else relative


# -- this worker's answer ----------------------------------------------------------------------


def _where():
    """This worker's answer: ``waits|call|n|site|wait|needs|counts`` (``wait``: which
    wait, ``needs``: what it waits for, see ``_needs``; ``counts``: the collectives so
    far of each scope entered, ``RANKS=n;...``) or ``runs|file:line in f()|n|last``."""
    frame = sys._current_frames().get(PROGRAM)
    scope = _world._stack[-1] if _world._stack else None
    ex = scope._exchange if scope is not None else None
    count, last = (ex.calls, ex.last) if ex is not None else (0, "none")
    state = waiting_in
    if state is not None:
        counts = ";".join(f"{_ranks_text(s.world_ranks)}="
                          f"{s._exchange.calls if s._exchange is not None else 0}"
                          for s in list(_world._stack))
        return f"waits|{state[0]}|{count}|{call_site_of(frame)}|{state[2]!r}|" \
            f"{_needs(state)}|{counts}"
    while frame is not None and (frame.f_code.co_filename.startswith(_PACKAGE) or
                                 frame.f_code.co_filename in _SKIPPED_FILES):
        frame = frame.f_back  # inside spmdlab (or a lock it waits on) but not waiting:
        # the user's line
    if frame is None:
        return f"runs|?|{count}|{last}"
    code = frame.f_code
    return f"runs|{_relative(code.co_filename)}:{frame.f_lineno} in {code.co_name}()|" \
        f"{count}|{last}"


def _needs(state):
    """What a wait needs, for the deadlock check: ``recv:RANKS:TAG`` (a message from one
    of these world ranks), ``item:RANKS:*`` (an item of a queue, sent by one of them: a
    ``poll`` without end), ``coll:RANKS:N`` (the other workers of this scope in its
    collective number N), or ``-`` (anything else: a send, data on its way, and any
    wait while another thread of the program runs, which might send)."""
    kind = state[3] if len(state) > 3 else None
    if kind is None or any(t.is_alive() and t.ident != PROGRAM and _may_send(t)
                           for t in threading.enumerate()):
        return "-"
    if kind is COLLECTIVE:
        ex = state[1]._exchange
        return f"coll:{_ranks_text(state[1].world_ranks)}:{ex.calls if ex else 0}"
    return f"{kind[0]}:{_ranks_text(kind[1])}:{'*' if kind[2] is None else kind[2]}"


def _may_send(thread):
    """Whether ``thread`` (not the program's) might send a message: a thread of the
    user's, daemon or not, or spmdlab's receiver thread while a DataQueue of this worker
    has listeners (they run in it, and may send); spmdlab's other threads never do."""
    if not thread.name.startswith("spmdlab-"):
        return True
    queues = sys.modules.get(__package__ + ".queues")
    return thread.name == "spmdlab-queues" and queues is not None and \
        any(chan.pinned for chan in list(queues._hub.channels.values()))


def _ranks_text(ranks):
    """'0-3,6' for world ranks 0, 1, 2, 3, 6."""
    runs: list = []
    for r in sorted(ranks):
        if runs and r == runs[-1][1] + 1:
            runs[-1][1] = r
        else:
            runs.append([r, r])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


def _ranks(text):
    out = set()
    for part in text.split(","):
        a, _, b = part.partition("-")
        out.update(range(int(a), int(b or a) + 1))
    return out


_answers: list = []  # answers in flight (kept alive until sent)
_answer_lock = threading.Lock()


def _answer_questions():
    """Answer every worker that asked where this one is."""
    status = MPI.Status()
    ctl = _world.CTL
    while True:
        message = ctl.Improbe(MPI.ANY_SOURCE, _world.ASK_TAG, status)
        if message is None:
            break
        question = bytearray(status.Get_count(MPI.BYTE))
        message.Recv(question)
        answer = bytes(question) + _where().encode()[:4000]  # (the question's number first)
        with _answer_lock:  # the answering thread, or a wait that asks in turn
            _answers[:] = [(r, b) for r, b in _answers if not r.Test()]
            _answers.append((ctl.Isend(answer, status.Get_source(), _world.HERE_TAG),
                             answer))


# -- the answering thread ------------------------------------------------------------------------

_answering = None
_stop = False
_wake = threading.Event()


def _answer_forever():
    reported = None
    while not _stop:
        try:
            _answer_questions()
            _world.poll_exits()  # pass on exit notices while the program computes
            state = waiting_in
            if state is not None and state is not reported and _env.STALL_WARNING and \
                    time.monotonic() - state[2] > _env.STALL_WARNING:
                reported = state
                stall_report(state[1], state[0], time.monotonic() - state[2])
        except Exception:  # MPI is finalizing under it: nothing left to answer
            return
        _wake.wait(0.05)


@_world.at_start
def _start_answering(places):
    """Among several workers with threads allowed, answer questions from a thread."""
    global _answering
    if _world.SIZE > 1 and MPI.Query_thread() >= MPI.THREAD_MULTIPLE:
        _answering = threading.Thread(target=_answer_forever, name="spmdlab-where",
                                      daemon=True)
        _answering.start()


def stop_answering():
    """Stop the answering thread (at the end of the program)."""
    global _stop
    _stop = True
    _wake.set()
    if _answering is not None and _answering is not threading.current_thread():
        _answering.join()
    if _world.SIZE > 1:  # answers that came after their round gave up: none left unreceived
        status = MPI.Status()
        while True:
            message = _world.CTL.Improbe(MPI.ANY_SOURCE, _world.HERE_TAG, status)
            if message is None:
                break
            message.Recv(bytearray(status.Get_count(MPI.BYTE)))


# -- asking ---------------------------------------------------------------------------------------

_asks: list = []  # questions in flight (kept alive until sent)
_asking = threading.Lock()  # one question round at a time (the answers share a tag)
_rounds = itertools.count(1)  # each round's number: answers to an earlier one are dropped
_ROUND = struct.Struct("<q")


def who_is_where(scope, patience=2.0):
    """Ask the scope's other workers where they are; returns ``({world rank: answer},
    [world ranks that did not answer and have not finished])``."""
    with _asking:
        return _ask([r for r in scope.world_ranks if r != _world.RANK], patience)


def _ask(others, patience, done=None):
    """(``done``: a look of the deadlock check calls it as it waits for the answers, and
    stops once it comes true.)"""
    ctl = _world.CTL
    question = _ROUND.pack(next(_rounds))
    _asks[:] = [(r, b) for r, b in _asks if not r.Test()]
    _asks.extend((ctl.Isend(question, r, _world.ASK_TAG), question) for r in others)
    answers = {}
    status = MPI.Status()
    deadline = time.monotonic() + patience
    while len(answers) < len(others) and time.monotonic() < deadline:
        _answer_questions()  # others may be asking at the same time
        message = ctl.Improbe(MPI.ANY_SOURCE, _world.HERE_TAG, status)
        if message is None:
            if done is not None and done():
                break
            time.sleep(0.001)
            continue
        buf = bytearray(status.Get_count(MPI.BYTE))
        message.Recv(buf)
        if status.Get_source() in others and buf[:_ROUND.size] == question:
            answers[status.Get_source()] = buf[_ROUND.size:].decode(errors="replace")
    late = [r for r in others if r not in answers and r not in _world.exited]
    return answers, late


def where_everyone_is(scope):
    """The report of a stalled collective: who has not arrived, and where each is."""
    answers, late = who_is_where(scope)
    mine = _where().split("|")
    arrived, away = [], []
    for rank, answer in sorted(answers.items()):
        k = scope.world_ranks.index(rank) + 1
        state, where, count, extra = (answer.split("|") + ["", "", ""])[:4]
        if state == "waits" and count == mine[2] and where == mine[1]:
            arrived.append(k)
        elif state == "waits":
            away.append(f"worker {k} waits in {where} (collective #{count}) at {extra}")
        else:
            away.append(f"worker {k} is at {where}, not in a spmdlab call (its last "
                        f"collective: #{count} {extra})")
    for rank in late:
        away.append(f"worker {scope.world_ranks.index(rank) + 1} does not answer (its "
                    f"Python is blocked, in C code that holds the GIL or in a system call)")
    parts = away or ["every worker has arrived (the data is still moving)"]
    if arrived:
        parts.append(f"{_world.workers_text([k - 1 for k in arrived])} "
                     f"{'waits' if len(arrived) == 1 else 'wait'} here too")
    return "; ".join(parts)


def stall_report(scope, call, elapsed):
    """Say, on stderr, that ``call`` has waited ``elapsed`` seconds, and why."""
    text = where_everyone_is(scope)
    count = scope._exchange.calls if scope._exchange is not None else 0
    site = call_site_of(sys._current_frames().get(PROGRAM))
    text = (f"spmdlab: {call} ({scope.who()}, collective #{count} at {site}) has waited "
            f"{elapsed:.0f} s: {text}; still waiting (SPMDLAB_STALL_WARNING="
            f"{_env.STALL_WARNING:g} s; SPMDLAB_TIMEOUT turns the wait into an error)\n")
    plugin = sys.modules.get("spmdlab.pytest_plugin")
    if plugin is not None:  # under pytest: past its capture, or the test's output keeps it
        plugin.to_terminal(text)
    else:
        sys.stderr.write(text)
        sys.stderr.flush()


# -- deadlocks among living workers -------------------------------------------------------------

# The receive being checked: [its state, when to look next, what the last look saw, the
# time from that look to the next]
_looked: list = [None, 0.0, None, 0.0]


def deadlock(state, done):
    """For the program thread's receive that has waited since ``state[2]``: the account
    of the deadlock it is part of, or None (no deadlock seen, not time to look, or
    ``done()``, which the look calls as it waits for answers, came true: a receive
    untested while it looks would be answered as waiting, however long it looks).

    It looks SPMDLAB_DEADLOCK_CHECK seconds into the wait, then again after as long if
    the look saw a change, else after twice as long as last time (16 times at most): it
    asks the workers concerned where they are (those that could send, and those
    that they in turn wait for), and concludes on two looks in a row that found every one
    of them in the same wait (the same call begun at the same time), with a set of them
    where each waits for a message from others of the set only, or in a collective that
    one of the set has not joined (it waits in a receive, or in a collective of another
    scope). A worker that runs, sends, waits for data on its way, has another thread
    running, or does not answer could still make progress: then there is no deadlock.
    """
    now = time.monotonic()
    check = _env.DEADLOCK_CHECK
    if _looked[0] is not state:
        _looked[:] = [state, state[2] + check, None, check]
    if now < _looked[1]:
        return None
    mine = _where()
    answers = {_world.RANK: mine}
    wanted = _wanted(mine)
    with _asking:
        while True:
            asked = sorted(wanted - answers.keys())
            if not asked:
                break
            got, late = _ask([r for r in asked if r not in _world.exited], 2.0, done)
            if done():
                return None
            for r in asked:  # (one that did not answer, or has left, may progress)
                answers[r] = got.get(r, "")
                wanted |= _wanted(answers[r])
            if late:
                break
    seen, _looked[2] = _looked[2], answers
    _looked[3] = min(2 * _looked[3], 16 * check) if answers == seen else check
    _looked[1] = time.monotonic() + _looked[3]
    if answers != seen:
        return None
    try:
        stuck = _stuck(answers)
        return _account(state[1], stuck, answers) if _world.RANK in stuck else None
    except (ValueError, IndexError, KeyError):  # an answer not read: no conclusion
        return None


def _wanted(answer):
    """The world ranks a worker's wait depends on (none if it does not wait)."""
    parts = answer.split("|")
    if len(parts) < 6 or parts[0] != "waits" or parts[5] == "-":
        return set()
    return _ranks(parts[5].split(":")[1])


_FROM_ONE = ("recv", "item")  # waits that any one of their workers can end


def _stuck(answers):
    """The workers of a deadlock among ``answers``: the largest set in which each waits
    for a message from workers of the set only, or in a collective that a worker of the
    set has not reached and cannot reach (it waits elsewhere: in a receive, or in
    another scope's collective). A worker that has reached the collective (its count of
    that scope's collectives is there, or past it) has done its part: the data moves
    without it."""
    needs, counts = {}, {}
    for rank, answer in answers.items():
        parts = answer.split("|")
        if len(parts) >= 6 and parts[0] == "waits" and parts[5] != "-":
            kind, ranks = parts[5].split(":")[:2]
            needs[rank] = (kind, _ranks(ranks), parts[5])
            counts[rank] = dict(c.rsplit("=", 1) for c in parts[6].split(";") if c) \
                if len(parts) > 6 else {}
    stuck = set(needs)

    def not_there(r, scope_ranks, n):  # (a count not told: taken as there, or past)
        return int(counts[r].get(scope_ranks, n)) < n

    changed = True
    while changed:
        changed = False
        for rank in list(stuck):
            kind, ranks, text = needs[rank]
            if kind in _FROM_ONE:
                free = any(r not in stuck for r in ranks)
            else:  # a collective: stuck while one of its workers waits elsewhere
                scope_ranks, n = text.split(":")[1], int(text.split(":")[2])
                free = not any(r in stuck and needs[r][2] != text and
                               not_there(r, scope_ranks, n) for r in ranks)
            if free:
                stuck.discard(rank)
                changed = True
    return stuck


def _account(scope, stuck, answers):
    """'worker 1 (this one) waits in spmd_receive at f.py:3 for a message from worker 2
    (tag 0); worker 2 waits in spmd_barrier at f.py:9 for workers 1 and 3 to join it'"""
    def names(ranks, joint):
        numbers = sorted(scope.world_ranks.index(r) + 1 if r in scope.world_ranks
                         else -(r + 1) for r in ranks)
        text = [f"{n}" if n > 0 else f"{-n} of the job" for n in numbers]
        if len(text) == 1:
            return f"worker {text[0]}"
        return f"workers {', '.join(text[:-1])} {joint} {text[-1]}"

    parts = []
    for rank in sorted(stuck):
        _, call, _, site, _, needs = answers[rank].split("|")[:6]
        kind, ranks, *tag = needs.split(":")
        who = sorted(_ranks(ranks) - {rank}) or [rank]
        if kind == "recv":
            tag_text = "any tag" if tag[0] == "*" else f"tag {tag[0]}"
            what = f"for a message from {names(who, 'or')} ({tag_text})"
        elif kind == "item":
            what = f"for an item from {names(who, 'or')}"
        else:
            what = f"for {names(who, 'and')} to join it"
        me = " (this one)" if rank == _world.RANK else ""
        parts.append(f"{names([rank], '')}{me} waits in {call} at {site} {what}")
    return "; ".join(parts)
