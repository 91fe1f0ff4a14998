"""Run nbdev's notebook processing for the docs site, without Quarto.

This is what `nbdev_proc_nbs` does (`nbs/*.ipynb` -> `_proc/*.ipynb`: front matter, hidden and exported cells
removed, `show_doc` cells added after every exported name and executed, backticked names linked), with two
differences that make the docs build reliable:

1. nbdev runs *every* cell that contains an import, to have the names `show_doc` needs. A cell that mixes an
   import with other code then runs without the cells before it, and fails (say `NameError: name 'storage' is
   not defined`), which stops the whole site. Here such a cell runs only its top-level import statements;
   pass `--strict` to run it whole, as `nbdev_proc_nbs` and `nbdev_docs` do.
2. nbdev documents the functions and classes a notebook exports, not their methods. Here, after a class's
   entry, each public method or property defined in that class with a docstring of its own gets an entry
   (heading level 4), unless the notebook already has a `show_doc` for it. A class's signature is shown as
   `class Name(...)`, and the entries of a cell that exports several names keep the order of the code.

It also never tries to install Quarto (as `nbdev_proc_nbs` does) and processes one notebook at a time, so
that an error names the notebook and the cell.

Usage: python tools/proc_docs.py [--dest _proc] [--strict] [NOTEBOOK ...]   (default: every notebook of nbs/)
"""
from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import os
import shutil
import sys
import warnings
from pathlib import Path

from execnb.nbio import mk_cell, write_nb
from nbdev.config import get_config
from nbdev.doclinks import nbglob
from nbdev.process import NBProcessor
from nbdev.processors import (FilterDefaults, _default_exp, _get_nm, _show_docs, add_show_docs, exec_show_docs)

_WHOLE_CELL_DIRECTIVES = {'export', 'exports', 'exporti', 'exec_doc'}


def _top_level_imports(cell) -> str:
    "The source of the top-level `import` statements of a code cell, in order."
    trees = cell.parsed_() or []
    return '\n'.join(ast.get_source_segment(cell.source, t) for t in trees
                     if isinstance(t, (ast.Import, ast.ImportFrom)))


def _has_import(trees) -> bool:
    return any(isinstance(n, (ast.Import, ast.ImportFrom)) for t in trees for n in ast.walk(t))


def _has_other_code(trees) -> bool:
    "nbdev's test for a cell that mixes imports with other code (it warns about those)."
    return any(isinstance(n, (ast.Expr, ast.Assign)) for t in trees for n in ast.walk(t))


def docs_eval_mode(cell) -> str | None:
    """How the docs processing runs a code cell: 'all', 'imports' (its top-level imports only) or None.

    Exported cells and `show_doc` cells run whole, as in nbdev; a cell with imports runs whole when it holds
    nothing else (definitions are fine), and only its imports when it mixes them with other code."""
    trees = cell.parsed_()
    if cell.cell_type != 'code' or not trees: return None
    if cell.directives_.get('eval:', [''])[0].lower() == 'false': return None
    if cell.directives_.keys() & _WHOLE_CELL_DIRECTIVES: return 'all'
    if _show_docs(trees): return 'all'
    if not _has_import(trees): return None
    return 'imports' if _has_other_code(trees) else 'all'


def _markdown_text(data) -> str:
    return ''.join(data) if isinstance(data, list) else data


class exec_doc_cells(exec_show_docs):
    """nbdev's `exec_show_docs`, which runs only the imports of a cell that mixes them with other code
    (see `docs_eval_mode`; with `strict`, the whole cell, as nbdev does), and shows classes as `class Name(...)`."""
    strict = False

    def __call__(self, cell):
        if not self.nb.has_docs_ or not hasattr(self, 'k'): return
        if str(getattr(self.nb, 'frontmatter_', {}).get('skip_showdoc', False)).lower() in ('true', '1', 'yes'):
            return
        mode = docs_eval_mode(cell)
        if mode == 'imports' and not self.strict: self.k.run_cell(_top_level_imports(cell))
        elif mode: self.k.cell(cell)
        if self.k.exc:
            title = getattr(self.nb, 'frontmatter_', {}).get('title', '')
            fix = ''
            if mode == 'imports':
                fix = (f"\nnbdev runs this cell because it imports, but without the cells before it. Fix: move "
                       f"{_top_level_imports(cell)!r} into a cell of its own (or the notebook's import cell).")
            raise RuntimeError(f"The docs processing failed in notebook {title!r}, cell {cell.idx_}:\n"
                               f"{cell.source}{fix}") from self.k.exc
        if mode and _show_docs(cell.parsed_() or []): self._show_classes_as_classes(cell)

    def _show_classes_as_classes(self, cell):
        "fastcore renders a class's signature as `def Name(`: write `class Name(` instead."
        for tree in _show_docs(cell.parsed_()):
            name = _get_nm(tree)
            try: obj = eval(name, self.k.user_ns)
            except Exception: continue
            if not inspect.isclass(obj): continue
            short = name.split('.')[-1]
            for out in cell.get('outputs', []):
                data = out.get('data', {})
                if 'text/markdown' not in data: continue
                text = _markdown_text(data['text/markdown'])
                data['text/markdown'] = text.replace(f"```python\ndef {short}(", f"```python\nclass {short}(", 1)


def public_methods(cls) -> list[str]:
    """Names of the public methods and properties defined in `cls` itself (not inherited) with a docstring of
    their own, in source order; a function of another chapter assigned as a method (`save = save_learner`) counts too."""
    names = []
    for name, value in vars(cls).items():
        if name.startswith('_'): continue
        func = value.__func__ if isinstance(value, (classmethod, staticmethod)) else value
        func = func.fget if isinstance(func, property) else func
        if inspect.isfunction(func) and func.__doc__: names.append(name)
    return names


def _definition_order(cells: list):
    """nbdev inserts the entries of a cell that exports several names in reverse order: put each run of
    consecutive inserted entries back in the order of the definitions."""
    i = 0
    while i < len(cells):
        j = i
        while j < len(cells) and getattr(cells[j], 'has_sd', False): j += 1
        if j > i + 1: cells[i:j] = cells[i:j][::-1]
        i = max(j, i + 1)


class add_method_docs(add_show_docs):
    "After the entry of a class the notebook exports, add `show_doc` cells for its documented public methods."
    def begin(self):
        _definition_order(self.nb.cells)
        for i, cell in enumerate(self.nb.cells): cell.idx_ = i
        exp = _default_exp(self.nb)
        if not exp: return
        try: module = importlib.import_module(f"{get_config().lib_name}.{exp}")
        except Exception as e:
            raise RuntimeError(f"Cannot import the module of `#| default_exp {exp}`: {e}. "
                               "Run nbdev_export first.") from e
        shown = {_get_nm(t) for c in self.nb.cells for t in _show_docs(c.parsed_() or [])}
        for cell in reversed(list(self.nb.cells)):
            new = []
            for tree in _show_docs(cell.parsed_() or []):
                name = _get_nm(tree)
                cls = getattr(module, name, None)
                if not (inspect.isclass(cls) and cls.__module__ == module.__name__): continue
                new += [f'{name}.{m}' for m in public_methods(cls) if f'{name}.{m}' not in shown]
            for i, qualname in enumerate(new):  # (named: a function assigned as a method has a name of its own)
                doc_cell = mk_cell(f'show_doc({qualname}, name={qualname!r}, title_level=4)')
                doc_cell.has_sd = True
                self.nb.cells.insert(cell.idx_ + 1 + i, doc_cell)
        for i, cell in enumerate(self.nb.cells): cell.idx_ = i


class exec_doc_cells_strict(exec_doc_cells):
    "`exec_doc_cells` that runs cells mixing imports and other code whole, as nbdev's `exec_show_docs` does."
    strict = True


class DocsProcs(FilterDefaults):
    "nbdev's default processors, with `add_method_docs`, and `exec_doc_cells` in place of `exec_show_docs`."
    def __init__(self, strict: bool = False): self.strict = strict

    def base_procs(self):
        procs = []
        for proc in super().base_procs():
            if proc is exec_show_docs: proc = exec_doc_cells_strict if self.strict else exec_doc_cells
            procs.append(proc)
            if proc is add_show_docs: procs.append(add_method_docs)
        return procs


def split_title_cell(nb):
    """Keep the paragraphs of the first markdown cell after its `# title` and `> blurb` as a cell of their own:
    nbdev makes that cell the page's title and description, and drops the whole cell (its other paragraphs too)."""
    first = next((c for c in nb.cells if c.cell_type == 'markdown'), None)
    if first is None or not first.source.lstrip().startswith('# '): return
    lines = first.source.strip().splitlines()
    head = 1 + next((i for i, line in enumerate(lines[1:]) if line.strip() and not line.startswith('>')), len(lines) - 1)
    rest = '\n'.join(lines[head:]).strip()
    if not rest: return
    first.source = '\n'.join(lines[:head]).strip()
    nb.cells.insert(nb.cells.index(first) + 1, mk_cell(rest, 'markdown'))


def process_notebook(src: Path, dest: Path, strict: bool = False):
    "Process one notebook for the docs, as nbdev does (in test mode: `IN_TEST=1`)."
    old = os.environ.get('IN_TEST')
    os.environ['IN_TEST'] = '1'
    try:
        with warnings.catch_warnings():
            if not strict: warnings.filterwarnings('ignore', message='Found cells containing imports')
            proc = NBProcessor(src, procs=DocsProcs(strict).procs())
            split_title_cell(proc.nb)
            proc.process()
        dest.parent.mkdir(parents=True, exist_ok=True)
        write_nb(proc.nb, dest)
    finally:
        if old is None: os.environ.pop('IN_TEST', None)
        else: os.environ['IN_TEST'] = old


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('notebooks', nargs='*', type=Path, help='notebooks to process (default: all of nbs/)')
    parser.add_argument('--dest', type=Path, help='output folder (default: _proc next to settings.ini)')
    parser.add_argument('--strict', action='store_true',
                        help="run cells that mix imports and other code whole, as nbdev_docs does")
    args = parser.parse_args(argv)
    cfg = get_config()
    root = cfg.config_path
    sys.path.insert(0, str(root))  # the package as exported, even if it is not pip-installed
    dest = args.dest or root / '_proc'
    notebooks = args.notebooks or sorted(nbglob(cfg.nbs_path, as_path=True))
    if not args.notebooks and dest.exists(): shutil.rmtree(dest)
    nbs, failed = Path(cfg.nbs_path).resolve(), []
    for nb in notebooks:
        nb = Path(nb)
        rel = nb.resolve().relative_to(nbs) if nb.resolve().is_relative_to(nbs) else Path(nb.name)
        try: process_notebook(nb, dest / rel, strict=args.strict)
        except Exception as e:
            cause = e.__cause__
            failed.append(nb)
            print(f"ERROR {nb}: {e}\n  {type(cause).__name__ if cause else ''}: {cause or ''}", file=sys.stderr)
    if failed:
        print(f"\nThe docs processing failed for {len(failed)} notebook(s): {', '.join(map(str, failed))}.\n"
              "When it builds the docs, nbdev runs only the exported cells, the show_doc cells and the cells "
              "that import: each of those must run without the others.", file=sys.stderr)
        return 1
    print(f"processed {len(notebooks)} notebooks into {dest}")
    return 0


if __name__ == '__main__': sys.exit(main())
