"""`learn.controls`: each control takes effect at a batch boundary, is logged and saved, and keeps resume exact.

Every run here has every source of drift of `resume_harness` (shuffling, dropout, numpy and python noise, AdamW, a
one-cycle schedule, periodic checkpoints). "The same run" means the same weights, optimizer state, step and
sample counts, bit for bit (`assert_same_run`, or the weights and optimizer where the history differs by design).
"""
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
import torch

from trainer_nb.callback.core import LambdaCallback
from resume_harness import N_EPOCHS, STEPS_PER_EPOCH, history, make_learner, run_fit

TESTS = Path(__file__).resolve().parent


def at_step(step, action):
    "A callback that calls `action(learn)` once, after optimizer step `step`."
    return LambdaCallback(after_step=lambda learn: learn.step == step and action(learn))


def same_training(a, b):
    "Same weights and optimizer state (the storage may differ: a requested validation logs more)."
    for (k1, v1), (k2, v2) in zip(a.model.state_dict().items(), b.model.state_dict().items()):
        assert k1 == k2 and torch.equal(v1, v2), f"weights differ at {k1}"
    for i, s in a.opt.state_dict()['state'].items():
        for k, v in s.items(): assert torch.equal(torch.as_tensor(v), torch.as_tensor(b.opt.state_dict()['state'][i][k]))
    assert a.step == b.step


def assert_same_but_the_stop(a, b):
    "The same run, the storage included, but for the stop request that the interrupted one logged."
    same_training(a, b)
    drop = lambda l: {k: v for k, v in history(l).items() if k != 'control/stop'}
    assert drop(a) == drop(b) and (a.fit_state.samples, a.stop_reason) == (b.fit_state.samples, b.stop_reason)


def scaled(path, stop_at=None):
    cbs = [at_step(5, lambda l: l.controls.scale_lr(0.5))]
    if stop_at is not None: cbs.append(at_step(stop_at, lambda l: l.controls.stop()))
    return make_learner(path, cbs=cbs)


def test_scale_lr_logged_at_its_step_and_on_top_of_the_schedule(tmp_path):
    learn, plain = scaled(tmp_path / 'a'), make_learner(tmp_path / 'b')
    run_fit(learn); run_fit(plain)
    assert learn.storage.history('control/scale_lr').values() == [(0.5, 5)]
    lrs, plain_lrs = dict((i, v) for v, i in learn.storage.history('lr').values()), \
        dict((i, v) for v, i in plain.storage.history('lr').values())
    # logged at step 5 (the boundary after it): the batch that makes step 6 is the first with the new lr
    assert lrs[5] == plain_lrs[5] and lrs[6] == pytest.approx(plain_lrs[6] * 0.5) and lrs[20] == pytest.approx(plain_lrs[20] * 0.5)
    assert learn.controls.last == 'lr x0.5 from step 5' and learn.controls.history[0]['step'] == 5


def test_scale_lr_then_interrupt_resumes_exactly_in_process(tmp_path):
    reference = scaled(tmp_path / 'ref')
    run_fit(reference)
    learn = scaled(tmp_path / 'run', stop_at=9)
    run_fit(learn)
    assert (learn.stop_reason, learn.step, learn.fit_state.resumable) == ('interrupted', 9, True)
    learn.resume()
    assert_same_but_the_stop(learn, reference)


def test_scale_lr_then_interrupt_resumes_exactly_from_disk_in_a_new_process(tmp_path):
    reference = scaled(tmp_path / 'ref')
    run_fit(reference)
    run = tmp_path / 'run'
    learn = scaled(run, stop_at=9)
    run_fit(learn)
    assert (run / 'checkpoints' / 'last.pt').is_file()
    script = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {str(TESTS)!r})
        from resume_harness import make_learner
        learn = make_learner({str(run)!r}).load('last')
        assert learn.controls.lr_scale == 0.5, learn.controls.lr_scale
        learn.resume()
        learn.save('final')
    """)
    proc = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    resumed = make_learner(tmp_path / 'check').load(run / 'checkpoints' / 'final.pt')
    assert_same_but_the_stop(resumed, reference)


def test_requested_validation_leaves_training_unchanged(tmp_path):
    plain = make_learner(tmp_path / 'plain')
    run_fit(plain)
    learn = make_learner(tmp_path / 'v', cbs=[at_step(6, lambda l: l.controls.validate())])
    run_fit(learn)
    same_training(learn, plain)
    assert [i for _, i in learn.storage.history('valid/loss').values()] == [6] + [STEPS_PER_EPOCH * (e + 1) for e in range(N_EPOCHS)]
    assert learn.storage.history('control/validate').values() == [(1.0, 6)]
    assert learn.controls.last.startswith('validated at step 6: loss ')
    train = lambda l: history(l)['train/loss']
    assert train(learn) == train(plain)


def test_requested_save_leaves_training_unchanged_and_resumes_exactly(tmp_path):
    plain = make_learner(tmp_path / 'plain')
    run_fit(plain)
    run = tmp_path / 's'
    learn = make_learner(run, cbs=[at_step(10, lambda l: l.controls.save('now'))])
    run_fit(learn)
    same_training(learn, plain)
    assert learn.controls.last == 'saved checkpoints/now.pt at step 10'
    mid = make_learner(tmp_path / 'mid').load(run / 'checkpoints' / 'now.pt')  # a checkpoint taken mid-fit resumes
    assert (mid.step, mid.fit_state.resumable) == (10, True)
    mid.resume()
    same_training(mid, plain)


def test_stop_after_epoch_is_resumable_and_exact(tmp_path):
    reference = make_learner(tmp_path / 'ref')
    run_fit(reference)
    learn = make_learner(tmp_path / 'e', cbs=[at_step(3, lambda l: l.controls.stop(when='epoch'))])
    run_fit(learn)
    assert (learn.stop_reason, learn.step, learn.epoch, learn.fit_state.resumable) == ('interrupted', STEPS_PER_EPOCH, 1, True)
    assert [i for _, i in learn.storage.history('valid/loss').values()] == [STEPS_PER_EPOCH]  # its validation ran
    learn.resume()
    history_without_controls = lambda l: {k: v for k, v in history(l).items() if not k.startswith('control/')}
    same_training(learn, reference)
    assert history_without_controls(learn) == history_without_controls(reference)


def test_stop_now_from_another_thread(tmp_path):
    started = threading.Event()
    learn = make_learner(tmp_path, cbs=[LambdaCallback(after_step=lambda l: l.step == 2 and started.set())])
    def click():  # what a widget's click handler does, on the kernel's comm thread
        started.wait(30)
        learn.controls.stop()
    t = threading.Thread(target=click)
    t.start()
    run_fit(learn)
    t.join()
    assert learn.stop_reason == 'interrupted' and learn.fit_state.resumable
    assert learn.controls.history[-1]['control'] == 'stop'
    step = learn.step
    learn.resume()
    assert learn.stop_reason == 'completed' and learn.step == N_EPOCHS * STEPS_PER_EPOCH > step


def test_controls_refuse_bad_values():
    from trainer_nb.controls import Controls
    c = Controls()
    with pytest.raises(ValueError, match='finite factor > 0'): c.scale_lr(float('nan'))
    with pytest.raises(ValueError, match="'batch' or 'epoch'"): c.stop('now')
