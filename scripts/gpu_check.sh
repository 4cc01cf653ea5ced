#!/usr/bin/env bash
# The GPU checks, on a machine with a CUDA GPU whose python3 already holds torch, CuPy,
# numpy and pytest (and which may have no network): every test that puts torch CUDA
# tensors or CuPy arrays through spmdlab's collectives, messages and codistributed arrays,
# at 1, 2 and 4 workers and at 2x2, then trainnet on the GPU, then
# scripts/bench_gpu.py at 2 workers.
#
#   bash scripts/gpu_check.sh            # python3 is the one with torch and CuPy
#   PYTHON=/path/to/python bash scripts/gpu_check.sh
#   bash scripts/gpu_check.sh --tests-only   # the tests, not trainnet or the timings
#   bash scripts/gpu_check.sh --setup-only   # only the environment, for other runs
#
# MPICH, mpi4py and pytest-mpi come from wheels in .whl/ when that folder exists (made
# with `pip download --no-deps --only-binary=:all: mpich mpi4py pytest-mpi` for the
# machine's Python), else from PyPI. They go into a virtual environment of their own in
# $GPU_VENV (/tmp/spmdlab-gpu) that also sees the packages of $PYTHON. The log is
# written to $OUT/gpu-check.log when OUT is set.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
V=${GPU_VENV:-/tmp/spmdlab-gpu}
LOG=${OUT:-/tmp}/gpu-check.log
exec > >(tee "$LOG") 2>&1

rm -rf "$V"
"$PY" -m venv --without-pip "$V" || exit 1
image_site=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
venv_site=$("$V/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# the image's packages after the venv's own (so our mpi4py wins), their .pth files read
echo "import site; site.addsitedir('$image_site')" > "$venv_site/zz-image.pth"
echo "$PWD" > "$venv_site/spmdlab-src.pth"
if [ -d .whl ]; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --ignore-installed \
        --prefix "$V" .whl/*.whl || exit 1
else
    "$PY" -m pip install -q --prefix "$V" mpich mpi4py pytest-mpi || exit 1
fi
P=$V/bin/python
export PATH=$V/bin:$PATH PYTHONUNBUFFERED=1

nvidia-smi -L 2>/dev/null || echo "nvidia-smi: not found"
"$P" - <<'EOF' || exit 1
import mpi4py, numpy, spmdlab
from mpi4py import MPI
print("mpi4py", mpi4py.__version__, "from", mpi4py.__file__)
print("MPI", MPI.Get_library_version().splitlines()[0])
print("numpy", numpy.__version__, "spmdlab", spmdlab.__version__, "from", spmdlab.__file__)
try:
    import torch
    print("torch", torch.__version__, "cuda", torch.cuda.is_available(),
          torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
except ImportError:
    print("torch: not installed")
try:
    import cupy
    print("cupy", cupy.__version__, "devices", cupy.cuda.runtime.getDeviceCount())
except Exception as e:
    print("cupy:", type(e).__name__, e)
from spmdlab import _backends
print("CUDA-aware MPI:", _backends._query_cuda_support())
EOF

[ "${1:-}" = --setup-only ] && exit 0

status=0
run() {
    echo "== $*"
    "$@" || { echo "== FAILED (rc=$?): $*"; status=1; }
}
FILES="tests/test_gpu.py tests/test_collectives.py tests/test_p2p.py tests/test_darray.py
       tests/test_darray_matlab.py tests/test_darray_shaping.py"
SELECT="gpu or cuda or cupy"
PYTEST="$P -m pytest -q -p no:cacheprovider -rs"
run timeout 300 $PYTEST tests/test_gpu.py
for n in 1 2 4; do
    run timeout 300 mpiexec -n $n $PYTEST --with-mpi $FILES -k "$SELECT"
done
MPIR_CVAR_NUM_CLIQUES=2 run timeout 300 mpiexec -n 4 $PYTEST --with-mpi $FILES -k "$SELECT"
if [ "${1:-}" = --tests-only ]; then
    echo "== gpu tests: $([ $status = 0 ] && echo passed || echo FAILED)"
    exit $status
fi
run timeout 300 mpiexec -n 1 $PYTEST --with-mpi tests/test_trainnet.py -k "device or bad_arg"
# trainnet on the GPU: one worker has the GPU to itself (parallel-auto takes it)
run timeout 300 mpiexec -n 1 "$P" examples/trainnet_parallel_auto.py --epochs 2
# two workers on one GPU: parallel-auto falls back to the CPUs, parallel-gpu says why not
run timeout 300 mpiexec -n 2 "$P" examples/trainnet_parallel_auto.py --epochs 1
# GPU values against the same host staging by hand in raw mpi4py (timings, not checks)
run timeout 200 mpiexec -n 2 "$P" scripts/bench_gpu.py
echo "== gpu checks: $([ $status = 0 ] && echo passed || echo FAILED)"
exit $status
