"""The interactive pool, used as a person uses it: a script run with plain ``python``, a
Python prompt on a pseudo-terminal with Ctrl-C, and a real Jupyter kernel with its
interrupt button, at pools of 1, 2 and 4 workers and at 2x2 (MPICH's two simulated
nodes). Every client here is a process of its own: a pool makes its process a client
for good, which this test process must not become.
"""

import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import is_open_mpi

pytestmark = pytest.mark.skipif(
    "--with-mpi" in sys.argv, reason="a pool's client runs without mpiexec")

pexpect = pytest.importorskip("pexpect")
pytest.importorskip("cloudpickle")

LAYOUTS = ["1", "2", "4", "2x2"]


def layout_env(layout):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("MPIR_CVAR_NUM_CLIQUES", None)
    if layout == "2x2":
        if is_open_mpi():
            pytest.skip("simulated nodes need MPICH")
        env["MPIR_CVAR_NUM_CLIQUES"] = "2"
    return env, 4 if layout == "2x2" else int(layout)


def client_side():
    """Skip under Open MPI a test of what the client does with what the workers sent
    (Composites, cells, the client's checks): that does not depend on the MPI, and it
    runs under MPICH (CI time, see scripts/test.sh). Launching, stopping and the faults
    of a pool run under both."""
    if is_open_mpi():
        pytest.skip("the client's side of a pool is tested under MPICH (CI time)")


def run_client(source, env, timeout=120):
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(source)], env=env,
                          capture_output=True, text=True, timeout=timeout)
    return proc


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie has ended
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def wait_gone(pids, seconds=15):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(alive(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_script_drives_a_pool(layout):
    env, n = layout_env(layout)
    proc = run_client(f"""
        import gc, sys
        import numpy as np
        import spmdlab
        from spmdlab import *
        from spmdlab.matlab import codistributed, distributed, gather, isdistributed
        from spmdlab.matlab import ndims, numel, size
        n = {n}
        pool = spmdlab.start_pool(n)
        assert "mpi4py.MPI" not in sys.modules, "the client started MPI"
        assert pool.size == n and pool.NumWorkers == n and len(pool.pids) == n

        # a function on every worker: a Composite of its results
        c = pool.spmd(lambda: spmd_plus(spmd_index()) * 100 + spmd_index())
        total = n * (n + 1) // 2
        assert c[:] == [total * 100 + k for k in range(1, n + 1)], c[:]
        assert c[n] == total * 100 + n and len(c) == n and c.exist() == [True] * n
        assert "c[k]" in repr(c)
        c[1] = "set by the client"
        assert c[1] == "set by the client"

        # a cell: client variables go to the workers, assignments come back
        ns = {{"a": 7, "np": np}}
        pool.run_cell("x = a * spmd_index()\\nprint('x is', x)\\ny = spmd_cat(x)\\n"
                      "import os\\ndef f(): return 1\\n", ns)
        assert ns["x"][:] == [7 * k for k in range(1, n + 1)]
        assert list(ns["y"][1]) == [7 * k for k in range(1, n + 1)]
        assert "os" not in ns and "f" not in ns  # imports and definitions stay there
        # a Composite used in a cell is each worker's own element there
        pool.run_cell("z = x + 1", ns)
        assert ns["z"][:] == [7 * k + 1 for k in range(1, n + 1)]
        # and so is a Composite given to pool.spmd
        assert pool.spmd(lambda v: v + 2, ns["x"])[:] == [7 * k + 2 for k in range(1, n + 1)]
        # variables persist on the workers from one cell to the next
        pool.run_cell("w = x * 2", {{}})
        # spmd(m): the first m workers only
        m = max(1, n // 2)
        pool.run_cell("only = spmd_size()", ns, n=m)
        assert ns["only"].exist() == [k <= m for k in range(1, n + 1)]
        assert ns["only"][1] == m

        # an error on the last worker stops the others waiting in a collective
        def fails():
            if spmd_index() == spmd_size():
                raise ValueError("bad value on the last worker")
            spmd_plus(1)
        try:
            pool.spmd(fails)
        except SpmdError as exc:
            text = str(exc)
            assert f"worker {{n}} of {{n}} failed" in text, text
            assert "bad value on the last worker" in text and "in fails" in text, text
            assert isinstance(exc.__cause__, ValueError)
        else:
            raise AssertionError("no error")
        assert pool.spmd(lambda: spmd_plus(1))[:] == [n] * n  # the pool survives

        # a stop's signal handled after its block has ended (here: held back until the
        # next block) is dropped, never cutting short what comes next
        def holds_the_signal_back():
            import signal
            signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGINT])
            if spmd_index() == spmd_size():
                raise ValueError("stop the others")
            spmd_plus(1)
        try:
            pool.spmd(holds_the_signal_back)
        except SpmdError:
            pass
        def lets_it_go():
            import signal
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
            return spmd_plus(1)
        assert pool.spmd(lets_it_go)[:] == [n] * n
        # a KeyboardInterrupt raised by a block's own code on one worker stops the others
        def interrupts_itself():
            if spmd_index() == 1:
                raise KeyboardInterrupt()
            spmd_plus(1)
        try:
            pool.spmd(interrupts_itself)
        except KeyboardInterrupt as exc:
            assert "stopped on every worker" in str(exc), exc
            # named, as an error is (it said only "the block was stopped", as Ctrl-C)
            assert f"spmd: worker 1 of {n} raised KeyboardInterrupt" in str(exc), exc
        else:
            raise AssertionError("no KeyboardInterrupt")
        assert pool.spmd(lambda: spmd_plus(1))[:] == [n] * n

        # a client DataQueue: every item, while the block runs, in each worker's order
        q = DataQueue()
        got = []
        q.after_each(got.append)
        pool.spmd(lambda q: [q.send((spmd_index(), i)) for i in range(300)] and None, q)
        assert len(got) == 300 * n
        for k in range(1, n + 1):
            assert [i for w, i in got if w == k] == list(range(300))
        # a per-worker queue set made in a block carries a Stop from the client
        stops = pool.spmd(lambda: PollableDataQueue.per_worker())
        def wait_for_stop(qs):
            import time
            deadline = time.monotonic() + 30
            while qs.mine.poll(0.01) != "stop":
                assert time.monotonic() < deadline
            return spmd_plus(1)
        queues = stops[1]
        for k in range(1, n + 1):
            queues[k].send("stop")
        assert pool.spmd(wait_for_stop, stops[1])[:] == [n] * n

        # distributed arrays from the client
        X = np.arange(6.0 * n).reshape(2, 3 * n)
        D = distributed(X)
        assert isdistributed(D)
        assert (gather(D) == X).all()
        ns = {{"D": D}}
        pool.run_cell("s = float(D.sum())\\nE = D * 2", ns)
        assert ns["s"][:] == [X.sum()] * n
        assert (gather(ns["E"]) == 2 * X).all()
        assert list(size(D)) == [2, 3 * n] and numel(D) == 6 * n and ndims(D) == 2
        try:  # numpy would wrap the handle in an object array (np.sum(D) was D itself)
            np.asarray(D)
            raise AssertionError("np.asarray of a client's distributed array")
        except SpmdTypeError as exc:
            assert "gather(D)" in str(exc), exc
        # a codistributed array a block returns is distributed on the client, as MATLAB's
        R = pool.spmd(lambda: codistributed.ones(3, 2 * n))
        assert isdistributed(R) and list(size(R)) == [3, 2 * n] and (gather(R) == 1).all()
        try:  # made outside a block: refused, and the client stays the pool's client
            codistributed.ones(3)
            raise AssertionError("a codistributed array made on the client")
        except SpmdError as exc:
            assert "pool's client" in str(exc) and "ones" in str(exc), exc
        try:  # a collective too, named; MATLAB's client is worker 1 of 1
            spmd_plus(1.0)
            raise AssertionError("a collective on the client")
        except SpmdError as exc:
            assert str(exc).startswith("spmd_plus (the client)"), exc
        assert spmd_index() == 1 and spmd_size() == 1
        assert "mpi4py.MPI" not in sys.modules, "the client started MPI"
        assert (gather(D) == X).all()
        # the client computes with it, as MATLAB's does: on the workers
        E = 2 * D + 1
        assert isdistributed(E) and (gather(E) == 2 * X + 1).all()
        assert np.sum(D) == X.sum() and D.max() == X.max() and D[1, 2] == X[1, 2]
        assert (gather(np.sum(D, axis=1)) == X.sum(axis=1)).all()
        assert (gather(np.sin(D.T)) == np.sin(X.T)).all() and len(D) == 2
        assert (gather(D @ D.T) == X @ X.T).all() and (gather(D[:, 1:3]) == X[:, 1:3]).all()
        assert D.partition == (3,) * n and not hasattr(D, "local")  # each worker's own
        M, I = spmdlab.matlab.max(D, [], 2, nargout=2)
        assert (gather(M).ravel() == X.max(axis=1)).all() and (gather(I).ravel() == 3 * n).all()
        # conv2, filter2 and sortrows too (they refused: "gather(D) it first")
        K = np.array([[1.0, -2.0], [0.5, 3.0]])
        assert isdistributed(spmdlab.matlab.conv2(D, K, "same"))
        assert (gather(spmdlab.matlab.conv2(D, K)) == spmdlab.matlab.conv2(X, K)).all()
        assert (gather(spmdlab.matlab.filter2(K, D)) == spmdlab.matlab.filter2(K, X)).all()
        B, J = spmdlab.matlab.sortrows(-D, nargout=2)
        assert (gather(B) == -X[::-1]).all() and (gather(J).ravel() == [2, 1]).all()
        assert (gather(spmdlab.matlab.sortrows(D, -1)) == X[::-1]).all()
        F = distributed(X.copy())
        F[0, 0] = -1
        assert gather(F)[0, 0] == -1 and gather(D)[0, 0] == X[0, 0]
        # a one-element array is a number, as on the workers (float() was a TypeError)
        G = distributed(np.array([2.5]))
        assert float(G) == 2.5 and int(G) == 2 and complex(G) == 2.5
        assert (gather(round(D / 4, 1)) == np.round(X / 4, 1)).all()
        try:
            float(D)
            raise AssertionError("float of many elements")
        except SpmdError as exc:
            assert "distributed.__float__" in str(exc) and "one element" in str(exc), exc
        try:
            D + np.ones(7)
            raise AssertionError("shapes that do not broadcast")
        except SpmdError as exc:
            assert "(2, " in str(exc) and "(7,)" in str(exc), exc
        assert "mpi4py.MPI" not in sys.modules, "the client started MPI"

        # deleting the client's Composite frees the workers' values
        name = c._name
        del c
        gc.collect()
        ns = {{}}
        pool.run_cell(f"held = {{name!r}} in globals()", ns)
        assert ns["held"][:] == [False] * n
        pool.delete()
        print("OK")
    """, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.rstrip().endswith("OK"), proc.stdout
    for k in range(1, n + 1):
        assert f"Worker {k}: x is {7 * k}" in proc.stdout, proc.stdout


def _prompt(env):
    child = pexpect.spawn(sys.executable, ["-q"], env=env, encoding="utf-8", timeout=90)
    child.expect(">>> ")
    return child


def _do(child, line, timeout=90):
    child.sendline(line)
    child.expect(">>> ", timeout=timeout)
    return child.before


@pytest.mark.parametrize("layout", ["2", "2x2"])
def test_ctrl_c_at_a_prompt_stops_every_worker(layout):
    env, n = layout_env(layout)
    child = _prompt(env)
    try:
        _do(child, f"import spmdlab, time, signal; from spmdlab import *; "
                   f"pool = spmdlab.start_pool({n})")
        # wherever the workers are: a receive, a collective, a sleep, a loop of calls
        # (worker 2 sleeps: a receive from a worker that waits too is a deadlock, which
        # fails by itself in 2 s)
        for stuck in ["lambda: spmd_receive(2) if spmd_index() == 1 else time.sleep(300) "
                      "if spmd_index() == 2 else spmd_plus(1)",
                      "lambda: time.sleep(300)",
                      "lambda: [spmd_plus(1) for _ in range(10 ** 9)]"]:
            child.sendline(f"pool.spmd({stuck})")
            time.sleep(2)
            started = time.monotonic()
            child.sendintr()
            child.expect("KeyboardInterrupt", timeout=30)
            child.expect(">>> ", timeout=30)
            assert time.monotonic() - started < 10
            out = _do(child, "pool.spmd(lambda: spmd_plus(spmd_index()))[:]")
            assert str([n * (n + 1) // 2] * n) in out, out
        if n > 1:  # the stopped receive is withdrawn: the next message goes to the next
            out = _do(child, "pool.spmd(lambda: spmd_receive(2) if spmd_index() == 1 else "
                             "spmd_send('after', 1) if spmd_index() == 2 else None)[1]")
            assert "'after'" in out, out
        # a worker that ignores the interrupt: the pool is restarted and says so
        child.sendline("pool.spmd(lambda: (signal.pthread_sigmask(signal.SIG_BLOCK, "
                       "[signal.SIGINT]), time.sleep(300)))")
        time.sleep(2)
        child.sendintr()
        child.expect("did not stop within 5 s; the pool was restarted", timeout=60)
        child.expect(">>> ", timeout=60)
        out = _do(child, "pool.spmd(lambda: spmd_plus(spmd_index()))[:]")
        assert str([n * (n + 1) // 2] * n) in out, out
        child.sendline("exit()")
        child.expect(pexpect.EOF, timeout=30)
    finally:
        child.close(force=True)


def test_a_failing_function_of_the_script_shows_its_file_and_line(tmp_path):
    # cloudpickle sends a function of the script's __main__ by value and names its code
    # "<dynamic-code>": the worker's traceback said File "<dynamic-code>", line 7, with
    # no file and no source line
    client_side()
    env, _ = layout_env("2")
    script = tmp_path / "client.py"
    script.write_text(textwrap.dedent("""
        import spmdlab
        from spmdlab import SpmdError, spmd_index, spmd_plus
        pool = spmdlab.start_pool(2)
        def fails():
            if spmd_index() == 2:
                raise ValueError("no good")
            spmd_plus(1)
        try:
            pool.spmd(fails)
        except SpmdError as exc:
            print("FAILED", exc)
        pool.delete()
    """))
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f'File "{script}", line 7, in fails\n' \
        '    raise ValueError("no good")' in proc.stdout, proc.stdout
    assert "<dynamic-code>" not in proc.stdout, proc.stdout


def test_a_workers_error_shows_the_exceptions_it_was_raised_from():
    # raise RuntimeError(...) from e on a worker showed the RuntimeError alone: the
    # KeyError and the lines it came from were lost (spmdlab's own chains still are)
    client_side()
    env, _ = layout_env("1")
    proc = run_client("""
        import spmdlab
        pool = spmdlab.start_pool(1)
        for code in ("def load(k):\\n    return {}[k]\\ntry:\\n    load('weights')\\n"
                     "except KeyError as e:\\n    raise RuntimeError('could not load') "
                     "from e",
                     "try:\\n    int('x')\\nexcept ValueError:\\n    undefined_name",
                     "try:\\n    int('x')\\nexcept ValueError:\\n    raise KeyError(1) "
                     "from None",
                     "spmd_receive(3)"):
            try:
                pool.run_cell(code, {})
            except spmdlab.SpmdError as exc:
                print("FAILED", exc)
        pool.delete()
    """, env)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    failures = out.split("FAILED ")[1:]
    assert len(failures) == 4, out
    assert "line 2, in load\n    return {}[k]" in failures[0], out
    assert "KeyError: 'weights'\n\nThe above exception was the direct cause of the " \
        "following exception:\n\nTraceback (most recent call last):" in failures[0], out
    assert failures[0].rstrip().endswith("RuntimeError: could not load"), out
    assert "ValueError: invalid literal for int() with base 10: 'x'\n\nDuring handling " \
        "of the above exception, another exception occurred:" in failures[1], out
    assert "ValueError" not in failures[2], out  # (from None)
    assert failures[3].count("Traceback") == 1, out


def test_a_workers_input_ends_at_once():
    # under MPICH's mpiexec, workers 2 and up read a pipe that never ended: input() or
    # sys.stdin.read() in a block waited for ever
    env, _ = layout_env("2")
    proc = run_client("""
        import spmdlab
        pool = spmdlab.start_pool(2)
        pool.run_cell("import sys, threading\\ngot = []\\nreader = threading.Thread("
                      "target=lambda: got.append(sys.stdin.read()), daemon=True)\\n"
                      "reader.start()\\nreader.join(5)\\ngot", {})
        try:
            pool.run_cell("input('name? ')", {})
        except spmdlab.SpmdError as exc:
            print("FAILED", str(exc).splitlines()[0])
        pool.delete()
    """, env, timeout=60)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "Worker 1: ['']" in out and "Worker 2: ['']" in out, out
    assert re.search(r"FAILED spmd: worker [12] of 2 failed.*: EOFError", out), out


def test_workers_that_cannot_recover_from_a_stopped_block_get_a_new_pool():
    # and the pool made current since stays current (a restart is a start, which made
    # the restarted pool the current one)
    env, _ = layout_env("2")
    proc = run_client("""
        import spmdlab
        from spmdlab import SpmdError, spmd_index, spmd_plus
        from spmdlab.matlab import gcp
        pool = spmdlab.start_pool(2)
        other = spmdlab.Pool(1)
        def refresh_hangs_on_worker_1():
            import time
            from spmdlab import _world
            if spmd_index() == 1:
                _world.refresh = lambda: time.sleep(300)
        pool.spmd(refresh_hangs_on_worker_1)
        def fails():
            if spmd_index() == 2:
                raise ValueError("no good")
            spmd_plus(1)
        try:
            pool.spmd(fails)
        except SpmdError as exc:
            print("FAILED", exc)
        print("AFTER", pool.spmd(lambda: spmd_plus(1))[:], gcp("nocreate") is other)
        pool.delete()
        print("THEN", gcp("nocreate") is other)
        other.delete()
    """, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "FAILED spmd: worker 2 of 2 failed: ValueError: no good" in proc.stdout
    assert "AFTER [2, 2] True" in proc.stdout and "THEN True" in proc.stdout, \
        proc.stdout + proc.stderr
    assert "the workers could not recover from a stopped block; the pool was restarted " \
        "with 2 workers" in proc.stderr, proc.stderr


def test_a_ctrl_c_while_the_refresh_is_sent_waits_until_every_worker_has_it():
    # a Ctrl-C between the refresh's sends (after a failed block): worker 1 waited in
    # its collective for worker 2, which ran the next block; stopped, worker 1 did not
    # stop and the pool was restarted, every variable lost
    env, _ = layout_env("2")
    proc = run_client("""
        import os, signal, time
        import spmdlab
        from spmdlab import spmd_index, spmd_plus
        from spmdlab.pool import _client
        pool = spmdlab.start_pool(2)
        kept = pool.spmd(lambda: spmd_index() * 10)
        send = _client.Pool._send
        def cut(self, k, message):
            if message[0] == "refresh" and k == 2 and not hasattr(self, "cut"):
                self.cut = True
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.2)  # (the signal's handler runs here)
            return send(self, k, message)
        _client.Pool._send = cut
        def fails():
            if spmd_index() == 2:
                raise ValueError("no good")
            spmd_plus(1)
        for _ in range(2):
            try:
                pool.spmd(fails)
            except (spmdlab.SpmdError, KeyboardInterrupt) as exc:
                print("RAISED", type(exc).__name__)
        print("AFTER", pool.spmd(lambda: spmd_plus(1))[:], kept[:])
        pool.delete()
    """, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "RAISED KeyboardInterrupt\nRAISED SpmdError" in proc.stdout, proc.stdout
    assert "AFTER [2, 2] [10, 20]" in proc.stdout, proc.stdout + proc.stderr
    assert "restarted" not in proc.stderr, proc.stderr


def test_a_wait_for_a_worker_that_ended_the_block_fails_and_names_it():
    # MATLAB: "the other worker became idle"; it used to wait for ever
    env, _ = layout_env("2")
    proc = run_client("""
        import time
        import numpy as np
        import spmdlab
        from spmdlab import SpmdError, spmd_index, spmd_plus, spmd_receive, spmd_send
        pool = spmdlab.start_pool(3)
        for block in ["lambda: spmd_receive(2) if spmd_index() == 1 else None",
                      "lambda: spmd_plus(1) if spmd_index() < 3 else None",
                      "lambda: spmd_receive() if spmd_index() == 1 else None"]:
            started = time.monotonic()
            try:
                pool.spmd(eval(block))
            except SpmdError as exc:
                print("FAILED", round(time.monotonic() - started), exc)
            print("AFTER", pool.spmd(lambda: spmd_plus(1))[:])
        def late():  # what a worker sent before it ended the block is still received
            if spmd_index() == 2:
                spmd_send(np.ones(10 ** 6), 1)
            elif spmd_index() == 1:
                time.sleep(3)
                return float(spmd_receive(2).sum())
        print("LATE", pool.spmd(late)[1])
        pool.delete()
    """, env, timeout=90)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for waits, ended in [(r"spmd_receive \(worker 1 of 3\)", "worker 2"),
                         (r"spmd_plus \(worker [12] of 3\)", "worker 3"),
                         (r"spmd_receive \(worker 1 of 3\)", "workers 2, 3")]:
        assert re.search(f"{waits}: {ended} finished the block without making the "
                         f"matching call", proc.stdout), proc.stdout
    assert re.findall(r"FAILED (\d+) ", proc.stdout) and \
        all(int(t) < 10 for t in re.findall(r"FAILED (\d+) ", proc.stdout)), proc.stdout
    assert proc.stdout.count("AFTER [3, 3, 3]") == 3, proc.stdout
    assert "LATE 1000000.0" in proc.stdout, proc.stdout


def test_a_caught_error_for_a_worker_that_ended_the_block_leaves_the_pool_working():
    # the block ended well on every worker, but the collective that raised left its
    # requests active (the scope lost): the next block's collectives failed at once
    env, _ = layout_env("2")
    proc = run_client("""
        import spmdlab
        from spmdlab import SpmdPeerError, spmd, spmd_index, spmd_plus
        pool = spmdlab.start_pool(3)
        def caught():
            if spmd_index() == 3:
                return "ended"
            try:
                for _ in spmd(2):
                    spmd_plus(1)
                spmd_plus(1)
            except SpmdPeerError:
                return "caught"
        def caught_in_a_region():
            for _ in spmd(2):
                if spmd_index() == 2:
                    break
                try:
                    spmd_plus(1)
                except SpmdPeerError:
                    return "caught"
            return "ended"
        print("BLOCK", pool.spmd(caught)[:])
        print("AFTER", pool.spmd(lambda: spmd_plus(1))[:])
        print("REGION", pool.spmd(caught_in_a_region)[:])
        print("AFTER", pool.spmd(lambda: [spmd_plus(1) for _ in spmd(2)])[:])
        pool.delete()
    """, env, timeout=90)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "BLOCK ['caught', 'caught', 'ended']" in proc.stdout, proc.stdout + proc.stderr
    assert "REGION ['caught', 'ended', 'ended']" in proc.stdout, proc.stdout + proc.stderr
    assert "AFTER [3, 3, 3]" in proc.stdout, proc.stdout + proc.stderr
    assert "AFTER [[2], [2], []]" in proc.stdout, proc.stdout + proc.stderr


def test_stopped_blocks_free_the_communicators_they_replaced():
    # each stopped block's refresh duplicated two communicators and freed none: MPICH
    # has 2048 context ids, so a session with about a thousand failed blocks ran out,
    # and the pool was restarted with its workers' variables lost
    env, _ = layout_env("2")
    proc = run_client("""
        import spmdlab
        from mpi4py import MPI
        from spmdlab import _world, spmd_index, spmd_plus
        pool = spmdlab.start_pool(3)
        pids = list(pool.pids)
        def keep():
            _world.kept_by_the_test = [_world.WORLD.comm, _world.CTL]
        def fail():
            if spmd_index() == 1:
                raise ValueError("boom")
            return spmd_plus(1.0)  # stopped in it: its request stays active
        pool.spmd(spmd_plus, 1.0)
        pool.spmd(keep)
        for i in range(3):
            try:
                pool.spmd(fail)
            except spmdlab.SpmdError as exc:
                assert "ValueError: boom" in str(exc), exc
        print("FREED", pool.spmd(
            lambda: [c == MPI.COMM_NULL for c in _world.kept_by_the_test])[:])
        print("AFTER", pool.spmd(lambda: spmd_plus(1))[:], list(pool.pids) == pids)
        pool.delete()
    """, env, timeout=90)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "FREED [[True, True], [True, True], [True, True]]" in proc.stdout, \
        proc.stdout + proc.stderr
    assert "AFTER [3, 3, 3] True" in proc.stdout, proc.stdout + proc.stderr


def test_sys_exit_in_a_block_is_a_system_exit():
    env, _ = layout_env("2")
    proc = run_client("""
        import sys
        import spmdlab
        from spmdlab import SpmdError, spmd_barrier, spmd_index, spmd_plus
        pool = spmdlab.start_pool(2)
        try:
            pool.spmd(lambda: sys.exit(3) if spmd_index() == 2 else spmd_barrier())
        except SpmdError as exc:
            print("FAILED", exc.remote_type, repr(exc.__cause__), exc)
        print("AFTER", pool.spmd(lambda: spmd_plus(1))[:])
        pool.delete()
    """, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "FAILED builtins.SystemExit SystemExit(3) spmd: worker 2 of 2 failed: " \
        "SystemExit: 3" in proc.stdout, proc.stdout
    assert "_NotedExit" not in proc.stdout and "AFTER [2, 2]" in proc.stdout, proc.stdout


def test_os_exit_on_one_worker_names_that_worker():
    # the workers' connections close in the launcher's order: the client named the first
    # to close (worker 1, nearly always), not the worker that called os._exit
    env, _ = layout_env("4")
    proc = run_client("""
        import os
        import spmdlab
        from spmdlab import SpmdError, spmd_barrier, spmd_index
        for _ in range(2):
            pool = spmdlab.start_pool(3)
            try:
                pool.spmd(lambda: os._exit(3) if spmd_index() == 2 else spmd_barrier())
            except SpmdError as exc:
                print("ENDED", exc)
            assert pool.closed
    """, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("ENDED worker 2 of 3 called os._exit(3), which ends every "
                             "worker: the pool has ended; start a new one with "
                             "parpool(3)") == 2, proc.stdout


def test_a_current_pool_that_ended_gives_the_last_one_still_open_back():
    # as delete does: the ended pool stayed current, gcp("nocreate") said None with a
    # pool open, and distributed(x) (gcp) started a third pool beside it
    env, _ = layout_env("4")
    proc = run_client("""
        import os
        import numpy as np
        import spmdlab
        from spmdlab import SpmdError, spmd_index
        from spmdlab.matlab import distributed, gather, gcp
        first = spmdlab.start_pool(2)
        second = spmdlab.Pool(2)
        try:
            second.spmd(lambda: os._exit(3) if spmd_index() == 2 else None)
        except SpmdError as exc:
            print("ENDED", str(exc).split(":")[0])
        try:  # (it said "the pool has been deleted", which the user never did)
            second.spmd(lambda: 1)
        except SpmdError as exc:
            print("LATER", exc)
        D = distributed(np.arange(4.0))
        print("CURRENT", gcp("nocreate") is first, D._pool is first, gather(D).tolist())
        first.delete()
        print("NONE", gcp("nocreate"))
    """, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ENDED worker 2 of 2 called os._exit(3), which ends every worker" in \
        proc.stdout, proc.stdout
    assert "LATER spmd: the pool has ended (worker 2 of 2 called os._exit(3)); start a " \
        "new one with parpool(2)" in proc.stdout, proc.stdout
    assert "CURRENT True True [0.0, 1.0, 2.0, 3.0]" in proc.stdout, proc.stdout
    assert "NONE None" in proc.stdout, proc.stdout


@pytest.mark.parametrize("layout", ["2", "4", "2x2"])
def test_a_worker_ended_by_sigterm_is_named_with_the_signal(layout):
    # the pool's error said "worker k of n ended (killed, or the launcher ended the job)"
    # for the first connection to close, although the host's watcher had named the
    # worker and the signal on the line above
    env, n = layout_env(layout)
    proc = run_client(f"""
        import os, signal, time
        import spmdlab
        from spmdlab import SpmdError, spmd_barrier, spmd_index
        pool = spmdlab.start_pool({n})
        def work():
            if spmd_index() == 2:
                time.sleep(0.5)
                os.kill(os.getpid(), signal.SIGTERM)
            spmd_barrier()
        try:
            pool.spmd(work)
        except SpmdError as exc:
            print("ENDED", exc)
        assert pool.closed
    """, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"ENDED worker 2 of {n} ended by SIGTERM (sent by kill, by a batch system at " \
        f"its time limit, or by a launcher): the pool has ended; start a new one with " \
        f"parpool({n})" in proc.stdout, proc.stdout + proc.stderr


def test_spmd_n_takes_a_composite_of_an_earlier_spmd_n():
    client_side()
    # MATLAB's spmd(1), x = f(); end; spmd(1), y = g(x); end: the workers that skip the
    # block were sent x too, and failed to unpickle it (they hold no element of it); a
    # Composite missing on a worker that runs the block failed there, unnamed
    env, _ = layout_env("4")
    proc = run_client("""
        import spmdlab
        from spmdlab import SpmdValueError, spmd_index, spmd_plus
        pool = spmdlab.start_pool(3)
        x = pool.spmd_on(1, lambda: 7)
        print("ONE", pool.spmd_on(1, lambda x: x + 1, x)[1],
              pool.spmd_on(1, lambda: x + 2)[1], pool.spmd_on(0, lambda x: -x, x)[1])
        for n in (2, None):
            try:
                pool.spmd_on(n, lambda x: x, [0, x])
            except SpmdValueError as exc:
                print("MISSING", exc)
        print("AFTER", pool.spmd(lambda: spmd_plus(1))[:])
        pool.delete()
    """, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "ONE 8 9 -7" in out, out
    for where in ("2", "2-3"):
        assert f"MISSING spmd: argument 1, a Composite, has no element on worker(s) {where} "\
            f"of the block (it has elements on worker(s) 1)" in out, out
    assert "AFTER [3, 3, 3]" in out, out


def test_a_composite_element_refuses_a_distributed_array_and_another_pools_handles():
    client_side()
    # c[1] = D was stored on worker 1, whose c[1] then could never be read back; c[1] = a
    # Composite of another pool failed on the worker with its internal traceback
    env, _ = layout_env("2")
    proc = run_client("""
        import numpy as np
        import spmdlab
        from spmdlab.matlab import distributed
        from spmdlab.pool import Pool
        pool = spmdlab.start_pool(2)
        c = pool.spmd(lambda: 1)
        D = distributed(np.arange(4.0))
        beside = Pool(1)
        other = beside.spmd(lambda: 2)
        for value in (D, [other], {"a": other}):
            try:
                c[1] = value
            except spmdlab.SpmdError as exc:
                print("REFUSED", type(exc).__name__, exc)
        c[2] = 5
        print("AFTER", c[:], other[:])
    """, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "REFUSED SpmdTypeError Composite[1] =: a distributed array cannot be one " \
        "worker's element (its parts live on every worker): gather(D) it first, or pass " \
        "it to a block" in out, out
    assert out.count("REFUSED SpmdValueError Composite[1] =: a Composite of another pool "
                     "(of 1 workers, still open beside this one) cannot be sent to this "
                     "pool's workers") == 2, out
    assert "AFTER [1, 5] [2]" in out, out


def test_a_composite_read_with_a_worker_named_twice_returns():
    client_side()
    # c[[1, 1]] asked worker 1 twice and waited for ever for a second reply
    env, _ = layout_env("2")
    proc = run_client("""
        import numpy as np
        import spmdlab
        from spmdlab import spmd_index
        pool = spmdlab.start_pool(2)
        c = pool.spmd(lambda: spmd_index() * 10)
        print("READ", c[[1, 1]], c[[2, 1, 2]], c[np.array([2.0, 2.0])])
    """, env, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "READ [10, 10] [20, 10, 20] [20, 20]" in proc.stdout, proc.stdout


def test_distributed_colon_and_refused_constructors_on_the_client():
    client_side()
    # distributed.colon on the client (MATLAB's) was refused as a codistributed array
    # made on the client; distributed.cell's refusal was hidden by that one, named after
    # the function that made it: "refused (the client): this process is a pool's client"
    env, _ = layout_env("2")
    proc = run_client("""
        import numpy as np
        import spmdlab
        from spmdlab.matlab import codistributed, distributed, gather, isdistributed
        pool = spmdlab.start_pool(2)
        D = distributed.colon(1, 2, 9)
        print("COLON", isdistributed(D), gather(D).tolist())
        # a class called on the client was named by its constructor: "__new__ (the
        # client)", "__init__ (the client)"
        from spmdlab.matlab import codistributor1d
        for make in (lambda: distributed.cell(2), lambda: distributed.sparse(2, 2),
                     lambda: codistributed.colon(1, 3), lambda: codistributed(np.ones(2)),
                     lambda: codistributor1d(2, [1, 1], [2, 2])):
            try:
                make()
            except spmdlab.SpmdError as exc:
                print("REFUSED", type(exc).__name__, exc)
        # plain arrays on the client: MATLAB's singular warning names the client (it
        # raised the client's "no workers of its own" instead of the warning)
        import warnings
        from spmdlab.matlab import mldivide
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            x = mldivide(np.array([[1.0, 2.0], [2.0, 4.0]]), np.array([1.0, 2.0]))
        print("SOLVED", np.isnan(x).all(), [str(w.message) for w in caught])
    """, env, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "COLON True [1.0, 3.0, 5.0, 7.0, 9.0]" in out, out
    assert "SOLVED True ['mldivide (the client): Matrix is singular to working " \
        "precision.']" in out, out
    assert "REFUSED SpmdValueError distributed.cell (the client): not available in " \
        "spmdlab: a cell array is a Python list" in out, out
    assert "REFUSED SpmdValueError distributed.sparse (the client): not available" in out
    assert "REFUSED SpmdError colon (the client): this process is a pool's client" in out, out
    for name in ("codistributed", "codistributor1d"):
        assert f"REFUSED SpmdError {name} (the client): this process is a pool's client" \
            in out, out


def test_a_client_operation_that_gives_a_tuple_of_arrays_gives_distributed_arrays():
    client_side()
    # np.nonzero(D), np.divmod(D, 3), np.modf(D) on the client (MATLAB's find(D) there):
    # worker 1 was asked for the tuple of its codistributed arrays, and the call failed
    # with 'Composite[1]: ... distributed cannot be pickled or sent'
    env, _ = layout_env("4")
    proc = run_client("""
        import gc
        import numpy as np
        import spmdlab
        from spmdlab.matlab import distributed, gather
        pool = spmdlab.start_pool(3)
        A = np.arange(-3.0, 9.0).reshape(3, 4)
        D = distributed(A)
        rows, cols = np.nonzero(D > 0)
        want = np.nonzero(A > 0)
        assert np.array_equal(gather(rows), want[0]) and gather(cols).dtype == want[1].dtype
        assert np.array_equal(gather(cols), want[1])
        q, m = np.divmod(D, 3)
        assert np.array_equal(gather(q), A // 3) and np.array_equal(gather(m), A % 3)
        frac, whole = np.modf(D / 2)
        assert np.array_equal(gather(frac) + gather(whole), A / 2)
        assert float(D.sum()) == A.sum()  # any other result: worker 1's value, as before
        assert 5.0 in D and 9.0 not in D  # (numpy's "truth value ... is ambiguous")
        del rows, cols, q, m, frac, whole, D
        gc.collect()
        ns = {}
        pool.run_cell("left = [k for k in globals() if k.startswith('_spmdlab')]", ns)
        assert ns["left"][:] == [[], [], []], ns["left"][:]
        pool.delete()
        print("OK")
    """, env)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout + proc.stderr


def test_a_block_takes_keyword_arguments_named_n_and_fn():
    client_side()
    # pool.spmd(make, n=10) was "spmd_on() got multiple values for argument 'n'", and so
    # was numpy's n= on a distributed array on the client (np.diff(D, n=2))
    env, _ = layout_env("2")
    proc = run_client("""
        import numpy as np
        import spmdlab
        from spmdlab import spmd_index
        from spmdlab.matlab import distributed, gather
        pool = spmdlab.start_pool(2)
        def make(n, fn=0):
            return n * spmd_index() + fn
        A = np.arange(12.0).reshape(3, 4) ** 2
        D = distributed(A)
        print("KEYWORDS", pool.spmd(make, n=10)[:], pool.spmd(make, 10, fn=1)[:],
              pool.spmd_on(1, make, n=5, fn=2)[1],
              np.array_equal(gather(np.diff(D, n=2, axis=1)), np.diff(A, n=2, axis=1)))
    """, env, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "KEYWORDS [10, 20] [11, 21] 7 True" in proc.stdout, proc.stdout


def test_a_restarted_pool_refuses_the_old_pools_composites_and_arrays():
    client_side()
    env, _ = layout_env("2")
    proc = run_client("""
        import signal, threading, _thread, time
        import numpy as np
        import spmdlab
        from spmdlab import spmd_index, spmd_plus
        from spmdlab.matlab import distributed, gather
        pool = spmdlab.start_pool(2)
        x = pool.spmd(lambda: spmd_index() ** 2)
        D = distributed(np.arange(4.0))
        def stuck():
            signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGINT])
            time.sleep(30)
        threading.Timer(1.0, _thread.interrupt_main).start()
        try:
            pool.spmd(stuck)
        except KeyboardInterrupt:
            pass
        for what, read in [("READ", lambda: x[:]), ("SET", lambda: x.__setitem__(1, 0)),
                           ("SEND", lambda: pool.spmd(lambda x: x, x)),
                           ("GATHER", lambda: gather(D)), ("ARITH", lambda: 2 * D)]:
            try:
                print(what, "GOT", read())
            except spmdlab.SpmdValueError as exc:
                print(what, exc)
        print("EXIST", x.exist(), x.exist(1), x)  # the old workers' elements are gone
        print("AFTER", pool.spmd(lambda: spmd_plus(1))[:])
        pool.delete()
        print("DELETED", x.exist())
    """, env)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "GOT" not in out, out  # not [None, None]: the old workers' values are gone
    lost = "was made before the pool was restarted"
    for line in ("READ Composite[:]: this Composite", "SET Composite[1] =: this Composite",
                 "SEND spmd: this Composite", "GATHER gather: this distributed array",
                 "ARITH numpy.multiply of D: this distributed array"):
        assert f"{line} {lost}" in out, out
    assert "EXIST [False, False] False <Composite on a pool of 2: elements on no worker" \
        in out, out
    assert "AFTER [2, 2]" in out and "DELETED [False, False]" in out, out


def test_an_interrupted_read_keeps_no_late_replies_and_unsendable_values_are_named():
    client_side()
    env, _ = layout_env("2")
    proc = run_client("""
        import threading
        import numpy as np
        import spmdlab
        pool = spmdlab.start_pool(2)
        big = pool.spmd(lambda: np.ones((2048, 2048)))
        # a read given up before its replies came (as Ctrl-C or a timeout gives it up;
        # an interrupt from a timer could land after the read, in a later call)
        try:
            pool._request("Composite[:]", [1, 2], "get", big._name, within=0.0)
        except TimeoutError:
            pass
        for _ in range(3):
            pool.spmd(lambda: 1)
        print("HELD", len(pool._replies))
        lock = threading.Lock()
        for call in (lambda: pool.spmd(lambda a: 1, lock),
                     lambda: pool.spmd(lambda a=1: 1, a=lock),
                     lambda: big.__setitem__(2, lock)):
            try:
                call()
            except spmdlab.SpmdTypeError as exc:
                print("UNSENDABLE", exc)
        print("AFTER", [float(a.sum()) for a in big[:]])
        pool.delete()
    """, env)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "HELD 0" in out, out
    for what in ("spmd: argument 1 (a lock)", "spmd: argument 'a' (a lock)",
                 "Composite[2] =: the value (a lock)"):
        assert f"UNSENDABLE {what} cannot be sent to the workers" in out, out
    assert "AFTER [4194304.0, 4194304.0]" in out, out


def test_an_interrupted_gather_keeps_none_of_the_parts_that_came():
    client_side()
    env, _ = layout_env("2")
    proc = run_client("""
        import numpy as np
        from spmdlab.matlab import delete, distributed, gather, parpool
        pool = parpool(2)
        D = distributed(np.arange(1e6))
        pump = pool._pump
        def interrupted(timeout):  # Ctrl-C once one worker's part has come
            pump(timeout)
            if any(len(r) == 1 for r in pool._replies.values()):
                raise KeyboardInterrupt
        pool._pump = interrupted
        try:
            gather(D)
        except KeyboardInterrupt:
            print("INTERRUPTED")
        pool._pump = pump
        print("HELD", len(pool._replies))
        print("AFTER", float(gather(D).sum()))
        delete(pool)
    """, env)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "INTERRUPTED" in out and "HELD 0" in out, out
    assert "AFTER 499999500000.0" in out, out


@pytest.mark.parametrize("layout", ["1", "2"])
def test_a_distributed_torch_tensor_is_sent_in_parts_and_gathered_as_a_tensor(layout):
    client_side()
    pytest.importorskip("torch")
    env, n = layout_env(layout)
    proc = run_client("""
        import torch
        from spmdlab.matlab import delete, distributed, gather, parpool
        pool = parpool(%d)
        X = torch.arange(12000.0).reshape(40, 300)
        D = distributed(X)
        # each worker holds its columns, not the storage of the whole tensor
        held = pool.spmd(lambda D: D.local.untyped_storage().nbytes(), D)[:]
        print("HELD", held == [4 * 40 * (300 // %d)] * %d)
        for G in (gather(D), gather(D * 2) / 2, D.gather()):
            print("GATHERED", type(G).__name__, G.dtype, torch.equal(G, X))
        delete(pool)
    """ % (n, n, n), env)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "HELD True" in out, out
    assert out.count("GATHERED Tensor torch.float32 True") == 3, out


def test_ctrl_c_while_a_large_value_is_sent_leaves_the_pool_working():
    env, _ = layout_env("1")
    proc = run_client("""
        import os, signal, threading
        import numpy as np
        import spmdlab
        pool = spmdlab.start_pool(1)
        c = pool.spmd(lambda: 0)
        big = np.ones(50_000_000)  # 400 MB: a Ctrl-C comes while it is on its way
        interrupted = 0
        for delay in (0.002, 0.01, 0.05):
            timer = threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT))
            try:  # (on a loaded machine the Ctrl-C may come while the timer starts)
                timer.start()
                c[1] = big
                timer.join()
            except KeyboardInterrupt:
                interrupted += 1
            timer.join()
            assert pool.spmd(lambda: 7)[1] == 7
        print("INTERRUPTED", interrupted)
        pool.delete()
    """, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "INTERRUPTED 3" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("layout", ["4", "2x2"])
def test_a_block_stopped_in_a_large_collective_keeps_its_buffers(layout):
    # stopped half-way through a large spmd_plus, a worker dropped the requests it was
    # still on with their buffers (40 MB: memory of its own, unmapped when freed); at 2x2
    # another worker then read a freed send's memory across the nodes and aborted
    # ("process_vm_readv ... Bad address"): the pool ended in most runs
    env, n = layout_env(layout)
    proc = run_client(f"""
        import os, signal, threading
        import numpy as np
        import spmdlab
        from spmdlab import spmd_plus
        pool = spmdlab.start_pool({n})

        def sums():
            x = np.ones(5_000_000)
            while True:
                y = spmd_plus(x)

        interrupted = 0
        for delay in (0.6, 0.9, 1.2, 1.5, 0.8, 1.1, 0.7, 1.3):
            timer = threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT))
            try:
                timer.start()
                pool.spmd(sums)
            except KeyboardInterrupt:
                interrupted += 1
            timer.join()
            assert pool.spmd(lambda: spmd_plus(1))[:] == [{n}] * {n}
        print("INTERRUPTED", interrupted)
        pool.delete()
    """, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "INTERRUPTED 8" in proc.stdout, proc.stdout + proc.stderr


def test_a_block_stopped_as_a_large_reduction_gathers_its_sums_keeps_the_pool():
    # at 3 workers a large spmd_plus folds a third on each worker and gathers the sums
    # with an in-place Iallgatherv, whose buffer mpi4py's request does not hold: stopped
    # there (or as the call that posts it returned, before the request was stored), the
    # result was freed while MPI still wrote the sums into it, and a worker crashed in
    # MPICH a moment later (SIGSEGV): the pool was restarted, its variables lost, in
    # about half the interrupts. Results kept alive (a list) made it likely
    env, n = layout_env("3")
    proc = run_client(f"""
        import os, signal, threading
        import numpy as np
        import spmdlab
        from spmdlab import spmd_plus
        pool = spmdlab.start_pool({n})
        pids = list(pool.pids)

        def sums(size):
            return [spmd_plus(np.ones(size)) for _ in range(100000)]

        interrupted = 0
        for delay in (0.5, 0.9, 1.3, 1.7, 0.6, 1.0, 1.4, 0.8):
            timer = threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT))
            try:
                timer.start()
                pool.spmd(sums, 2_000_000)
            except KeyboardInterrupt:
                interrupted += 1
            timer.join()
            assert pool.spmd(lambda: spmd_plus(1))[:] == [{n}] * {n}
            assert list(pool.pids) == pids, "the pool was restarted"
        print("INTERRUPTED", interrupted)
        pool.delete()
    """, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "INTERRUPTED 8" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("layout", ["2", "2x2"])
def test_a_stopped_blocks_distributed_arrays_stay_whole(layout):
    # each worker stops a block at its own point: a loop that rebinds a codistributed
    # array left each worker another version of it (the parts did not fit together, and
    # the client's gather raised numpy's ValueError; or data of different steps, gathered
    # as one array); a failed or stopped block's assignments of them are undone, and a
    # gather of parts that do not fit together says so
    env, n = layout_env(layout)
    proc = run_client(f"""
        import os, signal, threading
        import numpy as np
        import spmdlab
        from spmdlab.matlab import gather
        pool = spmdlab.start_pool({n})
        X = np.arange(20.0).reshape(4, 5)
        ns = {{"X": X}}
        pool.run_cell("import spmdlab.darray as da\\nD = da.distribute(X)", ns)
        try:  # the other workers transpose theirs (no communication), worker 1 never
            pool.run_cell("if spmd_index() == 1:\\n    raise ValueError('no')\\nD = D.T", ns)
        except spmdlab.SpmdError as exc:
            print("FAILED", str(exc).splitlines()[0])
        print("RESTORED", np.array_equal(gather(ns["D"]), X))
        for delay in (0.5, 1.0):
            timer = threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT))
            try:
                timer.start()
                pool.run_cell("while True:\\n    D = D.redistribute(axis=1 - D.axis) * 1", ns)
            except KeyboardInterrupt:
                print("INTERRUPTED")
            timer.join()
            print("WHOLE", np.array_equal(gather(ns["D"]), X))
        pool.run_cell("if spmd_index() == 1:\\n    D = D.T", ns)  # (the user's own doing)
        try:
            gather(ns["D"])
        except spmdlab.SpmdValueError as exc:
            print("APART", exc)
        pool.delete()
    """, env)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert f"FAILED spmd: worker 1 of {n} failed: ValueError: no" in out, out
    assert "RESTORED True" in out and out.count("INTERRUPTED") == 2, out
    assert out.count("WHOLE True") == 2, out
    assert "APART gather: the workers hold different arrays under this distributed " \
        "array's name (worker 1: shape (5, 4), axis 1, partition" in out, out


def test_ctrl_c_while_the_client_prints_a_backlog_keeps_the_pool():
    # the workers stopped at once, but their outcomes waited behind the output they had
    # written before, still being printed by a client that had fallen behind (a slow
    # terminal): after 5 s the pool was restarted as "could not be stopped", its
    # variables lost
    env, _ = layout_env("2")
    proc = run_client("""
        import os, signal, sys, threading, time
        import spmdlab
        from spmdlab import spmd_index

        class Slow:  # a terminal that falls behind: 50 ms a write once it is slow
            slow = False
            def __init__(self, out):
                self.out = out
            def write(self, text):
                if Slow.slow:
                    time.sleep(0.05)
                return self.out.write(text)
            def flush(self):
                self.out.flush()

        pool = spmdlab.start_pool(2)
        keep = pool.spmd(lambda: spmd_index() * 7)
        sys.stdout = Slow(sys.stdout)
        def chatty():
            for i in range(10 ** 6):
                print("line", i, flush=True)
                time.sleep(0.01)
        def later():
            Slow.slow = True
            time.sleep(1.0)
            os.kill(os.getpid(), signal.SIGINT)
        threading.Thread(target=later).start()
        try:
            pool.spmd(chatty)
        except KeyboardInterrupt as exc:
            print("STOPPED", exc, file=sys.stderr)
        Slow.slow = False
        print("KEPT", keep[:], file=sys.stderr)
        pool.delete()
    """, env)
    assert proc.returncode == 0, proc.stderr
    assert "STOPPED the block was stopped on every worker" in proc.stderr, proc.stderr
    assert "KEPT [7, 14]" in proc.stderr and "restarted" not in proc.stderr, proc.stderr


def test_output_read_in_parts_keeps_its_characters():
    client_side()
    # a line larger than a pipe holds is read in parts, which may cut a character in
    # two: each part used to be decoded alone, both halves printed as U+FFFD
    env, _ = layout_env("2")
    env["PYTHONIOENCODING"] = "utf-8"
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import spmdlab
        pool = spmdlab.start_pool(2)
        pool.spmd(lambda: print("\u00e9" * 200_000 + "\u20ac" * 50_001))
        pool.delete()
    """)], env=env, capture_output=True, encoding="utf-8", timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "\ufffd" not in proc.stdout, proc.stdout.count("\ufffd")
    for k in (1, 2):
        assert f"Worker {k}: {chr(0xe9) * 200_000}{chr(0x20ac) * 50_001}\n" in proc.stdout


def test_an_element_assigned_in_a_cell_comes_back():
    client_side()
    # MATLAB's a(1) = v in spmd makes a a Composite; a[0] = v in a cell changed the
    # workers' a, the client kept its own, and the next cell sent it back over theirs
    from spmdlab.pool import _cells

    assigned, definitions, loaded = _cells.names(textwrap.dedent("""
        a[0] = 1
        b[1][2] += 3
        del c[0]
        os.environ["X"] = "1"
        d.x = 5
        e[0].y = 1
        def f():
            g[0] = 1
    """))
    assert assigned == ["a", "b", "c", "f"]
    assert {"a", "b", "c", "os", "d", "e", "g"} <= loaded
    env, _ = layout_env("2")
    proc = run_client("""
        import numpy as np
        import spmdlab
        pool = spmdlab.start_pool(2)
        ns = {"a": np.zeros(3), "d": {}}
        pool.run_cell("a[0] = spmd_index()\\nd['k'] = spmd_index()", ns)
        assert [list(v) for v in ns["a"][:]] == [[1, 0, 0], [2, 0, 0]], ns["a"]
        assert ns["d"][:] == [{"k": 1}, {"k": 2}], ns["d"]
        pool.run_cell("b = float(a.sum())", ns)
        assert ns["b"][:] == [1.0, 2.0]
        pool.delete()
        print("OK")
    """, env)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout + proc.stderr


def test_a_name_deleted_in_a_cell_is_deleted_on_the_client_too():
    client_side()
    # del x on every worker left the client's Composite x saying it had elements on every
    # worker (x.exist(1) True, x[1] an error); del D2 of a distributed array made on the
    # client was a NameError on every worker (del did not send D2)
    from spmdlab.pool import _cells

    assigned, _, loaded = _cells.names("del x, y[0]\n")
    assert assigned == ["x", "y"] and {"x", "y"} <= loaded
    env, _ = layout_env("2")
    proc = run_client("""
        import numpy as np
        import spmdlab
        from spmdlab.matlab import distributed, gather
        pool = spmdlab.start_pool(2)
        ns = {"D": distributed(np.arange(4.0))}
        pool.run_cell("x = spmd_index()\\ny = spmd_index()\\nD2 = D * 2", ns)
        x, y = ns["x"], ns["y"]
        pool.run_cell("del x\\nif spmd_index() == 2:\\n    del y\\ndel D2", ns)
        assert ns["x"] is x and not x.exist(1) and not x.exist(2), x
        assert "elements on no worker" in repr(x), repr(x)
        assert y.exist(1) and not y.exist(2) and y[1] == 1
        pool.run_cell("del D", ns)  # the workers' name only: the client's D stays whole
        assert list(gather(ns["D"])) == [0, 1, 2, 3]
        pool.run_cell("C = D * 3", ns)  # a cell's own array: del C deletes its data, and
        pool.run_cell("del C", ns)      # the client's C went on to a bare KeyError
        assert "C" not in ns, ns["C"]
        pool.delete()
        print("OK")
    """, env)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout + proc.stderr


def test_a_cell_of_spmd_n_leaves_the_other_workers_without_the_clients_variables():
    client_side()
    # MATLAB's t = 7; spmd(2), t = t + 1; end: t{3} does not exist. The cell's variables
    # were stored on every worker, the skipping ones too: t came back with an element on
    # workers 3-4 (the client's 7), and a large array was kept on every worker
    env, _ = layout_env("4")
    proc = run_client("""
        import numpy as np
        import spmdlab
        pool = spmdlab.start_pool(4)
        x = pool.spmd(lambda: 5)
        ns = {"t": 7, "big": np.ones(4), "y": x}
        pool.run_cell("t = t + 1\\ns = float(big.sum())\\nz = y + 1\\ny = y * 2", ns, n=2)
        for name in ("t", "s", "z"):
            assert ns[name].exist() == [True, True, False, False], (name, ns[name])
        assert ns["t"][[1, 2]] == [8, 8] and ns["z"][[1, 2]] == [6, 6]
        assert ns["y"][:] == [10, 10, 5, 5], ns["y"][:]  # a Composite keeps its elements
        try:
            ns["t"][3]
        except spmdlab.SpmdValueError as exc:
            assert "worker 3 holds no element of t" in str(exc), exc
        else:
            raise AssertionError("t[3] was read")
        pool.run_cell("held = sorted(k for k in ('t', 'big', 'y') if k in globals())", ns)
        assert ns["held"][:] == [["big", "t", "y"]] * 2 + [["y"]] * 2, ns["held"][:]
        pool.run_cell("t = 0", ns, n=0)  # spmd(0): worker 1 alone
        assert ns["t"].exist() == [True, True, False, False] and ns["t"][[1, 2]] == [0, 8]
        pool.delete()
        print("OK")
    """, env)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout + proc.stderr


def test_deleting_a_cells_distributed_array_frees_the_workers_array():
    client_side()
    # a distributed array a cell assigned stayed on the workers when the client deleted
    # it (a Composite's elements went), and so did one made on the client that a cell had
    # read (the workers kept it under the name the cell read it by)
    env, _ = layout_env("2")
    proc = run_client("""
        import gc
        import numpy as np
        import spmdlab
        from spmdlab.matlab import distributed, gather
        pool = spmdlab.start_pool(2)
        ns = {"D": distributed(np.arange(6.0))}

        def held():
            pool.run_cell("held = sorted(k for k in ('D', 'E', 'c') if k in globals())", ns)
            return ns["held"][1]

        pool.run_cell("import numpy as np\\nfrom spmdlab.matlab import codistributed\\n"
                      "E = D + 1\\nc = spmd_index()", ns)
        assert held() == ["D", "E", "c"], held()
        del ns["D"], ns["E"], ns["c"]
        gc.collect()
        assert held() == [], held()
        F = distributed(np.arange(4.0))
        ns["F"] = F
        pool.run_cell("F[0] = 9", ns)  # F assigned: the cell's F is the client's to free
        del F
        gc.collect()
        assert list(gather(ns["F"])) == [9, 1, 2, 3]
        pool.delete()
        print("OK")
    """, env)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout + proc.stderr


def test_a_cell_that_rebinds_a_distributed_array_gives_its_new_shape():
    client_side()
    # D = D[0:2, :] in a later cell keeps the client's handle of D: its shape, asked
    # once, was the old one (len(D) 4, D.shape (4, 4)) while gather(D) gave 2 rows
    env, _ = layout_env("2")
    proc = run_client("""
        import spmdlab
        from spmdlab.matlab import codistributed, gather, numel, size
        pool = spmdlab.start_pool(2)
        ns = {"codistributed": codistributed}
        pool.run_cell("D = codistributed.zeros(4)", ns)
        D = ns["D"]
        print("BEFORE", D.shape, len(D), numel(D))
        pool.run_cell("D = D[0:2, :]", ns)
        print("AFTER", ns["D"] is D, D.shape, len(D), numel(D), D.ndim,
              [int(n) for n in size(D)], gather(D).shape, len(list(D)))
        pool.delete()
    """, env)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "BEFORE (4, 4) 4 16" in out, out
    assert "AFTER True (2, 4) 2 8 2 [2, 4] (2, 4) 2" in out, out


def test_an_in_place_operation_on_the_client_gives_the_same_distributed_array():
    client_side()
    # numpy gives out= itself: D += 1 made D another handle of the array (E, the old
    # one, was no longer D), and np.add(D, 1, out=D) was not D
    env, _ = layout_env("2")
    proc = run_client("""
        import numpy as np
        import spmdlab
        from spmdlab.matlab import distributed, gather
        pool = spmdlab.start_pool(2)
        D = distributed(np.arange(4.0))
        E = D
        D += 1
        F = np.multiply(D, 2, out=D)
        Q, R = distributed(np.zeros(4)), distributed(np.zeros(4))
        got = np.divmod(D, 3, out=(Q, R))
        print("SAME", D is E, F is D, got[0] is Q and got[1] is R)
        print("VALUES", gather(E).tolist(), gather(Q).tolist(), gather(R).tolist())
        # failed on one worker, it writes nothing (it wrote into the workers' own arrays:
        # failed, or stopped by Ctrl-C, on one worker, it had on the others, and D held
        # parts of two steps)
        D = distributed(np.zeros(4))
        E, Q, R = (distributed(np.full(4, v)) for v in (7.0, 0.0, 0.0))
        C = pool.spmd(lambda: 2.0 if spmdlab.spmd_index() == 1 else "two")
        for op in (lambda: np.add(D, C, out=D), lambda: np.divmod(E, C, out=(Q, R))):
            try:
                op()
            except spmdlab.SpmdError as exc:
                print("RAISED", str(exc).splitlines()[0])
        print("UNWRITTEN", gather(D).tolist(), gather(Q).tolist(), gather(R).tolist())
        D += 2.0
        np.divmod(D, 3, out=(Q, R))
        print("AFTER", gather(D).tolist(), gather(Q).tolist(), gather(R).tolist())
        # an element assignment too: worker 2's part cannot take "x", worker 1's wrote
        G = distributed(np.zeros(4))
        try:
            G[:] = np.array([1.0, 2.0, 3.0, "x"], dtype=object)
        except spmdlab.SpmdError as exc:
            print("RAISED", str(exc).splitlines()[0])
        print("UNASSIGNED", gather(G).tolist())
        G[1:3] = np.array([5.0, 6.0])
        print("ASSIGNED", gather(G).tolist())
        pool.delete()
    """, env)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "SAME True True True" in out, out
    assert "VALUES [2.0, 4.0, 6.0, 8.0] [0.0, 1.0, 2.0, 2.0] [2.0, 1.0, 0.0, 2.0]" in out, out
    # each named as written (it was "spmd: worker 2 of 2 failed", the block's name)
    for call in ("numpy.add of D", "numpy.divmod of D", "D[:] = ..."):
        assert f"RAISED {call}: worker 2 of 2 failed" in out, out
    assert "UNWRITTEN [0.0, 0.0, 0.0, 0.0] [0.0, 0.0, 0.0, 0.0] [0.0, 0.0, 0.0, 0.0]" in out, \
        out
    assert "AFTER [2.0, 2.0, 2.0, 2.0] [0.0, 0.0, 0.0, 0.0] [2.0, 2.0, 2.0, 2.0]" in out, out
    assert "UNASSIGNED [0.0, 0.0, 0.0, 0.0]" in out, out
    assert "ASSIGNED [0.0, 5.0, 6.0, 0.0]" in out, out


def test_a_cells_last_value_shows_in_worker_order_and_spmd_n_speaks_of_its_workers():
    client_side()
    # each worker's last value came as the workers ended the cell (Worker 3, 2, 1); the
    # errors of spmd(2) on a pool of 3 said "worker 2 of 3"
    env, _ = layout_env("2")
    proc = run_client("""
        import spmdlab
        pool = spmdlab.start_pool(3)
        ns = {}
        pool.run_cell("import time\\ntime.sleep(0.4 * (3 - spmd_index()))\\n"
                      "print('slept')\\nspmd_index() * 10", ns)
        pool.run_cell("import time\\ntime.sleep(0.4 * (2 - spmd_index()))\\n"
                      "spmd_index() * 100", ns, n=2)
        for code in ("if spmd_index() == 2:\\n    raise ValueError('bad')\\n"
                     "spmd_barrier()",
                     "if spmd_index() == 2:\\n    raise KeyboardInterrupt\\n"
                     "spmd_barrier()",
                     "if spmd_index() == 1:\\n    spmd_barrier()"):
            try:
                pool.run_cell(code, ns, n=2)
            except BaseException as exc:
                print("RAISED", type(exc).__name__, str(exc).splitlines()[0])
        try:
            pool.spmd_on(2, lambda: 1 / (spmdlab.spmd_index() - 2))
        except spmdlab.SpmdError as exc:
            print("RAISED", str(exc).splitlines()[0])
        pool.delete()
    """, env)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    shown = [line for line in out.splitlines() if re.fullmatch(r"Worker \d: \d+", line)]
    assert shown == ["Worker 1: 10", "Worker 2: 20", "Worker 3: 30", "Worker 1: 100",
                     "Worker 2: 200"], out
    lines = out.splitlines()  # after every worker's output of the cell
    assert lines.index("Worker 1: 10") > max(i for i, line in enumerate(lines)
                                             if line.endswith("slept")), out
    assert "RAISED SpmdError spmd: worker 2 of 2 failed: ValueError: bad" in out, out
    assert "RAISED KeyboardInterrupt spmd: worker 2 of 2 raised KeyboardInterrupt" in out, \
        out
    assert "RAISED spmd: worker 2 of 2 failed: ZeroDivisionError" in out, out
    assert " of 3" not in out, out
    # the end of spmd(n) that worker 2 reached is the cell's end (it was said to be at
    # "<frozen runpy>:88", the worker's own entry)
    assert re.search(r"worker 2: the end of an spmd block at <spmd cell \d+>:2\n", out), out


def test_a_client_operation_stopped_after_some_workers_made_its_tuple_keeps_none_of_it():
    client_side()
    # np.nonzero(D) on the client stopped (Ctrl-C) or failed after some workers had ended
    # the block: those kept their arrays of the tuple for good
    env, _ = layout_env("2")
    proc = run_client("""
        import gc, time
        import numpy as np
        import spmdlab
        from spmdlab import spmd_index
        from spmdlab.matlab import distributed
        pool = spmdlab.start_pool(2)
        D = distributed(np.arange(6.0))

        def held():
            return pool.spmd(lambda: sorted(
                k for k in __import__("spmdlab.pool._shared", fromlist=["_"]).namespace
                if k.startswith("_spmdlab_part")))[:]

        def tuple_then_late_failure(D):  # as np.nonzero(D), interrupted on worker 2
            parts = np.nonzero(D)
            if spmd_index() == 2:
                time.sleep(0.5)
                raise ValueError("stopped late")
            return parts

        try:
            D._on_workers("numpy.nonzero of D", tuple_then_late_failure, D)
        except spmdlab.SpmdError as exc:
            print("FAILED", str(exc).splitlines()[0])
        gc.collect()
        print("HELD", held())
        print("AFTER", [p.gather().tolist() for p in np.nonzero(D)])
        pool.delete()
    """, env)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "FAILED numpy.nonzero of D: worker 2 of 2 failed: ValueError: stopped late" \
        in out, out
    assert "HELD [[], []]" in out, out
    assert "AFTER [[1, 2, 3, 4, 5]]" in out, out


def test_a_composite_that_a_later_cell_makes_a_distributed_array_keeps_it():
    client_side()
    # x = spmd_index() in a cell, then x = codistributed(...): the Composite x's last
    # reference deleted the workers' x, the array that had replaced it (gather: a bare
    # KeyError on the workers)
    env, _ = layout_env("2")
    proc = run_client("""
        import gc
        import spmdlab
        from spmdlab.matlab import gather
        pool = spmdlab.start_pool(2)
        ns = {}
        pool.run_cell("import numpy as np\\nfrom spmdlab.matlab import codistributed", ns)
        pool.run_cell("x = spmd_index()", ns)
        pool.run_cell("x = codistributed(np.arange(4.0))", ns)
        gc.collect()
        assert list(gather(ns["x"])) == [0, 1, 2, 3]
        pool.run_cell("x = x * 2", ns)  # the same array, by name, on the client
        assert list(gather(ns["x"])) == [0, 2, 4, 6]
        pool.run_cell("x = 3", ns)  # and back: the array's handle frees nothing now
        gc.collect()
        assert ns["x"][:] == [3, 3], ns["x"][:]
        pool.delete()
        print("OK")
    """, env)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout + proc.stderr


def test_a_block_the_workers_cannot_read_leaves_the_last_blocks_arrays():
    client_side()
    # a block that failed as the workers read it (an empty Composite sent) never ran
    # there, but the refresh after it undid the block before it: D = D * 2 was lost, and
    # gather(D) failed with a bare KeyError: 'D'
    env, _ = layout_env("2")
    proc = run_client("""
        import numpy as np
        import spmdlab
        from spmdlab.errors import SpmdError
        from spmdlab.matlab import Composite, distributed, gather
        pool = spmdlab.start_pool(2)
        ns = {"D": distributed(np.arange(4.0))}
        pool.run_cell("D = D * 2", ns)
        try:  # (nested: a Composite argument itself is checked at the client)
            pool.spmd(lambda v: v, [[Composite()]])
        except SpmdError as exc:
            assert "holds no element of the Composite" in str(exc), exc
        else:
            raise AssertionError("an empty Composite was read")
        assert list(gather(ns["D"])) == [0, 2, 4, 6], gather(ns["D"])
        pool.delete()
        print("OK")
    """, env)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout + proc.stderr


def test_a_deleted_pools_worker_queue_says_so_on_send():
    client_side()
    # it said "send to it from the client" (this is the client), and once another pool
    # was open the item went to that pool's worker, into no queue
    env, _ = layout_env("2")
    proc = run_client("""
        import spmdlab
        from spmdlab import PollableDataQueue, SpmdError
        pool = spmdlab.start_pool(2)
        queues = pool.spmd(lambda: PollableDataQueue.per_worker())[1]
        pool.delete()
        for opened in (False, True):
            if opened:
                pool = spmdlab.start_pool(2)
            try:
                queues[2].send("stop")
                raise AssertionError("sent to a deleted pool's worker")
            except SpmdError as exc:
                assert "PollableDataQueue.send: worker 2's queue" in str(exc), exc
                assert "has been deleted" in str(exc), exc
        pool.delete()
        print("OK")
    """, env)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout + proc.stderr


def test_a_client_queue_checks_timeouts_values_and_close_as_a_workers_queue_does():
    client_side()
    # poll(None) was a TypeError, poll(True) waited a second, poll(nan) did not wait;
    # a worker's unpicklable item was a bare TypeError; a closed queue kept the items
    env, _ = layout_env("2")
    proc = run_client("""
        import math, threading
        import spmdlab
        from spmdlab import PollableDataQueue, SpmdError, SpmdValueError
        pool = spmdlab.start_pool(2)
        q = PollableDataQueue()
        for bad in (None, True, float("nan"), "1"):
            try:
                q.poll(bad)
                raise AssertionError(f"poll({bad!r}) did not raise")
            except SpmdValueError as exc:
                assert "PollableDataQueue.poll (the client): 'timeout' must be seconds" \\
                    in str(exc), exc
        try:
            q.flush(float("nan"))
            raise AssertionError("flush(nan) did not raise")
        except SpmdValueError as exc:
            assert "PollableDataQueue.flush (the client): 'timeout'" in str(exc), exc
        try:
            pool.spmd(lambda q: q.send(threading.Lock()), q)
            raise AssertionError("an unpicklable item was sent")
        except SpmdError as exc:
            assert "SpmdTypeError: PollableDataQueue.send (worker " in str(exc), exc
            assert "cannot send a value of type lock" in str(exc), exc
        pool.spmd(lambda q: q.send(1), q)
        assert q.poll(math.inf) == 1 and q.poll(30) == 1 and q.poll() is None
        q.close()
        try:
            pool.spmd(lambda q: q.send(2), q)
            raise AssertionError("sent to a closed queue")
        except SpmdError as exc:
            assert "SpmdValueError: PollableDataQueue.send (worker " in str(exc), exc
            assert "closed by its owner, the client" in str(exc), exc
        assert q.queue_length == 0
        pool.delete()
        print("OK")
    """, env)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout + proc.stderr


def test_ctrl_c_in_a_loop_of_short_blocks_always_stops_it():
    # a Ctrl-C used to be lost about half the time: when it came as the workers ended
    # the block (the block returned as if never interrupted), or in the __del__ of a
    # dropped handle (Python ignores an exception there), so the loop went on
    env, _ = layout_env("2")
    proc = run_client("""
        import os, random, signal, threading, time
        import numpy as np
        import spmdlab
        from spmdlab import spmd_plus
        from spmdlab.matlab import distributed, gather
        from spmdlab.pool import _shared
        pool = spmdlab.start_pool(2)
        D = distributed(np.zeros(4))
        lost = 0
        for trial in range(16):
            timer = threading.Timer(random.uniform(0.05, 0.3), os.kill,
                                    (os.getpid(), signal.SIGINT))
            try:
                timer.start()
                started = time.monotonic()
                while time.monotonic() - started < 3:
                    x = pool.spmd(lambda: spmd_plus(1))  # the last handle dropped
                    D = D + 1
                lost += 1
            except KeyboardInterrupt:
                pass
            timer.join()
        print("LOST", lost)
        held = pool.spmd(lambda: sorted(k for k in _shared.namespace
                                        if k.startswith("_spmdlab")))
        print("HELD", [len(names) for names in held[:]], x[:], gather(D).shape)
        pool.delete()
    """, env, timeout=180)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "LOST 0" in out, out + proc.stderr
    assert "Exception ignored" not in proc.stderr, proc.stderr
    # every block reached every worker; what the dropped handles held was freed on
    # every worker: only x and D are left
    assert "HELD [2, 2] [2, 2] (4,)" in out, out


def test_killing_the_client_ends_every_worker():
    env, n = layout_env("2")
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import time, spmdlab
        pool = spmdlab.start_pool(2)
        print(*pool.pids, flush=True)
        time.sleep(300)
    """)], env=env, stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in proc.stdout.readline().split()]
        assert len(pids) == n and all(alive(p) for p in pids)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        assert wait_gone(pids), f"workers {pids} outlived their killed client"
    finally:
        proc.kill()


def test_a_pool_that_cannot_start_says_why():
    env, _ = layout_env("2")
    proc = run_client("""
        import spmdlab
        try:
            spmdlab.start_pool(2, launcher_args=["--no-such-option-for-the-launcher"])
        except spmdlab.SpmdError as exc:
            print("ERROR:", exc)
    """, env)
    assert "ERROR: parpool(2): the pool could not start" in proc.stdout, \
        proc.stdout + proc.stderr
    assert "--no-such-option-for-the-launcher" in proc.stdout  # the command and its words
    assert "Its output:" in proc.stdout


def test_a_launcher_that_failed_on_its_own_is_tried_again():
    # Open MPI's launcher sometimes fails before any worker starts (its PMIx server
    # loses a race for its socket); the pool tries again, twice at most, and only then
    env, _ = layout_env("1")
    proc = run_client("""
        import spmdlab
        from spmdlab.pool import _launchers

        real, calls = _launchers.command, []
        def flaky(kind, path, n, args=(), fail=2, words=_launchers.TRANSIENT_START_FAILURES[0]):
            calls.append(kind)
            if len(calls) <= fail:
                return ["sh", "-c", 'echo "$0. We cannot"; exit 1', words]
            return real(kind, path, n, args)
        _launchers.command = flaky
        pool = spmdlab.start_pool(1)
        print("STARTED after", len(calls), "launches")
        pool.delete()
        calls.clear()
        _launchers.command = lambda *a: flaky(*a, fail=3)
        try:
            spmdlab.start_pool(1)
        except spmdlab.SpmdError as exc:
            print("THREE FAILED after", len(calls), "launches:", "We cannot" in str(exc))
        calls.clear()
        _launchers.command = lambda *a: flaky(*a, words="no such host")
        try:
            spmdlab.start_pool(1)
        except spmdlab.SpmdError as exc:
            print("OTHER FAILED after", len(calls), "launches")
    """, env)
    out = proc.stdout + proc.stderr
    assert "STARTED after 3 launches" in out, out
    assert "THREE FAILED after 3 launches: True" in out, out
    assert "OTHER FAILED after 1 launches" in out, out


def test_the_srun_command_line(monkeypatch):
    # what the pool asks of srun, on any machine: the PMI its MPI speaks (a cluster's
    # default is often none: every worker a job of one), the client's environment passed
    # on, --overlap when the client is itself a step's task, the user's --mpi kept
    from spmdlab.pool import _launchers

    for name in ("SLURM_STEP_ID", "SLURM_JOB_NODELIST", "SLURM_NODELIST"):
        monkeypatch.delenv(name, raising=False)
    plugin = "--mpi=pmix" if is_open_mpi() else "--mpi=pmi2"
    worker = [sys.executable, "-m", "spmdlab.pool._worker"]
    assert _launchers.command("srun", "/s/srun", 3) == [
        "/s/srun", "-n", "3", "--kill-on-bad-exit=1", "--export=ALL", plugin] + worker
    monkeypatch.setenv("SLURM_STEP_ID", "0")
    assert _launchers.command("srun", "srun", 2, ["--mpi=cray_shasta", "-N", "2"]) == [
        "srun", "-n", "2", "--kill-on-bad-exit=1", "--export=ALL", "--overlap",
        "--mpi=cray_shasta", "-N", "2"] + worker
    # loopback only when the allocation is this host alone
    host = __import__("socket").gethostname()
    assert _launchers.spans_hosts("srun")  # srun outside an allocation: anywhere
    monkeypatch.setenv("SLURM_JOB_NODELIST", host.split(".")[0])
    assert not _launchers.spans_hosts("srun")
    monkeypatch.setenv("SLURM_JOB_NODELIST", f"{host}-other")  # a login node's client
    assert _launchers.spans_hosts("srun")
    monkeypatch.setenv("SLURM_JOB_NODELIST", f"{host},{host}-other")
    assert _launchers.spans_hosts("srun")
    assert not _launchers.spans_hosts("mpich")


def test_srun_where_there_is_none_says_so():
    env, _ = layout_env("1")
    env["PATH"] = os.path.dirname(sys.executable)  # this Python's mpiexec, no srun
    proc = run_client("""
        import spmdlab
        try:
            spmdlab.start_pool(1, launcher="srun")
        except FileNotFoundError as exc:
            print("ERROR:", exc)
        try:
            spmdlab.start_pool(1, launcher="slurm")
        except ValueError as exc:
            print("ERROR:", exc)
    """, env)
    assert "ERROR: launcher='srun': srun is not on PATH" in proc.stdout, \
        proc.stdout + proc.stderr
    assert ("ERROR: parpool(1): launcher must be one of 'auto', 'mpich', 'openmpi', 'srun' "
            "(got 'slurm')") in proc.stdout, proc.stdout + proc.stderr


def test_bad_calls_say_what_is_wrong():
    client_side()
    env, _ = layout_env("1")
    proc = run_client("""
        import threading, spmdlab
        import numpy as np
        from spmdlab.matlab import parpool, gcp, delete
        for bad in (0, -1, 1.5, "2"):
            try:
                parpool(bad)
            except spmdlab.SpmdValueError as exc:
                print("BAD", exc)
        assert gcp("nocreate") is None
        pool = parpool(1)
        assert gcp() is pool and gcp("nocreate") is pool
        try:
            parpool(1)
        except spmdlab.SpmdError as exc:
            print("TWICE", exc)
        c = pool.spmd(lambda: 1)
        for bad in (0, 2, "1", 1.5):
            try:
                c[bad]
            except spmdlab.SpmdValueError as exc:
                print("INDEX", exc)
        assert c[1.0] == 1 and c[[1.0]] == [1]  # MATLAB's x{1} with 1 a double
        try:
            pool.spmd(5)
        except spmdlab.SpmdTypeError as exc:
            print("BLOCK", exc)
        ns = {"lock": threading.Lock()}
        try:
            pool.run_cell("y = lock", ns)
        except spmdlab.SpmdTypeError as exc:
            print("SEND", exc)
        # workers picked as a Composite in a script picks them: c[1:2] was Python's
        # slice of the list of workers (none here), c[[]] a KeyError
        try:
            c[1:2]
        except spmdlab.SpmdTypeError as exc:
            print("SLICE", exc)
        print("PICKED", c[range(1, 2)], c[np.array([1])], c[[]], c[:], c[np.array(1)],
              c.exist(np.array(1)))
        # what cannot be a distributed array is refused on the client: a ragged list
        # raised numpy's ValueError, an unpicklable object a bare TypeError, and a dict
        # failed on every worker after its part was sent
        from spmdlab.matlab import distributed, gather
        for bad in ([[1, 2], [3]], np.array([threading.Lock()]), {"a": 1}, None):
            try:
                distributed(bad)
            except spmdlab.SpmdTypeError as exc:
                print("DISTRIBUTED", exc)
        print("THEN", gather(distributed([[1, 2], [3, 4]])).tolist())
        for lab in (0, 2, -1):  # MATLAB's gather(D, lab): a worker of the pool (any was taken)
            try:
                gather(distributed([1, 2]), lab)
            except spmdlab.SpmdValueError as exc:
                print("LAB", exc)
        print("LAB 1", gather(distributed([1, 2]), 1).tolist())
        import copy, pickle  # a handle copied or unpickled on the client (a RuntimeError)
        for handle in (c, distributed([1, 2])):
            for copied in (copy.copy, lambda h: pickle.loads(pickle.dumps(h))):
                try:
                    copied(handle)
                except spmdlab.SpmdTypeError as exc:
                    print("COPIED", exc)
        # a MATLAB collective on the client named itself "called" (its wrapper's name)
        from spmdlab.matlab import gop, spmdPlus, spmdReceive
        for fn, args in ((spmdPlus, (1,)), (gop, ("plus", 1)), (spmdReceive, ())):
            try:
                fn(*args)
            except spmdlab.SpmdError as exc:
                print("CLIENT", exc)
        delete(gcp)  # MATLAB's delete(gcp), as written: it was "cannot delete a function"
        assert gcp("nocreate") is None
        delete(gcp)
        try:
            c[1]
        except spmdlab.SpmdError as exc:
            print("DELETED", exc)
    """, env)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert out.count("BAD parpool: the number of workers must be a positive integer") == 4
    assert "TWICE parpool: a pool of 1 workers is already open" in out
    assert "BLOCK spmd: the block must be a function to run on every worker (got 5 that " \
        "is a int)" in out, out
    for shown in ("0", "2", "'1'", "1.5"):
        assert f"INDEX Composite[{shown}]: workers are numbered 1 to 1 (got {shown})" in out
    assert "SEND spmd: the client's variable 'lock' (a lock) cannot be sent" in out
    assert "SLICE Composite[1:2]: only c[:] slices a Composite; pick workers with a list " \
        "or range of worker numbers (1-based), such as c[range(2, 2)]" in out, out
    assert "PICKED [1] [1] [] [1] 1 True" in out, out
    assert out.count("DISTRIBUTED distributed (the client): the value must be a numpy array, "
                     "a torch tensor, a CuPy array or numbers (not objects)") == 4, out
    assert "THEN [[1.0, 2.0], [3.0, 4.0]]" in out, out  # MATLAB's literals: doubles
    for lab in (0, 2, -1):
        assert f"LAB gather (the client): 'lab' must be a worker number from 1 to 1 (got " \
            f"{lab}); worker numbers are 1-based" in out, out
    assert "LAB 1 [1.0, 2.0]" in out, out
    for what in ("Composite", "Composite", "distributed array", "distributed array"):
        assert f"COPIED a {what} of a pool can only be sent to that pool's workers: " \
            f"pickle.loads and copy.copy of one on the client are refused" in out, out
    for name in ("spmdPlus", "gop", "spmdReceive"):
        assert f"CLIENT {name} (the client): this process is a pool's client" in out, out
    assert "DELETED Composite[1]: the pool has been deleted" in out


def test_matlabs_parpool_takes_a_whole_double():
    client_side()
    # every MATLAB number is a double: spmdlab.matlab takes spmd(2.0), labSend(x, 2.0),
    # zeros(3.0), ... but parpool(1.0) was "the number of workers must be a positive
    # integer (got 1.0)"; a fraction is still refused
    env, _ = layout_env("1")
    proc = run_client("""
        import spmdlab
        from spmdlab.matlab import parpool, delete, gcp
        try:
            parpool(1.5)
        except spmdlab.SpmdValueError as exc:
            print("BAD", exc)
        pool = parpool(1.0)
        print("WORKERS", pool.NumWorkers, pool.spmd(lambda: spmdlab.spmd_size())[:])
        delete(gcp)
    """, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "BAD parpool: the number of workers must be a positive integer (got 1.5)" in \
        proc.stdout, proc.stdout + proc.stderr
    assert "WORKERS 1 [1]" in proc.stdout, proc.stdout + proc.stderr


def test_matlabs_parpool_forms_with_resources_and_name_value_arguments():
    # parpool("Processes", n) and parpool("local", n), MATLAB's usual forms, and
    # parpool(n, "SpmdEnabled", true) were Python's TypeError (parpool() takes from 0 to
    # 1 positional arguments); gcp(1) was an AttributeError ('int' object has no
    # attribute 'lower')
    env, _ = layout_env("1")
    proc = run_client("""
        import spmdlab
        from spmdlab.matlab import parpool, delete, gcp
        for args in (("Threads", 1), (1, "SpmdEnabled", True), ("Processes", 0)):
            try:
                parpool(*args)
            except spmdlab.SpmdValueError as exc:
                print("BAD", exc)
        try:
            gcp(1)
        except spmdlab.SpmdValueError as exc:
            print("GCP", exc)
        pool = parpool("Processes", 1.0)
        print("WORKERS", pool.NumWorkers, gcp() is pool)
        delete(gcp)
        pool = parpool("local", 1)
        print("LOCAL", pool.NumWorkers)
        delete(gcp)
    """, env)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "BAD parpool: the number of workers must be a positive integer (got 'Threads'), " \
        "after the resources if any: the only ones are 'Processes' (or the 'local' " \
        "profile), a pool's workers being MPI processes started by the launcher" in out, out
    assert "BAD parpool: MATLAB's name-value arguments are not available (got " \
        "'SpmdEnabled', True)" in out, out
    assert "BAD parpool: the number of workers must be a positive integer (got 0)" in out, out
    assert "GCP gcp: the option must be 'nocreate' (got 1)" in out, out
    assert "WORKERS 1 True" in out and "LOCAL 1" in out, out


def test_bad_pool_arguments_and_a_second_open_pool_are_named():
    # launcher_args="-foo" was split into its characters ("mpiexec -n 2 - f o o"), a
    # launcher's bad name was a bare ValueError, a timeout of -1 waited for nothing;
    # a Composite of a pool still open beside another was said to be of a deleted one
    env, _ = layout_env("1")
    proc = run_client("""
        import spmdlab
        from spmdlab.pool import Pool
        for kwargs in ({"launcher_args": "-foo"}, {"launcher_args": ["-n", 2]},
                       {"launcher_args": 5}, {"launcher": "nope"}, {"timeout": -1},
                       {"timeout": "10"}):
            try:
                Pool(1, **kwargs)
            except spmdlab.SpmdError as exc:
                print("BAD", type(exc).__name__, exc)
        assert spmdlab.pool.current_pool(create=False) is None
        first = Pool(1)
        second = Pool(1)
        c = first.spmd(lambda: 5)
        try:
            second.spmd(lambda c: c, c)
        except spmdlab.SpmdValueError as exc:
            print("OTHER", exc)
        try:
            second.run_cell("y = c", {"c": c})
        except spmdlab.SpmdValueError as exc:
            print("OTHER", exc)
        first.delete()
        try:
            second.spmd(lambda c: c, c)
        except spmdlab.SpmdValueError as exc:
            print("DELETED", exc)
        assert spmdlab.pool.current_pool(create=False) is second
        third = Pool(1)
        third.delete()  # the current pool was lost: gcp("nocreate") gave None
        assert spmdlab.pool.current_pool(create=False) is second, "second is open"
        second.delete()
        assert spmdlab.pool.current_pool(create=False) is None
    """, env)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    for shown in ("'-foo'", "['-n', 2]", "5"):
        assert f"BAD SpmdTypeError parpool(1): launcher_args must be a list of strings, one " \
            f"per argument, such as ['-hosts', 'a,b'] (got {shown})" in out, out
    assert "BAD SpmdValueError parpool(1): launcher must be one of 'auto', 'mpich', " \
        "'openmpi', 'srun' (got 'nope')" in out, out
    for shown in ("-1", "'10'"):
        assert f"BAD SpmdValueError parpool(1): timeout must be a positive number of " \
            f"seconds (got {shown})" in out, out
    assert "OTHER spmd: a Composite of another pool (of 1 workers, still open beside this " \
        "one) cannot be sent to this pool's workers" in out, out
    assert "OTHER spmd: c belongs to another pool (of 1 workers, still open beside this " \
        "one)" in out, out
    assert "DELETED spmd: a Composite of another pool, which has been deleted, cannot be " \
        "sent to this pool's workers" in out, out


def test_start_pool_checks_its_arguments_before_it_reuses_or_deletes_the_open_pool():
    # with a pool of 1 open, start_pool(1, launcher="nope") returned it, the bad launcher
    # unseen, and start_pool(0) deleted it before Pool(0) raised
    env, _ = layout_env("1")
    proc = run_client("""
        import spmdlab
        pool = spmdlab.start_pool(1)
        for n, kwargs in ((1, {"launcher": "nope"}), (1, {"timeout": -1}),
                          (1, {"launcher_args": "-foo"}), (0, {}), ("2", {}),
                          (1, {"laucher": "mpich"})):
            try:
                spmdlab.start_pool(n, **kwargs)
                print("ACCEPTED", n, kwargs)
            except (spmdlab.SpmdError, TypeError) as exc:
                print("BAD", type(exc).__name__, exc)
        assert not pool.closed and spmdlab.pool.current_pool(create=False) is pool
        assert pool.spmd(lambda: 7)[1] == 7
        pool.delete()
    """, env)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "ACCEPTED" not in out, out
    assert "BAD SpmdValueError parpool(1): launcher must be one of 'auto', 'mpich', " \
        "'openmpi', 'srun' (got 'nope')" in out, out
    assert "BAD SpmdValueError parpool(1): timeout must be a positive number of seconds " \
        "(got -1)" in out, out
    assert "BAD SpmdTypeError parpool(1): launcher_args must be a list of strings" in out, out
    for shown in ("0", "'2'"):
        assert f"BAD SpmdValueError parpool: the number of workers must be a positive " \
            f"integer (got {shown})" in out, out
    assert "BAD SpmdTypeError start_pool() got an unexpected keyword argument 'laucher'" in out, out


def test_bad_spmd_magic_arguments_are_spmdlab_errors():
    client_side()
    # they were bare ValueErrors, and %%spmd 2 1 started a pool before it was refused
    pytest.importorskip("IPython")
    env, _ = layout_env("1")
    proc = run_client("""
        import spmdlab
        from IPython.core.interactiveshell import InteractiveShell
        shell = InteractiveShell.instance()
        shell.run_line_magic("load_ext", "spmdlab")
        for line in ("x", "-1", "1.5", "1 2 3", "\u00b2", "2 1", "0 2"):
            try:
                shell.run_cell_magic("spmd", line, "y = 1")
            except spmdlab.SpmdValueError as exc:
                print("BAD", exc)
        assert spmdlab.pool.current_pool(create=False) is None  # none was started
        pool = spmdlab.start_pool(1)
        try:
            shell.run_cell_magic("spmd", "2 3", "y = 1")
        except spmdlab.SpmdValueError as exc:
            print("FEW", exc)
        shell.run_cell_magic("spmd", "1, 3", "y = spmd_size()")
        print("RAN", shell.user_ns["y"][:])
        pool.delete()
    """, env)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    for shown in ("'x'", "'-1'", "'1.5'", "'1 2 3'", "'\u00b2'"):
        assert f"BAD %%spmd: give nothing, n or m n, as MATLAB's spmd(n) and spmd(m, n) " \
            f"(got {shown})" in out, out
    assert "BAD %%spmd 2 1: needs 1 <= m <= n (got m = 2, n = 1)" in out, out
    assert "BAD %%spmd 0 2: needs 1 <= m <= n (got m = 0, n = 2)" in out, out
    assert "FEW %%spmd 2 3: needs at least m = 2 workers in the pool, which has 1" in out, out
    assert "RAN [1]" in out, out


def test_the_pool_composite_class_makes_one_on_the_client():
    client_side()
    # spmdlab.pool.Composite's page says Composite() on the client makes an empty one:
    # the class itself raised a bare TypeError telling to "use Composite() on the client"
    env, _ = layout_env("2")
    proc = run_client("""
        import spmdlab
        from spmdlab import pool as pools
        pool = spmdlab.start_pool(2)
        c = pools.Composite()
        print("EMPTY", type(c).__name__, c.exist(), len(c))
        c[2] = "two"
        print("SET", c.exist(), c[2])
        d = pools.Composite(5, pool=pool)
        print("VALUE", d[:], pool.spmd(lambda v: v + spmdlab.spmd_index(), d)[:])
        try:
            pools.Composite(pool="mine")
        except spmdlab.SpmdTypeError as exc:
            print("BAD", exc)
        pool.delete()
        try:
            pools.Composite(pool=pool)
        except spmdlab.SpmdError as exc:
            print("DELETED", exc)
        """, env)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "EMPTY Composite [False, False] 2" in out, out
    assert "SET [False, True] two" in out, out
    assert "VALUE [5, 5] [6, 7]" in out, out
    assert "BAD Composite(): 'pool' must be a Pool or None (got str)" in out, out
    assert "DELETED Composite(): the pool has been deleted" in out, out


def test_what_a_worker_cannot_read_fails_the_call_and_the_pool_goes_on(tmp_path):
    client_side()
    # a value a worker cannot unpickle (a Composite element it does not hold, a class
    # only the client can import) fails that call, naming the worker: it used to kill
    # the worker's listener, and the client waited for good
    (tmp_path / "client_only.py").write_text("class Thing:\n    v = 3\n")
    (tmp_path / "workers").mkdir()
    (tmp_path / "workers" / "worker_only.py").write_text("class Thing:\n    v = 4\n")
    env, _ = layout_env("2")
    proc = run_client(f"""
        import sys, time
        sys.path.insert(0, {str(tmp_path)!r})
        import numpy as np, client_only, spmdlab
        from spmdlab.matlab import Composite, distributed, gather, zeros
        pool = spmdlab.start_pool(2)
        e = Composite()
        e[2] = 1
        calls = [lambda: pool.spmd(lambda x: x, e),  # refused at the client
                 lambda: pool.spmd(lambda x: x, [[e]]),  # (deeper): on worker 1
                 lambda: pool.spmd(lambda t: t.v, client_only.Thing()),
                 lambda: e.__setitem__(1, client_only.Thing())]
        for call in calls:
            try:
                call()
            except spmdlab.SpmdError as exc:
                print("FAILED", str(exc).splitlines()[0])
            assert pool.spmd(lambda: spmdlab.spmd_plus(1))[:] == [2, 2]
        D = distributed(np.arange(4.0))
        D2 = distributed(D)                         # a copy
        D2[0] = 9
        print("COPY", gather(D).tolist(), gather(D2).tolist())
        print("ZEROS", gather(zeros(2, 3, "distributed")).shape)
        # and what the client cannot read: an item of a class only the workers import,
        # sent to a client queue in a long block, fails that block at once (it used to
        # leave it running there, and the other worker's item to fail the next block)
        pool.spmd(lambda: sys.path.insert(0, {str(tmp_path / "workers")!r}))
        q = spmdlab.DataQueue()
        def sends():
            import time, worker_only
            q.send(worker_only.Thing())
            time.sleep(30)
        started = time.monotonic()
        try:
            pool.spmd(sends)
        except spmdlab.SpmdError as exc:
            print("UNREAD", str(exc).splitlines()[0], time.monotonic() - started < 10)
        print("NEXT", pool.spmd(lambda: spmdlab.spmd_plus(1))[:])
        pool.delete()
        pool = spmdlab.start_pool(2)
        try:
            pool.spmd(lambda A: A, D)
        except spmdlab.SpmdValueError as exc:
            print("OLD", exc)
        pool.delete()
    """, env, timeout=60)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "FAILED spmd: argument 1, a Composite, has no element on worker(s) 1 of the " \
        "block (it has elements on worker(s) 2)" in out, out
    assert "FAILED spmd: worker 1 of 2 failed: SpmdValueError: this worker holds no " \
        "element of the Composite" in out
    # both workers fail to read the class; which one the client hears of first varies
    assert re.search(r"FAILED spmd: worker [12] of 2 failed( \(worker [12] failed too\))?: "
                     r"ModuleNotFoundError", out), out
    assert "FAILED Composite[1] =: worker 1 of 2 failed: ModuleNotFoundError: No module " \
        "named 'client_only' (the client sent worker 1 a value it cannot read: is the " \
        "module that defines it importable on the workers?)" in out, out
    assert "COPY [0.0, 1.0, 2.0, 3.0] [9.0, 1.0, 2.0, 3.0]" in out
    assert "ZEROS (2, 3)" in out
    assert "OLD spmd: a distributed array of another pool, which has been deleted" in out
    assert re.search(r"UNREAD spmd: worker [12] of 2 failed: ModuleNotFoundError: No module "
                     r"named 'worker_only' \(worker [12] sent a value this client cannot "
                     r"read: is the module that defines it importable here\?\) True", out), out
    assert "NEXT [2, 2]" in out, out


def test_an_error_the_client_cannot_unpickle_is_shown_and_the_pool_kept(tmp_path):
    client_side()
    # the outcome of the failed block carried the exception itself, which the client
    # could not unpickle (its class only the workers import; an __init__ of two arguments):
    # the error was lost ("No module named ..."), the worker's outcome never arrived, and
    # the pool was restarted as "did not stop", its variables lost
    (tmp_path / "worker_only.py").write_text(
        "class Trouble(Exception):\n    pass\n\n"
        "def fail():\n    raise Trouble('the real reason')\n")
    env, _ = layout_env("2")
    proc = run_client(f"""
        import spmdlab
        from spmdlab import SpmdError, spmd_barrier, spmd_index, spmd_plus
        pool = spmdlab.start_pool(2)
        keep = pool.spmd(lambda: spmd_index() * 7)
        pool.spmd(lambda: __import__("sys").path.insert(0, {str(tmp_path)!r}))
        def block():
            import worker_only
            if spmd_index() == 2:
                worker_only.fail()
            spmd_barrier()
        class Pair(Exception):  # made at the prompt, but pickle cannot make it again
            def __init__(self, a, b):
                super().__init__(f"{{a}} and {{b}}")
        def pair():
            if spmd_index() == 2:
                raise Pair(1, 2)
            spmd_barrier()
        for fn in (block, pair):
            try:
                pool.spmd(fn)
            except SpmdError as exc:
                print("FAILED", str(exc).splitlines()[0], exc.remote_type, exc.__cause__)
        print("KEPT", keep[:], pool.spmd(lambda: spmd_plus(1))[:])
    """, env, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "FAILED spmd: worker 2 of 2 failed: Trouble: the real reason " \
        "worker_only.Trouble None" in proc.stdout, proc.stdout + proc.stderr
    assert "FAILED spmd: worker 2 of 2 failed: Pair: 1 and 2 __main__.Pair None" in \
        proc.stdout, proc.stdout + proc.stderr
    assert "KEPT [7, 14] [2, 2]" in proc.stdout, proc.stdout + proc.stderr
    assert "restarted" not in proc.stderr, proc.stderr


def test_an_error_whose_str_fails_leaves_the_pool():
    client_side()
    # describing the error called str() of it, outside any try: the worker's loop ended,
    # and with it every worker and the pool
    env, _ = layout_env("2")
    proc = run_client("""
        import spmdlab
        from spmdlab import SpmdError, spmd_barrier, spmd_index, spmd_plus
        class Unsayable(Exception):
            def __str__(self):
                raise RuntimeError("no words")
        pool = spmdlab.start_pool(2)
        keep = pool.spmd(lambda: spmd_index() * 7)
        def block():
            if spmd_index() == 2:
                raise Unsayable()
            spmd_barrier()
        try:
            pool.spmd(block)
        except SpmdError as exc:
            print("FAILED", str(exc).splitlines()[0])
        print("KEPT", keep[:], pool.spmd(lambda: spmd_plus(1))[:])
    """, env, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "FAILED spmd: worker 2 of 2 failed: Unsayable: <exception str() failed>" in \
        proc.stdout, proc.stdout + proc.stderr
    assert "KEPT [7, 14] [2, 2]" in proc.stdout, proc.stdout + proc.stderr


def test_what_a_cell_reads_and_assigns():
    from spmdlab.pool import _cells

    assigned, definitions, loaded = _cells.names(textwrap.dedent("""
        import numpy as np
        from os import path as p
        a = b + 1
        c, (d, *e) = f
        g += 1
        for i in range(n):
            h = [j for j in k]
        with open(q) as r:
            pass
        def fn(x):
            return x + outer
        class K:
            attr = 1
        if (w := 3):
            pass
        try:
            pass
        except E as err:
            pass
    """))
    assert assigned == ["np", "p", "a", "c", "d", "e", "g", "i", "h", "r", "fn", "K", "w",
                        "err"]
    assert definitions == {"np", "p", "fn", "K"}
    assert {"b", "f", "g", "n", "k", "q", "outer", "open", "range", "E"} <= loaded
    assert "j" in loaded and "x" in loaded
    # a function's global binds the cell's name (a counter it bumps came back as the
    # client's, unchanged, and the next cell sent that one); not a name it only reads,
    # nor a nested function's own
    assigned, definitions, _ = _cells.names(textwrap.dedent("""
        def bump():
            global counter, seen, table
            counter += 1
            print(seen)
            table[0] = 1
            def inner():
                counter = 0
        def other():
            level = 5
    """))
    assert assigned == ["bump", "counter", "table", "other"], assigned
    assert definitions == {"bump", "other"}
    assert _cells.is_prompt_name("_i3") and _cells.is_prompt_name("Out")
    assert not _cells.is_prompt_name("_x")
    # a cell's last expression is shown, as Python's prompt shows a line (not None)
    shown = []
    hook, sys.displayhook = sys.displayhook, shown.append
    try:
        for code in ("a = 2\na * 3", "a = 2", "", "a = 4\nNone", "a = 5\na; a + 1",
                     "a = 6\na;", "a = 7\na;  # (suppressed, as MATLAB's a;)\n",
                     "a = 8\nf'{a};'"):
            ns: dict = {}
            body, last = _cells.compiled(code)
            exec(body, ns)
            if last is not None:
                exec(last, ns)
    finally:
        sys.displayhook = hook
    assert shown == [6, None, 6, "8;"], shown  # (the displayhook prints None as nothing)


def test_a_cell_that_cannot_compile_fails_on_the_client():
    # return outside a function parses: it failed on every worker, as SpmdError with the
    # worker's internal frames, not as the SyntaxError of the cell's line
    from spmdlab.pool import _cells

    for code in ("x = 1\nreturn x\n", "nonlocal y\n", "def f():\n    x = 1\n    global x\n"):
        with pytest.raises(SyntaxError) as info:
            _cells.names(code, "<spmd cell [3]>")
        assert info.value.filename == "<spmd cell [3]>", info.value


# -- a real Jupyter kernel --------------------------------------------------------------------

jupyter_client = pytest.importorskip("jupyter_client")


class Kernel:
    def __init__(self, env):
        from jupyter_client.manager import KernelManager

        self.km = KernelManager(kernel_name="python3")
        self.km.kernel_cmd = [sys.executable, "-m", "ipykernel_launcher", "-f",
                              "{connection_file}"]
        self.km.start_kernel(env=env)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)

    def run(self, code, timeout=120, interrupt_after=None, interrupt_once=None):
        """Run a cell: its output, error and seconds. The interrupt button is pressed
        ``interrupt_after`` seconds in, once the output holds ``interrupt_once`` (the
        cell's code is running: the kernel ignores an interrupt that comes before)."""
        msg_id = self.kc.execute(code)
        started = time.monotonic()
        interrupted = False
        out, error = [], None
        while True:
            try:
                msg = self.kc.get_iopub_msg(timeout=0.1)
            except Exception:  # queue.Empty
                msg = None
            now = time.monotonic()
            if interrupt_after is not None and not interrupted and \
                    now - started > interrupt_after and \
                    (interrupt_once is None or interrupt_once in "".join(out)):
                self.km.interrupt_kernel()
                interrupted = True
            assert now - started < timeout, f"cell hung: {code!r}; output: {''.join(out)}"
            if msg is None or msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                out.append(content["text"])
            elif kind in ("execute_result", "display_data"):
                out.append(content["data"].get("text/plain", ""))
            elif kind == "error":
                error = content
            elif kind == "status" and content["execution_state"] == "idle":
                return "".join(out), error, time.monotonic() - started

    def close(self):
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_notebook_kernel_drives_a_pool(layout):
    if layout != "2":
        client_side()  # one layout under Open MPI: its kernel starts the same pool
    if layout == "4":  # (CI time: 2x2 runs the same cells at 4 workers, two nodes)
        pytest.skip("the notebook at 4 workers runs at 2x2")
    env, n = layout_env(layout)
    kernel = Kernel(env)
    try:
        def ok(code, **kw):
            out, error, seconds = kernel.run(code, **kw)
            assert error is None, f"{code!r} failed: {error and error['evalue']}\n{out}"
            return out

        ok("%load_ext spmdlab")
        ok(f"from spmdlab.matlab import *\nfrom spmdlab import DataQueue\npool = parpool({n})")
        out = ok("%%spmd\nx = spmdIndex() * 10\nprint('worker says', x)")
        for k in range(1, n + 1):
            assert f"Worker {k}: worker says {10 * k}" in out, out
        assert f"[{', '.join(str(10 * k) for k in range(1, n + 1))}]" in ok("x[:]")
        # a cell's last value is shown, each worker's (IPython shows a cell's last
        # value, MATLAB each worker's unsuppressed result); None is not
        out = ok("%%spmd\nx + 1")
        for k in range(1, n + 1):
            assert f"Worker {k}: {10 * k + 1}" in out, out
        assert "Worker" not in ok("%%spmd\nspmdBarrier()")
        ok("%%spmd 1 2\nv = spmdSize()")  # spmd(m, n): every worker up to n
        assert f"<Composite 'v' on a pool of {n}: elements on worker" in ok("v")
        assert str(min(2, n)) in ok("v[1]")
        ok("scale = 3")
        ok("%%spmd\ny = x * scale")
        assert str(30 * n) in ok(f"y[{n}]")
        # an error on one worker: named, with the cell's own line; the pool survives
        out, error, _ = kernel.run(f"%%spmd\nz = 1\nif spmdIndex() == {n}:\n"
                                   f"    raise ValueError('no good')\nspmdBarrier()")
        assert error is not None and error["ename"] == "SpmdError", error
        assert f"worker {n} of {n} failed: ValueError: no good" in error["evalue"]
        assert "line 4" in error["evalue"] and "raise ValueError" in error["evalue"]
        # named as the notebook numbers it, In[k] (it said the next cell's number)
        number = re.search(r"<spmd cell \[(\d+)\]>", error["evalue"]).group(1)
        assert "raise ValueError('no good')" in ok(f"print(In[{number}])")
        # the interrupt button stops a cell stuck in a collective, on every worker
        stuck = "print('waiting')\nimport time\n" + (
            "time.sleep(300)" if n == 1 else
            "if spmdIndex() == 1:\n    spmdReceive(2)\nelif spmdIndex() == 2:\n"
            "    time.sleep(300)\nelse:\n    spmdBarrier()")  # (no deadlock: 2 sleeps)
        out, error, seconds = kernel.run("%%spmd\n" + stuck, interrupt_after=3,
                                         interrupt_once="Worker 1: waiting")
        assert error is not None and error["ename"] == "KeyboardInterrupt", error
        assert seconds < 15
        assert str(n * (n + 1) // 2) in ok("%%spmd\ns = spmdPlus(spmdIndex())\nprint(s)")
        # progress from the workers to a listener on the client, while the cell runs
        ok("seen = []\nq = DataQueue()\nl = q.after_each(seen.append)")
        ok("%%spmd\nfor i in range(50):\n    q.send((spmdIndex(), i))")
        assert str(50 * n) in ok("len(seen)")
        ok("delete(pool)")
        assert "None" in ok("print(gcp('nocreate'))")
    finally:
        kernel.close()


def test_restarting_the_kernel_ends_the_workers():
    env, _ = layout_env("2")
    kernel = Kernel(env)
    try:
        out, error, _ = kernel.run("import spmdlab\npool = spmdlab.start_pool(2)\n"
                                   "print(*pool.pids)")
        assert error is None, error
        pids = [int(p) for p in out.split()]
        kernel.km.restart_kernel(now=True)
        assert wait_gone(pids), f"workers {pids} outlived their kernel"
    finally:
        kernel.close()


def test_the_example_notebook_runs():
    client_side()
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("sklearn")  # the examples extra
    pytest.importorskip("matplotlib")
    env, _ = layout_env("2")
    path = os.path.join(os.path.dirname(__file__), "..", "examples",
                        "interactive_pool.ipynb")
    notebook = nbformat.read(path, as_version=4)
    old = dict(os.environ)
    os.environ.update(env, SPMDLAB_EXAMPLE_SHORT="1", MPLBACKEND="Agg")
    try:
        client = nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3",
                                         resources={"metadata": {"path": os.path.dirname(
                                             path)}})
        client.execute()
    finally:
        os.environ.clear()
        os.environ.update(old)
    text = "".join(o.get("text", "") for cell in notebook.cells if cell.cell_type == "code"
                   for o in cell.get("outputs", []))
    assert "Worker 1:" in text and "accuracy" in text, text


def test_a_progress_bars_redraws_keep_their_worker_label(capsys):
    # a progress bar redraws its line after a \r, over the label: on a terminal the
    # line showed " 50%" with no "Worker 2:" before it
    from spmdlab.pool._client import _Output

    output = _Output()
    output.add(2, "stdout", "a\r\nb\r 10%")
    output.add(2, "stdout", "\r 50%\n")
    output.add(1, "stderr", "x\r y")
    output.flush()
    out, err = capsys.readouterr()
    assert out == "Worker 2: a\nWorker 2: b\rWorker 2:  10%\rWorker 2:  50%\n"
    assert err == "Worker 1: x\rWorker 1:  y\n"
