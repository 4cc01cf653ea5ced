"""GPU buffers: CUDA-aware detection, host staging and direct paths give CPU's answers.

The CUDA tests run where torch sees a GPU (and CuPy where it is installed); elsewhere
they skip. The detection logic is tested everywhere.
"""

import numpy as np
import pytest

from spmdlab import _backends, _env, spmd_broadcast, spmd_cat, spmd_index, spmd_plus, \
    spmd_size

from conftest import HAVE_CUDA, HAVE_CUPY, cupy, torch

cuda = pytest.mark.skipif(not HAVE_CUDA, reason="no CUDA GPU visible to torch")


@pytest.mark.parametrize("raw, value", [("auto", None), ("1", True), ("yes", True),
                                        ("0", False), ("off", False)])
def test_cuda_aware_setting_parses(raw, value):
    assert _env.tristate(raw) is value


def test_cuda_aware_setting_rejects_garbage(monkeypatch):
    monkeypatch.setenv("SPMDLAB_CUDA_AWARE", "maybe")
    with pytest.raises(ValueError, match="SPMDLAB_CUDA_AWARE must be one of auto, 1, 0"):
        _env.get("CUDA_AWARE", None, cast=_env.tristate)


def test_cuda_aware_is_a_bool_and_override_wins(monkeypatch):
    assert isinstance(_backends.cuda_aware(), bool)
    monkeypatch.setattr(_env, "CUDA_AWARE", True)
    assert _backends.cuda_aware() is True
    monkeypatch.setattr(_env, "CUDA_AWARE", False)
    assert _backends.cuda_aware() is False


@cuda
@pytest.mark.mpi
@pytest.mark.parametrize("aware", [False, True], ids=["staged", "direct"])
def test_torch_cuda_same_answer_as_cpu(monkeypatch, aware):
    if aware and not _backends._query_cuda_support():
        pytest.skip("this MPI library is not CUDA-aware")
    monkeypatch.setattr(_env, "CUDA_AWARE", aware)
    torch.cuda.set_device(0)
    rng = np.random.default_rng(spmd_index())
    host = rng.standard_normal((257, 33)).astype(np.float32)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):  # written on a side stream: spmdlab must wait for it
        x = torch.from_numpy(host).cuda() * 2 + 1
        grads = {"a": x, "b": x[:, :5].contiguous().double(), "n": 3}
        on_gpu = spmd_plus(grads)
    on_cpu = spmd_plus({"a": torch.from_numpy(host) * 2 + 1,
                        "b": (torch.from_numpy(host) * 2 + 1)[:, :5].double(), "n": 3})
    assert on_gpu["a"].is_cuda and on_gpu["a"].dtype == torch.float32
    assert on_gpu["b"].is_cuda and on_gpu["b"].dtype == torch.float64
    assert torch.equal(on_gpu["a"].cpu(), on_cpu["a"])
    assert torch.equal(on_gpu["b"].cpu(), on_cpu["b"])
    assert on_gpu["n"] == 3 * spmd_size()


@cuda
@pytest.mark.mpi
def test_torch_cuda_cat_and_broadcast_keep_device():
    x = torch.full((spmd_index(), 2), float(spmd_index()), device="cuda")
    cat = spmd_cat(x)
    assert cat.is_cuda and cat.shape[0] == spmd_size() * (spmd_size() + 1) // 2
    b = spmd_broadcast(1, x if spmd_index() == 1 else None)
    assert b.is_cuda and torch.equal(b.cpu(), torch.ones(1, 2))


@pytest.mark.skipif(not HAVE_CUPY, reason="CuPy with a GPU is not available")
@pytest.mark.mpi
def test_cupy_same_answer_as_numpy():
    host = np.arange(1000, dtype=np.float32) * spmd_index()
    result = spmd_plus(cupy.asarray(host))
    assert isinstance(result, cupy.ndarray)
    np.testing.assert_array_equal(cupy.asnumpy(result), spmd_plus(host))


def _torch_values(k):
    """GPU tensors of every shape a message takes: one past a receiver's inbox, strided,
    small, bfloat16, complex with torch's conjugate bit, 0-d."""
    base = torch.arange(3 * 12000, dtype=torch.float32, device="cuda").reshape(3, -1) + k
    return [base, base[:, ::2], base[:2, :5], base.to(torch.bfloat16),
            (base[:, :6000] * 1j).conj(), base[1, 2]]


@cuda
@pytest.mark.mpi
def test_torch_cuda_messages_arrive_whole_on_the_receivers_gpu():
    from spmdlab import spmd_send_receive
    me, n = spmd_index(), spmd_size()
    right, left = me % n + 1, (me - 2) % n + 1
    for sent, want in zip(_torch_values(me), _torch_values(left)):
        got = spmd_send_receive(right, left, sent)
        assert got.is_cuda and got.device == torch.device("cuda", torch.cuda.current_device())
        assert got.dtype == sent.dtype and got.shape == sent.shape
        assert torch.equal(got.cpu(), want.cpu())
    for sent, want in zip(_torch_values(me), _torch_values(1)):
        got = spmd_broadcast(1, sent if me == 1 else None)
        assert got.is_cuda and got.dtype == want.dtype and torch.equal(got.cpu(), want.cpu())
        if me == 1:
            got.fill_(-1)  # the root's result is its own copy
            assert not torch.equal(sent.cpu(), got.cpu())
    # an nn.Parameter arrives as one, on this worker's GPU, requiring grad
    weight = torch.nn.Parameter(torch.full((3,), float(me), device="cuda"))
    got = spmd_send_receive(right, left, {"w": weight})["w"]
    assert isinstance(got, torch.nn.Parameter) and got.requires_grad and got.is_cuda
    assert got.device == torch.device("cuda", torch.cuda.current_device())
    assert torch.equal(got.detach().cpu(), torch.full((3,), float(left)))


@cuda
@pytest.mark.mpi
@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
def test_cuda_tensors_numpy_has_no_dtype_for_travel_to_the_receivers_gpu():
    # float8 and complex32 go as their bytes (no numpy dtype); 0-d bfloat16 stays 0-d
    from spmdlab import SpmdTypeError, spmd_send_receive
    me, n = spmd_index(), spmd_size()
    here = torch.device("cuda", torch.cuda.current_device())
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("needs torch with float8")
    for dtype, wide in ((torch.float8_e4m3fn, torch.float32),
                        (torch.complex32, torch.complex64), (torch.bfloat16, torch.float32)):
        x = torch.full((2, 3), float(me), device="cuda").to(dtype)
        got = spmd_broadcast(1, x if me == 1 else None)
        assert got.device == here and got.dtype == dtype and got.shape == (2, 3)
        assert torch.equal(got.to(wide).cpu(), torch.ones(2, 3, dtype=wide))
        got = spmd_send_receive(me % n + 1, (me - 2) % n + 1, {"w": x, "s": x[0, 0]})
        left = float((me - 2) % n + 1)
        assert got["w"].device == here and got["w"].dtype == dtype
        assert got["s"].shape == () and got["s"].device == here
        assert torch.equal(got["w"].to(wide).cpu(), torch.full((2, 3), left, dtype=wide))
        with pytest.raises(SpmdTypeError, match=str(dtype).split(".")[-1]):
            spmd_plus(x)
    assert spmd_plus(1) == n


@pytest.mark.skipif(not HAVE_CUPY, reason="CuPy with a GPU is not available")
@pytest.mark.mpi
def test_cupy_messages_arrive_whole():
    from spmdlab import spmd_send_receive
    me, n = spmd_index(), spmd_size()
    right, left = me % n + 1, (me - 2) % n + 1

    def values(k):
        base = cupy.arange(3 * 7000, dtype=cupy.float64).reshape(3, 7000) + k
        return [base, base[:, ::2], base[:2, :5].astype(cupy.int32), base[1, 2]]

    for sent, want in zip(values(me), values(left)):
        got = spmd_send_receive(right, left, sent)
        assert isinstance(got, cupy.ndarray) and got.dtype == sent.dtype
        np.testing.assert_array_equal(cupy.asnumpy(got), cupy.asnumpy(want))
    for sent, want in zip(values(me), values(1)):
        got = spmd_broadcast(1, sent if me == 1 else None)
        assert isinstance(got, cupy.ndarray)
        np.testing.assert_array_equal(cupy.asnumpy(got), cupy.asnumpy(want))


def test_a_messages_gpu_value_lands_on_the_workers_gpu(monkeypatch):
    # select_gpu's choice holds in every thread (the queues' receiver thread too); a
    # local value's device is its own; without select_gpu, the current device
    if torch is None:
        pytest.skip("needs torch")
    moved = []
    monkeypatch.setattr(torch.Tensor, "to", lambda self, device: moved.append(device) or self)
    wrap = _backends.FAMILIES["torch"].wrap
    monkeypatch.setattr(_backends, "WORKER_GPU", None)
    wrap(np.ones(3), ("torch", "cuda"))
    monkeypatch.setattr(_backends, "WORKER_GPU", 2)
    wrap(np.ones(3), ("torch", "cuda"))
    wrap(np.ones(3), ("torch", "cuda:1"))
    wrap(np.ones(3), ("torch", None))
    assert moved == ["cuda", torch.device("cuda", 2), "cuda:1"]


def test_a_device_copy_that_fails_is_a_named_type_error(monkeypatch):
    # a broadcast's source raises SpmdTypeError, which every worker then raises: a raw
    # error from the device copy would leave the others waiting in the broadcast
    from spmdlab import SpmdTypeError, _pack

    if torch is None:
        pytest.skip("needs torch")
    t = torch.zeros(3, requires_grad=True)  # (not a plain CPU tensor's own shortcut)
    monkeypatch.setattr(_pack, "classify", lambda x: _backends.Leaf(
        x, "torch", np.dtype(np.float32), (3,), "cuda:0"))

    def broken(leaf):
        raise RuntimeError("CUDA error: an illegal memory access")

    monkeypatch.setattr(_pack, "_device_message", broken)
    with pytest.raises(SpmdTypeError, match="spmd_broadcast .*copying the torch value from "
                                            "its device failed: RuntimeError: CUDA error"):
        _pack.encode(t, lambda: "spmd_broadcast (worker 1 of 1)")
