"""Runs, compared in the notebook, as a user: JupyterLab in headless Chromium (see test_browser_live_view.py).

A notebook trains the digits MLP twice (two learning rates), then a third time with `compare=` the first two: while
the third fit runs, its live plot shows the earlier runs' curves in grey behind its own. Then `Runs(...)` shows its
table and `runs.plot(...)` the curves overlaid. The notebook is saved, the server stopped, and the notebook reopened
by a new server in a fresh browser context: the table, the overlay and the compared fit's final plot are still there,
as static HTML and PNG. Screenshots go to `browser/runs_*.png` of the artifacts folder.
"""
import base64
import io
import time

import pytest

from test_browser_live_view import (Lab, browser_artifacts, launch_chromium, open_notebook, outputs_text,
                                    require_browser, run_all, save_notebook, wait_for)

CELLS = [
    "import time\n"
    "from pathlib import Path\n"
    "from trainer_nb.all import *\n"
    "from trainer_nb.demo import digits_learner\n"
    "root = Path('runs')\n"
    "for lr in (3e-3, 1e-2):\n"
    "    learn = digits_learner(root / f'lr{lr:g}', lr=lr)\n"
    "    with learn.no_bar(): learn.fit(4)",
    # about 4 s (92 steps of 40 ms, and the validations): long enough to look at it while it runs
    "slow = LambdaCallback(before_batch=lambda learn: learn.training and time.sleep(0.04))\n"
    "learn = digits_learner(root / 'lr0.03', lr=3e-2)\n"
    "learn.fit(4, cbs=slow, compare=[root / 'lr0.003', root / 'lr0.01'])",
    "runs = Runs(root)\n"
    "runs",
    "runs.plot('valid/loss', 'valid/accuracy')",
]
GREYS = (140, 184)  # the reference runs' curves: matplotlib's '0.55' and '0.72' greys (plotting._GREYS)


def notebook(path):
    import nbformat
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    nb.metadata['kernelspec'] = {'name': 'python3', 'display_name': 'Python 3', 'language': 'python'}
    nbformat.write(nb, path)


def grey_pixels(src: str) -> int:
    """The pixels of a PNG data URL in the greys of both reference runs, the fewer of the two. A line's pixels have
    its grey exactly; the antialiased edges of text and axes have each grey in a few pixels only (a plot with no
    reference: 12 and 20 pixels; with two: 219 and 224)."""
    from PIL import Image
    image = Image.open(io.BytesIO(base64.b64decode(src.split(',', 1)[1]))).convert('RGB')
    counts = {grey: 0 for grey in GREYS}
    for r, g, b in image.getdata():
        if r == g == b and r in counts: counts[r] += 1
    return min(counts.values())


def images(page) -> list[str]:
    return [src for src in page.eval_on_selector_all('.jp-OutputArea-output img', 'els => els.map(e => e.src)') if src]


@pytest.mark.slow
def test_compare_live_then_the_runs_table_survives_reopening(tmp_path, artifacts):
    require_browser()
    from playwright.sync_api import sync_playwright
    shots = browser_artifacts(artifacts)
    root = tmp_path / 'root'
    root.mkdir()
    saved = root / 'runs.ipynb'
    notebook(saved)
    mtime0 = saved.stat().st_mtime
    lab = Lab(root, tmp_path / 'lab', {}, log=shots / 'runs_lab.log')
    try:
        with sync_playwright() as p:
            browser = launch_chromium(p)
            page = browser.new_page(viewport={'width': 1400, 'height': 1500})
            open_notebook(page, lab.notebook_url('runs.ipynb'))
            run_all(page)

            # during the third fit: its live plot, with the earlier runs' curves in grey behind its own
            wait_for(lambda: page.locator('.jp-OutputArea-output progress').count(), 120, 'the third fit')
            live = wait_for(lambda: images(page), 60, 'the live plot of the third fit')[0]
            wait_for(lambda: page.locator('.jp-OutputArea-output progress').count(), 5, 'the fit, still running')
            page.screenshot(path=str(shots / 'runs_1_compared_live.png'))
            assert grey_pixels(live) > 100, 'no grey reference curve in the live plot'

            # then the table and the overlay
            text = wait_for(lambda: 'lr0.03' in outputs_text(page) and len(images(page)) >= 2 and outputs_text(page),
                            120, 'the Runs table and its plot')
            table = page.locator('.jp-OutputArea-output table:has-text("lr0.003")').first
            table.scroll_into_view_if_needed()
            page.wait_for_timeout(500)
            page.screenshot(path=str(shots / 'runs_2_table.png'))
            rows = page.eval_on_selector_all('.jp-OutputArea-output table:has-text("lr0.003") tbody tr',
                                             'els => els.map(e => e.cells[0].innerText)')
            assert rows == ['lr0.003', 'lr0.01', 'lr0.03'], rows
            header = page.eval_on_selector_all('.jp-OutputArea-output table:has-text("lr0.003") th',
                                               'els => els.map(e => e.innerText)')
            assert header[:2] == ['run', 'lr'] and 'valid/accuracy' in header and 'samples/s' in header, header
            final = images(page)
            assert grey_pixels(final[0]) > 100  # the compared fit's final figure keeps the grey curves
            save_notebook(page, saved, mtime0)
            browser.close()
    finally:
        lab.close()
    assert 'Traceback' not in text, text

    # reopened by a new server, in a fresh browser context, with no kernel run: the same static outputs
    lab = Lab(root, tmp_path / 'lab2', {}, log=shots / 'runs_reopened.log')
    try:
        with sync_playwright() as p:
            browser = launch_chromium(p)
            page = browser.new_context(viewport={'width': 1400, 'height': 1500}).new_page()
            open_notebook(page, lab.notebook_url('runs.ipynb'))
            text = wait_for(lambda: 'lr0.03' in outputs_text(page) and outputs_text(page), 30, 'the saved outputs')
            time.sleep(0.5)
            page.locator('.jp-OutputArea-output table:has-text("lr0.003")').first.scroll_into_view_if_needed()
            page.screenshot(path=str(shots / 'runs_3_reopened.png'))
            shown = images(page)
            browser.close()
    finally:
        lab.close()
    assert 'Error displaying widget' not in text and 'model not found' not in text
    assert 'completed' in text and 'lr0.003' in text and 'lr0.01' in text
    assert len(shown) == 2 and grey_pixels(shown[0]) > 100, len(shown)  # the compared fit's plot, and the overlay
