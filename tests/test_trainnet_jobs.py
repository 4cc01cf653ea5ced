"""trainnet under mpiexec as a person runs it: killed mid-training and resumed from its
last checkpoint, stopped with Ctrl-C, stopped with the stop file."""

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from conftest import is_open_mpi, mpiexec_args, run_mpiexec

pytestmark = pytest.mark.mpi_skip  # launches mpiexec itself

SCRIPT = r'''
import argparse, time
import torch
from spmdlab import spmd_index
from spmdlab.training import trainnet, training_options

parser = argparse.ArgumentParser()
parser.add_argument("--delay", type=float, default=0.0)
parser.add_argument("--folder")
parser.add_argument("--resume")
parser.add_argument("--epochs", type=int, default=6)
args = parser.parse_args()
torch.set_num_threads(1)
g = torch.Generator().manual_seed(0)
x = torch.randn(200, 6, generator=g)
y = (x @ torch.randn(6, 3, generator=g)).argmax(1)
torch.manual_seed(1)
net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))

def loss(scores, targets):  # slowed down, so that a person can step in
    time.sleep(args.delay)
    return torch.nn.functional.cross_entropy(scores, targets)

options = training_options(
    "sgdm", max_epochs=args.epochs, mini_batch_size=20, shuffle="every-epoch",
    verbose_frequency=1, execution_environment="parallel-cpu", metrics="accuracy",
    checkpoint_path=args.folder, checkpoint_frequency=2 if args.delay else 1,
    checkpoint_frequency_unit="iteration" if args.delay else "epoch")
torch.manual_seed(7)
net, info = trainnet((x, y), net, loss, options, resume_from=args.resume)
flat = torch.cat([p.detach().reshape(-1) for p in net.parameters()]).double()
print(f"worker {spmd_index()}: resumed_from={info.resumed_from} "
      f"last={info.training_history[-1]['iteration']} "
      f"reason={info.stop_reason.replace(' ', '_')} "
      f"checksum={flat.sum().item():.15e},{flat.square().sum().item():.15e}", flush=True)
'''

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           PYTHONUNBUFFERED="1")


@pytest.fixture
def script(tmp_path):
    pytest.importorskip("torch")
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    return str(path)


def _run(script, *args, env=None, workers=2):
    proc = run_mpiexec(mpiexec_args(workers) + [sys.executable, script, *args],
                       capture_output=True, text=True, timeout=180, env=env or ENV)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _start(script, *args, env=None):
    return subprocess.Popen(mpiexec_args(2) + [sys.executable, script, *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env or ENV, start_new_session=True)


def _wait_for_checkpoints(folder, count, proc, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.isdir(folder) and \
                len([n for n in os.listdir(folder) if n.endswith(".pt")]) >= count:
            return
        if proc.poll() is not None:
            pytest.fail(f"training ended before {count} checkpoints: "
                        f"{proc.communicate()}")
        time.sleep(0.05)
    proc.kill()
    pytest.fail(f"no {count} checkpoints in {timeout} s")


_RESULT = re.compile(r"worker \d+: resumed_from=(\d+) last=(\d+) reason=([A-Za-z_]+) "
                     r"checksum=(-?\d\.\d{15}e[-+]\d\d,-?\d\.\d{15}e[-+]\d\d)")


def _results(out, workers=2):
    found = _RESULT.findall(out)  # (the workers' lines may interleave)
    assert len(found) == workers, out
    return [dict(zip(("resumed_from", "last", "reason", "checksum"), f)) for f in found]


def test_a_killed_run_resumes_from_its_last_checkpoint(script, tmp_path):
    folder = str(tmp_path / "checkpoints")
    proc = _start(script, "--delay", "0.05", "--folder", folder)
    _wait_for_checkpoints(folder, 3, proc)  # 6 of 60 iterations done, or a few more
    os.killpg(proc.pid, signal.SIGKILL)  # the machine goes down: every process dies
    proc.communicate(timeout=60)
    saved = sorted((int(n.split("__")[1]), n) for n in os.listdir(folder)
                   if n.endswith(".pt"))
    assert saved[-1][0] < 60, "the run finished before it was killed"
    last = os.path.join(folder, saved[-1][1])
    # on one worker, from the same file: the same training up to round-off
    alone = _results(_run(script, "--folder", str(tmp_path / "alone"), "--resume", last,
                          workers=1), workers=1)[0]
    assert alone["resumed_from"] == str(saved[-1][0]) and alone["last"] == "60"
    resumed = _results(_run(script, "--folder", folder, "--resume", folder))
    for r in resumed:
        assert r["resumed_from"] == str(saved[-1][0]) and r["last"] == "60"
        assert r["reason"] == "Max_epochs_completed"
    # the same network as a run that was never interrupted, on both workers
    reference = _results(_run(script, "--folder", str(tmp_path / "other")))
    assert resumed[0]["checksum"] == resumed[1]["checksum"] == reference[0]["checksum"]
    for got, want in zip(alone["checksum"].split(","), reference[0]["checksum"].split(",")):
        assert float(got) == pytest.approx(float(want), rel=1e-5)


def _stopped(out, err, proc):
    assert proc.returncode == 0, out + err
    results = _results(out)
    assert results[0]["last"] == results[1]["last"], "workers stopped at different iterations"
    assert int(results[0]["last"]) < 600
    assert all(r["reason"] == "Stopped_manually" for r in results), out
    assert results[0]["checksum"] == results[1]["checksum"]


def test_the_stop_file_stops_every_worker_at_the_same_iteration(script, tmp_path):
    folder, stop = str(tmp_path / "checkpoints"), tmp_path / "STOP"
    proc = _start(script, "--delay", "0.02", "--epochs", "60", "--folder", folder,
                  env=dict(ENV, SPMDLAB_STOP_FILE=str(stop)))
    _wait_for_checkpoints(folder, 2, proc)
    stop.touch()
    out, err = proc.communicate(timeout=120)
    _stopped(out, err, proc)
    assert f"stop requested ({stop} exists)" in out


def test_ctrl_c_stops_every_worker_at_the_same_iteration(script, tmp_path):
    if is_open_mpi():
        pytest.skip("Open MPI's launcher ends the job on the first Ctrl-C")
    folder = str(tmp_path / "checkpoints")
    proc = _start(script, "--delay", "0.02", "--epochs", "60", "--folder", folder)
    _wait_for_checkpoints(folder, 2, proc)
    proc.send_signal(signal.SIGINT)  # what the terminal sends mpiexec on Ctrl-C
    out, err = proc.communicate(timeout=120)
    _stopped(out, err, proc)
    assert "stop requested (Ctrl-C)" in out
