"""The check that the tests write nothing into the repository (tests/conftest.py runs it around the session).

Tests write under pytest's `tmp_path` / `tmp_path_factory` (screenshots and logs too: see the `artifacts`
fixture). Around the session we take the files git knows of in the checkout, tracked, untracked and ignored,
with their size and modification time, and compare: a file that appears, changes or disappears is named, and
the session fails. Python's and pytest's caches are left out, and so is `$TRAINER_NB_ARTIFACTS` when it is set
(inside the checkout, it is where you asked the tests to keep their screenshots). Outside a git checkout, or
without git, there is no check.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

# caches that importing and running pytest write by themselves
EXCLUDE = ('__pycache__', '.pytest_cache', '.benchmarks', '.ipynb_checkpoints')
EXCLUDE_SUFFIXES = ('.egg-info',)


def _excluded(rel: str, extra: tuple[str, ...]) -> bool:
    parts = rel.split('/')
    if any(p in EXCLUDE or p.endswith(EXCLUDE_SUFFIXES) for p in parts): return True
    return any(rel == e or rel.startswith(e + '/') for e in extra)


def _extra_excludes(root: Path) -> tuple[str, ...]:
    "`$TRAINER_NB_ARTIFACTS`, relative to `root`, when it is inside it."
    chosen = os.environ.get('TRAINER_NB_ARTIFACTS')
    if not chosen: return ()
    try: return (Path(chosen).expanduser().resolve().relative_to(root.resolve()).as_posix(),)
    except ValueError: return ()


def snapshot(root: Path) -> dict[str, tuple[int, int]] | None:
    """{path relative to `root`: (size, mtime in ns)} for every file git lists in the checkout `root` (tracked,
    untracked and ignored, one by one), but the caches; None when `root` is not a git checkout or git is missing."""
    def ls(*args) -> list[str]:
        out = subprocess.run(['git', 'ls-files', '-z', *args], cwd=root, capture_output=True, timeout=120)
        if out.returncode != 0: raise OSError(out.stderr.decode(errors='replace'))
        return [p for p in out.stdout.decode('utf-8', errors='surrogateescape').split('\0') if p]
    try: paths = set(ls('--cached', '--others', '--exclude-standard')) | set(ls('--others', '--ignored',
                                                                                 '--exclude-standard'))
    except (OSError, subprocess.SubprocessError): return None
    extra, files = _extra_excludes(root), {}
    for rel in paths:
        if _excluded(rel, extra): continue
        try: st = os.lstat(root / rel)
        except FileNotFoundError: continue  # a tracked file deleted before the session
        files[rel] = (st.st_size, st.st_mtime_ns)
    return files


def changes(before: dict, after: dict) -> list[str]:
    "What happened to the files between two snapshots, one line a file: 'new: …', 'changed: …', 'removed: …'."
    return sorted([f'new: {p}' for p in after.keys() - before.keys()] +
                  [f'changed: {p}' for p in after.keys() & before.keys() if after[p] != before[p]] +
                  [f'removed: {p}' for p in before.keys() - after.keys()], key=lambda s: s.split(': ', 1)[1])
