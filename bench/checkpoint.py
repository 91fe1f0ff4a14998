"""The cost of a checkpoint for the digits model: `learn.save` (the whole state, atomic, fsync) against a bare
`torch.save` of the model and optimizer state to the same disk, and `learn.load`.

With `--no-fsync`, `learn.save` is also timed with `os.fsync` made a no-op (the file's and the folder's fsync),
interleaved with the normal one, to show what the durability costs.

Run: python bench/checkpoint.py [--repeats 30] [--no-fsync]
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--repeats', type=int, default=30)
    parser.add_argument('--no-fsync', action='store_true', help="also time learn.save with os.fsync a no-op")
    args = parser.parse_args()
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
