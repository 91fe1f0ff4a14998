"""The NaN guard's deferred mode (the one CUDA uses with a fused optimizer), run on the CPU with a fused AdamW.

The immediate mode (the CPU default) is tested in the learner chapter and in the fault campaign. The deferred mode
skips the step on the device (the optimizer reads `found_inf`) and tells the host later; on the CPU "later" is
the next batch boundary. These tests pin down what it must keep: the weights and the optimizer's state of the last
good step, a resumable stop, nothing of the guard in checkpoints, and a NaN in the very last step still reported.
"""
from functools import partial

import torch

from trainer_nb.callback.core import Callback
from trainer_nb.callback.training import GradientAccumulation
from trainer_nb.testing import synth_learner

FUSED = partial(torch.optim.AdamW, fused=True)


class NanAt(Callback):
    "Make the training loss NaN at the batch numbers (counted over the fit) in `batches`."
    def __init__(self, *batches): self.batches, self.seen = set(batches), 0
    def after_loss(self):
        if not self.learn.training: return
        if self.seen in self.batches: self.learn.loss = self.learn.loss * float('nan')
        self.seen += 1


def learner(tmp_path, *cbs, name='run'):
    return synth_learner(cbs=list(cbs), path=tmp_path / name, opt_func=FUSED, nan_guard='deferred', lr=0.01)


def test_deferred_with_accumulation_keeps_last_good_step(tmp_path):
    # 8 batches per epoch, 2 per step: batch 5 (the second of step 3) is NaN, so step 3 must not reach the weights
    learn = learner(tmp_path, GradientAccumulation(2), NanAt(5))
    learn.fit(2)
    ref = learner(tmp_path, GradientAccumulation(2), name='ref')
    ref.fit(n_steps=2)
    assert (learn.stop_reason, learn.fit_state.resumable) == ('nonfinite', True)
    assert all(bool(p.isfinite().all()) for p in learn.model.parameters())
    for a, b in zip(learn.model.parameters(), ref.model.parameters()): assert torch.equal(a, b)
    assert learn.opt.state_dict()['state'][0]['step'] == ref.opt.state_dict()['state'][0]['step'] == 2
    assert not hasattr(learn.opt, 'found_inf')  # the guard leaves nothing on the optimizer after the fit
    learn.remove_cb('nan_at')
    learn.resume()
    assert learn.stop_reason == 'completed'
    assert all(bool(p.isfinite().all()) for p in learn.model.parameters())


def test_deferred_nan_in_the_last_step_is_reported(tmp_path):
    # a step-based fit ends without a batch boundary after its last step: the guard waits for its flag once
    learn = learner(tmp_path, NanAt(5))
    learn.fit(n_steps=6)
    assert learn.stop_reason == 'nonfinite'
    ref = learner(tmp_path, name='ref')
    ref.fit(n_steps=5)
    for a, b in zip(learn.model.parameters(), ref.model.parameters()): assert torch.equal(a, b)


def test_deferred_checkpoint_resumes_in_a_new_learner(tmp_path):
    learn = learner(tmp_path, NanAt(3))
    learn.fit(2)
    assert learn.stop_reason == 'nonfinite'
    path = learn.save('after_nan')
    fresh = learner(tmp_path, name='run')  # the same run folder, as after a restart
    fresh.load(path)
    assert not hasattr(fresh.opt, 'found_inf')
    fresh.resume()
    learn.remove_cb('nan_at')
    learn.resume()
    assert (fresh.stop_reason, learn.stop_reason) == ('completed', 'completed')
    for a, b in zip(learn.model.parameters(), fresh.model.parameters()): assert torch.equal(a, b)
