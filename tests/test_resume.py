"""Exactness: a fit interrupted anywhere (training, validation, during a checkpoint write; once or several times)
and resumed, in the same process or from a checkpoint in a new learner, ends bit-identical to a fit that was
never interrupted: weights, optimizer state, metric history, counters.
"""
import json
import random

import pytest
import torch

import trainer_nb.checkpoint as checkpoint_module
import trainer_nb.files as files_module
from resume_harness import (N_EPOCHS, STEPS_PER_EPOCH, Interrupter, assert_same_run, history, make_learner,
                            run_fit, sigint)

TOTAL_STEPS = N_EPOCHS * STEPS_PER_EPOCH
EVENTS = ('before_batch', 'after_loss', 'after_step', 'after_batch')


@pytest.fixture(scope='module')
def reference(tmp_path_factory):
    learn = make_learner(tmp_path_factory.mktemp('reference'))
    run_fit(learn)
    assert learn.stop_reason == 'completed'
    return learn


def random_cases(n, seed=1234):
    rng = random.Random(seed)
    cases = []
    for i in range(n):
        points = []
        for _ in range(rng.choice((1, 1, 2, 3))):
            kind = rng.choice(('train', 'train', 'valid', 'ckpt'))
            if kind == 'train': points.append(('train', rng.choice(EVENTS), rng.randint(1, TOTAL_STEPS - 1)))
            elif kind == 'valid': points.append(('valid', rng.randint(0, N_EPOCHS - 1), rng.randint(0, 3)))
            else: points.append(('ckpt', rng.randint(1, 5)))
        cases.append((('memory', 'disk')[i % 2], sorted(set(points))))
    return cases


FIXED = [('memory', [('train', 'after_batch', STEPS_PER_EPOCH)]),       # the last batch of an epoch
         ('disk', [('train', 'after_batch', STEPS_PER_EPOCH)]),
         ('memory', [('valid', 0, 0)]), ('disk', [('valid', 1, 3)]),     # first / last validation batch
         ('memory', [('train', 'before_batch', 1)]),                      # the very first step
         ('disk', [('ckpt', 1)]), ('memory', [('ckpt', 3)])]             # during a checkpoint write
CASES = FIXED + random_cases(30)


def run_with_interrupts(tmp_path, mode, points, monkeypatch):
    interrupter = Interrupter(points)
    saves = [p[1] for p in points if p[0] == 'ckpt']
    calls = {'n': 0}
    real_fsync = files_module.os.fsync

    def fsync_with_interrupt(fd):  # SIGINT in the middle of writing the n-th checkpoint of a running fit
        calls['n'] += 1
        learn = interrupter.learn
        if calls['n'] in saves and learn is not None and learn.in_fit and not learn.stop_requested: sigint()
        return real_fsync(fd)

    monkeypatch.setattr(files_module.os, 'fsync', fsync_with_interrupt)
    learn = make_learner(tmp_path)
    learn.fit_one_cycle(N_EPOCHS, 1e-2, cbs=[interrupter])
    stops = 0
    while learn.stop_reason != 'completed':
        assert learn.stop_reason == 'interrupted' and learn.fit_state.resumable
        stops += 1
        assert stops <= len(points), "more stops than interrupts"
        if mode == 'disk':
            learn = make_learner(tmp_path, seed=99)  # a different seed: everything must come from the file
            learn.load('last')
            learn.resume(cbs=[interrupter])
        else:
            learn.resume()
    return learn, stops


@pytest.mark.parametrize('mode,points', CASES, ids=[f"{m}-{p}" for m, p in CASES])
def test_interrupted_fit_resumes_exactly(tmp_path, reference, mode, points, monkeypatch):
    learn, stops = run_with_interrupts(tmp_path, mode, points, monkeypatch)
    assert_same_run(learn, reference)
    # metrics.json: the same validations, once each, and the steps in order
    lines = [json.loads(l) for l in (tmp_path / 'metrics.json').read_text().splitlines()]
    iters = [r['iter'] for r in lines]
    assert iters == sorted(iters)
    assert [(r['iter'], r['valid/loss']) for r in lines if 'valid/loss' in r] == \
        [(it, v) for v, it in reference.storage.history('valid/loss').values()]


def test_interrupt_prints_one_line_and_resume_explains_itself(tmp_path, capsys):
    learn = make_learner(tmp_path, checkpoints=False)
    learn.fit(2, cbs=[Interrupter([('train', 'after_loss', 5)])])
    out = capsys.readouterr().out
    assert out.count('stopping after this batch; interrupt again to abort now') == 1
    assert 'learn.resume()' in out
    # sent during the 6th batch (after 5 steps): that batch completes, then the fit stops
    assert (learn.stop_reason, learn.step, learn.fit_state.epoch_iter) == ('interrupted', 6, 6)
    learn.resume()
    assert learn.stop_reason == 'completed' and learn.step == 2 * STEPS_PER_EPOCH
    with pytest.raises(RuntimeError, match='Nothing to resume: the last fit completed'):
        learn.resume()
    with pytest.raises(RuntimeError, match='has not run a fit'):
        make_learner(tmp_path).resume()


def test_fit_after_an_interrupt_starts_a_new_fit(tmp_path):
    learn = make_learner(tmp_path, checkpoints=False)
    learn.fit(2, cbs=[Interrupter([('train', 'after_batch', 3)])])
    learn.fit(1)
    assert learn.fit_state.fit_steps == STEPS_PER_EPOCH and learn.step == 3 + STEPS_PER_EPOCH


def test_second_interrupt_aborts_at_once(tmp_path):
    import signal
    before = signal.getsignal(signal.SIGINT)

    class Twice(Interrupter):
        def _check(self, event):
            if self.learn.training and event == 'after_loss' and self.learn.step == 4: sigint(); sigint()

    learn = make_learner(tmp_path, checkpoints=False)
    with pytest.raises(KeyboardInterrupt):
        learn.fit(2, cbs=[Twice([])])
    assert learn.stop_reason == 'interrupted' and not learn.fit_state.resumable
    assert learn.step == 4  # aborted inside the batch: its step never happened
    assert signal.getsignal(signal.SIGINT) is before
    with pytest.raises(RuntimeError, match="cannot continue exactly. No checkpoint of a batch boundary was saved"):
        learn.resume()  # (no `last` to load: make_learner(checkpoints=False) saves none, and the advice says so)


def test_handler_restored_after_an_error(tmp_path):
    import signal
    before = signal.getsignal(signal.SIGINT)

    class Boom(Interrupter):
        def _check(self, event):
            if self.learn.step == 3: raise ValueError('boom')

    with pytest.raises(ValueError):
        make_learner(tmp_path, checkpoints=False).fit(1, cbs=[Boom([])])
    assert signal.getsignal(signal.SIGINT) is before


def test_history_continues_across_fits_and_resume(tmp_path, reference):
    learn = make_learner(tmp_path, checkpoints=False)
    learn.fit_one_cycle(N_EPOCHS, 1e-2, cbs=[Interrupter([('train', 'after_step', 20)])])
    learn.resume()
    counts = {n: len(v) for n, v in history(learn).items()}
    assert counts['train/loss'] == TOTAL_STEPS and counts['valid/loss'] == N_EPOCHS


# --- callbacks of one name, and a checkpoint loaded into the learner that stopped ------------------------------

def plateau(patience, factor, min_delta=0.):
    from trainer_nb.callback.tracker import ReduceLROnPlateau
    return ReduceLROnPlateau(monitor='valid/loss', patience=patience, factor=factor, min_delta=min_delta,
                             print_fn=lambda *a: None)


def fit_with_plateaus(path, interrupter=None):
    "A plain fit (no schedule: the lr is the plateaus'), with three `ReduceLROnPlateau`s: one the learner's own,"
    "two given to the fit; each keeps other counters. Stopped by `interrupter`, then resumed from disk."
    learn = make_learner(path, cbs=[plateau(2, 1.5, min_delta=0.04)])
    fit_cbs = [plateau(1, 2., min_delta=0.05), plateau(2, 3., min_delta=0.1)]
    learn.fit(N_EPOCHS, eval_every=3, cbs=fit_cbs + ([interrupter] if interrupter else []))
    while learn.stop_reason != 'completed':
        learn = make_learner(path, seed=99, cbs=[plateau(2, 1.5, min_delta=0.04)])
        learn.load('last')
        fit_cbs = [plateau(1, 2., min_delta=0.05), plateau(2, 3., min_delta=0.1)]
        learn.resume(cbs=fit_cbs + [interrupter])
    return learn, [(cb.best, cb.wait) for cb in [learn.reduce_lr_on_plateau, *fit_cbs]]


def test_callbacks_of_one_name_get_their_own_states_back_after_a_restart(tmp_path):
    reference, ref_states = fit_with_plateaus(tmp_path / 'reference')
    assert len(set(lr for lr, _ in reference.storage.history('lr').values())) >= 3  # the plateaus acted
    for step in (5, 17, 26):
        learn, states = fit_with_plateaus(tmp_path / f'stop_{step}', Interrupter([('train', 'after_batch', step)]))
        assert states == ref_states, f"stopped at step {step}"
        assert_same_run(learn, reference)


@pytest.mark.parametrize('name', ['last', 'step_0000014'])
def test_a_checkpoint_loaded_into_the_learner_that_stopped_resumes_its_schedule(tmp_path, reference, name):
    "Stop a one-cycle fit, load a checkpoint of it into the same learner (the last one, or an earlier one: a roll"
    "back), and resume: the schedule continues from the file, and the fit ends as if never stopped."
    learn = make_learner(tmp_path)
    interrupter = Interrupter([('train', 'after_batch', 20)])
    learn.fit_one_cycle(N_EPOCHS, 1e-2, cbs=[interrupter])
    assert (learn.stop_reason, learn.step) == ('interrupted', 20)
    learn.load(name)
    learn.resume(cbs=[interrupter])
    assert_same_run(learn, reference)
