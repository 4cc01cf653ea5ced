"""The examples run end to end in their short mode, at 1 and 4 workers."""

import os
import subprocess
import sys

import pytest

from conftest import mpiexec_args

pytestmark = pytest.mark.mpi_skip  # launches mpiexec itself
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("workers", [1, 4])
def test_digits_demo(workers):
    pytest.importorskip("sklearn")
    script = os.path.join(ROOT, "examples", "digits_spmd.py")
    cmd = [sys.executable, script, "--short"]
    if workers > 1:
        cmd = mpiexec_args(workers) + cmd
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    last = out.stdout.strip().splitlines()[-1]
    assert last.startswith("accuracy = ")
    assert float(last.split("=")[1]) > 0.8
