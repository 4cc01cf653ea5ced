"""Sphinx configuration: the user guide (guide/*.md, MyST Markdown) and the reference
pages, one per public function and class, built from the docstrings
(``bash scripts/docs.sh``, or ``python -m sphinx -W -b html docs docs/_build/html``)."""

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
    "sphinx.ext.extlinks",
    "myst_parser",
]

# The guide is Markdown (MyST): headings get anchors for ``[text](page.md#a-heading)``
# (MyST writes such an anchor as it is, unchecked: tests/test_guide.py checks them).
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]
# A fence without a language is output or a shell line: shown as it is, not coloured as
# Python; straight quotes stay straight (option values are copied from these pages)
highlight_language = "text"
smartquotes = False
# {src}`examples/digits_spmd.py`: a file of the repository, on its host
extlinks = {"src": ("https://github.com/spmdlab/spmdlab/blob/main/%s", "%s")}

# One page per public name: docs/reference/*.rst list them; autosummary writes the pages
# (reference/generated/, not in git) from the templates in _templates/autosummary.
autosummary_generate = True
autosummary_imported_members = True
templates_path = ["_templates"]
exclude_patterns = ["_build"]

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

html_theme = "furo"
html_title = "spmdlab"
html_static_path = ["_static"]
html_css_files = ["spmdlab.css"]

# Every reference page names the guide page that explains its concept (the autosummary
# templates read this: the full name first, then its module). A name with neither gets a
# link to a page that does not exist: a warning, so a new public name cannot go unmapped.
_pages = {
    "semantics": "spmd spmd_index spmd_size",
    "messages": "spmd_plus spmd_cat spmd_reduce spmd_broadcast spmd_barrier spmd_send "
                "spmd_receive spmd_probe spmd_send_receive parfor",
    "composite": "Composite",
    "queues": "DataQueue PollableDataQueue QueueSet",
    "codistributed": "distribute from_local drange CodistributedArray Codistributor",
    "pool": "Pool current_pool start_pool",
    "errors": "profile Profile SpmdDeadlockError SpmdError SpmdIndexError SpmdMismatchError "
              "SpmdPeerError SpmdTimeoutError SpmdTypeError SpmdValueError",
}
guide_pages = {f"spmdlab.{name}": page for page, names in _pages.items()
               for name in names.split()}
guide_pages.update({
    "spmdlab.darray": "codistributed",
    "spmdlab.pool": "pool",
    "spmdlab.testing": "errors",
    "spmdlab.training": "training",
    "spmdlab.matlab": "matlab",
})
for _name in ("trainnet", "training_options", "TrainingOptions", "TrainingInfo"):
    guide_pages[f"spmdlab.training.{_name}"] = "trainnet"
guide_pages["spmdlab.training.TrainingProgressMonitor"] = "progress"
guide_pages["spmdlab.training.select_gpu"] = "gpu"
for _name in ("codistributed", "codistributor", "codistributor1d", "distributed", "drange",
              "eye", "gather", "getCodistributor", "getLocalPart", "globalIndices",
              "iscodistributed", "isdistributed", "ones", "rand", "randn", "redistribute",
              "zeros"):
    guide_pages[f"spmdlab.matlab.{_name}"] = "codistributed"
for _name in ("gcp", "parpool", "delete"):
    guide_pages[f"spmdlab.matlab.{_name}"] = "pool"
guide_pages["spmdlab.matlab.mpiprofile"] = "errors"
guide_pages["spmdlab.matlab.Composite"] = "composite"
autosummary_context = {"guide_pages": guide_pages}


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


def _unresolved(app, env, node, contnode):
    """A Python name the guide links to ({func}`spmd_plus`) that has no reference page is
    a warning (on the reference pages themselves, type hints such as ``np.ndarray`` may
    stay plain text, so Sphinx's own check, ``nitpicky``, is not turned on)."""
    if node.get("refdomain") == "py" and node.get("refdoc", "").startswith("guide/"):
        from sphinx.util import logging

        logging.getLogger(__name__).warning(
            "the guide links to %s, which has no reference page", node["reftarget"],
            location=node)


def _resolve_alias(app, env, node, contnode):
    """``spmdlab.Pool`` and the other names spmdlab re-exports from a submodule have a
    page of their own (reference/generated/spmdlab.Pool) that describes no object (the
    submodule's page does, and one object described twice is a warning): a link to the
    name leads to that page."""
    if node.get("refdomain") != "py":
        return None
    target = node.get("reftarget", "")
    doc = f"reference/generated/{target}"
    if target.startswith("spmdlab.") and doc in env.all_docs:
        from sphinx.util.nodes import make_refnode

        return make_refnode(app.builder, node["refdoc"], doc, None, contnode, target)
    return None


def _viewcode_backlinks(app, env):
    """viewcode's source pages link each object back to its description as
    ``<page>#<module>.<name>``, with the module the source was first met under and the
    page it was last met on. spmdlab describes ``Codistributor`` under
    ``spmdlab.darray`` and shows it under ``spmdlab`` too (an alias page with no
    anchors), so those links led nowhere: each module's links go to the name under
    which most of its objects are described, on the page that describes them (an
    object described under none keeps no link rather than a broken one)."""
    objects = env.get_domain("py").objects
    for modname, entry in getattr(env, "_viewcode_modules", {}).items():
        if not entry:
            continue
        code, tags, used, refname = entry
        prefixes = {refname, *(name.rsplit(".", 1)[0] for name in objects)}
        best = max(sorted(prefixes), key=lambda p: sum(f"{p}.{n}" in objects for n in used))
        described = {n: objects[f"{best}.{n}"].docname for n in used
                     if f"{best}.{n}" in objects}
        env._viewcode_modules[modname] = (code, tags, described, best)


def _first_overload(mangle):
    """autosummary's tables give a function one short signature; for an overloaded
    function it gets every overload, one a line, and makes nonsense of them
    (``spmd_plus(-> ~T)``): the table shows the first, the page shows them all."""
    def first(sig, max_chars=30):
        return mangle(sig.split("\n", 1)[0], max_chars=max_chars)
    return first


def setup(app):
    import sphinx.ext.autosummary as autosummary

    autosummary.mangle_signature = _first_overload(autosummary.mangle_signature)
    app.connect("missing-reference", _resolve_alias, priority=400)  # before _unresolved
    app.connect("autodoc-process-docstring", _arguments, priority=400)  # before napoleon
    app.connect("missing-reference", _unresolved)
    app.connect("env-updated", _viewcode_backlinks)
