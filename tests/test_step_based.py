"""Step-based training across epoch boundaries, with periodic evaluation."""
import json

import pytest

from trainer_nb.testing import EventRecorder, synth_learner


@pytest.mark.parametrize('n_steps,eval_every', [(10, 4), (8, None), (5, 5), (13, 3)])
def test_steps_cross_epochs(n_steps, eval_every):
    rec = EventRecorder()
    learn = synth_learner(n_train=64, bs=16, cbs=rec)  # 4 batches per epoch
    learn.fit(n_steps=n_steps, eval_every=eval_every)
    state = learn.fit_state
    assert (state.fit_steps, learn.step, state.samples) == (n_steps, n_steps, n_steps * 16)
    assert rec.events.count('before_epoch') == -(-n_steps // 4)
    assert rec.events.count('after_step') == n_steps
    # validations at every multiple of eval_every, and one at the end if the last step is not one
    expected = list(range(eval_every, n_steps + 1, eval_every)) if eval_every else []
    if not expected or expected[-1] != n_steps: expected.append(n_steps)
    steps_at_validation = []
    for i, ev in enumerate(rec.events):
        if ev == 'before_validate':
            steps_at_validation.append(rec.events[:i].count('after_step'))
    assert steps_at_validation == expected
    assert learn.stop_reason == 'completed'
    assert learn.training is False and learn.model.training is False


def test_mid_epoch_validation_returns_to_training():
    from trainer_nb.callback.core import Callback

    class Modes(Callback):
        def __init__(self): self.bad = []
        def before_batch(self):
            if self.learn.training != self.learn.model.training: self.bad.append(self.learn.iter)

    cb = Modes()
    learn = synth_learner(n_train=64, bs=16, cbs=cb)
    learn.fit(2, eval_every=3)
    assert cb.bad == []
    assert learn.fit_state.fit_steps == 8


def test_step_based_metrics_json(tmp_path):
    learn = synth_learner(n_train=64, bs=16, default_cbs=True, progress=False, path=tmp_path)
    learn.fit(n_steps=10, eval_every=4)
    lines = [json.loads(l) for l in (tmp_path / 'metrics.json').read_text().splitlines()]
    valid_iters = [r['iter'] for r in lines if 'valid/loss' in r]
    assert valid_iters == [4, 8, 10]
    # a second fit continues the same x-axis
    learn.fit(n_steps=4)
    lines = [json.loads(l) for l in (tmp_path / 'metrics.json').read_text().splitlines()]
    assert lines[-1]['iter'] == 14
    assert [r['iter'] for r in lines] == sorted(r['iter'] for r in lines)
