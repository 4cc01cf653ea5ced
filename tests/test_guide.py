"""The user guide's code blocks run as they say (docs/guide/*.md; the marker convention
is in tests/snippets.py): each tested block at its worker counts, plain python at one
worker and under mpiexec at more, with its shown output checked; and the files of the
checkout it links to exist."""

import glob
import os
import re

import pytest

from conftest import is_open_mpi
from snippets import ROOT, cases, heading_anchors, read_blocks, run_block

pytestmark = pytest.mark.mpi_skip  # launches its own processes
PAGES = sorted(os.path.relpath(p, ROOT)
               for p in glob.glob(os.path.join(ROOT, "docs", "guide", "*.md")))


def test_every_python_block_is_tested_or_says_why_not():
    # read_blocks raises on a python block without its comment
    counts = [read_blocks(page) for page in PAGES]
    assert sum(len(tested) for tested, _ in counts) >= 8, "the guide lost its tested blocks"


@pytest.mark.parametrize("block, workers", cases(PAGES))
def test_the_block_runs(block, workers, tmp_path):
    if is_open_mpi():  # CI time: the guide's code is the same under either MPI
        pytest.skip("the guide's blocks run under MPICH")
    run_block(block, workers, tmp_path)


def test_every_file_the_guide_links_to_is_in_the_checkout():
    # {src}`path` links to the file on the project's host (docs/conf.py's extlinks):
    # Sphinx cannot see whether it exists, so a renamed example would leave a dead link
    paths = set()
    for page in PAGES:
        with open(os.path.join(ROOT, page)) as f:
            paths.update(re.findall(r"\{src\}`(?:[^`<]*<)?([^`>]+)>?`", f.read()))
    assert paths, "the guide links to no file of the checkout"
    missing = sorted(p for p in paths if not os.path.exists(os.path.join(ROOT, p)))
    assert not missing, f"the guide links to files that do not exist: {missing}"


def test_every_link_between_pages_leads_to_a_file_and_heading():
    # MyST writes [text](page.md#anchor) as it is: Sphinx -W does not see an anchor that
    # no heading of the page makes (four links once led to the top of their page)
    checked = 0
    for page in PAGES:
        with open(os.path.join(ROOT, page)) as f:
            text = f.read()
        for link in re.findall(r"\]\(([^)\s]+)\)", text):
            if "://" in link:
                continue
            path, _, anchor = link.partition("#")
            target = os.path.normpath(os.path.join(ROOT, os.path.dirname(page), path)) \
                if path else os.path.join(ROOT, page)
            assert os.path.isfile(target), f"{page}: {link} leads to no file"
            if anchor:
                with open(target) as f:
                    anchors = heading_anchors(f.read())
                assert anchor in anchors, f"{page}: {link} leads to no heading of its page"
            checked += 1
    assert checked > 50, "the guide's pages link to each other less than they did"


def test_the_contributing_layout_names_every_module_and_script():
    # the layout of docs/guide/contributing.md is where a contributor looks for a module:
    # one it leaves out (eleven modules, four scripts and an example once) is one nobody
    # finds
    with open(os.path.join(ROOT, "docs", "guide", "contributing.md")) as f:
        layout = f.read().split("\n## Layout\n", 1)[1].split("```")[1]
    files = [os.path.relpath(p, ROOT) for pattern in ("spmdlab/*.py", "spmdlab/darray/*.py",
                                                     "scripts/*", "examples/*.py")
             for p in glob.glob(os.path.join(ROOT, pattern)) if os.path.isfile(p)]
    missing = sorted(f for f in files if os.path.basename(f) != "__init__.py"
                     and os.path.basename(f) not in layout and f not in layout
                     and not f.startswith("examples/train_"))
    assert not missing, f"the contributing guide's layout leaves out: {missing}"
