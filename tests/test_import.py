"""The public API is pinned: adding or removing a name is a deliberate change."""

import pytest

import spmdlab
import spmdlab.matlab


def test_public_names():
    assert spmdlab.__all__ == sorted(spmdlab.__all__)
    assert spmdlab.__all__ == [
        "CodistributedArray", "Codistributor", "Composite", "DataQueue", "PollableDataQueue",
        "Pool", "Profile", "QueueSet", "SpmdDeadlockError", "SpmdError", "SpmdIndexError",
        "SpmdMismatchError", "SpmdPeerError", "SpmdTimeoutError", "SpmdTypeError",
        "SpmdValueError",
        "current_pool", "distribute", "drange", "from_local", "parfor", "profile", "spmd",
        "spmd_barrier", "spmd_broadcast", "spmd_cat", "spmd_index", "spmd_plus",
        "spmd_probe", "spmd_receive", "spmd_reduce", "spmd_send", "spmd_send_receive",
        "spmd_size", "start_pool",
    ]
    for name in spmdlab.__all__:
        assert hasattr(spmdlab, name)


def test_matlab_names():
    expected = {"Composite", "spmdIndex", "spmdSize", "spmdPlus", "spmdCat", "spmdReduce",
                "spmdBroadcast", "spmdSend", "spmdReceive", "spmdSendReceive",
                "spmdProbe", "spmdBarrier", "labindex", "numlabs", "gplus", "gcat", "gop",
                "labBroadcast", "labSend", "labReceive", "labSendReceive", "labProbe",
                "labBarrier", "mpiprofile", "spmdReceiveStatus", "spmdProbeStatus",
                "labReceiveStatus", "labProbeStatus", "codistributed", "codistributor",
                "codistributor1d", "distributed", "drange", "eye", "gather",
                "getCodistributor", "getLocalPart", "globalIndices", "iscodistributed",
                "isdistributed", "ones", "rand", "randi", "randn", "redistribute", "spmd", "zeros",
                "parpool", "gcp", "delete", "size", "ndims", "numel", "reshape", "mldivide",
                "length", "isempty", "conv2", "filter2", "sortrows", "isreplicated"}
    assert set(spmdlab.matlab.__all__) == expected
    for name in expected:
        assert callable(getattr(spmdlab.matlab, name))
    # MATLAB's max and min are there by name, but import * keeps Python's
    assert spmdlab.matlab.max.__name__ == "max" and spmdlab.matlab.min.__name__ == "min"
    space: dict = {}
    exec("from spmdlab.matlab import *", space)
    assert "max" not in space and "min" not in space


def test_pool_names():
    import spmdlab.pool

    assert spmdlab.pool.__all__ == ["Pool", "Composite", "Distributed", "start_pool",
                                    "current_pool", "parpool", "gcp"]
    for name in spmdlab.pool.__all__:
        assert hasattr(spmdlab.pool, name)


@pytest.mark.mpi_skip
@pytest.mark.parametrize("slurm, started", [
    ({}, False),  # a prompt, a notebook, a script run with plain python
    # salloc's shell on a node (LaunchParameters=use_interactive_step), as Slurm 22.05
    # sets it: a prompt where a pool's client runs
    ({"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "4294967290", "SLURM_PROCID": "0",
      "SLURM_MPI_TYPE": "none"}, False),
    ({"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_PROCID": "0"}, True),  # srun's task
])
def test_importing_spmdlab_starts_no_mpi(slurm, started):
    # a pool's client imports spmdlab and must never start MPI; a worker starts it on
    # its first call (or at import when launched by mpiexec, srun)
    import subprocess
    import sys

    code = ("import sys, spmdlab, spmdlab.matlab, spmdlab.darray, spmdlab.pool; "
            "print('mpi4py.MPI' in sys.modules)")
    env = {k: v for k, v in __import__("os").environ.items()
           if not k.startswith(("PMI_", "PMIX_", "OMPI_", "SLURM_", "MPI_LOCAL"))}
    env.update(slurm)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=120)
    assert out.stdout.strip() == str(started), out.stdout + out.stderr


def test_darray_names():
    import spmdlab.darray

    assert spmdlab.darray.__all__ == sorted(spmdlab.darray.__all__)
    assert spmdlab.darray.__all__ == [
        "CodistributedArray", "Codistributor", "arange", "default_partition", "distribute",
        "drange", "empty", "eye", "from_local", "full", "ones", "rand", "randn", "zeros",
    ]


def test_errors_subclass_builtins():
    assert issubclass(spmdlab.SpmdMismatchError, ValueError)
    assert issubclass(spmdlab.SpmdIndexError, IndexError)
    assert issubclass(spmdlab.SpmdTypeError, TypeError)
    assert issubclass(spmdlab.SpmdValueError, ValueError)
    assert issubclass(spmdlab.SpmdPeerError, RuntimeError)
    assert issubclass(spmdlab.SpmdTimeoutError, TimeoutError)
    for name in spmdlab.__all__:
        if name.startswith("Spmd"):
            assert issubclass(getattr(spmdlab, name), spmdlab.SpmdError)


@pytest.mark.mpi_skip
def test_single_process_collectives_return_their_input():
    # plain `pytest` is one worker: collectives are the identity
    assert spmdlab.spmd_index() == 1 and spmdlab.spmd_size() == 1
    assert spmdlab.spmd_plus(2.5) == 2.5
    assert spmdlab.spmd_cat(3).tolist() == [3]
    assert spmdlab.spmd_broadcast(1, {"a": 1}) == {"a": 1}


def test_training_names():
    import spmdlab.training

    assert spmdlab.training.__all__ == sorted(spmdlab.training.__all__)
    assert spmdlab.training.__all__ == [
        "ArrayDatastore", "AugmentedImageDatastore", "Datastore", "ImageDatastore",
        "MiniBatchQueue", "TrainingInfo", "TrainingOptions", "TrainingProgressMonitor",
        "adam_update", "aggregate_gradients", "aggregate_state", "aggregate_state_values",
        "can_use_gpu", "count_each_label", "dlupdate", "gpu_device_count",
        "minibatch_predict", "on_each_node", "onehotencode", "partition",
        "population_statistics", "read_all", "rmsprop_update", "scores2label", "select_gpu",
        "sgdm_update", "split_each_label", "training_options", "trainnet", "weighted_sum",
        "worker_mini_batch_sizes",
    ]


@pytest.mark.mpi_skip  # starts a Python of its own
def test_core_never_imports_training():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", "import sys, spmdlab; "
                          "print('spmdlab.training' in sys.modules, 'torch' in sys.modules)"],
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["False", "False"], out.stderr


@pytest.mark.mpi_skip  # a plain process of its own
@pytest.mark.parametrize("name, value", [("TIMEOUT", "nan"), ("TIMEOUT", "-1"),
                                         ("TIMEOUT", "0"), ("STALL_WARNING", "-1"),
                                         ("STALL_WARNING", "nan"), ("INLINE_BYTES", "-8"),
                                         ("SHM_BYTES", "lots"), ("TIMEOUT", "soon"),
                                         ("WATCHDOG", "maybe"), ("WATCHDOG", "auto"),
                                         ("LABEL_OUTPUT", "2"), ("ABORT_ON_ERROR", "auto")])
def test_a_setting_outside_its_range_is_refused(name, value):
    import os
    import subprocess
    import sys

    env = dict(os.environ, **{f"SPMDLAB_{name}": value})
    out = subprocess.run([sys.executable, "-c", "import spmdlab"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert f"SPMDLAB_{name} must be" in out.stderr and repr(value) in out.stderr, out.stderr
    # spmdlab's own class (a ValueError), as every refused input is, not a bare ValueError
    assert f"spmdlab.errors.SpmdValueError: SPMDLAB_{name} must be" in out.stderr, out.stderr
    # the message names the values the guide's table allows (on/off: no "auto")
    on_off = name in ("WATCHDOG", "LABEL_OUTPUT", "ABORT_ON_ERROR")
    assert ("must be 1 or 0 (also true/false" in out.stderr) == on_off, out.stderr
