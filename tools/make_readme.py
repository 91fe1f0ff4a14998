"""Write README.md from nbs/index.ipynb, without Quarto (which `nbdev_readme` needs).

Markdown cells are copied; code cells become ```python blocks, without nbdev's `#|` directive lines;
cells marked `#| hide` are left out. Only plain-text results of code cells are shown (progress bars,
widgets and images are not).

Usage: python tools/make_readme.py [--check]   (--check: exit 1 if README.md is not up to date)
"""
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

def cell_source(cell) -> str:
    src = cell['source']
    return ''.join(src) if isinstance(src, list) else src

def render(nb: dict) -> str:
    parts = []
    for cell in nb['cells']:
        src = cell_source(cell)
        if cell['cell_type'] == 'markdown':
            parts.append(src.strip())
            continue
        if cell['cell_type'] != 'code': continue
        lines = src.splitlines()
        if any(l.strip().replace(' ', '') in ('#|hide', '#|export', '#|exporti') for l in lines): continue
        code = '\n'.join(l for l in lines if not l.lstrip().startswith('#|')).strip()
        if code: parts.append(f"```python\n{code}\n```")
        for out in cell.get('outputs', []):
            text = out.get('data', {}).get('text/plain') if out.get('output_type') == 'execute_result' else None
            if text: parts.append("```\n" + (''.join(text) if isinstance(text, list) else text).strip() + "\n```")
    return '\n\n'.join(p for p in parts if p) + '\n'

def main(argv):
    nb = json.loads((ROOT / 'nbs' / 'index.ipynb').read_text(encoding='utf-8'))
    text = render(nb)
    readme = ROOT / 'README.md'
    if '--check' in argv:
        if not readme.exists() or readme.read_text(encoding='utf-8') != text:
            print('README.md is out of date: run python tools/make_readme.py')
            return 1
        return 0
    readme.write_text(text, encoding='utf-8')
    print(f'wrote {readme}')
    return 0

if __name__ == '__main__': sys.exit(main(sys.argv[1:]))
