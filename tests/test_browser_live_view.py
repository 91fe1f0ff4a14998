"""End to end, as a user: JupyterLab (started here, on 127.0.0.1) in headless Chromium, driven by Playwright.

Open `tests/notebooks/live_view.ipynb`, Run All, take two screenshots while it trains (the bars and the live plot
move between them), click Stop (the fit ends at a batch boundary with consistent counts), save, and read the
saved file. While it trains: the live plot is visible within 3 s of the first batch (the kernel prints when that
batch ended; the page records when each new plot image is decoded, on the same machine's clock), it keeps
changing, and JupyterLab shows the kernel as busy. Screenshots and JupyterLab's log go to a temporary folder of
pytest's; to look at them, run with `TRAINER_NB_ARTIFACTS=/some/dir` (they go to `/some/dir/browser/`).

Needs `jupyterlab`, `playwright` (the Python package; never `playwright install`: we drive Debian's
`/usr/bin/chromium`, or `$TRAINER_NB_CHROMIUM`). Where one is missing the test is skipped, except under CI
(`CI=true`), where it fails.
"""
import base64
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
NOTEBOOK = TESTS / 'notebooks' / 'live_view.ipynb'
CHROMIUM = os.environ.get('TRAINER_NB_CHROMIUM', '/usr/bin/chromium')
RESULT = re.compile(r"RESULT stop_reason=(\w+) steps=(\d+) losses=(\d+) opt_steps=\[(\d+)\] epoch=(\d+) "
                    r"epoch_iter=(\d+)")
FIRST_BATCH = re.compile(r"FIRST_BATCH ([\d.]+)")
STEPS_PER_EPOCH = 45


def require(condition: bool, what: str):
    "Skip without `what`; under CI, fail: CI must have installed it (see .ci/run)."
    if condition: return
    if os.environ.get('CI', '').lower() in ('1', 'true', 'yes'):
        pytest.fail(f"{what} is missing, and CI=true: .ci/run must install it.")
    pytest.skip(f"{what} is missing")


def require_browser(app: str = 'lab'):
    "Skip (fail under CI) without what a browser test needs: JupyterLab (or Notebook 7), Playwright, Chromium."
    require(have_module('jupyterlab'), 'jupyterlab')
    require(app == 'lab' or have_module('notebook'), 'notebook (Notebook 7)')
    require(have_module('playwright'), 'the playwright Python package')
    require(Path(CHROMIUM).exists(), f'Chromium ({CHROMIUM}; apt-get install -y chromium)')


def have_module(name):
    import importlib.util
    return importlib.util.find_spec(name) is not None


# --- JupyterLab server ---

def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def write_settings(settings: Path):
    "JupyterLab user settings: no news or update checks, start the kernel, keep every cell in the DOM, save widget state."
    files = {'@jupyterlab/apputils-extension/notification.jupyterlab-settings':
                 {'fetchNews': 'false', 'checkForUpdates': False},
             '@jupyterlab/notebook-extension/tracker.jupyterlab-settings':
                 {'autoStartDefaultKernel': True, 'windowingMode': 'none'},
             '@jupyter-widgets/jupyterlab-manager/plugin.jupyterlab-settings': {'saveState': True}}
    for name, value in files.items():
        path = settings / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))


class Lab:
    "A JupyterLab server on 127.0.0.1 with a random token, serving `root`, with hermetic config folders in `state`."
    def __init__(self, root: Path, state: Path, env: dict, app: str = 'lab',  # app: 'lab' or 'notebook' (7)
                 log: Path | None = None,  # the server's output (default: state/jupyterlab.log)
                 python: str = sys.executable):  # the server's Python, and so its kernels' (another environment)
        self.port, self.token, self.app = free_port(), secrets.token_hex(16), app
        self.log_path = log or state / 'jupyterlab.log'
        self.url = f"http://127.0.0.1:{self.port}"
        write_settings(state / 'settings')
        env = dict(os.environ, **env, JUPYTER_CONFIG_DIR=str(state / 'config'),
                   JUPYTER_RUNTIME_DIR=str(state / 'runtime'), JUPYTERLAB_SETTINGS_DIR=str(state / 'settings'),
                   JUPYTERLAB_WORKSPACES_DIR=str(state / 'workspaces'))
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log = open(self.log_path, 'w')
        server = ['--no-browser', '--ip=127.0.0.1', f'--port={self.port}', '--ServerApp.port_retries=0',
                  f'--IdentityProvider.token={self.token}', f'--ServerApp.root_dir={root}', '--allow-root']
        if app == 'lab':
            command = ['jupyterlab', *server, '--LabApp.expose_app_in_browser=True', '--LabApp.news_url=',
                       '--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate']
        else: command = ['notebook', *server, '--JupyterNotebookApp.expose_app_in_browser=True']
        self.proc = subprocess.Popen([python, '-m', *command], env=env, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + 60
        while True:
            try:
                if self.api('GET', '/api/status', timeout=2) is not None: break
            except OSError: pass
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"JupyterLab did not start; see {self.log_path}")
            time.sleep(0.3)

    def notebook_url(self, name: str) -> str:
        "The page of notebook `name` (in JupyterLab, in a new workspace: nothing of an earlier test is restored)."
        if self.app == 'lab': return f"{self.url}/lab/workspaces/t{secrets.token_hex(4)}/tree/{name}?reset&token={self.token}"
        return f"{self.url}/notebooks/{name}?token={self.token}"

    def api(self, method, path, timeout=10):
        req = urllib.request.Request(self.url + path, method=method, headers={'Authorization': f'token {self.token}'})
        with urllib.request.urlopen(req, timeout=timeout) as r: return r.read()

    def close(self):
        try: self.api('POST', '/api/shutdown')  # stops the kernels too
        except OSError: pass
        try: self.proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGTERM)  # our own process group only
            self.proc.wait(10)
        self.log.close()


def launch_chromium(playwright):
    "Debian's headless Chromium, with no network of its own (this machine reaches only localhost)."
    return playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
        '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
        '--no-first-run', '--disable-sync', '--disable-quic', '--disable-dev-shm-usage'])


# --- the page ---

def open_notebook(page, url: str):
    "Open the notebook page `url` and wait until its cells are shown."
    page.goto(url)
    page.wait_for_selector('.jp-NotebookPanel .jp-Cell', timeout=60_000)


def wait_for_kernel(page):
    "Wait until the open notebook's kernel is started and idle."
    page.wait_for_function("() => window.jupyterapp.shell.currentWidget?.sessionContext?.session?.kernel"
                           "?.status === 'idle'", timeout=60_000)


def run_all(page):
    "Once the notebook's kernel is idle, run every cell from the Run menu, as a person does."
    wait_for_kernel(page)
    page.click('li.lm-MenuBar-item >> text=Run')
    page.click("li.lm-Menu-item[data-command='runmenu:run-all']")


def outputs_text(page) -> str:
    "The text of the cells' outputs (not their sources)."
    return '\n'.join(page.locator('.jp-OutputArea-output').all_text_contents())


def wait_for(predicate, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value: return value
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def status_text(page) -> str:
    "The panel's status line as shown: a plain HTML output of its own (not a widget), '' where there is none."
    lines = page.locator('.trainer-nb-status')
    return lines.first.inner_text() if lines.count() else ''


def plot_src(page):
    "The live plot's PNG as shown (a data URL), or None before it appears."
    imgs = page.locator('.jp-OutputArea-output img')
    return imgs.first.get_attribute('src') if imgs.count() else None


def bar_values(page):
    return page.eval_on_selector_all('.jp-OutputArea-output progress', 'els => els.map(e => e.value)')


# Installed before Run All: the time (s, the machine's clock) at which each new plot image is decoded, so ready to
# be painted, with the end of its data URL; and each change of the kernel status the frontend shows.
WATCH = """() => {
    const log = window.__watch = {plots: [], status: []};
    const check = () => {
        for (const img of document.querySelectorAll('.jp-OutputArea-output img')) {
            const src = img.getAttribute('src') || '';
            if (img.__seen === src) continue;
            img.__seen = src;
            img.decode().then(() => log.plots.push([Date.now() / 1000, src.slice(-48), img.naturalWidth]),
                              () => {});
        }
    };
    new MutationObserver(check).observe(document.body, {subtree: true, childList: true, attributes: true,
                                                       attributeFilter: ['src']});
    const kernel = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
    kernel.statusChanged.connect((_, status) => log.status.push([Date.now() / 1000, status]));
}"""


def kernel_status(page, settle: float = 0.5):
    """The kernel status as JupyterLab has it, and the status bar's kernel item (e.g. 'Python 3 (ipykernel) | Busy').

    While a cell runs, a message the kernel handles on another thread (a widget's comm message on a subshell)
    publishes 'idle' for that message, which the panel follows at once by 'busy' for the cell: the two can reach
    the page in separate tasks, and a read may fall between them. A read of 'idle' is taken again after `settle`
    seconds: what a person sees is the status that stays, which must be 'busy'.
    """
    def read():
        status = page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status")
        return status, ' '.join(page.locator('.jp-StatusBar-Widget').all_text_contents())
    status, bar = read()
    if status != 'busy' and settle:
        time.sleep(settle)
        status, bar = read()
    return status, bar


def element_screenshot(page, selector: str, path: Path, tries: int = 5):
    """A screenshot of the first element matching `selector`, taken again if the element went away meanwhile.

    Each frame of the live plot replaces its `<img>`: Playwright finds the element, scrolls to it and waits for
    it to be stable, and a new frame can detach it in between ("Element is not attached to the DOM"); the next
    try finds the new one. Any other error, or the same one `tries` times, is raised.
    """
    from playwright.sync_api import Error
    for i in range(tries):
        try: return page.locator(selector).first.screenshot(path=str(path))
        except Error as e:
            if 'not attached' not in str(e) or i == tries - 1: raise


def test_element_screenshot_tries_again_when_the_element_is_replaced(tmp_path):
    require(have_module('playwright'), 'the playwright Python package')
    from playwright.sync_api import Error
    class Locator:  # detached twice (two frames of the plot replaced the image), then taken
        def __init__(self, errors): self.errors, self.calls = errors, 0
        @property
        def first(self): return self
        def screenshot(self, path):
            self.calls += 1
            if self.errors: raise self.errors.pop(0)
            Path(path).write_bytes(b'png')
    class Page:
        def __init__(self, errors): self.loc = Locator(errors)
        def locator(self, selector): return self.loc
    detached = lambda: Error('Locator.screenshot: Element is not attached to the DOM')
    page = Page([detached(), detached()])
    element_screenshot(page, 'img', tmp_path / 'a.png')
    assert (page.loc.calls, (tmp_path / 'a.png').read_bytes()) == (3, b'png')
    page = Page([detached() for _ in range(5)])  # always replaced: the error after 5 tries
    with pytest.raises(Error, match='not attached'): element_screenshot(page, 'img', tmp_path / 'b.png')
    assert page.loc.calls == 5
    page = Page([Error('Timeout 30000ms exceeded')])  # another error: at once
    with pytest.raises(Error, match='Timeout'): element_screenshot(page, 'img', tmp_path / 'c.png')
    assert page.loc.calls == 1


def save_notebook(page, path: Path, mtime0: float):
    "Save the open notebook as a person does (a click on a cell, then Ctrl+S), and wait until `path` is written."
    page.click('.jp-Notebook .jp-Cell .jp-InputArea-prompt >> nth=0')
    page.keyboard.press('Control+s')
    wait_for(lambda: path.stat().st_mtime != mtime0, 30, 'the notebook to be saved')


def browser_artifacts(artifacts: Path) -> Path:
    "Where the browser tests keep their screenshots and JupyterLab's log: `browser/` of the `artifacts` fixture."
    shots = artifacts / 'browser'
    shots.mkdir(parents=True, exist_ok=True)
    return shots


@pytest.mark.slow
def test_run_all_watch_stop_save(tmp_path, artifacts):
    require_browser()
    from playwright.sync_api import sync_playwright
    import nbformat

    shots = browser_artifacts(artifacts)
    for old in shots.glob('live_view_*.png'): old.unlink()
    root = tmp_path / 'root'
    root.mkdir()
    shutil.copy(NOTEBOOK, root / 'live_view.ipynb')
    saved = root / 'live_view.ipynb'
    mtime0 = saved.stat().st_mtime
    # a fit of about 3 minutes (20 ms per step, 9000 steps) that we stop after a few seconds
    lab = Lab(root, tmp_path / 'lab', {'TRAINER_NB_EPOCHS': '200', 'TRAINER_NB_STEP_DELAY': '0.02',
                                       'TRAINER_NB_RUN_DIR': str(root / 'run')}, log=shots / 'jupyterlab.log')
    try:
        with sync_playwright() as p:
            browser = launch_chromium(p)
            page = browser.new_page(viewport={'width': 1400, 'height': 1300})
            open_notebook(page, lab.notebook_url('live_view.ipynb'))

            # 1. Run All, from the Run menu
            wait_for_kernel(page)  # (WATCH reads the session's kernel)
            page.evaluate(WATCH)
            run_all(page)

            # 2. while it trains: the Stop button, the bars and the live plot, moving
            page.wait_for_selector("button.jupyter-button:text-is('Stop')", timeout=60_000)
            first_plot = wait_for(lambda: plot_src(page), 60, 'the live plot')
            wait_for(lambda: bar_values(page), 30, 'the progress bars')
            time.sleep(1)
            shot1 = shots / 'live_view_1_running.png'
            page.screenshot(path=str(shot1))
            bars1, plot1 = bar_values(page), plot_src(page)
            statuses = [kernel_status(page)]
            for _ in range(3):
                time.sleep(1)
                statuses.append(kernel_status(page))
            shot2 = shots / 'live_view_2_running.png'
            page.screenshot(path=str(shot2))
            bars2, plot2 = bar_values(page), plot_src(page)
            assert shot1.read_bytes() != shot2.read_bytes()
            assert plot1 != plot2 and plot2.startswith('data:image/png'), 'the live plot did not change'
            assert bars1 != bars2, (bars1, bars2)
            running = status_text(page)
            assert running.startswith('step ') and ' ETA ' in running, running  # the panel's status line
            # the fit cell runs: JupyterLab says busy (not idle, after the Stop button's subshell messages)
            changes = page.evaluate('() => window.__watch.status')  # (time, status) of each change the page saw
            assert all(status == 'busy' and '| Busy' in bar for status, bar in statuses), (statuses, changes)
            element_screenshot(page, '.jp-OutputArea-output img', shots / 'live_view_plot_running.png')
            # the saved notebook is checked for the epoch table below, so Stop comes after the first epoch's row:
            # an epoch takes about 1 s, but on a loaded machine 5 s were once less than one epoch (44 of 45 steps)
            wait_for(lambda: 'train_loss' in outputs_text(page), 120, "the first epoch's row in the progress table")
            t_stop = time.time()

            # 3. Stop: the fit ends at a batch boundary, and the next cell prints the counts
            page.click("button.jupyter-button:text-is('Stop')")
            text = wait_for(lambda: RESULT.search(outputs_text(page)) and outputs_text(page), 60, 'the RESULT line')
            reason, steps, losses, opt_steps, epoch, epoch_iter = RESULT.search(text).groups()
            assert reason == 'interrupted'
            assert steps == losses == opt_steps == str(int(epoch) * STEPS_PER_EPOCH + int(epoch_iter))
            assert 0 < int(steps) < 200 * STEPS_PER_EPOCH
            # the fit left static outputs: no panel any more, and the outcome line under the table
            where = (f'the end of epoch {epoch}/200' if int(epoch_iter) == 0 and int(epoch) > 0  # (between epochs)
                     else f'epoch {int(epoch) + 1}/200, batch {epoch_iter}/{STEPS_PER_EPOCH}')
            outcome = f'stopped at {where}, step {steps} (interrupted); learn.resume() continues it'
            wait_for(lambda: outcome in outputs_text(page), 10, f"the outcome line {outcome!r}")
            wait_for(lambda: page.locator("button.jupyter-button:text-is('Stop')").count() == 0, 10, 'the panel to go')
            time.sleep(0.5)  # the final figure's update
            page.screenshot(path=str(shots / 'live_view_3_stopped.png'))
            element_screenshot(page, '.jp-OutputArea-output img', shots / 'live_view_plot_final.png')
            final_plot = plot_src(page)
            assert final_plot != first_plot

            # the live plot: visible within 3 s of the first batch, then changing while the fit ran
            first_batch = float(FIRST_BATCH.search(outputs_text(page)).group(1))
            watch = page.evaluate('() => window.__watch')
            shown = [(t, key) for t, key, width in watch['plots'] if width > 0]
            (shots / 'live_view_timeline.json').write_text(json.dumps(
                {'first_batch': first_batch, 'stop_click': t_stop, **watch}, indent=1))
            assert shown and shown[0][0] - first_batch <= 3.0, (first_batch, shown[:3])
            during = {key for t, key in shown if t <= t_stop}
            assert len(during) >= 3, (first_batch, t_stop, shown)

            # 4. save (Ctrl+S), and read the file on disk
            save_notebook(page, saved, mtime0)
            browser.close()
    finally:
        lab.close()

    nb = nbformat.read(saved, as_version=4)
    fit = next(c for c in nb.cells if c.cell_type == 'code' and c.source.startswith('learn.fit('))
    assert fit.execution_count is not None
    data = [o.get('data', {}) for o in fit.outputs]
    assert not any('application/vnd.jupyter.widget-view+json' in d for d in data), data  # no widget referenced
    tables = [d['text/html'] for d in data if '<table' in d.get('text/html', '')]
    assert tables and 'train_loss' in tables[-1] and f'</table><p>{outcome}' in tables[-1]
    png = base64.b64decode(data[-1]['image/png'])
    assert png == (root / 'run' / 'plot.png').read_bytes()  # the final figure, in the file and in the notebook
    assert final_plot.endswith(data[-1]['image/png'].strip())
    result = ''.join(o.get('text', '') for c in nb.cells if c.cell_type == 'code' for o in c.outputs)
    assert RESULT.search(result).groups() == (reason, steps, losses, opt_steps, epoch, epoch_iter)
