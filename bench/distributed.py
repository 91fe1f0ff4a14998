"""Scaling on this machine: the digits MLP trained with a global batch of 64, by one process (with 2 torch
threads, then 1) and by two processes (`launch`, gloo, one thread each, 32 samples each per step).
Reports optimizer steps per second and samples per second (median of the rounds), and the per-step time of two
processes against one (the ratio). Then what a notebook pays: the time `launch` takes for one call (start, the
call, the end), against `distribute`'s start and a call on its live workers (`learn.validate()`, `learn.fit(1)`).

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
from trainer_nb.distributed import DistributedTrainer, distribute, launch  # noqa: E402
from trainer_nb.learner import Learner  # noqa: E402


def run(bs, epochs, path, cbs=()):
    torch.manual_seed(0)
    train, valid = digits_datasets()
    learn = Learner(digits_model(), (DataLoader(train, batch_size=bs, shuffle=True), None), nn.functional.cross_entropy,
                    lr=1e-2, path=path, device='cpu', progress=False, default_cbs=False, cbs=list(cbs))
    t0 = time.perf_counter()
    learn.fit(epochs)
    return learn.step / (time.perf_counter() - t0), learn.fit_state.samples / (time.perf_counter() - t0)


def make_learner(bs=32):
    torch.manual_seed(0)
    train, valid = digits_datasets()
    return Learner(digits_model(), (DataLoader(train, batch_size=bs, shuffle=True), DataLoader(valid, batch_size=100)),
                   nn.functional.cross_entropy, lr=1e-2, path=tempfile.mkdtemp(), device='cpu', progress=False)


def validate_once():
    learn = make_learner()
    learn.add_cb(DistributedTrainer())
    return learn.validate()


def notebook_costs(rounds):
    "Seconds: a `launch` of one validation; `distribute`'s start; a validation and a 1-epoch fit on its live workers."
    costs = {'launch(validate), start to end': [], 'distribute(make_learner, 2): start': [],
             'learn.validate() on live workers': [], 'learn.fit(1) on live workers': []}
    for _ in range(rounds):
        t = time.perf_counter(); launch(validate_once, 2); costs['launch(validate), start to end'].append(time.perf_counter() - t)
        t = time.perf_counter(); learn = distribute(make_learner, 2)
        costs['distribute(make_learner, 2): start'].append(time.perf_counter() - t)
        t = time.perf_counter(); learn.validate(); costs['learn.validate() on live workers'].append(time.perf_counter() - t)
        t = time.perf_counter(); learn.fit(1); costs['learn.fit(1) on live workers'].append(time.perf_counter() - t)
        learn.close()
    return costs


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
    step = {name: 1e3 / statistics.median(r[0] for r in runs) for name, runs in results.items()}
    print(f"\nper-step time, 2 processes / 1 process (2 threads): {step['2 processes, 1 thread each']:.2f} ms / "
          f"{step['1 process, 2 threads']:.2f} ms = {step['2 processes, 1 thread each'] / step['1 process, 2 threads']:.2f}x")
    torch.set_num_threads(2)
    costs = notebook_costs(args.rounds)
    print("\n| from a notebook (2 processes) | seconds |")
    print("|---|---|")
    for name, values in costs.items(): print(f"| {name} | {statistics.median(values):.3f} |")


if __name__ == '__main__': main()
