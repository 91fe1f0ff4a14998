#!/usr/bin/env bash
# Build the docs site from the notebooks, without Quarto, into _build/html (git-ignored):
#   nbdev_export -> nbdev's notebook processing (tools/proc_docs.py: nbs/ -> _proc/)
#   -> tools/nbdev_plain.py (_proc/ -> _plain/) -> sphinx-build -W (myst-nb + furo; docs/conf.py)
# Usage: tools/build_docs.sh [--out DIR] [--no-export] [extra sphinx-build options]
#   --out DIR     build in DIR instead: DIR/_proc, DIR/_plain and the site in DIR/html (the tests build there, in a
#                 temporary folder, so that they write nothing into the repository)
#   --no-export   skip nbdev_export: document the package as it is exported now (the tests do; CI checks that
#                 nbdev_export changes nothing)
# Preview: python -m http.server -d _build/html -b 127.0.0.1
# Needs: pip install sphinx myst-nb furo  (and the project's dev requirements: nbdev, execnb, fastcore).
# To check that nbdev_docs (Quarto) would process every notebook too: python tools/proc_docs.py --strict --dest /tmp/p
set -euo pipefail
out='' do_export=1
absdir() { mkdir -p "$1" && cd "$1" && pwd; }
while [ $# -gt 0 ]; do
  case "$1" in
    --out) [ $# -ge 2 ] || { echo "--out needs a folder" >&2; exit 2; }; out=$(absdir "$2"); shift 2;;
    --out=*) out=$(absdir "${1#--out=}"); shift;;
    --no-export) do_export=0; shift;;
    *) break;;
  esac
done
cd "$(dirname "$0")/.."
if [ -n "$out" ]; then proc="$out/_proc" plain="$out/_plain" html="$out/html"
else proc=_proc plain=_plain html=_build/html; fi
command -v sphinx-build >/dev/null || { echo "sphinx-build not found: pip install sphinx myst-nb furo" >&2; exit 1; }
export MPLBACKEND=Agg
start=$(date +%s%N)
if [ "$do_export" = 1 ]; then nbdev_export; fi
python tools/proc_docs.py --dest "$proc"
python tools/nbdev_plain.py --src "$proc" --dest "$plain" --toctree
rm -rf "$html"
sphinx-build -W --keep-going -q -b html -c docs "$@" "$plain" "$html"
pages=$(find "$html" -maxdepth 1 -name '*.html' ! -name search.html ! -name genindex.html | wc -l)
ms=$(( ($(date +%s%N) - start) / 1000000 ))
printf 'built %s pages into %s in %d.%01d s\n' "$pages" "$html" $((ms / 1000)) $((ms % 1000 / 100))
