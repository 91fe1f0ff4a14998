"""Sharded training (FSDP2) and sharded checkpoints (DCP): 2 or 3 processes with gloo on the CPU (process 0 is this
test's own process, the others are forked by `launch`); background saves, and a background save killed mid-write."""
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

from trainer_nb.callback.checkpoint import CheckpointCallback
from trainer_nb.callback.core import Callback
from trainer_nb.callback.training import GradientAccumulation, GradientClip
from trainer_nb.checkpoint import load_checkpoint, wait_for_save
from trainer_nb.distributed import DistributedTrainer, distribute, launch
from trainer_nb.learner import Learner
from trainer_nb.sharded import ShardedTrainer

from indexed_digits import DropIndex, Indexed, SeenSamples

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason='torch.distributed is not available')


class StopAt(Callback):
    def __init__(self, step): self.at = step
    def after_step(self):
        if self.learn.step == self.at: self.learn.request_stop()


def learner(path, cbs=(), n=512, bs=32, opt_func=torch.optim.AdamW, test=False):
    torch.manual_seed(0)
    model = nn.Sequential(DropIndex(), nn.Linear(64, 96), nn.ReLU(), nn.Linear(96, 10))
    train, valid = Indexed(n), Indexed(129)  # (129 = 2 x 64 + 1: the last sample goes with process 0's batch)
    loaders = (DataLoader(train, batch_size=bs, shuffle=True), DataLoader(valid, batch_size=64))
    if test: loaders += (DataLoader(Indexed(200), batch_size=64),)
    return Learner(model, loaders,
                   nn.functional.cross_entropy, opt_func=opt_func, lr=1e-2, path=path, device='cpu',
                   progress=False, cbs=list(cbs))


def losses(learn): return torch.tensor([v for v, _ in learn.storage.history('train/loss').values()])


def full_state(learn):
    "The whole weights and AdamW moments, by name, in every process (gathered from the shards)."
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict
    if learn.comm.world_size > 1:
        model, optim = get_state_dict(learn.raw_model, learn.opt, options=StateDictOptions(full_state_dict=True))
    else: model, optim = get_state_dict(learn.raw_model, learn.opt)
    moments = {f'{k}.{m}': v[m].clone() for k, v in optim['state'].items() for m in ('exp_avg', 'exp_avg_sq', 'step')}
    return {**{k: v.clone() for k, v in model.items()}, **moments}


def assert_same(a: dict, b: dict):
    assert a.keys() == b.keys()
    for k in a: assert torch.equal(a[k], b[k]), k


def test_sharded_matches_data_parallel_for_5_steps_with_clipping_and_accumulation(tmp_path):
    def fit(kind):
        extra = [GradientClip(0.2), GradientAccumulation(2)]
        learn = learner(tmp_path / kind, [ShardedTrainer() if kind == 'fsdp' else DistributedTrainer(), *extra])
        learn.fit(n_steps=5)
        return losses(learn), learn.storage.history('grad_norm').values(), learn.step

    (l_fsdp, norms_fsdp, steps), (l_ddp, norms_ddp, _) = launch(fit, 2, 'fsdp'), launch(fit, 2, 'ddp')
    assert steps == 5 and len(l_fsdp) == 5  # 5 steps of 2 batches of 2 x 32 samples (a loss per step)
    print(f"max |loss difference| FSDP2 vs DDP over 5 steps: {(l_fsdp - l_ddp).abs().max():.2e}")
    assert torch.allclose(l_fsdp, l_ddp, rtol=1e-5, atol=1e-6)
    norms = torch.tensor([[a, b] for (a, _), (b, _) in zip(norms_fsdp, norms_ddp)])
    assert len(norms) == 5 and norms.min() > 0.2  # (clipped at each step)
    assert torch.allclose(norms[:, 0], norms[:, 1], rtol=1e-5)


def test_an_interrupted_sharded_fit_resumed_from_its_checkpoint_is_bit_identical(tmp_path):
    def run(stop):
        learn = learner(tmp_path / ('stopped' if stop else 'whole'), [ShardedTrainer()])
        learn.fit(2, cbs=[StopAt(stop)] if stop else [])
        if stop:  # a new learner in the same processes, from the checkpoint SaveOnStop wrote
            assert learn.stop_reason == 'interrupted' and learn.step == stop
            learn = learner(tmp_path / 'stopped', [ShardedTrainer()]).load('last')
            learn.resume(cbs=[StopAt(0)])
        return learn.step, full_state(learn), losses(learn)

    step, resumed, l_resumed = launch(run, 2, 5)
    step_ref, reference, l_ref = launch(run, 2, None)
    assert step == step_ref == 16
    assert_same(resumed, reference)
    assert torch.equal(l_resumed, l_ref)  # (the storage came back with the checkpoint: the losses of all 16 steps)


def test_resume_auto_continues_a_sharded_fit_from_its_folder(tmp_path):
    "`fit(..., resume='auto')` with `ShardedTrainer`: the script run again continues from the folder `checkpoints/last`."
    def run(stop):
        learn = learner(tmp_path / 'run', [ShardedTrainer()])
        learn.fit(2, cbs=[StopAt(stop)], resume='auto')  # (the same line each time: StopAt(0) never stops)
        return learn.step, learn.stop_reason, full_state(learn), losses(learn)

    def other_length():
        learn = learner(tmp_path / 'run', [ShardedTrainer()])
        try: learn.fit(3, resume='auto')
        except RuntimeError as e: return str(e)

    def whole():
        learn = learner(tmp_path / 'whole', [ShardedTrainer()])
        learn.fit(2)
        return full_state(learn), losses(learn)

    first, second, third = launch(run, 2, 5), launch(run, 2, 0), launch(run, 2, 0)
    refused = launch(other_length, 2)
    reference, l_ref = launch(whole, 2)
    assert first[:2] == (5, 'interrupted') and (tmp_path / 'run' / 'checkpoints' / 'last' / '.metadata').is_file()
    assert second[:2] == (16, 'completed') and third[:2] == (16, 'completed')  # (the third: nothing left to train)
    assert_same(second[2], reference)  # continued from the folder: bit-identical to a fit never stopped
    assert torch.equal(second[3], l_ref) and torch.equal(third[3], l_ref)
    assert_same(third[2], reference)
    assert "refuses" in refused and "n_epochs=2" in refused and "n_epochs=3" in refused, refused


def test_a_sharded_checkpoint_keeps_the_loading_optimizers_fused_step(tmp_path):
    """Saved where AdamW was not fused (the CPU), loaded where it is (a GPU's default): the loading optimizer keeps
    its fused step, as a one-file load does (`load_optimizer_state`); the checkpoint's `fused=None` turned it off."""
    from functools import partial

    def save():
        learn = learner(tmp_path, [ShardedTrainer()])
        learn.fit(n_steps=3)
        learn.save('unfused')
        return learn.opt.param_groups[0].get('fused')

    assert not launch(save, 2)
    fused = learner(tmp_path, opt_func=partial(torch.optim.AdamW, fused=True)).load('unfused')
    assert fused.opt.param_groups[0]['fused'] is True
    assert fused.step == 3 and fused.opt.state  # (the rest of the state did come over)
    fused.fit(n_steps=2)
    assert fused.stop_reason == 'completed'


def test_a_checkpoint_of_2_processes_loads_into_1_2_and_3_and_3_see_the_rest_of_the_epoch_once(tmp_path):
    n, bs = 465, 16  # 2 processes: steps of 32. After 4 steps, 337 are left: with 3 processes, 6 steps of 48, then
    # one of 49 (17, 16 and 16 samples: one more than 7 x 48, and too few to give each process one, the step before
    # takes it); with 2, 10 steps of 32, then one of 17 (9 and 8). None is repeated.

    def save_at_4():
        seen = SeenSamples()
        learn = learner(tmp_path, [ShardedTrainer(), seen], n=n, bs=bs)
        learn.fit(1, cbs=[StopAt(4)])
        (tmp_path / f'seen{learn.rank}.json').write_text(json.dumps(seen.seen))
        return full_state(learn), learn.validate()['loss']

    def load_and_finish():
        seen = SeenSamples()
        learn = learner(tmp_path, [ShardedTrainer(), seen], n=n, bs=bs).load('last')
        state = full_state(learn)
        learn.resume(cbs=[StopAt(0)])
        (tmp_path / f'after{learn.rank}_{learn.comm.world_size}.json').write_text(json.dumps(seen.seen))
        return state, learn.fit_state.samples

    saved, valid_loss = launch(save_at_4, 2)
    assert sorted(p.name for p in (tmp_path / 'checkpoints' / 'last').iterdir()) == \
        ['.metadata', '__0_0.distcp', '__1_0.distcp', 'rank0.pt', 'rank1.pt']
    for world in (2, 3):
        loaded, samples = launch(load_and_finish, world)
        assert_same(loaded, saved)  # weights and AdamW moments, resharded to this number of processes
        assert samples == n
    before = [i for r in (0, 1) for i in json.loads((tmp_path / f'seen{r}.json').read_text())]
    after = [i for r in (0, 1, 2) for i in json.loads((tmp_path / f'after{r}_3.json').read_text())]
    assert len(before) == 4 * 2 * bs and len(set(before)) == len(before)
    assert sorted(after) == sorted(set(range(n)) - set(before))  # the rest of the epoch, each sample once
    assert [len(json.loads((tmp_path / f'after{r}_3.json').read_text())) for r in (0, 1, 2)] == [113, 112, 112]
    # one plain process, no process group: the whole weights
    plain = learner(tmp_path, n=n, bs=bs).load('last')
    assert not torch.distributed.is_initialized()
    assert_same(full_state(plain), saved)
    assert plain.step == 4 and plain.fit_state.world_size == 2
    assert plain.validate()['loss'] == pytest.approx(valid_loss, rel=1e-6)  # 2 processes evaluated each sample once
    weights = learner(tmp_path, n=n, bs=bs).load('last', weights_only_model=True)
    for k, v in weights.model.state_dict().items(): assert torch.equal(v, saved[k])


def test_the_test_set_of_a_sharded_fit_is_evaluated_with_the_best_weights(tmp_path):
    def run():
        worst = CheckpointCallback(monitor='valid/loss', mode='max', background=True)  # (the best: the first epoch's)
        learn = learner(tmp_path, [ShardedTrainer(), worst], bs=64, test=True)
        learn.fit(3)
        final = full_state(learn)
        best = learner(tmp_path / 'other', [ShardedTrainer()], bs=64, test=True).load(worst.best_path,
                                                                                      weights_only_model=True)
        return (learn.test_results['loss'], best.validate(best.dls.test)['loss'], learn.validate(learn.dls.test)['loss'],
                worst.best_path.name, final, full_state(learn))

    with_best, best_loss, final_loss, name, final, after = launch(run, 2)
    assert name == 'best' and (tmp_path / 'checkpoints' / 'best' / '.metadata').is_file()
    assert with_best == best_loss and with_best > final_loss  # the test set got the first epoch's weights...
    assert_same(after, final)  # ...and the fit's own weights came back after it


class NanInProcess1(Callback):
    "Process 1's loss turns NaN at step `at`."
    order = -5
    def __init__(self, at): self.at = at
    def after_loss(self):
        learn = self.learn
        if learn.training and learn.rank == 1 and learn.step == self.at:
            learn.loss = learn.loss_grad = learn.loss * float('nan')


def mixed_precision_learner(path):
    from torch.distributed.fsdp import MixedPrecisionPolicy
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    return learner(path, [ShardedTrainer(mp_policy=policy)])


def test_distribute_shards_in_bf16_with_a_schedule_and_a_nan_stops_every_process_cleanly(tmp_path):
    learn = distribute(mixed_precision_learner, 2, tmp_path)  # (a notebook's call: process 0 is this one)
    try:
        learn.fit_one_cycle(1, 1e-2)
        lrs = [v for v, _ in learn.storage.history('lr').values()]
        assert len(lrs) == 8 and max(lrs) > 5 * lrs[0] and lrs[-1] < max(lrs) / 100  # warm-up, then annealing
        def kinds(l):  # (a forward computes in bf16, from the fp32 shards)
            trainers = [type(cb).__name__ for cb in l.cbs if 'Trainer' in type(cb).__name__]
            weight = l.raw_model[1].weight
            return l.step, type(weight).__name__, weight.dtype, l.raw_model(torch.zeros(2, 65)).dtype, trainers
        assert learn.workers.each(kinds) == [(8, 'DTensor', torch.float32, torch.bfloat16, ['ShardedTrainer'])] * 2
        learn.fit(1, cbs=[NanInProcess1(12)])
        ends = learn.workers.each(lambda l: (l.stop_reason, l.step,
                                             all(bool(torch.isfinite(p.full_tensor()).all()) for p in l.raw_model.parameters())))
        assert ends == [('nonfinite', 12, True)] * 2  # neither process made the step of the NaN
    finally: learn.close()


def test_a_background_sharded_save_holds_the_step_of_the_call(tmp_path):
    def run():
        learn = learner(tmp_path, [ShardedTrainer()])
        learn.fit(n_steps=3)
        before = full_state(learn)
        learn.save('bg', background=True)
        with torch.no_grad():  # the loop goes on: the weights change at once
            for p in learn.raw_model.parameters(): p.to_local().add_(100.)
        waited = wait_for_save(learn)
        names = sorted(k for k in learn.storage.histories() if k.startswith('ckpt/'))
        return before, names, learn.storage.history('ckpt/wait_s').latest(), waited

    before, names, wait_s, _ = launch(run, 2)
    assert names == ['ckpt/wait_s', 'ckpt/write_s'] and 0 <= wait_s < 5
    plain = learner(tmp_path).load('bg')
    assert_same(full_state(plain), before)


KILLED_WRITER = """
import os, sys, threading, time, torch
from torch import nn
from trainer_nb.learner import Learner
from trainer_nb.testing import synth_dls
real_fsync = os.fsync
def held_fsync(fd):  # the background writer's file is complete on disk but not yet renamed: hold it there
    if threading.current_thread() is not threading.main_thread():
        print('writing\\n', end='', flush=True)  # (one write: print's line and its end are two, which threads interleave)
        time.sleep(60)
    return real_fsync(fd)
os.fsync = held_fsync
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(1, 1), *[nn.Linear(256, 256, bias=False) for _ in range(4)])
learn = Learner(model, synth_dls(), nn.functional.mse_loss, path=sys.argv[1], device='cpu', progress=False,
                default_cbs=False)
learn.save('last')  # complete
print('saved', flush=True)
learn.save('last', background=True)  # written by a thread...
with torch.no_grad(): model[0].weight.add_(1.)  # (...and what changes after the call does not reach it)
print('started\\n', end='', flush=True)
time.sleep(60)
"""


def test_kill_9_during_a_background_save_leaves_the_previous_checkpoint(tmp_path):
    "The writer thread is held after writing its temp file, before the rename (its fsync waits): then a kill -9."
    script = tmp_path / 'writer.py'
    script.write_text(KILLED_WRITER)
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, 'PYTHONPATH': str(Path(__file__).parent.parent)})
    try:
        assert proc.stdout.readline().strip() == 'saved'
        lines = {proc.stdout.readline().strip(), proc.stdout.readline().strip()}
        assert lines == {'started', 'writing'}, lines
        temps = list((tmp_path / 'checkpoints').glob('.last.pt.tmp-*'))
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill(); proc.wait()
    assert temps  # (the kill came while the background write was under way)
    saved = load_checkpoint(tmp_path / 'checkpoints' / 'last.pt')  # the previous checkpoint, complete
    torch.manual_seed(0)
    first = nn.Linear(1, 1)
    assert torch.equal(saved['model']['0.weight'], first.weight.detach())


def test_torchrun_runs_a_sharded_script(tmp_path):
    script = tmp_path / 'sharded_digits.py'
    script.write_text(textwrap.dedent("""
        import sys, torch
        from torch import nn
        from trainer_nb.demo import digits_dls, digits_model
        from trainer_nb.learner import Learner
        from trainer_nb.sharded import ShardedTrainer
        torch.manual_seed(0)
        learn = Learner(digits_model(), digits_dls(bs=32), nn.functional.cross_entropy, lr=1e-2, path=sys.argv[1],
                        device='cpu', progress=False, cbs=[ShardedTrainer()])
        learn.fit(1)
        print(f"rank {learn.rank} of {learn.comm.world_size}: step {learn.step}, {type(learn.raw_model[0].weight).__name__}")
        """))
    env = {**os.environ, 'PYTHONPATH': str(Path(__file__).parent.parent), 'OMP_NUM_THREADS': '1'}
    proc = subprocess.run([sys.executable, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2',
                           str(script), str(tmp_path / 'run')], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert 'rank 0 of 2: step 23, DTensor' in proc.stdout and 'rank 1 of 2: step 23, DTensor' in proc.stdout



def test_a_data_parallel_checkpoint_continues_sharded_with_its_optimizer_state(tmp_path):
    "A `.pt` of DistributedTrainer loaded before a sharded fit: the optimizer, made again over the shards, keeps it."
    def run(kind):
        learn = learner(tmp_path, [ShardedTrainer() if kind == 'fsdp' else DistributedTrainer()])
        if kind == 'first':
            learn.fit(n_steps=3)
            learn.save('ddp')
            return None
        learn.load('ddp')
        learn.fit(n_steps=2)
        return full_state(learn)

    launch(run, 2, 'first')
    sharded, reference = launch(run, 2, 'fsdp'), launch(run, 2, 'ddp')
    assert sharded.keys() == reference.keys()
    assert reference['1.weight.step'] == 5  # (the moments of the first 3 steps went on)
    for k, v in reference.items(): assert torch.allclose(sharded[k], v, rtol=1e-5, atol=1e-7), k
