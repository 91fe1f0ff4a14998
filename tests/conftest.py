import os
import sys

os.environ.setdefault('MPLBACKEND', 'Agg')
# The commands the tests start (jupyter, sphinx-build, nbdev's, `python` in tools/*.sh) are this environment's, even
# when pytest runs from a virtual environment that is not activated (`.venv/bin/pytest tests`).
os.environ['PATH'] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get('PATH', '')

from pathlib import Path

import pytest
import torch

import repo_guard

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


@pytest.fixture(scope='session')
def artifacts(tmp_path_factory) -> Path:
    """The folder for the screenshots and logs the tests keep: a folder of pytest's temporary ones by default (the
    tests write nothing into the repository); `TRAINER_NB_ARTIFACTS=/some/dir pytest tests` keeps them in
    /some/dir, to look at them."""
    chosen = os.environ.get('TRAINER_NB_ARTIFACTS')
    if not chosen: return tmp_path_factory.mktemp('artifacts')
    path = Path(chosen).expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


# ---- tests write only under tmp_path: the files of the checkout, before and after the session (tests/repo_guard.py)

def pytest_sessionstart(session):
    session.config._repo_before = repo_guard.snapshot(ROOT)


def pytest_sessionfinish(session, exitstatus):
    before = getattr(session.config, '_repo_before', None)
    after = repo_guard.snapshot(ROOT) if before is not None else None
    written = repo_guard.changes(before, after) if after is not None else []
    session.config._repo_written = written
    if written and session.exitstatus == pytest.ExitCode.OK: session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    written = getattr(config, '_repo_written', [])
    if not written: return
    tr = terminalreporter
    tr.section('files written into the repository', sep='=', red=True, bold=True)
    tr.line(f"The tests must write only under tmp_path / tmp_path_factory ({ROOT} is the repository):", red=True)
    for line in written[:50]: tr.line(f"  {line}")
    if len(written) > 50: tr.line(f"  ... and {len(written) - 50} more")
