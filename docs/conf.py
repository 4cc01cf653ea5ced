"""Sphinx configuration: the reference pages, one per public function and class, built
from the docstrings (``python -m sphinx -W -b html docs docs/_build/html``)."""

import inspect
import os
import sys

sys.path.insert(0, os.path.abspath(".."))

project = "spmdlab"
author = "the spmdlab developers"
copyright = "2026, the spmdlab developers"

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
]

# One page per public name: docs/reference/*.rst list them; autosummary writes the pages
# (reference/generated/, not in git) from the templates in _templates/autosummary.
autosummary_generate = True
autosummary_imported_members = True
templates_path = ["_templates"]
exclude_patterns = ["_build", "porting.md"]

# A page reads like MATLAB's: the syntax (the signature, with every overload), the
# description, the arguments with their types, the examples, the MATLAB equivalent.
autodoc_typehints = "signature"
autodoc_typehints_format = "short"
autodoc_member_order = "bysource"
autodoc_preserve_defaults = True
napoleon_numpy_docstring = True
napoleon_google_docstring = False
napoleon_custom_sections = [("MATLAB", "notes_style")]
python_use_unqualified_type_names = True

html_theme = "alabaster"
html_title = "spmdlab reference"


def _arguments(app, what, name, obj, options, lines):
    """Give a function's or class's page its arguments between the description and the
    examples, as MATLAB's pages order them: each with its type and default from the
    signature, and the words of the docstring's own Parameters section where it has one
    (``name`` on a line of its own, its description indented below)."""
    if what not in ("function", "class"):
        return
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return
    params = {p.name: p for p in sig.parameters.values() if p.name not in ("self", "cls")}
    block = []
    if "Parameters" in [l.strip() for l in lines]:  # the docstring's own: add the types
        start = [l.strip() for l in lines].index("Parameters") + 2
        for i in range(start, len(lines)):
            line = lines[i]
            if line and not line[0].isspace():
                if line.strip() in ("Returns", "Examples", "MATLAB", "Raises"):
                    break
                key = line.strip().lstrip("*")
                if key in params:
                    lines[i] = _entry(params[key])
    elif params:
        block += ["Parameters", "----------"] + [_entry(p) for p in params.values()] + [""]
    if what == "function" and sig.return_annotation is not sig.empty and \
            "Returns" not in [l.strip() for l in lines]:
        block += ["Returns", "-------", _text(sig.return_annotation), ""]
    at = next((i for i, l in enumerate(lines) if l.strip() == "Examples"), len(lines))
    lines[at:at] = block


def _entry(p):
    """``name : type, default value`` for a numpy-style Parameters section."""
    star = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "")
    kind = "" if p.annotation is p.empty else f" : {_text(p.annotation)}"
    default = "" if p.default is p.empty else f", default {p.default!r}"
    return f"{star}{p.name}{kind}{default}"


def _text(annotation):
    """An annotation as written (``from __future__ import annotations`` keeps strings)."""
    return annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)


def setup(app):
    app.connect("autodoc-process-docstring", _arguments, priority=400)  # before napoleon
