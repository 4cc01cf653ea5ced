"""Make the pictures of the guide's progress page (docs/images/), from real runs:

- ``terminal.svg``: the live view worker 1 draws in the terminal, captured from tmux
  while ``mpiexec -n 2 python examples/trainnet_parallel_auto.py`` trains (its colours
  kept: the pane's escape codes are drawn by rich's SVG export);
- ``training-progress.png``: the plot that same run saves in ``runs/``;
- ``web-monitor.png``: the browser page, taken by the headless-Chromium test
  (``tests/test_web_monitor.py``, which keeps a copy when ``SPMDLAB_SCREENSHOT`` is set);
- ``profile.png``: the chart of ``prof.save()`` for the guide's own profiler program
  (the ``train.py`` block of docs/guide/errors.md), at 4 workers.

Run from the checkout with the test environment's python (it needs tmux, rich, torch,
scikit-learn, matplotlib, and Chromium with its driver for the page):
``.venv-test-mpich/bin/python scripts/screenshots.py [--only NAME ...]``. Each picture is
replaced only when its run succeeds; a run that fails stops the script with its output.
"""

import argparse
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMAGES = os.path.join(ROOT, "docs", "images")
PYTHON = sys.executable
MPIEXEC = os.path.join(os.path.dirname(PYTHON), "mpiexec")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def _mpiexec(n):
    return [MPIEXEC if os.path.exists(MPIEXEC) else "mpiexec", "-n", str(n)]


def terminal_and_plot(work):
    """The trainnet example in a 100x24 tmux pane: the screen once the view shows a few
    epochs, then the plot the run saved."""
    from rich.console import Console
    from rich.text import Text

    if shutil.which("tmux") is None:
        sys.exit("screenshots: the terminal view needs tmux (apt install tmux)")
    example = os.path.join(ROOT, "examples", "trainnet_parallel_auto.py")
    command = " ".join(_mpiexec(2) + [PYTHON, example, "--epochs", "8"])
    session = f"spmdlab-screenshot-{os.getpid()}"
    done = os.path.join(work, "done")
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "100", "-y", "24",
                    "-c", work, f"{command}; echo $? > {done}; sleep 600"],
                   check=True, env=ENV)
    shot = None
    try:
        deadline = time.monotonic() + 540
        while time.monotonic() < deadline and not os.path.exists(done):
            time.sleep(0.5)
            screen = subprocess.run(["tmux", "capture-pane", "-e", "-p", "-t", session],
                                    capture_output=True, text=True).stdout
            plain = re.sub(r"\x1b\[[0-9;]*m", "", screen)
            epoch = re.search(r"epoch\s+(\d+) of", plain, re.I)
            if epoch and int(epoch.group(1)) >= 5 and "%" in plain:
                shot = shot or screen  # the first screen past epoch 5
        while time.monotonic() < deadline and not os.path.exists(done):
            time.sleep(0.5)
        final = subprocess.run(["tmux", "capture-pane", "-p", "-t", session],
                               capture_output=True, text=True).stdout
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session])
    if not os.path.exists(done) or open(done).read().strip() != "0":
        sys.exit(f"screenshots: the trainnet run failed; its screen:\n{final}")
    if shot is None:
        sys.exit(f"screenshots: no screen showed the live view; the last one:\n{final}")
    console = Console(record=True, width=100, file=io.StringIO(), force_terminal=True,
                      color_system="truecolor")
    console.print(Text.from_ansi(shot.rstrip("\n")), crop=False, soft_wrap=True)
    console.save_svg(os.path.join(IMAGES, "terminal.svg"),
                     title="mpiexec -n 2 python examples/trainnet_parallel_auto.py")
    plots = [os.path.join(d, f) for d, _, files in os.walk(os.path.join(work, "runs"))
             for f in files if f == "training-progress.png"]
    if len(plots) != 1:
        sys.exit(f"screenshots: expected one saved plot under {work}/runs, found {plots}")
    shutil.copy(plots[0], os.path.join(IMAGES, "training-progress.png"))


def web_page(work):
    """The browser page, from the test that drives Chromium (it skips without it)."""
    target = os.path.join(IMAGES, "web-monitor.png")
    fresh = os.path.join(work, "web-monitor.png")
    out = subprocess.run(
        [PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
         os.path.join(ROOT, "tests", "test_web_monitor.py"), "-k", "headless_browser"],
        cwd=ROOT, env=dict(ENV, SPMDLAB_SCREENSHOT=fresh), capture_output=True, text=True)
    if out.returncode != 0 or not os.path.exists(fresh):
        sys.exit("screenshots: the browser test took no screenshot:\n" + out.stdout[-3000:])
    _crop_blank_bottom(fresh, target)


def _crop_blank_bottom(source, target, margin=24):
    """Copy the page's picture without the empty window below its last chart."""
    from PIL import Image, ImageChops

    with Image.open(source) as page:
        rgb = page.convert("RGB")
        blank = Image.new("RGB", rgb.size, rgb.getpixel((rgb.width - 1, rgb.height - 1)))
        box = ImageChops.difference(rgb, blank).getbbox()
        bottom = rgb.height if box is None else min(rgb.height, box[3] + margin)
        rgb.crop((0, 0, rgb.width, bottom)).save(target)


def profile_chart(work):
    """The guide's profiler program, saved with ``prof.save``, at 4 workers."""
    with open(os.path.join(ROOT, "docs", "guide", "errors.md")) as f:
        guide = f.read()
    program = re.search(r"```python\n(import time\n.*?prof\.report\(\)\n)```", guide, re.S)
    if program is None:
        sys.exit("screenshots: the train.py block of docs/guide/errors.md is gone")
    script = os.path.join(work, "train.py")
    with open(script, "w") as f:
        f.write(program.group(1) + 'prof.save("profile")\n')
    out = subprocess.run(_mpiexec(4) + [PYTHON, "train.py"], cwd=work, env=ENV,
                         capture_output=True, text=True, timeout=300)
    if out.returncode != 0 or not os.path.exists(os.path.join(work, "profile.png")):
        sys.exit("screenshots: the profiler program failed:\n" + out.stdout + out.stderr)
    shutil.copy(os.path.join(work, "profile.png"), os.path.join(IMAGES, "profile.png"))


PICTURES = {"terminal": terminal_and_plot, "web": web_page, "profile": profile_chart}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", choices=sorted(PICTURES),
                        help="make only these (terminal also makes the saved plot)")
    args = parser.parse_args()
    os.makedirs(IMAGES, exist_ok=True)
    for name in args.only or PICTURES:
        with tempfile.TemporaryDirectory() as work:
            start = time.monotonic()
            PICTURES[name](work)
            print(f"screenshots: {name} made in {time.monotonic() - start:.0f} s")


if __name__ == "__main__":
    main()
