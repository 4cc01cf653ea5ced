#!/usr/bin/env bash
# The main demo on a fresh machine: a virtual environment in .venv, spmdlab with the
# embedded MPICH, torch (CPU) and the examples' packages, then four workers on the
# embedded digits.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_venv.sh
make_venv .venv torch,examples
timeout 600 .venv/bin/mpiexec -n 4 .venv/bin/python examples/digits_spmd.py "$@"
