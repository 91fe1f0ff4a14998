"""Python calls a training step costs with the notebook display on, counted with sys.setprofile (independent of the
machine's load, unlike wall times).

The panel, the progress bars and the live plot are forced on (`notebook=True`), with IPython's `display` replaced by a
stub that shows nothing; their redraws are put `SLOW` seconds apart (default 1e9: never, so the count is that of the
per-step path alone). Two fits of 200 and 1200 steps after a warm-up; the difference over 1000 steps is the count of
calls a step. Compare two versions of the package by their PYTHONPATH:

Run: PYTHONPATH=<checkout> python bench/display_calls.py [SLOW]
"""
import sys
import tempfile
from unittest import mock
import torch
from torch.utils.data import DataLoader, TensorDataset
import trainer_nb
from trainer_nb.learner import Learner
from trainer_nb.callback.recorder import Recorder
from trainer_nb.callback.progress import ProgressCallback
from trainer_nb.callback.liveplot import LivePlotCallback
from trainer_nb.callback.panel import ControlPanelCallback
torch.set_num_threads(1)
g = torch.Generator().manual_seed(0)
x, y = torch.randn(64 * 400, 32, generator=g), torch.randint(0, 10, (64 * 400,), generator=g)
dls = (DataLoader(TensorDataset(x, y), batch_size=64), DataLoader(TensorDataset(x[:640], y[:640]), batch_size=64))
SLOW = float(sys.argv[1]) if len(sys.argv) > 1 else 1e9  # seconds between redraws: 1e9, the per-step path alone
def count(n_steps):
    learn = Learner(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)), dls,
                    torch.nn.functional.cross_entropy, default_cbs=False,
                    cbs=[Recorder(), ControlPanelCallback(notebook=True, clicks=False, every=SLOW), ProgressCallback(notebook=True, bar_every=SLOW),
                         LivePlotCallback(notebook=True, fname=None, min_interval=SLOW, max_interval=SLOW, first_frame=SLOW)], path=tempfile.mkdtemp())
    calls = [0]
    def prof(frame, event, arg):
        if event in ('call', 'c_call'): calls[0] += 1
    with mock.patch('IPython.display.display', lambda *a, **k: mock.MagicMock()):
        learn.fit(n_steps=50)  # warm-up
        sys.setprofile(prof)
        learn.fit(n_steps=n_steps)
        sys.setprofile(None)
    return calls[0]
a, b = count(200), count(1200)
print(trainer_nb.__file__, 'calls per step (1000 steps apart):', (b - a) / 1000)
