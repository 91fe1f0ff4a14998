"""A small but complete training setup for the interrupt/resume tests, and helpers to compare two runs.

Everything that can make a resumed run drift is here: a shuffled DataLoader, dropout (torch RNG), input noise from
numpy and python's `random`, AdamW, a one-cycle schedule, validation with a metric, periodic checkpoints.
"""
import os
import random
import signal

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from trainer_nb.callback.core import Callback
from trainer_nb.callback.checkpoint import CheckpointCallback
from trainer_nb.learner import Learner
from trainer_nb.metrics import accuracy

N_EPOCHS, BS, N_TRAIN, N_VALID = 3, 16, 192, 64
STEPS_PER_EPOCH = N_TRAIN // BS


def data():
    g = torch.Generator().manual_seed(123)
    def make(n):
        x = torch.randn(n, 8, generator=g)
        return TensorDataset(x, ((x[:, 0] + x[:, 1] > 0).long() + (x[:, 2] > 0.5).long()))
    return make(N_TRAIN), make(N_VALID)


class Noise(Callback):
    "Input noise drawn from numpy and python's random: their generators must be restored too."
    order = -10
    run_valid = False
    def before_batch(self):
        x = self.learn.xb[0]
        noise = torch.from_numpy(np.random.randn(*x.shape)).float() * 0.01 * random.random()
        self.learn.xb = (x + noise,)


def make_learner(path, seed=0, checkpoints=True, cbs=(), **kwargs):  # kwargs: more Learner arguments (opt_func)
    torch.manual_seed(seed); np.random.seed(seed); random.seed(seed)
    train, valid = data()
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 3))
    cbs = [Noise(), *cbs] + ([CheckpointCallback(every_steps=7)] if checkpoints else [])
    return Learner(model, (DataLoader(train, batch_size=BS, shuffle=True), DataLoader(valid, batch_size=BS)),
                   nn.functional.cross_entropy, metrics=[accuracy], lr=1e-2, path=path, cbs=cbs, progress=False, **kwargs)


def run_fit(learn):
    learn.fit_one_cycle(N_EPOCHS, 1e-2)


def sigint():
    os.kill(os.getpid(), signal.SIGINT)


class Interrupter(Callback):
    """Send SIGINT at chosen points: ('train', event, step) while training, ('valid', k, i) before batch i of the
    k-th validation (counted over the whole run)."""
    order = -20
    def __init__(self, points):
        self.points = [tuple(p) for p in points if p[0] in ('train', 'valid')]
        self.validations = 0
        self.fired = []

    def handlers(self):
        return {e: (lambda e=e: self._check(e)) for e in ('before_batch', 'after_loss', 'after_step', 'after_batch',
                                                          'before_validate', 'after_validate')}

    def _check(self, event):
        learn = self.learn
        if event == 'after_validate': self.validations += 1
        if event in ('before_validate', 'after_validate'): return
        for p in self.points:
            if p in self.fired: continue
            if learn.training and p[0] == 'train' and p[1] == event and learn.step == p[2]:
                self.fired.append(p); sigint(); return
            if (not learn.training and p[0] == 'valid' and event == 'before_batch' and self.validations == p[1]
                    and learn.iter == p[2]):
                self.fired.append(p); sigint(); return


def history(learn):
    "The storage without timings: {name: [(value, iter), ...]}, a NaN as 'nan' (fp16's overflowing grad_norm) to compare."
    return {n: [('nan' if v != v else v, it) for v, it in h.values()]
            for n, h in learn.storage.histories().items() if not n.startswith(('time/', 'perf/'))}


def assert_same_run(a, b):
    for (k1, v1), (k2, v2) in zip(a.model.state_dict().items(), b.model.state_dict().items()):
        assert k1 == k2 and torch.equal(v1, v2), f"weights differ at {k1}"
    sa, sb = a.opt.state_dict(), b.opt.state_dict()
    assert sa['param_groups'] == sb['param_groups']
    for i in sa['state']:
        for k in sa['state'][i]:
            assert torch.equal(torch.as_tensor(sa['state'][i][k]), torch.as_tensor(sb['state'][i][k])), (i, k)
    assert history(a) == history(b)
    assert (a.step, a.fit_state.samples, a.stop_reason) == (b.step, b.fit_state.samples, b.stop_reason)
