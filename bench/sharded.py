"""FSDP2 (`ShardedTrainer`) against DDP (`DistributedTrainer`) on the CPU with gloo, 2 processes started by `launch`:
the bytes of model state each process holds (parameters, gradients, AdamW moments: what sharding divides), the
seconds per step, and a sharded checkpoint's save (synchronous, and the wait of a background one) and load.

The model: `--layers` bias-free `--width` x `--width` linears with ReLUs between (default 8 x 1024: 8.4M parameters).

Run: python bench/sharded.py [--width 1024] [--layers 8] [--steps 10]
"""
import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from trainer_nb.checkpoint import wait_for_save  # noqa: E402
from trainer_nb.distributed import DistributedTrainer, launch  # noqa: E402
from trainer_nb.learner import Learner  # noqa: E402
from trainer_nb.sharded import ShardedTrainer  # noqa: E402


def local(t): return t.to_local() if hasattr(t, 'to_local') else t


def state_bytes(learn) -> int:
    "Bytes of parameters, gradients and optimizer state in this process (its shards, with FSDP2)."
    params = [local(p) for p in learn.raw_model.parameters()]
    n = sum(p.numel() * p.element_size() for p in params)
    n += sum(p.numel() * p.element_size() for p in params)  # (a gradient per parameter, during the step)
    for s in learn.opt.state.values():
        n += sum(local(v).numel() * local(v).element_size() for v in s.values() if isinstance(v, torch.Tensor))
    return n


def run(kind, width, layers, steps, folder):
    torch.manual_seed(0)
    model = nn.Sequential(*[m for _ in range(layers) for m in (nn.Linear(width, width, bias=False), nn.ReLU())])
    x = torch.randn(64 * steps, width)
    dl = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x), batch_size=32)
    cb = ShardedTrainer() if kind == 'fsdp' else DistributedTrainer()
    learn = Learner(model, dl, nn.functional.mse_loss, path=Path(folder) / kind, device='cpu', progress=False,
                    default_cbs=False, cbs=[cb])
    learn.fit(n_steps=1)  # (warm-up, and the optimizer state exists)
    t0 = time.perf_counter()
    learn.fit(n_steps=steps)
    out = {'step_s': (time.perf_counter() - t0) / steps, 'bytes': state_bytes(learn),
           'params': sum(p.numel() for p in learn.raw_model.parameters())}
    if kind == 'fsdp':
        sync, wait = [], []
        for _ in range(4):
            t0 = time.perf_counter(); learn.save('sync'); sync.append(time.perf_counter() - t0)
            t0 = time.perf_counter(); learn.save('bg', background=True); wait.append(time.perf_counter() - t0)
            wait_for_save(learn)
        t0 = time.perf_counter(); learn.load('sync'); out['load_s'] = time.perf_counter() - t0
        out['sync_s'], out['bg_wait_s'] = statistics.median(sync), statistics.median(wait[1:])
        out['bg_first_s'] = wait[0]  # (the first background save of a fit allocates its CPU copy: `cpu_stager`)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--width', type=int, default=1024)
    parser.add_argument('--layers', type=int, default=8)
    parser.add_argument('--steps', type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ddp = launch(run, 2, 'ddp', args.width, args.layers, args.steps, tmp)
        fsdp = launch(run, 2, 'fsdp', args.width, args.layers, args.steps, tmp)
    mib = 2 ** 20
    print(f"{fsdp['params'] / 1e6:.1f}M parameters, 2 processes (gloo, CPU), global batch 64:")
    print(f"model state per process (params + grads + AdamW): DDP {ddp['bytes'] / mib:.0f} MiB, "
          f"FSDP2 {fsdp['bytes'] / mib:.0f} MiB ({ddp['bytes'] / fsdp['bytes']:.2f}x less)")
    print(f"seconds per step: DDP {ddp['step_s']:.3f}, FSDP2 {fsdp['step_s']:.3f}")
    print(f"sharded checkpoint: save {fsdp['sync_s']:.3f} s; a background save waits {fsdp['bg_wait_s']:.3f} s "
          f"({fsdp['sync_s'] / fsdp['bg_wait_s']:.1f}x less; the fit's first one {fsdp['bg_first_s']:.3f} s); "
          f"load {fsdp['load_s']:.3f} s")


if __name__ == '__main__': main()
