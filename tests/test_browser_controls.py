"""The control panel, clicked in JupyterLab and in Notebook 7 (headless Chromium, Playwright) while a fit runs.

A fit of the digits MLP with the default callbacks, slowed to ~2.7 s an epoch (its resume is not slowed). In the page, while it trains: **Save now** (the status
line then says "saved checkpoints/last.pt at step N", and the file is there), **Validate now** (a validation loss
is logged at that step), **Scale lr** with factor 0.5 (the logged lr halves from the next step), then **Stop after
epoch** in JupyterLab (the fit ends at the end of an epoch, resumable) and **Stop** in Notebook 7 (it ends after the
current batch, resumable). The kernel reports what happened; `learn.resume()` in
the next cell completes the fit. Screenshots of the panel go to `controls_*.png` in a temporary folder of pytest's,
or in `$TRAINER_NB_ARTIFACTS/browser/` when that is set.
"""
import json
import re
from pathlib import Path

import pytest

from test_browser_live_view import (Lab, browser_artifacts, element_screenshot, launch_chromium, open_notebook,
                                    outputs_text, require_browser, run_all, status_text, wait_for)

STEPS_PER_EPOCH = 45  # the digits: 1438 training images, batches of 32
SETUP = """import json, os, time
import torch
from trainer_nb.all import *
from trainer_nb.demo import digits_dls, digits_model
torch.manual_seed(0)
# ~2.7 s an epoch while the buttons are clicked; the resumed fit runs at full speed (it only has to complete)
slow = LambdaCallback(before_batch=lambda learn: learn.training and learn.fit_kind == 'fit' and time.sleep(0.06))
learn = Learner(digits_model(), digits_dls(bs=32), torch.nn.functional.cross_entropy, lr=3e-3,
                metrics=[accuracy], path=os.environ['TRAINER_NB_RUN_DIR'], cbs=[slow])"""
REPORT = """h = learn.storage.histories()
print('REPORT ' + json.dumps({'stop_reason': learn.stop_reason, 'step': learn.step, 'epoch': learn.epoch,
      'resumable': learn.fit_state.resumable, 'controls': learn.controls.history,
      'valid': [i for _, i in h['valid/loss'].values()], 'lr': [[i, v] for v, i in h['lr'].values()],
      'last': os.path.isfile(learn.checkpoint_path('last'))}))"""
RESUME = "learn.resume()\nprint('RESUMED', learn.stop_reason, learn.step)"


def notebook(path: Path):
    import nbformat
    cells = [nbformat.v4.new_code_cell(c) for c in (SETUP, 'learn.fit(12)', REPORT, RESUME)]
    nbformat.write(nbformat.v4.new_notebook(cells=cells), path)


def status_line(page) -> str:
    return status_text(page)


def click_and_wait(page, name: str, expect: str, shot: Path) -> str:
    "Click the panel's button `name`, wait for the status line to say `expect`, take a screenshot of the panel."
    page.click(f"button.jupyter-button:text-is('{name}')")
    line = wait_for(lambda: re.search(expect, status_line(page)) and status_line(page), 30, f"'{expect}' after {name}")
    element_screenshot(page, '.jp-OutputArea-output', shot)
    return line



@pytest.mark.slow
@pytest.mark.parametrize('app', ['lab', 'notebook'])
def test_each_control_clicked_in_the_page(tmp_path, app, artifacts):
    require_browser(app)
    from playwright.sync_api import sync_playwright
    last_click = 'Stop after epoch' if app == 'lab' else 'Stop'
    shots = browser_artifacts(artifacts)
    root = tmp_path / 'root'
    root.mkdir()
    notebook(root / 'controls.ipynb')
    lab = Lab(root, tmp_path / 'lab', {'TRAINER_NB_RUN_DIR': str(root / 'run')}, app=app,
              log=shots / f'jupyterlab_{app}.log')
    try:
        with sync_playwright() as p:
            browser = launch_chromium(p)
            page = browser.new_page(viewport={'width': 1400, 'height': 1300})
            open_notebook(page, lab.notebook_url('controls.ipynb'))
            run_all(page)
            page.wait_for_selector("button.jupyter-button:text-is('Save now')", timeout=60_000)
            wait_for(lambda: re.search(r'step [1-9]', status_line(page)), 30, 'the first steps')
            element_screenshot(page, '.jp-OutputArea-output', shots / f'controls_{app}_running.png')
            saved = click_and_wait(page, 'Save now', r'saved checkpoints/last\.pt at step \d+',
                                   shots / f'controls_{app}_save.png')
            validated = click_and_wait(page, 'Validate now', r'validated at step \d+: loss',
                                       shots / f'controls_{app}_validate.png')
            scaled = click_and_wait(page, 'Scale lr', r'lr x0\.5 from step \d+', shots / f'controls_{app}_scale_lr.png')
            # the last click ends the fit: Stop after epoch in JupyterLab, Stop (after this batch) in Notebook 7
            page.click(f"button.jupyter-button:text-is('{last_click}')")
            report = wait_for(lambda: 'REPORT ' in outputs_text(page) and outputs_text(page), 90, 'the fit to stop')
            # (the panel has gone: its output is an empty HTML; the table, with the outcome line under it, stays)
            element_screenshot(page, '.jp-OutputArea-output:has(table)', shots / f'controls_{app}_stopped.png')
            resumed = wait_for(lambda: re.search(r'RESUMED (\w+) (\d+)', outputs_text(page)), 120, 'the resumed fit')
            browser.close()
    finally:
        lab.close()

    r = json.loads(re.search(r'REPORT (\{.*\})', report).group(1))
    steps = {h['control']: h['step'] for h in r['controls']}
    # Save now: the file, at the step the status line named
    assert r['last'] and f"at step {steps['save']}" in saved, (saved, steps)
    # Validate now: a validation loss logged at that step, besides those at the epochs' ends
    assert steps['validate'] in r['valid'] and f"validated at step {steps['validate']}" in validated
    # Scale lr: the lr of the steps after it is half the lr it would have been (no schedule here: 3e-3)
    lrs = dict(r['lr'])
    assert lrs[steps['scale_lr']] == pytest.approx(3e-3) and lrs[steps['scale_lr'] + 1] == pytest.approx(1.5e-3), scaled
    # Stop after epoch: the fit ended at the end of an epoch; Stop: at a batch boundary; resumable, and then
    # learn.resume() completed it
    assert (r['stop_reason'], r['resumable']) == ('interrupted', True)
    if last_click == 'Stop after epoch':
        assert r['step'] % STEPS_PER_EPOCH == 0 and r['step'] == r['epoch'] * STEPS_PER_EPOCH, r
    else: assert r['controls'][-1]['control'] == 'stop' and 0 < r['step'] < 12 * STEPS_PER_EPOCH, r
    assert resumed.groups() == ('completed', str(12 * STEPS_PER_EPOCH))
