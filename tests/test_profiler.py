"""spmdlab.profile and MATLAB's mpiprofile, at any worker count."""

import json
import os
import time

import numpy as np
import pytest
from conftest import line_of

import spmdlab
from spmdlab import _agree, spmd_barrier, spmd_index, spmd_plus, spmd_size
from spmdlab.matlab import mpiprofile

pytestmark = pytest.mark.mpi


def _line_of(marker):
    return line_of(__file__, marker)


def test_the_profile_counts_calls_per_site_and_names_the_slow_worker(tmp_path):
    slow = spmd_size()
    spmd_barrier()
    with spmdlab.profile() as prof:
        for _ in range(10):
            if spmd_index() == slow:
                time.sleep(0.03)
            spmd_plus(np.ones(100))  # site: gradients
            spmd_plus(1.0)  # site: loss
    assert not _agree.HOOKED  # off again: the fast paths test one flag
    spmd_plus(1.0)  # not recorded
    summary = prof.report()
    if spmd_index() != 1:
        assert summary is None
        return
    sites = {e["site"]: e for e in summary["sites"]}
    here = "tests/test_profiler.py"
    grads = sites[f"{here}:{_line_of('# site: gradients')}"]
    loss = sites[f"{here}:{_line_of('# site: loss')}"]
    assert grads["call"] == "spmd_plus" and grads["calls"] == [10] * spmd_size()
    assert grads["bytes"] == [10 * 800] * spmd_size()
    assert loss["calls"] == [10] * spmd_size() and loss["bytes"] == [10 * 8] * spmd_size()
    assert summary["collectives"] == [20] * spmd_size()
    if spmd_size() > 1:
        blame = summary["made_others_wait"]
        assert blame.index(max(blame)) == slow - 1
        assert blame[slow - 1] > 0.2  # 10 sleeps of 30 ms, less what scheduling hides
        assert summary["arrived_last"][slow - 1] >= 8


def test_save_writes_json_and_png_on_worker_1(tmp_path):
    path = str(tmp_path / "prof") if spmd_index() == 1 else None
    with spmdlab.profile() as prof:
        spmd_plus(np.arange(4.0))
    written = prof.save(spmdlab.spmd_broadcast(1, path))
    if spmd_index() == 1:
        with open(written[0]) as f:
            data = json.load(f)
        assert data["workers"] == spmd_size() and data["collectives"] == [1] * spmd_size()
        if len(written) > 1:
            assert os.path.getsize(written[1]) > 1000
    else:
        assert written is None


def test_mpiprofile_on_off_info_viewer(tmp_path):
    mpiprofile("on")
    spmd_plus(2.0)
    mpiprofile("off")
    spmd_plus(3.0)  # off: not recorded
    mpiprofile("resume")
    spmd_barrier()
    info = mpiprofile("info")  # collective; its own gather is not recorded
    if spmd_index() == 1:
        assert info["collectives"] == [2] * spmd_size()
        assert sorted(e["call"] for e in info["sites"]) == ["spmd_barrier", "spmd_plus"]
    else:
        assert info is None
    path = spmdlab.spmd_broadcast(1, str(tmp_path / "view"))
    mpiprofile("reset")
    summary = mpiprofile("viewer", path=path)
    if spmd_index() == 1:
        assert summary["collectives"] == [0] * spmd_size()
        assert os.path.exists(path + ".json")
    assert not _agree.HOOKED
    with pytest.raises(spmdlab.SpmdValueError, match="mpiprofile: the action must be"):
        mpiprofile("sideways")
