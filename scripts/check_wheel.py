"""Check a built wheel and sdist hold what a user needs: every module of the source
tree, py.typed, the monitor's static files, the license texts, the changelog.

    python scripts/check_wheel.py dist/spmdlab-*.whl dist/spmdlab-*.tar.gz
"""

import os
import sys
import tarfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def source_files():
    """Every file the package must ship: its modules, py.typed, the static files."""
    wanted = []
    package = os.path.join(ROOT, "spmdlab")
    for folder, dirs, files in os.walk(package):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            path = os.path.relpath(os.path.join(folder, name), ROOT).replace(os.sep, "/")
            if name.endswith(".py") or name == "py.typed" or "/static/" in path:
                wanted.append(path)
    return sorted(wanted)


def main(paths):
    wheel = next(p for p in paths if p.endswith(".whl"))
    sdist = next(p for p in paths if p.endswith(".tar.gz"))
    problems = []
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    for path in source_files():
        if path not in names:
            problems.append(f"wheel: {path} is missing")
    licenses = {os.path.basename(n) for n in names if ".dist-info/" in n}
    for name in ("LICENSE", "THIRD_PARTY_NOTICES.md", "uPlot.LICENSE"):
        if name not in licenses:
            problems.append(f"wheel: {name} is not in its .dist-info")
    with tarfile.open(sdist) as t:
        members = {m.name.split("/", 1)[1] for m in t.getmembers() if "/" in m.name}
    for path in source_files() + ["LICENSE", "THIRD_PARTY_NOTICES.md", "CHANGELOG.md",
                                  "README.md"]:
        if path not in members:
            problems.append(f"sdist: {path} is missing")
    for line in problems:
        print(line)
    print(f"{os.path.basename(wheel)}: {len(names)} files; "
          f"{os.path.basename(sdist)}: {len(members)} files; "
          f"{'OK' if not problems else f'{len(problems)} problems'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
