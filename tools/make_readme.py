"""Write README.md from nbs/index.ipynb, without Quarto (which `nbdev_readme` needs).

The markdown comes from the docs converter (tools/nbdev_plain.py, `readme_markdown`): markdown cells are
copied; code cells become ```python blocks, without nbdev's `#|` directive lines; cells marked `#| hide` or
exported are left out. Only plain-text results of code cells are shown (progress bars, widgets and images
are not).

Usage: python tools/make_readme.py [--check]   (--check: exit 1 if README.md is not up to date)
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import nbdev_plain  # noqa: E402


def main(argv):
    "Write README.md, or with --check, say whether it is up to date (exit code 1 if not)."
    root = nbdev_plain.ROOT
    return nbdev_plain.readme(nbdev_plain.read_settings(root), check='--check' in argv, dest=root / 'README.md')


if __name__ == '__main__': sys.exit(main(sys.argv[1:]))
