#!/usr/bin/env bash
# The package as a user gets it: build the sdist and the wheel, check them (twine, and
# scripts/check_wheel.py: every module, py.typed, the static files, the licenses), install
# the wheel (not editable) into a fresh virtual environment outside the checkout, and
# there run the core pytest-mpi tests and an example at 2 workers, and mypy on a user
# script. usage: scripts/test_wheel.sh PYTHON (a Python with pip; MPICH's wheel is used)
set -euo pipefail
cd "$(dirname "$0")/.."
py=${1:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pip=(--disable-pip-version-check -q)
"$py" -m venv "$work/build"
"$work/build/bin/python" -m pip install "${pip[@]}" build twine
"$work/build/bin/python" -m build --outdir "$work/dist" . >"$work/build.log" 2>&1 ||
  { cat "$work/build.log"; exit 1; }
"$work/build/bin/python" -m twine check --strict "$work"/dist/*
"$work/build/bin/python" scripts/check_wheel.py "$work"/dist/*.whl "$work"/dist/*.tar.gz
# a user's folder: nothing of the checkout but copies of a few tests and an example
user=$work/user
mkdir -p "$user/tests"
cp tests/conftest.py tests/test_collectives.py tests/test_p2p.py tests/test_composite.py \
   tests/test_queues.py tests/test_darray.py "$user/tests/"
cp examples/jacobi_halo.py "$user/"
"$py" -m venv "$user/venv"
wheel=$(ls "$work"/dist/*.whl)
"$user/venv/bin/python" -m pip install "${pip[@]}" "spmdlab[mpich] @ file://$wheel" \
  pytest pytest-mpi mypy
cd "$user"
venv/bin/python -c "import spmdlab, sys; p = spmdlab.__file__; \
assert '/site-packages/' in p, p; print('spmdlab from', p)"
timeout 600 venv/bin/mpiexec -n 2 venv/bin/python -m pytest --with-mpi -q --color=no \
  -p no:cacheprovider tests
timeout 300 venv/bin/mpiexec -n 2 venv/bin/python jacobi_halo.py --short
cat > script.py <<'PY'
import numpy as np
from spmdlab import Composite, spmd_cat, spmd_index, spmd_plus, spmd_size

total: np.ndarray = spmd_plus(np.ones(3) * spmd_index())
everyone: np.ndarray = spmd_cat(spmd_index())
c = Composite(spmd_size())
first: int = c[1]
print(f"worker {spmd_index()}: {total} {everyone} {first}")
PY
venv/bin/python -m mypy --no-error-summary script.py
echo "the wheel works from outside the checkout"
