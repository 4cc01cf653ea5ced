"""The examples run end to end in their short mode, at 4 workers and at 2x2, and as plain
python (one worker) for the demo and the trainnet example."""

import os
import subprocess
import sys

import pytest

from conftest import is_open_mpi, mpiexec_args, run_mpiexec

pytestmark = pytest.mark.mpi_skip  # launches mpiexec itself
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


EXAMPLES = ["digits_spmd.py", "train_digits_custom_loop.py", "train_multiple_networks.py",
            "train_resnet_custom_loop.py", "trainnet_parallel_auto.py"]
# Under Open MPI: the examples whose MPI use differs (collectives, DataQueue, stop relay);
# the others use the same calls through the training toolkit.
OPEN_MPI_EXAMPLES = ["digits_spmd.py", "train_digits_custom_loop.py"]
# As plain python (one worker): the demo, and trainnet, whose "parallel-auto" then trains
# serially. The custom loops have no one-worker branch: 4 and 2x2 run their code (CI time).
PLAIN_PYTHON_EXAMPLES = ["digits_spmd.py", "trainnet_parallel_auto.py"]
RUNS = [(e, w) for e in EXAMPLES for w in (1, 4, "2x2") if w != 1 or e in PLAIN_PYTHON_EXAMPLES]


@pytest.mark.parametrize("example, workers", RUNS)
def test_example_short_mode(example, workers, tmp_path):
    """``2x2``: two nodes of two workers, simulated by MPICH (MPIR_CVAR_NUM_CLIQUES=2),
    each node with a cache folder of its own (HOME), as nodes without a shared disk."""
    pytest.importorskip("sklearn")
    if example != "digits_spmd.py":
        pytest.importorskip("torch")
        pytest.importorskip("PIL")
    if workers == 1 and is_open_mpi():  # plain python: the MPICH run covers it
        pytest.skip("one worker runs without mpiexec; tested under MPICH")
    if is_open_mpi() and example not in OPEN_MPI_EXAMPLES:  # CI time, see scripts/test.sh
        pytest.skip("under Open MPI the core's examples run; the toolkit's run under MPICH")
    script = os.path.join(ROOT, "examples", example)
    cmd = [sys.executable, script, "--short"]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    if workers == "2x2":
        if is_open_mpi():
            pytest.skip("simulated nodes need MPICH (Open MPI has no equivalent)")
        env["MPIR_CVAR_NUM_CLIQUES"] = "2"  # workers 1, 3 on one node, 2, 4 on the other
        homes = [tmp_path / "node-a", tmp_path / "node-b"]
        blocks = [["-n", "1", "-env", "HOME", str(homes[k % 2])] + cmd for k in range(4)]
        cmd = [mpiexec_args(1)[0]] + [a for b in blocks for a in b + [":"]][:-1]
    elif workers > 1:
        cmd = mpiexec_args(workers) + cmd
    out = run_mpiexec(cmd, capture_output=True, text=True, timeout=300, env=env,
                      cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    if workers == "2x2" and example in ("train_resnet_custom_loop.py",
                                        "trainnet_parallel_auto.py"):
        for home in homes:  # each node wrote its own image cache
            assert (home / ".cache" / "spmdlab" / "digits" / "7").is_dir()
    last = out.stdout.strip().splitlines()[-1]
    assert last.startswith("accuracy = ") and last.endswith("%")  # one unit: percent
    assert float(last.split("=")[1].rstrip("%")) > 80


def _run_short(example, workers):
    """The lines an example prints in its short mode at ``workers`` (1: plain python;
    "2x2": two simulated nodes of two, MPICH only), checked to exit 0."""
    if workers == 1 and is_open_mpi():
        pytest.skip("one worker runs without mpiexec; tested under MPICH")
    cmd = [sys.executable, os.path.join(ROOT, "examples", example), "--short"]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    if workers == "2x2":
        if is_open_mpi():
            pytest.skip("simulated nodes need MPICH (Open MPI has no equivalent)")
        env["MPIR_CVAR_NUM_CLIQUES"] = "2"
        cmd = mpiexec_args(4) + cmd
    elif workers > 1:
        cmd = mpiexec_args(workers) + cmd
    out = run_mpiexec(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout.strip().splitlines()


@pytest.mark.parametrize("workers", [1, 4, "2x2"])
def test_heat_on_a_codistributed_grid_matches_the_serial_solver(workers):
    """The codistributed-array example (MATLAB's names, halos with labSendReceive): the
    gathered grid equals the serial sweeps bit for bit, at every layout; under Open MPI
    too (its derived datatypes and all-to-all are its own)."""
    lines = _run_short("heat_codistributed.py", workers)
    assert lines[-1] == "matches the serial solver: True", lines
    assert "24x24 plate on" in lines[0] and "centre 22.14 degrees" in lines[0]


@pytest.mark.parametrize("workers", [1, 3, "2x2"])
def test_spectral_poisson_example_matches_numpy_on_the_whole_grid(workers):
    """The distributed-FFT example (fft2/ifft2 of a codistributed grid split by rows):
    the gathered solution equals numpy's on the whole grid, to the last bit."""
    if is_open_mpi() and workers != 3:
        pytest.skip("one layout under Open MPI (CI time)")
    lines = _run_short("spectral_poisson.py", workers)
    assert lines[-1] == "matches numpy on the whole grid: True", lines
    assert "32x32 periodic grid on" in lines[0]
    assert float(lines[0].rsplit(" ", 1)[1]) < 1e-12  # against the exact solution


@pytest.mark.parametrize("workers", [1, 4, "2x2"])
def test_jacobi_halo_example_matches_raw_mpi4py(workers):
    """The latency-bound example (labSendReceive halos, gop convergence) gives the same
    solution, to the last bit, as the same loop in raw mpi4py (no time is asserted)."""
    lines = _run_short("jacobi_halo.py", workers)
    assert lines[-1] == "same solution as raw mpi4py: True", lines
    assert lines[1].startswith("per sweep: spmdlab ") and "raw mpi4py" in lines[1]


@pytest.mark.parametrize("example", EXAMPLES + ["heat_codistributed.py", "jacobi_halo.py",
                                     "spectral_poisson.py"])
def test_example_help(example):
    if is_open_mpi():  # plain python, the same under either MPI (CI time)
        pytest.skip("runs without mpiexec; tested under MPICH")
    script = os.path.join(ROOT, "examples", example)
    out = subprocess.run([sys.executable, script, "--help"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and "--short" in out.stdout


def _start_resnet(tmp_path, extra=(), wait_for_output=True):
    import time

    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    script = os.path.join(ROOT, "examples", "train_resnet_custom_loop.py")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(mpiexec_args(4) + [sys.executable, script, "--epochs", "30",
                                               *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=tmp_path)
    lines = []
    if not wait_for_output:
        # Open MPI gives the workers a terminal: the monitor then redraws one line and
        # prints no newline to wait for
        time.sleep(15)
        return proc, lines
    deadline = time.monotonic() + 120
    for line in proc.stdout:  # wait until training is under way
        lines.append(line)
        if "epoch 2 of 30" in line or time.monotonic() > deadline:
            break
    return proc, lines


def _finish(proc, lines):
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the stopped training did not end")
    return "".join(lines) + out, err


def test_resnet_stop_file_stops_every_worker_at_the_same_iteration(tmp_path):
    if is_open_mpi():  # CI time: the stop file under Open MPI is trainnet's (test_trainnet_jobs)
        pytest.skip("the custom loop's stop file runs under MPICH")
    stop = tmp_path / "STOP"
    proc, lines = _start_resnet(tmp_path, ["--stop-file", str(stop)],
                                wait_for_output=not is_open_mpi())
    stop.touch()
    out, err = _finish(proc, lines)
    assert proc.returncode == 0, err
    assert "on every worker" in out and "stopped at epoch" in out, out
    assert out.strip().splitlines()[-1].startswith("accuracy = ")


def test_resnet_ctrl_c_stops_every_worker_at_the_same_iteration(tmp_path):
    import signal

    from conftest import is_open_mpi

    if is_open_mpi():
        pytest.skip("Open MPI's launcher ends the job on the first Ctrl-C")
    proc, lines = _start_resnet(tmp_path)
    proc.send_signal(signal.SIGINT)  # what the terminal sends mpiexec on Ctrl-C
    out, err = _finish(proc, lines)
    assert proc.returncode == 0, err
    assert "stop requested (Ctrl-C)" in out and "on every worker" in out, out
    assert out.strip().splitlines()[-1].startswith("accuracy = ")


def test_trainnet_example_on_a_folder_of_colour_images_with_checkpoints(tmp_path):
    """--data DIR (RGB images, one sub-folder per class), --checkpoint-path, --resume."""
    if is_open_mpi():  # CI time, as test_example_short_mode
        pytest.skip("under Open MPI the core's examples run; the toolkit's run under MPICH")
    pytest.importorskip("torch")
    PIL = pytest.importorskip("PIL.Image")
    import numpy as np

    rng = np.random.default_rng(0)
    for label, channel in (("red", 0), ("green", 1), ("blue", 2)):
        os.makedirs(tmp_path / "data" / label)
        for i in range(40):
            image = rng.integers(0, 60, (20, 20, 3), dtype=np.uint8)
            image[4:16, 4:16, channel] = 250
            PIL.fromarray(image).save(tmp_path / "data" / label / f"{i}.png")
    script = os.path.join(ROOT, "examples", "trainnet_parallel_auto.py")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    common = [sys.executable, script, "--data", str(tmp_path / "data"), "--mini-batch-size",
              "16", "--net-width", "4", "--block-depth", "1", "--checkpoint-path",
              str(tmp_path / "ck")]
    first = run_mpiexec(mpiexec_args(2) + common + ["--epochs", "2"], capture_output=True,
                        text=True, timeout=300, env=env, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "108 training images of (20, 20, 3), 3 classes" in first.stdout
    assert sorted(int(name.split("__")[1]) for name in os.listdir(tmp_path / "ck")) == \
        [6, 12]  # 108 // 16 = 6 iterations per epoch, a checkpoint every epoch
    resumed = run_mpiexec(mpiexec_args(2) + common + ["--epochs", "4", "--resume",
                                                      str(tmp_path / "ck")],
                          capture_output=True, text=True, timeout=300, env=env,
                          cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "at iteration 24 (epoch 4)" in resumed.stdout
    assert float(resumed.stdout.strip().splitlines()[-1].split("=")[1].rstrip("%")) > 90


@pytest.mark.parametrize("example", [e for e in EXAMPLES if e != "digits_spmd.py"])
def test_an_example_without_torch_stops_at_once_with_the_install_command(example):
    blocker = ("import sys\n"
               "class Block:\n"
               "    def find_spec(self, name, path=None, target=None):\n"
               "        if name == 'torch':\n"
               "            raise ImportError('torch is not installed')\n"
               "sys.meta_path.insert(0, Block())\n"
               f"sys.argv = [{example!r}]\n"
               f"sys.path.insert(0, {os.path.join(ROOT, 'examples')!r})\n"
               f"exec(compile(open({os.path.join(ROOT, 'examples', example)!r}).read(), "
               f"{example!r}, 'exec'))\n")
    job = subprocess.run([sys.executable, "-c", blocker], capture_output=True, text=True,
                         timeout=120)
    assert job.returncode == 2, job.stderr
    assert "this example needs torch; install it with:" in job.stderr
    assert 'pip install "torch==2.13.0"' in job.stderr
