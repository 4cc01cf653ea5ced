"""The code blocks of Markdown pages (README.md, docs/guide/*.md), read as tests.

Every ```python block has a comment on the line just before it:

- ``<!-- test: workers=1,4 -->``: the block is a script that exits 0 at each of these
  worker counts (1: plain python; more: under mpiexec); ``needs=torch,sklearn`` skips it
  where one of those modules is missing;
- ``<!-- not tested: why -->``: a fragment, with the reason.

A ```text block preceded by ``<!-- output: workers=4 -->`` is the exact output of the last
tested block before it at that count (the lines in any order when several workers
print: a line is never split between workers, but the workers' lines interleave).
"""

import os
import re
import sys

import pytest

from conftest import mpiexec_args, run_mpiexec

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARKER = re.compile(r"^<!-- (test|output|not tested):\s*(.*?)\s*-->$")
FENCE = re.compile(r"^```(\S*)")


class Block:
    def __init__(self, page, line, code, workers, needs):
        self.page, self.line, self.code = page, line, code
        self.workers, self.needs = workers, needs
        self.outputs = {}  # workers -> the expected lines

    def __repr__(self):
        return f"{self.page}:{self.line}"


def _options(text, where):
    options = {}
    for item in text.split():
        key, sep, value = item.partition("=")
        if not sep or key not in ("workers", "needs"):
            raise ValueError(f"{where}: bad option {item!r} (workers=1,4 needs=torch)")
        options[key] = value.split(",")
    return options


def read_blocks(page):
    """(tested blocks, fragments) of ``page`` (relative to the checkout). A python block
    without its comment, or a malformed comment, raises ValueError naming the line."""
    with open(os.path.join(ROOT, page)) as f:
        lines = f.read().split("\n")
    tested, fragments = [], []
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        start = i
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None)
        if end is None:
            raise ValueError(f"{page}:{start + 1}: a code block that never ends")
        body = "\n".join(lines[start + 1:end]) + "\n"
        marker = MARKER.match(lines[start - 1].strip()) if start else None
        where = f"{page}:{start + 1}"
        kind = marker.group(1) if marker else None
        if fence.group(1) == "python":
            if kind == "test":
                options = _options(marker.group(2), where)
                workers = [int(n) for n in options.get("workers", ["1"])]
                tested.append(Block(page, start + 1, body, workers, options.get("needs", [])))
            elif kind == "not tested" and marker.group(2):
                fragments.append((where, marker.group(2)))
            else:
                raise ValueError(f"{where}: a python block needs <!-- test: workers=... --> "
                                 "or <!-- not tested: why --> on the line before it")
        elif kind == "output":
            workers = int(_options(marker.group(2), where)["workers"][0])
            if not tested or workers not in tested[-1].workers:
                raise ValueError(f"{where}: output at {workers} worker(s) of no block "
                                 "tested at that count")
            tested[-1].outputs[workers] = body.rstrip("\n").split("\n")
        elif kind is not None:
            raise ValueError(f"{where}: <!-- {kind} --> stands before a {fence.group(1) or 'plain'}"
                             " block")
        i = end + 1
    return tested, fragments


def cases(pages):
    """pytest parameters: one per tested block and worker count."""
    params = []
    for page in pages:
        try:
            tested, _ = read_blocks(page)
        except ValueError as e:  # a bad page fails its own test, not the collection
            params.append(pytest.param(e, 0, id=f"{page}:unreadable"))
            continue
        for block in tested:
            for n in block.workers:
                params.append(pytest.param(block, n, id=f"{page}:{block.line}@{n}"))
    return params


def run_block(block, workers, tmp_path):
    """Run ``block`` as a script in an empty folder at ``workers``; check its exit status
    and, where the page shows it, its output."""
    if isinstance(block, ValueError):
        pytest.fail(str(block))
    for module in block.needs:
        pytest.importorskip(module)
    script = tmp_path / "block.py"
    script.write_text(block.code)
    cmd = [sys.executable, str(script)]
    if workers > 1:
        cmd = mpiexec_args(workers) + cmd
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    # buffered output leaves each worker in one write at exit: lines never interleave
    env.pop("PYTHONUNBUFFERED", None)
    out = run_mpiexec(cmd, capture_output=True, text=True, timeout=300, env=env,
                      cwd=tmp_path)
    assert out.returncode == 0, f"{block} at {workers} worker(s):\n{out.stdout}{out.stderr}"
    expected = block.outputs.get(workers)
    if expected is not None:
        got = out.stdout.rstrip("\n").split("\n")
        if workers > 1:
            got, expected = sorted(got), sorted(expected)
        assert got == expected, f"{block} at {workers} worker(s) printed:\n{out.stdout}"


def heading_anchors(markdown):
    """The anchors of a page's headings, as GitHub and MyST make them (lower case,
    punctuation dropped, spaces to hyphens)."""
    anchors = set()
    for heading in re.findall(r"^#{1,6} (.+)$", markdown, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


def fenced(markdown):
    """Every fenced block of a page: (info string, first line's number, body)."""
    lines, blocks, i = markdown.split("\n"), [], 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if fence:
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            blocks.append((fence.group(1), i + 1, "\n".join(lines[i + 1:end]) + "\n"))
            i = end
        i += 1
    return blocks
