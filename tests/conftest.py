"""Shared test helpers: array backends looped over, and jobs run under mpiexec."""

import functools
import os
import shutil
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

try:
    import torch
except ImportError:  # torch is an optional extra
    torch = None
try:
    import cupy
except Exception:  # CuPy is importable only where CUDA is
    cupy = None

HAVE_CUDA = torch is not None and torch.cuda.is_available()
HAVE_CUPY = cupy is not None and cupy.cuda.runtime.getDeviceCount() > 0 if cupy else False


class Backend:
    """How to make an array of one family from numpy data and read it back."""

    def __init__(self, name, make, read, available=True):
        self.name = name
        self.make = make
        self.read = read
        self.available = available

    def __repr__(self):
        return self.name


def _torch_make(device):
    return lambda a: torch.from_numpy(np.array(a, copy=True)).to(device)


BACKENDS = [
    Backend("numpy", lambda a: np.array(a), np.asarray),
    Backend("torch", _torch_make("cpu") if torch else None,
            lambda t: t.cpu().numpy(), torch is not None),
    Backend("torch-cuda", _torch_make("cuda") if HAVE_CUDA else None,
            lambda t: t.cpu().numpy(), HAVE_CUDA),
    Backend("cupy", (lambda a: cupy.asarray(a)) if HAVE_CUPY else None,
            (lambda c: cupy.asnumpy(c)) if HAVE_CUPY else None, HAVE_CUPY),
]


@pytest.fixture(autouse=True)
def _listeners_end_with_their_test(monkeypatch):
    """Each test's DataQueue listeners are removed when it ends. A listener keeps its
    queue for the rest of the process (as MATLAB's afterEach does), and a worker with
    one counts as able to send, so it never concludes a deadlock: a deadlock test run
    after a queue test in the same process would wait for its timeout instead."""
    try:
        from spmdlab import DataQueue
    except ImportError:  # (a test of an environment without spmdlab's dependencies)
        yield
        return
    made = []
    original = DataQueue.after_each

    @functools.wraps(original)  # (its signature and annotations: test_typing reads them)
    def recording(self, fn):
        handle = original(self, fn)
        made.append(handle)
        return handle
    monkeypatch.setattr(DataQueue, "after_each", recording)
    monkeypatch.setattr(DataQueue, "afterEach", recording)
    yield
    for handle in made:
        handle.remove()


@pytest.fixture(params=BACKENDS, ids=repr)
def backend(request):
    b = request.param
    if not b.available:
        pytest.skip(f"{b.name} is not available here")
    return b


def host(x):
    """Any family's array (or scalar) as a host numpy array."""
    if torch is not None and isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    if type(x).__module__.startswith("cupy"):
        return x.get()
    return np.asarray(x)


def same_family(result, like):
    """The result has the input's type, dtype and device."""
    assert type(result) is type(like)
    if torch is not None and isinstance(like, torch.Tensor):
        assert result.dtype == like.dtype and result.device == like.device
    elif hasattr(like, "dtype"):
        assert result.dtype == like.dtype


# -- jobs under mpiexec, for crash and hang tests ------------------------------------------

MPIEXEC = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or \
    shutil.which("mpiexec")


def mpiexec_args(n):
    args = [MPIEXEC, "-n", str(n)]
    if is_open_mpi():
        args[1:1] = ["--oversubscribe"]
    return args


def run_mpiexec(args, **kwargs):
    """``subprocess.run(args, **kwargs)`` of a command under mpiexec (its output captured),
    run again, twice at most, when the launcher failed on its own before any worker
    started (Open MPI's PMIx server losing a race for its socket: the pool does the same)."""
    from spmdlab.pool._launchers import failed_to_start

    for tries_left in (2, 1, 0):
        proc = subprocess.run(args, **kwargs)
        out = (proc.stdout or "") + (proc.stderr or "")
        if isinstance(out, bytes):
            out = out.decode("utf-8", "replace")
        if proc.returncode == 0 or not tries_left or not failed_to_start(out):
            return proc
        sys.stderr.write(f"the launcher failed on its own; trying again:\n{out}")


def is_open_mpi():
    from mpi4py import MPI

    return MPI.Get_library_version().startswith("Open MPI")


def in_process_tested_under_mpich(config):
    """Skip, in plain pytest under Open MPI, a test that runs in this one process: at one
    worker it does not depend on the MPI, and the MPICH run covers it (CI time, see
    scripts/test.sh); pytest-mpi runs it at several workers under both."""
    if not config.getoption("with_mpi", default=False) and is_open_mpi():
        pytest.skip("in-process at one worker: tested under MPICH (CI time)")


class Job:
    def __init__(self, returncode, stdout, stderr, seconds):
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        self.seconds = seconds


def run_job(source, n, *, timeout=60, env=None, nodes=1):
    """Run ``source`` as a script under ``mpiexec -n n``; a hang fails after ``timeout``.

    ``nodes=2`` spreads the workers over two nodes simulated by MPICH (the 2x2 layout
    at 4 workers); the test is skipped under Open MPI, which has no equivalent.
    """
    if nodes > 1:
        if is_open_mpi():
            pytest.skip("simulated nodes need MPICH")
        env = dict(env or {}, MPIR_CVAR_NUM_CLIQUES=str(nodes))
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(textwrap.dedent(source))
        path = f.name
    full_env = dict(os.environ, PYTHONUNBUFFERED="1")
    full_env.update(env or {})
    full_env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    full_env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    start = time.monotonic()
    try:
        proc = run_mpiexec(mpiexec_args(n) + [sys.executable, path], env=full_env,
                           capture_output=True, text=True, timeout=timeout,
                           start_new_session=True)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"job hung for {timeout} s; output so far:\n{exc.stdout}\n{exc.stderr}")
    finally:
        os.unlink(path)
    return Job(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start)


def interrupt_the_next_message_count(monkeypatch):
    """A KeyboardInterrupt raised once, by the next message's count (``_count.p2p``),
    which spmdlab calls right after posting a send: where a Ctrl-C that came during the
    post is raised (as the call returns, before its value is kept)."""
    from spmdlab import _count

    def interrupted(sent=0, received=0):
        monkeypatch.setattr(_count, "ON", False)
        raise KeyboardInterrupt

    monkeypatch.setattr(_count, "p2p", interrupted)
    monkeypatch.setattr(_count, "ON", True)


def line_of(path, marker):
    """The number of the line of file ``path`` that holds ``marker`` (for tests that
    check the ``file:line`` spmdlab names; the lookup's own line is skipped)."""
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if marker in line and "line_of(" not in line:
                return number
    raise AssertionError(marker)


def public_names(training=True):
    """``(qualified name, module, object)`` for every public name of ``spmdlab``,
    ``spmdlab.darray``, ``spmdlab.matlab``, ``spmdlab.pool``, ``spmdlab.testing`` and (``training``)
    ``spmdlab.training``: the API that the typing and reference-page tests walk."""
    import importlib

    names = ["spmdlab", "spmdlab.darray", "spmdlab.matlab", "spmdlab.pool", "spmdlab.testing"]
    for module in map(importlib.import_module, names + ["spmdlab.training"] * training):
        for name in module.__all__:
            yield f"{module.__name__}.{name}", module, getattr(module, name)


# -- the order a reduction folds in (see spmdlab/_reduce.py) ----------------------------


def left_fold(values, ufunc):
    acc = values[0].copy()
    for v in values[1:]:
        ufunc(acc, v, out=acc)
    return acc


def tree_fold(values, ufunc):
    """The documented bracketing of the tree among many workers, written apart from the
    code: the first 2(N - P) values pair up (P the largest power of two up to N), then
    neighbouring blocks of 1, 2, 4, ... combine, always lower op upper."""
    n = len(values)
    rem = n - (1 << (n.bit_length() - 1))
    level = [ufunc(values[2 * i], values[2 * i + 1]) for i in range(rem)] + \
        [v.copy() for v in values[2 * rem:]]
    while len(level) > 1:
        level = [ufunc(level[i], level[i + 1]) for i in range(0, len(level), 2)]
    return level[0]


def expected_fold(values, ufunc):
    """What a reduction gives: the left fold in worker order, or among more than
    SPMDLAB_TREE_ABOVE workers the tree's fold, at every size and layout."""
    from spmdlab import _world

    if _world.current().exchange.tree:
        return tree_fold(values, ufunc)
    return left_fold(values, ufunc)
