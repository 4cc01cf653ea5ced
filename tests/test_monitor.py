"""TrainingProgressMonitor: declared names, worker 1 only, plot, stop requests."""

import io
import os
import signal
import tempfile

import pytest

from spmdlab import SpmdValueError, spmd_index
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
        with pytest.raises(SpmdValueError, match="progress must be from 0 to 100"):
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
