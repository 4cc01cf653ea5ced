# Sourced by demo.sh and test.sh: make (or reuse) a virtual environment and install
# spmdlab into it with the given extras. torch is pinned and installed first so that pip
# never resolves a default (CUDA) build.
# usage: make_venv DIR EXTRAS [MPI-WHEEL]
make_venv() {
  local dir=$1 extras=$2 mpi=${3:-mpich}
  local py=${PYTHON:-python3}
  if [ ! -x "$dir/bin/python" ]; then
    "$py" -m venv "$dir"
  fi
  "$dir/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
  if [[ ",$extras," == *",torch,"* ]]; then
    "$dir/bin/python" -m pip install -q --disable-pip-version-check "torch==2.13.0"
  fi
  "$dir/bin/python" -m pip install -q --disable-pip-version-check -e ".[${mpi},${extras}]"
}
