"""spmdlab.testing: fault injection, as a user's pytest-mpi test would use it."""

import re

import numpy as np
import pytest

from conftest import run_job
from spmdlab import spmd_barrier, spmd_index, spmd_plus, spmd_size
from spmdlab.errors import SpmdValueError
from spmdlab.testing import InjectedFault, inject_fault


@pytest.mark.mpi
def test_a_raised_fault_fails_the_chosen_call_on_every_worker(spmd_fault):
    # the recommended pattern: every worker runs the code under test and asserts
    done = []
    with spmd_fault(worker=spmd_size(), call="spmd_plus", at=2, action="raise"):
        with pytest.raises(InjectedFault) as info:
            for step in range(3):
                spmd_plus(np.ones(3) * step)
                done.append(step)
    assert done == [0]  # every worker: the second spmd_plus failed, everywhere
    where = f"spmd_plus (worker {spmd_size()}, call 2)"
    if spmd_index() == spmd_size():
        assert str(info.value) == f"fault injected by spmdlab.testing at {where}"
    else:
        assert f"failed on another worker: worker {spmd_size()}: fault injected by " \
               f"spmdlab.testing at {where}" in str(info.value)
    assert spmd_plus(1) == spmd_size()  # and the workers are still in step


@pytest.mark.mpi
def test_a_fault_on_the_fast_path_of_a_scalar(spmd_fault):
    with spmd_fault(worker=1, call="spmd_plus", action="raise", exception=KeyError("k")):
        with pytest.raises(KeyError):
            spmd_plus(1.0)
    spmd_barrier()


@pytest.mark.mpi
def test_bad_arguments_are_refused():
    with pytest.raises(SpmdValueError, match=r"inject_fault \(worker \d+ of \d+\): 'action' "
                       r"must be one of"):
        with inject_fault(1, action="explode"):
            pass
    with pytest.raises(SpmdValueError, match="'worker' must be a worker number"):
        with inject_fault(0):
            pass
    with pytest.raises(SpmdValueError, match="'site' must be 'file:line'"):
        with inject_fault(1, site="nowhere.py"):
            pass
    with pytest.raises(SpmdValueError, match="'call' must be a collective's name"):
        with inject_fault(1, call="spmd plus"):
            pass


@pytest.mark.mpi
@pytest.mark.parametrize("fault", [dict(call="spmd_plus", at=50), dict(call="spmd_plu"),
                                   dict(site="nowhere.py:1")])
def test_a_fault_that_never_fires_fails_the_test(fault):
    # a test that passes because its fault never happened would pass for the wrong reason
    k = spmd_size()
    try:
        with inject_fault(k, action="raise", **fault):
            for _ in range(5):
                spmd_plus(1)
    except SpmdValueError as exc:
        assert spmd_index() == k
        assert re.search(r"inject_fault \(worker \d\): the fault never fired: .*the "
                         r"collectives worker \d made in the block were: spmd_plus x5",
                         str(exc)), str(exc)
    else:
        assert spmd_index() != k
    with inject_fault(k, call="spmd_plu", optional=True):
        spmd_plus(1)  # optional: no error
    spmd_barrier()


class DiskFull(Exception):
    def __init__(self, path, code):
        super().__init__(f"{path} is full (error {code})")


@pytest.mark.mpi
@pytest.mark.parametrize("kind", ["two arguments", "unicode", "local class"])
def test_an_error_the_others_cannot_make_from_its_message(kind):
    # shared from one worker to the others: the same class where it can be made from its
    # message, an SpmdError naming it where it cannot (never a TypeError from making it)
    class Local(Exception):
        pass

    error = {"two arguments": DiskFull("/data", 28),
             "unicode": UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"),
             "local class": Local("made in a function")}[kind]
    k = spmd_size()
    with inject_fault(k, call="spmd_plus", action="raise", exception=error):
        with pytest.raises(Exception) as info:
            spmd_plus(1)
    if spmd_index() == k:
        assert info.value is error
    else:
        assert type(info.value).__name__ == "SpmdError", repr(info.value)
        assert f"failed on another worker: worker {k}: {error}" in str(info.value)
        assert f"{type(error).__qualname__} there" in str(info.value)
    assert spmd_plus(1) == spmd_size()




@pytest.mark.mpi_skip
@pytest.mark.parametrize("action", ["raise", "crash", "exit", "slow", "hang"])
def test_each_action_as_the_other_workers_see_it(action):
    job = run_job(f"""
import numpy as np
from spmdlab import *
from spmdlab.testing import inject_fault
with inject_fault(worker=2, call="spmd_plus", at=3, action={action!r}, seconds=3, status=5):
    for step in range(5):
        spmd_plus(np.ones(4))
print("finished", spmd_index(), flush=True)
""", 3, timeout=60, env={"SPMDLAB_STALL_WARNING": "1", "SPMDLAB_TIMEOUT": "4"}
        if action in ("slow", "hang") else None)
    if action == "raise":  # uncaught on every worker
        assert job.returncode != 0
        assert "failed on another worker: worker 2: fault injected" in job.stderr
    elif action == "crash":
        assert job.returncode != 0
        assert "### spmdlab: worker 2 of 3" in job.stderr
        assert "InjectedFault: fault injected by spmdlab.testing at spmd_plus (worker 2, " \
               "call 3)" in job.stderr
    elif action == "exit":
        assert job.returncode == 5, job.stderr
        assert "worker 2 finished the program (exit status 5)" in job.stderr
    elif action == "slow":
        assert job.returncode == 0, job.stderr
        assert job.stdout.count("finished") == 3
        assert re.search(r"has waited \d+ s: worker 2 is at \S+\.py:7 in <module>\(\), "
                         r"not in a spmdlab call \(its last collective: #2 spmd_plus\)",
                         job.stderr), job.stderr
    else:
        assert job.returncode != 0
        assert "SpmdTimeoutError" in job.stderr and "worker 2 is at" in job.stderr
    assert job.seconds < 40


@pytest.mark.mpi_skip
def test_a_hang_at_one_worker_ends_past_the_timeout():
    # nobody else is there to time out: the hanging worker slept for ever
    job = run_job("""
from spmdlab import *
from spmdlab.testing import inject_fault
with inject_fault(worker=1, call="spmd_plus", action="hang"):
    spmd_plus(1.0)
""", 1, timeout=60, env={"SPMDLAB_TIMEOUT": "2"})
    assert job.returncode != 0
    assert "SpmdTimeoutError: spmd_plus (worker 1, call 1): hung by spmdlab.testing's " \
        "injected fault, past SPMDLAB_TIMEOUT=2 s" in job.stderr, job.stderr
    assert job.seconds < 30


@pytest.mark.mpi_skip
def test_a_fault_at_a_call_site():
    job = run_job("""
from spmdlab import *
from spmdlab.testing import inject_fault
def step():
    spmd_plus(1.0)
with inject_fault(worker=1, site=".py:5", at=2, action="exit", status=3):
    for i in range(3):
        spmd_barrier()
        step()
""", 2, timeout=60)
    assert job.returncode == 3, job.stderr
    assert "worker 1 finished the program (exit status 3)" in job.stderr


@pytest.mark.mpi_skip
def test_a_worker_whose_pytest_session_ends_early_is_named_with_its_status(tmp_path):
    # python -m pytest ends with raise SystemExit(status), not sys.exit: the plugin
    # notes the status, so the workers left waiting name it (here: worker 2 cannot
    # import a test module, so its session is interrupted, status 2)
    import os
    import subprocess
    import sys

    from conftest import mpiexec_args, run_mpiexec

    (tmp_path / "test_a.py").write_text(
        "from spmdlab import spmd_plus, spmd_size\n"
        "def test_sum():\n"
        "    assert spmd_plus(1) == spmd_size()\n")
    (tmp_path / "test_b.py").write_text(
        "from spmdlab import spmd_index\n"
        "if spmd_index() == 2:\n"
        "    raise ImportError('not on worker 2')\n"
        "def test_nothing():\n"
        "    pass\n")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               PYTHONUNBUFFERED="1")
    job = run_mpiexec(mpiexec_args(3) + [sys.executable, "-m", "pytest", "--with-mpi",
                                         "-p", "no:cacheprovider", "-q", "."],
                      cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
                      start_new_session=True)
    out = job.stdout + job.stderr
    assert job.returncode != 0, out
    assert "worker 2 finished the program (exit status 2) without making the matching " \
        "call" in out, out


def _pytest_job(tmp_path, n, *args, env=None):
    import os
    import subprocess
    import sys

    from conftest import mpiexec_args, run_mpiexec

    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               PYTHONUNBUFFERED="1", **(env or {}))
    try:
        # --color=no: Open MPI's launcher gives its workers a terminal, and pytest colours
        job = run_mpiexec(mpiexec_args(n) + [sys.executable, "-m", "pytest", "--with-mpi",
                                             "-q", "--color=no", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120,
                          start_new_session=True)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the pytest job hung; output so far:\n{exc.stdout}\n{exc.stderr}")
    return job, job.stdout + job.stderr


@pytest.mark.mpi_skip
def test_workers_that_collect_different_tests_are_told_so(tmp_path):
    # a test parametrized differently on one worker: its collectives met those of the
    # next test on the others, which summed the wrong values and passed or failed for
    # the wrong reason; every worker now says where the lists of tests differ
    (tmp_path / "test_a.py").write_text(
        "import pytest\n"
        "from spmdlab import spmd_index, spmd_plus, spmd_size\n"
        "@pytest.mark.parametrize('x', range(2 + (spmd_index() == 2)))\n"
        "def test_p(x):\n"
        "    assert spmd_plus(x) == x * spmd_size()\n"
        "def test_after():\n"
        "    assert spmd_plus(1) == spmd_size()\n")
    job, out = _pytest_job(tmp_path, 3, "-p", "no:cacheprovider")
    assert job.returncode == 4, out
    assert out.count("spmdlab: the workers collected different tests (workers 1, 3: 3 "
                     "tests; worker 2: 4 tests)") == 3, out
    assert "test 3 is test_a.py::test_after on workers 1, 3, test_a.py::test_p[2] on " \
        "worker 2" in out, out


@pytest.mark.mpi_skip
def test_a_test_failed_on_one_worker_is_kept_for_last_failed(tmp_path):
    # the abort skipped the end of pytest's session, where --lf's cache is written: the
    # failed test was never recorded, and --lf ran every test again
    (tmp_path / "test_a.py").write_text(
        "from spmdlab import spmd_index, spmd_plus, spmd_size\n"
        "def ran(name):\n"
        "    with open(f'ran{spmd_index()}.txt', 'a') as f:\n"
        "        f.write(name)\n"
        "def test_a():\n"
        "    ran('a')\n"
        "    assert spmd_plus(1) == spmd_size()\n"
        "def test_b():\n"
        "    ran('b')\n"
        "    assert spmd_index() != spmd_size()\n"
        "def test_c():\n"
        "    ran('c')\n"
        "    assert spmd_plus(1) == spmd_size()\n")
    import json

    job, out = _pytest_job(tmp_path, 2)
    assert job.returncode == 1, out
    saved = tmp_path / ".pytest_cache" / "v" / "cache" / "lastfailed"
    assert json.loads(saved.read_text()) == {"test_a.py::test_b": True}, out
    (tmp_path / "ran1.txt").unlink()
    job, out = _pytest_job(tmp_path, 2, "--lf")
    assert job.returncode == 1, out
    assert (tmp_path / "ran1.txt").read_text() == "b", out  # worker 1 ran test_b alone
    assert "test_a.py::test_b failed (call) on worker 2 of 2" in out, out


@pytest.mark.mpi_skip
def test_a_test_skipped_on_some_workers_is_not_paired_with_the_next(tmp_path):
    # worker 1 skipped a test and went on to the next, whose spmd_plus met the others'
    # spmd_plus of the skipped test: they summed 3 workers' ones where they meant 2 and
    # failed for the wrong reason (or passed, summing the wrong values); now every test
    # ends on every worker together, and a worker still in its collectives is named
    (tmp_path / "test_a.py").write_text(
        "import pytest\n"
        "from spmdlab import spmd_index, spmd_plus, spmd_size\n"
        "def test_skipped_on_one():\n"
        "    if spmd_index() == 1:\n"
        "        pytest.skip('not on worker 1')\n"
        "    assert spmd_plus(1.0) == spmd_size()\n"
        "def test_after():\n"
        "    assert spmd_plus(1.0) == spmd_size()\n"
        "def test_checked_on_one():\n"  # a skip after the last collective is harmless
        "    total = spmd_plus(1)\n"
        "    if spmd_index() != 1:\n"
        "        pytest.skip('checked on worker 1')\n"
        "    assert total == spmd_size()\n")
    job, out = _pytest_job(tmp_path, 3, "-p", "no:cacheprovider", "-k", "not skipped_on")
    assert job.returncode == 0, out
    assert out.count("2 passed") == 1 and out.count("1 passed, 1 skipped") == 2, out
    job, out = _pytest_job(tmp_path, 3, "-p", "no:cacheprovider")
    assert job.returncode == 1, out
    assert "workers made different calls (they differ in: call): worker 1: the end of " \
        "test test_a.py::test_skipped_on_one (skipped there) at test_a.py:3; workers " \
        "2-3: spmd_plus(float64 scalar py-float) at test_a.py:6" in out, out
    assert "test_after" not in out, out  # the run ended there


@pytest.mark.mpi_skip
def test_a_test_xfailed_on_some_workers_is_named_as_xfailed(tmp_path):
    # an xfail on worker 1 alone was reported as "skipped" there
    (tmp_path / "test_a.py").write_text(
        "import pytest\n"
        "from spmdlab import spmd_index, spmd_plus, spmd_size\n"
        "def test_xfailed_on_one():\n"
        "    if spmd_index() == 1:\n"
        "        pytest.xfail('not on worker 1')\n"
        "    assert spmd_plus(1.0) == spmd_size()\n")
    job, out = _pytest_job(tmp_path, 2, "-p", "no:cacheprovider")
    assert job.returncode == 1, out
    assert "### spmdlab: test_a.py::test_xfailed_on_one xfailed (call) on worker 1 of 2, " \
        "but the workers could not end it together" in out, out
    assert "worker 1: the end of test test_a.py::test_xfailed_on_one (xfailed there)" in out


@pytest.mark.mpi_skip
def test_a_failed_test_shows_what_it_printed(tmp_path):
    # the job ends before pytest's summary, where "Captured stdout call" is shown: what
    # the failing test printed (often why it failed) was lost with its capture
    (tmp_path / "test_a.py").write_text(
        "import sys\n"
        "from spmdlab import spmd_index, spmd_plus\n"
        "def test_prints():\n"
        "    print(f'out of worker {spmd_index()}')\n"
        "    sys.stderr.write(f'err of worker {spmd_index()}\\n')\n"
        "    assert spmd_plus(1) == 0 or spmd_index() != 2\n")
    job, out = _pytest_job(tmp_path, 2, "-p", "no:cacheprovider")
    assert job.returncode == 1, out
    assert "test_a.py::test_prints failed (call) on worker 2 of 2" in out, out
    assert re.search(r"-+ Captured stdout call -+\nout of worker 2\n", out), out
    assert re.search(r"-+ Captured stderr call -+\nerr of worker 2\n", out), out


@pytest.mark.mpi_skip
def test_the_stall_report_of_a_test_is_not_captured(tmp_path):
    # the stall report, written while the test waits, went into pytest's capture of the
    # test's output: nothing showed while it waited, and a test that passed in the end
    # (or one ended by the launcher) lost it
    (tmp_path / "test_a.py").write_text(
        "import time\n"
        "from spmdlab import spmd_barrier, spmd_index\n"
        "def test_slow_worker():\n"
        "    if spmd_index() == 2:\n"
        "        time.sleep(4)\n"
        "    spmd_barrier()\n")
    job, out = _pytest_job(tmp_path, 2, "-p", "no:cacheprovider",
                           env={"SPMDLAB_STALL_WARNING": "1"})
    assert job.returncode == 0, out
    assert "spmdlab: spmd_barrier (worker 1 of 2, collective #" in out, out
    assert "worker 2 is at test_a.py:5 in test_slow_worker()" in out, out


@pytest.mark.mpi_skip
def test_a_worker_ended_by_sigterm_in_a_test_is_named_with_its_stack(tmp_path):
    # pytest's faulthandler is on, so spmdlab left SIGTERM alone: a hung test ended by
    # `timeout` (or a batch system's time limit) was "killed by a signal (SIGKILL, the
    # OOM killer) or crashed in C code", with no stack
    (tmp_path / "test_a.py").write_text(
        "import os, signal, time\n"
        "from spmdlab import _ending, spmd_barrier, spmd_index\n"
        "def test_killed():\n"
        "    if spmd_index() == 2:\n"
        "        while not os.path.exists(f'{_ending._goodbye_path}.watching'):\n"
        "            time.sleep(0.01)  # (the watcher has started)\n"
        "        time.sleep(0.3)\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "    spmd_barrier()\n")
    job, out = _pytest_job(tmp_path, 2, "-p", "no:cacheprovider")
    assert job.returncode != 0, out
    named = re.search(r"### spmdlab: worker 2 of 2 \(\S+, pid \d+\) ended by SIGTERM \(sent "
                      r"by kill", out)
    # on a loaded machine the watcher may wake after the launcher's clean-up has ended
    # the others too, before worker 2's report is readable: then it names the group
    late = re.search(r"### spmdlab: one of workers 1, 2 of 2", out)
    assert named or late, out
    if named:
        assert re.search(r'File ".*test_a.py", line 8 in test_killed', out), out


@pytest.mark.mpi_skip
def test_a_message_a_test_left_unreceived_is_not_taken_by_the_next(tmp_path):
    # a message a test sent and never received was taken by the next test's receive
    # from that worker, which then failed (or passed) for the wrong reason
    # (looked for once the test's fixtures are torn down: one may receive what it sent)
    (tmp_path / "test_a.py").write_text(
        "import pytest\n"
        "from spmdlab import spmd_index, spmd_receive, spmd_send, spmd_size\n"
        "def test_received():\n"
        "    spmd_send('ring', spmd_index() % spmd_size() + 1, tag=2)\n"
        "    assert spmd_receive((spmd_index() - 2) % spmd_size() + 1, tag=2) == 'ring'\n"
        "@pytest.fixture\n"
        "def inbox():\n"
        "    yield\n"
        "    if spmd_index() == spmd_size():\n"
        "        assert spmd_receive(1, tag=5) == 'late'\n"
        "def test_its_fixture_receives(inbox):\n"
        "    if spmd_index() == 1:\n"
        "        spmd_send('late', spmd_size(), tag=5)\n"
        "def test_leaves_one():\n"
        "    if spmd_index() == 1:\n"
        "        spmd_send('stale', spmd_size())\n"
        "def test_after():\n"
        "    if spmd_index() == 1:\n"
        "        spmd_send('fresh', spmd_size())\n"
        "    if spmd_index() == spmd_size():\n"
        "        assert spmd_receive(1) == 'fresh'\n")
    import json

    job, out = _pytest_job(tmp_path, 3)
    assert job.returncode == 1, out
    assert "### spmdlab: test_a.py::test_leaves_one passed (call) on worker 3 of 3, but " \
        "left a message unreceived; ending the job\na message from worker 1 (tag 0) sent " \
        "with spmd_send or spmd_send_receive was never received by worker 3 of 3" in out, out
    assert "test_after" not in out and "test_its_fixture_receives" not in out, out
    saved = tmp_path / ".pytest_cache" / "v" / "cache" / "lastfailed"
    assert json.loads(saved.read_text()) == {"test_a.py::test_leaves_one": True}, out
    job, out = _pytest_job(tmp_path, 3, "-p", "no:cacheprovider", "-k", "not leaves")
    assert job.returncode == 0, out


@pytest.mark.mpi_skip
def test_a_message_sent_to_oneself_and_left_fails_its_own_test(tmp_path):
    # one worker (plain pytest): the next test's receive took the message instead
    import os
    import subprocess
    import sys

    (tmp_path / "test_a.py").write_text(
        "import numpy as np\n"
        "from spmdlab import spmd_receive, spmd_send\n"
        "def test_leaves_two():\n"
        "    spmd_send('stale', 1)\n"
        "    spmd_send(np.ones(100_000), 1, tag=3)\n"
        "def test_after():\n"
        "    spmd_send('fresh', 1)\n"
        "    assert spmd_receive(1) == 'fresh'\n")
    job = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "--color=no"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    out = job.stdout + job.stderr
    assert job.returncode == 1, out
    assert "2 passed, 1 error" in out, out  # (found at its teardown: an error there)
    assert "ERROR test_a.py::test_leaves_two - a message from worker 1 (tag 0)" in out, out
    assert "a message from worker 1 (tag 3) sent with spmd_send or spmd_send_receive was " \
        "never received by worker 1 of 1" in out, out
