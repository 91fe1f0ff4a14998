"""Out of memory, injected as CUDA's allocator raises it (`torch.OutOfMemoryError`), on the CPU; and the CPU
allocator's own failure (a plain RuntimeError), asked for with a petabyte.

An out-of-memory error in a training batch before its optimizer step (the forward pass, the loss, the backward pass)
or in a validation of the fit stops the fit before that batch: `stop_reason == 'out_of_memory'`, `last.pt` written,
nothing of the batch reachable, and `learn.resume()` (in the process, or from `last.pt` in a new learner) ends with
the weights of the same fit never stopped, bit for bit. `MicroBatches('auto')` retries the batch in parts instead.
"""
import gc
import sys
import weakref
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from trainer_nb.callback.core import Callback
from trainer_nb.callback.micro import MicroBatches
from trainer_nb.learner import Learner
from trainer_nb.metrics import accuracy
from trainer_nb.testing import weights

from kernel_helpers import Kernel

N_EPOCHS, BS = 3, 16


class Fault:
    "Raise torch.OutOfMemoryError once, at the `n`-th training (or validation) call of `where`."
    def __init__(self, where: str | None = None, n: int = 0):
        self.where, self.n, self.calls, self.outputs = where, n, {}, []

    def hit(self, where: str, out=None):
        if where != self.where: return
        self.calls[where] = self.calls.get(where, 0) + 1
        if self.calls[where] == self.n:
            if out is not None: self.outputs.append(weakref.ref(out))  # (the failed batch's output: must be freed)
            raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate 2.00 GiB ({where}).")


class FailingBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, fault): ctx.fault = fault; return x.clone()
    @staticmethod
    def backward(ctx, g):
        ctx.fault.hit('backward')
        return g, None


class Net(nn.Module):
    "A classifier with dropout and batch norm, whose forward or backward may run out of memory (see `Fault`)."
    def __init__(self, fault: Fault, plain: bool = False):  # plain: no batch norm, no dropout (parts = whole)
        super().__init__()
        self.fault = fault
        self.body = (nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 3)) if plain else
                     nn.Sequential(nn.Linear(8, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 3)))

    def forward(self, x):
        out = self.body(x)
        if self.training:
            self.fault.hit('forward', out)
            out = FailingBackward.apply(out, self.fault)
        else: self.fault.hit('valid', out)
        return out


class TorchNoise(Callback):
    "Input noise drawn from torch's generator in before_batch (a retried batch must draw the same)."
    run_valid = False
    def before_batch(self): self.learn.xb = (self.learn.xb[0] + 0.01 * torch.randn_like(self.learn.xb[0]),)


def make_learner(path, fault=None, cbs=(), plain=False, opt_func=torch.optim.AdamW):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(123)
    x = torch.randn(192 + 64, 8, generator=g)
    y = (x[:, 0] + x[:, 1] > 0).long() + (x[:, 2] > 0.5).long()
    train, valid = TensorDataset(x[:192], y[:192]), TensorDataset(x[192:], y[192:])
    fault = fault or Fault()
    def loss(out, target):
        fault.hit('loss')
        return nn.functional.cross_entropy(out, target)
    return Learner(Net(fault, plain), (DataLoader(train, batch_size=BS, shuffle=True), DataLoader(valid, batch_size=BS)),
                   loss, metrics=[accuracy], lr=1e-2, path=path, cbs=[TorchNoise(), *cbs], progress=False,
                   opt_func=opt_func)


@pytest.fixture(scope='module')
def reference(tmp_path_factory):
    learn = make_learner(tmp_path_factory.mktemp('ref'))
    learn.fit_one_cycle(N_EPOCHS, 1e-2)
    return weights(learn.model)


@pytest.mark.parametrize('where,n', [('forward', 5), ('loss', 13), ('backward', 20), ('valid', 6)])
def test_stop_then_resume_is_exact(tmp_path, reference, capsys, where, n):
    fault = Fault(where, n)
    learn = make_learner(tmp_path, fault)
    learn.fit_one_cycle(N_EPOCHS, 1e-2)
    out = capsys.readouterr().out
    assert learn.stop_reason == 'out_of_memory' and learn.fit_state.resumable, learn.fit_state
    in_validation = 'validation batch' in out  # (the 13th loss is a validation batch's)
    fix = ('learn.dls.valid = DataLoader(valid_ds, batch_size=8)' if in_validation  # (MicroBatches splits training only)
           else 'learn.resume(cbs=[MicroBatches(2)])')
    assert 'Out of memory in' in out and fix in out, out
    assert (tmp_path / 'checkpoints' / 'last.pt').is_file()
    assert (learn.loss, learn.loss_grad, learn.loss_parts, learn.pred) == (None, None, None, None)
    assert all(p.grad is None for p in learn.model.parameters())
    if where == 'forward':  # the failed batch's output: freed, with nothing cleared by the test
        gc.collect()
        assert fault.outputs and fault.outputs[0]() is None
    again = make_learner(tmp_path)  # after a restart here: a new learner, the stop's checkpoint, resume
    again.load('last')
    again.resume()
    assert weights(again.model) == reference

    if in_validation:  # what the message says to do: smaller validation batches (a plain loader), then resume
        learn.dls.valid = DataLoader(learn.dls.valid.dataset, batch_size=BS // 2)
    learn.resume()  # (in this process, without a restart)
    assert learn.stop_reason == 'completed'
    assert weights(learn.model) == reference


def test_the_stop_is_where_the_batch_starts(tmp_path):
    learn = make_learner(tmp_path, Fault('backward', 4))
    learn.fit_one_cycle(N_EPOCHS, 1e-2)
    state = learn.fit_state
    assert (state.step, state.epoch_iter, state.batches, state.samples) == (3, 3, 3, 3 * BS)
    assert 'the next batch ran out of memory' in __import__('trainer_nb.state', fromlist=['x']).fit_status(learn)


def test_micro_batches_auto_equals_two_parts_from_the_start(tmp_path):
    class Limit(Callback):
        "Out of memory for a training batch of more than 8 samples (as a too large batch on a GPU)."
        def after_pred(self):
            if self.learn.training and len(self.learn.xb[0]) > 8: raise torch.OutOfMemoryError("CUDA out of memory.")
    auto = make_learner(tmp_path / 'auto', cbs=[Limit(), MicroBatches('auto')])
    auto.fit_one_cycle(N_EPOCHS, 1e-2)
    two = make_learner(tmp_path / 'two', cbs=[MicroBatches(2)])
    two.fit_one_cycle(N_EPOCHS, 1e-2)
    assert (auto.stop_reason, auto.fit_state.micro) == ('completed', 2)
    assert weights(auto.model) == weights(two.model)
    # against whole batches (a model where parts change nothing but the order of the sums: no batch norm, no dropout),
    # with SGD, whose step is linear in the gradient: Adam divides by the gradient's own size, so that an element whose
    # gradient is near 0 turns a rounding difference of the sum into a difference of the step (2.3e-5 once, in the suite)
    parts = make_learner(tmp_path / 'p', cbs=[MicroBatches(2)], plain=True, opt_func=torch.optim.SGD)
    parts.fit(n_steps=4)  # (each learner fits right after it is made: make_learner seeds torch)
    whole = make_learner(tmp_path / 'w', plain=True, opt_func=torch.optim.SGD)
    whole.fit(n_steps=4)
    for a, b in zip(parts.model.parameters(), whole.model.parameters()):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_one_sample_a_part_still_too_much_stops_with_the_message(tmp_path, capsys):
    class Never(Callback):
        def after_pred(self):
            if self.learn.training: raise torch.OutOfMemoryError("CUDA out of memory.")
    learn = make_learner(tmp_path, cbs=[Never(), MicroBatches('auto')], plain=True)  # (batch norm needs 2 samples)
    learn.fit(1)
    assert (learn.stop_reason, learn.fit_state.micro, learn.step) == ('out_of_memory', BS, 0)
    out = capsys.readouterr().out
    assert f'in {BS} parts' in out and 'each part is one sample already, so more parts cannot help' in out
    assert f'MicroBatches({2 * BS})' not in out  # (more parts than samples: not a fix)


def test_resume_with_micro_batches_after_a_stop(tmp_path, reference):
    "The fix the message names: learn.resume(cbs=[MicroBatches(2)]) goes on in parts (the same fit to float tolerance)."
    learn = make_learner(tmp_path, Fault('forward', 5))
    learn.fit_one_cycle(N_EPOCHS, 1e-2)
    assert make_learner(tmp_path).load('last').fit_state.micro == 1  # (last.pt was saved at the stop, before the parts)
    learn.resume(cbs=[MicroBatches(2)])
    assert learn.stop_reason == 'completed' and learn.fit_state.micro == 2
    again = make_learner(tmp_path).load('last')  # (saved again at the end: the finished fit, in parts)
    assert (again.stop_reason, again.fit_state.micro) == ('completed', 2)


def test_out_of_memory_in_the_step_stays_an_error(tmp_path):
    class StepFails(Callback):
        def before_step(self):
            if self.learn.step == 2: raise torch.OutOfMemoryError("CUDA out of memory (optimizer state).")
    learn = make_learner(tmp_path, cbs=[StepFails()])
    with pytest.raises(torch.OutOfMemoryError) as e:
        learn.fit(1)
    assert learn.stop_reason == 'error' and not learn.fit_state.resumable
    assert any('the fit cannot undo the batch: in the optimizer step' in n for n in e.value.__notes__)


def test_validate_outside_a_fit_names_the_batch_size(tmp_path):
    learn = make_learner(tmp_path, Fault('valid', 2))
    with pytest.raises(torch.OutOfMemoryError, match=r'valid batch 2 \(16 samples\).*batch_size=8'):
        learn.validate()
    assert (learn.xb, learn.pred, learn.loss, learn.valid_tally) == (None, None, None, None)
    assert learn.validate()['accuracy'] > 0  # (nothing left in the way)


@pytest.mark.slow
def test_in_a_kernel_the_stop_leaves_no_traceback(tmp_path):
    with Kernel(tmp_path) as k:
        k.run(f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
              "from test_out_of_memory import make_learner, Fault\n"
              f"learn = make_learner({str(tmp_path)!r}, Fault('backward', 7))")
        status, out = k.execute("learn.fit(2)")
        assert status == 'ok' and 'Out of memory in' in out and 'Traceback' not in out, out
        out, _ = k.run("import sys, gc; gc.collect()\n"
                       "print(learn.stop_reason, hasattr(sys, 'last_traceback'), hasattr(sys, 'last_exc'),\n"
                       "      learn.model.fault.outputs == [], getattr(get_ipython().InteractiveTB, 'tb', None) is None)")
        assert out.split() == ['out_of_memory', 'False', 'False', 'True', 'True'], out
        out, _ = k.run("learn.resume(); print(learn.stop_reason)")
        assert out.split()[-1] == 'completed', out


class RankFault(Callback):
    "Out of memory in the forward pass of training batch `n` (counting retries), in process `rank` only."
    def __init__(self, rank: int, n: int): self.rank, self.n, self.calls = rank, n, 0
    def after_pred(self):
        if not self.learn.training or torch.distributed.get_rank() != self.rank: return
        self.calls += 1
        if self.calls == self.n and len(self.learn.xb[0]) > 4: raise torch.OutOfMemoryError("CUDA out of memory.")


@pytest.mark.slow
@pytest.mark.parametrize('auto', [True, False])
def test_two_processes_an_out_of_memory_in_one_both_retry_or_both_stop(tmp_path, auto):
    from trainer_nb.distributed import DistributedTrainer, launch

    def run():
        cbs = [RankFault(1, 5), DistributedTrainer(timeout=60)] + ([MicroBatches('auto')] if auto else [])
        learn = make_learner(tmp_path / 'run', cbs=cbs, plain=True)
        learn.fit(2)
        rank = torch.distributed.get_rank()
        got = torch.tensor([learn.step, learn.fit_state.micro, learn.fit_state.samples], dtype=torch.float64)
        every = [torch.zeros_like(got) for _ in range(2)]
        torch.distributed.all_gather(every, got)  # (each process's position, to compare)
        w = torch.cat([p.detach().flatten() for p in learn.model.parameters()]).double()
        ws = [torch.zeros_like(w) for _ in range(2)]
        torch.distributed.all_gather(ws, w)
        return learn.stop_reason, [e.tolist() for e in every], bool(torch.equal(ws[0], ws[1])), rank

    reason, positions, same_weights, rank = launch(run, 2, timeout=60)
    assert rank == 0 and same_weights
    assert positions[0] == positions[1], positions  # both at the same step, with the same parts
    if auto: assert reason == 'completed' and positions[0][1] == 2
    else: assert reason == 'out_of_memory' and positions[0][0] == 4 and positions[0][1] == 1


class PetabyteAbove(nn.Module):
    "A regression whose training forward asks the CPU's allocator for a petabyte above `limit` samples: a real failure."
    def __init__(self, limit: int = 8):
        super().__init__()
        self.lin, self.limit = nn.Linear(4, 1), limit
    def forward(self, x):
        if self.training and len(x) > self.limit: torch.empty(2**50, dtype=torch.uint8)  # (refused at once)
        return self.lin(x)


def test_the_cpu_allocators_failure_is_an_out_of_memory_stop(tmp_path, capsys):
    "torch's CPU allocator raises a plain RuntimeError, not torch.OutOfMemoryError: the fit stops the same way."
    g = torch.Generator().manual_seed(0)
    ds = TensorDataset(torch.randn(64, 4, generator=g), torch.randn(64, 1, generator=g))
    def make(path):
        torch.manual_seed(0)
        return Learner(PetabyteAbove(), DataLoader(ds, batch_size=BS), nn.functional.mse_loss, default_cbs=False,
                       path=path)
    learn = make(tmp_path / 'run')
    learn.fit(1)
    said = capsys.readouterr().out
    assert (learn.stop_reason, learn.fit_state.resumable, learn.step) == ('out_of_memory', True, 0)
    assert "DefaultCPUAllocator: can't allocate memory" in said and 'PYTORCH_CUDA_ALLOC_CONF' not in said, said
    learn.resume(cbs=[MicroBatches(2)])  # (what the message offers: the same batches in parts of 8)
    straight = make(tmp_path / 'straight')
    straight.fit(1, cbs=[MicroBatches(2)])
    assert (learn.stop_reason, learn.step) == ('completed', 4)
    assert all(torch.allclose(a, b) for a, b in zip(learn.model.parameters(), straight.model.parameters()))
