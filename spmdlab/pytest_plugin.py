"""pytest plugin, registered on install: under mpiexec, a failure on one worker ends the job.

Without it, a worker whose assert fails moves on to the next test while the others wait
forever in a collective the failed test never reached. With it, the failing worker prints
the test's report under a header naming the worker, then aborts every worker, so the job
ends at once with a non-zero status. It does nothing in single-process runs, or when
``SPMDLAB_ABORT_ON_ERROR=0``.
"""

import sys
import time

import pytest


CAPTURE = None  # pytest's capture manager, for errors reported from elsewhere (see _world)


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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    world = sys.modules.get("spmdlab._world")
    if world is None or world.SIZE == 1:
        return
    from spmdlab import _env

    if _env.ABORT_ON_ERROR is False:
        return
    text = (f"\n### spmdlab: {item.nodeid} failed ({report.when}) on worker "
            f"{world.RANK + 1} of {world.SIZE}; ending the job\n{report.longreprtext}\n")
    # pytest is still capturing this test's output: write past it, or the report is lost
    capture = item.config.pluginmanager.getplugin("capturemanager")
    if capture is not None:
        with capture.global_and_fixture_disabled():
            sys.stderr.write(text)
            sys.stderr.flush()
    else:
        sys.stderr.write(text)
        sys.stderr.flush()
    time.sleep(0.2)  # let mpiexec forward the report before the job is aborted
    from spmdlab import _ending

    _ending.abort(1)


@pytest.fixture
def spmd_fault():
    """``spmdlab.testing.inject_fault``: make worker k raise, exit, hang or go slow at the
    n-th call of a collective, inside a ``with`` block of the test (every worker enters it).
    """
    from spmdlab.testing import inject_fault

    return inject_fault
