"""TrainingProgressMonitor: declared names, worker 1 only, plot, stop requests."""

import io
import os
import signal
import tempfile

import pytest

from spmdlab import SpmdTypeError, SpmdValueError, spmd_index
from spmdlab.training import TrainingProgressMonitor


@pytest.mark.mpi
def test_records_on_worker_1_only_and_plots():
    pytest.importorskip("matplotlib")
    with tempfile.TemporaryDirectory() as folder:
        plot = os.path.join(folder, "progress.png")
        out = io.StringIO()
        monitor = TrainingProgressMonitor(metrics=["loss", "accuracy"], info=["epoch"],
                                          plot_file=plot, stream=out, refresh=0)
        for step in range(1, 6):
            monitor.record_metrics(step, loss=1.0 / step)
            monitor.update_info(epoch=1)
            monitor.progress = 20 * step
        monitor.record_metrics(5, accuracy=0.9)
        with pytest.raises(SpmdValueError, match="'lr' is not a declared metric"):
            monitor.record_metrics(6, lr=0.1)
        with pytest.raises(SpmdValueError, match="'batch' is not declared information"):
            monitor.update_info(batch=3)
        with pytest.raises(SpmdValueError, match="progress .*must be a number from 0 to 100"):
            monitor.progress = 120
        monitor.close()
        if spmd_index() == 1:
            assert monitor.history("loss") == ([1.0, 2.0, 3.0, 4.0, 5.0],
                                               [1.0, 0.5, 1 / 3, 0.25, 0.2])
            assert "100.0% | loss 0.2 | accuracy 0.9 | epoch 1" in out.getvalue()
            with open(plot, "rb") as f:
                assert f.read(8) == b"\x89PNG\r\n\x1a\n"
        else:
            assert monitor.history("loss") == ([], []) and out.getvalue() == ""
            assert not os.path.exists(plot)


@pytest.mark.mpi
def test_a_value_that_is_not_a_number_raises_on_every_worker_and_records_nothing(tmp_path):
    # it was a bare ValueError or TypeError on worker 1 only (the others went on), and
    # the step had been recorded without its value: the history lost its pairing
    import csv

    import numpy as np

    from spmdlab import SpmdTypeError, spmd_plus, spmd_size

    from conftest import torch  # (None without torch: a one-element array instead)

    monitor = TrainingProgressMonitor(metrics=["loss", "accuracy"], plot_file=None,
                                      stream=io.StringIO(), show=False,
                                      log_dir=str(tmp_path / "logs"))
    who = rf"\(worker {spmd_index()} of {spmd_size()}\)"
    for step, values, shown in [
            (1, {"loss": "abc"}, r"the metric 'loss' must be a real number \(got 'abc' "
                                 r"that is a str\)"),
            (1, {"loss": 0.5, "accuracy": np.ones(2)}, r"the metric 'accuracy' must be a "
                                                        r"real number \(got a ndarray of "
                                                        r"shape \(2,\)\)"),
            (None, {"loss": 0.5}, r"the step must be a real number \(got None")]:
        with pytest.raises(SpmdTypeError, match=rf"TrainingProgressMonitor.record_metrics "
                                                rf"{who}: {shown}"):
            monitor.record_metrics(step, **values)
    assert spmd_plus(1) == spmd_size()  # every worker raised: they are still in step
    # numpy numbers and one-element tensors are numbers, as for progress
    one = torch.tensor([0.75]) if torch is not None else np.array([0.75])
    monitor.record_metrics(np.int64(2), loss=np.float32(0.5), accuracy=one)
    monitor.progress = np.float32(50)
    if spmd_index() == 1:
        assert monitor.history("loss") == ([2.0], [0.5])
        assert monitor.history("accuracy") == ([2.0], [0.75])
        assert monitor.progress == 50.0
    monitor.close()
    if spmd_index() == 1:  # the log has numbers, not a tensor's repr
        with open(tmp_path / "logs" / "metrics.csv") as f:
            rows = list(csv.DictReader(f))
        assert [(r["loss"], r["accuracy"]) for r in rows] == [("0.5", "0.75")], rows


def test_values_are_checked_on_every_worker_and_numpy_numbers_accepted():
    # found by tester V: a metric value that is not a number raised a bare ValueError on
    # worker 1 alone (the others went on); numpy's float32 progress was refused as out
    # of range; the errors named no worker
    np = pytest.importorskip("numpy")
    monitor = TrainingProgressMonitor(metrics=["loss"], plot_file=None,
                                      stream=io.StringIO(), refresh=0)
    monitor.progress = np.float32(50)
    monitor.record_metrics(np.int64(1), loss=np.float32(0.5))
    with pytest.raises(SpmdTypeError, match=r"record_metrics \(worker \d+ of \d+\): "
                       r"the metric 'loss' must be a real number \(got 'abc'"):
        monitor.record_metrics(2, loss="abc")
    with pytest.raises(SpmdTypeError, match="metric 'loss' must be a real number"):
        monitor.record_metrics(2, loss=np.array([1.0, 2.0]))
    with pytest.raises(SpmdValueError, match=r"progress \(worker \d+ of \d+\): must be a "
                       r"number from 0 to 100 \(got 'half'"):
        monitor.progress = "half"
    with pytest.raises(SpmdValueError, match=r"progress \(worker \d+ of \d+\): must be a "
                       r"number from 0 to 100"):
        monitor.progress = np.float64(101)
    with pytest.raises(SpmdValueError, match=r"record_metrics \(worker \d+ of \d+\): 'lr' "
                       r"is not a declared metric"):
        monitor.record_metrics(2, lr=0.1)
    with pytest.raises(SpmdValueError, match=r"update_info \(worker \d+ of \d+\): 'batch' "
                       r"is not declared information"):
        monitor.update_info(batch=3)
    monitor.close()
    assert monitor.progress == 50.0
    if spmd_index() == 1:
        assert monitor.history("loss") == ([1.0], [0.5])


def test_plain_lines_show_one_step_never_half_of_it():
    # into a file or a pipe (the examples under mpiexec, a CI log) a line is written when
    # a metric is recorded: a new epoch's information or progress set before its metric
    # wrote a line that paired them with the previous epoch's loss ("33.3% | loss 1.292
    # | epoch 2 of 3" from examples/digits_spmd.py)
    out = io.StringIO()
    monitor = TrainingProgressMonitor(metrics=["loss"], info=["epoch"], plot_file=None,
                                      stream=out, refresh=0)
    for epoch in range(1, 4):
        monitor.update_info(epoch=f"{epoch} of 3")
        monitor.progress = 100 * epoch / 3
        monitor.record_metrics(epoch, loss=float(epoch))
    monitor.status = "done"
    monitor.close()
    if spmd_index() != 1:
        assert out.getvalue() == ""
        return
    assert out.getvalue().splitlines() == [
        " 33.3% | loss 1 | epoch 1 of 3", " 66.7% | loss 2 | epoch 2 of 3",
        "100.0% | loss 3 | epoch 3 of 3", "100.0% | loss 3 | epoch 3 of 3 | done"]


@pytest.mark.mpi_skip
def test_stop_file_and_ctrl_c():
    with tempfile.TemporaryDirectory() as folder:
        stop = os.path.join(folder, "STOP")
        monitor = TrainingProgressMonitor(metrics=["loss"], plot_file=None, stop_file=stop,
                                          stream=io.StringIO(), refresh=0)
        monitor.record_metrics(1, loss=1.0)
        assert monitor.stop is False
        open(stop, "w").close()
        monitor.record_metrics(2, loss=0.5)
        assert monitor.stop is True
        monitor.close()
    monitor = TrainingProgressMonitor(metrics=["loss"], plot_file=None, stream=io.StringIO())
    os.kill(os.getpid(), signal.SIGINT)  # the first Ctrl-C asks to stop
    assert monitor.stop is True
    with pytest.raises(KeyboardInterrupt):  # a second one interrupts
        os.kill(os.getpid(), signal.SIGINT)
    monitor.close()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def _filled_monitor(folder, **kwargs):
    monitor = TrainingProgressMonitor(
        metrics=["loss", "accuracy", "validation_loss", "validation_accuracy"],
        info=["epoch", "learn_rate"], stream=io.StringIO(), refresh=0, plot_every=1e9,
        **kwargs)
    for step in range(1, 31):
        epoch = (step - 1) // 10 + 1
        monitor.update_info(epoch=f"{epoch} of 3", learn_rate=0.01)
        monitor.record_metrics(step, loss=2.0 / step, accuracy=step / 30)
        if step % 10 == 0:
            monitor.record_metrics(step, validation_loss=2.5 / step,
                                   validation_accuracy=step / 35)
        monitor.progress = 100 * step / 30
    return monitor


@pytest.mark.mpi
def test_plots_overlay_validation_use_a_log_loss_axis_and_mark_epochs(tmp_path):
    pytest.importorskip("matplotlib")
    monitor = _filled_monitor(tmp_path, run="digits", plot_file=str(tmp_path / "p.png"))
    monitor.close()
    if spmd_index() != 1:
        return
    assert monitor._panels() == {"loss": ["loss", "validation_loss"],
                                 "accuracy": ["accuracy", "validation_accuracy"]}
    assert monitor._log_axis("loss") and not monitor._log_axis("accuracy")
    assert monitor._epochs == [(10.0, "2 of 3"), (20.0, "3 of 3")]
    import matplotlib.pyplot as plt

    image = plt.imread(str(tmp_path / "p.png"))
    assert image.shape[0] > 400  # two panels, the title naming run and workers


def test_matlab_style_names_pair_up():
    from spmdlab.training.monitor import _training_names

    assert "TrainingLoss" in _training_names("ValidationLoss")
    assert _training_names("val_accuracy")[0] == "accuracy"
    assert _training_names("loss") == []


@pytest.mark.mpi
def test_the_default_plot_goes_to_a_run_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monitor = TrainingProgressMonitor(metrics=["loss"], stream=io.StringIO(), run="r1")
    assert monitor.plot_file == os.path.join("runs", "r1", "training-progress.png")
    assert TrainingProgressMonitor(metrics=["loss"]).run.startswith(
        os.path.splitext(os.path.basename(__import__("sys").argv[0]))[0])


@pytest.mark.mpi
def test_log_dir_writes_a_csv_and_tensorboard_events(tmp_path):
    from spmdlab import spmd_broadcast

    folder = spmd_broadcast(1, str(tmp_path / "logs"))
    monitor = _filled_monitor(tmp_path, plot_file=None, log_dir=folder)
    monitor.close()
    if spmd_index() != 1:
        return
    import csv

    with open(os.path.join(folder, "metrics.csv")) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 33  # 30 training rows, 3 validation rows
    assert rows[0]["step"] == "1" and float(rows[0]["loss"]) == 2.0
    assert rows[0]["epoch"] == "1 of 3" and rows[0]["learn_rate"] == "0.01"
    assert rows[10]["validation_loss"] == str(0.25)
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(folder)
    events.Reload()
    losses = events.Scalars("loss")
    assert [e.step for e in losses] == list(range(1, 31))
    assert abs(losses[1].value - 1.0) < 1e-6
    assert [e.step for e in events.Scalars("validation_loss")] == [10, 20, 30]


LIVE_SCRIPT = """
import time
from spmdlab import spmd_plus
from spmdlab.training import TrainingProgressMonitor
m = TrainingProgressMonitor(metrics=["loss"], info=["epoch"], plot_file=None, refresh=0.05)
for step in range(1, 61):
    loss = spmd_plus(1.0 / step)
    m.record_metrics(step, loss=loss)
    m.update_info(epoch=f"{(step - 1) // 20 + 1} of 3")
    m.progress = 100 * step / 60
    time.sleep(0.1)
m.status = "done"
m.close()
"""


@pytest.mark.mpi_skip
@pytest.mark.parametrize("where", ["terminal", "file"])
def test_the_view_updates_in_place_under_mpiexec_in_a_terminal(where, tmp_path):
    # no worker has a terminal under mpiexec (the launcher pipes their output): the
    # monitor finds the launcher's terminal behind the pipe and draws a live view there;
    # into a file it writes plain lines
    import shutil
    import subprocess
    import sys
    import time

    pytest.importorskip("rich")
    if shutil.which("tmux") is None:
        pytest.skip("needs tmux")
    from conftest import mpiexec_args

    script = tmp_path / "live.py"
    script.write_text(LIVE_SCRIPT)
    out = tmp_path / "out.txt"
    command = " ".join(mpiexec_args(2) + [sys.executable, str(script)])
    if where == "file":
        command += f" > {out}"
    session = f"spmdlab-live-{where}-{os.getpid()}"
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "100", "-y", "20",
                    f"OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 {command}; "
                    f"sleep 60"], check=True)
    try:
        screens = []
        for _ in range(60):
            time.sleep(0.5)
            screen = subprocess.run(["tmux", "capture-pane", "-p", "-t", session],
                                    capture_output=True, text=True).stdout
            screens.append(screen)
            if "done" in screen or (where == "file" and out.exists() and
                                    "done" in out.read_text()):
                break
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session])
    if where == "file":
        text = out.read_text()
        assert "\x1b" not in text and "\r" not in text  # plain lines
        assert text.count("%") > 10 and "done" in text
        return
    middle = [s for s in screens if "metrics" in s and "done" not in s]
    assert middle, screens[-1]
    for screen in middle:  # one view, redrawn in place: never two of them on screen
        assert screen.count("metrics") == 1 and screen.count("info ") <= 1, screen
    assert "loss" in screens[-1] and "done" in screens[-1] and "━" in screens[-1]
