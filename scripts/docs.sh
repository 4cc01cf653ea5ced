#!/usr/bin/env bash
# The documentation site (the user guide and the reference pages) on a fresh machine: a
# virtual environment in .venv-docs with spmdlab's docs extra (Sphinx, MyST, Furo) and
# torch (CPU; the training pages import it), then Sphinx with warnings as errors, then
# the site opened in a browser where there is a display.
#   bash scripts/docs.sh [OUTDIR]         (default docs/_build/html)
# SPMDLAB_DOCS_PYTHON=path/to/python uses that environment instead of making one (the
# tests do: tests/test_docs.py builds the site through this script).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-docs/_build/html}
py=${SPMDLAB_DOCS_PYTHON:-}
if [ -z "$py" ]; then
  source scripts/_venv.sh
  make_venv .venv-docs torch,docs
  py=.venv-docs/bin/python
fi
"$py" -m sphinx -W --keep-going -q -b html -d "$out/.doctrees" docs "$out"
index=$(cd "$out" && pwd)/index.html
echo "docs: file://$index"
# a browser only where one can show it (on a console a text browser would take over)
if [ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ] || [ "$(uname)" = Darwin ]; then
  "$py" -m webbrowser -t "file://$index" >/dev/null 2>&1 || true
fi
