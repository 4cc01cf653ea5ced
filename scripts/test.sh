#!/usr/bin/env bash
# The whole test suite on a fresh machine (what CI runs): for the MPICH wheel and the
# Open MPI wheel, a virtual environment each, then plain pytest (single-process tests and
# the crash/hang jobs) and pytest-mpi at 1, 2, 3 and 4 workers. Every mpiexec is bounded
# by a timeout. SPMDLAB_TEST_MPI=mpich (or openmpi) tests one MPI only.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_venv.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONUNBUFFERED=1
export OMPI_MCA_rmaps_base_oversubscribe=1 PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe
failed=0
for mpi in ${SPMDLAB_TEST_MPI:-mpich openmpi}; do
  venv=.venv-test-$mpi
  echo "=== $mpi: installing into $venv"
  make_venv "$venv" "test,torch,examples" "$mpi"
  py=$venv/bin/python
  mpiexec=("$venv/bin/mpiexec")
  [ "$mpi" = openmpi ] && mpiexec+=(--oversubscribe)
  echo "=== $mpi: single process (plain pytest)"
  timeout 900 "$py" -m pytest -q --color=no -p no:cacheprovider tests || failed=1
  for n in 1 2 3 4; do
    echo "=== $mpi: pytest-mpi at $n worker(s)"
    timeout 600 "${mpiexec[@]}" -n "$n" "$py" -m pytest --with-mpi -q --color=no -p no:cacheprovider \
      tests || failed=1
  done
done
if [ "$failed" != 0 ]; then
  echo "FAILED: see the runs above"
  exit 1
fi
echo "all test runs passed"
