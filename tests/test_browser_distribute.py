"""A `distribute` fit of two processes in JupyterLab (headless Chromium, Playwright): the panel's status line shows
both processes' step times (process 1 is made the slower one), and the Stop button, which reaches the kernel
(process 0) only, stops both processes after the same step. Screenshots: `distribute_*.png` in a temporary folder
of pytest's, or in `$TRAINER_NB_ARTIFACTS/browser/`.
"""
import json
import re
from pathlib import Path

import pytest

from test_browser_live_view import (Lab, browser_artifacts, element_screenshot, launch_chromium, open_notebook,
                                    outputs_text, require_browser, run_all, status_text, wait_for)

SETUP = """import json, os, time
import torch
from trainer_nb.all import *
from trainer_nb.demo import digits_dls, digits_model

class Straggler(Callback):  # process 1 takes twice as long over each batch
    def before_batch(self):
        if self.learn.training: time.sleep(0.12 if self.learn.rank == 1 else 0.06)

def make():
    torch.manual_seed(0)
    return Learner(digits_model(), digits_dls(bs=16), torch.nn.functional.cross_entropy, lr=3e-3,
                   metrics=[accuracy], path=os.environ['TRAINER_NB_RUN_DIR'], cbs=[Straggler()])

learn = distribute(make, 2)"""
REPORT = """print('REPORT ' + json.dumps(learn.workers.each(lambda l: [l.stop_reason, l.step, l.fit_state.resumable])))
learn.close()"""


def notebook(path: Path):
    import nbformat
    cells = [nbformat.v4.new_code_cell(c) for c in (SETUP, 'learn.fit(12)', REPORT)]
    nbformat.write(nbformat.v4.new_notebook(cells=cells), path)


def status_line(page) -> str:
    return status_text(page)


TIMES = r'2 processes: slowest ([\d,]+) ms/step \(process (\d)\), fastest ([\d,]+) ms \(process (\d)\)'


@pytest.mark.slow
def test_stop_button_stops_every_process_and_the_status_line_shows_their_step_times(tmp_path, artifacts):
    require_browser('lab')
    from playwright.sync_api import sync_playwright
    shots = browser_artifacts(artifacts)
    root = tmp_path / 'root'
    root.mkdir()
    notebook(root / 'distribute.ipynb')
    lab = Lab(root, tmp_path / 'lab', {'TRAINER_NB_RUN_DIR': str(root / 'run')}, log=shots / 'jupyterlab_distribute.log')
    try:
        with sync_playwright() as p:
            browser = launch_chromium(p)
            page = browser.new_page(viewport={'width': 1400, 'height': 1300})
            open_notebook(page, lab.notebook_url('distribute.ipynb'))
            run_all(page)
            page.wait_for_selector("button.jupyter-button:text-is('Stop')", timeout=120_000)
            wait_for(lambda: re.search(r'step (1[0-9]|[2-9]\d)\b', status_line(page)), 60, 'ten steps')
            line = wait_for(lambda: re.search(TIMES, status_line(page)) and status_line(page), 30, 'the step times')
            element_screenshot(page, '.jp-OutputArea-output', shots / 'distribute_running.png')
            page.click("button.jupyter-button:text-is('Stop')")
            report = wait_for(lambda: 'REPORT ' in outputs_text(page) and outputs_text(page), 90, 'the fit to stop')
            browser.close()
    finally:
        lab.close()

    print(line, report, sep="\n")
    slowest, slow_rank, fastest, fast_rank = re.search(TIMES, line).groups()
    assert (slow_rank, fast_rank) == ('1', '0') and int(slowest.replace(',', '')) > int(fastest.replace(',', '')), line
    (stop0, step0, res0), (stop1, step1, res1) = json.loads(re.search(r'REPORT (\[.*\])', report).group(1))
    assert (stop0, res0) == (stop1, res1) == ('interrupted', True) and step0 == step1 > 10, report
