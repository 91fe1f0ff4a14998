"""The notebook callbacks outside a notebook: in a plain script and in terminal IPython, text progress and
tables, no widget, no error, and the plot written to `plot.png` only."""
import subprocess
import sys

import pytest

SCRIPT = '''
import sys
from trainer_nb.testing import synth_learner
from trainer_nb.callback.core import LambdaCallback
from trainer_nb.callback.recorder import Recorder
from trainer_nb.callback.progress import ProgressCallback
from trainer_nb.callback.liveplot import LivePlotCallback
from trainer_nb.callback.panel import ControlPanelCallback
learn = synth_learner(cbs=[Recorder(), ControlPanelCallback(), ProgressCallback(), LivePlotCallback()],
                      path=RUN_DIR)
learn.fit(2)
learn.fit(3, cbs=LambdaCallback(after_step=lambda l: l.step == 20 and l.request_stop()))
print('STOP', learn.stop_reason, learn.step, learn.control_panel.button, learn.live_plot.stats['redraws'])
print('MODULES', sorted(m for m in ('ipywidgets', 'matplotlib.pyplot') if m in sys.modules))
'''


@pytest.mark.parametrize('runner', ['python', 'ipython'])
def test_terminal_text_progress_and_plot_file(tmp_path, runner):
    code = f"RUN_DIR = {str(tmp_path / 'run')!r}\n" + SCRIPT
    cmd = [sys.executable, '-c', code] if runner == 'python' else [sys.executable, '-m', 'IPython', '--quick',
                                                                   '--no-banner', '-c', code]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.replace('\r', '\n')
    lines = [l.split() for l in out.splitlines() if l.strip()]
    headers = [l for l in lines if l[0] == 'epoch' and '/' not in l[1]]  # (not a bar: 'epoch 1/2 |██--|')
    assert headers == [['epoch', 'train_loss', 'valid_loss', 'time']]  # the second fit stops before its first row
    rows = [l for l in lines if l[0].isdigit()]
    assert [r[0] for r in rows] == ['1', '2']
    assert 'stopped at epoch 1/3, batch 4/8, step 20 (interrupted)' in out
    assert '<div' not in out and '<table' not in out  # no HTML
    assert 'STOP interrupted 20 None 0' in out  # no panel, no live redraw
    assert "MODULES []" in out, out
    png = (tmp_path / 'run' / 'plot.png').read_bytes()
    assert png[:8] == b'\x89PNG\r\n\x1a\n'
