"""The live view under marimo, as a user sees it: `marimo edit` and the app view `marimo run` (started here, on
127.0.0.1), in headless Chromium driven by Playwright.

The notebook is `tests/notebooks/marimo_fit.py`: the digits fit with the default callbacks, then a line that says how
it ended, and a resume cell gated by a run button. While the fit runs, its cell's output shows the status line, the
progress bars (which move) and the live plot (which changes); when it ends, the output keeps the table with the
outcome line under it and the final plot. In `marimo edit`, marimo's interrupt button stops the fit at a batch
boundary ('interrupted'); the cell then ends stopped, keeping its output, and the cell that depends on it does not
run (as Run All stops at an interrupted cell in Jupyter); the resume button continues the fit to the weights of a fit
never stopped.

marimo delivers no UI click to a running cell (checked here with `mo.ui.button`: the click is handled when the cell
has ended), so the panel shows no Stop button under marimo and its line names marimo's interrupt.

Needs `marimo`, `playwright` and Chromium; skipped without them (failed under CI). Screenshots go to a temporary
folder of pytest's, or to `$TRAINER_NB_ARTIFACTS/browser/` (`marimo_*.png`).
"""
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from test_browser_live_view import (CHROMIUM, browser_artifacts, element_screenshot, free_port, have_module,
                                    launch_chromium, require, wait_for)

NOTEBOOK = Path(__file__).resolve().parent / 'notebooks' / 'marimo_fit.py'
STEPS_PER_EPOCH = 45
RESULT = re.compile(r'RESULT stop_reason=(\w+) step=(\d+)')
ANCESTOR_STOPPED = re.compile(r"wasn't run because an ancestor was stopped")
RESUMED = re.compile(r'RESUMED stop_reason=(\w+) step=(\d+) same_weights=(\w+)')


def require_marimo():
    require(have_module('marimo'), 'marimo')
    require(have_module('playwright'), 'the playwright Python package')
    require(Path(CHROMIUM).exists(), f'Chromium ({CHROMIUM}; apt-get install -y chromium)')


class Marimo:
    "`marimo edit` or `marimo run` of `notebook` (copied into `root`) on 127.0.0.1, with its config kept in `state`."
    def __init__(self, mode: str, notebook: Path, root: Path, state: Path, env: dict, log: Path):
        self.port, self.mode = free_port(), mode
        self.url = f"http://127.0.0.1:{self.port}/"
        shutil.copy(notebook, root / notebook.name)
        env = dict(os.environ, **env, XDG_CONFIG_HOME=str(state / 'config'), XDG_CACHE_HOME=str(state / 'cache'),
                   XDG_STATE_HOME=str(state / 'state'))
        self.log = open(log, 'w')
        self.proc = subprocess.Popen(
            [sys.executable, '-m', 'marimo', mode, '--headless', '--no-token', '--host', '127.0.0.1',
             '-p', str(self.port), *(['--skip-update-check'] if mode == 'edit' else []), notebook.name],
            cwd=root, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + 60
        while True:
            try:
                with urllib.request.urlopen(self.url, timeout=2): break
            except OSError: pass
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"marimo {mode} did not start; see {log}")
            time.sleep(0.3)

    def close(self):
        os.killpg(self.proc.pid, signal.SIGTERM)  # our own process group only (the server and its kernel)
        try: self.proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self.log.close()


def open_app(page, server: Marimo):
    "Open the notebook; in `marimo edit`, run every cell as a person does (the run-all button at the bottom right)."
    page.goto(server.url)
    if server.mode != 'edit': return  # (the app view runs the notebook when it opens)
    run_all = page.locator('button.mo-button[data-testid=run-button]')
    stale = lambda: 'yellow' in (run_all.get_attribute('class') or '')  # (the cells have not run: the button is yellow)
    wait_for(stale, 60, "marimo's run-all button")
    for _ in range(10):  # (a click before the page has connected to the kernel does nothing: click again)
        run_all.click()
        try: return wait_for(lambda: not stale(), 3, 'the cells to run')
        except AssertionError: pass
    raise AssertionError("marimo's run-all button did not start the cells")


@contextlib.contextmanager
def marimo_page(tmp_path: Path, mode: str, notebook: Path, env: dict, log: Path, height: int = 1500):
    "A `Marimo` server of `notebook` in `tmp_path/'root'`, and a Chromium page with the notebook open; both closed after."
    from playwright.sync_api import sync_playwright
    root = tmp_path / 'root'
    root.mkdir()
    server = Marimo(mode, notebook, root, tmp_path / 'state', env, log)
    try:
        with sync_playwright() as p:
            browser = launch_chromium(p)
            try:
                page = browser.new_page(viewport={'width': 1400, 'height': height})
                open_app(page, server)
                yield page
            finally: browser.close()
    finally: server.close()


def fit_app(tmp_path: Path, mode: str, epochs: int, log: Path):
    "`marimo_page` of the fit notebook (`NOTEBOOK`): `epochs` epochs of 30-ms steps, its run folder in the root."
    env = {'TRAINER_NB_EPOCHS': str(epochs), 'TRAINER_NB_STEP_DELAY': '0.03',
           'TRAINER_NB_RUN_DIR': str(tmp_path / 'root' / 'run')}
    return marimo_page(tmp_path, mode, NOTEBOOK, env, log)


def text_matching(page, pattern: re.Pattern) -> re.Match | None:
    "The last text on the page (shadow roots included) that matches `pattern`."
    found = page.get_by_text(pattern)
    return pattern.search(found.last.inner_text()) if found.count() else None


def plot_src(page):
    imgs = page.locator('img[alt=plot]')
    return imgs.first.get_attribute('src') if imgs.count() else None


def bar_values(page):
    return page.eval_on_selector_all('progress', 'els => els.map(e => e.value)')


def watch_fit(page, shots: Path, prefix: str, until):
    """While the fit runs: the plot's images and the progress bars' values, read every half second, until `until()`.
    Returns the distinct plot images seen (in order) and the bars' values at each read."""
    wait_for(lambda: bar_values(page), 120, 'the progress bars')
    plots, bars, shot = [], [], False
    while not until():
        src = plot_src(page)
        if src and (not plots or plots[-1] != src): plots.append(src)
        bars.append(bar_values(page))
        if len(plots) >= 2 and not shot:
            page.screenshot(path=str(shots / f'{prefix}_running.png'))
            shot = True
        time.sleep(0.5)
    return plots, bars


def status_line(page) -> str:
    lines = page.locator('.trainer-nb-status')
    return lines.first.inner_text() if lines.count() else ''


def table_rows(page) -> int:
    return page.locator('table.trainer-nb tbody tr').count()


def fit_output_text(page) -> str:
    "The text of the fit cell's output: the table and the line under it (inside marimo's shadow roots)."
    tables = page.locator('div:has(> table.trainer-nb)')
    return tables.last.inner_text() if tables.count() else ''


@pytest.mark.slow
def test_marimo_edit_live_view_interrupt_and_exact_resume(tmp_path, artifacts):
    require_marimo()
    shots = browser_artifacts(artifacts)
    # ~10 s: 6 epochs of 45 steps at ~30 ms each, that we interrupt after the third epoch's row (after the second,
    # ~3 s in, a loaded machine had shown one live frame only: the frames come every second or two)
    with fit_app(tmp_path, 'edit', 6, shots / 'marimo_edit.log') as page:
        plots, bars = watch_fit(page, shots, 'marimo_edit', until=lambda: table_rows(page) >= 3)
        status = status_line(page)
        buttons = page.get_by_role('button', name='Stop').count()
        page.locator('[data-testid=interrupt-button]').click()  # marimo's stop button
        wait_for(lambda: 'interrupted' in fit_output_text(page), 60, 'the outcome line under the table')
        wait_for(lambda: page.get_by_text(ANCESTOR_STOPPED).count(), 30, "marimo's note on the cell after the fit")
        time.sleep(0.5)
        result = text_matching(page, RESULT)  # (the cell after the fit's did not run)
        page.screenshot(path=str(shots / 'marimo_edit_interrupted.png'))
        element_screenshot(page, 'img[alt=plot]', shots / 'marimo_edit_plot_final.png')
        stopped = fit_output_text(page)
        after = {'plots': page.locator('img[alt=plot]').count(), 'bars': len(bar_values(page)),
                 'status': page.locator('.trainer-nb-status').count()}
        page.get_by_text('Resume the fit').last.click()
        resumed = wait_for(lambda: text_matching(page, RESUMED), 180, 'the RESUMED line')
        page.get_by_text(RESUMED).last.scroll_into_view_if_needed()  # (marimo scrolls inside its own element)
        page.screenshot(path=str(shots / 'marimo_edit_resumed.png'))
    # while the fit ran: the plot changed, the bars moved, the status line named marimo's stop button; no Stop button
    assert len(plots) >= 2 and all(s.startswith('data:image/png;base64,') for s in plots), len(plots)
    assert len({tuple(b) for b in bars}) >= 3, bars[:5]
    assert status.startswith('step ') and "marimo's stop button" in status, status
    assert buttons == 0
    # the interrupt: a stop at a batch boundary, resumable; the output keeps the table, the outcome line and the plot,
    # and the cell that depends on the fit's does not run (marimo says that its ancestor was stopped)
    outcome = re.search(r'step (\d+) \(interrupted\); learn.resume\(\) continues it', stopped)
    assert 'train_loss' in stopped and outcome, stopped
    assert 3 * STEPS_PER_EPOCH <= int(outcome.group(1)) < 6 * STEPS_PER_EPOCH, outcome.group(0)
    assert result is None, result.group(0)
    assert after == {'plots': 1, 'bars': 0, 'status': 0}, after
    # the resume button: the fit completed, to the weights of the same fit never stopped
    assert resumed.groups() == ('completed', str(6 * STEPS_PER_EPOCH), 'True'), resumed.group(0)


@pytest.mark.slow
def test_marimo_run_app_view_shows_the_live_view_and_keeps_the_result(tmp_path, artifacts):
    require_marimo()
    shots = browser_artifacts(artifacts)
    with fit_app(tmp_path, 'run', 5, shots / 'marimo_run.log') as page:
        status = wait_for(lambda: status_line(page).startswith('step ') and status_line(page), 120, 'the status line')
        plots, bars = watch_fit(page, shots, 'marimo_run', until=lambda: text_matching(page, RESULT))
        result = text_matching(page, RESULT)
        time.sleep(0.5)
        page.screenshot(path=str(shots / 'marimo_run_done.png'), full_page=True)
        done = fit_output_text(page)
        final = {'plots': page.locator('img[alt=plot]').count(), 'bars': len(bar_values(page))}
    assert len(plots) >= 2, len(plots)  # the plot changed while the fit ran...
    assert status.startswith('step ') and 'This app view (marimo run) has no stop button' in status, status
    assert len({tuple(b) for b in bars}) >= 3, bars[:5]  # ...and the bars moved
    assert result.groups() == ('completed', str(5 * STEPS_PER_EPOCH))
    assert len(re.findall(r'(?m)^\s*\d\s', done)) >= 5 and 'completed: ' in done, done  # a row per epoch, the outcome
    assert final == {'plots': 1, 'bars': 0}, final  # the final plot stays; the bars have gone


CLICK_NOTEBOOK = '''import marimo

app = marimo.App()


@app.cell
def _():
    import time
    import marimo as mo
    clicks = []
    button = mo.ui.button(label='Click me', value=0, on_click=lambda v: clicks.append(time.time()) or v + 1)
    button
    return button, clicks, mo, time


@app.cell
def _(clicks, mo, time):
    t0 = time.time()
    seen = None
    while time.time() - t0 < 6:  # a running cell that looks for the click's effect
        if clicks and seen is None: seen = round(time.time() - t0, 2)
        time.sleep(0.05)
    mo.md(f"LOOP_DONE seen_during={seen}")
    return


@app.cell
def _(button, clicks, mo):
    mo.md(f"BUTTON_VALUE {button.value} clicks={len(clicks)}")
    return
'''


@pytest.mark.slow
def test_marimo_delivers_no_click_to_a_running_cell(tmp_path, artifacts):
    """Why the panel shows no Stop button under marimo (0.25): a `mo.ui.button` clicked while another cell runs is
    handled only after that cell ends. If this fails, marimo has started to deliver clicks to running cells, and the
    panel could show its buttons there too."""
    require_marimo()
    shots = browser_artifacts(artifacts)
    (tmp_path / 'click_nb.py').write_text(CLICK_NOTEBOOK)
    with marimo_page(tmp_path, 'edit', tmp_path / 'click_nb.py', {}, shots / 'marimo_click.log', height=1000) as page:
        page.get_by_text('Click me').last.wait_for(timeout=60_000)
        time.sleep(1.5)  # the loop cell runs
        page.get_by_text('Click me').last.click()
        value = wait_for(lambda: text_matching(page, re.compile(r'BUTTON_VALUE 1 clicks=1')), 60, 'the click')
        loop = text_matching(page, re.compile(r'LOOP_DONE seen_during=(\S+)'))
        page.screenshot(path=str(shots / 'marimo_click.png'))
    assert value and loop.group(1) == 'None', loop.group(0)  # the click arrived, but not while the cell ran


LR_FIND_NOTEBOOK = '''import marimo

app = marimo.App()


@app.cell
def _():
    import torch
    from trainer_nb.all import Learner
    from trainer_nb.demo import digits_dls, digits_model
    torch.manual_seed(0)
    learn = Learner(digits_model(), digits_dls(bs=32), torch.nn.functional.cross_entropy, path='run')
    return (learn,)


@app.cell
def _(learn):
    learn.lr_find(num_it=30)  # (as in fastai: the cell ends with the call, and shows its value)
    return


@app.cell
def _(learn):
    f"LR_FIND {learn.lr_find(num_it=30, show_plot=False).valley:.1e} {len(learn.lr_find_results[0])}"
    return
'''


def test_marimo_shows_the_lr_finder_plot(tmp_path, artifacts):
    """`learn.lr_find()` in a marimo cell shows its plot in the cell's output (it was only written to a file), also
    when the cell ends with the call, whose value (the suggestions) marimo puts in place of what the cell showed;
    `show_plot=False` shows none."""
    require_marimo()
    shots = browser_artifacts(artifacts)
    (tmp_path / 'lr_find_nb.py').write_text(LR_FIND_NOTEBOOK)
    with marimo_page(tmp_path, 'run', tmp_path / 'lr_find_nb.py', {}, shots / 'marimo_lr_find.log', height=1000) as page:
        wait_for(lambda: text_matching(page, re.compile(r'LR_FIND (\S+) (\d+)')), 120, 'the second sweep')
        suggested = text_matching(page, re.compile(r'SuggestedLRs\(valley=([\d.e+-]+)'))
        plot = page.locator('img[alt=lr_find]')
        wait_for(lambda: plot.count() == 1, 30, "the lr finder's plot")
        size = plot.first.evaluate('img => [img.naturalWidth, img.naturalHeight]')
        element_screenshot(page, 'img[alt=lr_find]', shots / 'marimo_lr_find.png')
        page.screenshot(path=str(shots / 'marimo_lr_find_page.png'), full_page=True)
    assert suggested and float(suggested.group(1)) > 0  # the cell's value: the suggestions, under their plot
    assert size[0] > 300 and size[1] > 200, size  # a figure of 6 x 4 inches at 100 dpi, cropped to its content
    assert not (tmp_path / 'root' / 'run' / 'lr_find.png').exists()  # shown in the notebook, not written
