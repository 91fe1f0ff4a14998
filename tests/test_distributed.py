"""Data-parallel training on torch.distributed: 2 processes with gloo on the CPU (process 0 is this test's own
process, process 1 is forked by `launch`)."""
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, Subset

from trainer_nb.callback.core import Callback, CancelBackwardException, CancelBatchException
from trainer_nb.callback.training import GradientAccumulation
from trainer_nb.callback.checkpoint import CheckpointCallback
from trainer_nb.demo import digits_datasets, digits_model
from trainer_nb.distributed import DistributedTrainer, TorchDistributed, launch
from trainer_nb.parts import nan_guard_for
from trainer_nb.learner import Learner
from trainer_nb.metrics import accuracy

from indexed_digits import DropIndex, Indexed, SeenSamples

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason='torch.distributed is not available')


def digits_learner(path, bs, cbs=(), n=None, progress=False):
    torch.manual_seed(0)
    train, valid = digits_datasets()
    if n is not None: train = Subset(train, range(n))
    return Learner(digits_model(), (DataLoader(train, batch_size=bs, shuffle=True), DataLoader(valid, batch_size=100)),
                   nn.functional.cross_entropy, lr=1e-2, metrics=[accuracy], path=path, device='cpu',
                   progress=progress, cbs=list(cbs))


def losses(learn): return torch.tensor([v for v, _ in learn.storage.history('train/loss').values()])


def test_two_processes_match_one_with_the_same_global_batch(tmp_path):
    one = digits_learner(tmp_path / 'one', bs=64)
    one.fit(5)

    def two_procs():
        learn = digits_learner(tmp_path / 'two', bs=32, cbs=[DistributedTrainer()])
        learn.fit(5)
        return learn

    two = launch(two_procs, 2)
    assert two.comm.world_size == 2 and two.step == one.step == 5 * 23
    assert two.fit_state.samples == one.fit_state.samples == 5 * 1438
    l1, l2 = losses(one), losses(two)
    print(f"max |loss difference| 1 vs 2 processes over {len(l1)} steps: {(l1 - l2).abs().max():.2e}")
    assert torch.allclose(l1, l2, rtol=1e-4, atol=1e-5)
    acc1, acc2 = one.valid_results['accuracy'], two.valid_results['accuracy']
    assert acc1 >= 0.95 and abs(acc1 - acc2) < 0.005
    # validation covered the whole set once: the same loss as one process computes
    assert abs(two.valid_results['loss'] - one.valid_results['loss']) < 1e-4


@pytest.mark.parametrize('n, steps, last', [(1437, 23, [15, 14]), (1409, 22, [33, 32])])
def test_an_epoch_that_does_not_divide_among_the_processes_sees_each_sample_once(tmp_path, n, steps, last):
    # 2 processes of 32: 1437 = 22 x 64 + 29, a last step of 15 and 14; 1409 = 22 x 64 + 1, too few for one each, so
    # the step before takes it: 33 and 32. torch's DistributedSampler would repeat samples to make the steps whole.
    def two_procs():
        seen = SeenSamples()
        model, train = nn.Sequential(DropIndex(), digits_model()), DataLoader(Indexed(n), batch_size=32, shuffle=True)
        learn = Learner(model, train, nn.functional.cross_entropy, path=tmp_path, device='cpu', progress=False,
                        cbs=[DistributedTrainer(), seen])
        learn.fit(2)
        (tmp_path / f'seen{learn.rank}.txt').write_text(' '.join(map(str, seen.seen)))
        return learn.step, learn.fit_state.samples

    assert launch(two_procs, 2) == (2 * steps, 2 * n)
    seen = [list(map(int, (tmp_path / f'seen{r}.txt').read_text().split())) for r in (0, 1)]
    for epoch in (0, 1):
        shares = [s[epoch * len(s) // 2:(epoch + 1) * len(s) // 2] for s in seen]
        assert sorted(shares[0] + shares[1]) == list(range(n))  # each sample once in each epoch
    assert [len(s) // 2 - (steps - 1) * 32 for s in seen] == last


def test_accumulation_with_no_sync_matches_one_process(tmp_path):
    n = 22 * 64
    one = digits_learner(tmp_path / 'one', bs=64, n=n)
    one.fit(2)

    def two_procs():
        learn = digits_learner(tmp_path / 'two', bs=16, n=n, cbs=[DistributedTrainer(), GradientAccumulation(2)])
        learn.fit(2)
        return learn

    two = launch(two_procs, 2)
    assert two.step == one.step == 44
    assert torch.allclose(losses(one), losses(two), rtol=1e-4, atol=1e-5)


def test_only_process_0_writes_files(tmp_path):
    def train():
        rank = int(os.environ['RANK'])
        learn = digits_learner(tmp_path / f'rank{rank}', bs=32, cbs=[DistributedTrainer(), CheckpointCallback()])
        learn.fit(2)
        learn.save('final')

    launch(train, 2)
    assert (tmp_path / 'rank0' / 'metrics.json').exists()
    assert sorted(p.name for p in (tmp_path / 'rank0' / 'checkpoints').iterdir()) == \
        ['final.pt', 'last.pt', 'step_0000023.pt', 'step_0000046.pt']
    assert not (tmp_path / 'rank1').exists()


def test_an_interrupt_in_one_process_stops_both_at_the_same_step_and_resume_continues(tmp_path):
    class InterruptRank1(Callback):
        def after_step(self):
            if self.learn.rank == 1 and self.learn.step == 7: os.kill(os.getpid(), signal.SIGINT)

    def train(interrupt):
        learn = digits_learner(tmp_path, bs=32, cbs=[DistributedTrainer()])
        learn.fit(2, cbs=[InterruptRank1()] if interrupt else [])
        stopped = (learn.stop_reason, learn.step)
        (tmp_path / f"stop{learn.rank}.txt").write_text(repr(stopped))
        if interrupt: learn.resume()
        return stopped, learn

    (stopped, resumed) = launch(train, 2, True)
    assert stopped == ('interrupted', 7)
    assert (tmp_path / 'stop1.txt').read_text() == repr(('interrupted', 7))  # process 1 stopped at the same step
    _, reference = launch(train, 2, False)
    assert resumed.stop_reason == 'completed' and resumed.step == reference.step == 46
    for a, b in zip(resumed.model.parameters(), reference.model.parameters()): assert torch.equal(a, b)


def test_the_processes_agree_on_one_message_and_fail_clearly_when_out_of_step(tmp_path):
    "`comm.agree`: each field of the `BatchMessage`s agreed over both processes; processes at different points fail."
    from trainer_nb.core import BatchMessage

    def run():
        learn = digits_learner(tmp_path, bs=32)
        learn.set_comm(TorchDistributed())
        rank = learn.rank
        said = [BatchMessage('backward', nonfinite=rank == 1),
                BatchMessage('backward', out_of_memory=rank == 0),
                BatchMessage('boundary', stop='cancelled' if rank == 0 else 'interrupted',
                             requests=[('save', 'now')] if rank == 0 else []),
                BatchMessage('boundary')]
        agreed = [learn.comm.agree(m) for m in said]
        try: learn.comm.agree(BatchMessage('backward' if rank == 0 else 'boundary'))  # (out of step)
        except RuntimeError as e: error = str(e)
        else: error = None
        (tmp_path / f'agreed{rank}.txt').write_text(f'{agreed!r}\n{error}')
        return agreed, error, learn.comm.step_times

    agreed, error, step_times = launch(run, 2, timeout=30)
    assert agreed == [BatchMessage('backward', nonfinite=True), BatchMessage('backward', out_of_memory=True),
                      BatchMessage('boundary', stop='interrupted', requests=[('save', 'now')]), BatchMessage('boundary')]
    assert 'the processes are out of step: this one is at the backward meeting' in error
    assert step_times is not None and {step_times[1], step_times[3]} <= {0, 1}  # (the slowest and fastest process)
    agreed1, error1 = (tmp_path / 'agreed1.txt').read_text().split('\n', 1)
    assert agreed1 == repr(agreed) and 'this one is at the boundary meeting' in error1


def test_a_batch_cancelled_in_one_process_only_fails_clearly_in_both(tmp_path):
    "Process 1 cancels a batch that process 0 trains: they meet at different points, and both say so (no hang, no mix)."
    class CancelInProcess1(Callback):
        def before_batch(self):
            if self.learn.training and self.learn.rank == 1 and self.learn.step == 3: raise CancelBatchException

    def train():
        learn = digits_learner(tmp_path, bs=32, cbs=[DistributedTrainer(timeout=30), CancelInProcess1()])
        try: learn.fit(1)
        except RuntimeError as e: error = str(e)
        else: error = None
        (tmp_path / f'error{learn.rank}.json').write_text(json.dumps([error, learn.step]))
        return error, learn.step

    error, step = launch(train, 2, timeout=30)
    assert 'the processes are out of step: this one is at the backward meeting' in error and step == 3
    error1, step1 = json.loads((tmp_path / 'error1.json').read_text())
    assert 'this one is at the boundary meeting' in error1 and step1 == 3


def test_a_stop_asked_for_in_one_process_during_a_requested_validation_stops_all_together(tmp_path):
    "Process 0 asks for a stop while a validation requested with the controls runs: both processes stop together."
    class ValidateAt4(Callback):
        def after_batch(self):
            if self.learn.training and self.learn.step == 4 and not getattr(self, 'done', False):
                self.done = True
                self.learn.controls.validate()

    class StopInValidation(Callback):  # in process 0 only, as a callback that reacts to what it sees may
        def before_batch(self):
            if not self.learn.training and self.learn.rank == 0 and self.learn.step == 4: self.learn.request_stop()

    def train():
        learn = digits_learner(tmp_path, bs=32, cbs=[DistributedTrainer(), ValidateAt4(), StopInValidation()])
        learn.fit(1)
        (tmp_path / f"stop{learn.rank}.txt").write_text(repr((learn.stop_reason, learn.step)))
        return learn.stop_reason, learn.step

    assert launch(train, 2, timeout=30) == ('interrupted', 4)  # (before: process 0 stopped alone, 1 waited 30 s)
    assert (tmp_path / 'stop1.txt').read_text() == repr(('interrupted', 4))


def test_a_fit_cancelled_after_the_step_in_one_process_stops_all_at_that_boundary(tmp_path):
    "Process 1's callback raises CancelFitException in after_step at step 3: every process stops there, with its note."
    from trainer_nb.callback.core import CancelFitException

    class CancelInProcess1(Callback):
        def after_step(self):
            if self.learn.rank == 1 and self.learn.step == 3: raise CancelFitException('process 1 had enough')

    def train():
        learn = digits_learner(tmp_path, bs=32, cbs=[DistributedTrainer(), CancelInProcess1()])
        learn.fit(1)
        end = (learn.stop_reason, learn.step, learn.fit_state.resumable, learn.fit_state.stop_note)
        (tmp_path / f"end{learn.rank}.txt").write_text(repr(end[:3]))
        return end

    # (before: process 1 left the loop alone, and process 0 waited at the next collective until its timeout)
    assert launch(train, 2, timeout=30)[:3] == ('cancelled', 3, True)
    assert (tmp_path / 'end1.txt').read_text() == repr(('cancelled', 3, True))


def test_a_nan_loss_in_one_process_stops_all_cleanly(tmp_path):
    "Process 1's loss turns NaN at step 3: no process makes that step, and all stop with stop_reason='nonfinite'."
    class NanInProcess1(Callback):
        order = -5
        def after_loss(self):
            learn = self.learn
            if learn.training and learn.rank == 1 and learn.step == 3: learn.loss = learn.loss_grad = learn.loss * float('nan')

    def train():
        learn = digits_learner(tmp_path, bs=32, cbs=[DistributedTrainer(), NanInProcess1()])
        learn.fit(1)
        weights_finite = all(bool(torch.isfinite(p).all()) for p in learn.model.parameters())
        (tmp_path / f"end{learn.rank}.txt").write_text(repr((learn.stop_reason, learn.step, weights_finite)))
        return learn.stop_reason, learn.step, weights_finite

    # (before: process 1 skipped its backward, process 0 did not, and gloo aborted both: a collective mismatch)
    assert launch(train, 2, timeout=30) == ('nonfinite', 3, True)
    assert (tmp_path / 'end1.txt').read_text() == repr(('nonfinite', 3, True))
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.1)
    with pytest.raises(ValueError, match="nan_guard='deferred' works in one process"):
        nan_guard_for('deferred', opt, torch.device('cpu'), world_size=2)


def test_a_cancelled_backward_after_an_accumulation_keeps_the_processes_in_step(tmp_path):
    "The backward of a batch that ends an accumulation is cancelled: the gradients before it are still exchanged."
    class SkipBackward(Callback):
        def before_backward(self):
            if self.learn.fit_state.batches in (4, 10): raise CancelBackwardException  # each ends a group of 2

    def train():
        learn = digits_learner(tmp_path, bs=32, cbs=[DistributedTrainer(), GradientAccumulation(2), SkipBackward()])
        learn.fit(1)
        torch.save({k: v.clone() for k, v in learn.model.state_dict().items()}, tmp_path / f"w{learn.rank}.pt")
        return learn.step

    assert launch(train, 2) == 12
    w0, w1 = (torch.load(tmp_path / f"w{r}.pt", weights_only=True) for r in (0, 1))
    assert all(torch.equal(w0[k], w1[k]) for k in w0)  # (before: each process stepped with its own gradients there)


def test_a_stop_in_the_middle_of_an_accumulation_waits_for_its_step_and_resumes_from_disk(tmp_path):
    "Process 1 asks for a stop after the 1st batch of a group of 3: all stop after the 3rd, and resume from disk."
    class StopInProcess1(Callback):
        def after_batch(self):
            learn = self.learn
            if learn.training and learn.rank == 1 and learn.fit_state.batches == 4 and learn.step == 1:
                learn.request_stop()

    def train(stop):
        learn = digits_learner(tmp_path / str(stop), bs=32, cbs=[DistributedTrainer(), GradientAccumulation(3)] +
                               ([StopInProcess1()] if stop else []))
        learn.fit(1)
        stopped = (learn.stop_reason, learn.fit_state.batches, learn.fit_state.batches_since_step)
        if stop:
            torch.distributed.barrier()  # (process 0 has written last.pt)
            learn = digits_learner(tmp_path / str(stop), bs=32, cbs=[DistributedTrainer(), GradientAccumulation(3)])
            learn.load('last')
            learn.resume()
        return stopped, {k: v.clone() for k, v in learn.model.state_dict().items()}

    (stopped, resumed), (_, reference) = launch(train, 2, True), launch(train, 2, False)
    assert stopped == ('interrupted', 6, 0)  # at the end of the group of batches 4-6, not after batch 4
    assert all(torch.equal(resumed[k], reference[k]) for k in reference)  # (before: process 1 resumed with 0's gradients)


def test_a_stop_after_a_cancelled_backward_that_ends_an_accumulation_resumes_exactly(tmp_path):
    "DDP waits for the backward of each synced forward: after a cancelled one, a resumed fit ends as one not stopped."
    class SkipBackward(Callback):
        def before_backward(self):
            if self.learn.fit_state.batches == 23: raise CancelBackwardException  # the epoch's last, a group of its own

    class StopAfter23(Callback):
        def after_batch(self):
            if self.learn.training and self.learn.fit_state.batches == 23 and not getattr(self, 'done', False):
                self.done = True
                self.learn.request_stop()

    def train(stop):
        cbs = [DistributedTrainer(), GradientAccumulation(2), SkipBackward()] + ([StopAfter23()] if stop else [])
        learn = digits_learner(tmp_path / str(stop), bs=32, cbs=cbs)
        learn.fit(2)
        if stop: learn.resume()
        return {k: v.clone() for k, v in learn.model.state_dict().items()}

    resumed, reference = launch(train, 2, True), launch(train, 2, False)
    assert all(torch.equal(resumed[k], reference[k]) for k in reference)  # (before: 1 ulp off, as the wrapper was new)


class Recording(Dataset):
    "A dataset that notes, in a file per process, which items it loaded."
    def __init__(self, ds, folder): self.ds, self.folder = ds, Path(folder)
    def __len__(self): return len(self.ds)
    def __getitem__(self, i):
        with open(self.folder / f"loaded_{os.getpid()}.txt", 'a') as f: f.write(f"{i}\n")
        return self.ds[i]


def test_a_two_process_checkpoint_resumes_in_one_process(tmp_path):
    (tmp_path / 'two').mkdir(); (tmp_path / 'one').mkdir()

    def make(folder, cbs):
        torch.manual_seed(0)
        train, valid = digits_datasets()
        return Learner(digits_model(), (DataLoader(Recording(train, folder), batch_size=32, shuffle=True),
                                        DataLoader(valid, batch_size=100)),
                       nn.functional.cross_entropy, lr=1e-2, path=tmp_path, device='cpu', progress=False, cbs=cbs)

    class StopAt(Callback):
        def after_step(self):
            if self.learn.step == 30: self.learn.request_stop()

    def two_procs():
        learn = make(tmp_path / 'two', [DistributedTrainer(), CheckpointCallback(every_epochs=10)])
        learn.fit(2, cbs=[StopAt()])
        return learn.fit_state.epoch_offset

    offset = launch(two_procs, 2)
    assert offset == 7 * 64  # step 30 = 23 steps of epoch 0 + 7 of epoch 1, 64 samples each
    one = make(tmp_path / 'one', [])  # (without the CheckpointCallback of the two processes: load says so)
    with pytest.warns(UserWarning, match=r"state of callbacks \['checkpoint'\], which this learner does not have"):
        one.load('last')
    assert (one.fit_state.world_size, one.fit_state.epoch, one.fit_state.epoch_offset) == (2, 1, 448)
    with pytest.warns(UserWarning, match=r"given callbacks \['stop_at'\]"):
        one.resume()  # (StopAt is not passed again: the warning says so, and the fit goes on without it)
    assert one.stop_reason == 'completed' and one.fit_state.samples == 1438 + 1438
    # epoch 1: 448 samples in two processes (the last 224 each loaded), the other 990 in one; each exactly once
    per_process = [f.read_text().split() for f in (tmp_path / 'two').iterdir()]
    assert sorted(len(p) for p in per_process) == [719 + 224, 719 + 224]
    epoch1_two = [int(i) for p in per_process for i in p[-224:]]
    loaded_one = [int(i) for f in (tmp_path / 'one').iterdir() for i in f.read_text().split()]
    assert len(loaded_one) == 1438 - 448
    assert sorted(epoch1_two + loaded_one) == list(range(1438))


def test_a_failing_process_makes_the_others_fail_clearly(tmp_path):
    def train():
        learn = digits_learner(tmp_path, bs=32, cbs=[DistributedTrainer(timeout=20)])
        class Boom(Callback):
            def after_step(self):
                if self.learn.rank == 1 and self.learn.step == 3: raise ValueError('process 1 fails at step 3')
        learn.fit(2, cbs=[Boom()])

    with pytest.raises(RuntimeError, match=r'Process 1 of the distributed run failed(.|\n)*process 1 fails at step 3'):
        launch(train, 2, timeout=20)


@pytest.mark.slow
def test_torchrun_runs_an_unchanged_script(tmp_path):
    script = Path(__file__).parent / 'ddp_digits.py'
    env = dict(os.environ, OMP_NUM_THREADS='1')
    proc = subprocess.run([sys.executable, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2',
                           str(script), str(tmp_path)], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert 'world 2' in proc.stdout and (tmp_path / 'metrics.json').exists()
    single = subprocess.run([sys.executable, str(script), str(tmp_path / 'single')], capture_output=True, text=True,
                            timeout=300)
    assert single.returncode == 0 and 'world 1' in single.stdout
