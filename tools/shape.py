"""The shape of the package, as the literate-core issue measures it: cell, function and class sizes, and imports.

Run: python tools/shape.py               (prints the figures; exits 1 if a limit is passed)
     python tools/shape.py --breakdown   (also: what the lines of the Learner's classes are)
"""
import ast
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FEATURES = ('schedule', 'checkpoint', 'recorder', 'progress', 'liveplot', 'panel', 'tracker', 'outputs',
            'training', 'distributed')


def docstring_lines(node) -> int:
    "Lines of the docstring of a class or function, 0 if it has none."
    first = node.body[0] if node.body else None
    is_doc = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str)
    return first.end_lineno - first.lineno + 1 if is_doc else 0


def body_lines(node) -> int:
    "Lines of a function's body, its docstring excluded."
    body = node.body[1:] if docstring_lines(node) else node.body
    return 0 if not body else body[-1].end_lineno - body[0].lineno + 1


def functions(tree):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)): yield node


def method_kind(name: str) -> str:
    "Which kind of class lines a method's are, by its name."
    if name == '__init__': return 'construction (__init__)'
    if name.startswith('_') and not name.startswith('__'): return 'private methods (the loop)'
    return 'public methods and views'


def breakdown(source: str, tree) -> dict:
    "The lines of all classes of a module, by kind: blank, docstrings, construction, public API, the rest (private)."
    lines = source.splitlines()
    nonblank = lambda first, last: sum(bool(lines[i].strip()) for i in range(first - 1, last))
    kinds = dict.fromkeys(('blank', 'docstrings', 'construction (__init__)', 'public methods and views',
                           'private methods (the loop)', 'class lines and constants'), 0)
    for cls in (c for c in tree.body if isinstance(c, ast.ClassDef)):
        rest = nonblank(cls.lineno, cls.end_lineno) - docstring_lines(cls)
        kinds['blank'] += cls.end_lineno - cls.lineno + 1 - nonblank(cls.lineno, cls.end_lineno)
        kinds['docstrings'] += docstring_lines(cls)
        for node in cls.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([node.lineno] + [d.lineno for d in node.decorator_list])
                doc, n = docstring_lines(node), nonblank(start, node.end_lineno)
                kinds['docstrings'] += doc
                kinds[method_kind(node.name)] += n - doc
                rest -= n
            elif (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                  and getattr(node.value.func, 'id', '') == 'property'):  # a one-line view
                kinds['public methods and views'] += 1
                rest -= 1
        kinds['class lines and constants'] += rest
    return kinds


def main() -> int:
    failures = []
    long_fns = []
    for py in sorted((ROOT / 'trainer_nb').rglob('*.py')):
        if py.name == '_modidx.py': continue
        tree = ast.parse(py.read_text())
        for fn in functions(tree):
            n = body_lines(fn)
            if n > 25: long_fns.append((n, f"{py.relative_to(ROOT)}:{fn.lineno} {fn.name}"))
    for n, where in sorted(long_fns, reverse=True): print(f"function body {n:3d} lines  {where}")
    over40 = [w for n, w in long_fns if n > 40]
    if over40: failures.append(f"functions over 40 lines: {over40}")
    if len(long_fns) > 5: failures.append(f"{len(long_fns)} functions over 25 lines (at most 5)")
    learner = ROOT / 'trainer_nb' / 'learner.py'
    tree = ast.parse(learner.read_text())
    n_file = len(learner.read_text().splitlines())
    classes = {c.name: c.end_lineno - c.lineno + 1 for c in tree.body if isinstance(c, ast.ClassDef)}
    print(f"learner.py: {n_file} lines; classes: {classes}")
    if n_file > 450: failures.append(f"learner.py has {n_file} lines (at most 450)")
    if '--breakdown' in sys.argv:
        for kind, n in breakdown(learner.read_text(), tree).items(): print(f"  {kind}: {n}")
    if sum(classes.values()) > 300: failures.append(f"the Learner's classes have {sum(classes.values())} lines (at most 300)")
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and any(f in node.module.split('.') for f in FEATURES):
            failures.append(f"learner.py imports the feature module {node.module} at module level")
    worst = (0, '')
    for nb in sorted((ROOT / 'nbs').glob('*.ipynb')):
        for cell in json.loads(nb.read_text())['cells']:
            src = ''.join(cell['source'])
            if cell['cell_type'] == 'code' and src.startswith('#| export'):
                n = len(src.splitlines())
                worst = max(worst, (n, nb.name))
                if n > 80: failures.append(f"an exported cell of {nb.name} has {n} lines (at most 80)")
    print(f"longest exported cell: {worst[0]} lines ({worst[1]})")
    for f in failures: print('FAIL:', f)
    return 1 if failures else 0


if __name__ == '__main__': sys.exit(main())
