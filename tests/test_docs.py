"""The reference pages' content: every public function and class has a runnable example
and its MATLAB equivalent in its docstring, and the examples pass at one worker.

The pages themselves are built from these docstrings by Sphinx (docs/, with -W), with
the user guide beside them, in ``test_the_site_builds``.
"""

import doctest
import inspect
import os
import re
import subprocess
import sys
from html import unescape
from urllib.parse import unquote, urlsplit

import numpy as np
import pytest

import spmdlab

from conftest import public_names, torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = pytest.mark.mpi_skip  # the examples are written for one worker


# every public name (an alias shares its target's page text); the training pages'
# examples use torch
PAGES = list(public_names(training=torch is not None))


def _globs(module):
    globs = {"np": np, "os": os}
    for m in (spmdlab, module):
        globs.update({n: getattr(m, n) for n in m.__all__})
    if module.__name__ == "spmdlab.training":
        globs["torch"] = torch
    return globs


@pytest.mark.parametrize("page, module, obj", PAGES, ids=[p for p, _, _ in PAGES])
def test_page_has_an_example_and_the_matlab_equivalent(page, module, obj):
    text = inspect.getdoc(obj) or ""
    assert "\nExamples\n--------\n" in text, f"{page}: no Examples section"
    assert ">>> " in text.split("\nExamples\n", 1)[1], f"{page}: no runnable example"
    assert "\nMATLAB\n------\n" in text, f"{page}: no MATLAB section"


@pytest.mark.parametrize("page, module, obj", PAGES, ids=[p for p, _, _ in PAGES])
def test_page_examples_run(page, module, obj):
    finder = doctest.DocTestFinder(recurse=False)
    tests = finder.find(obj, page, globs=_globs(module))
    assert tests and tests[0].examples
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in tests:
        runner.run(test, out=sys.stdout.write)
    assert runner.summarize(verbose=False).failed == 0, f"{page}: an example failed (above)"


def test_the_site_builds(tmp_path):
    # the README's command, scripts/docs.sh, in this environment (it would otherwise make
    # one), into a folder of the test's; no browser (no display)
    pytest.importorskip("sphinx", reason="the docs extra installs Sphinx (pip install "
                        "-e '.[docs]'; scripts/test.sh does in its MPICH run)")
    pytest.importorskip("myst_parser", reason="the docs extra installs myst-parser")
    html = tmp_path / "html"
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env["SPMDLAB_DOCS_PYTHON"] = sys.executable
    out = subprocess.run(["bash", os.path.join(ROOT, "scripts", "docs.sh"), str(html)],
                         cwd=ROOT, capture_output=True, text=True, timeout=900, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"docs: file://{html}/index.html" in out.stdout
    pages = os.listdir(html / "reference" / "generated")
    for page, _, _ in PAGES:
        assert f"{page}.html" in pages, f"no reference page for {page}"
        text = (html / "reference" / "generated" / f"{page}.html").read_text()
        # the guide page of its concept (a page without one fails the build itself)
        assert 'href="../../guide/' in text, f"{page}: no link to the guide"
    guide = {name[:-3] for name in os.listdir(os.path.join(ROOT, "docs", "guide"))}
    assert {p[:-5] for p in os.listdir(html / "guide")} >= guide
    images = os.listdir(html / "_images")
    for image in os.listdir(os.path.join(ROOT, "docs", "images")):
        assert image in images, f"docs/images/{image} is shown nowhere"
    broken = _broken_links(html)
    assert not broken, f"{len(broken)} link(s) lead nowhere, the first: {broken[:5]}"


def _broken_links(root):
    """Every link between the site's own pages (the guide, the reference, the source
    pages' links back to the descriptions) whose page or anchor does not exist."""
    anchors = {}

    def ids(path):
        if path not in anchors:
            text = path.read_text(encoding="utf-8") if path.is_file() else None
            anchors[path] = None if text is None else \
                set(re.findall(r'\b(?:id|name)="([^"]+)"', text))
        return anchors[path]

    broken = []
    for page in root.rglob("*.html"):
        for href in re.findall(r'href="([^"]+)"', page.read_text(encoding="utf-8")):
            link = urlsplit(unescape(href))
            if link.scheme or link.netloc:
                continue
            target = (page.parent / unquote(link.path)).resolve() if link.path else page
            found = ids(target)
            if found is None or (link.fragment and link.fragment not in found):
                broken.append(f"{page.relative_to(root)} -> {href}")
    return broken
