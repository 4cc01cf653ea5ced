"""GPU values through spmdlab against the same staging written by hand in raw mpi4py.

    mpiexec -n 2 python scripts/bench_gpu.py        # needs torch with CUDA (CuPy optional)

Every GPU value is staged through host memory today (docs/guide/gpu.md), so the fair
baseline is that staging done by hand: copy to the host, the raw mpi4py call on the host
buffer, copy back to the device. For torch CUDA tensors (and CuPy arrays where CuPy is
installed) from 8 B to 64 MiB, interleaved round by round:

- ``spmd_plus(x)`` against ``x.cpu()`` -> ``comm.Allreduce`` -> ``.to(device)``;
- ``spmd_broadcast(1, x)`` against ``x.cpu()`` -> ``comm.Bcast`` -> ``.to(device)``;
- ``spmd_send_receive`` in a ring against ``x.cpu()`` -> ``comm.Sendrecv`` -> back.

Each figure is the median over rounds of the mean time per call on worker 1, the device
synchronized before the clock stops; ``ratio`` is spmdlab's time over raw's.
"""

import statistics
import time

import numpy as np
from mpi4py import MPI

from spmdlab import spmd_broadcast, spmd_index, spmd_plus, spmd_send_receive, spmd_size

SIZES = [8, 64, 1 << 10, 16 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]
ROUNDS = 5


def families():
    import torch
    if not torch.cuda.is_available():  # a dry run of the script on the CPUs
        return [("torch-cpu", torch.from_numpy, lambda: None, lambda t: t.numpy(),
                 lambda h, like: torch.from_numpy(h.copy()))]
    out = [("torch-cuda", lambda a: torch.from_numpy(a).cuda(), torch.cuda.synchronize,
            lambda t: t.cpu().numpy(), lambda h, like: torch.from_numpy(h).to(like.device))]
    try:
        import cupy
        if cupy.cuda.runtime.getDeviceCount() > 0:
            sync = cupy.cuda.Device().synchronize
            out.append(("cupy", cupy.asarray, sync, cupy.asnumpy,
                        lambda h, like: cupy.asarray(h)))
    except Exception:  # CuPy missing or without a GPU
        pass
    return out


def timed(fn, iters, sync):
    sync()
    MPI.COMM_WORLD.Barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    sync()
    return (time.perf_counter() - t0) / iters


def main():
    import torch
    comm = MPI.COMM_WORLD
    me, n = spmd_index(), spmd_size()
    gpu = torch.cuda.is_available()
    if gpu:
        torch.cuda.set_device((me - 1) % torch.cuda.device_count())
    right, left = me % n + 1, (me - 2) % n + 1
    if me == 1:
        print(f"{n} workers, {torch.cuda.get_device_name() if gpu else 'no GPU'}, "
              f"{MPI.Get_library_version().splitlines()[0].strip()}")
        print(f"{'family':>10} {'call':>10} {'bytes':>9} {'spmdlab us':>11} {'raw us':>10} "
              f"{'ratio':>6}")
    for name, make, sync, to_host, to_device in families():
        for nbytes in SIZES:
            host = np.full(nbytes // 4, float(me), np.float32)
            x = make(host)
            out = np.empty_like(host)
            iters = int(max(3, min(200, 2e8 / max(nbytes, 1) / 50)))

            def raw_plus():
                h = to_host(x)
                comm.Allreduce(h, out)
                return to_device(out, x)

            def raw_bcast():
                h = to_host(x) if me == 1 else out
                comm.Bcast(h, root=0)
                return to_device(h, x)

            def raw_ring():
                h = to_host(x)
                comm.Sendrecv(h, dest=right - 1, recvbuf=out, source=left - 1)
                return to_device(out, x)

            cases = [("plus", lambda: spmd_plus(x), raw_plus),
                     ("broadcast", lambda: spmd_broadcast(1, x if me == 1 else None),
                      raw_bcast),
                     ("ring", lambda: spmd_send_receive(right, left, x), raw_ring)]
            for call, ours, raw in cases:
                np.testing.assert_array_equal(to_host(ours()), to_host(raw()))
                t_ours, t_raw = [], []
                for r in range(ROUNDS):
                    pair = [(ours, t_ours), (raw, t_raw)]
                    for fn, times in (pair if r % 2 == 0 else pair[::-1]):
                        times.append(timed(fn, iters, sync))
                a, b = statistics.median(t_ours) * 1e6, statistics.median(t_raw) * 1e6
                if me == 1:
                    print(f"{name:>10} {call:>10} {nbytes:>9} {a:>11.1f} {b:>10.1f} "
                          f"{a / b:>6.2f}", flush=True)


if __name__ == "__main__":
    main()
