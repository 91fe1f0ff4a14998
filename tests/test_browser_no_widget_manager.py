"""A frontend without a widget manager: JupyterLab with its widgets extension disabled (as nteract, or a locked-down
JupyterHub without `jupyterlab_widgets`), in headless Chromium driven by Playwright.

The extension is disabled in this test's own Jupyter config folder (`jupyter labextension disable` with
`JUPYTER_CONFIG_DIR` set to it), nothing global. `tests/notebooks/live_view.ipynb` runs a short fit: the live plot
and the panel's status line (plain HTML outputs, updated in place) update while it runs, the bars move, and no
"Error displaying widget" or widget repr text (`VBox(children=...`) appears: where the buttons would be, the page
shows their fallback line, which says how to stop. When the fit ends, the table and the final plot stay.
"""
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_browser_live_view import (NOTEBOOK, RESULT, STEPS_PER_EPOCH, Lab, bar_values, browser_artifacts,
                                    element_screenshot, launch_chromium, open_notebook, outputs_text, plot_src,
                                    require_browser, run_all, status_text, wait_for)

WIDGET_TEXT = re.compile(r'Error displaying widget|VBox\(|HBox\(|Button\(|model not found')


def disable_widgets_extension(config: Path):
    "What a person does: `jupyter labextension disable`, here in this test's own config folder only."
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(config))
    subprocess.run([sys.executable, '-m', 'jupyter', 'labextension', 'disable', '--level=user',
                    '@jupyter-widgets/jupyterlab-manager'], env=env, check=True, capture_output=True)
    assert '"@jupyter-widgets/jupyterlab-manager": true' in (config / 'labconfig' / 'page_config.json').read_text()


@pytest.mark.slow
def test_live_plot_and_status_line_update_without_a_widget_manager(tmp_path, artifacts):
    require_browser()
    from playwright.sync_api import sync_playwright
    shots = browser_artifacts(artifacts)
    root = tmp_path / 'root'
    root.mkdir()
    shutil.copy(NOTEBOOK, root / 'live_view.ipynb')
    disable_widgets_extension(tmp_path / 'lab' / 'config')  # (the folder `Lab` gives JupyterLab as its config)
    lab = Lab(root, tmp_path / 'lab', {'TRAINER_NB_EPOCHS': '8', 'TRAINER_NB_STEP_DELAY': '0.02',
                                       'TRAINER_NB_RUN_DIR': str(root / 'run')}, log=shots / 'no_widgets_lab.log')
    try:
        with sync_playwright() as p:
            browser = launch_chromium(p)
            page = browser.new_page(viewport={'width': 1400, 'height': 1300})
            console = []
            page.on('console', lambda msg: console.append(msg.text))
            open_notebook(page, lab.notebook_url('live_view.ipynb'))
            assert not page.evaluate("() => window.jupyterapp.hasPlugin('@jupyter-widgets/jupyterlab-manager:plugin')"
                                     " && window.jupyterapp.isPluginActivated('@jupyter-widgets/jupyterlab-manager:plugin')")
            run_all(page)
            wait_for(lambda: status_text(page).startswith('step '), 90, 'the status line')
            statuses, plots, bars, texts, shot = [], [], [], [], False
            while not RESULT.search(outputs_text(page)):
                line, src, text = status_text(page), plot_src(page), outputs_text(page)
                if line and (not statuses or statuses[-1] != line): statuses.append(line)
                if src and (not plots or plots[-1] != src): plots.append(src)
                bars.append(tuple(bar_values(page)))
                texts.append(text)
                if len(plots) >= 2 and len(statuses) >= 3 and not shot:
                    page.screenshot(path=str(shots / 'no_widgets_running.png'))
                    shot = True
                time.sleep(0.4)
            text = outputs_text(page)
            time.sleep(0.5)
            page.screenshot(path=str(shots / 'no_widgets_done.png'))
            element_screenshot(page, '.jp-OutputArea-output:has(table)', shots / 'no_widgets_table.png')
            final_plots = page.locator('.jp-OutputArea-output img').count()
            browser.close()
    finally:
        lab.close()
    steps = [int(m[1]) for m in (re.match(r'step (\d+)/', s) for s in statuses) if m]
    assert len(steps) >= 3 and steps == sorted(steps), statuses  # the status line updated as the fit went
    assert len(plots) >= 2 and len(set(bars)) >= 3, (len(plots), len(set(bars)))  # the plot changed, the bars moved
    assert not any(WIDGET_TEXT.search(t) for t in texts + [text]), [t for t in texts if WIDGET_TEXT.search(t)][:1]
    # where the buttons would be: their fallback line, which says how to stop
    assert any('Stop: interrupt the kernel' in t for t in texts), texts[:2]
    reason, steps_done, *_ = RESULT.search(text).groups()
    assert (reason, int(steps_done)) == ('completed', 8 * STEPS_PER_EPOCH)
    assert 'completed: ' in text and final_plots == 1  # the outcome line under the table, and the final plot
