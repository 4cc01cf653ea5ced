"""spmdlab.training: mini-batch split, weighted aggregation, batch-norm merge, updates."""

import copy

import numpy as np
import pytest

from mpi4py import MPI

from spmdlab import SpmdMismatchError, SpmdValueError, spmd_cat, spmd_index, spmd_plus, spmd_size
from spmdlab.training import (adam_update, aggregate_gradients, aggregate_state,
                              aggregate_state_values, dlupdate, population_statistics,
                              sgdm_update, weighted_sum, worker_mini_batch_sizes)

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.mpi


def test_worker_mini_batch_sizes():
    assert worker_mini_batch_sizes(10, 3) == [4, 3, 3]
    assert worker_mini_batch_sizes(128, 4) == [32] * 4
    assert worker_mini_batch_sizes(5, 5) == [1] * 5
    with pytest.raises(SpmdValueError, match="a mini-batch of 3 cannot be split over 4"):
        worker_mini_batch_sizes(3, 4)
    with pytest.raises(SpmdValueError, match="'num_workers' must be at least 1"):
        worker_mini_batch_sizes(3, 0)


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(),
                               torch.nn.Linear(16, 3))


def global_batch(step, size):
    rng = np.random.default_rng(step)
    x = torch.from_numpy(rng.standard_normal((size, 6)).astype(np.float32))
    y = torch.from_numpy(rng.integers(0, 3, size))
    return x, y


@pytest.mark.parametrize("batch", [12, 10], ids=["even", "uneven"])
def test_n_workers_follow_one_worker_on_the_global_batch(batch):
    n, k = spmd_size(), spmd_index()
    model, reference = mlp(), mlp()
    sizes = worker_mini_batch_sizes(batch, n)
    start = sum(sizes[:k - 1])
    velocity = ref_velocity = None
    loss_fn = torch.nn.functional.cross_entropy
    for step in range(6):
        x, y = global_batch(step, batch)
        model.zero_grad()
        loss = loss_fn(model(x[start:start + sizes[k - 1]]), y[start:start + sizes[k - 1]])
        loss.backward()
        weight = sizes[k - 1] / batch
        aggregate_gradients(model, weight)
        total_loss = weighted_sum(loss.item(), weight)
        model, velocity = sgdm_update(model, velocity=velocity, learn_rate=0.1)
        reference.zero_grad()
        ref_loss = loss_fn(reference(x), y)
        ref_loss.backward()
        reference, ref_velocity = sgdm_update(reference, velocity=ref_velocity,
                                              learn_rate=0.1)
        assert abs(total_loss - ref_loss.item()) < 1e-5
    for p, q in zip(model.parameters(), reference.parameters()):
        assert torch.allclose(p, q, atol=1e-5, rtol=0), (p - q).abs().max()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()
    everyone = spmd_cat(flat[None, :])
    assert all(np.array_equal(row.view(np.uint32), flat.view(np.uint32)) for row in everyone)


def worker_data(k, channels=5):
    rng = np.random.default_rng(100 + k)
    rows = 3 + 2 * k  # uneven shares
    return (rng.standard_normal((rows, channels)) * (k + 1) + k).astype(np.float64)


def test_batch_norm_merge_equals_the_concatenated_batch():
    n, k = spmd_size(), spmd_index()
    data = [worker_data(j) for j in range(1, n + 1)]
    whole = np.concatenate(data)
    mine = data[k - 1]
    model = torch.nn.Sequential(torch.nn.Linear(5, 5), torch.nn.BatchNorm1d(5)).double()
    bn = model[1]
    bn.running_mean.copy_(torch.from_numpy(mine.mean(axis=0)))
    bn.running_var.copy_(torch.from_numpy(mine.var(axis=0)))
    aggregate_state(model, len(mine) / len(whole))
    np.testing.assert_allclose(bn.running_mean.numpy(), whole.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(bn.running_var.numpy(), whole.var(axis=0), rtol=1e-10)
    # MATLAB-style: a list of state values with mean / variance masks
    values = [torch.tensor([float(k)]), torch.from_numpy(mine.mean(axis=0)),
              torch.from_numpy(mine.var(axis=0))]
    merged = aggregate_state_values(values, len(mine) / len(whole),
                                    [False, True, False], [False, False, True])
    np.testing.assert_allclose(merged[1].numpy(), whole.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(merged[2].numpy(), whole.var(axis=0), rtol=1e-10)
    expected_other = sum(j * len(data[j - 1]) for j in range(1, n + 1)) / len(whole)
    assert abs(merged[0].item() - expected_other) < 1e-6


def test_population_statistics_are_the_moments_of_all_the_data():
    # every worker's part, in batches of uneven size: the running mean and unbiased
    # variance become those of everything each batch-norm layer saw, on every worker
    n, k = spmd_size(), spmd_index()
    data = [worker_data(j) for j in range(1, n + 1)]
    whole = np.concatenate(data)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.BatchNorm1d(5), torch.nn.Linear(5, 3),
                                torch.nn.BatchNorm1d(3), torch.nn.Linear(3, 2)).double()
    model.eval()
    mine = torch.from_numpy(data[k - 1])
    population_statistics(model, [(mine[:3], None), mine[3:]])  # (x, y) or x batches
    assert not model.training  # its mode is kept
    np.testing.assert_allclose(model[0].running_mean.numpy(), whole.mean(axis=0),
                               rtol=1e-12)
    np.testing.assert_allclose(model[0].running_var.numpy(), whole.var(axis=0, ddof=1),
                               rtol=1e-10)
    # a deeper layer's inputs depend on each batch: its statistics agree on every worker
    state = np.concatenate([model[2].running_mean.numpy(), model[2].running_var.numpy()])
    everyone = spmd_cat(state[None])
    assert (everyone == everyone[0]).all() and np.isfinite(state).all()


def test_population_statistics_failing_on_one_worker_fails_on_every_worker():
    model = torch.nn.Sequential(torch.nn.BatchNorm1d(3))
    n, k = spmd_size(), spmd_index()
    bad = min(2, n)
    batches = [torch.zeros(4, 3 if k != bad else 5)]  # the wrong width on worker `bad`
    with pytest.raises(Exception) as raised:
        population_statistics(model, batches)
    assert isinstance(raised.value, RuntimeError)  # its class, on every worker
    if k == bad:  # its own exception, led by where it happened
        assert str(raised.value).startswith(f"population_statistics (worker {bad} of {n})")
        assert isinstance(raised.value.__cause__, RuntimeError)
    else:  # the others are told who failed, and how, instead of waiting
        assert f"population_statistics (worker {bad} of {n}), the pass over this " \
               f"worker's batches: RuntimeError" in str(raised.value)


def test_aggregate_gradients_on_structures_and_missing_gradients():
    n, k = spmd_size(), spmd_index()
    summed = aggregate_gradients({"w": torch.ones(3) * k, "b": np.ones(2)}, 0.5)
    assert torch.allclose(summed["w"], torch.ones(3) * 0.5 * n * (n + 1) / 2)
    assert np.allclose(summed["b"], 0.5 * n)
    model = torch.nn.Linear(2, 2)
    unused = torch.nn.Parameter(torch.zeros(4))
    model.register_parameter("unused", unused)
    model.weight.grad = torch.ones(2, 2) * k
    model.bias.grad = None if k == 1 else torch.ones(2)
    aggregate_gradients(model, 1.0)
    assert torch.equal(model.weight.grad, torch.ones(2, 2) * n * (n + 1) / 2)
    if n == 1:
        assert model.bias.grad is None  # its only worker had none
    else:
        assert torch.equal(model.bias.grad, torch.ones(2) * (n - 1))  # worker 1 counted 0
    assert model.unused.grad is None  # no worker had one


def test_parameter_shapes_that_differ_fail_on_every_worker():
    if spmd_size() < 2:
        pytest.skip("needs two workers")
    model = torch.nn.Linear(3, 2 + (spmd_index() == 2))
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    with pytest.raises(SpmdMismatchError, match="aggregate_gradients.*parameters"):
        aggregate_gradients(model, 1.0)


def test_parameter_dtypes_that_differ_fail_on_every_worker_naming_them():
    """One shape, another dtype on worker 2: the message told the workers apart only by
    their shapes, so it listed "workers 1-2" with one and the same description."""
    if spmd_size() < 2:
        pytest.skip("needs two workers")
    model = torch.nn.Linear(3, 2)
    if spmd_index() == 2:
        model = model.double()
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    with pytest.raises(SpmdMismatchError, match=r"workers? 1.*: aggregate_gradients\(model with "
                       r"float32 parameters .*worker 2: aggregate_gradients\(model "
                       r"with float64 parameters"):
        aggregate_gradients(model, 1.0)


def test_parameters_in_another_order_fail_on_every_worker():
    """Two layers of one shape registered in the other order on the last worker: the
    shapes agreed, so each worker's first layer was summed with the other's second, a
    silent wrong average; the names are part of the layout now."""
    if spmd_size() < 2:
        pytest.skip("needs two workers")

    class Two(torch.nn.Module):
        def __init__(self, swap):
            super().__init__()
            names = ("second", "first") if swap else ("first", "second")
            for name in names:
                setattr(self, name, torch.nn.Linear(4, 4))

    for model in (Two(spmd_index() == spmd_size()), Two(spmd_index() == spmd_size()).double()):
        for p in model.parameters():
            p.grad = torch.full_like(p, float(spmd_index()))
        with pytest.raises(SpmdMismatchError, match=r"aggregate_gradients.*parameters "
                           r"first.weight \(4, 4\).*aggregate_gradients\(model with float\d+ "
                           r"parameters second.weight"):
            aggregate_gradients(model, 1.0)
    # the same parameters in the same order on every worker still sum
    model = Two(False)
    for p in model.parameters():
        p.grad = torch.full_like(p, float(spmd_index()))
    aggregate_gradients(model, 1.0)
    n = spmd_size()
    assert torch.equal(model.second.bias.grad, torch.full((4,), n * (n + 1) / 2))


def test_a_model_without_trainable_parameters_on_one_worker_fails_on_every_worker():
    """The last worker froze every parameter: its aggregate_gradients returned at once,
    the others waited for it (SpmdPeerError at its exit, or a mismatch at its next call)."""
    if spmd_size() < 2:
        pytest.skip("needs two workers")
    model = torch.nn.Linear(3, 2)
    model(torch.ones(2, 3)).sum().backward()
    if spmd_index() == spmd_size():
        model.requires_grad_(False)
    with pytest.raises(SpmdMismatchError, match=r"aggregate_gradients \(worker .*aggregate_"
                       r"gradients\(model with no trainable parameters\)"):
        aggregate_gradients(model, 1.0)
    frozen = torch.nn.Linear(3, 2).requires_grad_(False)  # frozen everywhere: no error
    for _ in range(2):
        assert aggregate_gradients(frozen, 1.0) is frozen


def test_batch_norm_layers_that_differ_fail_aggregate_state_on_every_worker():
    """Two batch-norm layers of one size in the other order on the last worker were
    merged crosswise (the replicas drifted apart silently); a model without any state on
    one worker returned there while the others waited in the sum."""
    if spmd_size() < 2:
        pytest.skip("needs two workers")
    last = spmd_index() == spmd_size()

    class Two(torch.nn.Module):
        def __init__(self, swap):
            super().__init__()
            for name in (("b", "a") if swap else ("a", "b")):
                setattr(self, name, torch.nn.BatchNorm1d(4))

    with pytest.raises(SpmdMismatchError, match=r"aggregate_state\(model with batch norm a "
                       r"\(4\), batch norm b \(4\)\).*aggregate_state\(model with batch "
                       r"norm b \(4\), batch norm a"):
        aggregate_state(Two(last), 1.0 / spmd_size())
    plain = torch.nn.Linear(3, 4)
    model = plain if last else torch.nn.Sequential(plain, torch.nn.BatchNorm1d(4))
    with pytest.raises(SpmdMismatchError, match=r"aggregate_state\(model without batch-norm"):
        aggregate_state(model, 1.0 / spmd_size())
    # alike everywhere: merged, every call after the first without an agreement
    model = Two(False)
    with torch.no_grad():
        model.a.running_mean.fill_(float(spmd_index()))
    for _ in range(2):
        aggregate_state(model, 1.0 / spmd_size())
    assert torch.allclose(model.a.running_mean, torch.full((4,), (spmd_size() + 1) / 2))
    aggregate_state(torch.nn.Linear(2, 2), 0.5)  # nothing to merge anywhere: no error
    from spmdlab import SpmdTypeError

    n = spmd_size()
    with pytest.raises(SpmdTypeError, match=f"aggregate_state .*worker {n} of {n}.*expects "
                       "a torch.nn.Module"):  # on the last worker only
        aggregate_state([np.ones(4)] if last else torch.nn.BatchNorm1d(4), 1.0 / n)


def test_population_statistics_of_layers_in_another_order_fail_on_every_worker():
    """Batch-norm layers of one size in another order on the last worker: each worker's
    sums were added crosswise, silently."""
    if spmd_size() < 2:
        pytest.skip("needs two workers")

    class Two(torch.nn.Module):
        def __init__(self, swap):
            super().__init__()
            for name in (("b", "a") if swap else ("a", "b")):
                setattr(self, name, torch.nn.BatchNorm1d(4))

        def forward(self, x):
            return self.b(self.a(x))

    batches = [torch.randn(5, 4)]
    with pytest.raises(SpmdMismatchError, match=r"population_statistics\(model with batch "
                       r"norm a \(4\), batch norm b.*population_statistics\(model with "
                       r"batch norm b \(4\), batch norm a"):
        population_statistics(Two(spmd_index() == spmd_size()), batches)
    population_statistics(Two(False), batches)  # alike everywhere


def test_a_weight_that_is_not_a_number_fails_on_every_worker():
    # on the last worker only: the others, already in the sum, raise it too
    from spmdlab import SpmdTypeError
    from spmdlab.training import weighted_sum

    n, k = spmd_size(), spmd_index()
    model = torch.nn.Linear(3, 2)
    model(torch.ones(4, 3)).sum().backward()
    for bad in ("x", np.ones(2), 1j, True):
        for fn, x in ((aggregate_gradients, model), (aggregate_gradients, [np.ones(2)]),
                      (weighted_sum, 1.0)):
            with pytest.raises(SpmdTypeError, match=f"{fn.__name__} .*worker {n} of {n}.*"
                               "the weight must be a real number"):
                fn(x, bad if k == n else 1.0 / n)
    # numbers of any kind still weigh
    assert weighted_sum(2.0, np.float32(1 / n)) == pytest.approx(2.0)


def test_a_value_that_cannot_be_weighted_on_one_worker_fails_on_every_worker():
    """A None gradient in a list on worker 1 only: it raised there alone (naming no
    worker) while the others waited for it in the sum."""
    from spmdlab import SpmdTypeError

    n, k = spmd_size(), spmd_index()
    for fn in (aggregate_gradients, weighted_sum):
        with pytest.raises(SpmdTypeError, match=f"{fn.__name__} .*worker 1 of {n}.*cannot "
                           f"weight a value of type NoneType"):
            fn([torch.ones(2), None if k == 1 else torch.ones(2)], 1.0 / n)
    assert weighted_sum([1.0], 1.0 / n) == [pytest.approx(1.0)]  # and the next one works


def test_aggregate_state_values_bad_on_one_worker_fails_on_every_worker():
    """Flags that do not match the values, or do not pair up, on the last worker only:
    it raised there alone while the others waited for it in the sum."""
    from spmdlab import SpmdTypeError

    n = spmd_size()
    last = spmd_index() == n
    values = [np.ones(2), np.ones(2)]
    with pytest.raises(SpmdTypeError, match=f"aggregate_state_values .*worker {n} of {n}.*"
                       "2 values but 1 mean flags"):
        aggregate_state_values(values, 1 / n, [True] if last else [True, False],
                               [False, True])
    with pytest.raises(SpmdTypeError, match=f"aggregate_state_values .*worker {n} of {n}.*"
                       "1 means but 0 variances"):
        aggregate_state_values(values, 1 / n, [True, False],
                               [False, False] if last else [False, True])
    merged = aggregate_state_values(values, 1 / n, [True, False], [False, True])
    assert np.allclose(merged[0], 1.0)  # and the next one works


def test_a_numpy_float32_weight_keeps_the_values_dtype():
    """A numpy float32 weight made a Python float loss float32 (NumPy 2's rules), and
    with a Python float weight on the other workers the sum failed as a mismatch."""
    n, k = spmd_size(), spmd_index()
    weight = np.float32(1 / n) if k == 1 else 1 / n
    total = weighted_sum(0.3, weight)
    assert type(total) is float and total == weighted_sum(0.3, float(weight))
    grads = aggregate_gradients([np.ones(2, np.float32)], np.float64(1 / n))
    assert grads[0].dtype == np.float32
    assert float(weighted_sum(1.0, torch.tensor(1 / n))) == pytest.approx(1.0)
    assert spmd_plus(1) == n


def test_a_state_weight_that_is_not_a_number_fails_on_every_worker():
    # found by tester V: aggregate_state and aggregate_state_values did not check the
    # weight; the bad worker alone raised a bare TypeError and the others went on into
    # the sum, to fail later in an unrelated call
    from spmdlab import SpmdTypeError

    n, k = spmd_size(), spmd_index()
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    model(torch.randn(8, 3))
    values = [np.ones(2), np.ones(2)]
    for bad in ("x", None, np.ones(2)):
        with pytest.raises(SpmdTypeError, match=f"aggregate_state .*worker {n} of {n}.*"
                           "the weight must be a real number"):
            aggregate_state(model, bad if k == n else 1.0 / n)
        with pytest.raises(SpmdTypeError, match=f"aggregate_state_values .*worker {n} of "
                           f"{n}.*the weight must be a real number"):
            aggregate_state_values(values, bad if k == n else 1.0 / n, [True, False],
                                   [False, True])
    merged = aggregate_state_values(values, np.float32(1 / n), [True, False], [False, True])
    np.testing.assert_allclose(np.array(merged), np.ones((2, 2)), rtol=1e-6)  # float32 1/n
    assert spmd_plus(1) == n


def test_sgdm_on_arrays_matches_matlab_formula():
    params = {"w": np.ones(3), "b": [np.zeros(2)]}
    grads = {"w": np.full(3, 2.0), "b": [np.ones(2)]}
    new, vel = sgdm_update(params, grads)  # MATLAB defaults: 0.01, momentum 0.9
    assert np.allclose(vel["w"], -0.02) and np.allclose(new["w"], 0.98)
    new2, vel2 = sgdm_update(new, grads, vel)
    assert np.allclose(vel2["w"], 0.9 * -0.02 - 0.02)
    assert np.allclose(new2["b"][0], -0.01 + 0.9 * -0.01 - 0.01)
    assert np.allclose(params["w"], 1.0)  # inputs unmodified


def test_adam_matches_torch_adam_without_epsilon():
    torch.manual_seed(1)
    model = torch.nn.Linear(4, 3)
    twin = copy.deepcopy(model)
    opt = torch.optim.Adam(twin.parameters(), lr=0.01, eps=0.0)
    avg = avg_sq = None
    for it in range(1, 5):
        x = torch.randn(8, 4)
        for net in (model, twin):
            net.zero_grad()
            net(x).pow(2).mean().backward()
        model, avg, avg_sq = adam_update(model, average_grad=avg, average_sq_grad=avg_sq,
                                         iteration=it, learn_rate=0.01, epsilon=0.0)
        opt.step()
    for p, q in zip(model.parameters(), twin.parameters()):
        assert torch.allclose(p, q, atol=1e-6)
    with pytest.raises(SpmdValueError, match="'iteration' must be an int >= 1"):
        adam_update(model, iteration=0)


def test_dlupdate():
    params = {"a": np.ones(2), "b": np.full(3, 2.0)}
    doubled = dlupdate(lambda p: 2 * p, params)
    assert np.allclose(doubled["a"], 2) and np.allclose(doubled["b"], 4)
    new, halves = dlupdate(lambda p, g: (p - g, p / 2), params, {"a": np.ones(2),
                                                                 "b": np.ones(3)})
    assert np.allclose(new["a"], 0) and np.allclose(halves["b"], 1)
    model = torch.nn.Linear(2, 2)
    before = model.weight.detach().clone()
    dlupdate(lambda p: p * 0.5, model)
    assert torch.allclose(model.weight, before * 0.5)


def test_module_state_that_is_not_a_dict_is_named():
    """A module's extra arguments and state are dicts by parameter name: a number or a
    list raised AttributeError ("'float' object has no attribute 'get'")."""
    from spmdlab import SpmdTypeError

    model = torch.nn.Linear(2, 2)
    model(torch.ones(1, 2)).sum().backward()
    with pytest.raises(SpmdTypeError, match=r"dlupdate: for a module, .* dict by parameter "
                       r"name.*got 0.5 that is a float"):
        dlupdate(lambda p, f: p * f, model, 0.5)
    with pytest.raises(SpmdTypeError, match=r"sgdm_update: .*got \[.*\] that is a list"):
        sgdm_update(model, velocity=[torch.zeros(2, 2), torch.zeros(2)])
    with pytest.raises(SpmdTypeError, match=r"adam_update: .*that is a tuple"):
        adam_update(model, average_grad=None, average_sq_grad=(1.0,), iteration=1)
    _, velocity = sgdm_update(model)  # dicts by name, as returned, still work
    sgdm_update(model, velocity=velocity)


def test_helpers_labels_and_one_hot():
    from spmdlab.training import onehotencode, scores2label

    scores = np.array([[0.1, 0.7, 0.2], [0.5, 0.4, 0.1]])
    assert scores2label(scores).tolist() == [1, 0]
    assert scores2label(torch.from_numpy(scores), ["a", "b", "c"]).tolist() == ["b", "a"]
    with pytest.raises(SpmdValueError, match="2 class names for 3 scores"):
        scores2label(scores, ["a", "b"])
    assert onehotencode([2, 0], 3).tolist() == [[0, 0, 1], [1, 0, 0]]
    assert onehotencode(["b"], ["a", "b"]).tolist() == [[0, 1]]
    with pytest.raises(SpmdValueError, match="label 'z' is not one of the classes"):
        onehotencode(["z"], ["a", "b"])


def test_minibatch_predict_restores_the_mode():
    from spmdlab.training import minibatch_predict

    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    model.train()
    x = np.random.default_rng(0).standard_normal((10, 3)).astype(np.float32)
    out = minibatch_predict(model, x, mini_batch_size=4)
    assert out.shape == (10, 2) and model.training
    model.eval()
    with torch.no_grad():
        assert torch.allclose(out, model(torch.from_numpy(x)))


def test_select_gpu(monkeypatch):
    from spmdlab.training import helpers, select_gpu

    monkeypatch.setattr(helpers, "gpu_device_count", lambda: 0)
    with pytest.raises(SpmdValueError, match="workers share this node but it has 0 GPU"):
        select_gpu()
    monkeypatch.setattr(helpers, "gpu_device_count", lambda: 8)
    index = select_gpu(set_device=False)
    # per node: its workers take GPUs 0, 1, ... in worker order (2x2: 0, 1 on each node;
    # nodes of different sizes, as 7 workers on 3 nodes, each its own 0, 1, ...)
    node = MPI.COMM_WORLD.Split_type(MPI.COMM_TYPE_SHARED)
    first, per_node = node.bcast(spmd_index(), root=0), node.Get_size()
    node.Free()
    everyone = spmd_cat(np.array([[first, index]]))
    for leader in set(everyone[:, 0].tolist()):
        workers = everyone[everyone[:, 0] == leader, 1].tolist()
        assert workers == list(range(len(workers)))
    assert index < per_node


def test_on_each_node_runs_once_per_node(tmp_path):
    from spmdlab.training import on_each_node

    node = MPI.COMM_WORLD.Split_type(MPI.COMM_TYPE_SHARED)
    leader = node.Get_rank() == 0
    node.Free()
    calls = []
    result = on_each_node(lambda: calls.append(spmd_index()) or f"written by {spmd_index()}")
    assert calls == ([spmd_index()] if leader else [])
    assert result.startswith("written by ")
    assert spmd_plus(len(calls)) == spmd_plus(int(leader))  # once per node

    def fails():
        raise OSError("disk full")
    with pytest.raises(Exception, match="disk full"):
        on_each_node(fails)
