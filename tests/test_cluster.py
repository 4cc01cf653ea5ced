"""Under a real launcher: srun on a Slurm cluster (scripts/slurm_local.sh makes a one-node
one). Skipped unless ``sinfo`` answers with an idle or mixed node.

The MPICH wheel's MPI talks to Slurm through PMI-2 (``srun --mpi=pmi2``), the Open MPI
wheel's through PMIx (``srun --mpi=pmix``, which needs Slurm's PMIx plugin); with
``--mpi=none`` every process would be a one-worker job of its own, which the worker
count check below catches.
"""

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from conftest import is_open_mpi

pytestmark = pytest.mark.mpi_skip  # launches srun itself


def _slurm_ready():
    if shutil.which("srun") is None or shutil.which("sinfo") is None:
        return False
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True,
                             timeout=10)
    except (subprocess.TimeoutExpired, OSError):
        return False
    return out.returncode == 0 and any(s in out.stdout for s in ("idle", "mix"))


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


@pytest.mark.skipif(not _slurm_ready(), reason="no Slurm here (scripts/slurm_local.sh)")
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
