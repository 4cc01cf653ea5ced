"""pytest plugin, registered on install: under mpiexec, a failure on one worker ends the job.

Without it, a worker whose assert fails moves on to the next test while the others wait
forever in a collective the failed test never reached. With it, the failing worker prints
the test's report under a header naming the worker, then aborts every worker, so the job
ends at once with a non-zero status; so does a test that leaves a message unreceived
(a later test's receive would take it). In single-process runs it only fails a test that
leaves a message it sent itself; under mpiexec with ``SPMDLAB_ABORT_ON_ERROR=0``, nothing.
"""

import os
import sys
import time
from typing import Optional

import pytest


CAPTURE = None  # pytest's capture manager, for errors reported from elsewhere (see _world)

TERMINAL: Optional[int]
try:  # the terminal's stderr, saved before pytest's capture replaces file descriptor 2
    TERMINAL = os.dup(2)  # (entry-point plugins are imported before capture starts)
except OSError:
    TERMINAL = None


def to_terminal(text):
    """Write ``text`` to the terminal past pytest's capture, from any thread: a report of
    spmdlab's own made while a test is running (a stall report, written by the answering
    thread while the test waits) would otherwise be kept with the test's output, unseen
    while it waits and lost when the job is ended. One ``os.write``, so the launcher
    does not interleave it with another worker's lines."""
    if TERMINAL is None or CAPTURE is None or not CAPTURE.is_globally_capturing():
        sys.stderr.write(text)
        sys.stderr.flush()
        return
    data = text.encode("utf-8", "replace")
    while data:
        data = data[os.write(TERMINAL, data):]


def pytest_configure(config):
    global CAPTURE
    CAPTURE = config.pluginmanager.getplugin("capturemanager")


def pytest_sessionfinish(session, exitstatus):
    # ``python -m pytest`` ends with ``raise SystemExit(status)``, which spmdlab cannot
    # see: note the status, so that workers still waiting for this one name it (a
    # collection error on one worker ends its session early) and the job ends with it
    ending = sys.modules.get("spmdlab._ending")
    if ending is not None:
        ending.note_exit_status(int(exitstatus))


def pytest_collection_finish(session):
    # every worker runs the tests in turn, pairing its collectives with the others':
    # workers that collected different tests (a test defined, parametrized or selected on
    # some workers only) would pair a test's collectives with another test's and pass or
    # fail for the wrong reason, or wait for ever. Say so on every worker instead.
    if not session.config.getoption("with_mpi", False) or \
            "spmdlab._world" not in sys.modules:
        return
    from spmdlab import _world
    from spmdlab.collectives import gather

    if _world.SIZE == 1:
        return
    import hashlib

    ids = [item.nodeid for item in session.items]
    digest = hashlib.sha1("\n".join(ids).encode()).hexdigest()
    # a worker whose collection failed is interrupted by pytest, which names it
    errors = bool(session.testsfailed)
    workers = gather("pytest collection", (digest, errors))
    if any(error for _, error in workers) or len({d for d, _ in workers}) == 1:
        return
    lists = gather("pytest collection", ids)
    groups: dict = {}
    for k, theirs in enumerate(lists, 1):
        groups.setdefault(len(theirs), []).append(k)
    counts = "; ".join(f"{_workers(ks)}: {n} test{'s' * (n != 1)}"
                       for n, ks in groups.items())
    first = next(i for i in range(max(map(len, lists)) + 1)
                 if len({tuple(t[i:i + 1]) for t in lists}) > 1)
    at: dict = {}
    for k, theirs in enumerate(lists, 1):
        at.setdefault(theirs[first] if first < len(theirs) else "no test", []).append(k)
    differ = ", ".join(f"{name} on {_workers(ks)}" for name, ks in at.items())
    pytest.exit(f"spmdlab: the workers collected different tests ({counts}), so the "
                f"collectives of one test would meet those of another; test {first + 1} "
                f"is {differ}. Every worker must collect the same tests in the same order "
                f"(skip with pytest.skip inside a test, not by leaving it out)", returncode=4)


def _workers(ks):
    return (f"worker {ks[0]}" if len(ks) == 1 else
            f"workers {ks[0]}-{ks[-1]}" if ks == list(range(ks[0], ks[-1] + 1)) else
            "workers " + ", ".join(map(str, ks)))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    world = sys.modules.get("spmdlab._world")
    if world is None:
        return
    if world.SIZE == 1:
        if call.when == "teardown":  # (a fixture's teardown may receive what it sent)
            _left_alone(report)
        return
    from spmdlab import _env

    if _env.ABORT_ON_ERROR is False:
        return
    if report.failed:
        _end_job(item, f"{item.nodeid} failed ({report.when})", _with_output(report),
                 report)
    elif call.when == "call" or call.when == "setup" and report.skipped:
        ENDED_ITEMS[report.nodeid] = (item, report)


def _with_output(report):
    """The failure's text with what the test printed and logged, as pytest shows it under
    the failure: the job ends before pytest's summary, which would have shown it."""
    text = report.longreprtext
    for title, content in report.sections:
        if content.strip():
            text += f"\n{f' {title} ':-^80}\n{content.rstrip()}"
    return text


def _left_alone(report):
    """One worker (plain ``pytest``): the messages a test sent itself and never received
    are taken away, or the next test's receive would take them instead of its own, and
    the test fails saying so."""
    from spmdlab import _ending

    left = _ending._drain_unreceived(say=False)
    if not left:
        return
    text = _left_text(left)
    if report.passed:
        report.outcome, report.longrepr = "failed", text
    else:
        report.sections.append(("spmdlab: messages left unreceived", text))


def _left_text(left):
    return "; ".join(
        f"a message from worker {source} (tag {tag}) sent with spmd_send or "
        f"spmd_send_receive was never received by worker {index} of {size}"
        for index, size, source, tag in left) + ": a later test's receive would take it " \
        "instead of its own; receive every message a test sends before it ends"


# the tests whose report ends them (their call's, or a skip's), by id: (item, report)
ENDED_ITEMS: dict = {}


@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report):
    # after pytest has shown the teardown's report (a worker waiting here has its "." on
    # screen): the test has ended, its fixtures too (one may receive what it sent)
    if report.when != "teardown":
        return
    ended = ENDED_ITEMS.pop(report.nodeid, None)
    if ended is not None:
        _end_together(*ended)


def _end_together(item, report):
    """Every worker ends each test together, once its fixtures are torn down, in a
    collective of its own: a worker that skipped a test (``pytest.skip`` or an xfail on
    some workers only) would otherwise go on to the next test while the others are still
    in this one's collectives, and pair them with the next test's, passing or failing for
    the wrong reason. Where they do, the collective fails on every worker, naming the
    test and the calls they were in. Then the messages the test left unreceived are
    looked for (``_look_for_unreceived``)."""
    if not item.config.getoption("with_mpi", False):
        return
    from spmdlab import _world
    from spmdlab._agree import agree
    from spmdlab._pack import digest
    from spmdlab.errors import SpmdError

    name = item.nodeid
    how = report.outcome
    if report.skipped:  # (an xfail is reported as a skip that says so)
        how = "xfailed" if hasattr(report, "wasxfail") else "skipped"
    # made from the test's own line, which a mismatch names as this worker's call site
    line = (item.location[1] or 0) + 1
    at_test = compile("\n" * (line - 1) + "end()", str(item.path), "eval")

    def end():
        agree(_world.current(), "pytest", digest(("pytest", name)),
              describe=lambda: f"the end of test {name} ({how} there)")

    try:
        eval(at_test, {"end": end})
    except SpmdError as exc:
        text = f"{type(exc).__name__}: {exc}"
        _end_job(item, f"{name} {how} ({report.when})", text, _failed(report, text),
                 ", but the workers could not end it together")
    _look_for_unreceived(item, report, how)


def _look_for_unreceived(item, report, how):
    """Once every worker has ended a test and torn it down, its messages are sent, and
    those still here would be taken by a later test's receives: looked for, then one
    more agreement, so that no worker starts the next test, and sends its messages,
    before every worker has looked. One left ends the job, naming the test, the workers
    and the tag."""
    from spmdlab import _world
    from spmdlab._agree import agree
    from spmdlab._pack import digest
    from spmdlab.errors import SpmdError

    name = item.nodeid
    left = _unreceived()
    try:
        agree(_world.current(), "pytest", digest(("pytest", name, "unreceived")),
              describe=lambda: f"the end of test {name} (its messages looked for)")
    except SpmdError as exc:
        text = f"{type(exc).__name__}: {exc}"
        _end_job(item, f"{name} {how} ({report.when})", text, _failed(report, text),
                 ", but the workers could not end it together")
    if left:
        text = _left_text(left)
        _end_job(item, f"{name} {how} ({report.when})", text, _failed(report, text),
                 f", but left {'a message' if len(left) == 1 else 'messages'} unreceived")


def _failed(report, text):
    """A copy of ``report`` that says the test failed with ``text``, for pytest's cache:
    ``--lf`` and ``--sw`` rerun a test that the workers could not end cleanly."""
    import copy

    failed = copy.copy(report)
    failed.outcome, failed.longrepr = "failed", text
    return failed


def _unreceived():
    """The messages sent to this worker that no receive has taken, as (its number, the
    number of workers, the sender's number, the tag) in each scope. Once every worker
    has ended the test, a message sent in it has been sent; MPI may take a moment to
    show one from another worker, looked for here for a millisecond (as for the report
    at the end of the program, one still on its way may be missed)."""
    from spmdlab import _mpi, _world

    MPI = _mpi.module()
    left = []
    for scope in _world.SCOPES:
        left += [(scope.index, scope.size, source + 1, tag) for source, tag, _ in scope.early]
        left += [(scope.index, scope.size, scope.index, tag)
                 for tag, count in scope.self_sends.items() for _ in range(count)]
        status, found = MPI.Status(), []
        until = time.monotonic() + 1e-3
        while True:  # (at least once, however late this worker runs)
            for r in range(scope.size):  # (a message to oneself is counted above)
                if r != scope.rank and scope.comm.Iprobe(r, MPI.ANY_TAG, status):
                    found.append((scope.index, scope.size, r + 1, status.Get_tag()))
            if found or scope.size == 1 or time.monotonic() > until:
                break
        left += found
    return left


def _end_job(item, what, text, report, why=""):
    """Print ``text`` past pytest's capture under a header naming the test and this
    worker, keep a failed ``report`` for ``--lf``, and abort every worker."""
    world = sys.modules["spmdlab._world"]
    text = (f"\n### spmdlab: {what} on worker {world.RANK + 1} of {world.SIZE}{why}; "
            f"ending the job\n{text}\n")
    # pytest is still capturing this test's output: write past it, or the report is lost
    capture = item.config.pluginmanager.getplugin("capturemanager")
    if capture is not None:
        with capture.global_and_fixture_disabled():
            sys.stderr.write(text)
            sys.stderr.flush()
    else:
        sys.stderr.write(text)
        sys.stderr.flush()
    if report is not None:
        _save_cache(item, report)
    time.sleep(0.2)  # let mpiexec forward the report before the job is aborted
    from spmdlab import _ending

    _ending.abort(1)


# the plugins that write pytest's cache at the end of the session (--lf, --ff, --sw)
CACHE_PLUGINS = ("lfplugin", "stepwiseplugin")


def _save_cache(item, report):
    """The abort skips the end of the session, where pytest writes the failed tests for
    ``--lf`` and ``--sw``: give those plugins the report and let them write it now."""
    manager = item.config.pluginmanager
    keep = [manager.getplugin(name) for name in CACHE_PLUGINS]
    others = [p for p in manager.get_plugins() if p not in keep]
    try:
        manager.subset_hook_caller("pytest_runtest_logreport", others)(report=report)
        manager.subset_hook_caller("pytest_sessionfinish", others)(
            session=item.session, exitstatus=1)
    except Exception as exc:  # the job must end whatever the cache does
        sys.stderr.write(f"spmdlab: pytest's cache could not be written: {exc!r}\n")


@pytest.fixture
def spmd_fault():
    """``spmdlab.testing.inject_fault``: make worker k raise, exit, hang or go slow at the
    n-th call of a collective, inside a ``with`` block of the test (every worker enters it).
    """
    from spmdlab.testing import inject_fault

    return inject_fault
