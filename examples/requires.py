"""Stop an example at once, with the exact install command, when a package is missing."""

import importlib.util
import sys

_INSTALL = {
    "torch": 'pip install "torch==2.13.0"  (the CPU build; see docs/guide/gpu.md for a GPU one)',
    "sklearn": 'pip install -e ".[examples]"',
    "PIL": 'pip install -e ".[examples]"',
    "matplotlib": 'pip install -e ".[examples]"',
}


def require(*modules):
    """Exit with status 2, naming what to install, unless ``modules`` can be imported."""
    missing = []
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    if missing:
        commands = sorted({_INSTALL.get(m, f"pip install {m}") for m in missing})
        sys.stderr.write(f"{sys.argv[0]}: this example needs {', '.join(missing)}; "
                         f"install it with:\n" + "".join(f"    {c}\n" for c in commands))
        sys.exit(2)
