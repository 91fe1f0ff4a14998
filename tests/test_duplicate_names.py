"""No name is defined twice in one class or one module: the second definition silently replaces the first (a
method that is never called, a test that never runs). Property setters and `typing.overload` stubs are the
legitimate repeats, and are allowed."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted([*(ROOT / 'trainer_nb').rglob('*.py'), *(ROOT / 'tests').glob('*.py'), *(ROOT / 'bench').glob('*.py'),
                  *(ROOT / 'tools').glob('*.py')])


def _decorator_names(node) -> set[str]:
    names = set()
    for d in getattr(node, 'decorator_list', []):
        d = d.func if isinstance(d, ast.Call) else d
        names.add(d.attr if isinstance(d, ast.Attribute) else getattr(d, 'id', ''))
    return names


def redefinitions(body: list, where: str) -> list[str]:
    "The functions and classes of `body` (a module's or a class's statements) defined a second time in it."
    seen, found = {}, []
    for node in body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)): continue
        if _decorator_names(node) & {'setter', 'deleter', 'overload', 'register'}: continue
        if node.name in seen:
            found.append(f"{where}: {node.name} defined at line {seen[node.name]} and again at line {node.lineno}")
        seen.setdefault(node.name, node.lineno)
    for node in body:
        if isinstance(node, ast.ClassDef): found += redefinitions(node.body, f"{where}, class {node.name}")
    return found


def test_the_check_finds_a_method_defined_twice():
    tree = ast.parse("class A:\n    def f(self): pass\n    def g(self): pass\n    def f(self): return 1\n"
                     "    @property\n    def p(self): pass\n    @p.setter\n    def p(self, v): pass\n"
                     "def h(): pass\ndef h(): pass\n")
    assert redefinitions(tree.body, 'm') == ['m: h defined at line 9 and again at line 10',
                                             'm, class A: f defined at line 2 and again at line 4']


@pytest.mark.parametrize('path', SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_name_defined_twice(path):
    assert redefinitions(ast.parse(path.read_text()).body, str(path.relative_to(ROOT))) == []
