"""The training toolkit under the interrupt harness (every callback resumes exactly), and the digits figures."""
import random
from functools import partial

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Subset

from resume_harness import Interrupter, assert_same_run, make_learner
from trainer_nb.callback.outputs import IterationTimer
from trainer_nb.callback.schedule import TorchScheduler
from trainer_nb.callback.tracker import EarlyStopping, ReduceLROnPlateau, TerminateOnNaN
from trainer_nb.callback.training import GradientAccumulation, GradientClip, MixedPrecision
from trainer_nb.demo import digits_datasets, digits_model
from trainer_nb.learner import Learner
from trainer_nb.metrics import accuracy


def step_lr(opt): return torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.7)


# name -> (learner-level callbacks, fit-level callbacks, how to fit)
CONFIGS = {
    'accumulation': (lambda: [GradientAccumulation(3)], lambda: [], 'one_cycle'),
    'clip': (lambda: [GradientClip(0.5)], lambda: [], 'one_cycle'),
    'bf16': (lambda: [MixedPrecision(torch.bfloat16)], lambda: [], 'one_cycle'),
    'trackers': (lambda: [TerminateOnNaN(), EarlyStopping(patience=10), ReduceLROnPlateau(patience=1, factor=2)],
                 lambda: [], 'fit'),
    'torch_scheduler': (lambda: [], lambda: [TorchScheduler(step_lr)], 'fit'),
    'flat_cos': (lambda: [IterationTimer(print_fn=lambda *a: None)], lambda: [], 'flat_cos'),
    'warmup_cos_accumulated': (lambda: [GradientAccumulation(2), GradientClip(1.0)], lambda: [], 'warmup_cos'),
    # float16 skipping on the device (a fused AdamW): a scale of 2**24 overflows in the first steps (7 skipped)
    'fp16_fused': (lambda: [MixedPrecision(torch.float16, init_scale=2.**24), GradientClip(1.0)], lambda: [], 'one_cycle'),
}
LEARNER_KWARGS = {'fp16_fused': dict(opt_func=partial(torch.optim.AdamW, fused=True))}  # (others: the defaults)


def start(learn, how, cbs):
    if how == 'one_cycle': learn.fit_one_cycle(3, 1e-2, cbs=cbs)
    elif how == 'flat_cos': learn.fit_flat_cos(3, 1e-2, cbs=cbs)
    elif how == 'warmup_cos': learn.fit_warmup_cos(n_steps=20, lr=1e-2, eval_every=6, cbs=cbs)
    else: learn.fit(3, cbs=cbs)


def run(path, name, points=(), mode='memory'):
    learner_cbs, fit_cbs, how = CONFIGS[name]
    learn = make_learner(path, cbs=learner_cbs(), **LEARNER_KWARGS.get(name, {}))
    interrupter = Interrupter(points)
    fit_level = fit_cbs()
    start(learn, how, [*fit_level, interrupter])
    while learn.stop_reason != 'completed':
        assert learn.stop_reason == 'interrupted', learn.stop_reason
        if mode == 'disk':
            learn = make_learner(path, seed=7, cbs=learner_cbs(), **LEARNER_KWARGS.get(name, {}))
            learn.load('last')
            learn.resume(cbs=[*fit_cbs(), interrupter])  # callbacks given to fit(cbs=...) are passed again
        else: learn.resume()
    return learn


CASES = [(name, mode, seed) for name in CONFIGS for mode, seed in (('memory', 1), ('disk', 2))]


@pytest.mark.parametrize('name,mode,seed', CASES, ids=[f"{n}-{m}" for n, m, _ in CASES])
def test_toolkit_callback_resumes_exactly(tmp_path, name, mode, seed):
    reference = run(tmp_path / 'reference', name)
    rng = random.Random(seed)
    total = reference.step
    points = sorted({('train', rng.choice(('before_batch', 'after_loss', 'after_batch')), rng.randint(1, total - 1)),
                     ('valid', rng.randint(0, 1), rng.randint(0, 3))})
    resumed = run(tmp_path / 'interrupted', name, points, mode)
    assert_same_run(resumed, reference)


def test_accumulation_interrupted_mid_group_from_disk(tmp_path):
    # the 2nd batch of a 3-batch group: the checkpoint must carry the accumulated gradients
    reference = run(tmp_path / 'reference', 'accumulation')
    resumed = run(tmp_path / 'interrupted', 'accumulation', [('train', 'after_batch', 4)], mode='disk')
    assert_same_run(resumed, reference)


def test_fp16_fused_interrupted_among_skipped_steps_from_disk(tmp_path):
    # steps 1 to 7 overflow and are skipped on the device: stopped at step 3, restarted from its checkpoint
    reference = run(tmp_path / 'reference', 'fp16_fused')
    assert (reference.mixed_precision.skipped, reference.step) == (7, 36)
    assert reference.opt.state_dict()['state'][0]['step'].item() == 36 - 7  # AdamW's own count leaves them out
    resumed = run(tmp_path / 'interrupted', 'fp16_fused', [('train', 'after_batch', 3)], mode='disk')
    assert resumed.mixed_precision.skipped == 7
    assert_same_run(resumed, reference)


def test_lr_find_between_interrupt_and_resume_changes_nothing(tmp_path):
    reference = make_learner(tmp_path / 'reference', checkpoints=False)
    reference.fit_one_cycle(3, 1e-2)
    learn = make_learner(tmp_path / 'interrupted', checkpoints=False)
    learn.fit_one_cycle(3, 1e-2, cbs=[Interrupter([('train', 'after_batch', 10)])])
    learn.lr_find(num_it=20, show_plot=False)
    learn.resume()
    assert_same_run(learn, reference)


# --- digits figures -------------------------------------------------------------------------------------------

def digits(path, bs=64, n=None, precision=None, cbs=(), seed=0, lr=1e-2, epochs=10):
    "A learner fit on the digits, with its run folder `path` (a test's `tmp_path`)."
    torch.manual_seed(seed)
    train, valid = digits_datasets()
    if n is not None: train = Subset(train, range(n))
    cbs = [*cbs, *([MixedPrecision(precision)] if precision else [])]
    learn = Learner(digits_model(), (DataLoader(train, batch_size=bs, shuffle=True), DataLoader(valid, batch_size=256)),
                    nn.functional.cross_entropy, lr=lr, metrics=[accuracy], progress=False, cbs=cbs, device='cpu',
                    path=path)
    learn.fit(epochs)
    return learn


def test_bf16_matches_fp32_accuracy_on_digits(tmp_path):
    fp32, bf16 = digits(tmp_path / 'fp32', epochs=20), digits(tmp_path / 'bf16', precision=torch.bfloat16, epochs=20)
    acc32, acc16 = fp32.validate()['accuracy'], bf16.validate()['accuracy']
    print(f"digits valid accuracy: fp32 {acc32:.4f}, bf16 {acc16:.4f}")
    assert acc16 >= 0.95 and abs(acc16 - acc32) <= 0.02


def test_grad_accumulation_4x16_matches_batch_64_on_digits(tmp_path):
    n = 22 * 64  # whole batches in both runs
    big = digits(tmp_path / 'big', bs=64, n=n, epochs=3)
    acc = digits(tmp_path / 'acc', bs=16, n=n, epochs=3, cbs=[GradientAccumulation(4)])
    a = torch.tensor([v for v, _ in acc.storage.history('train/loss').values()])
    b = torch.tensor([v for v, _ in big.storage.history('train/loss').values()])
    assert a.shape == b.shape == (66,)
    print(f"max |loss difference| over 66 steps: {(a - b).abs().max().item():.2e}")
    assert torch.allclose(a, b, rtol=1e-4, atol=1e-5)


def test_lr_find_on_digits(tmp_path, capsys):
    learn = digits(tmp_path, epochs=1)
    learn.model = digits_model()  # a fresh model, as before a first fit (the optimizer is remade to match)
    learn.opt = learn.create_opt()
    before = {k: v.clone() for k, v in learn.model.state_dict().items()}
    suggestions = learn.lr_find(show_plot=True)
    print(f"lr_find on digits: {suggestions}")
    assert all(torch.equal(v, before[k]) for k, v in learn.model.state_dict().items())
    assert 1e-4 <= suggestions.valley <= 0.1 and suggestions.minimum <= 0.1
    assert (learn.path / 'lr_find.png').exists()  # headless: written to the run folder
    said = capsys.readouterr().out  # and a line says what it found and where the curve is
    assert f"lr_find: valley {suggestions.valley:.2e}, steep " in said and f"the curve is in {learn.path / 'lr_find.png'}" in said, said


@pytest.mark.skipif(not torch.cuda.is_available(), reason='float16 with a GradScaler needs a CUDA GPU')
def test_fp16_gradscaler_on_cuda(tmp_path):
    torch.manual_seed(0)
    train, valid = digits_datasets()
    learn = Learner(digits_model(), (DataLoader(train, batch_size=64, shuffle=True), DataLoader(valid, batch_size=256)),
                    nn.functional.cross_entropy, lr=1e-2, metrics=[accuracy], progress=False, device='cuda',
                    cbs=[MixedPrecision(torch.float16), GradientClip(1.0)], path=tmp_path)
    learn.fit(10)
    assert learn.validate()['accuracy'] >= 0.95
    assert learn.mixed_precision.scaler.get_scale() > 0
