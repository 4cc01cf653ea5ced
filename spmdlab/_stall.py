"""Where every worker is now: call sites, the answering thread, stall reports.

A thread of spmdlab's on every worker answers "where are you?" from the others: the
program thread's current line (or the spmdlab call it waits in) and its last
collective. A collective that has waited SPMDLAB_STALL_WARNING seconds asks, and says
who has not arrived and where each of them is; a SPMDLAB_TIMEOUT error carries the same
report (``_wait``). The questions and answers travel on ``_world.CTL``.
"""

import contextlib
import os
import sys
import threading
import time

from . import _env, _world
from ._mpi import MPI

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
PROGRAM = threading.get_ident()  # the program thread (the one that imported spmdlab)
# (call, scope, since) while the program thread waits in a spmdlab call (``_wait`` sets
# it): what this worker answers, and what the answering thread reports when it stalls
waiting_in = None


# -- call sites -------------------------------------------------------------------------------


def call_site():
    """``file:line`` of the user's code that made the current spmdlab call: the first
    frame outside spmdlab, its path relative to the current folder where it lies below it.
    """
    return call_site_of(sys._getframe(1))


def call_site_of(frame):
    """``call_site`` from ``frame`` outwards (the top frame of another thread, say)."""
    # spmdlab's frames, and contextlib's that its context managers run in
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE) or \
            frame is not None and frame.f_code.co_filename == contextlib.__file__:
        frame = frame.f_back
    if frame is None:
        return "?"
    return f"{_relative(frame.f_code.co_filename)}:{frame.f_lineno}"


def _relative(path):
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return path
    return path if relative.startswith(os.pardir) else relative


# -- this worker's answer ----------------------------------------------------------------------


def _where():
    """This worker's answer: ``waits|call|n|site`` or ``runs|file:line in f()|n|last``."""
    frame = sys._current_frames().get(PROGRAM)
    scope = _world._stack[-1] if _world._stack else None
    ex = scope._exchange if scope is not None else None
    count, last = (ex.calls, ex.last) if ex is not None else (0, "none")
    state = waiting_in
    if state is not None:
        return f"waits|{state[0]}|{count}|{call_site_of(frame)}"
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame = frame.f_back  # inside spmdlab but not waiting: the user's line
    if frame is None:
        return f"runs|?|{count}|{last}"
    code = frame.f_code
    return f"runs|{_relative(code.co_filename)}:{frame.f_lineno} in {code.co_name}()|" \
        f"{count}|{last}"


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
        message.Recv(bytearray(1))
        answer = _where().encode()[:400]
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


# -- asking ---------------------------------------------------------------------------------------

_asks: list = []  # questions in flight (kept alive until sent)
_asking = threading.Lock()  # one question round at a time (the answers share a tag)


def who_is_where(scope, patience=2.0):
    """Ask the scope's other workers where they are; returns ``({world rank: answer},
    [world ranks that did not answer and have not finished])``."""
    with _asking:
        return _ask(scope, patience)


def _ask(scope, patience):
    ctl = _world.CTL
    others = [r for r in scope.world_ranks if r != _world.RANK]
    _asks[:] = [r for r in _asks if not r.Test()]
    _asks.extend(ctl.Isend(bytearray(1), r, _world.ASK_TAG) for r in others)
    answers = {}
    status = MPI.Status()
    deadline = time.monotonic() + patience
    while len(answers) < len(others) and time.monotonic() < deadline:
        _answer_questions()  # others may be asking at the same time
        message = ctl.Improbe(MPI.ANY_SOURCE, _world.HERE_TAG, status)
        if message is None:
            time.sleep(0.001)
            continue
        buf = bytearray(status.Get_count(MPI.BYTE))
        message.Recv(buf)
        if status.Get_source() in others:
            answers[status.Get_source()] = buf.decode(errors="replace")
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
    sys.stderr.write(f"spmdlab: {call} ({scope.who()}, collective #{count} at "
                     f"{site}) has waited {elapsed:.0f} s: {text}; still waiting "
                     f"(SPMDLAB_STALL_WARNING={_env.STALL_WARNING:g} s; SPMDLAB_TIMEOUT "
                     f"turns the wait into an error)\n")
    sys.stderr.flush()
