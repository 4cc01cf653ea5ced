"""The benchmark scripts still run (smallest settings, 2 workers); no timing is asserted."""

import os
import subprocess
import sys

import pytest

from conftest import is_open_mpi

pytestmark = pytest.mark.mpi_skip  # each launches mpiexec itself
SCRIPTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts")


@pytest.mark.parametrize("script, args, expect", [
    ("bench_collectives.py", ["--quick"], "16 MiB float32: spmd_plus reaches"),
    # the largest matrix's label was cut to "1448x1448 (16 Mi" (tester X)
    ("bench_darray.py", ["--quick"], " 1448x1448 (16 MiB): "),
    ("bench_dataqueue.py", ["--items", "100", "--rounds", "1"], "delivered in order"),
    ("bench_training.py", ["--steps", "1", "--rounds", "1"], "spmdlab/DDP"),
    ("bench_trainnet.py", ["--iterations", "2", "--rounds", "1"], "trainnet/DDP"),
])
def test_benchmark_script_runs(script, args, expect):
    if is_open_mpi():
        pytest.skip("the scripts do not depend on the MPI library; run under MPICH")
    if script != "bench_dataqueue.py":
        pytest.importorskip("torch")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    out = subprocess.run([sys.executable, os.path.join(SCRIPTS, script), "--workers", "2",
                          *args], capture_output=True, text=True, timeout=300, env=env,
                         cwd=SCRIPTS)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith(script[:-3] + ": ") and expect in out.stdout, out.stdout


def test_the_scaling_counts():
    """bench_scale counts (not times) what a call costs each worker: the gathering
    exchange examines every worker's record, the tree one per step."""
    if is_open_mpi():
        pytest.skip("the script does not depend on the MPI library; run under MPICH")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    out = subprocess.run([sys.executable, os.path.join(SCRIPTS, "bench_scale.py"),
                          "--workers", "2", "5", "--reps", "2"], capture_output=True,
                         text=True, timeout=300, env=env, cwd=SCRIPTS)
    assert out.returncode == 0, out.stdout + out.stderr
    rows = {tuple(cell.strip() for cell in line.split("|")[1:4]):
            [cell.strip() for cell in line.split("|")[4:6]]
            for line in out.stdout.splitlines() if line.startswith("| spmd")}
    # at 5 workers: 5 records gathered, or one per step of the tree (a pre-pair and 2)
    assert rows[("spmd_plus(scalar)", "records", "gathering")] == ["2", "5"], out.stdout
    assert rows[("spmd_plus(scalar)", "records", "default")] == ["2", "3"], out.stdout
    assert rows[("spmd_send/receive", "msgs", "default")] == ["2", "2"], out.stdout
    # 64 KiB gathered at 2 workers (the agreement's 2 messages, then the data's 2); by
    # halves along the tree at 5: worker 2 takes worker 1's value (1 message), 2 steps
    # each way of 2 messages, the result back (1), after the agreement's 6
    assert rows[("spmd_plus(64 KiB)", "msgs", "default")] == ["4", "16"], out.stdout
    # every wait watches its request and the exit notices of its neighbours in the
    # notices' tree: worker 2 of 5 has three (workers 1, 4 and 5), worker 1 of 2 one
    for call in ("spmd_plus(scalar)", "spmd_plus(64 KiB)", "spmd_cat(one value)"):
        for mode in ("gathering", "default"):
            counts = rows.get((call, "req/wait", mode))
            if counts is not None:
                assert all(float(c) <= most for c, most in zip(counts, (2, 4))), out.stdout
    # the exit notices of the whole program: at 2 workers one each way (and a second
    # receive posted where the other's end came first); at 5, no worker hears of more
    # than the 4 other ends
    notices = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:4]]
               for line in out.stdout.splitlines()
               if line.startswith(("| posted", "| sent", "| received"))}
    assert notices["sent"][0] == notices["received"][0] == "1", out.stdout
    assert notices["posted"][0] in ("1", "2"), out.stdout
    assert 1 <= int(notices["received"][1]) <= 4, out.stdout
