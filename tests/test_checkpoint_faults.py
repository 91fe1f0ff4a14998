"""Checkpoints under faults: a process killed (SIGKILL) while it writes never leaves a broken `last`; crafted and
damaged files are refused with clear errors; a checkpoint from another model names the keys that differ."""
import multiprocessing
import os
import pickle
import random
import signal
import time

import pytest
import torch
from torch import nn

from trainer_nb.checkpoint import CheckpointError, load_checkpoint
from trainer_nb.learner import Learner
from trainer_nb.testing import synth_dls


def big_learner(path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1, 1024), nn.Linear(1024, 1024), nn.Linear(1024, 1))  # ~1M params, 4 MB
    return Learner(model, synth_dls(), nn.functional.mse_loss, default_cbs=False, path=path, device='cpu')


def save_forever(path, ready):
    learn = big_learner(path)
    version = 0
    while True:
        with torch.no_grad(): learn.model[0].bias.fill_(version)
        learn.save('last')
        version += 1
        ready.set()


def test_kill_during_save_never_breaks_last(tmp_path):
    ctx = multiprocessing.get_context('fork')
    rng = random.Random(0)
    big_learner(tmp_path).save('last')  # a complete checkpoint exists before the first kill
    versions = []
    for trial in range(20):
        ready = ctx.Event()
        proc = ctx.Process(target=save_forever, args=(tmp_path, ready))
        proc.start()
        assert ready.wait(60)
        time.sleep(rng.uniform(0, 0.15))  # anywhere within the next few saves
        os.kill(proc.pid, signal.SIGKILL)
        proc.join()
        state = load_checkpoint(tmp_path / 'checkpoints' / 'last.pt')  # must load, every time
        bias = state['model']['0.bias']
        assert torch.all(bias == bias[0])  # one complete version, not a mix
        versions.append(int(bias[0]))
        big_learner(tmp_path).load('last')
    assert len(set(versions)) > 1  # the kills did land at different moments


def test_crafted_pickle_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / 'pwned'

    class Exploit:
        def __reduce__(self): return (os.system, (f'touch {marker}',))

    with open(tmp_path / 'evil.pt', 'wb') as f: pickle.dump({'model': Exploit()}, f)
    learn = big_learner(tmp_path)
    with pytest.raises(CheckpointError, match='Refused to load'):
        learn.load(tmp_path / 'evil.pt')
    assert not marker.exists()


def test_truncated_checkpoint_gives_a_clear_error(tmp_path):
    learn = big_learner(tmp_path)
    path = learn.save('whole')
    data = path.read_bytes()
    for cut in (10, len(data) // 3, len(data) - 10):
        (tmp_path / 'cut.pt').write_bytes(data[:cut])
        with pytest.raises(CheckpointError, match='truncated or corrupt'):
            learn.load(tmp_path / 'cut.pt')


def test_checkpoint_of_another_model_names_the_keys(tmp_path):
    path = big_learner(tmp_path).save('big')
    other = Learner(nn.Sequential(nn.Linear(1, 8), nn.Linear(8, 1)), synth_dls(), nn.functional.mse_loss,
                    default_cbs=False, path=tmp_path)
    with pytest.raises(CheckpointError, match=r"missing from the checkpoint: .*|different shapes: 0.weight"):
        other.load(path)
    with pytest.raises(CheckpointError, match=r"0.weight: checkpoint \(1024, 1\) vs model \(8, 1\)"):
        other.load(path)


def test_checkpoint_of_another_optimizer(tmp_path):
    learn = big_learner(tmp_path)
    learn.fit(1)
    path = learn.save('adamw')
    sgd = Learner(big_learner(tmp_path).model, synth_dls(), nn.functional.mse_loss, opt_func=torch.optim.SGD,
                  default_cbs=False, path=tmp_path)
    sgd.load(path, weights_only_model=True)  # the weights alone always load
    assert torch.equal(sgd.model[0].weight, learn.model[0].weight)
