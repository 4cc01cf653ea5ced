"""The README, a landing page: short, its program runs as it says (as plain python and
under mpiexec, with the output it shows), its commands exist, its links lead somewhere."""

import os
import re

import pytest

from snippets import ROOT, cases, fenced, heading_anchors, read_blocks, run_block

pytestmark = pytest.mark.mpi_skip  # launches its own processes


def _readme():
    with open(os.path.join(ROOT, "README.md")) as f:
        return f.read()


def test_the_readme_is_a_landing_page():
    text = _readme()
    assert len(text.split("\n")) <= 200, "the README grew: move the detail into docs/guide"
    tested, fragments = read_blocks("README.md")
    assert [b.workers for b in tested] == [[1, 4]] and not fragments
    assert tested[0].outputs[4], "the README shows the program's output at 4 workers"


@pytest.mark.parametrize("block, workers", cases(["README.md"]))
def test_the_program_runs_and_prints_what_the_readme_shows(block, workers, tmp_path):
    run_block(block, workers, tmp_path)


def test_every_command_is_a_script_of_the_checkout():
    # the commands of the README's plain blocks: scripts/test.sh is CI itself (.ci/run);
    # scripts/docs.sh is run by tests/test_docs.py, scripts/demo.sh by hand
    blocks = [body for info, _, body in fenced(_readme()) if info == ""]
    commands = [line.split("#")[0].strip() for block in blocks
                for line in block.split("\n") if line.split("#")[0].strip()]
    assert {"bash scripts/demo.sh", "bash scripts/test.sh", "bash scripts/docs.sh"} <= \
        set(commands), commands
    for command in commands:
        if command.startswith("bash "):
            assert os.path.isfile(os.path.join(ROOT, command.split()[1])), command
        else:  # the one other: how a script is started (the program's test starts it so)
            assert command == "mpiexec -n 4 python train.py", command
    with open(os.path.join(ROOT, ".ci", "run")) as f:
        assert "scripts/test.sh" in f.read()


def test_every_link_leads_to_a_file_and_heading_of_the_checkout():
    links = re.findall(r"\]\(([^)\s]+)\)", _readme())
    local = [link for link in links if "://" not in link]
    assert any(link.startswith("docs/guide/") for link in local)
    for link in local:
        path, _, anchor = link.partition("#")
        assert os.path.isfile(os.path.join(ROOT, path)), link
        if anchor:
            with open(os.path.join(ROOT, path)) as f:
                assert anchor in heading_anchors(f.read()), link
