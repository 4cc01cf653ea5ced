"""The examples run end to end in their short mode, at 1 and 4 workers."""

import os
import subprocess
import sys

import pytest

from conftest import mpiexec_args

pytestmark = pytest.mark.mpi_skip  # launches mpiexec itself
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


EXAMPLES = ["digits_spmd.py", "train_digits_custom_loop.py", "train_multiple_networks.py"]


@pytest.mark.parametrize("workers", [1, 4])
@pytest.mark.parametrize("example", EXAMPLES)
def test_example_short_mode(example, workers, tmp_path):
    pytest.importorskip("sklearn")
    if example != "digits_spmd.py":
        pytest.importorskip("torch")
        pytest.importorskip("PIL")
    script = os.path.join(ROOT, "examples", example)
    cmd = [sys.executable, script, "--short"]
    if workers > 1:
        cmd = mpiexec_args(workers) + cmd
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    last = out.stdout.strip().splitlines()[-1]
    assert last.startswith("accuracy = ")
    assert float(last.split("=")[1]) > 0.8


@pytest.mark.parametrize("example", EXAMPLES)
def test_example_help(example):
    script = os.path.join(ROOT, "examples", example)
    out = subprocess.run([sys.executable, script, "--help"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and "--short" in out.stdout
