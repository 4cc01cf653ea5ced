"""Data-parallel training step: spmdlab against PyTorch DDP (gloo) and raw mpi4py.

    python scripts/bench_training.py                 # launches itself at 2 and 4 workers
    python scripts/bench_training.py --workers 2 --steps 20

Per step, on every worker: forward and backward on its share of a global mini-batch of
128, then
- spmdlab: ``aggregate_gradients(model, w)`` + ``aggregate_state(model, w)``, SGD step;
- DDP: ``DistributedDataParallel`` over gloo (gradients averaged during backward,
  buffers broadcast from rank 0), SGD step;
- mpi4py: gradients copied into one flat numpy buffer, one ``Allreduce``, copied back,
  SGD step.
Models: (a) the seed digit network (conv5x5x20-BN-ReLU, two conv3x3x20-BN-ReLU, FC to 10,
28x28 inputs); (b) an MLP 784-2048-BN-ReLU-1024-ReLU-10. The three variants run
interleaved, round by round (order rotating), on identical models and data; the figure
is the median time per step over rounds. Ratios below 1 mean spmdlab is faster.
"""


from _launch import emit, init_gloo, interleaved, main as bench_main


def models(torch):
    nn = torch.nn
    digits = nn.Sequential(
        nn.Conv2d(1, 20, 5, padding=2), nn.BatchNorm2d(20), nn.ReLU(),
        nn.Conv2d(20, 20, 3, padding=1), nn.BatchNorm2d(20), nn.ReLU(),
        nn.Conv2d(20, 20, 3, padding=1), nn.BatchNorm2d(20), nn.ReLU(),
        nn.Flatten(), nn.Linear(20 * 28 * 28, 10))
    mlp = nn.Sequential(nn.Flatten(), nn.Linear(784, 2048), nn.BatchNorm1d(2048), nn.ReLU(),
                        nn.Linear(2048, 1024), nn.ReLU(), nn.Linear(1024, 10))
    return {"digits": digits, "mlp": mlp}


def worker(args):
    import copy

    import numpy as np
    import torch
    import torch.distributed as dist
    from mpi4py import MPI

    from spmdlab import spmd_index, spmd_size
    from spmdlab.training import aggregate_gradients, aggregate_state, worker_mini_batch_sizes

    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD.Dup()
    rank, size = comm.Get_rank(), comm.Get_size()
    init_gloo(comm)
    batch = 128
    local = worker_mini_batch_sizes(batch, spmd_size())[spmd_index() - 1]
    weight = local / batch
    rng = np.random.default_rng(rank)
    x = torch.from_numpy(rng.standard_normal((local, 1, 28, 28)).astype(np.float32))
    y = torch.from_numpy(rng.integers(0, 10, local))
    loss_fn = torch.nn.functional.cross_entropy
    results = {}
    for name, model in models(torch).items():
        torch.manual_seed(0)
        nets = {"spmdlab": model, "ddp": copy.deepcopy(model), "mpi4py": copy.deepcopy(model)}
        ddp = torch.nn.parallel.DistributedDataParallel(nets["ddp"])
        opts = {k: torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
                for k, m in nets.items()}
        params = [p for p in nets["mpi4py"].parameters()]
        flat = np.empty(sum(p.numel() for p in params), np.float32)
        flat_out = np.empty_like(flat)

        def spmd_step():
            m = nets["spmdlab"]
            opts["spmdlab"].zero_grad()
            loss_fn(m(x), y).backward()
            aggregate_gradients(m, weight)
            aggregate_state(m, weight)
            opts["spmdlab"].step()

        def ddp_step():
            opts["ddp"].zero_grad()
            loss_fn(ddp(x), y).backward()  # DDP averages: equal shares here (128 / N)
            opts["ddp"].step()

        def mpi_step():
            m = nets["mpi4py"]
            opts["mpi4py"].zero_grad()
            loss_fn(m(x), y).backward()
            offset = 0
            for p in params:
                n = p.numel()
                np.multiply(p.grad.reshape(-1).numpy(), weight, out=flat[offset:offset + n])
                offset += n
            comm.Allreduce(flat, flat_out, MPI.SUM)
            offset = 0
            for p in params:
                n = p.numel()
                p.grad.copy_(torch.from_numpy(flat_out[offset:offset + n]).view_as(p))
                offset += n
            opts["mpi4py"].step()

        steps = {"spmdlab": spmd_step, "ddp": ddp_step, "mpi4py": mpi_step}
        for fn in steps.values():
            for _ in range(3):
                fn()
        results[name] = interleaved(comm, steps, args.rounds, calls=args.steps)
        results[name]["params"] = int(sum(p.numel() for p in model.parameters()))
    dist.destroy_process_group()
    if rank == 0:
        emit({"workers": size, "results": results})


def report(res):
    print(f"\n== {res['workers']} workers (ms per training step, global batch 128)")
    print(f"{'model':>8} {'params':>10} {'spmdlab':>9} {'DDP':>9} {'mpi4py':>9} "
          f"{'spmdlab/DDP':>12} {'spmdlab/mpi4py':>15}")
    for name, r in res["results"].items():
        print(f"{name:>8} {r['params']:>10,} {r['spmdlab'] * 1e3:9.2f} {r['ddp'] * 1e3:9.2f} "
              f"{r['mpi4py'] * 1e3:9.2f} {r['spmdlab'] / r['ddp']:12.2f} "
              f"{r['spmdlab'] / r['mpi4py']:15.2f}")


if __name__ == "__main__":
    bench_main(__file__, __doc__, worker, report, options=[
        ("--steps", dict(type=int, default=10, help="steps per timed round")),
        ("--rounds", dict(type=int, default=7))], extra="; torch threads per worker: 1")
