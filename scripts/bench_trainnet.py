"""trainnet's cost per iteration against a PyTorch DDP loop and a hand-written spmdlab loop.

    python scripts/bench_trainnet.py                 # launches itself at 2 and 4 workers
    python scripts/bench_trainnet.py --workers 4 --iterations 20

One epoch of ``--iterations`` iterations (global mini-batch 128, in-memory 28x28 data)
on the seed digit network (see bench_training.py), three ways, on every worker:
- trainnet: ``trainnet((x, y), net, "crossentropy", training_options("sgdm",
  execution_environment="parallel-cpu", max_epochs=1, batch_normalization_statistics=
  "moving", verbose=False))``, the whole call timed: set-up (network broadcast, checks),
  the data pipeline (observations read one by one, stacked in a background thread), three
  collectives per iteration (gradients, batch-norm state, loss and stop flag), history;
- DDP: ``DistributedDataParallel`` over gloo, ``torch.optim.SGD`` with momentum, each
  worker slicing its share of the global mini-batch straight out of the tensors, and
  ``loss.item()`` per iteration;
- toolkit loop: the same slicing, ``aggregate_gradients`` + ``aggregate_state`` +
  ``weighted_sum`` of the loss + ``sgdm_update``, by hand.
The three run interleaved, round by round (order rotating); the figure is the median
time per iteration over rounds. Ratios below 1 mean trainnet is faster.
"""


from _launch import emit, init_gloo, interleaved, main as bench_main
from bench_training import models


def worker(args):
    import warnings

    import numpy as np
    import torch
    from mpi4py import MPI

    from spmdlab import spmd_index, spmd_size
    from spmdlab.training import (aggregate_gradients, aggregate_state, sgdm_update,
                                  trainnet, training_options, weighted_sum,
                                  worker_mini_batch_sizes)

    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD.Dup()
    init_gloo(comm)
    batch, iterations = 128, args.iterations
    sizes = worker_mini_batch_sizes(batch, spmd_size())
    offset, local = sum(sizes[:spmd_index() - 1]), sizes[spmd_index() - 1]
    weight = local / batch
    rng = np.random.default_rng(0)  # the same data on every worker, as trainnet expects
    x = torch.from_numpy(rng.standard_normal((batch * iterations, 1, 28, 28))
                         .astype(np.float32))
    y = torch.from_numpy(rng.integers(0, 10, batch * iterations))
    loss_fn = torch.nn.functional.cross_entropy
    torch.manual_seed(0)
    net = models(torch)["digits"]
    ddp_net = torch.nn.parallel.DistributedDataParallel(models(torch)["digits"])
    sgd = torch.optim.SGD(ddp_net.parameters(), lr=0.01, momentum=0.9)
    toolkit_net = models(torch)["digits"]
    options = training_options("sgdm", max_epochs=1, mini_batch_size=batch,
                               execution_environment="parallel-cpu", verbose=False,
                               shuffle="every-epoch", batch_normalization_statistics="moving")

    def shares(epoch_seed):
        order = np.random.default_rng(epoch_seed).permutation(len(x))
        return [torch.from_numpy(order[i * batch + offset:i * batch + offset + local])
                for i in range(iterations)]

    def run_trainnet():
        trainnet((x, y), net, "crossentropy", options)

    def run_ddp():
        for idx in shares(1):
            sgd.zero_grad()
            loss = loss_fn(ddp_net(x[idx]), y[idx])  # DDP averages: equal shares here
            loss.backward()
            sgd.step()
            loss.item()

    velocity = None

    def run_toolkit():
        nonlocal velocity
        for idx in shares(2):
            toolkit_net.zero_grad()
            loss = loss_fn(toolkit_net(x[idx]), y[idx])
            loss.backward()
            aggregate_gradients(toolkit_net, weight)
            aggregate_state(toolkit_net, weight)
            _, velocity = sgdm_update(toolkit_net, velocity=velocity)
            weighted_sum(loss.item(), weight)

    runs = {"trainnet": run_trainnet, "ddp": run_ddp, "toolkit": run_toolkit}
    for fn in runs.values():  # warm-up
        fn()
    per_call = interleaved(comm, runs, args.rounds)
    if comm.Get_rank() == 0:
        emit({"workers": comm.Get_size(), "iterations": iterations,
              "results": {k: t / iterations for k, t in per_call.items()}})


def report(res):
    r = res["results"]
    print(f"\n== {res['workers']} workers, {res['iterations']} iterations per call "
          f"(ms per iteration, global batch 128, seed digit network)")
    print(f"{'trainnet':>9} {'DDP':>9} {'toolkit':>9} {'trainnet/DDP':>13} "
          f"{'trainnet/toolkit':>17}")
    print(f"{r['trainnet'] * 1e3:9.2f} {r['ddp'] * 1e3:9.2f} {r['toolkit'] * 1e3:9.2f} "
          f"{r['trainnet'] / r['ddp']:13.2f} {r['trainnet'] / r['toolkit']:17.2f}")


if __name__ == "__main__":
    bench_main(__file__, __doc__, worker, report, options=[
        ("--iterations", dict(type=int, default=20,
                              help="iterations per trainnet call (one epoch)")),
        ("--rounds", dict(type=int, default=7))], extra="; torch threads per worker: 1")
