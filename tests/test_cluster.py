"""Under a real launcher: srun on a Slurm cluster (scripts/slurm_local.sh makes a one-node
one). Skipped unless ``sinfo`` answers with an idle or mixed node.

The MPICH wheel's MPI talks to Slurm through PMI-2 (``srun --mpi=pmi2``), the Open MPI
wheel's through PMIx (``srun --mpi=pmix``, which needs Slurm's PMIx plugin); with
``--mpi=none`` every process would be a one-worker job of its own, which the worker
count check below catches.
"""

import functools
import os
import shutil
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import is_open_mpi

pytestmark = pytest.mark.mpi_skip  # launches srun itself


@functools.lru_cache(maxsize=None)
def _slurm_ready():
    """Whether Slurm answers here: asked once per process, and only by a test that runs
    (a Slurm client with no controller answers after 9 s; asked at import by every test
    of this file, that cost each pytest process of CI 45 s even where the file's tests
    are skipped, as under --with-mpi)."""
    if shutil.which("srun") is None or shutil.which("sinfo") is None:
        return False
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True,
                             timeout=10)
    except (subprocess.TimeoutExpired, OSError):
        return False
    return out.returncode == 0 and any(s in out.stdout for s in ("idle", "mix"))


@pytest.fixture
def slurm():
    if not _slurm_ready():
        pytest.skip("no Slurm here (scripts/slurm_local.sh)")


SCRIPT = """
import numpy as np
from spmdlab import DataQueue, spmd_cat, spmd_index, spmd_plus, spmd_size
assert spmd_size() == 4, f"{spmd_size()} workers: srun started unrelated one-worker jobs"
x = np.random.default_rng(spmd_index()).standard_normal(100_000).astype(np.float32)
total = spmd_plus(x)
expected = np.random.default_rng(1).standard_normal(100_000).astype(np.float32)
for k in range(2, 5):
    expected += np.random.default_rng(k).standard_normal(100_000).astype(np.float32)
assert np.array_equal(total, expected)
q = DataQueue()
got = []
q.after_each(got.append)
for i in range(200):
    q.send((spmd_index(), i))
print("worker", spmd_index(), "of", spmd_size(), "ok", flush=True)
"""


@pytest.mark.usefixtures("slurm")
@pytest.mark.parametrize("nodes", [1, 2])
def test_srun_runs_one_job_of_four_workers(tmp_path, nodes):
    plugin = "--mpi=pmi2"
    if is_open_mpi():  # Open MPI's wheel speaks PMIx only
        plugins = subprocess.run(["srun", "--mpi=list"], capture_output=True, text=True,
                                 timeout=30)
        if "pmix" not in plugins.stdout + plugins.stderr:
            pytest.skip("Slurm has no PMIx plugin here (Debian: libpmix-dev)")
        if nodes > 1:
            pytest.skip("simulated nodes need MPICH")
        plugin = "--mpi=pmix"
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(SCRIPT))
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if nodes == 2:
        env["MPIR_CVAR_NUM_CLIQUES"] = "2"
    out = subprocess.run(["srun", "-n", "4", "-O", plugin, sys.executable,
                          str(script)], capture_output=True, text=True, timeout=120,
                         env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert sorted(l for l in out.stdout.splitlines() if l.startswith("worker")) == [
        f"worker {k} of 4 ok" for k in range(1, 5)]


# -- the interactive pool inside an allocation: its workers started by srun -------------

POOL_CLIENT = """
import os, sys, time
import spmdlab
from spmdlab import *

def gone(pids, seconds=20):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(os.path.exists(f"/proc/{p}") and
                   open(f"/proc/{p}/stat").read().split(")")[-1].split()[0] != "Z"
                   for p in pids):
            return True
        time.sleep(0.1)
    return False

n = 4
pool = spmdlab.start_pool(n)  # auto: srun, inside the allocation
assert pool.launcher == "srun", pool
assert "mpi4py.MPI" not in sys.modules, "the client started MPI"
# the secret travels in srun's environment, never on a command line
environ = open(f"/proc/{pool._proc.pid}/environ", "rb").read().split(b"\\0")
secret = next(v.split(b"=", 1)[1] for v in environ if v.startswith(b"SPMDLAB_POOL_SECRET="))
for pid in [pool._proc.pid, *pool.pids]:
    assert secret not in open(f"/proc/{pid}/cmdline", "rb").read(), pid

def layout():
    from mpi4py import MPI
    return MPI.COMM_WORLD.Split_type(MPI.COMM_TYPE_SHARED).Get_size()
assert pool.spmd(layout)[:] == [int(os.environ["EXPECTED_NODE_SIZE"])] * n

c = pool.spmd(lambda: spmd_plus(spmd_index()) * 100 + spmd_index())
assert c[:] == [1000 + k for k in range(1, n + 1)] and c[3] == 1003 and len(c) == n
c[2] = "set by the client"
assert c[2] == "set by the client"
ns = {"a": 7}
pool.run_cell("x = a * spmd_index()\\nprint('x is', x)\\ny = spmd_cat(x)", ns)
assert ns["x"][:] == [7 * k for k in range(1, n + 1)] and list(ns["y"][1]) == ns["x"][:]

def fails():  # an error on one worker stops the others in a collective; the pool survives
    if spmd_index() == 2:
        raise ValueError("bad value on worker 2")
    spmd_plus(1)
try:
    pool.spmd(fails)
    raise AssertionError("no error")
except SpmdError as exc:
    assert "worker 2 of 4 failed" in str(exc) and "bad value on worker 2" in str(exc), exc
assert pool.spmd(lambda: spmd_plus(1))[:] == [n] * n

q = DataQueue()  # every item reaches the client's listener while the block runs
got = []
q.after_each(got.append)
pool.spmd(lambda q: [q.send((spmd_index(), i)) for i in range(200)] and None, q)
assert sorted(got) == sorted((k, i) for k in range(1, n + 1) for i in range(200))

# a killed worker: srun ends the job, the client says so and starts no orphans
pids, launcher = list(pool.pids), pool._proc.pid
os.kill(pids[2], 9)
try:
    pool.spmd(lambda: spmd_plus(1))
    raise AssertionError("no error")
except SpmdError as exc:
    assert "of 4 ended" in str(exc) and "the pool has ended" in str(exc), exc
assert pool.closed and gone(pids + [launcher]), "workers or srun outlived the pool"

# a new pool in the same allocation, ended by delete
pool = spmdlab.start_pool(2)
assert pool.spmd(lambda: spmd_plus(spmd_index()))[:] == [3, 3]
pids, launcher = list(pool.pids), pool._proc.pid
started = time.monotonic()
pool.delete()
assert gone(pids + [launcher]), "delete left workers or srun behind"
print("OK in", round(time.monotonic() - started, 1), "s", flush=True)
"""


def _allocation(n, command, env, timeout=240):
    """``command`` run by ``salloc -n n``, as a person runs python in an allocation."""
    return subprocess.run(["salloc", "-n", str(n), "--quiet", *command],
                          capture_output=True, text=True, timeout=timeout, env=env)


@pytest.mark.usefixtures("slurm")
@pytest.mark.parametrize("nodes", [1, 2])
def test_a_pool_in_an_allocation(nodes):
    env = dict(os.environ, PYTHONUNBUFFERED="1", EXPECTED_NODE_SIZE=str(4 // nodes))
    env.pop("MPIR_CVAR_NUM_CLIQUES", None)
    if nodes == 2:
        if is_open_mpi():
            pytest.skip("simulated nodes need MPICH")
        env["MPIR_CVAR_NUM_CLIQUES"] = "2"
    out = _allocation(4, [sys.executable, "-c", textwrap.dedent(POOL_CLIENT)], env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "OK in" in out.stdout, out.stdout + out.stderr
    for k in range(1, 5):
        assert f"Worker {k}: x is {7 * k}" in out.stdout, out.stdout
    assert "task 2: Killed" in out.stderr, out.stderr  # srun's own word on the kill


@pytest.mark.usefixtures("slurm")
def test_a_pool_srun_cannot_start_says_why():
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    out = _allocation(2, [sys.executable, "-c", textwrap.dedent("""
        import spmdlab
        for n, args in ((4, []), (2, ["--mpi=no-such-plugin"]), (2, ["--mpi=none"])):
            try:
                spmdlab.start_pool(n, launcher="srun", launcher_args=args)
            except spmdlab.SpmdError as exc:
                print("ERROR:", exc)
    """)], env)
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    # more workers than the allocation holds, a plugin srun does not have: srun's words
    assert "ERROR: parpool(4): the pool could not start: the launcher ended" in text, text
    assert "More processors requested than permitted" in text, text
    assert "ERROR: parpool(2): the pool could not start" in text, text
    assert "--mpi=no-such-plugin" in text and "Invalid MPI type" in text, text
    # a plugin the MPI does not speak: every worker a job of one, and the hint
    assert "not one of 2 workers: is srun's --mpi plugin the one" in text, text


@pytest.mark.usefixtures("slurm")
def test_ctrl_c_stops_a_pool_in_an_allocation():
    pexpect = pytest.importorskip("pexpect")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    child = pexpect.spawn("salloc", ["-n", "2", "--quiet", sys.executable, "-q"], env=env,
                          encoding="utf-8", timeout=90)

    def do(line):
        child.sendline(line)
        child.expect(">>> ")
        return child.before

    try:
        child.expect(">>> ")
        out = do("import spmdlab, time; from spmdlab import *; "
                 "pool = spmdlab.start_pool(2); print(pool.launcher)")
        assert "srun" in out, out
        for stuck in ["lambda: spmd_receive(2) if spmd_index() == 1 else spmd_plus(1)",
                      "lambda: time.sleep(300)"]:
            child.sendline(f"pool.spmd({stuck})")
            time.sleep(2)
            started = time.monotonic()
            child.sendintr()
            child.expect("KeyboardInterrupt", timeout=30)
            child.expect(">>> ", timeout=30)
            assert time.monotonic() - started < 10
            out = do("pool.spmd(lambda: spmd_plus(spmd_index()))[:]")
            assert "[3, 3]" in out, out
        child.sendline("exit()")
        child.expect(pexpect.EOF, timeout=30)
    finally:
        child.close(force=True)


@pytest.mark.usefixtures("slurm")
def test_a_pool_from_a_task_of_a_step():
    # a client that srun started itself (srun --pty python): its workers' step shares
    # its CPUs (--overlap) instead of waiting for the client's step to end
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    out = _allocation(2, ["srun", "-n", "1", sys.executable, "-c", textwrap.dedent("""
        import spmdlab
        from spmdlab import spmd_index, spmd_plus
        pool = spmdlab.start_pool(2, timeout=60)
        print("sums", pool.spmd(lambda: spmd_plus(spmd_index()))[:], flush=True)
        pool.delete()
    """)], env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "sums [3, 3]" in out.stdout, out.stdout + out.stderr
