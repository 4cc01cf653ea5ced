# Sourced by demo.sh and test.sh: make (or reuse) a virtual environment and install
# spmdlab into it with the given extras. torch is pinned and installed first so that pip
# never resolves a default (CUDA) build.
# usage: make_venv DIR EXTRAS [MPI-WHEEL]
# NO_COMPILE=1: pip writes no bytecode (half the install time; Python compiles what is
# imported, once, unless PYTHONDONTWRITEBYTECODE is set).
make_venv() {
  local dir=$1 extras=$2 mpi=${3:-mpich}
  local py=${PYTHON:-python3}
  local pip=("$dir/bin/python" -m pip install -q --disable-pip-version-check)
  [ "${NO_COMPILE:-0}" = 1 ] && pip+=(--no-compile)
  if [ ! -x "$dir/bin/python" ]; then
    "$py" -m venv "$dir"
  fi
  "${pip[@]}" --upgrade pip
  if [[ ",$extras," == *",torch,"* ]]; then
    "${pip[@]}" "torch==2.13.0"
  fi
  # a plain path in site-packages, which type checkers (mypy) follow (setup.cfg's
  # package_dir makes it so; see tests/test_typing.py)
  "${pip[@]}" -e ".[${mpi},${extras}]"
}
