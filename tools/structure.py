"""The structure of the package: its import graph (local imports included) and its circles, its classes and the
chains of bases that have one subclass and no other user, its public names, and its largest module.

Run: python tools/structure.py [PACKAGE_DIR]     (default: trainer_nb beside this folder)
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def modules(package: Path) -> dict[str, Path]:
    "Every module of `package` by dotted name (`trainer_nb.callback.core`), generated index aside."
    found = {}
    for path in sorted(package.rglob('*.py')):
        if path.name == '_modidx.py': continue
        parts = path.relative_to(package.parent).with_suffix('').parts
        name = '.'.join(parts[:-1] if parts[-1] == '__init__' else parts)
        found[name] = path
    return found


def imported(name: str, path: Path, known: set[str]) -> set[str]:
    "The package's modules that module `name` imports, anywhere in it (in functions too), relative or absolute."
    package = name if path.name == '__init__.py' else name.rpartition('.')[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import): targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ''
            if node.level:
                anchor = package.split('.')[:len(package.split('.')) - node.level + 1]
                base = '.'.join(anchor + ([base] if base else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        else: continue
        for t in targets:
            while t and t not in known: t = t.rpartition('.')[0]  # a name in a module: the module
            if t and t != name: out.add(t)
    return out


def import_graph(package: Path = ROOT / 'trainer_nb') -> dict[str, set[str]]:
    "Module -> the package's modules it imports (the package's `__init__` and `all` aside: they import everything)."
    mods = modules(package)
    skip = {package.name, f"{package.name}.all", f"{package.name}.callback"}
    return {m: imported(m, p, set(mods)) - skip for m, p in mods.items() if m not in skip}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    "The strongly connected components of more than one module (Tarjan): each is a circle of imports."
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    def visit(v):
        index[v] = low[v] = counter[0]; counter[0] += 1
        stack.append(v); on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on: low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v: break
            if len(comp) > 1: out.append(sorted(comp))
    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index: visit(v)
    return out


def classes(package: Path = ROOT / 'trainer_nb') -> dict[str, list[str]]:
    "Each class of the package -> the names of its bases."
    out = {}
    for path in modules(package).values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                out[node.name] = [b.id if isinstance(b, ast.Name) else ast.unparse(b) for b in node.bases]
    return out


def one_subclass_chains(package: Path = ROOT / 'trainer_nb') -> list[tuple[str, str]]:
    """(base, subclass) pairs where a class of the package has exactly one subclass and no other user: its name
    appears nowhere in the package (nor in `trainer_nb.all`'s users: tests, notebooks) but in its subclass's bases."""
    cls = classes(package)
    texts = [p.read_text() for p in modules(package).values()]
    pairs = []
    for base in cls:
        subs = [c for c, bases in cls.items() if base in bases]
        if len(subs) != 1: continue
        uses = sum(t.count(base) for t in texts)  # its definition, the subclass's bases, and anything else
        exported_uses = uses - 2 - sum(t.count(f"'{base}'") for t in texts)  # (its name in __all__ lists)
        if exported_uses <= 0: pairs.append((base, subs[0]))
    return pairs


def public_names() -> int:
    "How many names `from trainer_nb.all import *` brings."
    code = "import trainer_nb.all as a; print(len([n for n in dir(a) if not n.startswith('_')]))"
    return int(subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True,
                              cwd=ROOT).stdout)


def largest_module(package: Path = ROOT / 'trainer_nb') -> tuple[str, int]:
    sizes = {m: len(p.read_text().splitlines()) for m, p in modules(package).items()}
    name = max(sizes, key=sizes.get)
    return name, sizes[name]


def main():
    package = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / 'trainer_nb'
    graph = import_graph(package)
    found = circles(graph)
    print(f"classes: {len(classes(package))}")
    chains = one_subclass_chains(package)
    print(f"one-subclass bases with no other user: {len(chains)} {chains}")
    print(f"circles of imports: {len(found)}" + ''.join(f"\n  {' <-> '.join(c)}" for c in found))
    print(f"largest module: {largest_module(package)}")
    if package == ROOT / 'trainer_nb': print(f"public names of trainer_nb.all: {public_names()}")


if __name__ == '__main__': main()
