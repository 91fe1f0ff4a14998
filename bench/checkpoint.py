"""The cost of a checkpoint for the digits model: `learn.save` (the whole state, atomic, fsync) against a bare
`torch.save` of the model and optimizer state to the same disk, and `learn.load`.

With `--no-fsync`, `learn.save` is also timed with `os.fsync` made a no-op (the file's and the folder's fsync),
interleaved with the normal one, to show what the durability costs.

With `--background`, a model of about `--params` parameters (default 100M: six bias-free 4096x4096 linears) with its
AdamW state: the time the loop waits for `learn.save('last')` (synchronous: the whole write) against
`learn.save('last', background=True)` (the copy to CPU memory only; the thread's write time is reported too),
alternating one of each per round.

Run: python bench/checkpoint.py [--repeats 30] [--no-fsync]
     python bench/checkpoint.py --background [--params 100e6] [--repeats 3]
"""
import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from trainer_nb.demo import digits_learner  # noqa: E402


def median_time(f, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter(); f(); times.append(time.perf_counter() - t0)
    return statistics.median(times)


def interleaved_fsync(save, repeats):
    "Median times of `save` with the real `os.fsync` and with a no-op, alternating one of each per round."
    real, synced, unsynced = os.fsync, [], []
    try:
        for _ in range(repeats):
            for times, fsync in ((synced, real), (unsynced, lambda fd: None)):
                os.fsync = fsync  # trainer_nb.checkpoint calls os.fsync: the file's, then the folder's
                t0 = time.perf_counter(); save(); times.append(time.perf_counter() - t0)
    finally:
        os.fsync = real
    return statistics.median(synced), statistics.median(unsynced)


def background_vs_sync(n_params: float, repeats: int):
    "Median seconds the loop waits: synchronous save, background save; and the background write's own time."
    from torch import nn
    from trainer_nb.checkpoint import wait_for_save
    from trainer_nb.learner import Learner
    width = 4096
    layers = max(1, round(n_params / width ** 2))
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(width, width, bias=False) for _ in range(layers)])
    x = torch.randn(8, width)
    data = torch.utils.data.TensorDataset(x, x)
    sync, wait, write = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        learn = Learner(model, torch.utils.data.DataLoader(data, batch_size=8), nn.functional.mse_loss, path=tmp,
                        device='cpu', progress=False, default_cbs=False)
        learn.fit(n_steps=1)  # AdamW's moments exist: 12 bytes per parameter in all
        for _ in range(repeats):
            t0 = time.perf_counter(); learn.save('last'); sync.append(time.perf_counter() - t0)
            t0 = time.perf_counter(); learn.save('last', background=True); wait.append(time.perf_counter() - t0)
            wait_for_save(learn)
            write.append(learn.storage.history('ckpt/write_s').latest())
        size = learn.checkpoint_path('last').stat().st_size
    return sum(p.numel() for p in model.parameters()), size, *(statistics.median(t) for t in (sync, wait, write))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--repeats', type=int, default=None, help='rounds (default: 30; 3 with --background)')
    parser.add_argument('--no-fsync', action='store_true', help="also time learn.save with os.fsync a no-op")
    parser.add_argument('--background', action='store_true', help="a ~100M-parameter model: background vs synchronous save")
    parser.add_argument('--params', type=float, default=100e6)
    args = parser.parse_args()
    if args.repeats is None: args.repeats = 3 if args.background else 30
    if args.background:
        n, size, sync, wait, write = background_vs_sync(args.params, args.repeats)
        print(f"{n / 1e6:.0f}M parameters + AdamW state, checkpoint {size / 2**20:.0f} MiB; median of {args.repeats}:")
        print(f"the loop waits {sync:.2f} s for a synchronous learn.save, {wait:.2f} s for a background one "
              f"(its write then takes {write:.2f} s in the thread): {sync / wait:.1f}x less waiting")
        return
    with tempfile.TemporaryDirectory() as tmp:
        learn = digits_learner(path=tmp, progress=False)
        learn.fit(2)  # optimizer state and a storage history exist
        bare = Path(tmp) / 'bare.pt'
        save = median_time(lambda: learn.save('last'), args.repeats)
        raw = median_time(lambda: torch.save({'model': learn.model.state_dict(), 'opt': learn.opt.state_dict()}, bare),
                          args.repeats)
        load = median_time(lambda: learn.load('last'), args.repeats)
        if args.no_fsync:
            with_sync, without = interleaved_fsync(lambda: learn.save('last'), args.repeats)
        size = learn.checkpoint_path('last').stat().st_size
        n_params = sum(p.numel() for p in learn.model.parameters())
    print(f"digits MLP: {n_params} parameters, checkpoint {size / 1024:.0f} KiB "
          f"(model, AdamW state, storage of {learn.step} steps, RNG states)")
    print(f"learn.save: {save * 1000:.2f} ms (median of {args.repeats}); bare torch.save of model+opt: "
          f"{raw * 1000:.2f} ms; ratio {save / raw:.1f}x")
    print(f"learn.load: {load * 1000:.2f} ms")
    if args.no_fsync:
        print(f"learn.save with fsync: {with_sync * 1000:.2f} ms; with os.fsync a no-op: {without * 1000:.2f} ms "
              f"(median of {args.repeats}, interleaved); the fsyncs cost {(with_sync - without) * 1000:.2f} ms "
              f"({with_sync / without:.1f}x)")


if __name__ == '__main__': main()
