"""The check of tests/conftest.py that the tests write nothing into the repository (tests/repo_guard.py), on a small
git checkout of its own."""
import os
import shutil
import subprocess

import pytest

from repo_guard import changes, snapshot


@pytest.mark.skipif(shutil.which('git') is None, reason='git missing')
def test_files_written_into_a_checkout_are_named(tmp_path, monkeypatch):
    repo = tmp_path / 'repo'
    (repo / 'pkg').mkdir(parents=True)
    (repo / '.gitignore').write_text('_build/\nruns/\n*.egg-info/\n')
    (repo / 'pkg' / 'a.py').write_text('a = 1\n')
    (repo / 'pkg' / 'old.py').write_text('old = 1\n')
    subprocess.run(['git', 'init', '-q'], cwd=repo, check=True)
    subprocess.run(['git', 'add', '.'], cwd=repo, check=True)
    (repo / '_build').mkdir()
    (repo / '_build' / 'kept.html').write_text('<p>')
    monkeypatch.setenv('TRAINER_NB_ARTIFACTS', str(repo / 'shots'))
    before = snapshot(repo)

    (repo / 'pkg' / 'a.py').write_text('a = 22\n')                  # a tracked file rewritten
    (repo / 'pkg' / 'old.py').unlink()                              # ... and one removed
    (repo / '_build' / 'kept.html').write_text('<p>built again')    # an ignored file rewritten
    (repo / 'runs' / 'x').mkdir(parents=True)
    (repo / 'runs' / 'x' / 'metrics.json').write_text('{}')          # in an ignored folder
    (repo / 'plot.png').write_bytes(b'\x89PNG')                      # untracked
    for cache in ('pkg/__pycache__', '.pytest_cache', 'pkg.egg-info', 'shots'):
        (repo / cache).mkdir()
        (repo / cache / 'f').write_text('')                          # caches, and $TRAINER_NB_ARTIFACTS: left out
    assert changes(before, snapshot(repo)) == ['changed: _build/kept.html', 'changed: pkg/a.py', 'removed: pkg/old.py',
                                               'new: plot.png', 'new: runs/x/metrics.json']
    assert changes(before, before) == []


def test_outside_a_checkout_there_is_no_check(tmp_path):
    inside = subprocess.run(['git', 'rev-parse'], cwd=tmp_path, capture_output=True).returncode == 0
    if inside or os.environ.get('GIT_DIR'): pytest.skip("pytest's temporary folder is in a git checkout")
    assert snapshot(tmp_path) is None
