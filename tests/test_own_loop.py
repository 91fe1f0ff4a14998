"""A loop you write (`learn.loop`): stopped at a boundary by `loop.stop()`, a Stop request or SIGINT, then continued by
the same `for` (or after a restart, through `last.pt`), it ends with the weights of a loop never stopped, bit for bit:
with dropout, a shuffled loader with 2 workers, random augmentation, an `eval_every` validation, two optimizers and a
scheduler. A `break` or an exception is no boundary. `LiveView` serves a loop with its own storage."""
import json
import os
import signal
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from trainer_nb.events import EventStorage, get_event_storage
from trainer_nb.learner import Learner
from trainer_nb.live_view import LiveView
from trainer_nb.testing import weights

TESTS = Path(__file__).resolve().parent
N_EPOCHS, STEPS_PER_EPOCH = 2, 8


class Augmented(Dataset):
    "128 points in 4 classes, each read with random noise (drawn in the loader's workers)."
    def __init__(self, n=128):
        g = torch.Generator().manual_seed(1)
        self.x = torch.randn(n, 4, generator=g)
        self.y = (self.x[:, 0] > 0).long() + 2 * (self.x[:, 1] > 0).long()
    def __len__(self): return len(self.x)
    def __getitem__(self, i): return self.x[i] + 0.1 * torch.randn(4), self.y[i]


class GAN(nn.Module):
    "A generator G and a classifier D; the learner's validation calls it: D on the input plus what G makes of it."
    def __init__(self):
        super().__init__()
        self.G = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 4))
        self.D = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 4))

    def generate(self, x):
        out = self.G(x)
        get_event_storage().put_scalar('g/out_mean', out.detach().mean())  # (logged from model code)
        return out

    def forward(self, x): return self.D(x + self.G(x))


def make(path, progress=False):
    "A learner of a GAN-like model, with two optimizers and a scheduler of yours, all tracked."
    torch.manual_seed(0)
    train = DataLoader(Augmented(), batch_size=16, shuffle=True, num_workers=2)
    valid = DataLoader(Augmented(64), batch_size=32)
    learn = Learner(GAN(), (train, valid), nn.functional.cross_entropy, path=path, progress=progress)
    opt_g = torch.optim.Adam(learn.model.G.parameters(), lr=1e-2)
    opt_d = torch.optim.SGD(learn.model.D.parameters(), lr=5e-2, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt_g, step_size=5, gamma=0.5)
    learn.track(opt_g=opt_g, opt_d=opt_d, sched=sched)
    return learn


def body(learn, loop, x, y):
    "One step of yours: the classifier, then the generator against it; a scheduler step; logged values."
    m, t = learn.model, learn.tracked
    loss_d = nn.functional.cross_entropy(m.D(x + m.generate(x).detach()), y)
    loss_d.backward(); t['opt_d'].step(); t['opt_d'].zero_grad()
    loss_g = -nn.functional.cross_entropy(m.D(x + m.generate(x)), y)
    loss_g.backward(); t['opt_g'].step(); t['opt_g'].zero_grad(); m.D.zero_grad()
    t['sched'].step()
    loop.log(loss_d=loss_d, loss_g=loss_g, lr_g=t['sched'].get_last_lr()[0])


def run(learn, loop, stop_at=None, how=None):
    for x, y in loop:
        body(learn, loop, x, y)
        if learn.step + 1 == stop_at:
            if how == 'loop.stop': loop.stop()
            elif how == 'controls': learn.controls.stop()
            elif how == 'sigint': os.kill(os.getpid(), signal.SIGINT)
    return learn


def state_of(learn):
    return (weights(learn.model), {k: str(v.state_dict()) for k, v in learn.tracked.items()}, learn.step)


@pytest.fixture(scope='module')
def reference(tmp_path_factory):
    learn = make(tmp_path_factory.mktemp('ref'))
    run(learn, learn.loop(N_EPOCHS, eval_every=5))
    assert learn.stop_reason == 'completed' and learn.step == N_EPOCHS * STEPS_PER_EPOCH
    assert [it for _, it in learn.storage.history('valid/loss').values()] == [5, 10, 15, 16]  # (eval_every, and the end)
    return state_of(learn)


@pytest.mark.parametrize('how,k', [('loop.stop', 5), ('controls', 7), ('sigint', 11)])
def test_stop_then_the_same_for_again_is_exact(tmp_path, reference, how, k):
    learn = make(tmp_path)
    loop = learn.loop(N_EPOCHS, eval_every=5)
    run(learn, loop, stop_at=k, how=how)
    assert (learn.stop_reason, learn.step, learn.fit_state.resumable) == ('interrupted', k, True)
    assert (tmp_path / 'checkpoints' / 'last.pt').is_file()
    again = make(tmp_path / 'restart')  # after a restart here: the same learner and tracked objects, the checkpoint
    again.load(tmp_path / 'checkpoints' / 'last.pt')
    run(again, again.loop(resume=True))
    assert state_of(again) == reference

    run(learn, loop)  # without a restart: the same `for` again
    assert learn.stop_reason == 'completed'
    assert state_of(learn) == reference


def test_logged_values_are_in_metrics_json_at_their_steps(tmp_path):
    learn = make(tmp_path)
    run(learn, learn.loop(1))
    rows = [json.loads(line) for line in (tmp_path / 'metrics.json').read_text().splitlines()]
    steps = {r['iter'] for r in rows if 'loss_d' in r and 'g/out_mean' in r and 'lr_g' in r}
    assert steps and steps <= set(range(1, STEPS_PER_EPOCH + 1)) and STEPS_PER_EPOCH in steps
    assert learn.storage.history('loss_d').values()[0][1] == 1  # (the first step's value, at step 1)
    assert 'lr' not in learn.storage.histories()  # (the optimizers are yours)


@pytest.mark.parametrize('how', ['break', 'exception'])
def test_break_or_an_exception_is_no_boundary(tmp_path, how):
    handler = signal.getsignal(signal.SIGINT)
    learn = make(tmp_path)
    loop = learn.loop(N_EPOCHS)
    run(learn, loop, stop_at=3, how='loop.stop')
    saved = (tmp_path / 'checkpoints' / 'last.pt').read_bytes()

    def again():
        for x, y in loop:
            body(learn, loop, x, y)
            if learn.step == 5:
                if how == 'break': break
                raise ValueError('boom')
    if how == 'break': again()
    else:
        with pytest.raises(ValueError, match='boom'): again()
    assert signal.getsignal(signal.SIGINT) is handler
    assert learn.stop_reason in ('cancelled', 'error') and not learn.fit_state.resumable and not learn.in_fit
    assert (tmp_path / 'checkpoints' / 'last.pt').read_bytes() == saved  # the previous last.pt is intact
    with pytest.raises(RuntimeError, match='middle of a batch'):
        iter(loop)


def test_live_view_around_a_detectron2_style_loop(tmp_path):
    model = nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    handler, seen = signal.getsignal(signal.SIGINT), []
    with EventStorage(100) as storage, LiveView(storage, max_iter=160, path=tmp_path, progress=False) as view:
        for iteration in range(100, 160):
            storage.iter = iteration
            x = torch.randn(8, 2)
            loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
            loss.backward(); opt.step(); opt.zero_grad()
            storage.put_scalars(total_loss=loss, lr=opt.param_groups[0]['lr'])
            seen.append(iteration)
            if iteration == 130: view.controls.stop()  # as the Stop button does
            if iteration == 131: os.kill(os.getpid(), signal.SIGINT)  # (stopped already: not reached)
            if view.boundary(): break
    assert seen[-1] == 130 and view.stop_reason == 'interrupted'
    assert signal.getsignal(signal.SIGINT) is handler
    rows = [json.loads(line) for line in (tmp_path / 'metrics.json').read_text().splitlines()]
    assert {r['iter'] for r in rows if 'total_loss' in r} >= {100, 130}
    assert all(r.get('lr', 0.05) == 0.05 for r in rows)  # (the script's lr, not the view's)


def test_live_view_a_first_ctrl_c_is_a_boundary(tmp_path):
    seen = []
    with EventStorage() as storage, LiveView(storage, max_iter=50, path=tmp_path, progress=False) as view:
        for iteration in range(50):
            storage.put_scalar('x', iteration)
            seen.append(iteration)
            if iteration == 9: os.kill(os.getpid(), signal.SIGINT)
            if view.boundary(): break
    assert seen[-1] == 9 and view.stop_reason == 'interrupted'


@pytest.mark.slow
def test_in_a_kernel_an_interrupted_loop_stops_cleanly_and_leaves_static_output(tmp_path):
    "A kernel's interrupt (SIGINT to the kernel, here sent from the loop's body at step 11) in a saved notebook."
    import nbclient, nbformat
    cells = [f"import os, signal, sys\nsys.path.insert(0, {str(TESTS)!r})\nfrom test_own_loop import make, body\n"
             f"learn = make({str(tmp_path / 'run')!r}, progress=True)",
             "loop = learn.loop(3)\nfor x, y in loop:\n    body(learn, loop, x, y)\n"
             "    if learn.step == 10: os.kill(os.getpid(), signal.SIGINT)",
             "print('AFTER', learn.stop_reason, learn.step, learn.fit_state.resumable)"]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.cells[1].metadata['tags'] = ['raises-exception']  # (the interrupt ends the cell, once the loop has stopped cleanly)
    nbclient.NotebookClient(nb, timeout=300, kernel_name='python3', resources={'metadata': {'path': str(tmp_path)}}).execute()
    nbformat.write(nb, tmp_path / 'saved.ipynb')
    nb = nbformat.read(tmp_path / 'saved.ipynb', as_version=4)
    outputs = nb.cells[1].outputs
    errors = [o for o in outputs if o.output_type == 'error']  # one line, no traceback: Run All would stop here
    assert [(e.ename, e.traceback) for e in errors] == [('FitInterrupted', [
        'FitInterrupted: the fit stopped cleanly after step 11, and iterating the same loop again (for ... in loop:) or '
        'learn.loop(resume=True) continues it. The cell ends as an interrupt, so that Run All goes no further.'])], errors
    assert not any('application/vnd.jupyter.widget-view+json' in o.get('data', {}) for o in outputs)
    tables = [o['data']['text/html'] for o in outputs if '<table' in o.get('data', {}).get('text/html', '')]

    assert '<th>loss_d</th><th>loss_g</th><th>valid_loss</th>' in tables[0], tables  # (the losses the loop logs)
    assert len(tables) == 1 and "stopped at epoch 2/3, batch 3/8" in tables[0], tables
    assert any('image/png' in o.get('data', {}) for o in outputs), [o.output_type for o in outputs]  # the final plot
    assert 'AFTER interrupted 11 True' in ''.join(o.get('text', '') for o in nb.cells[2].outputs)
