"""``python -m spmdlab doctor`` under mpiexec: the facts, the verdict, the exit status."""

import os
import subprocess
import sys

import pytest

from conftest import is_open_mpi, mpiexec_args, run_mpiexec

pytestmark = pytest.mark.mpi_skip  # these tests launch mpiexec themselves


def doctor(n=None, env=None, nodes=1):
    if nodes > 1:
        if is_open_mpi():
            pytest.skip("simulated nodes need MPICH")
        env = dict(env or {}, MPIR_CVAR_NUM_CLIQUES=str(nodes))
    full = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                **(env or {}))
    for name in ("SLURM_STEP_NUM_TASKS", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE"):
        if name not in (env or {}):
            full.pop(name, None)
    args = ([] if n is None else mpiexec_args(n)) + [sys.executable, "-m", "spmdlab",
                                                     "doctor"]
    return run_mpiexec(args, env=full, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("n", [2, 3])
def test_doctor_under_mpiexec_reports_every_worker_and_passes(n):
    job = doctor(n)
    assert job.returncode == 0, job.stdout + job.stderr
    out = job.stdout
    assert out.count("spmdlab doctor:") == 1  # worker 1 reports for all
    assert f"spmdlab doctor: {n} worker(s) on 1 host(s) (1 MPI node(s)" in out
    assert "thread level     multiple" in out and "shared memory    usable" in out
    assert "(the same on every worker)" in out
    assert f"workers {', '.join(map(str, range(1, n + 1)))}" in out
    assert "verdict: all is well" in out


def test_doctor_sees_the_2x2_layout():
    job = doctor(4, nodes=2)
    assert job.returncode == 0, job.stdout + job.stderr
    assert "4 worker(s) on 1 host(s) (2 MPI node(s): shared-memory groups)" in job.stdout


def test_doctor_flags_a_process_the_launcher_meant_to_have_company():
    # srun started 4 tasks but the MPI library mpi4py loaded does not speak to it: each
    # process thinks it is alone (a pip MPI shadowing the site MPI under srun)
    job = doctor(env={"SLURM_STEP_NUM_TASKS": "4"})
    assert job.returncode == 1
    assert "this process is alone (1 worker) although the launcher started 4" in job.stdout
    assert "fix: " in job.stdout and "verdict: 1 problem(s)" in job.stdout


def test_doctor_flags_a_setting_that_differs_among_the_workers():
    # spmdlab refuses to start then (the workers would move a collective's data in
    # different ways): the doctor says so, and which worker has which
    full = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    full.pop("SPMDLAB_GATHER_BYTES", None)
    command = [sys.executable, "-m", "spmdlab", "doctor"]
    args = (mpiexec_args(1) + ["env", "SPMDLAB_GATHER_BYTES=0"] + command + [":"]
            + mpiexec_args(2)[1:] + command)
    job = run_mpiexec(args, env=full, capture_output=True, text=True, timeout=120)
    assert job.returncode == 1, job.stdout + job.stderr
    assert ("the workers differ in SPMDLAB_GATHER_BYTES (worker 1: 0; workers 2, 3: "
            "131072): spmdlab refuses to start") in job.stdout, job.stdout
    assert "verdict: 1 problem(s)" in job.stdout


def test_plain_python_doctor_is_one_healthy_worker():
    job = doctor()
    assert job.returncode == 0, job.stdout + job.stderr
    assert "1 worker(s)" in job.stdout and "verdict: all is well" in job.stdout


def test_module_without_a_command_prints_its_usage():
    job = subprocess.run([sys.executable, "-m", "spmdlab"], capture_output=True, text=True)
    assert job.returncode == 2 and "usage: python -m spmdlab doctor" in job.stderr
