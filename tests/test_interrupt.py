"""Interrupts and data loading: workers survive a kernel-style interrupt, resumed epochs load only what is left,
stateful loaders resume from their own state, and a fit outside the main thread still works."""
import subprocess
import sys
import textwrap
import threading
import warnings

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from resume_harness import Interrupter, make_learner
from trainer_nb.learner import Learner
from trainer_nb.testing import RegModel, synth_data, synth_learner


def test_persistent_workers_survive_a_process_group_interrupt(tmp_path):
    # A kernel interrupt is SIGINT to the kernel's whole process group. We reproduce that in a child process that
    # leads its own group (so the signal cannot reach pytest or CI), with persistent workers started before the fit.
    script = textwrap.dedent(f"""
        import os, signal, sys
        import torch
        from torch import nn
        from torch.utils.data import DataLoader
        from trainer_nb.learner import Learner
        from trainer_nb.callback.core import LambdaCallback
        from trainer_nb.testing import RegModel, synth_data
        torch.manual_seed(0)
        train = DataLoader(synth_data(256), batch_size=16, shuffle=True, num_workers=2, persistent_workers=True)
        learn = Learner(RegModel(), train, nn.functional.mse_loss, lr=0.05, default_cbs=False, path={str(tmp_path)!r})
        next(iter(learn.dls.train))  # the workers exist before the fit
        def group_interrupt(learn):
            if learn.step == 5: os.killpg(os.getpgid(0), signal.SIGINT)
        learn.fit(3, cbs=LambdaCallback(after_step=group_interrupt))
        print('STOPPED', learn.stop_reason, learn.step, flush=True)
        learn.resume()
        print('RESUMED', learn.stop_reason, learn.step, flush=True)
    """)
    proc = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True, timeout=120,
                          start_new_session=True)
    assert proc.returncode == 0, proc.stderr
    assert 'STOPPED interrupted 5' in proc.stdout  # sent in after_step of step 5: that batch ends, then stop
    assert 'RESUMED completed 48' in proc.stdout
    assert 'exited unexpectedly' not in proc.stderr


class Counting(Dataset):
    def __init__(self, n): self.data, self.loaded = synth_data(n), 0
    def __len__(self): return len(self.data)
    def __getitem__(self, i):
        self.loaded += 1
        return self.data[i]


def test_resumed_epoch_loads_only_what_is_left(tmp_path):
    ds = Counting(160)
    learn = Learner(RegModel(), DataLoader(ds, batch_size=16, shuffle=True), nn.functional.mse_loss,
                    default_cbs=False, path=tmp_path)
    learn.fit(2, cbs=[Interrupter([('train', 'after_batch', 13)])])
    assert learn.stop_reason == 'interrupted'
    learn.resume()
    assert learn.stop_reason == 'completed'
    assert ds.loaded == 2 * 160  # every sample exactly once per epoch, none loaded twice


class StatefulLoader:
    "A minimal stateful loader (the protocol of torchdata's StatefulDataLoader): it knows its own position."
    def __init__(self, batches): self.batches, self.pos, self.seen = batches, 0, []
    def __len__(self): return len(self.batches)
    def __iter__(self):
        while self.pos < len(self.batches):
            self.pos += 1
            self.seen.append(self.pos - 1)
            yield self.batches[self.pos - 1]
        self.pos = 0
    def state_dict(self): return {'pos': self.pos}
    def load_state_dict(self, state): self.pos = state['pos']


def test_stateful_loader_resumes_from_its_own_state(tmp_path):
    batches = [tuple(t[i:i + 16] for t in synth_data(96).tensors) for i in range(0, 96, 16)]
    loader = StatefulLoader(batches)
    learn = Learner(RegModel(), loader, nn.functional.mse_loss, default_cbs=False, path=tmp_path)
    assert learn.dls.train is loader
    learn.fit(2, cbs=[Interrupter([('train', 'after_batch', 4)])])
    path = learn.save('stopped')
    fresh = StatefulLoader(batches)
    learn2 = Learner(RegModel(), fresh, nn.functional.mse_loss, default_cbs=False, path=tmp_path)
    learn2.load(path)
    learn2.resume(cbs=[Interrupter([])])
    assert learn2.stop_reason == 'completed' and learn2.step == 12
    assert fresh.seen == [4, 5, 0, 1, 2, 3, 4, 5]  # the rest of epoch 0 from the saved position, then epoch 1


def test_fit_in_a_thread_warns_and_still_stops_cleanly(tmp_path):
    learn = synth_learner(n_train=64, path=tmp_path)
    result = {}

    def train():
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter('always')
            from trainer_nb.callback.core import LambdaCallback
            def stop(l):
                if l.step == 3: l.request_stop()
            learn.fit(2, cbs=LambdaCallback(after_step=stop))
            result['warnings'] = [str(x.message) for x in w]

    t = threading.Thread(target=train)
    t.start(); t.join()
    assert any('outside the main thread' in m for m in result['warnings'])
    assert learn.stop_reason == 'interrupted' and learn.step == 3
    learn.resume()
    assert learn.step == 8
