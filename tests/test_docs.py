"""The reference pages' content: every public function and class has a runnable example
and its MATLAB equivalent in its docstring, and the examples pass at one worker.

The pages themselves are built from these docstrings by Sphinx (docs/, with -W) in
``test_reference_pages_build``.
"""

import doctest
import inspect
import os
import subprocess
import sys

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


def test_reference_pages_build(tmp_path):
    pytest.importorskip("sphinx", reason="the docs extra installs Sphinx (pip install "
                        "-e '.[docs]'; scripts/test.sh does in its MPICH run)")
    out = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q",
                          "-b", "html", "-d", str(tmp_path / "doctrees"), "docs",
                          str(tmp_path / "html")], cwd=ROOT, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    pages = os.listdir(tmp_path / "html" / "reference" / "generated")
    for page, _, _ in PAGES:
        assert f"{page}.html" in pages, f"no reference page for {page}"
