"""A frontend whose clicks cannot reach a running cell: JupyterLab with a kernel of ipykernel 6 (no subshells, as on
Colab), in a second environment that this test makes (a venv over this one's packages, with `ipykernel<7`).

The fit shows its progress bars and its live plot (display updates need no click path); the panel shows no button,
and its one line says that clicks cannot reach the cell and names the kernel interrupt and `learn.resume()`. The
kernel interrupt (what ■ sends) stops the fit cleanly at a batch boundary, the line under the table says so, the
cell ends as an interrupt in one line (`FitInterrupted`), so that Run All runs no further cell, and `learn.resume()`
in the next cell, run by hand, completes it.
"""
import re
import site
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_browser_live_view import (Lab, browser_artifacts, element_screenshot, launch_chromium, open_notebook,
                                    outputs_text, require_browser, run_all, wait_for)

SETUP = """import os, time, torch
import ipykernel
from trainer_nb.all import *
from trainer_nb.demo import digits_dls, digits_model
torch.manual_seed(0)
learn = Learner(digits_model(), digits_dls(bs=32), torch.nn.functional.cross_entropy, lr=3e-3,
                metrics=[accuracy], path=os.environ['TRAINER_NB_RUN_DIR'],
                cbs=[LambdaCallback(after_batch=lambda l: time.sleep(0.02))])
print('IPYKERNEL', ipykernel.__version__)"""
FIT = "learn.fit(12)"
REPORT = "print('RESULT', learn.stop_reason, learn.step, learn.fit_state.resumable)"
RESUME = "learn.resume()\nprint('RESUMED', learn.stop_reason, learn.step)"


def environment_pth() -> str:
    """A `.pth` file's text that adds this environment's package folders (and their own `.pth` files, such as an
    editable install's) to another environment's `sys.path`, after that environment's own packages.

    `python -m venv --system-site-packages` would see the base Python's packages, not this environment's: run from a
    virtual environment, the new one would have no JupyterLab and no trainer_nb. This works from a virtual environment,
    a conda environment or the system's Python alike."""
    folders = [*site.getsitepackages(), *([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])]
    return f"import site; list(map(site.addsitedir, {[f for f in folders if Path(f).is_dir()]!r}))\n"


def venv_site_packages(python: str) -> Path:
    return Path(subprocess.run([python, '-c', 'import sysconfig; print(sysconfig.get_paths()["purelib"])'],
                               capture_output=True, text=True, check=True).stdout.strip())


@pytest.fixture(scope='module')
def old_kernel_python(tmp_path_factory) -> str:
    "The Python of a venv over this environment's packages, with ipykernel 6 in place of 7 (pip, from PyPI)."
    venv = tmp_path_factory.mktemp('ipykernel6') / 'venv'
    subprocess.run([sys.executable, '-m', 'venv', str(venv)], check=True)
    python = str(venv / 'bin' / 'python')
    (venv_site_packages(python) / 'zz_parent_environment.pth').write_text(environment_pth())
    pip = subprocess.run([python, '-m', 'pip', 'install', '-q', '--disable-pip-version-check', 'ipykernel<7'],
                         capture_output=True, text=True)
    if pip.returncode: pytest.fail(f"pip install 'ipykernel<7' failed:\n{pip.stderr[-2000:]}")
    check = 'import ipykernel, jupyterlab, trainer_nb; print(ipykernel.__version__)'
    version = subprocess.run([python, '-c', check], capture_output=True, text=True, check=True).stdout.strip()
    assert int(version.split('.')[0]) < 7, version
    return python


def test_a_new_venv_sees_this_environments_packages(tmp_path):
    "The fixture's way of reaching this environment's packages, checked alone (fast, no pip): JupyterLab and trainer_nb."
    subprocess.run([sys.executable, '-m', 'venv', '--without-pip', str(tmp_path / 'v')], check=True)
    python = str(tmp_path / 'v' / 'bin' / 'python')
    assert subprocess.run([python, '-c', 'import jupyterlab'], capture_output=True).returncode != 0  # (alone: none)
    (venv_site_packages(python) / 'zz_parent_environment.pth').write_text(environment_pth())
    out = subprocess.run([python, '-c', 'import jupyterlab, trainer_nb, sys; print(trainer_nb.__file__, sys.prefix)'],
                         capture_output=True, text=True, check=True).stdout.split()
    assert Path(out[0]).resolve().parent == (Path(__file__).parents[1] / 'trainer_nb').resolve()
    assert Path(out[1]) == tmp_path / 'v'  # (still the new environment: its own packages come first)


@pytest.mark.slow
def test_no_subshells_no_buttons_interrupt_and_resume(tmp_path, artifacts, old_kernel_python):
    require_browser()
    import nbformat
    from playwright.sync_api import sync_playwright
    shots = browser_artifacts(artifacts)
    root = tmp_path / 'root'
    root.mkdir()
    cells = [nbformat.v4.new_code_cell(c) for c in (SETUP, FIT, REPORT, RESUME)]
    nbformat.write(nbformat.v4.new_notebook(cells=cells), root / 'old_kernel.ipynb')
    lab = Lab(root, tmp_path / 'lab', {'TRAINER_NB_RUN_DIR': str(root / 'run')}, log=shots / 'old_kernel_lab.log',
              python=old_kernel_python)
    try:
        with sync_playwright() as p:
            browser = launch_chromium(p)
            page = browser.new_page(viewport={'width': 1400, 'height': 1300})
            open_notebook(page, lab.notebook_url('old_kernel.ipynb'))
            run_all(page)
            line = wait_for(lambda: 'Clicks cannot reach this running cell' in outputs_text(page) and outputs_text(page),
                            90, "the panel's line")
            wait_for(lambda: page.locator('.jp-OutputArea-output img').count() > 0, 30, 'the live plot')
            bars = page.locator('.jp-OutputArea-output progress').count()
            buttons = page.locator('button.jupyter-button').count()
            time.sleep(1.5)  # (a few more steps, and the panel's line redrawn)
            element_screenshot(page, '.jp-Cell:has(progress)', shots / 'old_kernel_running.png')
            kernel = re.search(r'"id": ?"([^"]+)"', lab.api('GET', '/api/kernels').decode()).group(1)
            lab.api('POST', f'/api/kernels/{kernel}/interrupt')  # what the ■ button sends
            # the fit stops cleanly, then its cell ends as an interrupt, in one line: Run All stops there
            wait_for(lambda: 'FitInterrupted' in outputs_text(page), 60, "the interrupted cell's last line")
            time.sleep(2)  # (long enough for the next cell to have run, had Run All gone on)
            interrupted = outputs_text(page)
            # (the cell that ends in the interrupt's line: a fit stopped in its first epoch has no table row yet)
            element_screenshot(page, '.jp-Cell:has-text("FitInterrupted")', shots / 'old_kernel_interrupted_cell.png')
            # the person runs the rest by hand: the selected cell and those below it, from the Run menu's command
            page.evaluate("() => { window.jupyterapp.shell.currentWidget.content.activeCellIndex = 2; "
                          "return window.jupyterapp.commands.execute('notebook:run-all-below'); }")
            text = wait_for(lambda: 'RESUMED' in outputs_text(page) and outputs_text(page), 120, 'the resumed fit')
            element_screenshot(page, '.jp-OutputArea-output:has(table)', shots / 'old_kernel_stopped.png')
            browser.close()
    finally:
        lab.close()
    assert re.search(r'IPYKERNEL 6\.', text), text
    assert 'RESULT' not in interrupted and 'Traceback' not in interrupted, interrupted  # (Run All stopped; one line)
    assert re.search(r'FitInterrupted: the fit stopped cleanly after step \d+, and learn\.resume\(\) continues it\. '
                     r'The cell ends as an interrupt, so that Run All goes no further\.', interrupted), interrupted
    assert buttons == 0 and bars >= 1, (buttons, bars)
    assert 'interrupt the kernel' in line and 'learn.resume() then continues it' in line, line
    reason, step, resumable = re.search(r'RESULT (\w+) (\d+) (\w+)', text).groups()
    assert (reason, resumable) == ('interrupted', 'True') and 0 < int(step) < 12 * 45, text
    assert '(interrupted); learn.resume() continues it' in text, text  # the line under the table
    assert re.search(r'RESUMED completed 540', text), text
