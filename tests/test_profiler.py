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


def test_mpiprofile_takes_matlabs_other_forms(capsys):
    # mpiprofile clear and mpiprofile status were "the action must be ...", MATLAB's
    # options of on (mpiprofile('on', '-messagedetail', 'simplified')) a TypeError, and
    # mpiprofile('viewer', stats) "Profile.save: 'path' must be a str" on worker 1 while
    # the others, whose stats are None, waited in the viewer's collectives
    mpiprofile("on", "-messagedetail", "simplified", "-nohistory", "-historysize", 1e6)
    assert mpiprofile("status") == {"ProfilerStatus": "on"}
    spmd_plus(1.0)
    stats = mpiprofile("info")
    assert mpiprofile("viewer", stats) is stats  # the table of stats: no collective
    if spmd_index() == 1:
        assert "spmdlab profile: " in capsys.readouterr().out
    mpiprofile("clear")
    spmd_barrier()
    info = mpiprofile("info")
    if spmd_index() == 1:
        assert info["collectives"] == [1] * spmd_size()  # the barrier alone
    mpiprofile("off")
    assert mpiprofile("status") == {"ProfilerStatus": "off"}
    with pytest.raises(spmdlab.SpmdValueError, match="mpiprofile: unknown option '-foo' of "
                       "'on'; MATLAB's are -messagedetail, -historysize, -history"):
        mpiprofile("on", "-foo")
    with pytest.raises(spmdlab.SpmdValueError, match="mpiprofile: the option "
                       "'-messagedetail' needs 'default' or 'simplified' or 'off' after it "
                       r"\(got None\)"):
        mpiprofile("on", "-messagedetail")
    with pytest.raises(spmdlab.SpmdValueError, match=r"mpiprofile: 'off' takes no more "
                       r"arguments \(got 1\)"):
        mpiprofile("off", 1)
    assert mpiprofile("status") == {"ProfilerStatus": "off"}


def test_blame_in_a_region_goes_to_the_late_worker():
    """Worker 3 arrives late in spmd(3) after an spmd(2) it was not in: the blame is its.

    Collectives were matched across workers by the scope's place in each worker's own
    list of scopes, which differs where a worker is outside a region; worker 2 got the
    blame. At 4 workers the late one is a member of both regions, so the spmd(3)
    collective is matched with the right one only by a key every worker agrees on."""
    if spmd_size() < 3:
        pytest.skip("needs a region that leaves a worker out")
    spmd_barrier()
    with spmdlab.profile() as prof:
        for _ in spmdlab.spmd(2):
            spmd_plus(1.0)
        for _ in spmdlab.spmd(3):
            if spmd_index() == 3:
                time.sleep(0.3)
            spmd_plus(1.0)
    summary = prof.summary()
    if spmd_index() == 1:
        blame = summary["made_others_wait"]
        assert blame[2] > 0.2, blame
        assert blame[1] < 0.1, blame


def test_a_profile_inside_another_leaves_the_outer_one_recording():
    spmd_barrier()
    with spmdlab.profile() as outer:
        for _ in range(3):
            spmd_plus(1.0)
        with spmdlab.profile() as inner:
            for _ in range(3):
                spmd_plus(1.0)
        assert _agree.HOOKED  # the outer one still records
        for _ in range(3):
            spmd_plus(1.0)
    assert not _agree.HOOKED
    assert len(inner.records) == 3 and len(outer.records) == 9
    spmd_plus(1.0)  # neither records this
    inner_summary, outer_summary = inner.summary(), outer.summary()
    if spmd_index() == 1:
        assert inner_summary["collectives"] == [3] * spmd_size()
        assert outer_summary["collectives"] == [9] * spmd_size()
