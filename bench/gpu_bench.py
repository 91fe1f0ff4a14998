"""The GPU check of issue 33, in one process, one line per check.

1. The default Learner (its default callbacks, without the displays: progress=False) against a hand-written PyTorch
   loop doing the same training, interleaved (a few rounds, alternating which goes first; medians): ms a step and
   host syncs a step, for a tiny BERT on dict batches and a small convolutional net, in bf16 and fp16
   (`MixedPrecision(dtype)` with `opt_func=partial(torch.optim.AdamW, fused=True)`, against autocast, a GradScaler
   for fp16 and a fused AdamW by hand), eager and compiled (`Learner(..., compile=True)` against
   `torch.compile(model, dynamic=True)`, the learner's default). Steps are timed between two synchronisations,
   after warm-up steps, inside one fit (so the fit's start and end are not in them); host syncs are counted over the
   same steps with `torch.cuda.set_sync_debug_mode('warn')` (each sync is a warning), in a run of their own.
2. One line each: an out-of-memory stop and the memory it gives back, `MicroBatches('auto')` after a real OOM,
   `learn.to('cpu')` and back with an exact resume, the size of a LoRA checkpoint. These use the pieces of
   tests/test_cuda.py (which asserts the same things; here they are measured and printed).

Run: python bench/gpu_bench.py [--steps 30] [--warm 10] [--rounds 3] [--only bert|conv|features]
Without a CUDA device it prints "no CUDA device: nothing measured" and exits with 0.
"""
import argparse
import contextlib
import gc
import statistics
import sys
import tempfile
import time
import traceback
import warnings
from functools import partial
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / 'tests'))
MB = 2**20
PRECISIONS = {'bf16': torch.bfloat16, 'fp16': torch.float16}


def say(*args):
    print(*args, flush=True)


# ---- host syncs: each synchronizing CUDA call is a warning in 'warn' mode

class SyncCounter:
    "`with SyncCounter() as syncs:` counts the host syncs; `syncs.count()` says how many so far."
    def __enter__(self):
        self._catch = warnings.catch_warnings(record=True)
        self.seen = self._catch.__enter__()
        warnings.simplefilter('always')
        torch.cuda.set_sync_debug_mode('warn')
        return self

    def count(self) -> int: return sum('synchroniz' in str(w.message) for w in self.seen)

    def __exit__(self, *exc):
        torch.cuda.set_sync_debug_mode(0)
        self._catch.__exit__(*exc)


# ---- the two models and their data

def tiny_bert() -> nn.Module:
    from transformers import BertConfig, BertForSequenceClassification
    torch.manual_seed(0)
    return BertForSequenceClassification(BertConfig(vocab_size=32, hidden_size=64, num_hidden_layers=2,
                                                    num_attention_heads=2, intermediate_size=128,
                                                    max_position_embeddings=32, num_labels=2))


def bert_loader():
    from trainer_nb.testing import token_dls
    return token_dls(n_train=2048, n_valid=32, bs=32).train


def small_cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                         nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))


def cnn_loader():
    from torch.utils.data import DataLoader, TensorDataset
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(2048, 3, 32, 32, generator=g), torch.randint(0, 10, (2048,), generator=g))
    return DataLoader(data, batch_size=64, shuffle=True)


MODELS = {'bert': (tiny_bert, bert_loader, None),  # (the model computes its loss from the batch's labels)
          'conv': (small_cnn, cnn_loader, nn.functional.cross_entropy)}


# ---- the two ways to train: the Learner, and by hand. Each runs `n` steps, calling `mark(i)` after step i.

class LearnerRun:
    def __init__(self, name: str, dtype, compile: bool, path, device='cuda', **kwargs):  # (kwargs: the Learner's)
        from trainer_nb.callback.core import LambdaCallback
        from trainer_nb.callback.training import MixedPrecision
        from trainer_nb.data import DataLoaders
        from trainer_nb.learner import Learner
        make_model, make_loader, loss_func = MODELS[name]
        self.learn = Learner(make_model(), DataLoaders(make_loader()), loss_func, lr=1e-3, device=device,
                             opt_func=partial(torch.optim.AdamW, fused=True), cbs=[MixedPrecision(dtype)],
                             compile=compile, progress=False, path=path, **kwargs)
        self.mark = None
        self._cb = LambdaCallback(after_batch=lambda learn: self.mark(learn.fit_state.fit_steps)
                                  if learn.training and self.mark else None)

    def run(self, n: int, mark=None):
        self.mark = mark
        self.learn.fit(n_steps=n, cbs=[self._cb])


class HandRun:
    def __init__(self, name: str, dtype, compile: bool, path=None, device='cuda'):
        make_model, make_loader, loss_func = MODELS[name]
        self.device = torch.device(device)
        self.model = make_model().to(self.device)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3, fused=True)
        self.step_model = torch.compile(self.model, dynamic=True) if compile else self.model
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=dtype == torch.float16)
        self.dtype, self.loss_func, self.dl = dtype, loss_func, make_loader()
        self.batches = iter(())

    def _batch(self):
        try: return next(self.batches)
        except StopIteration:
            self.batches = iter(self.dl)
            return next(self.batches)

    def _loss(self, batch):
        if isinstance(batch, dict):
            return self.step_model(**{k: v.to(self.device, non_blocking=True) for k, v in batch.items()}).loss
        x, y = (t.to(self.device, non_blocking=True) for t in batch)
        return self.loss_func(self.step_model(x), y)

    def run(self, n: int, mark=None):
        self.model.train()
        for i in range(1, n + 1):
            with torch.autocast(self.device.type, dtype=self.dtype): loss = self._loss(self._batch())
            self.scaler.scale(loss).backward()
            self.scaler.step(self.opt)
            self.scaler.update()
            self.opt.zero_grad(set_to_none=True)
            if mark: mark(i)


def synchronize():
    "Wait for the GPU's queued work, if there is a GPU (the runners can train on the CPU, to try a script)."
    if torch.cuda.is_available(): torch.cuda.synchronize()


def timed_steps(runner, warm: int, steps: int) -> float:
    "ms a step over `steps` steps, after `warm` steps of the same run, between two synchronisations."
    times = {}
    def mark(i):
        if i in (warm, warm + steps):
            synchronize()
            times[i] = time.perf_counter()
    runner.run(warm + steps, mark)
    return (times[warm + steps] - times[warm]) * 1e3 / steps


def syncs_per_step(runner, warm: int, steps: int) -> float:
    "Host syncs a step over `steps` steps, after `warm` steps (counted in a run of their own)."
    counts = {}
    with SyncCounter() as syncs:
        def mark(i):
            if i in (warm, warm + steps): counts[i] = syncs.count()
        runner.run(warm + steps, mark)
    return (counts[warm + steps] - counts[warm]) / steps


def compare(name: str, precision: str, compile: bool, args):
    dtype = PRECISIONS[precision]
    with tempfile.TemporaryDirectory() as path:
        learner, hand = LearnerRun(name, dtype, compile, path), HandRun(name, dtype, compile)
        for runner in (learner, hand): runner.run(args.warm)  # (compilation, kernels, the allocator)
        ms = {'learner': [], 'hand': []}
        for r in range(args.rounds):  # interleaved, each first in turn
            order = [('learner', learner), ('hand', hand)][::1 if r % 2 == 0 else -1]
            for key, runner in order: ms[key].append(timed_steps(runner, args.warm, args.steps))
        syncs = {key: syncs_per_step(runner, args.warm, args.steps) for key, runner in (('learner', learner), ('hand', hand))}
    a, b = statistics.median(ms['learner']), statistics.median(ms['hand'])
    say(f"{name} {precision} {'compiled' if compile else 'eager'}: learner {a:.2f} ms/step ({a / b:.2f}x hand "
        f"{b:.2f}), syncs/step {syncs['learner']:.2f} (hand {syncs['hand']:.2f})")


# ---- the features of issue 33, one line each (the pieces of tests/test_cuda.py)

def freed():
    gc.collect()
    torch.cuda.empty_cache()


def check_oom(path):
    import test_cuda as t
    filler = t.Filler()
    learn = t.oom_learner(path)
    with contextlib.suppress(torch.OutOfMemoryError): learn.fit(1, cbs=[t.fill_at(filler, 3, t.LEAVE)])
    held = (torch.cuda.memory_allocated() - filler.nbytes - filler.before) / MB if filler.before is not None else float('nan')
    reason, step = learn.stop_reason, learn.step
    filler.release()
    learn.resume()
    say(f"OOM stop: stop_reason={reason!r} at step {step}; after the stop {held:+.1f} MB allocated against before its "
        f"batch (the model: {t.model_bytes(learn.model) / MB:.0f} MB); resume after freeing: {learn.stop_reason} "
        f"at step {learn.step}")


def check_micro_batches(path):
    import test_cuda as t
    from trainer_nb.all import MicroBatches
    filler, sizes = t.Filler(), []
    learn = t.oom_learner(path, cbs=[MicroBatches('auto')])
    learn.model.register_forward_pre_hook(lambda module, args: sizes.append(args[0].shape[0]))
    t0 = time.perf_counter()
    learn.fit(1, cbs=[t.fill_at(filler, 1, 192 * MB)])
    seconds = time.perf_counter() - t0
    filler.release()
    say(f"MicroBatches('auto'): {learn.stop_reason} at step {learn.step} in {seconds:.1f} s; batch of {t.BIG_BS} "
        f"split down to {min(sizes[1:], default=None)} after the OOM (forwards: {sizes[:12]}...)")


def check_round_trip(path):
    import test_cuda as t
    whole = t.learner(Path(path) / 'whole')
    whole.fit(2)
    reference = t.cpu_weights(whole.model)
    del whole
    freed()
    base = torch.cuda.memory_allocated()
    learn = t.learner(Path(path) / 'run', t.mlp(8192))  # (a bigger model: the memory is easier to see)
    learn.fit(2, cbs=[t.stop_at(5)])
    held = torch.cuda.memory_allocated() - base
    t0 = time.perf_counter()
    learn.to('cpu')
    out_s, left = time.perf_counter() - t0, torch.cuda.memory_allocated() - base
    t0 = time.perf_counter()
    learn.to('cuda')
    back_s = time.perf_counter() - t0
    exact = t.learner(Path(path) / 'run2')
    exact.fit(2, cbs=[t.stop_at(5)])
    exact.to('cpu')
    exact.to('cuda')
    exact.resume()
    say(f"to('cpu'): the learner held {held / MB:.1f} MB on the GPU, {left / MB:.2f} MB after ({out_s * 1e3:.0f} ms; "
        f"to('cuda') {back_s * 1e3:.0f} ms); to('cuda') + resume() exact against an uninterrupted fit: "
        f"{t.same_weights(t.cpu_weights(exact.model), reference)}")


def check_lora(path):
    import test_cuda as t
    lora = t.lora_learner(Path(path) / 'lora')
    lora.fit(n_steps=4)
    small = lora.save('last').stat().st_size
    full = t.lora_learner(Path(path) / 'full', full_checkpoints=True)
    full.fit(n_steps=4)
    big = full.save('last').stat().st_size
    fresh = t.lora_learner(Path(path) / 'lora')
    fresh.load('last')
    same = t.same_weights(t.cpu_weights(fresh.model), t.cpu_weights(lora.model))
    say(f"LoRA checkpoint: {small / MB:.2f} MB, {small / big:.1%} of the full one ({big / MB:.1f} MB); loaded on the "
        f"GPU with the same weights: {same}")


FEATURES = {'OOM stop': check_oom, "MicroBatches('auto')": check_micro_batches, "to('cpu') round trip": check_round_trip,
            'LoRA checkpoint': check_lora}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--steps', type=int, default=30, help='steps timed (and counted) a run')
    parser.add_argument('--warm', type=int, default=10, help='steps before them in each run')
    parser.add_argument('--rounds', type=int, default=3, help='timed runs of each, interleaved')
    parser.add_argument('--only', choices=['bert', 'conv', 'features'], default=None)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        say("no CUDA device: nothing measured")
        return 0
    say(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name()}; {args.steps} steps "
        f"timed after {args.warm}, median of {args.rounds} interleaved rounds")
    results = []
    def attempt(label: str, check, *check_args):
        "Run one check; a failure is one line (and its traceback), and the next check runs."
        try: check(*check_args)
        except KeyboardInterrupt: raise
        except BaseException as e:  # (pytest.importorskip's Skipped is no Exception)
            skipped = type(e).__name__ == 'Skipped'
            say(f"{label}: {'skipped' if skipped else 'FAILED'} {type(e).__name__}: {e}")
            if not skipped:
                results.append(label)
                traceback.print_exc()
        freed()
    # eager first, then the features, then compiled (the slowest, compilation): a timeout cuts the least useful
    for name in ('bert', 'conv'):
        if args.only in (None, name):
            for precision in PRECISIONS: attempt(f"{name} {precision} eager", compare, name, precision, False, args)
    if args.only in (None, 'features'):
        for label, check in FEATURES.items():
            with tempfile.TemporaryDirectory() as path: attempt(label, check, path)
    for name in ('bert', 'conv'):
        if args.only in (None, name):
            for precision in PRECISIONS: attempt(f"{name} {precision} compiled", compare, name, precision, True, args)
    failures = len(results)
    say(f"{failures} check(s) failed" if failures else "all checks ran")
    return 1 if failures else 0


if __name__ == '__main__': sys.exit(main())
