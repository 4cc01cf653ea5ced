"""training_options and trainnet, in-process: run by plain pytest and by pytest-mpi at
1-4 workers (the parallel environments then train over every worker)."""

import collections
import math
import os
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from spmdlab import (SpmdMismatchError, SpmdTypeError, SpmdValueError,  # noqa: E402
                     spmd_broadcast, spmd_cat, spmd_index, spmd_size)
from spmdlab.training import (ArrayDatastore, TrainingOptions, minibatch_predict,  # noqa
                              rmsprop_update, trainnet, training_options)
from spmdlab.training.checkpoints import latest_checkpoint  # noqa: E402


@pytest.fixture(autouse=True)
def _once_at_one_worker(request):
    from conftest import in_process_tested_under_mpich

    in_process_tested_under_mpich(request.config)


# -- training_options ----------------------------------------------------------------------


def test_defaults_are_matlabs():
    sgdm = training_options("sgdm")
    assert (sgdm.max_epochs, sgdm.mini_batch_size, sgdm.initial_learn_rate, sgdm.momentum) \
        == (30, 128, 0.01, 0.9)
    assert (sgdm.learn_rate_schedule, sgdm.learn_rate_drop_factor,
            sgdm.learn_rate_drop_period, sgdm.l2_regularization) == ("none", 0.1, 10, 1e-4)
    assert (sgdm.shuffle, sgdm.validation_frequency, sgdm.plots, sgdm.verbose,
            sgdm.verbose_frequency, sgdm.execution_environment) == \
        ("once", 50, "none", True, 50, "auto")
    assert sgdm.checkpoint_path is None and sgdm.checkpoint_frequency == 1
    adam = training_options("adam")
    assert (adam.initial_learn_rate, adam.gradient_decay_factor,
            adam.squared_gradient_decay_factor, adam.epsilon) == (0.001, 0.9, 0.999, 1e-8)
    rms = training_options("RMSProp")
    assert rms.solver == "rmsprop"
    assert (rms.initial_learn_rate, rms.squared_gradient_decay_factor) == (0.001, 0.9)


def test_matlab_names_and_case_are_accepted():
    o = training_options("sgdm", MaxEpochs=5, InitialLearnRate=0.1, L2Regularization=0,
                         Shuffle="Every-Epoch", ExecutionEnvironment="PARALLEL-AUTO",
                         Metrics="Accuracy")
    assert (o.max_epochs, o.initial_learn_rate, o.l2_regularization, o.shuffle,
            o.execution_environment, o.MaxEpochs) == (5, 0.1, 0.0, "every-epoch",
                                                      "parallel-auto", 5)
    assert [name for name, _ in o.metrics] == ["accuracy"]
    o.MiniBatchSize = 64  # as MATLAB: options.MiniBatchSize = 64
    assert o.mini_batch_size == 64
    assert o.replace(max_epochs=2).max_epochs == 2 and o.max_epochs == 5
    assert "max_epochs=5" in repr(o)


@pytest.mark.parametrize("options, match", [
    (dict(max_epoch=3), "unknown option 'max_epoch' .*did you mean 'max_epochs'"),
    (dict(bogus=1), "unknown option 'bogus'"),
    (dict(max_epochs=0), "'max_epochs' must be a positive int .*got 0"),
    (dict(max_epochs=2.5), "'max_epochs' must be a positive int"),
    (dict(mini_batch_size=True), "'mini_batch_size' must be a positive int"),
    (dict(initial_learn_rate=-1), "'initial_learn_rate' must be a positive number"),
    (dict(initial_learn_rate=math.inf), "'initial_learn_rate' must be a positive number"),
    (dict(momentum=1.5), "'momentum' must be a number from 0 to 1"),
    (dict(shuffle="sometimes"), "'shuffle' must be one of 'once', 'never', 'every-epoch'"),
    (dict(execution_environment="parallel"), "'execution_environment' must be one of"),
    (dict(plots="yes"), "'plots' must be one of 'none', 'training-progress'"),
    (dict(learn_rate_schedule="cosine"), "'learn_rate_schedule' must be one of"),
    (dict(l2_regularization=-1e-4), "'l2_regularization' must be a finite number >= 0"),
    (dict(verbose="yes"), "'verbose' must be True or False"),
    (dict(metrics="f1"), "unknown metric 'f1'"),
    (dict(metrics=["accuracy", "accuracy"]), "metric name 'accuracy' is used twice"),
    (dict(validation_patience=0), "'validation_patience' must be a positive int"),
    (dict(checkpoint_frequency_unit="hour"), "'checkpoint_frequency_unit' must be one of"),
    (dict(output_network="best-validation"), "needs 'validation_data'"),
    (dict(gradient_decay_factor=0.9), "'gradient_decay_factor' is not an option of "
                                      "solver 'sgdm' .*adam"),
])
def test_bad_options_name_the_option(options, match):
    match = f"training_options \\(worker {spmd_index()} of {spmd_size()}\\): .*" + match
    with pytest.raises((SpmdValueError, SpmdTypeError), match=match):
        training_options("sgdm", **options)


def test_bad_solver_and_bad_types():
    with pytest.raises(SpmdValueError, match="'solver' must be one of 'sgdm', 'adam', "
                                             "'rmsprop' .*got 'lbfgs'"):
        training_options("lbfgs")
    with pytest.raises(SpmdValueError, match="'momentum' is not an option of solver 'adam'"):
        training_options("adam", momentum=0.9)
    with pytest.raises(SpmdTypeError, match="'validation_data' must be"):
        training_options("adam", validation_data=5)
    with pytest.raises(SpmdTypeError, match="'validation_data' as a pair must be .*got "
                                            "\\(int, int\\)"):
        training_options("adam", validation_data=(1, 2))
    with pytest.raises(SpmdTypeError, match="got 3 inputs and 4 targets"):
        training_options("adam", validation_data=(np.zeros(3), np.zeros(4)))
    with pytest.raises(SpmdTypeError, match="'checkpoint_path' must be a folder path"):
        training_options("adam", checkpoint_path=3)
    o = training_options("adam")
    with pytest.raises(SpmdValueError, match="'max_epochs' must be a positive int"):
        o.max_epochs = -1
    with pytest.raises(AttributeError, match="no option 'momentum'"):
        o.momentum
    assert isinstance(o, TrainingOptions)


# -- helpers -------------------------------------------------------------------------------


def _data(n=105, features=6, classes=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g)
    w = torch.randn(features, classes, generator=g)
    return x, (x @ w).argmax(1)


def _mlp(features=6, classes=3, seed=1):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(features, 16), torch.nn.Tanh(),
                               torch.nn.Linear(16, classes))


def _flat(net):
    return torch.cat([p.detach().reshape(-1) for p in net.parameters()]).numpy()


def _train(environment, solver="sgdm", data=None, net=None, resume_from=None, **options):
    options = dict(dict(max_epochs=3, mini_batch_size=10, verbose=False,
                        execution_environment=environment), **options)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # serial training under mpiexec warns
        torch.manual_seed(7)  # the shuffle seed comes from torch's generator
        return trainnet(data or _data(), net or _mlp(), "crossentropy",
                        training_options(solver, **options), resume_from=resume_from)


def _same_everywhere(array):
    every = spmd_cat(np.asarray(array)[None], 1)
    assert (every == every[0]).all(), "workers ended with different networks"


# -- serial and parallel give the same network ---------------------------------------------


@pytest.mark.parametrize("solver", ["sgdm", "adam", "rmsprop"])
def test_parallel_equals_serial(solver):
    """parallel-cpu over the workers (10 into N: uneven at 3 and 4 workers) trains the
    network the serial computation trains on the whole mini-batch."""
    serial, serial_info = _train("cpu", solver, shuffle="every-epoch", metrics="accuracy")
    parallel, info = _train("parallel-cpu", solver, shuffle="every-epoch",
                            metrics="accuracy")
    np.testing.assert_allclose(_flat(parallel), _flat(serial), rtol=0, atol=2e-6)
    _same_everywhere(_flat(parallel))
    assert len(info.training_history) == 3 * (105 // 10)  # partial batches discarded
    assert info.workers == spmd_size()
    for a, b in zip(info.training_history, serial_info.training_history):
        assert a["loss"] == pytest.approx(b["loss"], abs=1e-6)
        assert a["accuracy"] == pytest.approx(b["accuracy"], abs=1e-4)  # percent
        assert (a["iteration"], a["epoch"], a["learn_rate"]) == \
            (b["iteration"], b["epoch"], b["learn_rate"])
    assert info.stop_reason == "Max epochs completed"


def test_every_worker_starts_from_worker_1s_network():
    torch.manual_seed(spmd_index())  # different initial networks on every worker
    net = torch.nn.Linear(6, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainnet(_data(), net, "crossentropy", training_options(
            "sgdm", max_epochs=1, mini_batch_size=10, verbose=False,
            execution_environment="parallel-cpu"))
    _same_everywhere(_flat(net))


def test_batch_norm_state_is_pooled_and_identical():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.BatchNorm1d(8),
                              torch.nn.ReLU(), torch.nn.Linear(8, 3))
    for statistics in ("moving", "population"):
        _train("parallel-cpu", net=net, batch_normalization_statistics=statistics)
        bn = net[1]
        _same_everywhere(torch.cat([bn.running_mean, bn.running_var]).numpy())
        assert not net.training  # returned in eval mode


def test_population_statistics_are_the_training_data_moments():
    """With a BN layer first, 'population' statistics are the inputs' exact moments."""
    x, y = _data(n=120)
    net = torch.nn.Sequential(torch.nn.BatchNorm1d(6), torch.nn.Linear(6, 3))
    _train("parallel-cpu", data=(x, y), net=net, mini_batch_size=12, max_epochs=1,
           batch_normalization_statistics="population")
    bn = net[0]  # its inputs are the data: the moments of all 120 rows, at any N
    np.testing.assert_allclose(bn.running_mean.numpy(), x.mean(0).numpy(), atol=1e-6)
    np.testing.assert_allclose(bn.running_var.numpy(), x.var(0).numpy(), rtol=1e-5)


def test_population_statistics_take_in_the_observations_after_the_last_mini_batch():
    # found by tester V: the pass covered only the first floor(n / B) * B observations in
    # datastore order, so 5 of 125 rows (trained on in shuffled epochs) were left out
    x, y = _data(n=125)
    x[120:] += 5.0  # the rows after the last full mini-batch move the moments
    net = torch.nn.Sequential(torch.nn.BatchNorm1d(6), torch.nn.Linear(6, 3))
    _train("parallel-cpu", data=(x, y), net=net, mini_batch_size=12, max_epochs=1,
           batch_normalization_statistics="population")
    bn = net[0]
    np.testing.assert_allclose(bn.running_mean.numpy(), x.mean(0).numpy(), atol=1e-6)
    np.testing.assert_allclose(bn.running_var.numpy(), x.var(0).numpy(), rtol=1e-5)
    _same_everywhere(bn.running_var.numpy())


# -- options at work -----------------------------------------------------------------------


def test_piecewise_schedule_and_l2():
    _, info = _train("parallel-cpu", max_epochs=5, learn_rate_schedule="piecewise",
                     learn_rate_drop_period=2, learn_rate_drop_factor=0.5,
                     initial_learn_rate=0.1)
    rates = {r["epoch"]: r["learn_rate"] for r in info.training_history}
    assert rates == {1: 0.1, 2: 0.1, 3: 0.05, 4: 0.05, 5: 0.025}
    # L2: only weights decay (biases have MATLAB's BiasL2Factor 0)
    net = torch.nn.Linear(6, 3)
    with torch.no_grad():
        net.weight.fill_(1.0)
        net.bias.fill_(1.0)
    x = torch.zeros(20, 6)  # zero inputs: the weights get no gradient from the loss
    y = torch.zeros(20, dtype=torch.int64)
    _train("parallel-cpu", data=(x, y), net=net, max_epochs=1, mini_batch_size=20,
           l2_regularization=0.5, initial_learn_rate=0.1, momentum=0.0,
           batch_normalization_statistics="moving")
    np.testing.assert_allclose(net.weight.detach().numpy(), 1 - 0.1 * 0.5, rtol=1e-6)


def test_l2_decays_a_weight_shared_by_two_layers_once():
    """Tied weights (one parameter in two layers) had the L2 term added once per layer:
    twice the decay of the same weight in one layer."""

    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.second = torch.nn.Linear(6, 3, bias=False)
            self.second.weight = torch.nn.Parameter(torch.ones(3, 6))
            self.third = torch.nn.Linear(6, 3, bias=False)
            self.third.weight = self.second.weight

        def forward(self, x):
            return self.second(x) + self.third(x)

    net = Tied()
    x = torch.zeros(20, 6)  # zero inputs: the weights get no gradient from the loss
    y = torch.zeros(20, dtype=torch.int64)
    _train("parallel-cpu", data=(x, y), net=net, max_epochs=1, mini_batch_size=20,
           l2_regularization=0.5, initial_learn_rate=0.1, momentum=0.0)
    np.testing.assert_allclose(net.second.weight.detach().numpy(), 1 - 0.1 * 0.5, rtol=1e-6)


def test_gradient_threshold_absolute_value():
    before = _mlp()
    start = _flat(before)
    after, _ = _train("parallel-cpu", net=before, max_epochs=1, mini_batch_size=105,
                      gradient_threshold=1e-3, gradient_threshold_method="absolute-value",
                      initial_learn_rate=1.0, l2_regularization=0)
    assert np.abs(_flat(after) - start).max() <= 1e-3 + 1e-7  # one step: |lr * g| <= T


def test_validation_metrics_best_network_and_patience():
    x, y = _data(n=200)
    opts = dict(validation_data=(x[:60], y[:60]), validation_frequency=5,
                metrics=["accuracy", ("error_rate", lambda s, t: float(
                    (s.argmax(1) != t).float().mean()))], max_epochs=4)
    net, info = _train("parallel-cpu", data=(x, y), **opts)
    val = info.validation_history
    assert [v["iteration"] for v in val] == [1, 5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 55,
                                              60, 65, 70, 75, 80]
    for v in val:
        assert v["accuracy"] == pytest.approx(100 * (1 - v["error_rate"]))
    best = min(val, key=lambda v: v["loss"])
    assert info.output_network_iteration == best["iteration"]  # 'auto': best validation
    scores = minibatch_predict(net, x[:60])
    assert float((scores.argmax(1) == y[:60]).float().mean()) * 100 == \
        pytest.approx(best["accuracy"])
    # A network that cannot change: every later validation loss equals the first
    _, info = _train("parallel-cpu", data=(x, y), validation_patience=2,
                     output_network="last-iteration", initial_learn_rate=1e-30,
                     l2_regularization=0, **opts)
    assert info.stop_reason == "Met validation criterion"
    assert [v["iteration"] for v in info.validation_history] == [1, 5, 10]
    assert info.output_network_iteration == info.training_history[-1]["iteration"] == 10


def test_mse_and_rmse():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(90, 4, generator=g)
    t = x @ torch.tensor([1.0, -2.0, 0.5, 3.0])
    net = torch.nn.Linear(4, 1)
    opts = training_options("adam", max_epochs=20, mini_batch_size=9, verbose=False,
                            metrics="rmse", initial_learn_rate=0.05,
                            execution_environment="parallel-cpu")
    net, info = trainnet((x, t), net, "mse", opts)
    last = info.training_history[-1]
    assert last["rmse"] == pytest.approx(math.sqrt(last["loss"]), rel=1e-6)
    assert info.training_history[0]["loss"] > 10 * last["loss"]


def test_string_labels_and_datastores():
    x, y = _data(n=60)
    names = np.array(["ant", "bee", "cat"])[y.numpy()]
    ds = ArrayDatastore(x.numpy(), names)
    net, info = trainnet(ds, _mlp(), "crossentropy", training_options(
        "sgdm", max_epochs=2, mini_batch_size=10, verbose=False,
        execution_environment="parallel-cpu"))
    assert info.class_names == ["ant", "bee", "cat"]


def test_labels_that_are_names_without_class_names_are_a_named_error():
    # found by tester V: a transformed datastore keeps no labels, so its names reached
    # torch.from_numpy (a bare TypeError "can't convert np.ndarray of type numpy.str_")
    x, y = _data(n=60)
    names = np.array(["ant", "bee", "cat"])[y.numpy()]
    ds = ArrayDatastore(x.numpy(), names).transform(lambda obs: (obs[0] * 2, obs[1]))
    options = training_options("sgdm", max_epochs=1, mini_batch_size=10, verbose=False,
                               execution_environment="parallel-cpu")
    with pytest.raises(SpmdValueError, match=r"label '(ant|bee|cat)' is not a number .* "
                       r"pass class_names="):
        trainnet(ds, _mlp(), "crossentropy", options)
    net, info = trainnet(ds, _mlp(), "crossentropy", options,
                         class_names=["ant", "bee", "cat"])
    assert info.class_names == ["ant", "bee", "cat"] and len(info.training_history) == 6


def test_accuracy_is_the_exact_fraction_at_every_layout():
    # found by tester V: the accuracy was a float32 mean, 67.56756788975483 for 25 of 37
    # (67.567567567...), and differed between layouts in the sixth digit
    x, y = _data(n=110)
    net, info = _train("parallel-cpu", data=(x, y), metrics="accuracy", max_epochs=1,
                       validation_data=(x[:37], y[:37]))
    with torch.no_grad():
        correct = int((net(x[:37]).argmax(1) == y[:37]).sum())
    assert info.final_validation["accuracy"] == pytest.approx(100 * correct / 37,
                                                              rel=0, abs=1e-12)
    for record in info.training_history:  # 10 per mini-batch: a whole percent
        assert record["accuracy"] == pytest.approx(round(record["accuracy"]), abs=1e-12)


def test_minibatch_predict_converts_image_datastores(tmp_path):
    pytest.importorskip("PIL")
    from PIL import Image

    from spmdlab.training import ImageDatastore

    folder = spmd_broadcast(1, str(tmp_path))
    if spmd_index() == 1:
        for label in ("a", "b"):
            os.makedirs(os.path.join(folder, label), exist_ok=True)
            for i in range(3):
                Image.fromarray(np.full((5, 4), 51 * i, np.uint8)).save(
                    os.path.join(folder, label, f"{i}.png"))
    spmd_cat(0)  # every worker waits for the files
    net = torch.nn.Flatten()
    out = minibatch_predict(net, ImageDatastore(folder), mini_batch_size=4)
    assert out.shape == (6, 20) and out.dtype == torch.float32
    np.testing.assert_allclose(out[:3, 0].numpy(), [0, 0.2, 0.4], rtol=1e-6)


def test_verbose_table_and_progress_bar(capsys, monkeypatch):
    import io
    import sys

    _train("parallel-cpu", verbose=True, verbose_frequency=5, metrics="accuracy",
           max_epochs=2)
    out = capsys.readouterr().out
    if spmd_index() == 1:
        lines = out.splitlines()
        assert lines[0].startswith("trainnet: 20 iterations on ")
        assert lines[1].split() == ["Iteration", "Epoch", "TimeElapsed", "LearnRate",
                                    "TrainingLoss", "TrainingAccuracy"]
        assert [int(line.split()[0]) for line in lines[3:-1]] == [1, 5, 10, 15, 20]
        assert lines[-1].startswith("trainnet: Max epochs completed after iteration 20")
    else:
        assert out == ""  # worker 1 reports

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr(sys, "stdout", Terminal())
    _train("parallel-cpu", verbose=True, metrics="accuracy", max_epochs=2)
    text = sys.stdout.getvalue()
    if spmd_index() == 1:
        assert "\r\033[K[####################] 100.0% | epoch 2 | iteration 20/20" in text
        assert "| accuracy " in text
    else:
        assert text == ""


def test_training_progress_plot(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    x, y = _data(n=60)
    _, info = _train("parallel-cpu", data=(x, y), plots="training-progress",
                     metrics="accuracy", validation_data=(x[:20], y[:20]),
                     validation_frequency=3)
    import glob

    plots = glob.glob(os.path.join("runs", "*", "training-progress.png"))  # a run folder
    assert len(plots) == (spmd_index() == 1)
    assert not os.path.exists("training-progress.png")  # never the current folder
    assert len(info.validation_history) == 7  # 1, 3, 6, ..., 18


def test_log_dir_writes_every_iteration(tmp_path):
    from spmdlab import spmd_broadcast

    folder = spmd_broadcast(1, str(tmp_path / "logs"))
    x, y = _data(n=60)
    _, info = _train("parallel-cpu", data=(x, y), metrics="accuracy", log_dir=folder)
    if spmd_index() == 1:
        with open(os.path.join(folder, "metrics.csv")) as f:
            lines = f.read().splitlines()
        assert lines[0] == "step,loss,accuracy,epoch,learn_rate"
        assert len(lines) == 1 + len(info.training_history)
        # each row carries its own iteration's epoch (it carried the one before: the
        # first row none, the first row of epoch 2 "1 of 3")
        epochs = [line.split(",")[3] for line in lines[1:]]
        assert epochs == [f"{r['epoch']} of 3" for r in info.training_history]


def test_parallel_device_choice(monkeypatch):
    """Without a GPU here, the choice is tested with a stand-in: parallel-auto takes one
    GPU per worker when every worker can have one, and CPUs otherwise."""
    from spmdlab.training import trainer

    group = trainer._Group(True)
    if not torch.cuda.is_available():
        assert trainer._device("parallel-auto", group) == torch.device("cpu")
    assert trainer._device("parallel-cpu", group) == torch.device("cpu")
    monkeypatch.setattr(trainer, "can_use_gpu", lambda: True)
    monkeypatch.setattr(trainer, "select_gpu", lambda: spmd_index() - 1)
    assert trainer._device("parallel-auto", group) == torch.device("cuda", spmd_index() - 1)

    def too_few():
        raise SpmdValueError("select_gpu: 4 workers share this node but it has 1 GPU(s)")

    monkeypatch.setattr(trainer, "select_gpu", too_few)
    assert trainer._device("parallel-auto", group) == torch.device("cpu")
    with pytest.raises(SpmdValueError, match="4 workers share this node"):
        trainer._device("parallel-gpu", group)
    monkeypatch.setattr(trainer, "can_use_gpu", lambda: spmd_index() != 1)
    assert trainer._device("parallel-auto", group) == torch.device("cpu")
    if spmd_size() > 1:
        with pytest.raises(SpmdValueError, match=f"only {spmd_size() - 1} of {spmd_size()} "
                                                 f"workers can use a GPU"):
            trainer._device("parallel-gpu", group)


# -- bad input: a clear error on every worker ----------------------------------------------


def test_bad_arguments():
    opts = training_options("sgdm", verbose=False, execution_environment="parallel-cpu",
                            mini_batch_size=10)
    with pytest.raises(SpmdTypeError, match=f"trainnet \\(worker {spmd_index()} of "
                       f"{spmd_size()}\\): 'net' must be a torch.nn.Module \\(got str\\)"):
        trainnet(_data(), "net", "crossentropy", opts)
    with pytest.raises(SpmdTypeError, match="'options' must come from training_options"):
        trainnet(_data(), _mlp(), "crossentropy", {"max_epochs": 3})
    with pytest.raises(SpmdValueError, match="unknown loss 'hinge'"):
        trainnet(_data(), _mlp(), "hinge", opts)
    with pytest.raises(SpmdValueError, match="mini_batch_size=10 is larger than the 7 "
                                             "training observations"):
        trainnet(_data(n=7), _mlp(), "crossentropy", opts)
    with pytest.raises(SpmdValueError, match="7 inputs but 6 targets"):
        x, y = _data(n=7)
        trainnet((x, y[:6]), _mlp(), "crossentropy", opts)
    if not torch.cuda.is_available():
        with pytest.raises(SpmdValueError, match="'parallel-gpu' but only 0 of"):
            trainnet(_data(), _mlp(), "crossentropy",
                     opts.replace(execution_environment="parallel-gpu"))


def test_workers_with_different_data_all_raise():
    if spmd_size() == 1:
        pytest.skip("needs several workers")
    with pytest.raises(SpmdMismatchError, match="the workers disagree: observations=10"):
        _train("parallel-cpu", data=_data(n=100 + spmd_index()))
    _train("parallel-cpu", max_epochs=1)  # the next call still works


def test_workers_with_another_random_split_all_raise():
    # found by tester V: split_each_label(..., randomize=True) without seed= (as the
    # guide's MATLAB table wrote it) drew another split on every worker; trainnet checked
    # only the sizes and trained each worker on its own split, validating on a mix
    from spmdlab.training import split_each_label

    if spmd_size() == 1:
        pytest.skip("needs several workers")
    x, y = _data(n=60)
    ds = ArrayDatastore(x.numpy(), y.numpy())
    train, test = split_each_label(ds, 0.8, randomize=True, seed=spmd_index())
    with pytest.raises(SpmdMismatchError, match=r"training_selection=.*pass seed= to "
                       r"split_each_label"):
        _train("parallel-cpu", data=train, max_epochs=1)
    shuffled = ds.shuffle(seed=0 if spmd_index() == 1 else 1)
    with pytest.raises(SpmdMismatchError, match=r"validation_selection=.* on worker 1"):
        _train("parallel-cpu", data=ds, max_epochs=1, validation_data=shuffled)
    train, test = split_each_label(ds, 0.8, randomize=True, seed=5)  # the same everywhere
    net, info = _train("parallel-cpu", data=train, max_epochs=1, validation_data=test)
    assert len(info.training_history) == len(train) // 10


def test_workers_with_different_options_all_raise():
    """Options that decide the computation must agree: a learn rate, an L2 factor or a
    shuffle that differs on one worker would train diverging replicas silently, and
    validation data or a checkpoint path on some workers only would fail mid-training."""
    if spmd_size() == 1:
        pytest.skip("needs several workers")
    k = spmd_index()
    x, y = _data()
    for options, match in [
            (dict(initial_learn_rate=0.01 * k), "initial_learn_rate="),
            (dict(l2_regularization=1e-4 * k), "l2_regularization="),
            (dict(shuffle="never" if k == 1 else "every-epoch"), "shuffle="),
            (dict(validation_data=(x[:20], y[:20]) if k == 1 else None), "validation_data="),
            (dict(checkpoint_path="unused" if k == 1 else None), "checkpoint_path=")]:
        with pytest.raises(SpmdMismatchError, match=f"the workers disagree: .*{match}"):
            _train("parallel-cpu", max_epochs=1, **options)
    # what only worker 1 shows may differ
    net, _ = _train("parallel-cpu", max_epochs=1, verbose_frequency=k)
    _same_everywhere(_flat(net))


def test_workers_with_another_dtype_or_other_class_names_all_raise():
    """A network of another dtype on one worker failed only in the first gradient sum,
    with a message naming the same shapes on every worker; other class names (the same
    number of observations and of classes) trained silently, labels meaning other
    outputs on that worker and ``info.class_names`` differing between workers."""
    if spmd_size() == 1:
        pytest.skip("needs several workers")
    last = spmd_index() == spmd_size()
    net = _mlp().double() if last else _mlp()
    with pytest.raises(SpmdMismatchError, match=r"the workers disagree: .*parameter_dtypes="
                       r"\['float64'\] here, \['float32'\] on worker 1"):
        _train("parallel-cpu", max_epochs=1, net=net)
    x, y = _data(n=60)
    names = np.array(["ant", "bee", "eel" if last else "cat"])[y.numpy()]
    with pytest.raises(SpmdMismatchError, match=r"the workers disagree: .*class_names="
                       r"\['ant', 'bee', 'eel'\] here, \['ant', 'bee', 'cat'\] on worker 1"):
        trainnet(ArrayDatastore(x.numpy(), names), _mlp(), "crossentropy", training_options(
            "sgdm", max_epochs=1, mini_batch_size=10, verbose=False,
            execution_environment="parallel-cpu"))
    _train("parallel-cpu", max_epochs=1)  # the next call still works


def test_workers_with_networks_of_another_layout_all_raise():
    """The same parameters, but a parameter-free batch norm more, or other layer names, on
    the last worker: loading worker 1's network raised a bare RuntimeError there alone,
    while the others went on training and waited for it."""
    if spmd_size() == 1:
        pytest.skip("needs several workers")
    last = spmd_index() == spmd_size()

    def net(extra, first):
        torch.manual_seed(1)
        layers = [(first, torch.nn.Linear(6, 16)), ("tanh", torch.nn.Tanh()),
                  ("out", torch.nn.Linear(16, 3))]
        if extra:
            layers.insert(1, ("norm", torch.nn.BatchNorm1d(16, affine=False)))
        return torch.nn.Sequential(collections.OrderedDict(layers))

    with pytest.raises(SpmdMismatchError, match=r"the workers disagree: buffers=.* here, "
                       r"\[\] on worker 1"):
        _train("parallel-cpu", max_epochs=1, net=net(last, "hidden"))
    with pytest.raises(SpmdMismatchError, match=r"worker 1's network does not fit this "
                       r"worker's .*RuntimeError: .*Missing key.*first.weight"):
        _train("parallel-cpu", max_epochs=1, net=net(False, "first" if last else "hidden"))
    _train("parallel-cpu", max_epochs=1)  # the next call still works


def test_a_mini_batch_smaller_than_the_workers_names_trainnet_and_the_worker():
    n = spmd_size()
    if n == 1:
        pytest.skip("needs several workers")
    opts = training_options("sgdm", max_epochs=1, mini_batch_size=n - 1, verbose=False,
                            execution_environment="parallel-cpu")
    with pytest.raises(SpmdValueError, match=f"^trainnet \\(worker {spmd_index()} of {n}\\): "
                       f"mini_batch_size={n - 1} cannot be split over {n} workers"):
        trainnet(_data(n=20), _mlp(), "crossentropy", opts)


@pytest.mark.parametrize("below, why", [("", "a-file' is not a folder"),
                                        ("checkpoints", "checkpoints' cannot be written")])
def test_a_checkpoint_path_that_is_a_file_fails_before_training(tmp_path, below, why):
    # a file, or a folder below a file (which failed only at the first checkpoint, after
    # an epoch of training): at the start, on every worker, naming the path
    afile = os.path.join(spmd_broadcast(1, str(tmp_path)), "a-file")
    path = os.path.join(afile, below) if below else afile
    if spmd_index() == 1:
        open(afile, "w").close()
    spmd_cat(0)
    calls = []

    def loss(scores, targets):
        calls.append(1)
        return torch.nn.functional.cross_entropy(scores, targets)

    opts = training_options("sgdm", max_epochs=1, mini_batch_size=10, verbose=False,
                            execution_environment="parallel-cpu", checkpoint_path=path)
    with pytest.raises(SpmdValueError, match=f"checkpoint_path=.*{why}"):
        trainnet(_data(), _mlp(), loss, opts)
    assert calls == []  # before any training


def test_minibatch_predict_of_an_empty_part_gives_no_scores():
    """A worker's part of a test set smaller than the workers is empty: no scores, the
    model's output shape, so that spmd_plus of the correct counts still follows."""
    from spmdlab.training import partition, scores2label

    x, y = _data(n=1)
    net = _mlp()
    for data in (ArrayDatastore(x.numpy(), y.numpy()), x, x.numpy()):
        mine = partition(data, 2, 2) if isinstance(data, ArrayDatastore) else data[1:]
        scores = minibatch_predict(net, mine)
        assert scores.shape == (0, 3)
        assert scores2label(scores, ["a", "b", "c"]).shape == (0,)
    with pytest.raises(SpmdValueError, match=f"minibatch_predict \\(worker {spmd_index()} "
                                             f"of {spmd_size()}\\): no data"):
        minibatch_predict(net, iter([]))


def test_an_error_on_one_worker_is_raised_on_every_worker():
    """A loss that fails on the last worker only, mid-training: that worker gets its own
    exception, led by trainnet, the iteration and the epoch; every other worker an error
    of the same class naming it; nobody waits forever."""
    last = spmd_size()

    def loss(scores, targets):
        if spmd_index() == last and calls.append(1) is None and len(calls) == 3:
            raise RuntimeError("boom in the loss")
        return torch.nn.functional.cross_entropy(scores, targets)

    calls = []
    opts = training_options("sgdm", max_epochs=2, mini_batch_size=10, verbose=False,
                            execution_environment="parallel-cpu")
    failed = (f"trainnet \\(worker {last} of {last}\\), iteration 3 \\(epoch 1\\): "
              f"RuntimeError: boom in the loss")
    if spmd_index() == last:
        with pytest.raises(RuntimeError, match=f"^{failed}$") as info:
            trainnet(_data(), _mlp(), loss, opts)
        assert str(info.value.__cause__) == "boom in the loss"
    else:
        with pytest.raises(RuntimeError, match=f"^trainnet \\(worker .*, waiting in "
                           f".*\\): failed on another worker: worker {last}: {failed}"):
            trainnet(_data(), _mlp(), loss, opts)
    _train("parallel-cpu", max_epochs=1)  # the next call still works


@pytest.mark.parametrize("environment", ["cpu", "parallel-cpu"])
def test_a_nan_loss_stops_training_and_keeps_the_last_finite_network(environment):
    """One NaN observation in iteration 4's mini-batch: training stops there with
    MATLAB's "Training loss is NaN", and the network is the one from before that step
    (finite parameters and batch-norm statistics; the population statistics, which
    would include the NaN observation, are not taken). It used to train on, report "Max
    epochs completed" and return a network whose validation loss was NaN."""
    x, y = _data()
    x[35] = float("nan")  # mini-batches of 10, no shuffle: iteration 4
    torch.manual_seed(1)
    net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.BatchNorm1d(16),
                              torch.nn.Tanh(), torch.nn.Linear(16, 3))
    net, info = _train(environment, data=(x, y), net=net, shuffle="never",
                       validation_data=_data(n=30, seed=5), validation_frequency=100)
    assert info.stop_reason == "Training loss is NaN"
    assert [r["iteration"] for r in info.training_history] == [1, 2, 3, 4]
    assert math.isnan(info.training_history[-1]["loss"])
    assert np.isfinite(_flat(net)).all()
    assert all(torch.isfinite(b).all() for b in net.buffers() if b.is_floating_point())
    assert math.isfinite(info.final_validation["loss"])
    if environment == "parallel-cpu":
        _same_everywhere(_flat(net))


def test_an_unreadable_image_names_trainnet_the_iteration_epoch_and_file(tmp_path):
    """A truncated PNG in iteration 6's mini-batch: every worker's error says trainnet,
    iteration 6 (epoch 1) and the file (it said OSError: image file is truncated, without
    the file, on the reading worker, and "spmd_plus ... iteration 5 ... (at
    contextlib.py:158)" on the others: mini-batches are read one ahead)."""
    from PIL import Image

    from spmdlab.training import ImageDatastore

    rng = np.random.default_rng(0)
    for label in ("a", "b"):  # every worker writes its own copy: /tmp need not be shared
        os.makedirs(tmp_path / label)
        for i in range(16):
            Image.fromarray(rng.integers(0, 255, (8, 8, 3), dtype=np.uint8)).save(
                tmp_path / label / f"{i:02d}.png")
    bad = tmp_path / "b" / "05.png"  # observation 21: iteration 6 of 4 observations each
    bad.write_bytes(bad.read_bytes()[:150])
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(8 * 8 * 3, 2))
    opts = training_options("sgdm", max_epochs=2, mini_batch_size=4, shuffle="never",
                            verbose=False, execution_environment="parallel-cpu")
    sizes = [4 // spmd_size() + (k < 4 % spmd_size()) for k in range(spmd_size())]
    reader = next(k + 1 for k in range(spmd_size()) if sum(sizes[:k + 1]) > 21 % 4)
    with pytest.raises(OSError) as info:
        trainnet(ImageDatastore(str(tmp_path)), net, "crossentropy", opts)
    message = str(info.value)
    assert message.startswith("trainnet (worker"), message
    assert f"trainnet (worker {reader} of {spmd_size()}), iteration 6 (epoch 1): OSError: " \
           f"ImageDatastore: cannot read '" in message, message
    assert "b/05.png" in message and "contextlib" not in message, message
    assert (spmd_index() == reader) == ("failed on another worker" not in message), message


# -- checkpoints ---------------------------------------------------------------------------


def test_checkpoint_and_resume_continue_the_same_training(tmp_path):
    folder = spmd_broadcast(1, str(tmp_path))
    full, full_info = _train("parallel-cpu", solver="adam", max_epochs=4,
                             shuffle="every-epoch")
    _train("parallel-cpu", solver="adam", max_epochs=2, shuffle="every-epoch",
           checkpoint_path=folder)
    names = sorted(os.listdir(folder))
    assert len(names) == 2 and all(n.startswith("net_checkpoint__") for n in names)
    assert latest_checkpoint(folder).endswith(names[-1]) and "__20__" in names[-1]
    resumed, info = _train("parallel-cpu", solver="adam", max_epochs=4,
                           shuffle="every-epoch", net=_mlp(seed=99), resume_from=folder)
    np.testing.assert_allclose(_flat(resumed), _flat(full), rtol=0, atol=1e-6)
    assert info.resumed_from == 20 and len(info.training_history) == 40
    assert [r["loss"] for r in info.training_history] == pytest.approx(
        [r["loss"] for r in full_info.training_history], abs=1e-6)


def test_checkpoint_mid_epoch_by_iteration(tmp_path):
    folder = spmd_broadcast(1, str(tmp_path))
    full, _ = _train("parallel-cpu", max_epochs=2, shuffle="every-epoch")
    _train("parallel-cpu", max_epochs=1, shuffle="every-epoch", checkpoint_path=folder,
           checkpoint_frequency=4, checkpoint_frequency_unit="iteration")
    path = os.path.join(folder, [n for n in os.listdir(folder) if "__8__" in n][0])
    resumed, info = _train("parallel-cpu", max_epochs=2, shuffle="every-epoch",
                           net=_mlp(seed=5), resume_from=path)
    assert info.resumed_from == 8
    np.testing.assert_allclose(_flat(resumed), _flat(full), rtol=0, atol=1e-6)


def test_resume_with_other_settings_is_refused(tmp_path):
    folder = spmd_broadcast(1, str(tmp_path))
    _train("parallel-cpu", max_epochs=1, checkpoint_path=folder)
    with pytest.raises(SpmdValueError, match="made with mini_batch_size=10, this run "
                                             "has 15"):
        _train("parallel-cpu", max_epochs=2, mini_batch_size=15, resume_from=folder)
    with pytest.raises(SpmdValueError, match="does not fit this network"):
        _train("parallel-cpu", max_epochs=2, net=torch.nn.Linear(6, 3), resume_from=folder)
    with pytest.raises(SpmdValueError, match="neither a checkpoint file nor a folder"):
        _train("parallel-cpu", resume_from=os.path.join(folder, "missing"))
    empty = os.path.join(folder, "empty")
    if spmd_index() == 1:
        os.makedirs(empty)
    with pytest.raises(SpmdValueError, match="no checkpoint"):
        _train("parallel-cpu", resume_from=empty)


@pytest.mark.mpi_skip  # patches torch.save in this process only
def test_a_crash_while_writing_leaves_no_checkpoint(tmp_path, monkeypatch):
    good = tmp_path / "good"
    _train("cpu", max_epochs=1, checkpoint_path=str(good))
    before = sorted(os.listdir(good))
    real_save = torch.save

    def crash(obj, f):
        real_save(obj, f)
        f.write(b"half")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(SpmdValueError, match="cannot write a checkpoint .*disk full"):
        _train("cpu", max_epochs=2, checkpoint_path=str(good), resume_from=str(good))
    assert sorted(os.listdir(good)) == before  # no half-written file, nothing replaced
    monkeypatch.setattr(torch, "save", real_save)
    _, info = _train("cpu", max_epochs=2, resume_from=str(good))
    assert info.resumed_from == 10


# -- rmsprop_update ------------------------------------------------------------------------


def test_rmsprop_update_matches_torch():
    a, b = _mlp(seed=3), _mlp(seed=3)
    opt = torch.optim.RMSprop(b.parameters(), lr=0.01, alpha=0.9, eps=1e-8)
    x, y = _data()
    state = None
    for _ in range(5):
        for net in (a, b):
            net.zero_grad()
            torch.nn.functional.cross_entropy(net(x), y).backward()
        a, state = rmsprop_update(a, average_sq_grad=state, learn_rate=0.01)
        opt.step()
    np.testing.assert_allclose(_flat(a), _flat(b), rtol=1e-5, atol=1e-6)
    with pytest.raises(SpmdValueError, match="'squared_gradient_decay_factor' must be in"):
        rmsprop_update(a, squared_gradient_decay_factor=1.0)


@pytest.mark.parametrize("where", ["prepare", "begin", "checkpoint"])
def test_any_exception_on_one_worker_reaches_every_worker(monkeypatch, tmp_path, where):
    """Not only ValueError and TypeError: a RuntimeError in one worker's own set-up,
    checkpoint reading or writing is raised on every worker (the others used to wait)."""
    from spmdlab.training import trainer

    failing = spmd_size()  # the last worker (worker 1 where only it does the work)
    if where == "prepare":
        real = trainer._device

        def device(environment, group):
            if spmd_index() == failing:
                raise RuntimeError("CUDA error: out of memory")
            return real(environment, group)
        monkeypatch.setattr(trainer, "_device", device)
    elif where == "begin":
        failing = 1
        monkeypatch.setattr(trainer, "cpu_copy", lambda tree: (_ for _ in ()).throw(
            RuntimeError("CUDA error: out of memory")))
    else:
        failing = 1
        monkeypatch.setattr(trainer, "write_checkpoint", lambda folder, state: (
            _ for _ in ()).throw(RuntimeError("CUDA error: out of memory")))
    folder = spmd_broadcast(1, str(tmp_path))
    with pytest.raises(Exception) as info:
        _train("parallel-cpu", max_epochs=1, checkpoint_path=folder)
    assert "CUDA error: out of memory" in str(info.value)
    if spmd_index() != failing:
        assert f"worker {failing}" in str(info.value)


def test_the_final_validation_is_that_of_the_returned_network():
    # it was the last validation during training, taken with the running batch-norm
    # statistics before the population ones (86% there, 96.7% for the same images after)
    torch.manual_seed(3)
    net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.BatchNorm1d(16),
                              torch.nn.Tanh(), torch.nn.Linear(16, 3))
    x, y = _data(n=60)
    net, info = _train("parallel-cpu", data=(x, y), net=net, metrics="accuracy",
                       validation_data=(x[:30], y[:30]), validation_frequency=4)
    final = info.final_validation
    assert final is not info.validation_history[-1]
    assert final["iteration"] == info.output_network_iteration
    with torch.no_grad():
        scores = net(x[:30])  # the returned network is in eval mode
        loss = float(torch.nn.functional.cross_entropy(scores, y[:30]))
        accuracy = 100.0 * float((scores.argmax(1) == y[:30]).float().mean())
    assert abs(final["loss"] - loss) < 1e-5
    assert abs(final["accuracy"] - accuracy) < 1e-4
