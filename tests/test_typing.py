"""The package type-checks, and mypy flags a typed user script's mistakes.

``tests/typing/user_script.py`` marks each line mypy must flag with ``# mypy: <codes>``;
every other line must pass. One mypy run checks both (it takes 30-60 s: it reads torch).
"""

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join("tests", "typing", "user_script.py")
ERROR = re.compile(r"^(?P<path>[^:]+):(?P<line>\d+): error: (?P<text>.*)\[(?P<code>[a-z-]+)\]$")

pytestmark = pytest.mark.mpi_skip  # one mypy run, not one per worker


@pytest.fixture(scope="module")
def mypy_errors():
    pytest.importorskip("mypy", reason="the types extra installs mypy (pip install -e "
                        "'.[types]'; scripts/test.sh does in its MPICH run)")
    out = subprocess.run([sys.executable, "-m", "mypy", "--show-error-codes",
                          "--no-color-output", "--no-error-summary", "spmdlab", SCRIPT],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    errors = [m.groupdict() for m in map(ERROR.match, out.stdout.splitlines()) if m]
    assert out.returncode in (0, 1) and (errors or out.returncode == 0), out.stdout + out.stderr
    return errors


def test_the_package_type_checks(mypy_errors):
    inside = [e for e in mypy_errors if e["path"].startswith("spmdlab")]
    assert not inside, "\n".join(f"{e['path']}:{e['line']}: {e['text']}" for e in inside)


def test_mypy_flags_exactly_the_marked_mistakes(mypy_errors):
    expected = set()
    with open(os.path.join(ROOT, SCRIPT)) as f:
        for number, line in enumerate(f, 1):
            marker = re.search(r"# mypy: ([a-z, -]+)$", line.rstrip())
            if marker:
                expected |= {(number, c.strip()) for c in marker.group(1).split(",")}
    assert len(expected) >= 10
    found = {(int(e["line"]), e["code"]) for e in mypy_errors
             if os.path.normpath(e["path"]) == SCRIPT}
    assert found - expected == set(), "flagged but not marked (a correct line failed)"
    assert expected - found == set(), "marked but not flagged (mypy missed a mistake)"


def _public_callables():
    import inspect

    from conftest import public_names

    for where, _, obj in public_names():
        if inspect.isclass(obj):
            if issubclass(obj, BaseException):
                continue
            for attr, member in vars(obj).items():
                if attr.startswith("_") and attr not in ("__init__", "__getitem__",
                                                           "__setitem__", "__iter__"):
                    continue
                if isinstance(member, property):
                    member = member.fget
                if isinstance(member, (classmethod, staticmethod)):
                    member = member.__func__
                if inspect.isfunction(member):
                    yield f"{where}.{attr}", member
        elif callable(obj):
            yield where, getattr(obj, "__wrapped__", obj)


def test_every_public_callable_is_annotated():
    import inspect

    missing = []
    for where, fn in _public_callables():
        sig = inspect.signature(fn)
        for p in sig.parameters.values():
            if p.name not in ("self", "cls") and p.annotation is inspect.Parameter.empty:
                missing.append(f"{where}: parameter {p.name!r}")
        if sig.return_annotation is inspect.Signature.empty:
            missing.append(f"{where}: return")
    assert not missing, "\n".join(missing)


def test_the_package_says_it_is_typed():
    import spmdlab

    assert os.path.isfile(os.path.join(os.path.dirname(spmdlab.__file__), "py.typed"))


def test_mypy_sees_spmdlab_from_a_users_folder(tmp_path):
    # as a user runs it after the guide's install: mypy on a script of their own, in a
    # folder outside the checkout (an editable install must leave a path mypy can follow)
    pytest.importorskip("mypy")
    script = tmp_path / "script.py"
    script.write_text("import numpy as np\n"
                      "import spmdlab.training\n"
                      "from spmdlab import spmd_plus\n"
                      "from spmdlab.matlab import codistributed\n"
                      "total: np.ndarray = spmd_plus(np.ones(3))\n"
                      "wrong: str = spmd_plus(1.0)\n")
    out = subprocess.run([sys.executable, "-m", "mypy", "--no-color-output",
                          "--no-error-summary", "--follow-imports=silent", str(script)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert "Cannot find implementation or library stub" not in out.stdout, out.stdout
    assert "script.py:6: error: Incompatible types in assignment" in out.stdout, out.stdout
    assert out.stdout.count("error:") == 1, out.stdout


def test_a_plain_editable_install_is_a_path(tmp_path):
    # `pip install -e .` without options (setuptools' default editable mode) must leave a
    # plain path in a .pth file, not setuptools' import hook, which mypy cannot follow:
    # build the editable wheel pip would install and read its .pth
    import zipfile

    build_meta = pytest.importorskip("setuptools.build_meta")
    here = os.getcwd()
    os.chdir(ROOT)
    try:
        name = build_meta.build_editable(str(tmp_path))
    finally:
        os.chdir(here)
    with zipfile.ZipFile(tmp_path / name) as wheel:
        pths = [n for n in wheel.namelist() if n.endswith(".pth")]
        assert len(pths) == 1, wheel.namelist()
        lines = wheel.read(pths[0]).decode().split()
        hooks = [n for n in wheel.namelist() if n.endswith("_finder.py")]
    assert not hooks and lines == [ROOT], (hooks, lines)
