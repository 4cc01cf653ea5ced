"""The monitor's browser page: the token, what it serves, Stop, and a real browser."""

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from spmdlab import spmd_index
from spmdlab.training import TrainingProgressMonitor, trainnet, training_options

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           PYTHONUNBUFFERED="1")


def _request(url, method="GET", headers=None):
    """(status, body) of one request; no exception for 4xx."""
    req = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _split(url):
    base, token = url.split("/?token=")
    return base, token


def test_the_page_answers_only_with_its_token_and_serves_nothing_else(tmp_path, capsys):
    m = TrainingProgressMonitor(metrics=["loss", "validation_loss"], info=["epoch"],
                                plot_file=None, show=False, web=True)
    if spmd_index() != 1:  # only worker 1 serves
        assert m.url is None
        m.close()
        return
    try:
        printed = capsys.readouterr().out
        assert re.fullmatch(r"monitor: http://127\.0\.0\.1:\d+/\?token=[\w-]{20,}\n",
                            printed), printed
        assert m.url in printed
        base, token = _split(m.url)
        assert m._web.server.server_address[0] == "127.0.0.1"  # never other interfaces
        for step in range(1, 6):
            m.record_metrics(step, loss=1.0 / step)
        m.record_metrics(5, validation_loss=0.3)
        m.update_info(epoch="1 of 2")
        m.progress = 50
        # without the token, or with a wrong one: 403, whatever the path or method
        for url, method in [(base + "/", "GET"), (base + "/?token=wrong", "GET"),
                            (base + "/data", "GET"), (base + "/stop", "POST"),
                            (base + "/stop?token=" + token[:-1], "POST"),
                            (base + "/etc/passwd", "GET")]:
            assert _request(url, method)[0] == 403, url
        assert not m.stop
        # with it: the page (everything inline: no other request, no CDN), the data
        status, page = _request(m.url)
        assert status == 200 and b"uPlot" in page and b"<script src" not in page
        assert b"http://" not in page.replace(b"http://www.w3.org", b"") and \
            b"https://" not in page.replace(b"https://github.com/leeoniya/uPlot", b"")
        status, body = _request(f"{base}/data?token={token}&since=0")
        d = json.loads(body)
        assert status == 200 and d["next"] == 6 and d["progress"] == 50
        assert d["panels"] == [["loss", ["loss", "validation_loss"]]]
        assert d["info"] == {"epoch": "1 of 2"} and d["records"][-1] == [5.0, {
            "validation_loss": 0.3}] and not d["stop"] and not d["closed"]
        assert json.loads(_request(f"{base}/data?token={token}&since=6")[1])["records"] == []
        # the token in a header works too; nothing else is served, even with the token
        assert _request(base + "/data", headers={"X-Spmdlab-Token": token})[0] == 200
        for path in ("/monitor.html", "/static/uPlot.min.css", "/../setup.cfg", "/x"):
            assert _request(f"{base}{path}?token={token}")[0] == 404, path
        assert _request(f"{base}/stop?token={token}")[0] == 405  # GET cannot stop
        # another site's page that makes the browser ask us (DNS rebinding): 403
        assert _request(m.url, headers={"Host": "example.com"})[0] == 403
        # Stop: a POST with the token sets stop, as Ctrl-C does
        assert _request(f"{base}/stop?token={token}", "POST")[0] == 200
        assert m.stop and json.loads(_request(f"{base}/data?token={token}")[1])["stop"]
    finally:
        m.close()
    with pytest.raises(OSError):  # it stopped with the monitor
        urllib.request.urlopen(m.url, timeout=5)


def test_bad_web_arguments_are_named_on_every_worker():
    from spmdlab.errors import SpmdValueError

    for bad in (-1, 70000, "8080", 1.5):
        with pytest.raises(SpmdValueError, match=r"TrainingProgressMonitor \(worker \d+ "
                                                 r"of \d+\): web must be True or a port"):
            TrainingProgressMonitor(metrics=["loss"], plot_file=None, web=bad)
    with pytest.raises(SpmdValueError, match="monitor_web"):
        training_options("sgdm", monitor_web="yes")


STOP_SCRIPT = """
import sys, time
from spmdlab import spmd_plus, spmd_index, spmd_cat
from spmdlab.training import TrainingProgressMonitor
m = TrainingProgressMonitor(metrics=["loss"], plot_file=None, show=False, web=True)
for step in range(1, 100000):
    m.record_metrics(step, loss=spmd_plus(1.0 / step))
    if spmd_plus(float(m.stop)) > 0:   # worker 1's request, to every worker
        break
    time.sleep(0.02)
m.status = "stopped"
m.close()
steps = spmd_cat(step)
if spmd_index() == 1:
    print("stopped at", steps.tolist())
"""


@pytest.mark.mpi_skip
@pytest.mark.parametrize("layout", [2, "2x2"])
def test_stop_over_http_stops_every_worker_at_the_same_iteration(layout, tmp_path):
    from conftest import is_open_mpi, mpiexec_args

    env = dict(ENV)
    if layout == "2x2":
        if is_open_mpi():
            pytest.skip("simulated nodes need MPICH")
        env["MPIR_CVAR_NUM_CLIQUES"] = "2"
    script = tmp_path / "stop.py"
    script.write_text(STOP_SCRIPT)
    with _job(mpiexec_args(2 if layout == 2 else 4) + [sys.executable, str(script)],
              env=env) as proc:
        base, token = _split(_wait_for_url(proc))
        time.sleep(1.0)
        assert _request(f"{base}/stop", "POST")[0] == 403  # no token: nothing happens
        time.sleep(0.5)
        assert proc.poll() is None
        assert _request(f"{base}/stop?token={token}", "POST")[0] == 200
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    steps = json.loads(re.search(r"stopped at (\[.*\])", out).group(1))
    assert len(set(steps)) == 1 and steps[0] > 1, out


@contextlib.contextmanager
def _job(args, env=ENV, cwd=None):
    """A job whose output is read here; killed if it outlives the test."""
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=cwd)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()


def _wait_for_url(proc, deadline=120):
    end = time.monotonic() + deadline
    lines = []
    for line in proc.stdout:
        lines.append(line)
        found = re.search(r"monitor: (http://127\.0\.0\.1:\d+/\?token=[\w-]+)", line)
        if found:
            return found.group(1)
        if time.monotonic() > end:
            break
    proc.kill()
    pytest.fail("no 'monitor: http://...' line: " + "".join(lines) + proc.stderr.read())


def test_trainnet_serves_the_page_through_its_options(capsys):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    x, y = torch.randn(64, 5), torch.randint(0, 3, (64,))
    net = torch.nn.Sequential(torch.nn.Linear(5, 3))
    options = training_options("sgdm", max_epochs=1, mini_batch_size=16, verbose=False,
                               monitor_web=True, execution_environment="parallel-cpu")
    trainnet((x, y), net, "crossentropy", options)
    out = capsys.readouterr().out
    if spmd_index() == 1:
        assert re.search(r"^monitor: http://127\.0\.0\.1:\d+/\?token=", out, re.M), out
    else:
        assert "monitor:" not in out


def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


@pytest.mark.mpi_skip
def test_in_a_headless_browser_a_chart_updates_and_stop_ends_the_job(tmp_path):
    """The trainnet example with --monitor web at 2 workers, watched in Chromium: the page
    loads, a chart gains points, Stop ends the job (exit status 0). The screenshot it
    takes is the guide's, docs/images/web-monitor.png (SPMDLAB_SCREENSHOT=path keeps a
    copy; scripts/screenshots.py sets it)."""
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    webdriver = pytest.importorskip("selenium.webdriver")
    browser, driver_path = _chromium(), shutil.which("chromedriver")
    if browser is None or driver_path is None:
        pytest.skip("needs Chromium and its driver (Debian: apt install chromium "
                    "chromium-driver)")
    from conftest import is_open_mpi, mpiexec_args

    if is_open_mpi():  # CI time: the Stop request itself is tested under Open MPI too
        pytest.skip("the browser runs under MPICH")
    script = os.path.join(ROOT, "examples", "trainnet_parallel_auto.py")
    args = mpiexec_args(2) + [sys.executable, script, "--monitor", "web", "--epochs", "40",
                              "--no-plots"]
    with _job(args, cwd=tmp_path) as proc, contextlib.ExitStack() as cleanup:
        url = _wait_for_url(proc)
        options = webdriver.ChromeOptions()
        options.binary_location = browser
        for arg in ("--headless=new", "--no-sandbox", "--disable-gpu",
                    "--window-size=1100,1250", f"--user-data-dir={tmp_path / 'profile'}"):
            options.add_argument(arg)
        driver = webdriver.Chrome(options=options,
                                  service=webdriver.ChromeService(driver_path))
        cleanup.callback(driver.quit)
        driver.get(url)
        assert "training progress" in driver.page_source or "trainnet" in driver.title

        def points():
            return driver.execute_script(
                "return charts.loss ? charts.loss.plot.data[0].length : 0")

        first = _wait(lambda: points() or None, "the loss chart appears")
        _wait(lambda: points() >= max(first + 5, 36) or None, "the loss chart gains points")
        _wait(lambda: driver.execute_script(
            "return charts.loss.plot.data.length") == 3 or None,
            "validation loss drawn over training loss")
        assert driver.find_element("id", "stop").is_enabled()
        shot = tmp_path / "web-monitor.png"
        driver.save_screenshot(str(shot))
        if os.environ.get("SPMDLAB_SCREENSHOT"):
            shutil.copy(shot, os.environ["SPMDLAB_SCREENSHOT"])
        driver.find_element("id", "stop").click()
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert "Stopped manually" in out and "stop requested (Stop button" in out, out
        assert out.strip().splitlines()[-1].startswith("accuracy = ")
        _wait(lambda: "run has ended" in driver.find_element("id", "note").text or None,
              "the page says the run ended")


def _wait(probe, what, timeout=90):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = probe()
        if value:
            return value
        time.sleep(0.25)
    pytest.fail(f"timed out waiting until {what}")


EXAMPLE_RUNS = {  # long runs, so that only Stop can end them within the test; no plots
    "digits_spmd.py": ["--epochs", "1000000", "--plot", "none"],
    "train_digits_custom_loop.py": ["--epochs", "1000", "--plot", "none"],
    "train_multiple_networks.py": ["--epochs", "100000", "--plot", "none"],
    "train_resnet_custom_loop.py": ["--epochs", "1000", "--plot", "none"],
    "trainnet_parallel_auto.py": ["--epochs", "1000", "--no-plots"],
}


@pytest.mark.mpi_skip
@pytest.mark.parametrize("example", sorted(EXAMPLE_RUNS))
def test_every_example_serves_the_page_and_stops_from_it(example, tmp_path):
    """``--monitor web`` at 2 workers: the page's data grows, POST /stop (what the button
    sends) ends the run on every worker, which then reports its accuracy, exit status 0."""
    pytest.importorskip("sklearn")
    if example != "digits_spmd.py":
        pytest.importorskip("torch")
    from conftest import is_open_mpi, mpiexec_args
    from test_examples import OPEN_MPI_EXAMPLES

    # CI time: the page and its Stop do not depend on the example; under Open MPI the
    # demo (the first of the core's examples) serves it
    if is_open_mpi() and example != OPEN_MPI_EXAMPLES[0]:
        pytest.skip("under Open MPI the demo serves the page; the others under MPICH")

    script = os.path.join(ROOT, "examples", example)
    with _job(mpiexec_args(2) + [sys.executable, script, "--monitor", "web",
                                 *EXAMPLE_RUNS[example]], cwd=tmp_path) as proc:
        base, token = _split(_wait_for_url(proc))

        def records():
            return json.loads(_request(f"{base}/data?token={token}")[1])["next"]

        _wait(lambda: records() >= 2 or None, "two metric records")
        assert proc.poll() is None
        assert _request(f"{base}/stop?token={token}", "POST")[0] == 200
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "stop requested (Stop button in the browser)" in out, out
    assert out.strip().splitlines()[-1].startswith("accuracy = "), out
