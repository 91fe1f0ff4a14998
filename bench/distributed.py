"""Scaling on this machine: the digits MLP trained with a global batch of 64, by one process (with 2 torch
threads, then 1) and by two processes (`launch`, gloo, one thread each, 32 samples each per step).
Reports optimizer steps per second and samples per second (median of the rounds).

Run: python bench/distributed.py [--epochs 5] [--rounds 3]
"""
import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from trainer_nb.demo import digits_datasets, digits_model  # noqa: E402
from trainer_nb.distributed import DistributedTrainer, launch  # noqa: E402
from trainer_nb.learner import Learner  # noqa: E402


def run(bs, epochs, path, cbs=()):
    torch.manual_seed(0)
    train, valid = digits_datasets()
    learn = Learner(digits_model(), (DataLoader(train, batch_size=bs, shuffle=True), None), nn.functional.cross_entropy,
                    lr=1e-2, path=path, device='cpu', progress=False, default_cbs=False, cbs=list(cbs))
    t0 = time.perf_counter()
    learn.fit(epochs)
    return learn.step / (time.perf_counter() - t0), learn.fit_state.samples / (time.perf_counter() - t0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--epochs', type=int, default=5)
    parser.add_argument('--rounds', type=int, default=3)
    args = parser.parse_args()
    results = {'1 process, 2 threads': [], '1 process, 1 thread': [], '2 processes, 1 thread each': []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            torch.set_num_threads(2)
            results['1 process, 2 threads'].append(run(64, args.epochs, tmp))
            torch.set_num_threads(1)
            results['1 process, 1 thread'].append(run(64, args.epochs, tmp))
            torch.set_num_threads(2)  # launch gives process 0 its share: 1 thread
            results['2 processes, 1 thread each'].append(
                launch(lambda: run(32, args.epochs, tmp, [DistributedTrainer()]), 2))
    print(f"digits MLP, global batch 64, {args.epochs} epochs, median of {args.rounds} rounds, {torch.__version__}")
    print("| setup | steps/s | samples/s |")
    print("|---|---|---|")
    for name, runs in results.items():
        print(f"| {name} | {statistics.median(r[0] for r in runs):.0f} | {statistics.median(r[1] for r in runs):.0f} |")


if __name__ == '__main__': main()
