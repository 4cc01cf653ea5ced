"""The README's opening snippet runs as it says: as plain python and under mpiexec."""

import os
import re
import subprocess
import sys

import pytest

from conftest import mpiexec_args

pytestmark = pytest.mark.mpi_skip  # launches its own processes
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _opening_snippet():
    with open(os.path.join(ROOT, "README.md")) as f:
        return re.search(r"```python\n(.*?)```", f.read(), re.S).group(1)


@pytest.mark.parametrize("workers", [1, 4])
def test_the_opening_snippet_runs(workers, tmp_path):
    script = tmp_path / "snippet.py"
    script.write_text(_opening_snippet())
    cmd = [sys.executable, str(script)]
    if workers > 1:
        cmd = mpiexec_args(workers) + cmd
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    # buffered output leaves each worker in one write at exit: lines never interleave
    # (unbuffered, print writes the text and the newline apart)
    env.pop("PYTHONUNBUFFERED", None)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    total = workers * (workers + 1) // 2
    lines = sorted(out.stdout.splitlines())
    assert len(lines) == workers
    for k, line in enumerate(lines, 1):
        assert line.startswith(f"worker {k}: [{total}. {total}. {total}.]"), line


def _section_snippets(title):
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    section = text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


@pytest.mark.parametrize("workers", [1, 4])
def test_the_codistributed_array_snippets_run(workers, tmp_path):
    snippets = _section_snippets("Codistributed and distributed arrays")
    assert len(snippets) == 2
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    for number, snippet in enumerate(snippets):
        script = tmp_path / f"snippet{number}.py"
        script.write_text(snippet)
        cmd = [sys.executable, str(script)]
        if workers > 1:
            cmd = mpiexec_args(workers) + cmd
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
        assert out.returncode == 0, snippet + out.stderr


def test_the_pool_snippet_runs(tmp_path):
    # a plain python process is the client; the workers run under the launcher found
    pytest.importorskip("cloudpickle")
    (snippet,) = _section_snippets("The interactive pool: parpool and %%spmd")
    script = tmp_path / "pool_snippet.py"
    script.write_text(snippet)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=120, env=dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1",
                                               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1"))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["31 [31, 32] 2", "[1, 2]", "[3.0, 12.0] 15.0"], \
        out.stdout
