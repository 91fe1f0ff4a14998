#!/usr/bin/env bash
# Build the docs site from the notebooks, without Quarto, into _build/html (git-ignored):
#   nbdev_export -> nbdev's notebook processing (tools/proc_docs.py: nbs/ -> _proc/)
#   -> tools/nbdev_plain.py (_proc/ -> _plain/) -> sphinx-build -W (myst-nb + furo; docs/conf.py)
# Usage: tools/build_docs.sh [extra sphinx-build options]      Preview: python -m http.server -d _build/html -b 127.0.0.1
# Needs: pip install sphinx myst-nb furo  (and the project's dev requirements: nbdev, execnb, fastcore).
# To check that nbdev_docs (Quarto) would process every notebook too: python tools/proc_docs.py --strict --dest /tmp/p
set -euo pipefail
cd "$(dirname "$0")/.."
command -v sphinx-build >/dev/null || { echo "sphinx-build not found: pip install sphinx myst-nb furo" >&2; exit 1; }
export MPLBACKEND=Agg
start=$(date +%s%N)
nbdev_export
python tools/proc_docs.py
python tools/nbdev_plain.py --src _proc --dest _plain --toctree
rm -rf _build/html
sphinx-build -W --keep-going -q -b html -c docs "$@" _plain _build/html
pages=$(find _build/html -maxdepth 1 -name '*.html' ! -name search.html ! -name genindex.html | wc -l)
ms=$(( ($(date +%s%N) - start) / 1000000 ))
printf 'built %s pages into _build/html in %d.%01d s\n' "$pages" $((ms / 1000)) $((ms % 1000 / 100))
