"""What each of some default callbacks adds to a default fit, by leaving it out: interleaved in one process.

The tiny MLP of `overhead.py` (2000 steps, 1 thread), each fit in a fresh run folder, against the hand-written
loop in the same round: the default learner, and the same without `Throughput`, without `RunRecord`, and without
both (`learn.remove_cb`). The fastest round of each says whether a callback costs something at every step; the
medians include what it costs once a fit.

    python bench/default_parts.py --rounds 11
"""
import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import overhead  # noqa: E402  (the same data, model and hand loop)
from trainer_nb.learner import Learner  # noqa: E402

VARIANTS = {'hand': None, 'default': (), 'without Throughput': ('throughput',),
            'without RunRecord': ('run_record',), 'without both': ('throughput', 'run_record')}


def fit(dl, out, steps, leave_out) -> float:
    "Seconds of a default fit of `steps` steps in the folder `out`, without the callbacks named in `leave_out`."
    learn = Learner(overhead.make_model(), dl, nn.functional.cross_entropy, lr=1e-3, path=out, device='cpu')
    for name in leave_out: learn.remove_cb(name)
    with open(Path(out) / 'stdout.txt', 'a') as f, contextlib.redirect_stdout(f):
        t = time.perf_counter()
        learn.fit(n_steps=steps)
        return time.perf_counter() - t


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--rounds', type=int, default=11)
    parser.add_argument('--steps', type=int, default=2000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dl = overhead.make_data()
    times = {name: [] for name in VARIANTS}
    for r in range(args.rounds):
        for name in (list(VARIANTS) if r % 2 == 0 else list(VARIANTS)[::-1]):
            with tempfile.TemporaryDirectory() as out:
                if VARIANTS[name] is None:
                    t = time.perf_counter()
                    overhead.hand(dl, args.steps, out)
                    times[name].append(time.perf_counter() - t)
                else: times[name].append(fit(dl, out, args.steps, VARIANTS[name]))
    print(f"torch {torch.__version__}, {args.steps} steps, {args.rounds} rounds, 1 thread")
    print("| variant | median ratio to hand | fastest round, us a step |\n|---|---|---|")
    for name, seconds in times.items():
        ratios = [t / h for t, h in zip(seconds, times['hand'])]
        print(f"| {name} | {statistics.median(ratios):.3f}x | {min(seconds) / args.steps * 1e6:.1f} |")


if __name__ == '__main__': main()
