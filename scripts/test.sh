#!/usr/bin/env bash
# The whole test suite on a fresh machine (what CI runs): for the MPICH wheel and the
# Open MPI wheel, a virtual environment each, then
#   - plain pytest: single-process tests, the crash/hang jobs, mypy on the package and a
#     typed user script, the docstring examples and the documentation site (the guide
#     and the reference pages, scripts/docs.sh) built with Sphinx -W (those two under
#     MPICH only), the README's and the guide's code blocks at 1 worker and under
#     mpiexec, and every example in its
#     short mode at 4 workers and at 2x2 (the demo and trainnet also as plain python)
#     under MPICH; under Open MPI the two
#     examples that use the core directly, at 4 workers (the other three go through the
#     training toolkit's same calls; one worker is plain python, the same under both),
#     and of the interactive pool what depends on the MPI (starting, stopping, faults, a
#     script and a notebook driving it), its client's side, the guide's code blocks, the
#     training toolkit's in-process tests and the web monitor of the toolkit's examples
#     under MPICH only;
#   - pytest-mpi at 1, 2, 3 and 4 workers on one node (Open MPI: 1, 2 and 4);
#   - MPICH only: the core's tests at 16 workers (oversubscribed) on two simulated nodes
#     of 8, where agreement and reductions go along a tree (spmdlab/_tree.py), large
#     ones by halves between the nodes (one node's shared-memory fold with the tree's
#     bracketing runs in the tree-forced run at the end);
#   - MPICH only: pytest-mpi at 2x2, two nodes of two workers simulated on this machine
#     (MPIR_CVAR_NUM_CLIQUES=2: workers 1, 3 on one node, 2, 4 on the other; traffic
#     between them leaves shared memory). Open MPI has no way to split one machine into
#     nodes, so its runs are all single-node.
# Then the core on the newest Python found (3.13 or 3.12), MPICH, without torch, and
# pytest-mpi at 3 workers there with the tree forced (SPMDLAB_TREE_ABOVE=0).
# Every mpiexec is bounded by a timeout. SPMDLAB_TEST_MPI=mpich (or openmpi) tests one MPI
# only. About 29-31 minutes on this 2-core VM (fresh-clone runs on 2026-11-27 and -28, nothing
# else running), 33.4 minutes after it restarted on an AVX-512 EPYC host (2026-11-28 12:10),
# more on a busy host.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_venv.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONUNBUFFERED=1
# Installs without bytecode, which the first import then writes (CI time)
NO_COMPILE=1
unset PYTHONDONTWRITEBYTECODE
export OMPI_MCA_rmaps_base_oversubscribe=1 PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe
failed=0
# Each run's output is kept too; at the end the failed runs are named again with their
# failing tests, so the last lines of a CI log say what failed.
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
failures=()
step() {  # step LABEL COMMAND...: runs it, shows and keeps its output, records a failure
  local label=$1 log rc=0
  shift
  log=$logs/${#failures[@]}-$RANDOM.log
  echo "=== $label"
  "$@" 2>&1 | tee "$log" || rc=${PIPESTATUS[0]}
  # a launcher that failed on its own before any worker started (Open MPI's PMIx server
  # losing a race for its socket) is tried once more, as the pool and the tests do
  if [ "$rc" != 0 ] && [ "$(wc -l < "$log")" -lt 20 ] &&
      grep -q "PMIx server's listener thread failed to start" "$log"; then
    echo "=== $label: the launcher failed on its own; trying again"
    rc=0
    "$@" 2>&1 | tee "$log" || rc=${PIPESTATUS[0]}
  fi
  [ "$rc" = 0 ] && return 0
  failures+=("$label|$rc|$log")
  failed=1
}
# The browser-monitor test drives Chromium: install it where this machine allows (Debian,
# as root); elsewhere that one test is skipped and says why. SPMDLAB_TEST_BROWSER=0: skip.
if [ "${SPMDLAB_TEST_BROWSER:-1}" != 0 ] && ! command -v chromedriver >/dev/null &&
    [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "=== installing Chromium for the browser test (apt-get)"
  { timeout 900 apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 ||
    { timeout 300 apt-get update -q >/dev/null 2>&1 &&
      timeout 900 apt-get install -y -q chromium chromium-driver >/dev/null 2>&1; }; } ||
    echo "=== Chromium could not be installed: the browser test will be skipped"
fi
# the core: what every collective, message and queue goes through
core=(tests/test_collectives.py tests/test_order.py tests/test_shared_memory.py
      tests/test_errors.py tests/test_p2p.py tests/test_queues.py tests/test_region.py
      tests/test_matlab.py tests/test_import.py tests/test_files.py)
for mpi in ${SPMDLAB_TEST_MPI:-mpich openmpi}; do
  venv=.venv-test-$mpi
  echo "=== $mpi: installing into $venv"
  extras=test,torch,examples,logs
  # the type check and the reference pages do not depend on the MPI: checked once
  [ "$mpi" = mpich ] && extras=$extras,types,docs
  make_venv "$venv" "$extras" "$mpi"
  py=$venv/bin/python
  mpiexec=("$venv/bin/mpiexec")
  [ "$mpi" = openmpi ] && mpiexec+=(--oversubscribe)
  step "$mpi: single process (plain pytest)" \
    timeout 1200 "$py" -m pytest -q --color=no -p no:cacheprovider --durations=12 tests
  # Open MPI: a representative subset (its odd count, 3, runs under MPICH, and under the
  # newest Python with the tree forced)
  layouts="1 2 4"
  [ "$mpi" = mpich ] && layouts="1 2 3 4 2x2"
  for layout in $layouts; do
    n=$layout
    cliques=()
    if [ "$layout" = 2x2 ]; then
      n=4
      cliques=(env MPIR_CVAR_NUM_CLIQUES=2)
    fi
    step "$mpi: pytest-mpi at $layout worker(s)" \
      timeout 600 "${cliques[@]}" "${mpiexec[@]}" -n "$n" "$py" -m pytest --with-mpi -q \
      --color=no -p no:cacheprovider tests
  done
  if [ "$mpi" = mpich ]; then
    step "mpich: the core at 16 workers, two nodes of 8 (oversubscribed; agreement and reductions along the tree)" \
      timeout 900 env MPIR_CVAR_NUM_CLIQUES=2 "${mpiexec[@]}" -n 16 "$py" -m pytest --with-mpi \
      -q --color=no -p no:cacheprovider "${core[@]}"
  fi
done
# The package as users install it: sdist and wheel built and checked, the wheel installed
# (not editable) in a fresh environment outside the checkout, tested there at 2 workers.
step "the wheel, installed outside the checkout (scripts/test_wheel.sh)" \
  timeout 900 bash scripts/test_wheel.sh "${PYTHON:-python3}"
# The core (no torch) on the newest Python here, where reference counts and threads may
# behave differently: its in-process tests, and pytest-mpi at 3 workers, MPICH. A pyenv
# shim that exists but cannot run is skipped.
newest=""
for cand in python3.13 "$HOME"/.pyenv/versions/3.13*/bin/python3 python3.12 \
    "$HOME"/.pyenv/versions/3.12*/bin/python3; do
  if "$cand" -c "import sys" >/dev/null 2>&1; then
    newest=$cand
    break
  fi
done
if [ -n "$newest" ]; then
  venv=.venv-test-newest
  echo "=== $("$newest" --version): installing into $venv"
  PYTHON=$newest make_venv "$venv" "test" mpich
  step "$("$newest" --version): the core (plain pytest)" \
    timeout 600 "$venv/bin/python" -m pytest -q --color=no -p no:cacheprovider "${core[@]}"
  # at 3 workers with the tree forced (SPMDLAB_TREE_ABOVE=0: its pre-pairing, as at
  # any worker count that is not a power of two)
  step "$("$newest" --version): pytest-mpi at 3 workers, the tree forced" \
    env SPMDLAB_TREE_ABOVE=0 timeout 600 "$venv/bin/mpiexec" -n 3 "$venv/bin/python" -m \
    pytest --with-mpi -q --color=no -p no:cacheprovider tests
else
  echo "=== no Python 3.12 or 3.13 here: the newest-Python run is skipped"
fi
if [ "$failed" != 0 ]; then
  echo "=== FAILED: ${#failures[@]} run(s); each, with its failing tests (whole output above):"
  for entry in "${failures[@]}"; do
    IFS='|' read -r label rc log <<<"$entry"
    why="exit status $rc"
    [ "$rc" = 124 ] && why="$why: killed by its timeout"
    echo "--- $label ($why)"
    # pytest's short summary, a timeout's or a crash's last words
    grep -a -E '^(FAILED|ERROR) |^E +[A-Za-z]|Timeout|timed out|Terminated|Killed|ended without' \
      "$log" | cut -c1-400 | awk '!seen[$0]++' | head -40 || true
    echo "    its last lines:"
    tail -n 5 "$log" | cut -c1-400 | sed 's/^/    /' || true
  done
  exit 1
fi
echo "all test runs passed"
