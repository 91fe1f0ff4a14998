"""The notebook display in a real Jupyter kernel, without a browser.

- nbclient runs `tests/notebooks/live_view.ipynb` as a user would (Run All, then save): the saved notebook
  holds the progress table and the final plot as a PNG, equal to `plot.png` in the run folder.
- jupyter_client plays the part of JupyterLab for the Stop button: it sends the button's click as a comm message
  on a kernel subshell, as JupyterLab does (`commsOverSubshells`), while the fit cell runs. The fit stops at the
  next batch boundary, with consistent counts. Sent on the main shell instead (a frontend without comm
  subshells), the click cannot reach the running cell: the panel points to the kernel interrupt, and the click,
  handled after the cell, finds no panel (a fit leaves no widget in its cell).
"""
import base64
import os
import re
import time
from pathlib import Path

import pytest

nbformat = pytest.importorskip('nbformat')
nbclient = pytest.importorskip('nbclient')
jupyter_client = pytest.importorskip('jupyter_client')
from kernel_helpers import Kernel

NOTEBOOK = Path(__file__).resolve().parent / 'notebooks' / 'live_view.ipynb'
RESULT = re.compile(r"RESULT stop_reason=(\w+) steps=(\d+) losses=(\d+) opt_steps=\[(\d+)\] epoch=(\d+) "
                    r"epoch_iter=(\d+)")
STEPS_PER_EPOCH = 45  # the digits demo: 1438 training images, batches of 32


def notebook_env(monkeypatch, tmp_path, epochs, step_delay=0.):
    "The notebook reads its settings from the environment, which the kernel inherits."
    monkeypatch.setenv('TRAINER_NB_EPOCHS', str(epochs))
    monkeypatch.setenv('TRAINER_NB_STEP_DELAY', str(step_delay))
    monkeypatch.setenv('TRAINER_NB_RUN_DIR', str(tmp_path / 'run'))


def parse_result(text):
    m = RESULT.search(text)
    assert m, text
    reason, *numbers = m.groups()
    return (reason, *map(int, numbers))


@pytest.mark.slow
def test_saved_notebook_has_table_and_final_png(tmp_path, monkeypatch):
    notebook_env(monkeypatch, tmp_path, epochs=3)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name='python3', store_widget_state=True,
                                     resources={'metadata': {'path': str(tmp_path)}})
    client.execute()
    saved = tmp_path / 'saved.ipynb'
    nbformat.write(nb, saved)

    nb = nbformat.read(saved, as_version=4)
    fit = next(c for c in nb.cells if c.cell_type == 'code' and c.source.startswith('learn.fit('))
    kinds = [next((k for k in ('application/vnd.jupyter.widget-view+json', 'image/png', 'text/html')
                   if k in o.get('data', {})), o.output_type) for o in fit.outputs]
    # static outputs only: the panel's widget is gone (an empty HTML where it was), the bars are gone, the table
    # has the outcome line under it, and the plot is a PNG; no widget model is referenced, no widget repr shown
    assert 'application/vnd.jupyter.widget-view+json' not in kinds and kinds[0] == 'text/html', kinds
    assert not any('VBox(' in ''.join(o.get('data', {}).get('text/plain', '')) for o in fit.outputs)
    assert kinds[-1] == 'image/png', kinds
    tables = [o['data']['text/html'] for o in fit.outputs if '<table' in o.get('data', {}).get('text/html', '')]
    assert len(tables) == 1, kinds
    assert re.findall(r'<th>(\w+)</th>', tables[0]) == ['epoch', 'train_loss', 'valid_loss', 'accuracy', 'time']
    assert len(re.findall(r'<tr><td>\d+</td>', tables[0])) == 3  # a row per epoch
    assert re.search(r'</table><p>completed: \d+ steps in this fit', tables[0]), tables[0][-300:]  # under the table
    # the final figure: a PNG in the saved notebook, the same as plot.png in the run folder
    png = base64.b64decode(fit.outputs[-1]['data']['image/png'])
    assert png[:8] == b'\x89PNG\r\n\x1a\n'
    assert (tmp_path / 'run' / 'plot.png').read_bytes() == png
    assert (tmp_path / 'run' / 'metrics.json').exists()
    # the fit completed with consistent counts
    text = ''.join(o.get('text', '') for c in nb.cells if c.cell_type == 'code' for o in c.outputs)
    assert parse_result(text) == ('completed', 3 * STEPS_PER_EPOCH, 3 * STEPS_PER_EPOCH, 3 * STEPS_PER_EPOCH, 3, 0)


# --- Stop, with jupyter_client in the frontend's place ---

def cell_sources():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    return [c.source for c in nb.cells if c.cell_type == 'code']


def status_line(msg) -> str | None:
    "The panel's status line, if `msg` shows it: a plain HTML output of its own ('' when it is emptied at the end)."
    if msg['msg_type'] not in ('display_data', 'update_display_data'): return None
    text = msg['content']['data'].get('text/html')
    if text == '' and msg['msg_type'] == 'update_display_data': return ''
    line = re.fullmatch(r'<div class="trainer-nb-status">(.*)</div>', text or '', re.S)
    return line[1] if line else None


def run_fit_and_click(kernel, subshell_id, click_after):
    "Run the fit cell; `click_after` seconds after the panel appears, click Stop. Return what happened, and Stop's comm."
    ids, clicked, lines = {}, {}, []

    def on_message(msg):
        line = status_line(msg)
        if line is not None: lines.append((time.time(), line))
        if msg['msg_type'] == 'comm_open':
            state = msg['content']['data'].get('state', {})
            ids.setdefault(state.get('_model_name'), msg['content']['comm_id'])
        if 'ButtonModel' in ids and 'at' not in clicked:
            clicked['at'] = time.time() + click_after
        if 'at' in clicked and not clicked.get('sent') and time.time() >= clicked['at']:
            kernel.click(ids['ButtonModel'], subshell_id)
            clicked['sent'] = time.time()

    msg_id = kernel.kc.execute(cell_sources()[1])
    out, updates, ended = kernel.collect(msg_id, timeout=120, on_message=on_message)
    assert clicked.get('sent'), 'the Stop button never appeared'
    return clicked['sent'], ended, updates, lines, ids['ButtonModel']


@pytest.mark.slow
def test_stop_click_on_a_subshell_stops_the_running_fit(tmp_path, monkeypatch):
    notebook_env(monkeypatch, tmp_path, epochs=100, step_delay=0.005)  # ~30 s, unless Stop works
    kernel = Kernel(tmp_path)
    try:
        kernel.run(cell_sources()[0])
        subshell = kernel.create_subshell()
        sent, ended, updates, values, stop_id = run_fit_and_click(kernel, subshell, click_after=2.)
        reason, steps, losses, opt_steps, epoch, epoch_iter = parse_result(kernel.run(cell_sources()[2])[0])
    finally:
        kernel.close()
    assert reason == 'interrupted'
    assert steps == losses == opt_steps == epoch * STEPS_PER_EPOCH + epoch_iter
    assert 0 < steps < 100 * STEPS_PER_EPOCH
    assert ended - sent < 10, 'the fit went on long after the click'
    values = [(t, v) for t, v in values if v]  # (the last update empties the line: the outcome is under the table)
    # handled while the cell was running: the Stop button said so at once (the status line, at the next batch)
    stopping = [t for t, c in updates if c['comm_id'] == stop_id
                and c['data'].get('state', {}).get('description', '').startswith('Stopping after this batch')]
    assert stopping and stopping[0] < ended, updates[-5:]
    where = (f'the end of epoch {epoch}/100' if epoch_iter == 0 and epoch > 0  # (a stop between two epochs)
             else f'epoch {epoch + 1}/100, batch {epoch_iter}/{STEPS_PER_EPOCH}')
    assert values[-1][1].startswith(f'stopped and resumable: stopped at {where}, step {steps}'), values
    assert not any('sends no widget click' in v for _, v in values)  # the frontend had a subshell


@pytest.mark.slow
def test_click_on_the_main_shell_arrives_late_and_the_panel_points_to_the_interrupt(tmp_path, monkeypatch):
    notebook_env(monkeypatch, tmp_path, epochs=4, step_delay=0.02)  # ~5 s
    kernel = Kernel(tmp_path)
    try:
        kernel.run(cell_sources()[0])
        sent, ended, updates, lines, _ = run_fit_and_click(kernel, None, click_after=0.5)
        out, after = kernel.run(cell_sources()[2])  # the click waited in the queue before this cell
        reason, steps, *_ = parse_result(out)
    finally:
        kernel.close()
    assert (reason, steps) == ('completed', 4 * STEPS_PER_EPOCH)  # the click did not reach the running cell
    values = [v for _, v in lines]
    # a few seconds in, with no subshell opened by the "frontend", the panel pointed to the kernel interrupt
    assert any('sends no widget click' in v and 'interrupt the kernel' in v for v in values), values
    # when the click finally arrived, after the cell, the panel was gone (the fit leaves no widget): nothing changed
    assert after == [] and 'Error' not in out, (values, out)


@pytest.mark.slow
def test_display_imports_start_when_the_learner_is_made(tmp_path):
    # In a kernel, making a learner starts importing the display's libraries on a background thread, so that
    # the first fit finds them loaded, and starts the live plot's drawing process, which imports matplotlib (the
    # kernel then does not); a plain script imports none of them and starts nothing (tests/test_import.py).
    kernel = Kernel(tmp_path)
    try:
        out, _ = kernel.run(
            "import sys, time, torch\n"
            "from torch.utils.data import DataLoader, TensorDataset\n"
            "from trainer_nb.learner import Learner\n"
            "from trainer_nb import plot_worker\n"
            "names = ('ipywidgets',)\n"
            "before = [n in sys.modules for n in names]\n"
            "dl = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)\n"
            "learn = Learner(torch.nn.Linear(2, 1), dl, torch.nn.functional.mse_loss, path='run')\n"
            "deadline = time.time() + 60\n"
            "while not all(n in sys.modules for n in names) and time.time() < deadline: time.sleep(0.05)\n"
            "print('BEFORE', before, 'AFTER', [n in sys.modules for n in names])\n"
            "print('fastprogress imported:', 'fastprogress' in sys.modules)\n"
            "print('matplotlib imported:', 'matplotlib' in sys.modules)\n"
            "print('drawing process running:', len(plot_worker._WORKER) == 1 and plot_worker._WORKER[0].proc.poll() is None)\n")
    finally:
        kernel.close()
    assert 'BEFORE [False] AFTER [True]' in out, out
    assert 'fastprogress imported: False' in out, out  # (the notebook's bars are trainer_nb's own)
    assert 'matplotlib imported: False' in out and 'drawing process running: True' in out, out


def test_the_installed_ipykernel_is_one_the_click_route_is_made_for():
    """The Stop button reaches a running cell through ipykernel internals (`Comm._reply_subshell_for`, the kernel's
    `_publish_status` and `_supports_kernel_subshells`), checked with ipykernel 7.4. Outside the versions of
    `CLICK_ROUTE_IPYKERNEL` the panel shows no buttons and points to the kernel interrupt; this fails when CI's
    ipykernel leaves that range, so that the route is checked again with the new version."""
    import ipykernel
    from ipykernel.comm.comm import Comm
    from ipykernel.kernelbase import Kernel
    from trainer_nb.callback.panel import CLICK_ROUTE_IPYKERNEL, _ipykernel_version
    low, high = CLICK_ROUTE_IPYKERNEL
    assert low <= _ipykernel_version() < high, ipykernel.__version__
    assert callable(getattr(Comm, '_reply_subshell_for', None)) and callable(getattr(Kernel, '_publish_status', None))
    assert hasattr(Kernel, '_supports_kernel_subshells')


# --- The three live views keep up with the fit and with each other ---

def live_views(kernel, cell):
    "Run `cell`; return, in arrival order, (time, view, step) for each update of the bar, status line and plot."
    seen = []

    def on_message(msg):
        kind, content, now = msg['msg_type'], msg['content'], time.time()
        if kind == 'update_display_data':
            data = content['data']
            if 'image/png' in data: seen.append((now, 'plot', None))
            bar = re.search(r'epoch (\d+)/\d+ <progress value="(\d+)"', data.get('text/html', ''))
            if bar: seen.append((now, 'bar', (int(bar[1]) - 1) * STEPS_PER_EPOCH + int(bar[2])))
        line = status_line(msg)
        status = re.match(r'step (\d+)/', line or '')
        if status: seen.append((now, 'status', int(status[1])))

    kernel.collect(kernel.kc.execute(cell), timeout=120, on_message=on_message)
    return seen


@pytest.mark.slow
def test_bar_status_line_and_plot_agree_within_a_second(tmp_path, monkeypatch):
    """While a short fit runs (about 4 s), the batch bar, the panel's status line and the live plot each update at
    least every second or so, the bar and the status line show steps within a second of each other, and the
    plot's last frame comes after the last batch: the final frame is the fit's end."""
    notebook_env(monkeypatch, tmp_path, epochs=4, step_delay=0.015)
    kernel = Kernel(tmp_path)
    try:
        kernel.run(cell_sources()[0])
        seen = live_views(kernel, cell_sources()[1])
    finally:
        kernel.close()
    by_view = {v: [(t, s) for t, view, s in seen if view == v] for v in ('bar', 'status', 'plot')}
    bars, statuses, plots = by_view['bar'], by_view['status'], by_view['plot']
    assert len(bars) > 8 and len(statuses) > 8 and len(plots) >= 3, {v: len(x) for v, x in by_view.items()}
    assert bars[-1][1] == 4 * STEPS_PER_EPOCH  # the bar shows the last batch
    start, end = bars[0][0], bars[-1][0]
    rate = (bars[-1][1] - bars[0][1]) / (end - start)  # steps a second
    for name, updates in by_view.items():  # each view keeps moving: no gap of more than ~1 s (a second of slack)
        times = [t for t, _ in updates if start <= t <= end]
        assert max(b - a for a, b in zip(times, times[1:])) < 2., (name, times)
    for t, step in bars:  # the status line shown when the bar moved is within a second of it
        shown = [s for ts, s in statuses if ts <= t]
        if shown: assert abs(step - shown[-1]) <= rate * 1. + 2, (t, step, shown[-1], rate)
    assert plots[-1][0] >= bars[-1][0]  # the plot's final frame comes after the last batch's bar


# --- A frontend that never sends on a subshell (as VS Code), and a live view with no widget at all ---

def display_messages(kernel, code, timeout=120, on_message=None, expect='ok'):
    "Run `code` (its status must be `expect`); return its display messages in order: (msg_type, display_id, data) of display_data/update_display_data."
    seen = []

    def record(msg):
        if msg['msg_type'] in ('display_data', 'update_display_data'):
            seen.append((msg['msg_type'], msg['content'].get('transient', {}).get('display_id'), msg['content']['data']))
        if on_message: on_message(msg)

    out, updates, _ = kernel.collect(kernel.kc.execute(code), timeout=timeout, on_message=record, expect=expect)
    return seen, out, updates


def weights_digest(kernel) -> str:
    out, _ = kernel.run("import hashlib\nprint('DIGEST', hashlib.sha256(b''.join(p.detach().numpy().tobytes() "
                        "for p in learn.model.parameters())).hexdigest())")
    return re.search(r'DIGEST (\w+)', out)[1]


@pytest.mark.slow
def test_a_client_without_subshells_sees_no_buttons_a_live_plot_in_place_and_an_exact_resume(tmp_path, monkeypatch):
    """VS Code's kind of client: it never opens a subshell nor sends on one. A few seconds in, the panel's buttons go
    (their output is emptied), the status line (its own plain HTML output) says to interrupt the kernel, and the
    live plot is one output replaced in place (update_display_data). The kernel interrupt stops the fit at a batch
    boundary; `learn.resume()` ends with the weights of a fit never stopped."""
    notebook_env(monkeypatch, tmp_path, epochs=8, step_delay=0.02)  # ~8 s, unless interrupted
    setup, fit, report = cell_sources()
    kernel = Kernel(tmp_path)
    try:
        kernel.run(setup)
        interrupted = {}

        def on_message(msg):  # once the line says to interrupt, do what the user then does: ■
            line = status_line(msg) or ''
            if 'interrupt the kernel' in line and 'at' not in interrupted:
                interrupted['at'] = time.time()
                kernel.interrupt()

        # (the interrupt ends the cell, once the fit has stopped cleanly: Run All would stop there)
        seen, out, comm_updates = display_messages(kernel, fit, on_message=on_message, expect='error')
        assert 'FitInterrupted: the fit stopped cleanly after step' in out, out
        reason, steps, *_ = parse_result(kernel.run(report)[0])
        kernel.run("learn.resume()")
        resumed, ended = weights_digest(kernel), parse_result(kernel.run(report)[0])
        kernel.run(setup)  # the same learner again (same seed), in a fresh run folder: a fit never stopped
        kernel.run("STEP_DELAY = 0  # (the step's sleep, read at each step, changes no weight)\n"
                   "learn.path = learn.path.parent / 'straight'\n" + fit)
        straight = weights_digest(kernel)
    finally:
        kernel.close()
    assert 'at' in interrupted, 'the status line never said to interrupt the kernel'
    assert reason == 'interrupted' and 0 < steps < 8 * STEPS_PER_EPOCH, (reason, steps)
    assert ended[:2] == ('completed', 8 * STEPS_PER_EPOCH) and resumed == straight
    # the buttons' output: the widget's view with its fallback line, then emptied a few seconds in (no buttons)
    widget = [(kind, did, data) for kind, did, data in seen
              if 'application/vnd.jupyter.widget-view+json' in data]
    assert len(widget) == 1 and 'interrupt the kernel' in widget[0][2]['text/html'], widget
    assert [d['text/html'] for k, did, d in seen if did == widget[0][1] and k == 'update_display_data'][0] == ''
    lines = [status_line({'msg_type': k, 'content': {'data': d}}) for k, _, d in seen]
    assert any(l and 'sends no widget click' in l and 'interrupt the kernel' in l for l in lines), lines
    # the live plot: one output, then replaced in place
    plots = [(kind, did) for kind, did, data in seen if 'image/png' in data]
    assert plots[0][0] == 'display_data' and sum(k == 'display_data' for k, _ in plots) == 1, plots
    assert len(plots) >= 3 and all(k == 'update_display_data' and did == plots[0][1] for k, did in plots[1:]), plots


@pytest.mark.slow
def test_without_ipywidgets_the_live_view_shows_and_no_widget_is_made(tmp_path, monkeypatch):
    "ipywidgets hidden from import (an install without the [widgets] extra): the bars, table, status line and plot show; no comm is opened."
    notebook_env(monkeypatch, tmp_path, epochs=2)
    setup, fit, report = cell_sources()
    kernel = Kernel(tmp_path)
    try:
        kernel.run("import sys; sys.modules['ipywidgets'] = None  # (import ipywidgets now raises ImportError)")
        kernel.run(setup)
        seen, out, comm_updates = display_messages(kernel, fit)
        reason, *_ = parse_result(kernel.run(report)[0])
        modules, _ = kernel.run("print('IPYWIDGETS', sys.modules['ipywidgets'])")
    finally:
        kernel.close()
    assert reason == 'completed' and 'IPYWIDGETS None' in modules
    assert comm_updates == [] and not any('application/vnd.jupyter.widget-view+json' in d for _, _, d in seen)
    lines = [l for l in (status_line({'msg_type': k, 'content': {'data': d}}) for k, _, d in seen) if l]
    assert any("trainer_nb[widgets]" in l and 'interrupt the kernel' in l for l in lines), lines
    assert any('<table' in d.get('text/html', '') for _, _, d in seen) and any('image/png' in d for _, _, d in seen)


@pytest.mark.slow
def test_a_kernel_whose_shell_is_a_subclass_shows_the_notebook_display(tmp_path):
    """Colab's shell is a subclass of ipykernel's (`google.colab._shell.Shell`): a fit there shows what it shows in
    JupyterLab (the progress table as HTML, the final plot as a PNG), not a terminal's text bars."""
    with Kernel(tmp_path) as kernel:
        out, _ = kernel.run("from IPython import get_ipython\nshell = get_ipython()\n"
                            "class Shell(type(shell)): pass  # (as google.colab._shell.Shell)\n"
                            "shell.__class__ = Shell\nprint('SHELL', type(get_ipython()).__name__)")
        assert 'SHELL Shell' in out, out
        seen, out, _ = display_messages(kernel, "from trainer_nb.testing import synth_learner\n"
                                                "learn = synth_learner(default_cbs=True, path='run')\nlearn.fit(2)")
    assert any('<table' in data.get('text/html', '') for _, _, data in seen), seen
    assert any('image/png' in data for _, _, data in seen), [list(data) for _, _, data in seen]
    assert '|' not in out and '%' not in out, out  # (no text bars)
