"""Checks on a real CUDA GPU (issue 33): an out-of-memory stop and its resume (with batch-norm statistics put back),
the deferred NaN guard, `MicroBatches('auto')` after a real OOM, `learn.to('cpu')` freeing the GPU and an exact
resume after `learn.to('cuda')`, a small LoRA checkpoint that loads on the GPU, and `learn.load` onto a CUDA learner.

All are marked `cuda` and skipped where torch sees no GPU (here, and in CI). On a GPU machine:
`python -m pytest tests/test_cuda.py -q`, or `bash bench/gpu_check.sh` (these, then the GPU benchmarks), or
`bash bench/gpu_check.sh tests` (these alone).
The out-of-memory tests fill the GPU on purpose: run them on a GPU nothing else uses.
"""
import contextlib
import gc

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from trainer_nb.callback.core import LambdaCallback
from trainer_nb.data import DataLoaders
from trainer_nb.learner import Learner
from trainer_nb.metrics import accuracy

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason='needs a CUDA GPU')]

MB = 2**20


@pytest.fixture(autouse=True)
def _clean_gpu():
    "Each test starts and ends with the memory of the ones before it given back."
    gc.collect()
    torch.cuda.empty_cache()
    yield
    gc.collect()
    torch.cuda.empty_cache()


# ---- the pieces: a model with dropout (random numbers on the GPU), shuffled data, a learner on the GPU

def mlp(hidden: int = 256) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Dropout(0.3), nn.Linear(hidden, 10))


def data(n: int = 2048, bs: int = 256) -> DataLoaders:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(n, 64, generator=g), torch.randint(0, 10, (n,), generator=g)
    return DataLoaders(DataLoader(TensorDataset(x, y), batch_size=bs, shuffle=True),
                       DataLoader(TensorDataset(x[:512], y[:512]), batch_size=bs))


def learner(path, model=None, dls=None, device='cuda', **kwargs) -> Learner:
    torch.manual_seed(0)
    return Learner(model if model is not None else mlp(), dls if dls is not None else data(),
                   nn.functional.cross_entropy, lr=1e-3, metrics=[accuracy], path=path, device=device,
                   progress=False, **kwargs)


def stop_at(step: int) -> LambdaCallback:
    "Stop the fit cleanly after its optimizer step `step`."
    return LambdaCallback(after_batch=lambda learn: learn.request_stop() if learn.training and learn.step == step
                          else None)


def cpu_weights(model: nn.Module) -> dict:
    return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}


def same_weights(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def model_bytes(model: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


class Filler:
    "Most of the GPU's free memory in one tensor that the test holds: all but `leave` bytes, so that a batch OOMs."
    def __init__(self):
        self.tensor, self.before = None, None  # (before: allocated when it filled the GPU)

    def fill(self, leave: int):
        gc.collect()
        torch.cuda.empty_cache()  # (the allocator's free blocks go back to the device, so the batch needs new ones)
        self.before = torch.cuda.memory_allocated()
        size = torch.cuda.mem_get_info()[0] - leave
        while self.tensor is None and size > 0:
            try: self.tensor = torch.empty(size, dtype=torch.uint8, device='cuda')
            except torch.OutOfMemoryError: size -= 64 * MB  # (the device's free memory is not all in one piece)
        assert self.tensor is not None, "could not fill the GPU"

    @property
    def nbytes(self) -> int: return 0 if self.tensor is None else self.tensor.numel()

    def release(self):
        self.tensor = None
        gc.collect()
        torch.cuda.empty_cache()


def fill_at(filler: Filler, step: int, leave: int) -> LambdaCallback:
    "Fill the GPU once, before the training batch that would make optimizer step `step + 1`; empty it to validate."
    def before_batch(learn):
        if learn.training and learn.step == step and filler.before is None: filler.fill(leave)
    return LambdaCallback(before_batch=before_batch, before_validate=lambda learn: filler.release())


# ---- (1) an out-of-memory error stops the fit at the batch boundary, gives its memory back, and resumes

# 512 samples x 65,536 hidden units x 4 bytes: 128 MB for each activation of a batch, more than the GPU has left
BIG_HIDDEN, BIG_BS, LEAVE = 65536, 512, 32 * MB


def oom_learner(path, batch_norm: bool = False, **kwargs) -> Learner:
    "A learner whose batches run out of memory on a full GPU; with `batch_norm`, a batch-norm layer runs before the error."
    model = mlp(BIG_HIDDEN)
    if batch_norm: model = nn.Sequential(nn.BatchNorm1d(64), *model)  # (the undo's copy: one `_foreach_copy_` a dtype)
    return learner(path, model, data(n=8 * BIG_BS, bs=BIG_BS), **kwargs)


def test_out_of_memory_stops_and_resumes(tmp_path):
    filler = Filler()
    learn = oom_learner(tmp_path)
    with contextlib.suppress(torch.OutOfMemoryError):  # (whether the stop re-raises the error or not)
        learn.fit(1, cbs=[fill_at(filler, 3, LEAVE)])
    assert filler.before is not None, "the GPU was never filled"
    assert learn.stop_reason == 'out_of_memory', learn.stop_reason
    assert learn.fit_state.resumable and learn.step == 3
    held = torch.cuda.memory_allocated() - filler.nbytes - filler.before
    assert held < 8 * MB + model_bytes(learn.model), (
        f"{held / MB:.0f} MB more allocated after the OOM stop than before its batch: the failed batch's "
        "activations are still held")
    filler.release()
    learn.resume()
    assert (learn.stop_reason, learn.step) == ('completed', 8)


@pytest.mark.parametrize('batch_norm', [False, True])
def test_out_of_memory_resume_is_exact(tmp_path, batch_norm):
    "The batch that hit the OOM is trained again at resume, as if nothing had happened; a batch-norm layer that ran before the error has its statistics put back."
    whole = oom_learner(tmp_path / 'whole', batch_norm)
    whole.fit(1)
    reference = cpu_weights(whole.model)
    del whole
    gc.collect()
    torch.cuda.empty_cache()
    filler = Filler()
    learn = oom_learner(tmp_path / 'run', batch_norm)
    at_start = {}  # (the model at the start of each training batch, statistics included)
    keep = LambdaCallback(before_batch=lambda learn: at_start.update(cpu_weights(learn.model)) if learn.training else None)
    with contextlib.suppress(torch.OutOfMemoryError):
        learn.fit(1, cbs=[keep, fill_at(filler, 3, LEAVE)])
    assert learn.stop_reason == 'out_of_memory', learn.stop_reason
    assert same_weights(cpu_weights(learn.model), at_start), "the undone batch changed the model (its statistics?)"
    filler.release()
    learn.resume()
    assert same_weights(cpu_weights(learn.model), reference), "resumed after an OOM: not the uninterrupted fit's weights"


def test_a_nan_loss_on_the_gpu_leaves_the_last_good_step(tmp_path):
    "The deferred NaN guard (the default on CUDA with the fused AdamW): no host sync, and the steps from the NaN on are skipped."
    after_3 = {}
    def poison(learn):  # the loss of the batch that would make step 4
        if learn.training and learn.step == 3: learn.loss = learn.loss_grad = learn.loss * float('nan')
    def keep(learn):
        if learn.step == 3: after_3.update(cpu_weights(learn.model))
    learn = learner(tmp_path)
    learn.fit(2, cbs=[LambdaCallback(after_loss=poison, after_step=keep)])
    assert learn.guard.deferred, "on CUDA, with the fused AdamW, the default guard should be the deferred one"
    assert learn.stop_reason == 'nonfinite', learn.stop_reason
    assert same_weights(cpu_weights(learn.model), after_3), "a step after the NaN changed the weights"
    steps = {float(s['step']) for s in learn.opt.state.values()}
    assert steps == {3.0}, steps  # (the fused step took its count back for each skipped step)
    assert learn.step <= 6, learn.step  # (the host learns of it a step or two later)


# ---- (2) MicroBatches('auto') splits a batch too large as a whole, after a real OOM, and goes on

def test_micro_batches_auto_recovers_from_oom(tmp_path):
    from trainer_nb.all import MicroBatches
    filler, sizes = Filler(), []
    learn = oom_learner(tmp_path, cbs=[MicroBatches('auto')])
    learn.model.register_forward_pre_hook(lambda module, args: sizes.append(args[0].shape[0]))
    # the whole batch needs about 4 activations of 128 MB at its peak; a quarter of it fits in what is left
    learn.fit(1, cbs=[fill_at(filler, 1, 192 * MB)])
    filler.release()
    assert filler.before is not None, "the GPU was never filled"
    assert (learn.stop_reason, learn.step) == ('completed', 8), (learn.stop_reason, learn.step)
    assert sizes[0] == BIG_BS and min(sizes[1:]) < BIG_BS, f"no batch was split after the OOM: forward sizes {sizes}"


# ---- (3) learn.to('cpu') frees the GPU; learn.to('cuda') and resume() continue exactly

@pytest.mark.parametrize('compile', [False, True])
def test_to_cpu_frees_the_gpu_and_resumes_exactly(tmp_path, compile):
    whole = learner(tmp_path / 'whole', compile=compile)
    whole.fit(2)
    reference = cpu_weights(whole.model)
    del whole
    gc.collect()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    learn = learner(tmp_path / 'run', compile=compile)
    learn.fit(2, cbs=[stop_at(5)])
    assert learn.stop_reason == 'interrupted' and learn.fit_state.resumable
    held = torch.cuda.memory_allocated() - base
    assert held >= 3 * model_bytes(learn.model)  # (the model, and AdamW's two moments)
    learn.to('cpu')
    left = torch.cuda.memory_allocated() - base
    assert left < 1 * MB, f"{left / MB:.1f} MB of the learner's {held / MB:.1f} MB still on the GPU after learn.to('cpu')"
    assert all(p.device.type == 'cpu' for p in learn.model.parameters())
    assert all(v.device.type == 'cpu' for s in learn.opt.state.values() for v in s.values() if torch.is_tensor(v))
    learn.to('cuda')
    assert learn.device.type == 'cuda' and all(p.is_cuda for p in learn.model.parameters())
    learn.resume()
    assert learn.stop_reason == 'completed'
    assert same_weights(cpu_weights(learn.model), reference), "to('cpu'), to('cuda'), resume(): not exact"


def test_to_cpu_gives_reserved_memory_back(tmp_path):
    "What the learner held is back with the device (nvidia-smi sees it), not only in torch's cache."
    learn = learner(tmp_path, mlp(65536))
    learn.fit(n_steps=4)
    gc.collect()
    torch.cuda.empty_cache()
    free_before = torch.cuda.mem_get_info()[0]
    size = 3 * model_bytes(learn.model)
    learn.to('cpu')
    assert torch.cuda.mem_get_info()[0] - free_before >= size - 8 * MB, (size, torch.cuda.mem_get_info()[0] - free_before)


# ---- (4) a LoRA fit saves only what it trains, and that checkpoint loads on the GPU

def lora_learner(path, **kwargs) -> Learner:
    peft = pytest.importorskip('peft')
    transformers = pytest.importorskip('transformers')
    from trainer_nb.testing import token_dls
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=1000, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                                     intermediate_size=1024, max_position_embeddings=64, num_labels=2)
    model = transformers.BertForSequenceClassification(config)
    model = peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules=['query', 'value'],
                                                       task_type='SEQ_CLS'))
    torch.manual_seed(0)
    return Learner(model, token_dls(n_train=256, bs=32), lr=1e-3, path=path, device='cuda', progress=False, **kwargs)


def test_lora_checkpoint_is_small_and_loads_on_the_gpu(tmp_path):
    lora = lora_learner(tmp_path / 'lora')
    lora.fit(n_steps=4)
    small = lora.save('last')
    full = lora_learner(tmp_path / 'full', full_checkpoints=True)
    full.fit(n_steps=4)
    big = full.save('last')
    assert small.stat().st_size < 0.05 * big.stat().st_size, (small.stat().st_size, big.stat().st_size)
    fresh = lora_learner(tmp_path / 'lora')
    fresh.load('last')
    assert all(p.is_cuda for p in fresh.model.parameters())
    assert same_weights(cpu_weights(fresh.model), cpu_weights(lora.model))
    fresh.fit(n_steps=2)  # (and it trains on from there)
    assert fresh.stop_reason == 'completed'


# ---- (5) learn.load onto a CUDA learner: a checkpoint of a GPU fit, and one of a CPU fit

def test_load_onto_a_cuda_learner(tmp_path):
    whole = learner(tmp_path / 'whole')
    whole.fit(2)
    reference = cpu_weights(whole.model)
    stopped = learner(tmp_path / 'run')
    stopped.fit(2, cbs=[stop_at(5)])
    stopped.save('stop')
    fresh = learner(tmp_path / 'run')
    fresh.load('stop')
    assert all(p.is_cuda for p in fresh.model.parameters())
    assert all(v.is_cuda for s in fresh.opt.state.values() for k, v in s.items() if torch.is_tensor(v) and k != 'step')
    fresh.resume(cbs=[stop_at(10**9)])  # (the fit's own callback again, which no longer stops it)
    assert fresh.stop_reason == 'completed'
    assert same_weights(cpu_weights(fresh.model), reference), "resumed from a checkpoint on the GPU: not exact"
    on_cpu = learner(tmp_path / 'cpu', device='cpu')
    on_cpu.fit(n_steps=3)
    on_cpu.save('last')
    gpu = learner(tmp_path / 'cpu')
    gpu.load('last')
    assert all(p.is_cuda for p in gpu.model.parameters())
    assert same_weights(cpu_weights(gpu.model), cpu_weights(on_cpu.model))
    gpu.fit(n_steps=2)
    assert gpu.stop_reason == 'completed'
