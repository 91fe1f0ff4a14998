"""The cost of seeding each sample's random draws in worker processes (`SeedSamples`, in the chapter `loader_workers`).

One epoch of a training loader with worker processes, prepared by the learner (each sample's draws seeded from its
index), against the same loader with the learner's order but without the seeding, interleaved, in one process.
Two datasets: a cheap one (a tensor made per sample: the seeding's cost shows whole) and one that does about
`--work-us` microseconds of work per sample (a small image's decoding and augmentation take 1-5 ms).

Run: python bench/worker_seeding.py [--rounds 5] [--workers 2] [--work-us 500]
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from trainer_nb.data import ResumableBatches, ResumableSampler, _rebuild, epoch_batches, prepare_loader  # noqa: E402
from trainer_nb.loader_workers import IgnoreStopSignals  # noqa: E402


class Samples(Dataset):
    "`n` samples of 8 numbers, each with a little noise, after `work_us` microseconds of busy work."
    def __init__(self, n: int, work_us: float): self.n, self.work_us = n, work_us
    def __len__(self): return self.n
    def __getitem__(self, i):
        end = time.perf_counter() + self.work_us * 1e-6
        while time.perf_counter() < end: pass
        return torch.full((8,), float(i)) + torch.rand(8)


def loaders(dataset, workers: int):
    base = DataLoader(dataset, batch_size=64, shuffle=True, num_workers=workers, persistent_workers=True)
    plain = _rebuild(base, batch_sampler=ResumableBatches(ResumableSampler(len(dataset)), 64),
                     worker_init_fn=IgnoreStopSignals())
    return plain, prepare_loader(base)


def epoch_time(dl, seed: int) -> float:
    t0 = time.perf_counter()
    for _ in epoch_batches(dl, 0, seed=seed): pass
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--rounds', type=int, default=5)
    ap.add_argument('--workers', type=int, default=2)
    ap.add_argument('--work-us', type=float, default=500.)
    args = ap.parse_args()
    print(f"torch {torch.__version__}, {args.workers} workers, batch 64, median of {args.rounds} epochs each")
    print("| dataset | samples | plain (us a sample) | seeded (us a sample) | ratio |")
    print("|---|---|---|---|---|")
    for name, n, work in (('cheap', 20000, 0.), (f'{args.work_us:.0f} us a sample', 4000, args.work_us)):
        plain, seeded = loaders(Samples(n, work), args.workers)
        epoch_time(plain, 0); epoch_time(seeded, 0)  # (workers started)
        times = {'plain': [], 'seeded': []}
        for r in range(args.rounds):
            for key, dl in (('plain', plain), ('seeded', seeded)): times[key].append(epoch_time(dl, r + 1))
        p, s = (statistics.median(times[k]) / n * 1e6 for k in ('plain', 'seeded'))
        print(f"| {name} | {n} | {p:.1f} | {s:.1f} | {s / p:.3f}x |")


if __name__ == '__main__':
    main()
