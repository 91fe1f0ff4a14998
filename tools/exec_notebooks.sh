#!/usr/bin/env bash
# Run notebooks in a real Jupyter kernel (nbclient + ipykernel) and save their outputs in place, then nbdev_clean
# them (which keeps outputs). A kernel shows what a reader of the notebook sees: the progress display as an HTML
# table, plots inline. (execnb's `exec_nb` also works, but its shell is not a Jupyter kernel, so the progress
# display falls back to text bars.)
# Usage: tools/exec_notebooks.sh [NOTEBOOK ...]    default: the tutorials and guides, nbs/9[0-7]_*.ipynb
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -eq 0 ]; then set -- nbs/9[0-7]_*.ipynb; fi
unset MPLBACKEND  # Agg would keep the inline backend from capturing the figures
for nb in "$@"; do
  case "$nb" in nbs/*) ;; *) echo "$nb: give notebooks of nbs/ (the kernel runs in nbs/, as nbdev_test does)" >&2; exit 1;; esac
  echo "executing $nb"
  if ! log=$(cd nbs && jupyter execute --inplace "${nb#nbs/}" 2>&1); then
    echo "$log" >&2; echo "FAILED: $nb (its outputs were not saved)" >&2; exit 1
  fi
  # a fit leaves no widget in its outputs; the state nbclient keeps of the closed ones would be dead weight
  python -c "import json, sys; p = sys.argv[1]; nb = json.load(open(p)); nb['metadata'].pop('widgets', None); json.dump(nb, open(p, 'w'), indent=1)" "$nb"
  nbdev_clean --fname "$nb"
done
