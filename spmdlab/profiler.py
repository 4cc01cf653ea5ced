"""A profiler of collectives: MATLAB's ``mpiprofile``.

::

    with spmdlab.profile() as prof:          # every worker
        train()
    prof.report()                            # collective: the table on worker 1
    prof.save("profile")                     # collective: profile.json (+ profile.png)

Per call site (``file:line`` of the user's code) and per worker it records the calls,
the time spent waiting for the other workers to arrive (the agreement step every
collective starts with: it completes when the last worker arrives), the time spent
moving the data (the collective's MPI waits) and the bytes this worker contributed. The
worker that arrives last at a collective is the one the others waited for: the report
says, per worker, how long it made the others wait ("worker 3 made the others wait
4.20 s over 1,200 collectives": the sum over those collectives of the longest wait of
another worker, counting the collectives where that wait passed 1 ms). Waits are measured on each worker's own clock, so nodes need no
synchronised clocks.

Off by default, and then free: the collectives test one flag. On, a collective costs a
few microseconds more (two clock reads and the call-site lookup).
"""

from __future__ import annotations

import json
import os
import time
from typing import IO, Any, Dict, List, Optional

from . import _agree, _wait, _world
from .errors import SpmdTypeError

__all__ = ["Profile", "profile"]

_LATE = 0.001  # a collective counts as one a worker made the others wait when they waited longer
_running: List["Profile"] = []  # the profiles recording now, outermost first


class _Recorder:
    """What the collectives call while any profile runs: it records in every running
    profile, so a profile started inside another leaves the outer one recording."""

    @staticmethod
    def collective(sequence, call, site, wait, nbytes):
        for prof in _running:
            prof.collective(sequence, call, site, wait, nbytes)

    @staticmethod
    def data(seconds):
        for prof in _running:
            prof.data(seconds)


_RECORDER = _Recorder()


class Profile:
    """What one worker recorded between ``start()`` and ``stop()``.

    Examples
    --------
    >>> with profile() as prof:
    ...     total = spmd_plus(np.ones(1000))
    >>> summary = prof.summary()               # collective; a dict on worker 1
    >>> summary["workers"], summary["collectives"]
    (1, [1])

    MATLAB
    ------
    ``mpiprofile on ... mpiprofile info``
    """

    def __init__(self) -> None:
        # [sequence, call, site, wait s, data s, bytes] per collective
        self.records: List[list] = []
        self.started: Optional[float] = None
        self.stopped: Optional[float] = None
        self._scope = None

    # -- recording (called by the collectives while this profile is active) ------------

    def start(self) -> Profile:
        """Start recording this worker's collectives (from here on). Profiles nest: one
        started inside another records what runs while it does, and the outer one
        records everything."""
        self._scope = _world.current()
        self.started = time.perf_counter()
        self.stopped = None
        if self not in _running:
            _running.append(self)
        _agree.PROFILE = _wait.PROFILE = _RECORDER
        _agree.hooks_changed()
        return self

    def stop(self) -> Profile:
        """Stop recording; what was recorded stays. Other running profiles go on."""
        if self in _running:
            _running.remove(self)
            if not _running:
                _agree.PROFILE = _wait.PROFILE = None
                _agree.hooks_changed()
        self.stopped = time.perf_counter()
        return self

    def collective(self, sequence: int, call: str, site: str, wait: float,
                   nbytes: int) -> None:
        """Record one collective (called by the collectives while this profile runs)."""
        self.records.append([sequence, call, site, wait, 0.0, nbytes])

    def data(self, seconds: float) -> None:
        """Add the data-moving time of the last collective recorded."""
        if self.records:
            self.records[-1][4] += seconds

    def __enter__(self) -> Profile:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- results (collective) ------------------------------------------------------------

    def gather(self) -> Optional[List[Dict[str, Any]]]:
        """Collective: every worker's records, on worker 1 (None elsewhere)."""
        from .collectives import spmd_cat

        elapsed = ((self.stopped or time.perf_counter()) - self.started
                   if self.started is not None else 0.0)
        mine = {"records": self.records, "elapsed": elapsed}
        everyone = spmd_cat([mine], destination=1)
        return everyone

    def summary(self) -> Optional[Dict[str, Any]]:
        """Collective: the profile as a dict on worker 1 (None on the others)."""
        everyone = self.gather()
        if everyone is None:
            return None
        return _summarise(everyone)

    def report(self, file: Optional[IO[str]] = None) -> Optional[Dict[str, Any]]:
        """Collective: print the table on worker 1; returns the summary there."""
        summary = self.summary()
        if summary is not None:
            print(format_report(summary), file=file, flush=True)
        return summary

    def save(self, path: str = "spmdlab-profile") -> Optional[List[str]]:
        """Collective: write ``path.json`` (and ``path.png`` with matplotlib) on worker 1;
        returns the paths written there."""
        if not isinstance(path, (str, os.PathLike)):  # (None wrote "None.json")
            raise SpmdTypeError(f"Profile.save ({_world.current().who()}): 'path' must be "
                                f"a str or a path (got {path!r} that is a "
                                f"{type(path).__name__})")
        summary = self.summary()
        if summary is None:
            return None
        from .training.files import write_atomic

        written = [f"{path}.json"]
        write_atomic(written[0], lambda f: f.write(json.dumps(summary, indent=1).encode()))
        try:
            import matplotlib
        except ImportError:
            return written
        matplotlib.use("Agg")
        written.append(_plot(summary, f"{path}.png"))
        return written


def profile() -> Profile:
    """A ``Profile`` to use as ``with spmdlab.profile() as prof:`` (every worker).

    Examples
    --------
    >>> with profile() as prof:
    ...     _ = spmd_cat(np.arange(4))
    >>> len(prof.records)
    1

    MATLAB
    ------
    ``mpiprofile on``, ``mpiprofile viewer``
    """
    return Profile()


def _summarise(everyone):
    """Per call site and per worker, and who made the others wait."""
    workers = len(everyone)
    sites = {}
    for k, mine in enumerate(everyone):
        for seq, call, site, wait, data, nbytes in mine["records"]:
            entry = sites.setdefault(f"{call} at {site}", {
                "call": call, "site": site, "calls": [0] * workers,
                "wait": [0.0] * workers, "data": [0.0] * workers,
                "bytes": [0] * workers})
            entry["calls"][k] += 1
            entry["wait"][k] += wait
            entry["data"][k] += data
            entry["bytes"][k] += nbytes
    # who the others waited for: collectives are matched by their sequence number
    by_seq = {}
    for k, mine in enumerate(everyone):
        for seq, _, _, wait, _, _ in mine["records"]:
            by_seq.setdefault(seq, {})[k] = wait
    blame = [0.0] * workers
    late = [0] * workers
    for waits in by_seq.values():
        if len(waits) < 2:
            continue
        last = min(waits, key=waits.get)  # it waited least: the others waited for it
        others = max(w for k, w in waits.items() if k != last)
        if others > _LATE:
            blame[last] += others
            late[last] += 1
    return {
        "workers": workers,
        "elapsed": [mine["elapsed"] for mine in everyone],
        "sites": sorted(sites.values(), key=lambda e: -sum(e["wait"]) - sum(e["data"])),
        "made_others_wait": blame, "arrived_last": late,
        "wait": [sum(r[3] for r in mine["records"]) for mine in everyone],
        "collectives": [len(mine["records"]) for mine in everyone],
    }


def _bytes(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def format_report(summary):
    """The table ``report`` prints."""
    n = summary["workers"]
    lines = [f"spmdlab profile: {n} worker(s), "
             f"{max(summary['collectives'] or [0]):,} collectives, "
             f"{max(summary['elapsed'] or [0]):.2f} s profiled", ""]
    head = f"{'call site':44} {'calls':>7} {'wait s (per worker)':>28} {'data s':>8} {'bytes':>10}"
    lines.append(head)
    for entry in summary["sites"][:20]:
        name = f"{entry['call']} at {entry['site']}"
        if len(name) > 44:
            name = "..." + name[-41:]
        waits = " ".join(f"{w:.2f}" for w in entry["wait"][:8])
        if n > 8:
            waits += " ..."
        lines.append(f"{name:44} {max(entry['calls']):>7,} {waits:>28} "
                     f"{max(entry['data']):>8.3f} {_bytes(max(entry['bytes'])):>10}")
    lines.append("")
    for k in range(n):
        lines.append(f"worker {k + 1}: waited {summary['wait'][k]:.2f} s in all; made the "
                     f"others wait {summary['made_others_wait'][k]:.2f} s over "
                     f"{summary['arrived_last'][k]:,} collectives")
    return "\n".join(lines)


def _plot(summary, path):
    import matplotlib.pyplot as plt

    from .training.files import write_atomic

    n = summary["workers"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    xs = range(1, n + 1)
    left.bar(xs, summary["wait"], label="waited for others")
    left.bar(xs, summary["made_others_wait"], width=0.4, label="made the others wait")
    left.set_xlabel("worker")
    left.set_ylabel("seconds")
    left.set_xticks(list(xs))
    left.set_title("waiting, per worker")
    # room above the tallest bar for the legend, which would otherwise cover a bar
    peak = max(list(summary["wait"]) + list(summary["made_others_wait"]) + [0.0])
    if peak > 0:
        left.set_ylim(0, peak * 1.3)
    left.legend(loc="upper center", ncol=2, fontsize="small")
    top = summary["sites"][:8][::-1]
    right.barh([f"{e['call']} at {e['site']}"[-40:] for e in top],
               [max(e["wait"]) + max(e["data"]) for e in top])
    right.set_xlabel("seconds (longest worker: wait + data)")
    right.set_title("top call sites")
    fig.suptitle(f"spmdlab profile: {n} workers, {max(summary['collectives'] or [0]):,} "
                 f"collectives")
    fig.tight_layout()
    write_atomic(path, lambda f: fig.savefig(f, format="png", dpi=100))
    plt.close(fig)
    return path
