"""A saved notebook, reopened: the digits tutorial as committed (run in a kernel by tools/exec_notebooks.sh, then
saved) opens in JupyterLab and in Notebook 7 without a kernel run, in a fresh browser context, and shows the table,
the line under it that says how the fit ended, and the final plot; no widget error. `nbconvert --to html` shows the
same, with no widget repr.
"""
import subprocess
import sys
from pathlib import Path

import pytest

from test_browser_live_view import (Lab, browser_artifacts, have_module, launch_chromium, open_notebook, outputs_text,
                                    require, require_browser, wait_for)

ROOT = Path(__file__).resolve().parent.parent
TUTORIAL = ROOT / 'nbs' / '90_tutorial.digits.ipynb'

def test_nbconvert_html_shows_no_widget(tmp_path):
    require(have_module('nbconvert'), 'nbconvert')
    out = tmp_path / 'digits.html'
    subprocess.run([sys.executable, '-m', 'nbconvert', '--to', 'html', str(TUTORIAL), '--output', str(out)],
                   check=True, capture_output=True)
    html = out.read_text(encoding='utf-8')
    assert 'VBox(' not in html and 'widget-view+json' not in html and 'model not found' not in html
    assert 'train_loss' in html and '<p>completed: ' in html and 'data:image/png;base64' in html


@pytest.mark.slow
@pytest.mark.parametrize('app', ['lab', 'notebook'])
def test_saved_tutorial_reopens_with_its_outputs(tmp_path, app, artifacts):
    require_browser(app)
    from playwright.sync_api import sync_playwright
    shots = browser_artifacts(artifacts)
    root = tmp_path / 'root'
    root.mkdir()
    (root / 'digits.ipynb').write_bytes(TUTORIAL.read_bytes())
    lab = Lab(root, tmp_path / 'lab', {}, app=app, log=shots / f'reopened_{app}.log')
    try:
        with sync_playwright() as p:
            browser = launch_chromium(p)
            page = browser.new_context(viewport={'width': 1400, 'height': 1600}).new_page()
            errors = []
            page.on('console', lambda m: errors.append(m.text) if 'model not found' in m.text.lower() else None)
            open_notebook(page, lab.notebook_url('digits.ipynb'))
            text = wait_for(lambda: 'completed: ' in outputs_text(page) and outputs_text(page), 30, 'the outputs')
            fit = page.locator('.jp-Cell:has(.jp-OutputArea-output table)').first
            fit.scroll_into_view_if_needed()
            page.wait_for_timeout(500)
            fit.screenshot(path=str(shots / f'reopened_{app}.png'))
            images = fit.locator('.jp-OutputArea-output img').count()
            browser.close()
    finally:
        lab.close()
    assert 'Error displaying widget' not in text and 'model not found' not in text and not errors, errors
    assert 'train_loss' in text and images >= 1
